//! Helpers that make correct plans easy.
//!
//! Terraform checks every plan: a configured value must be planned as
//! configured; a computed attribute the provider cannot know yet must be
//! planned unknown; on update, values that do not change must keep their prior
//! value (otherwise every plan shows a diff).

use crate::diag::AttributePath;
use crate::schema::{AttributeKind, Block, BlockNesting, Nesting};
use crate::value::Value;

/// Plans computed attributes for a create or an update.
///
/// - Create (`prior` null): every computed attribute that is null in
///   `proposed` becomes unknown, at any depth of nested blocks and nested
///   attributes (a non-null value was configured and is kept).
/// - Update: computed attributes null in `proposed` take their prior value,
///   so unchanged computed values do not show as diffs. Mark the ones your
///   update will change with `planned.set_attr(name, Value::Unknown)` or
///   [`mark_unknown_if_changed`].
/// - Destroy (`proposed` null): null.
pub fn plan_computed(block: &Block, prior: &Value, proposed: &Value) -> Value {
    if proposed.is_null() {
        return Value::Null;
    }
    if prior.is_null() {
        return unknown_computed_in_block(block, proposed);
    }
    let mut planned = proposed.clone();
    for attribute in block.attributes.iter().filter(|a| a.computed) {
        let prior_value = prior.get_attr(&attribute.name);
        if planned.get_attr(&attribute.name).is_null() && !prior_value.is_null() {
            planned.set_attr(attribute.name.clone(), prior_value.clone());
        }
    }
    planned
}

fn unknown_computed_in_block(block: &Block, value: &Value) -> Value {
    if !value.is_known() || value.is_null() {
        return value.clone();
    }
    let mut planned = value.clone();
    for attribute in &block.attributes {
        let current = value.get_attr(&attribute.name);
        let new = if attribute.computed && current.is_null() {
            Value::Unknown
        } else if let AttributeKind::Nested(nested) = &attribute.kind {
            map_nested(current, nested.nesting, |object| {
                unknown_computed_in_block(
                    &Block {
                        attributes: nested.attributes.clone(),
                        ..Block::default()
                    },
                    object,
                )
            })
        } else {
            continue;
        };
        planned.set_attr(attribute.name.clone(), new);
    }
    for nested in &block.blocks {
        let current = value.get_attr(&nested.type_name);
        let nesting = match nested.nesting {
            BlockNesting::Single | BlockNesting::Group => Nesting::Single,
            BlockNesting::List => Nesting::List,
            BlockNesting::Set => Nesting::Set,
            BlockNesting::Map => Nesting::Map,
        };
        let new = map_nested(current, nesting, |object| {
            unknown_computed_in_block(&nested.block, object)
        });
        planned.set_attr(nested.type_name.clone(), new);
    }
    planned
}

