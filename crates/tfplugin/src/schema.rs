//! Schemas: what a provider, resource or data source accepts and returns.

use std::collections::BTreeMap;

use crate::proto::tfplugin6 as pb;
use crate::value::Type;

/// A versioned schema. The version is stored with each resource's state;
/// raise it when stored state needs upgrading.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schema {
    /// Schema version (resources only; 0 otherwise).
    pub version: i64,
    /// The top-level block.
    pub block: Block,
}

impl Schema {
    /// A version-0 schema around a block.
    pub fn new(block: Block) -> Schema {
        Schema { version: 0, block }
    }

    /// Sets the version.
    #[must_use]
    pub fn with_version(mut self, version: i64) -> Schema {
        self.version = version;
        self
    }

    /// The object type of values under this schema.
    pub fn value_type(&self) -> Type {
        self.block.value_type()
    }

    /// The protocol form.
    pub fn to_proto(&self) -> pb::Schema {
        pb::Schema {
            version: self.version,
            block: Some(self.block.to_proto()),
        }
    }
}

/// A block: attributes and nested blocks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Block {
    /// Attributes, each with a name unique within the block.
    pub attributes: Vec<Attribute>,
    /// Nested blocks.
    pub blocks: Vec<NestedBlock>,
    /// Markdown description.
    pub description: String,
    /// Whether the whole block is deprecated.
    pub deprecated: bool,
}

impl Block {
    /// An empty block.
    pub fn new() -> Block {
        Block::default()
    }

    /// Adds an attribute.
    #[must_use]
    pub fn attribute(mut self, attribute: Attribute) -> Block {
        self.attributes.push(attribute);
        self
    }

    /// Adds a nested block.
    #[must_use]
    pub fn block(mut self, block: NestedBlock) -> Block {
        self.blocks.push(block);
        self
    }

    /// Sets the markdown description.
    #[must_use]
    pub fn description(mut self, markdown: impl Into<String>) -> Block {
        self.description = markdown.into();
        self
    }

    /// Looks up an attribute by name.
    pub fn get_attribute(&self, name: &str) -> Option<&Attribute> {
        self.attributes.iter().find(|a| a.name == name)
    }

    /// The object type of values of this block.
    pub fn value_type(&self) -> Type {
        let mut fields: BTreeMap<String, Type> = self
            .attributes
            .iter()
            .map(|a| (a.name.clone(), a.value_type()))
            .collect();
        for nested in &self.blocks {
            fields.insert(nested.type_name.clone(), nested.value_type());
        }
        Type::Object(fields)
    }

    /// The protocol form.
    pub fn to_proto(&self) -> pb::schema::Block {
        pb::schema::Block {
            version: 0,
            attributes: self.attributes.iter().map(Attribute::to_proto).collect(),
            block_types: self.blocks.iter().map(NestedBlock::to_proto).collect(),
            description: self.description.clone(),
            description_kind: pb::StringKind::Markdown as i32,
            deprecated: self.deprecated,
            deprecation_message: String::new(),
        }
    }
}

/// What an attribute holds.
#[derive(Clone, Debug, PartialEq)]
pub enum AttributeKind {
    /// A value of a plain type.
    Type(Type),
    /// Nested attributes (`attr = { ... }` or a list/set/map of them).
    Nested(NestedAttributes),
}

/// How nested attributes (or blocks) repeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nesting {
    /// Exactly one object (or null).
    Single,
    /// An ordered list of objects.
    List,
    /// A set of objects.
    Set,
    /// A map of objects keyed by label.
    Map,
}

/// An object of attributes nested in an attribute.
#[derive(Clone, Debug, PartialEq)]
pub struct NestedAttributes {
    /// How the object repeats.
    pub nesting: Nesting,
    /// The object's attributes.
    pub attributes: Vec<Attribute>,
}

impl NestedAttributes {
    fn object_type(&self) -> Type {
        Type::Object(
            self.attributes
                .iter()
                .map(|a| (a.name.clone(), a.value_type()))
                .collect(),
        )
    }

    fn value_type(&self) -> Type {
        nest(self.nesting, self.object_type())
    }
}

fn nest(nesting: Nesting, object: Type) -> Type {
    match nesting {
        Nesting::Single => object,
        Nesting::List => Type::list(object),
        Nesting::Set => Type::set(object),
        Nesting::Map => Type::map(object),
    }
}

