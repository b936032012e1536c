//! Checks `network-config` before it is written into a seed.
//!
//! cloud-init reads NoCloud's `network-config` as YAML (`util.load_yaml`)
//! and accepts either the config itself (`version: 2`, `ethernets: ...`) or
//! the same under a `network:` key. Version 2 is Netplan's format, passed
//! through to Netplan on Ubuntu and rendered by cloud-init elsewhere;
//! version 1 is cloud-init's older format; `config: disabled` turns network
//! configuration by cloud-init off. Anything else makes cloud-init ignore
//! the file and fall back to DHCP on the first interface, which is a
//! surprise better caught in the plan.
//!
//! Only the shape is checked (one YAML mapping with a known `version`); the
//! keys inside belong to Netplan and cloud-init. Errors never quote the text.

use std::ops::Range;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use crate::user_data::{MISPLACED_TAB, UNSAFE_TAG, misplaced_tab, reject_unsafe_tag};

/// Which network-config format the text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkConfigKind {
    /// `version: 1`.
    Version1,
    /// `version: 2` (Netplan).
    Version2,
    /// `config: disabled`: cloud-init leaves networking alone.
    Disabled,
}

/// Why cloud-init would not use the network-config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkConfigError {
    /// The YAML does not parse.
    #[error("network_config is not valid YAML at line {line}, column {column}: {reason}")]
    Yaml {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser found wrong, without the text.
        reason: String,
    },
    /// Not exactly one YAML document that is a mapping.
    #[error("network_config must be one YAML mapping (version: 2 and its sections)")]
    NotAMapping,
    /// No `version`, or one cloud-init does not know.
    #[error(
        "network_config needs `version: 2` (Netplan format) or `version: 1` at the top or under \
         `network:`"
    )]
    UnknownVersion,
}

/// Checks `text` as cloud-init's NoCloud datasource would read it.
pub fn validate(text: &str) -> Result<NetworkConfigKind, NetworkConfigError> {
    let root = top_two_levels(text)?;
    // cloud-init unwraps a top-level `network:` mapping first.
    let config = match root.iter().find(|(key, _)| key == "network") {
        Some((_, Value::Mapping(inner))) => inner.as_slice(),
        _ => &root,
    };
    let scalar = |name: &str| {
        config.iter().find_map(|(key, value)| match value {
            Value::Scalar(text) if key == name => Some(text.as_str()),
            _ => None,
        })
    };
    match (scalar("version"), scalar("config")) {
        (_, Some("disabled")) => Ok(NetworkConfigKind::Disabled),
        (Some("1"), _) => Ok(NetworkConfigKind::Version1),
        (Some("2"), _) => Ok(NetworkConfigKind::Version2),
        _ => Err(NetworkConfigError::UnknownVersion),
    }
}

/// A value in the top two levels of the document.
#[derive(Debug)]
enum Value {
    Scalar(String),
    /// Scalar-keyed entries of a second-level mapping (their values only as
    /// far as they are scalars).
    Mapping(Vec<(String, Value)>),
    Other,
}

/// Parses one YAML document that must be a mapping, keeping its scalar keys,
/// their scalar values and one level of nested mappings.
fn top_two_levels(text: &str) -> Result<Vec<(String, Value)>, NetworkConfigError> {
    let mut walk = Walk::default();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| NetworkConfigError::Yaml {
            line: e.marker().line(),
            column: e.marker().col() + 1,
            reason: match e.info() {
                info if info.starts_with("unexpected character") => {
                    "unexpected character".to_owned()
                }
                info => info.to_owned(),
            },
        })?;
        reject_unsafe_tag(&event, &span).map_err(|(line, column)| NetworkConfigError::Yaml {
            line,
            column,
            reason: UNSAFE_TAG.to_owned(),
        })?;
        walk.step(event, &span)?;
    }
    // cloud-init reads this file with PyYAML too, which is strict about tabs.
    if let Some((line, column)) = misplaced_tab(text, &walk.tab_friendly) {
        return Err(NetworkConfigError::Yaml {
            line,
            column,
            reason: MISPLACED_TAB.to_owned(),
        });
    }
    walk.root.ok_or(NetworkConfigError::NotAMapping)
}

/// An open collection: its entries so far, a pending key, and whether it is a
/// mapping (sequences are only walked through).
struct Open {
    is_mapping: bool,
    entries: Vec<(String, Value)>,
    key: Option<String>,
    expecting_key: bool,
}

/// The walk over the parser's events: the open collections, the root mapping
/// once it closed, and where the quoted scalars are (tabs are fine in them).
#[derive(Default)]
struct Walk {
    stack: Vec<Open>,
    root: Option<Vec<(String, Value)>>,
    documents: usize,
    tab_friendly: Vec<Range<usize>>,
}

