//! Checks user-data the way cloud-init will read it, before anything is
//! written to the API, so a typo fails the plan instead of a first boot.
//!
//! cloud-init decides what user-data is like this (`user_data.py`,
//! `handlers/__init__.py`): if `MIME-Version:` appears (any case) in the first
//! 4096 bytes, it is a MIME multipart message; otherwise the text, lowercased
//! and with leading whitespace removed, is matched against known first-line
//! markers, longest first. Text matching none of them is ignored with a
//! warning in the guest's log, which is never what a user meant, so
//! [`validate`] rejects it.
//!
//! Cloud-config text (`#cloud-config`) must also be YAML whose document is a
//! mapping (or empty): cloud-init silently drops any other document. The
//! YAML check uses a YAML 1.2 parser, while cloud-init uses PyYAML (YAML
//! 1.1); the two agree on structure (a test compares them on a corpus) and
//! differ on scalar types (`yes`, octal numbers) that a syntax check does not
//! look at. PyYAML is stricter about tabs than YAML 1.2: it allows them only
//! inside quoted scalars, block scalars (`|`, `>`) and comments, so
//! [`validate`] rejects a tab anywhere else too; and cloud-init loads with
//! `yaml.safe_load`, which fails on any tag but the standard `!!` ones, so
//! those are rejected as well. Whether keys match
//! cloud-init's schema is left to `cloud-init schema` and the guest: the
//! schema changes with each cloud-init release.
//!
//! Error messages give a line and column, never the text itself: user-data
//! may hold secrets.

use std::fmt;

use std::ops::Range;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span, Tag};

/// What kind of user-data cloud-init will see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserDataKind {
    /// `#cloud-config`: YAML configuration, merged with vendor-data.
    CloudConfig,
    /// `#cloud-config-archive`: a YAML list of parts.
    CloudConfigArchive,
    /// `#cloud-config-jsonp`: a JSON patch over the cloud-config so far.
    CloudConfigJsonPatch,
    /// `#!`: a script, run once per instance late in boot.
    Script,
    /// `#include`: URLs to fetch user-data from, one per line.
    Include,
    /// `#include-once`: like `#include`, fetched once.
    IncludeOnce,
    /// `#cloud-boothook`: a script run early on every boot.
    BootHook,
    /// `#part-handler`: Python code that handles other parts.
    PartHandler,
    /// `## template: jinja`: a template rendered into one of the others.
    JinjaTemplate,
    /// A MIME multipart message (as `cloud-init devel make-mime` writes).
    MimeMultipart,
}

/// The result of a successful check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserDataCheck {
    /// How cloud-init will treat the text.
    pub kind: UserDataKind,
    /// The cloud-config sets `vendor_data` so that cloud-init will skip our
    /// vendor-data, and with it the guest agent install: worth a warning.
    pub disables_vendor_data: bool,
}

impl UserDataCheck {
    /// A warning for the user, if the user-data is valid but will stop the
    /// guest agent from being installed.
    pub fn warning(&self) -> Option<&'static str> {
        self.disables_vendor_data.then_some(
            "user_data turns vendor_data off, so the provider's vendor-data will not install \
             qemu-guest-agent; install and start it from user_data or in the template, or the \
             VM's address cannot be read",
        )
    }
}

/// Why user-data would not work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    /// Nothing but whitespace.
    #[error("user_data is empty; leave it unset instead, or start it with #cloud-config or #!")]
    Empty,
    /// No marker cloud-init recognises.
    #[error(
        "user_data must start with a line cloud-init recognises: #cloud-config (YAML), \
         #! (a script), #include, #cloud-boothook, or be a MIME multipart message; \
         cloud-init would ignore this text"
    )]
    UnknownFormat,
    /// Cloud-config whose YAML does not parse.
    #[error("user_data is not valid YAML at line {line}, column {column}: {reason}")]
    Yaml {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser found wrong (its own words, without the text).
        reason: String,
    },
    /// Cloud-config with more than one YAML document (`---` twice).
    #[error("user_data holds more than one YAML document; cloud-init reads exactly one")]
    MultipleDocuments,
    /// A document of the wrong shape for its kind.
    #[error("user_data {kind} must be a YAML {expected}, but its document is a {found}")]
    WrongShape {
        /// `#cloud-config` or `#cloud-config-archive`.
        kind: &'static str,
        /// What cloud-init needs.
        expected: &'static str,
        /// What the document is.
        found: &'static str,
    },
}