/// One attribute. Build with [`Attribute::new`] and the flag methods, e.g.
/// `Attribute::new("name", Type::String).required().description("...")`.
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    /// Attribute name.
    pub name: String,
    /// Type or nested attributes.
    pub kind: AttributeKind,
    /// Markdown description.
    pub description: String,
    /// Must be set in configuration.
    pub required: bool,
    /// May be set in configuration.
    pub optional: bool,
    /// The provider may set it (alone: read-only; with `optional`: defaulted).
    pub computed: bool,
    /// Terraform hides the value in its output.
    pub sensitive: bool,
    /// Terraform warns when it is used.
    pub deprecated: bool,
    /// Configured but never stored in plan or state (Terraform ≥ 1.11, OpenTofu ≥ 1.11):
    /// the provider must answer null for it in every plan, apply and read.
    pub write_only: bool,
}

impl Attribute {
    /// An attribute of a plain type, with no flags set yet.
    pub fn new(name: impl Into<String>, ty: Type) -> Attribute {
        Attribute {
            name: name.into(),
            kind: AttributeKind::Type(ty),
            description: String::new(),
            required: false,
            optional: false,
            computed: false,
            sensitive: false,
            deprecated: false,
            write_only: false,
        }
    }

    /// An attribute holding nested attributes.
    pub fn nested(
        name: impl Into<String>,
        nesting: Nesting,
        attributes: Vec<Attribute>,
    ) -> Attribute {
        Attribute {
            kind: AttributeKind::Nested(NestedAttributes {
                nesting,
                attributes,
            }),
            ..Attribute::new(name, Type::Dynamic)
        }
    }

    /// Marks it required.
    #[must_use]
    pub fn required(mut self) -> Attribute {
        self.required = true;
        self
    }

    /// Marks it optional.
    #[must_use]
    pub fn optional(mut self) -> Attribute {
        self.optional = true;
        self
    }

    /// Marks it computed.
    #[must_use]
    pub fn computed(mut self) -> Attribute {
        self.computed = true;
        self
    }

    /// Marks it sensitive.
    #[must_use]
    pub fn sensitive(mut self) -> Attribute {
        self.sensitive = true;
        self
    }

    /// Marks it write-only: the value reaches the provider in the configuration only.
    #[must_use]
    pub fn write_only(mut self) -> Attribute {
        self.write_only = true;
        self
    }

    /// Marks it deprecated.
    #[must_use]
    pub fn deprecated(mut self) -> Attribute {
        self.deprecated = true;
        self
    }

    /// Sets the markdown description.
    #[must_use]
    pub fn description(mut self, markdown: impl Into<String>) -> Attribute {
        self.description = markdown.into();
        self
    }

    /// The type of its values.
    pub fn value_type(&self) -> Type {
        match &self.kind {
            AttributeKind::Type(ty) => ty.clone(),
            AttributeKind::Nested(nested) => nested.value_type(),
        }
    }

    /// The protocol form.
    pub fn to_proto(&self) -> pb::schema::Attribute {
        let (ty, nested_type) = match &self.kind {
            AttributeKind::Type(ty) => (ty.to_json().to_string().into_bytes(), None),
            AttributeKind::Nested(nested) => (
                Vec::new(),
                Some(pb::schema::Object {
                    attributes: nested.attributes.iter().map(Attribute::to_proto).collect(),
                    nesting: match nested.nesting {
                        Nesting::Single => pb::schema::object::NestingMode::Single,
                        Nesting::List => pb::schema::object::NestingMode::List,
                        Nesting::Set => pb::schema::object::NestingMode::Set,
                        Nesting::Map => pb::schema::object::NestingMode::Map,
                    } as i32,
                    ..Default::default()
                }),
            ),
        };
        pb::schema::Attribute {
            name: self.name.clone(),
            r#type: ty,
            nested_type,
            description: self.description.clone(),
            required: self.required,
            optional: self.optional,
            computed: self.computed,
            sensitive: self.sensitive,
            description_kind: pb::StringKind::Markdown as i32,
            deprecated: self.deprecated,
            write_only: self.write_only,
            deprecation_message: String::new(),
        }
    }
}