impl Walk {
    /// Takes one event; a second document, or a root that is not a mapping,
    /// is an error.
    fn step(&mut self, event: Event<'_>, span: &Span) -> Result<(), NetworkConfigError> {
        match event {
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(NetworkConfigError::NotAMapping);
                }
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                self.stack.push(Open {
                    is_mapping: matches!(event, Event::MappingStart(..)),
                    entries: Vec::new(),
                    key: None,
                    expecting_key: true,
                });
            }
            Event::MappingEnd | Event::SequenceEnd => self.close()?,
            Event::Scalar(text, style, ..) => {
                if style != ScalarStyle::Plain {
                    self.tab_friendly.push(span.start.index()..span.end.index());
                }
                if self.stack.is_empty() {
                    return Err(NetworkConfigError::NotAMapping);
                }
                let text = text.into_owned();
                self.put(Value::Scalar(text.clone()), Some(text));
            }
            Event::Alias(_) => {
                if self.stack.is_empty() {
                    return Err(NetworkConfigError::NotAMapping);
                }
                self.put(Value::Other, None);
            }
            _ => {}
        }
        Ok(())
    }

    /// Ends the collection on top of the stack: the root, or a value of its
    /// parent.
    fn close(&mut self) -> Result<(), NetworkConfigError> {
        let done = self.stack.pop().expect("the parser balances collections");
        if self.stack.is_empty() {
            if !done.is_mapping {
                return Err(NetworkConfigError::NotAMapping);
            }
            self.root = Some(done.entries);
        } else {
            // Keep nested mappings only directly under the root.
            let value = if done.is_mapping && self.stack.len() == 1 {
                Value::Mapping(done.entries)
            } else {
                Value::Other
            };
            self.put(value, None);
        }
        Ok(())
    }

    /// Records a finished value into the collection on top of the stack.
    fn put(&mut self, value: Value, scalar_text: Option<String>) {
        let Some(top) = self.stack.last_mut() else {
            return;
        };
        if !top.is_mapping {
            return;
        }
        if top.expecting_key {
            top.key = scalar_text;
            top.expecting_key = false;
        } else {
            if let Some(key) = top.key.take() {
                top.entries.push((key, value));
            }
            top.expecting_key = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_formats_cloud_init_reads() {
        assert_eq!(
            validate("version: 2\nethernets:\n  eth0:\n    dhcp4: true\n"),
            Ok(NetworkConfigKind::Version2)
        );
        assert_eq!(
            validate("network:\n  version: 2\n  ethernets: {}\n"),
            Ok(NetworkConfigKind::Version2)
        );
        assert_eq!(
            validate("version: 1\nconfig:\n  - type: physical\n    name: eth0\n"),
            Ok(NetworkConfigKind::Version1)
        );
        assert_eq!(
            validate("network: {config: disabled}\n"),
            Ok(NetworkConfigKind::Disabled)
        );
        assert_eq!(
            validate("{\"version\": 2, \"ethernets\": {}}"),
            Ok(NetworkConfigKind::Version2)
        );
    }

    #[test]
    fn rejects_what_cloud_init_would_ignore() {
        assert_eq!(
            validate("ethernets:\n  eth0: {dhcp4: true}\n"),
            Err(NetworkConfigError::UnknownVersion)
        );
        assert_eq!(
            validate("version: 3\n"),
            Err(NetworkConfigError::UnknownVersion)
        );
        // `version` nested deeper than `network:` does not count.
        assert_eq!(
            validate("ethernets:\n  version: 2\n"),
            Err(NetworkConfigError::UnknownVersion)
        );
        assert_eq!(validate(""), Err(NetworkConfigError::NotAMapping));
        assert_eq!(
            validate("- version: 2\n"),
            Err(NetworkConfigError::NotAMapping)
        );
        assert_eq!(
            validate("version 2\n"),
            Err(NetworkConfigError::NotAMapping)
        );
        assert_eq!(
            validate("version: 2\n---\nversion: 2\n"),
            Err(NetworkConfigError::NotAMapping)
        );
        assert!(matches!(
            validate("version: 2\nethernets:\n  eth0:\n   \tdhcp4: true\n"),
            Err(NetworkConfigError::Yaml { line: 4, .. })
        ));
        assert!(matches!(
            validate("version: 2\nethernets: !custom {}\n"),
            Err(NetworkConfigError::Yaml { line: 2, .. })
        ));
        let err = validate("version: 2\nethernets: {eth0: [secret\n").unwrap_err();
        assert!(matches!(err, NetworkConfigError::Yaml { .. }), "{err:?}");
        assert!(!err.to_string().contains("secret"));
    }
}