/// Checks `text` as cloud-init would read it as user-data.
pub fn validate(text: &str) -> Result<UserDataCheck, UserDataError> {
    let kind = classify(text)?;
    let mut check = UserDataCheck {
        kind,
        disables_vendor_data: false,
    };
    match kind {
        UserDataKind::CloudConfig => {
            let root = parse_single_document(text)?;
            match root {
                Root::Empty | Root::Mapping(_) => {}
                other => {
                    return Err(UserDataError::WrongShape {
                        kind: "#cloud-config",
                        expected: "mapping (key: value lines)",
                        found: other.describe(),
                    });
                }
            }
            if let Root::Mapping(summary) = root {
                check.disables_vendor_data = summary.disables_vendor_data;
            }
        }
        UserDataKind::CloudConfigArchive => match parse_single_document(text)? {
            Root::Sequence => {}
            other => {
                return Err(UserDataError::WrongShape {
                    kind: "#cloud-config-archive",
                    expected: "list of parts",
                    found: other.describe(),
                });
            }
        },
        UserDataKind::CloudConfigJsonPatch => {
            // JSON is YAML, so a syntax error shows up here too.
            parse_single_document(text)?;
        }
        _ => {}
    }
    Ok(check)
}

/// cloud-init's own markers, longest first so `#cloud-config-archive` is not
/// taken for `#cloud-config`.
const MARKERS: &[(&str, UserDataKind)] = &[
    ("#cloud-config-archive", UserDataKind::CloudConfigArchive),
    ("#cloud-config-jsonp", UserDataKind::CloudConfigJsonPatch),
    ("## template: jinja", UserDataKind::JinjaTemplate),
    ("#cloud-boothook", UserDataKind::BootHook),
    ("#include-once", UserDataKind::IncludeOnce),
    ("#cloud-config", UserDataKind::CloudConfig),
    ("#part-handler", UserDataKind::PartHandler),
    ("#include", UserDataKind::Include),
    ("#!", UserDataKind::Script),
];

/// How cloud-init classifies user-data (see the module docs).
pub fn classify(text: &str) -> Result<UserDataKind, UserDataError> {
    if text.trim().is_empty() {
        return Err(UserDataError::Empty);
    }
    let head = &text.as_bytes()[..text.len().min(4096)];
    if head
        .to_ascii_lowercase()
        .windows(13)
        .any(|w| w == b"mime-version:")
    {
        return Ok(UserDataKind::MimeMultipart);
    }
    let start = text.trim_start().as_bytes();
    MARKERS
        .iter()
        .find(|(marker, _)| {
            start.len() >= marker.len()
                && start[..marker.len()].eq_ignore_ascii_case(marker.as_bytes())
        })
        .map(|(_, kind)| *kind)
        .ok_or(UserDataError::UnknownFormat)
}

/// What the top-level cloud-config mapping says about vendor-data.
#[derive(Debug, Default)]
struct MappingSummary {
    disables_vendor_data: bool,
}

#[derive(Debug)]
enum Root {
    Empty,
    Mapping(MappingSummary),
    Sequence,
    Scalar,
    Alias,
}

impl Root {
    fn describe(&self) -> &'static str {
        match self {
            Root::Empty => "empty document",
            Root::Mapping(_) => "mapping",
            Root::Sequence => "list",
            Root::Scalar => "single value",
            Root::Alias => "alias",
        }
    }
}

fn yaml_error(error: &ScanError) -> UserDataError {
    let marker = error.marker();
    // The one parser message that quotes the input names a single character;
    // drop it anyway so no byte of user-data reaches an error.
    let reason = match error.info() {
        info if info.starts_with("unexpected character") => "unexpected character".to_owned(),
        info => info.to_owned(),
    };
    UserDataError::Yaml {
        line: marker.line(),
        column: marker.col() + 1,
        reason,
    }
}