fn map_nested(value: &Value, nesting: Nesting, mut f: impl FnMut(&Value) -> Value) -> Value {
    if value.is_null() || !value.is_known() {
        return value.clone();
    }
    match (nesting, value.unwrapped()) {
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

/// Top-level attributes whose value differs between `prior` and `proposed`
/// (or is not yet known in `proposed`). Empty when `prior` is null.
pub fn changed_attributes(prior: &Value, proposed: &Value) -> Vec<String> {
    let (Some(prior_items), Some(proposed_items)) = (prior.as_entries(), proposed.as_entries())
    else {
        return Vec::new();
    };
    let mut names: Vec<String> = Vec::new();
    for (name, new) in proposed_items {
        let old = prior_items.get(name).unwrap_or(&Value::Null);
        if !new.is_wholly_known() || !old.same_as(new) {
            names.push(name.clone());
        }
    }
    for name in prior_items.keys() {
        if !proposed_items.contains_key(name) {
            names.push(name.clone());
        }
    }
    names
}

/// [`changed_attributes`] as attribute paths.
pub fn changed_paths(prior: &Value, proposed: &Value) -> Vec<AttributePath> {
    changed_attributes(prior, proposed)
        .into_iter()
        .map(|name| AttributePath::root().attr(name))
        .collect()
}

/// The `requires_replace` paths: those of `replace_on_change` whose value
/// changes (or is unknown) between `prior` and `proposed`. Empty on create.
pub fn requires_replace(
    prior: &Value,
    proposed: &Value,
    replace_on_change: &[&str],
) -> Vec<AttributePath> {
    changed_attributes(prior, proposed)
        .into_iter()
        .filter(|name| replace_on_change.contains(&name.as_str()))
        .map(|name| AttributePath::root().attr(name))
        .collect()
}

/// When any of `triggers` changes between `prior` and `planned`, marks
/// `computed` attributes of `planned` unknown (their new value is only known
/// after apply). Does nothing on create or destroy.
pub fn mark_unknown_if_changed(
    planned: &mut Value,
    prior: &Value,
    triggers: &[&str],
    computed: &[&str],
) {
    if prior.is_null() || planned.is_null() {
        return;
    }
    let changed = changed_attributes(prior, planned);
    if changed.iter().any(|name| triggers.contains(&name.as_str())) {
        for name in computed {
            planned.set_attr(*name, Value::Unknown);
        }
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
            .attribute(Attribute::new("id", Type::String).computed())
            .attribute(Attribute::new("cores", Type::Number).optional().computed())
            .attribute(Attribute::nested(
                "nics",
                Nesting::List,
                vec![
                    Attribute::new("bridge", Type::String).required(),
                    Attribute::new("mac", Type::String).computed(),
                ],
            ))
            .block(NestedBlock::new(
                "timeouts",
                BlockNesting::Single,
                Block::new().attribute(Attribute::new("create", Type::String).optional()),
            ))
    }

    fn proposed_create() -> Value {
        Value::object([
            ("name", Value::from("a")),
            ("id", Value::Null),
            ("cores", Value::from(2)),
            (
                "nics",
                Value::List(vec![Value::object([
                    ("bridge", Value::from("vmbr0")),
                    ("mac", Value::Null),
                ])]),
            ),
            ("timeouts", Value::Null),
        ])
    }

    #[test]
    fn create_marks_null_computed_attributes_unknown_at_depth() {
        let planned = plan_computed(&block(), &Value::Null, &proposed_create());
        assert_eq!(planned.get_attr("id"), &Value::Unknown);
        assert_eq!(planned.get_attr("cores").as_i64(), Some(2));
        assert_eq!(planned.get_attr("name").as_str(), Some("a"));
        assert_eq!(
            planned.get_attr("nics").get_index(0).get_attr("mac"),
            &Value::Unknown
        );
        assert!(planned.get_attr("timeouts").is_null());
    }

    #[test]
    fn update_keeps_prior_computed_values() {
        let mut prior = proposed_create();
        prior.set_attr("id", Value::from("101"));
        let mut proposed = prior.clone();
        proposed.set_attr("id", Value::Null);
        proposed.set_attr("cores", Value::from(4));
        let planned = plan_computed(&block(), &prior, &proposed);
        assert_eq!(planned.get_attr("id").as_str(), Some("101"));
        assert_eq!(planned.get_attr("cores").as_i64(), Some(4));
    }

    #[test]
    fn destroy_plans_null() {
        assert!(plan_computed(&block(), &proposed_create(), &Value::Null).is_null());
    }

    #[test]
    fn replacement_paths_come_from_changed_attributes() {
        let prior = proposed_create();
        let mut proposed = prior.clone();
        proposed.set_attr("name", Value::from("b"));
        proposed.set_attr("cores", Value::from(8));
        assert_eq!(changed_attributes(&prior, &proposed), vec!["cores", "name"]);
        assert_eq!(
            requires_replace(&prior, &proposed, &["name", "id"]),
            vec![AttributePath::from("name")]
        );
        proposed.set_attr("id", Value::Unknown);
        assert_eq!(requires_replace(&prior, &proposed, &["id"]).len(), 1);
        assert!(requires_replace(&Value::Null, &proposed, &["name"]).is_empty());
    }

    #[test]
    fn computed_values_go_unknown_only_when_a_trigger_changes() {
        let mut prior = proposed_create();
        prior.set_attr("id", Value::from("101"));
        let mut planned = prior.clone();
        mark_unknown_if_changed(&mut planned, &prior, &["cores"], &["id"]);
        assert_eq!(planned.get_attr("id").as_str(), Some("101"));
        planned.set_attr("cores", Value::from(3));
        mark_unknown_if_changed(&mut planned, &prior, &["cores"], &["id"]);
        assert_eq!(planned.get_attr("id"), &Value::Unknown);
    }
}
