//! Attribute tables: a resource or data source declares each of its attributes once (name,
//! what it holds, who sets it, its description) in a `const` table, and its wire schema is
//! built from that table. `proxmox_proxy_vm`'s table (`resources::proxy_vm::schema`) adds
//! what its plan and apply read; the data sources declare theirs with [`Spec`].

use tfplugin::{Attribute, Block, Nesting, Type};

/// What an attribute holds; `S` is the table's entry type, for nested objects.
#[derive(Clone, Copy, Debug)]
pub enum Kind<S: 'static> {
    String,
    Number,
    Bool,
    StringList,
    StringSet,
    /// One object of these attributes (or null).
    Object(&'static [S]),
    /// A list of objects of these attributes.
    ObjectList(&'static [S]),
}

/// Who sets an attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The configuration, always.
    Required,
    /// The configuration, or nobody.
    Optional,
    /// The configuration, else the provider.
    OptionalComputed,
    /// The provider only.
    Computed,
}

/// An entry of an attribute table.
pub trait Declared {
    /// The attribute as the plugin protocol declares it.
    fn attribute(&self) -> Attribute;
}

/// The protocol's attribute for a name, kind and mode; the caller adds its description and
/// flags.
pub fn attribute<S: Declared>(name: &str, kind: Kind<S>, mode: Mode) -> Attribute {
    let nested = |specs: &[S]| specs.iter().map(Declared::attribute).collect();
    let attribute = match kind {
        Kind::String => Attribute::new(name, Type::String),
        Kind::Number => Attribute::new(name, Type::Number),
        Kind::Bool => Attribute::new(name, Type::Bool),
        Kind::StringList => Attribute::new(name, Type::list(Type::String)),
        Kind::StringSet => Attribute::new(name, Type::set(Type::String)),
        Kind::Object(specs) => Attribute::nested(name, Nesting::Single, nested(specs)),
        Kind::ObjectList(specs) => Attribute::nested(name, Nesting::List, nested(specs)),
    };
    match mode {
        Mode::Required => attribute.required(),
        Mode::Optional => attribute.optional(),
        Mode::OptionalComputed => attribute.optional().computed(),
        Mode::Computed => attribute.computed(),
    }
}

/// A block of `description` with the table's attributes, in table order.
pub fn block<S: Declared>(description: impl Into<String>, specs: &[S]) -> Block {
    specs
        .iter()
        .fold(Block::new().description(description), |block, spec| {
            block.attribute(spec.attribute())
        })
}

/// A description: fixed markdown, or markdown built from other declarations (a list of
/// codes, a constant's value).
#[derive(Clone, Copy, Debug)]
pub enum Description {
    Text(&'static str),
    Built(fn() -> String),
}

/// One attribute of a data source, declared once.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind<Spec>,
    pub mode: Mode,
    /// Markdown; the registry docs are generated from it.
    pub description: Description,
}

impl Spec {
    pub const fn new(name: &'static str, kind: Kind<Spec>, mode: Mode) -> Self {
        Self {
            name,
            kind,
            mode,
            description: Description::Text(""),
        }
    }

    pub const fn description(mut self, markdown: &'static str) -> Self {
        self.description = Description::Text(markdown);
        self
    }

    pub const fn built_description(mut self, markdown: fn() -> String) -> Self {
        self.description = Description::Built(markdown);
        self
    }
}

impl Declared for Spec {
    fn attribute(&self) -> Attribute {
        let description = match self.description {
            Description::Text(text) => text.to_owned(),
            Description::Built(build) => build(),
        };
        attribute(self.name, self.kind, self.mode).description(description)
    }
}

/// The values of the `pub const NAME: &str = "value";` items of a module's source text: the
/// names an `attr` module declares, for tests that every one has an entry in its table.
pub fn declared_names(source: &str) -> Vec<&str> {
    source
        .lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("pub const ")?;
            let (_, value) = rest.split_once(": &str = \"")?;
            value.strip_suffix("\";")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_names_reads_string_constants_only() {
        let source = "pub const A: &str = \"a\";\n    pub const B: &str = \"b_c\";\n\
                      pub const N: u32 = 3;\n// pub const C: &str = \"c\";\n";
        assert_eq!(declared_names(source), ["a", "b_c"]);
    }
}