/// Parses `text` as a YAML stream of at most one document and describes its
/// root node; for a mapping, also what it says about `vendor_data`.
fn parse_single_document(text: &str) -> Result<Root, UserDataError> {
    let mut root = Root::Empty;
    let mut documents = 0usize;
    // Depth of nested collections; 1 = inside the root collection.
    let mut depth = 0usize;
    // Inside the root mapping, keys and values alternate.
    let mut expecting_key = true;
    let mut vendor_data = VendorDataWatch::Idle;
    let mut tab_friendly = Vec::new();

    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| yaml_error(&e))?;
        reject_unsafe_tag(&event, &span).map_err(|(line, column)| UserDataError::Yaml {
            line,
            column,
            reason: UNSAFE_TAG.to_owned(),
        })?;
        if let Event::Scalar(_, style, ..) = &event
            && *style != ScalarStyle::Plain
        {
            tab_friendly.push(span.start.index()..span.end.index());
        }
        match event {
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(UserDataError::MultipleDocuments);
                }
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let is_mapping = matches!(event, Event::MappingStart(..));
                if depth == 0 {
                    root = if is_mapping {
                        Root::Mapping(MappingSummary::default())
                    } else {
                        Root::Sequence
                    };
                } else if depth == 1 && matches!(root, Root::Mapping(_)) {
                    vendor_data.on_root_value(RootValue::Collection { is_mapping });
                    expecting_key = true;
                } else if depth == 2 {
                    vendor_data.on_inner_value(InnerValue::Collection);
                }
                depth += 1;
            }
            Event::MappingEnd | Event::SequenceEnd => {
                depth = depth.saturating_sub(1);
                if depth == 1 {
                    vendor_data.on_leave_value();
                }
            }
            Event::Scalar(value, style, ..) => match (depth, &root) {
                (0, _) => {
                    let is_null = style == ScalarStyle::Plain && is_plain_null(&value);
                    root = if is_null { Root::Empty } else { Root::Scalar };
                }
                (1, Root::Mapping(_)) => {
                    if expecting_key {
                        vendor_data.on_root_key(&value);
                    } else {
                        vendor_data.on_root_value(RootValue::Scalar);
                    }
                    expecting_key = !expecting_key;
                }
                (2, _) => vendor_data.on_inner_value(InnerValue::Scalar(&value)),
                _ => {}
            },
            Event::Alias(_) => match (depth, &root) {
                (0, _) => root = Root::Alias,
                (1, Root::Mapping(_)) => {
                    if !expecting_key {
                        // Where the alias points is not tracked: assume it
                        // does not turn vendor-data off.
                        vendor_data.on_root_value(RootValue::Unknown);
                    }
                    expecting_key = !expecting_key;
                }
                (2, _) => vendor_data.on_inner_value(InnerValue::Unknown),
                _ => {}
            },
            _ => {}
        }
    }
    if let Some((line, column)) = misplaced_tab(text, &tab_friendly) {
        return Err(UserDataError::Yaml {
            line,
            column,
            reason: MISPLACED_TAB.to_owned(),
        });
    }
    if let Root::Mapping(summary) = &mut root {
        summary.disables_vendor_data = vendor_data.disables();
    }
    Ok(root)
}

pub(crate) const UNSAFE_TAG: &str = "a YAML tag that cloud-init's YAML loader \
    (yaml.safe_load) cannot construct; only the standard !! tags are allowed";

/// The tags `yaml.safe_load` constructs (PyYAML's SafeConstructor).
const SAFE_TAGS: &[&str] = &[
    "null",
    "bool",
    "int",
    "float",
    "binary",
    "timestamp",
    "omap",
    "pairs",
    "set",
    "str",
    "seq",
    "map",
];

/// PyYAML's `safe_load` fails on any tag outside [`SAFE_TAGS`]; returns the
/// 1-based position of such a tag's node.
pub(crate) fn reject_unsafe_tag(event: &Event<'_>, span: &Span) -> Result<(), (usize, usize)> {
    let tag = match event {
        Event::Scalar(_, _, _, tag)
        | Event::SequenceStart(_, tag)
        | Event::MappingStart(_, tag) => tag.as_deref(),
        _ => None,
    };
    match tag {
        Some(tag) if !is_safe_tag(tag) => Err((span.start.line(), span.start.col() + 1)),
        _ => Ok(()),
    }
}

fn is_safe_tag(tag: &Tag) -> bool {
    const CORE: &str = "tag:yaml.org,2002:";
    let safe = |name: &str| SAFE_TAGS.contains(&name);
    if tag.is_yaml_core_schema() {
        // `!!str`
        safe(&tag.suffix)
    } else if tag.handle.is_empty() {
        // `!` alone (non-specific: PyYAML resolves it as usual), or the
        // verbatim `!<tag:yaml.org,2002:str>`.
        tag.suffix == "!" || tag.suffix.strip_prefix(CORE).is_some_and(safe)
    } else {
        false
    }
}