/// How a nested block repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockNesting {
    /// At most one block; null when absent.
    Single,
    /// At most one block; when absent, an object of nulls (never null).
    Group,
    /// An ordered list of blocks.
    List,
    /// A set of blocks.
    Set,
    /// Labelled blocks, as a map.
    Map,
}

/// A nested block type, e.g. `disk { ... }`.
#[derive(Clone, Debug, PartialEq)]
pub struct NestedBlock {
    /// Block type name as written in configuration.
    pub type_name: String,
    /// The block's content.
    pub block: Block,
    /// How it repeats.
    pub nesting: BlockNesting,
    /// Minimum count (list/set).
    pub min_items: i64,
    /// Maximum count (list/set; 0 = unlimited).
    pub max_items: i64,
}

impl NestedBlock {
    /// A nested block type.
    pub fn new(type_name: impl Into<String>, nesting: BlockNesting, block: Block) -> NestedBlock {
        NestedBlock {
            type_name: type_name.into(),
            block,
            nesting,
            min_items: 0,
            max_items: 0,
        }
    }

    /// Sets the item count bounds.
    #[must_use]
    pub fn items(mut self, min: i64, max: i64) -> NestedBlock {
        self.min_items = min;
        self.max_items = max;
        self
    }

    /// The type of its values.
    pub fn value_type(&self) -> Type {
        let object = self.block.value_type();
        match self.nesting {
            BlockNesting::Single | BlockNesting::Group => object,
            BlockNesting::List => Type::list(object),
            BlockNesting::Set => Type::set(object),
            BlockNesting::Map => Type::map(object),
        }
    }

    /// The protocol form.
    pub fn to_proto(&self) -> pb::schema::NestedBlock {
        use pb::schema::nested_block::NestingMode;
        pb::schema::NestedBlock {
            type_name: self.type_name.clone(),
            block: Some(self.block.to_proto()),
            nesting: match self.nesting {
                BlockNesting::Single => NestingMode::Single,
                BlockNesting::Group => NestingMode::Group,
                BlockNesting::List => NestingMode::List,
                BlockNesting::Set => NestingMode::Set,
                BlockNesting::Map => NestingMode::Map,
            } as i32,
            min_items: self.min_items,
            max_items: self.max_items,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::new(
            Block::new()
                .description("A thing.")
                .attribute(Attribute::new("name", Type::String).required())
                .attribute(Attribute::new("id", Type::String).computed())
                .attribute(
                    Attribute::new("token", Type::String)
                        .optional()
                        .sensitive()
                        .description("Secret `token`."),
                )
                .attribute(Attribute::nested(
                    "nics",
                    Nesting::List,
                    vec![Attribute::new("bridge", Type::String).required()],
                ))
                .block(
                    NestedBlock::new(
                        "timeouts",
                        BlockNesting::Single,
                        Block::new().attribute(Attribute::new("create", Type::String).optional()),
                    )
                    .items(0, 1),
                ),
        )
        .with_version(2)
    }

    #[test]
    fn value_type_covers_attributes_and_blocks() {
        assert_eq!(
            schema().value_type(),
            Type::object([
                ("name", Type::String),
                ("id", Type::String),
                ("token", Type::String),
                ("nics", Type::list(Type::object([("bridge", Type::String)]))),
                ("timeouts", Type::object([("create", Type::String)])),
            ])
        );
    }

    #[test]
    fn proto_form_carries_flags_types_and_markdown() {
        let proto = schema().to_proto();
        assert_eq!(proto.version, 2);
        let block = proto.block.unwrap();
        assert_eq!(block.description_kind, pb::StringKind::Markdown as i32);
        let token = block.attributes.iter().find(|a| a.name == "token").unwrap();
        assert!(token.sensitive && token.optional && !token.required);
        assert_eq!(token.r#type, br#""string""#);
        let nics = block.attributes.iter().find(|a| a.name == "nics").unwrap();
        assert!(nics.r#type.is_empty());
        let nested = nics.nested_type.as_ref().unwrap();
        assert_eq!(nested.nesting, pb::schema::object::NestingMode::List as i32);
        assert_eq!(block.block_types[0].max_items, 1);
        assert_eq!(
            block.block_types[0].nesting,
            pb::schema::nested_block::NestingMode::Single as i32
        );
    }
}
