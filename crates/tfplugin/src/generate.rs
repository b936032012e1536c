//! Generated configuration (protocol 6.10, Terraform 1.14+ `GenerateResourceConfig`): the
//! configuration `-generate-config-out` writes for an imported or listed object, made from its
//! state. Terraform writes every non-null value of the answer into the `resource` block.
//!
//! When a provider does not answer it, Terraform filters the state itself
//! (`genconfig/generate_config.go` `ExtractLegacyConfigFromState` at v1.14.9); once a provider
//! announces the capability, Terraform asks it for every resource type, so resources that
//! write no configuration of their own get [`config_from_state`], the same filter.

use crate::diag::Diagnostics;
use crate::schema::{AttributeKind, Block, BlockNesting, NestedAttributes, Nesting};
use crate::value::Value;

/// `GenerateResourceConfig` output.
#[derive(Clone, Debug, Default)]
pub struct GenerateConfigResponse {
    /// A configuration value of the resource's type, wholly known.
    pub config: Value,
    /// Problems found.
    pub diagnostics: Diagnostics,
}

/// A state turned into configuration: attributes only the provider sets (computed and not
/// optional), deprecated attributes and blocks, and write-only attributes become null, at
/// every depth; everything else is kept. Terraform's own filter also drops an optional
/// computed `id` and empty optional strings, which only its legacy SDK produces.
pub fn config_from_state(block: &Block, state: &Value) -> Value {
    if state.is_null() || !state.is_known() {
        return state.clone();
    }
    let mut config = state.clone();
    for attribute in &block.attributes {
        let value = state.get_attr(&attribute.name);
        let kept = if attribute.deprecated
            || attribute.write_only
            || (attribute.computed && !attribute.optional)
        {
            Value::Null
        } else if let AttributeKind::Nested(nested) = &attribute.kind {
            each_object(value, nested.nesting, |object| {
                nested_config(nested, object)
            })
        } else {
            continue;
        };
        config.set_attr(attribute.name.clone(), kept);
    }
    for nested in &block.blocks {
        let value = state.get_attr(&nested.type_name);
        let kept = if nested.block.deprecated {
            Value::Null
        } else {
            let nesting = match nested.nesting {
                BlockNesting::Single | BlockNesting::Group => Nesting::Single,
                BlockNesting::List => Nesting::List,
                BlockNesting::Set => Nesting::Set,
                BlockNesting::Map => Nesting::Map,
            };
            each_object(value, nesting, |object| {
                config_from_state(&nested.block, object)
            })
        };
        config.set_attr(nested.type_name.clone(), kept);
    }
    config
}

fn nested_config(nested: &NestedAttributes, object: &Value) -> Value {
    let block = Block {
        attributes: nested.attributes.clone(),
        ..Block::default()
    };
    config_from_state(&block, object)
}

fn each_object(value: &Value, nesting: Nesting, mut f: impl FnMut(&Value) -> Value) -> Value {
    if value.is_null() || !value.is_known() {
        return value.clone();
    }
    match (nesting, value) {
        (Nesting::Single, object) => f(object),
        (Nesting::List, Value::List(items)) => Value::List(items.iter().map(f).collect()),
        (Nesting::Set, Value::Set(items)) => Value::Set(items.iter().map(f).collect()),
        (Nesting::Map, Value::Map(items)) => Value::Map(
            items
                .iter()
                .map(|(key, item)| (key.clone(), f(item)))
                .collect(),
        ),
        (_, other) => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Attribute, NestedBlock};
    use crate::value::Type;

    fn block() -> Block {
        Block::new()
            .attribute(Attribute::new("name", Type::String).required())
            .attribute(Attribute::new("size", Type::Number).optional().computed())
            .attribute(Attribute::new("id", Type::String).computed())
            .attribute(Attribute::new("old", Type::String).optional().deprecated())
            .attribute(
                Attribute::new("secret", Type::String)
                    .optional()
                    .write_only(),
            )
            .attribute(Attribute::nested(
                "ports",
                Nesting::List,
                vec![
                    Attribute::new("number", Type::Number).required(),
                    Attribute::new("uuid", Type::String).computed(),
                ],
            ))
            .block(NestedBlock::new(
                "disk",
                BlockNesting::List,
                Block::new()
                    .attribute(Attribute::new("size", Type::Number).required())
                    .attribute(Attribute::new("path", Type::String).computed()),
            ))
    }

    #[test]
    fn only_what_a_user_may_write_is_kept_at_every_depth() {
        let state = Value::object([
            ("name", Value::from("a")),
            ("size", Value::from(4)),
            ("id", Value::from("i-1")),
            ("old", Value::from("x")),
            ("secret", Value::Null),
            (
                "ports",
                Value::List(vec![Value::object([
                    ("number", Value::from(80)),
                    ("uuid", Value::from("u")),
                ])]),
            ),
            (
                "disk",
                Value::List(vec![Value::object([
                    ("size", Value::from(8)),
                    ("path", Value::from("/dev/a")),
                ])]),
            ),
        ]);
        let config = config_from_state(&block(), &state);
        assert_eq!(config.get_attr("name").as_str(), Some("a"));
        assert_eq!(config.get_attr("size").as_i64(), Some(4));
        assert!(config.get_attr("id").is_null());
        assert!(config.get_attr("old").is_null());
        let port = config.get_attr("ports").get_index(0);
        assert_eq!(port.get_attr("number").as_i64(), Some(80));
        assert!(port.get_attr("uuid").is_null());
        let disk = config.get_attr("disk").get_index(0);
        assert_eq!(disk.get_attr("size").as_i64(), Some(8));
        assert!(disk.get_attr("path").is_null());
    }

    #[test]
    fn a_null_state_gives_a_null_configuration() {
        assert!(config_from_state(&block(), &Value::Null).is_null());
    }
}