pub(crate) const MISPLACED_TAB: &str = "a tab outside quotes, block scalars and comments, \
    which cloud-init's YAML parser rejects; use spaces";

/// Where PyYAML would stop at a tab: the first tab that is not inside one of
/// `tab_friendly` (character ranges of quoted and block scalars) nor in a
/// comment. Returns a 1-based line and column.
pub(crate) fn misplaced_tab(text: &str, tab_friendly: &[Range<usize>]) -> Option<(usize, usize)> {
    let mut line = 1;
    let mut column = 0;
    let mut in_comment = false;
    let mut previous = '\n';
    for (index, c) in text.chars().enumerate() {
        column += 1;
        let protected = || tab_friendly.iter().any(|range| range.contains(&index));
        match c {
            '\n' => {
                line += 1;
                column = 0;
                in_comment = false;
            }
            '#' if !in_comment && previous.is_whitespace() && !protected() => in_comment = true,
            '\t' if !in_comment && !protected() => return Some((line, column)),
            _ => {}
        }
        previous = c;
    }
    None
}

fn is_plain_null(value: &str) -> bool {
    matches!(value, "" | "~" | "null" | "Null" | "NULL")
}

enum InnerValue<'a> {
    Scalar(&'a str),
    Collection,
    Unknown,
}

enum RootValue {
    Scalar,
    Collection { is_mapping: bool },
    Unknown,
}

/// Follows the root mapping for `vendor_data`, which cloud-init reads like
/// this (`stages.py`, `_consume_vendordata`): not a mapping turns vendor-data
/// off; a mapping's `enabled` turns it off unless it reads as true to
/// `util.is_true` (`true`, `yes`, `on` or `1`, any case); a mapping without
/// `enabled` keeps cloud-init's built-in `enabled: true`.
#[derive(Debug)]
enum VendorDataWatch {
    /// Not inside the `vendor_data` value.
    Idle,
    /// The last root key was `vendor_data`; its value comes next.
    SawKey,
    /// Inside the `vendor_data` mapping; `expecting_key` alternates.
    InMapping {
        expecting_key: bool,
        next_is_enabled: bool,
    },
    /// Inside some other collection at depth 2.
    Skipping,
    /// Decided: vendor-data is off.
    Disabled,
}

impl VendorDataWatch {
    fn on_root_key(&mut self, key: &str) {
        if !matches!(self, VendorDataWatch::Disabled) {
            *self = if key == "vendor_data" {
                VendorDataWatch::SawKey
            } else {
                VendorDataWatch::Idle
            };
        }
    }

    fn on_root_value(&mut self, value: RootValue) {
        if !matches!(self, VendorDataWatch::SawKey) {
            if !matches!(self, VendorDataWatch::Disabled) {
                *self = match value {
                    RootValue::Collection { .. } => VendorDataWatch::Skipping,
                    _ => VendorDataWatch::Idle,
                };
            }
            return;
        }
        *self = match value {
            RootValue::Collection { is_mapping: true } => VendorDataWatch::InMapping {
                expecting_key: true,
                next_is_enabled: false,
            },
            RootValue::Unknown => VendorDataWatch::Idle,
            // cloud-init replaces a non-mapping with `{"enabled": False}`.
            RootValue::Scalar | RootValue::Collection { is_mapping: false } => {
                VendorDataWatch::Disabled
            }
        };
    }

    fn on_inner_value(&mut self, value: InnerValue<'_>) {
        if let VendorDataWatch::InMapping {
            expecting_key,
            next_is_enabled,
        } = self
        {
            if *expecting_key {
                *next_is_enabled = matches!(value, InnerValue::Scalar("enabled"));
                *expecting_key = false;
            } else {
                let reads_true = match value {
                    InnerValue::Scalar(text) => reads_as_true(text),
                    // `str()` of a list or dict is never a true string.
                    InnerValue::Collection => false,
                    InnerValue::Unknown => true,
                };
                let disabled = *next_is_enabled && !reads_true;
                *expecting_key = true;
                *next_is_enabled = false;
                if disabled {
                    *self = VendorDataWatch::Disabled;
                }
            }
        }
    }

    fn on_leave_value(&mut self) {
        if !matches!(self, VendorDataWatch::Disabled) {
            *self = VendorDataWatch::Idle;
        }
    }

    fn disables(&self) -> bool {
        matches!(self, VendorDataWatch::Disabled)
    }
}

