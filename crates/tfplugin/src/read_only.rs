//! The check every schema implies and Terraform does not make itself: a configuration may not
//! set a read-only (computed-only) attribute. Terraform lets such a value through validate
//! and plan, and the apply then fails with "Provider produced inconsistent result after
//! apply" (hashicorp/terraform#30669). HashiCorp's plugin framework refuses it at validate
//! (terraform-plugin-framework `internal/fwserver/attribute_validation.go`
//! `AttributeValidate`: any value but null, an unknown one included, of an attribute that is
//! computed and not optional, "Invalid Configuration for Read-Only Attribute"); the server
//! does the same for every resource, data source and provider block, before their own checks.

use crate::diag::{AttributePath, Diagnostics};
use crate::schema::{Attribute, AttributeKind, Block, BlockNesting, NestedBlock, Nesting};
use crate::value::Value;

/// The summary of the diagnostic, as the framework words it, so it reads (and searches) the
/// same as with other providers.
pub const SUMMARY: &str = "Invalid Configuration for Read-Only Attribute";

/// Whether only the provider sets the attribute.
pub fn is_read_only(attribute: &Attribute) -> bool {
    attribute.computed && !attribute.optional && !attribute.required
}

/// One error per read-only attribute `config` sets, at its path, at any depth.
pub fn refuse_read_only(block: &Block, config: &Value) -> Diagnostics {
    let mut diagnostics = Diagnostics::new();
    in_block(block, config, &AttributePath::root(), &mut diagnostics);
    diagnostics
}

fn in_block(block: &Block, object: &Value, at: &AttributePath, diags: &mut Diagnostics) {
    for attribute in &block.attributes {
        let value = object.get_attr(&attribute.name);
        let path = at.clone().attr(&attribute.name);
        if value.is_null() {
            continue;
        }
        if is_read_only(attribute) {
            diags.attribute_error(
                path,
                SUMMARY,
                format!(
                    "`{}` is set by the provider alone; a configuration cannot set it. Remove \
                     the line that sets it.",
                    attribute.name
                ),
            );
        } else if let AttributeKind::Nested(nested) = &attribute.kind {
            let inner = Block {
                attributes: nested.attributes.clone(),
                ..Block::default()
            };
            each_object(value, nested.nesting, &path, &mut |object, path| {
                in_block(&inner, object, path, diags)
            });
        }
    }
    for nested in &block.blocks {
        let value = object.get_attr(&nested.type_name);
        let path = at.clone().attr(&nested.type_name);
        each_object(value, nesting_of(nested), &path, &mut |object, path| {
            in_block(&nested.block, object, path, diags)
        });
    }
}

fn nesting_of(nested: &NestedBlock) -> Nesting {
    match nested.nesting {
        BlockNesting::Single | BlockNesting::Group => Nesting::Single,
        BlockNesting::List => Nesting::List,
        BlockNesting::Set => Nesting::Set,
        BlockNesting::Map => Nesting::Map,
    }
}

/// Calls `visit` with each object of a nested value and its path. A set's elements have no
/// path of their own in the protocol: they are reported at the set.
fn each_object(
    value: &Value,
    nesting: Nesting,
    at: &AttributePath,
    visit: &mut dyn FnMut(&Value, &AttributePath),
) {
    match (nesting, value) {
        (Nesting::Single, Value::Object(_)) => visit(value, at),
        (Nesting::List, Value::List(items) | Value::Tuple(items)) => {
            for (index, item) in items.iter().enumerate() {
                visit(item, &at.clone().index(index as i64));
            }
        }
        (Nesting::Set, Value::Set(items)) => items.iter().for_each(|item| visit(item, at)),
        (Nesting::Map, Value::Map(items) | Value::Object(items)) => {
            for (key, item) in items {
                visit(item, &at.clone().key(key));
            }
        }
        // Null, unknown, or a shape the decoder already refused: nothing to look into.
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::PathStep;
    use crate::schema::NestedBlock;
    use crate::value::Type;

    fn block() -> Block {
        let computed = |name: &str| Attribute::new(name, Type::String).computed();
        Block::new()
            .attribute(Attribute::new("name", Type::String).required())
            .attribute(computed("id"))
            .attribute(Attribute::new("size", Type::Number).optional().computed())
            .attribute(Attribute::nested(
                "nics",
                Nesting::List,
                vec![
                    Attribute::new("bridge", Type::String).optional(),
                    computed("mac"),
                ],
            ))
            .attribute(Attribute::nested(
                "labels",
                Nesting::Map,
                vec![computed("seen")],
            ))
            .block(NestedBlock::new(
                "disk",
                BlockNesting::Single,
                Block::new().attribute(computed("volume")),
            ))
    }

    fn paths(config: &Value) -> Vec<Vec<PathStep>> {
        let diagnostics = refuse_read_only(&block(), config);
        assert!(diagnostics.iter().all(|d| d.summary == SUMMARY));
        diagnostics
            .iter()
            .map(|d| d.attribute.as_ref().unwrap().steps().to_vec())
            .collect()
    }

    fn attr(name: &str) -> PathStep {
        PathStep::Attribute(name.into())
    }

    #[test]
    fn a_read_only_attribute_set_at_any_depth_is_refused_where_it_is() {
        let config = Value::object([
            ("name", Value::from("a")),
            ("id", Value::from("100")),
            ("size", Value::number(4)),
            (
                "nics",
                Value::List(vec![
                    Value::object([("bridge", Value::from("vmbr0")), ("mac", Value::Null)]),
                    Value::object([("bridge", Value::Null), ("mac", Value::Unknown)]),
                ]),
            ),
            (
                "labels",
                Value::Map([("x".into(), Value::object([("seen", Value::from("y"))]))].into()),
            ),
            ("disk", Value::object([("volume", Value::from("v"))])),
        ]);
        assert_eq!(
            paths(&config),
            [
                vec![attr("id")],
                vec![attr("nics"), PathStep::Index(1), attr("mac")],
                vec![attr("labels"), PathStep::Key("x".into()), attr("seen")],
                vec![attr("disk"), attr("volume")],
            ]
        );
    }

    #[test]
    fn null_and_unset_values_pass_and_an_unknown_one_does_not() {
        let config = Value::object([("name", Value::from("a")), ("id", Value::Null)]);
        assert!(paths(&config).is_empty());
        assert!(paths(&Value::object([("name", Value::from("a"))])).is_empty());
        assert!(paths(&Value::Unknown).is_empty());
        let unknown = Value::object([("id", Value::Unknown), ("nics", Value::Unknown)]);
        assert_eq!(paths(&unknown), [vec![attr("id")]]);
    }

    #[test]
    fn read_only_means_computed_alone() {
        let plain = Attribute::new("x", Type::String);
        assert!(is_read_only(&plain.clone().computed()));
        assert!(!is_read_only(&plain.clone().optional().computed()));
        assert!(!is_read_only(&plain.clone().optional()));
        assert!(!is_read_only(&plain.required()));
    }
}
