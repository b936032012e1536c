//! Diagnostics and attribute paths.

use std::fmt;

use crate::proto::tfplugin6 as pb;

/// One step of an [`AttributePath`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathStep {
    /// An object attribute.
    Attribute(String),
    /// A map element.
    Key(String),
    /// A list or tuple element.
    Index(i64),
}

/// A path into a value, e.g. `AttributePath::root().attr("disk").index(0).attr("size")`.
/// Terraform uses it to point a diagnostic at the configuration line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AttributePath {
    steps: Vec<PathStep>,
}

impl AttributePath {
    /// The empty path (the whole object).
    pub fn root() -> AttributePath {
        AttributePath::default()
    }

    /// Appends an attribute step.
    #[must_use]
    pub fn attr(mut self, name: impl Into<String>) -> AttributePath {
        self.steps.push(PathStep::Attribute(name.into()));
        self
    }

    /// Appends a map-key step.
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> AttributePath {
        self.steps.push(PathStep::Key(key.into()));
        self
    }

    /// Appends a list-index step.
    #[must_use]
    pub fn index(mut self, index: i64) -> AttributePath {
        self.steps.push(PathStep::Index(index));
        self
    }

    pub(crate) fn prepend(&mut self, step: PathStep) {
        self.steps.insert(0, step);
    }

    /// The steps from the root.
    pub fn steps(&self) -> &[PathStep] {
        &self.steps
    }

    /// Whether this is the empty path.
    pub fn is_root(&self) -> bool {
        self.steps.is_empty()
    }

    pub(crate) fn to_proto(&self) -> pb::AttributePath {
        use pb::attribute_path::step::Selector;
        pb::AttributePath {
            steps: self
                .steps
                .iter()
                .map(|step| pb::attribute_path::Step {
                    selector: Some(match step {
                        PathStep::Attribute(name) => Selector::AttributeName(name.clone()),
                        PathStep::Key(key) => Selector::ElementKeyString(key.clone()),
                        PathStep::Index(index) => Selector::ElementKeyInt(*index),
                    }),
                })
                .collect(),
        }
    }

    /// Converts a path received from Terraform.
    pub fn from_proto(path: &pb::AttributePath) -> AttributePath {
        use pb::attribute_path::step::Selector;
        AttributePath {
            steps: path
                .steps
                .iter()
                .filter_map(|step| {
                    Some(match step.selector.as_ref()? {
                        Selector::AttributeName(name) => PathStep::Attribute(name.clone()),
                        Selector::ElementKeyString(key) => PathStep::Key(key.clone()),
                        Selector::ElementKeyInt(index) => PathStep::Index(*index),
                    })
                })
                .collect(),
        }
    }
}

impl From<&str> for AttributePath {
    /// A single-attribute path.
    fn from(name: &str) -> AttributePath {
        AttributePath::root().attr(name)
    }
}

impl fmt::Display for AttributePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (position, step) in self.steps.iter().enumerate() {
            match step {
                PathStep::Attribute(name) if position == 0 => write!(f, "{name}")?,
                PathStep::Attribute(name) => write!(f, ".{name}")?,
                PathStep::Key(key) => write!(f, "[{key:?}]")?,
                PathStep::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    /// The operation failed.
    Error,
    /// The operation succeeded but the user should know something.
    Warning,
}

/// A message for the user, optionally pointing at an attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// One line saying what went wrong.
    pub summary: String,
    /// Why, and what to do about it.
    pub detail: String,
    /// The attribute the message is about, if any.
    pub attribute: Option<AttributePath>,
}

impl Diagnostic {
    /// An error.
    pub fn error(summary: impl Into<String>, detail: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            summary: summary.into(),
            detail: detail.into(),
            attribute: None,
        }
    }

    /// A warning.
    pub fn warning(summary: impl Into<String>, detail: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(summary, detail)
        }
    }

    /// Points the diagnostic at an attribute.
    #[must_use]
    pub fn with_attribute(mut self, path: impl Into<AttributePath>) -> Diagnostic {
        self.attribute = Some(path.into());
        self
    }

    /// Converts a diagnostic received over the wire; anything but a warning is taken as an
    /// error.
    pub fn from_proto(diagnostic: &pb::Diagnostic) -> Diagnostic {
        let severity = if diagnostic.severity == pb::diagnostic::Severity::Warning as i32 {
            Severity::Warning
        } else {
            Severity::Error
        };
        Diagnostic {
            severity,
            summary: diagnostic.summary.clone(),
            detail: diagnostic.detail.clone(),
            attribute: diagnostic.attribute.as_ref().map(AttributePath::from_proto),
        }
    }

    pub(crate) fn to_proto(&self) -> pb::Diagnostic {
        pb::Diagnostic {
            severity: match self.severity {
                Severity::Error => pb::diagnostic::Severity::Error,
                Severity::Warning => pb::diagnostic::Severity::Warning,
            } as i32,
            summary: self.summary.clone(),
            detail: self.detail.clone(),
            attribute: self.attribute.as_ref().map(AttributePath::to_proto),
        }
    }
}

/// A list of diagnostics, as every operation returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// No diagnostics.
    pub fn new() -> Diagnostics {
        Diagnostics::default()
    }

    /// Adds one diagnostic.
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.0.push(diagnostic);
    }

    /// Adds an error.
    pub fn error(&mut self, summary: impl Into<String>, detail: impl Into<String>) {
        self.push(Diagnostic::error(summary, detail));
    }

    /// Adds an error pointing at an attribute.
    pub fn attribute_error(
        &mut self,
        path: impl Into<AttributePath>,
        summary: impl Into<String>,
        detail: impl Into<String>,
    ) {
        self.push(Diagnostic::error(summary, detail).with_attribute(path));
    }

    /// Adds a warning.
    pub fn warning(&mut self, summary: impl Into<String>, detail: impl Into<String>) {
        self.push(Diagnostic::warning(summary, detail));
    }

    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|d| d.severity == Severity::Error)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Iterates over the diagnostics.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    pub(crate) fn to_proto(&self) -> Vec<pb::Diagnostic> {
        self.0.iter().map(Diagnostic::to_proto).collect()
    }

    /// Converts diagnostics received over the wire.
    pub fn from_proto(diagnostics: &[pb::Diagnostic]) -> Diagnostics {
        Diagnostics(diagnostics.iter().map(Diagnostic::from_proto).collect())
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(diagnostic: Diagnostic) -> Diagnostics {
        Diagnostics(vec![diagnostic])
    }
}

impl Extend<Diagnostic> for Diagnostics {
    fn extend<I: IntoIterator<Item = Diagnostic>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_builder_and_proto_round_trip() {
        let path = AttributePath::root().attr("x").key("k").index(0);
        assert_eq!(path.to_string(), r#"x["k"][0]"#);
        let proto = path.to_proto();
        assert_eq!(proto.steps.len(), 3);
        assert_eq!(AttributePath::from_proto(&proto), path);
    }

    #[test]
    fn diagnostics_know_about_errors() {
        let mut diags = Diagnostics::new();
        diags.warning("careful", "");
        assert!(!diags.has_errors());
        diags.attribute_error("endpoint", "bad", "must be https");
        assert!(diags.has_errors());
        let proto = diags.to_proto();
        assert_eq!(proto[1].severity, 1);
        assert_eq!(proto[0].severity, 2);
        assert_eq!(proto[1].attribute.as_ref().unwrap().steps.len(), 1);
    }
}