/// cloud-init's `util.is_true` on what PyYAML makes of a scalar: booleans and
/// the strings `true`, `1`, `on`, `yes` in any case. (Integers written as
/// `0x1` or `01` also count there; they are rare enough to ignore.)
fn reads_as_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "true" | "1" | "on" | "yes"
    )
}

impl fmt::Display for UserDataKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UserDataKind::CloudConfig => "cloud-config",
            UserDataKind::CloudConfigArchive => "cloud-config archive",
            UserDataKind::CloudConfigJsonPatch => "cloud-config JSON patch",
            UserDataKind::Script => "script",
            UserDataKind::Include => "include list",
            UserDataKind::IncludeOnce => "include-once list",
            UserDataKind::BootHook => "boothook",
            UserDataKind::PartHandler => "part handler",
            UserDataKind::JinjaTemplate => "jinja template",
            UserDataKind::MimeMultipart => "MIME multipart message",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(text: &str) -> UserDataKind {
        validate(text).unwrap().kind
    }

    #[test]
    fn accepts_what_cloud_init_accepts() {
        assert_eq!(
            kind("#cloud-config\npackages: [nginx]\n"),
            UserDataKind::CloudConfig
        );
        assert_eq!(kind("#cloud-config\n"), UserDataKind::CloudConfig);
        assert_eq!(
            kind("  #Cloud-Config\r\nruncmd: []\r\n"),
            UserDataKind::CloudConfig
        );
        assert_eq!(kind("#!/bin/sh\necho hi\n"), UserDataKind::Script);
        assert_eq!(
            kind("#include\nhttps://example.invalid/a\n"),
            UserDataKind::Include
        );
        assert_eq!(
            kind("#include-once\nhttps://example.invalid/a\n"),
            UserDataKind::IncludeOnce
        );
        assert_eq!(
            kind("#cloud-boothook\n#!/bin/sh\ntrue\n"),
            UserDataKind::BootHook
        );
        assert_eq!(
            kind("#cloud-config-archive\n- type: text/cloud-config\n  content: '{}'\n"),
            UserDataKind::CloudConfigArchive
        );
        assert_eq!(
            kind("## template: jinja\n#cloud-config\n{{ x }}\n"),
            UserDataKind::JinjaTemplate
        );
        assert_eq!(
            kind("Content-Type: multipart/mixed; boundary=\"b\"\nMIME-Version: 1.0\n\n--b--\n"),
            UserDataKind::MimeMultipart
        );
    }

    #[test]
    fn rejects_text_cloud_init_ignores() {
        assert_eq!(validate(""), Err(UserDataError::Empty));
        assert_eq!(validate(" \n\t\n"), Err(UserDataError::Empty));
        assert_eq!(
            validate("packages: [nginx]\n"),
            Err(UserDataError::UnknownFormat)
        );
        assert_eq!(
            validate("# cloud-config\nx: 1\n"),
            Err(UserDataError::UnknownFormat)
        );
        assert_eq!(validate("echo hi\n"), Err(UserDataError::UnknownFormat));
    }

    #[test]
    fn reports_yaml_errors_by_position_without_the_text() {
        let err = validate("#cloud-config\npackages:\n  - a\n bad: [secret-value\n").unwrap_err();
        match &err {
            UserDataError::Yaml { line, .. } => assert!(*line >= 3, "{err}"),
            other => panic!("expected a YAML error, got {other:?}"),
        }
        assert!(!err.to_string().contains("secret"), "{err}");
        let err = validate("#cloud-config\na: 1\nb: 'unclosed\n").unwrap_err();
        assert!(matches!(err, UserDataError::Yaml { .. }), "{err:?}");
    }

    #[test]
    fn tabs_only_where_pyyaml_allows_them() {
        for bad in [
            "\tx: 1\n",
            "a:\t1\n",
            "a: 1 \t\n",
            "a: [1,\t2]\n",
            "a: x\n  \ty\n",
        ] {
            let err = validate(&format!("#cloud-config\n{bad}")).unwrap_err();
            assert!(
                // Either the YAML parser or the tab check stops it.
                matches!(&err, UserDataError::Yaml { .. }),
                "{bad:?}: {err:?}"
            );
        }
        for good in [
            "a: \"x\ty\"\n",
            "a: 'x\ty'\n",
            "a: |\n  x\n  \ty\n",
            "a: >\n  x\ty\nb: 1\n",
            "a: 1 # c\tx\n",
            "# \tcomment\na: 1\n",
        ] {
            assert!(
                validate(&format!("#cloud-config\n{good}")).is_ok(),
                "{good:?}"
            );
        }
        let err = validate("#cloud-config\n\tx: 1\n").unwrap_err();
        assert_eq!(
            err,
            UserDataError::Yaml {
                line: 2,
                column: 1,
                reason: MISPLACED_TAB.to_owned()
            }
        );
        // Scripts are not YAML: tabs are theirs to use.
        assert!(validate("#!/bin/sh\n\techo hi\n").is_ok());
    }

    #[test]
    fn only_tags_safe_load_constructs() {
        assert!(validate("#cloud-config\na: !!binary aGk=\nb: !!str 1\n").is_ok());
        assert!(validate("#cloud-config\na: ! x\nb: !<tag:yaml.org,2002:str> y\n").is_ok());
        for bad in [
            "a: !custom x\n",
            "a: !!python/name:os.system\n",
            "a: !<tag:x> y\n",
        ] {
            let err = validate(&format!("#cloud-config\n{bad}")).unwrap_err();
            assert!(
                matches!(&err, UserDataError::Yaml { line: 2, reason, .. } if reason == UNSAFE_TAG),
                "{bad:?}: {err:?}"
            );
        }
    }

    #[test]
    fn cloud_config_must_be_one_mapping() {
        assert!(matches!(
            validate("#cloud-config\n- a\n- b\n"),
            Err(UserDataError::WrongShape { found: "list", .. })
        ));
        assert!(matches!(
            validate("#cloud-config\njust text\n"),
            Err(UserDataError::WrongShape {
                found: "single value",
                ..
            })
        ));
        assert_eq!(
            validate("#cloud-config\na: 1\n---\nb: 2\n"),
            Err(UserDataError::MultipleDocuments)
        );
        assert!(matches!(
            validate("#cloud-config-archive\na: 1\n"),
            Err(UserDataError::WrongShape {
                expected: "list of parts",
                ..
            })
        ));
        assert_eq!(kind("#cloud-config\n---\n"), UserDataKind::CloudConfig);
    }

    #[test]
    fn scripts_are_not_parsed_as_yaml() {
        assert_eq!(
            kind("#!/bin/bash\nif [ x: ]; then\n\tfoo: [\nfi\n"),
            UserDataKind::Script
        );
    }

    fn disables(text: &str) -> bool {
        validate(text).unwrap().disables_vendor_data
    }

    #[test]
    fn notices_when_vendor_data_is_turned_off() {
        assert!(!disables("#cloud-config\npackages: [a]\n"));
        assert!(disables("#cloud-config\nvendor_data:\n  enabled: false\n"));
        assert!(disables("#cloud-config\nvendor_data: {enabled: no}\n"));
        assert!(disables("#cloud-config\nvendor_data: {enabled: \"off\"}\n"));
        assert!(disables("#cloud-config\nvendor_data: false\n"));
        assert!(disables("#cloud-config\nvendor_data: [x]\n"));
        assert!(!disables("#cloud-config\nvendor_data: {enabled: true}\n"));
        assert!(!disables("#cloud-config\nvendor_data: {enabled: Yes}\n"));
        assert!(!disables("#cloud-config\nvendor_data: {prefix: [a]}\n"));
        assert!(!disables(
            "#cloud-config\nvendor_data: {prefix: [a], enabled: on}\n"
        ));
        assert!(disables(
            "#cloud-config\nvendor_data: {prefix: [a], enabled: 0}\n"
        ));
        assert!(disables("#cloud-config\nvendor_data: {enabled: [true]}\n"));
        // Only the top-level key counts, and later keys do not undo it.
        assert!(!disables(
            "#cloud-config\nwrite_files:\n  - vendor_data: false\n"
        ));
        assert!(!disables(
            "#cloud-config\nx:\n  vendor_data:\n    enabled: false\n"
        ));
        assert!(disables(
            "#cloud-config\nvendor_data: {enabled: false}\nruncmd: [[a, b]]\n"
        ));
        assert!(
            validate("#cloud-config\nvendor_data: false\n")
                .unwrap()
                .warning()
                .is_some()
        );
        assert!(
            validate("#cloud-config\na: 1\n")
                .unwrap()
                .warning()
                .is_none()
        );
    }
}
