//! `/cluster/ha/rules[/{rule}]` (pve-ha-manager 5.2.0 `src/PVE/API2/HA/Rules.pm`): list,
//! read, create, update and delete HA rules, with PVE's checks and texts. A rule set must
//! stay feasible (`ha_rules::check_feasibility` against the nodes the CRM knows); the
//! listing shows each infeasible rule's `errors`.

use serde_json::{Map, Value, json};

use crate::api::require;
use crate::call::{ApiError, ApiResult, Call, Reply};
use crate::ha_rules::{
    HaRule, RuleErrors, RuleType, check_feasibility, decode_nodes, decode_resources, encode_nodes,
};
use crate::world::World;

/// `$get_api_ha_rule`: the section with `rule`, the file's `digest`, its `order`, and the
/// rule's feasibility errors when it has any.
fn rule_json(world: &World, id: &str, rule: &HaRule, errors: Option<&Vec<String>>) -> Value {
    let rules = &world.ha.rules;
    let mut row = Map::new();
    row.insert("rule".into(), json!(id));
    row.insert("type".into(), json!(rule.kind.as_str()));
    row.insert("digest".into(), json!(rules.digest()));
    row.insert("order".into(), json!(rules.order(id)));
    let resources: Vec<&str> = rule.resources.iter().map(String::as_str).collect();
    row.insert("resources".into(), json!(resources.join(",")));
    if let Some(nodes) = &rule.nodes {
        row.insert("nodes".into(), json!(encode_nodes(nodes)));
    }
    if let Some(strict) = rule.strict {
        row.insert("strict".into(), json!(i32::from(strict)));
    }
    if let Some(affinity) = &rule.affinity {
        row.insert("affinity".into(), json!(affinity));
    }
    if rule.disable {
        row.insert("disable".into(), json!(1));
    }
    if let Some(comment) = &rule.comment {
        row.insert("comment".into(), json!(comment));
    }
    if let Some(errors) = errors {
        row.insert("errors".into(), json!({ "resources": errors }));
    }
    Value::Object(row)
}

fn feasibility(world: &World, rules: &[(String, HaRule)]) -> RuleErrors {
    check_feasibility(rules, &world.ha.crm_nodes)
}

/// `index`: every rule in file order, filtered by `type` and by a `resource` it names.
pub fn list(world: &World, call: &Call) -> ApiResult {
    require(world, "/", "Sys.Audit")?;
    let rules = &world.ha.rules.rules;
    let errors = feasibility(world, rules);
    let kind = call.str("type");
    let resource = call.str("resource");
    let rows: Vec<Value> = rules
        .iter()
        .filter(|(_, r)| kind.as_deref().is_none_or(|k| k == r.kind.as_str()))
        .filter(|(_, r)| {
            resource
                .as_ref()
                .is_none_or(|sid| r.resources.contains(sid))
        })
        .map(|(id, r)| rule_json(world, id, r, errors.get(id)))
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

/// `read_rule`.
pub fn read(world: &World, call: &Call) -> ApiResult {
    require(world, "/", "Sys.Audit")?;
    let id = call.path_str("rule");
    let rules = &world.ha.rules;
    let rule = rules
        .get(id)
        .ok_or_else(|| ApiError::die(format!("no such ha rule '{id}'")))?;
    let errors = feasibility(world, &rules.rules);
    Ok(Reply::data(rule_json(world, id, rule, errors.get(id))))
}

/// `$assert_valid_resources_param`: some resources, each an HA resource (`ignored` ones
/// too, `service_is_configured`).
fn check_resources(world: &World, rule: &HaRule) -> Result<(), String> {
    if rule.resources.is_empty() {
        return Err("no resources were specified".into());
    }
    let unmanaged: Vec<&str> = rule
        .resources
        .iter()
        .filter(|sid| !world.ha.resources.contains_key(*sid))
        .map(String::as_str)
        .collect();
    if !unmanaged.is_empty() {
        return Err(format!(
            "cannot use unmanaged resource(s) {}.",
            unmanaged.join(", ")
        ));
    }
    Ok(())
}

/// `$assert_valid_nodes_param`: some nodes, each a cluster node.
fn check_nodes(world: &World, rule: &HaRule) -> Result<(), String> {
    let nodes = rule.nodes.as_ref().map(|n| n.keys()).into_iter().flatten();
    let nodes: Vec<&String> = nodes.collect();
    if nodes.is_empty() {
        return Err("no nodes were specified".into());
    }
    let missing: Vec<&str> = nodes
        .into_iter()
        .filter(|n| world.node(n).is_none())
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "cannot use non-existent node(s) {}.",
            missing.join(", ")
        ));
    }
    Ok(())
}

/// `$assert_feasibility`: PVE raises a 400 exception inside `lock_ha_domain`, which turns
/// it into text: `<prefix>: 400 Rule 'x' is invalid.` and a `resources: …` line.
fn check_rule_feasible(world: &World, rules: &[(String, HaRule)], id: &str) -> Result<(), String> {
    match feasibility(world, rules).get(id) {
        Some(messages) => Err(format!(
            "400 Rule '{id}' is invalid.\nresources: {}\n",
            messages.join(", ")
        )),
        None => Ok(()),
    }
}

/// `check_config` of the given options onto `rule` (the schema has checked each value).
fn apply_options(rule: &mut HaRule, call: &Call) {
    if let Some(text) = call.str("resources") {
        rule.resources = decode_resources(&text);
    }
    if let Some(text) = call.str("nodes") {
        rule.nodes = Some(decode_nodes(&text));
    }
    if let Some(strict) = call.bool("strict") {
        rule.strict = Some(strict);
    }
    if let Some(affinity) = call.str("affinity") {
        rule.affinity = Some(affinity);
    }
    // `delete $param->{disable} if !$param->{disable}`: only `disable=1` is taken.
    if call.bool("disable") == Some(true) {
        rule.disable = true;
    }
    if let Some(comment) = call.str("comment") {
        rule.comment = Some(comment);
    }
}

/// `create_rule`.
pub fn create(world: &mut World, call: &Call) -> ApiResult {
    require(world, "/", "Sys.Console")?;
    crate::api::check_quorum(world)?;
    let id = call.str("rule").unwrap_or_default();
    let kind = call
        .str("type")
        .and_then(|t| RuleType::parse(&t))
        .ok_or_else(|| ApiError::die("unknown section type"))?;
    let mut rule = HaRule::new(kind);
    apply_options(&mut rule, call);
    let fail = |message: String| ApiError::die(format!("create ha rule failed: {message}"));
    if world.ha.rules.get(&id).is_some() {
        return Err(fail(format!("HA rule '{id}' already defined")));
    }
    check_resources(world, &rule).map_err(fail)?;
    if call.params.contains_key("nodes") {
        check_nodes(world, &rule).map_err(fail)?;
    }
    let mut candidate = world.ha.rules.clone();
    candidate.insert(id.clone(), rule);
    check_rule_feasible(world, &candidate.rules, &id).map_err(fail)?;
    world.ha.rules = candidate;
    schedule_round(world);
    Ok(Reply::data(Value::Null))
}

/// `update_rule`.
pub fn update(world: &mut World, call: &Call) -> ApiResult {
    require(world, "/", "Sys.Console")?;
    let id = call.path_str("rule").to_string();
    let fail = |message: String| ApiError::die(format!("update HA rules failed: {message}"));
    let rules = &world.ha.rules;
    if call.str("digest").is_some_and(|d| d != rules.digest()) {
        return Err(fail(
            "detected modified configuration - file changed by other user? Try again.".into(),
        ));
    }
    let mut rule = rules
        .get(&id)
        .cloned()
        .ok_or_else(|| fail(format!("HA rule '{id}' does not exist")))?;
    // `check_config` with the rule's own type: `type` passes only when it is that type.
    if call.str("type").as_deref() != Some(rule.kind.as_str()) {
        return Err(fail("unexpected property 'type'".into()));
    }
    apply_options(&mut rule, call);
    if call.params.contains_key("resources") {
        check_resources(world, &rule).map_err(fail)?;
    }
    if call.params.contains_key("nodes") {
        check_nodes(world, &rule).map_err(fail)?;
    }
    let delete = call.str("delete").unwrap_or_default();
    for key in crate::schema::split_list(&delete) {
        delete_option(&mut rule, call, key).map_err(fail)?;
    }
    let mut candidate = world.ha.rules.clone();
    // The digest is the file's SHA-1: it changes only with the content.
    if let Some(slot) = candidate.get_mut(&id).filter(|slot| **slot != rule) {
        *slot = rule;
        candidate.generation += 1;
    }
    check_rule_feasible(world, &candidate.rules, &id).map_err(fail)?;
    world.ha.rules = candidate;
    schedule_round(world);
    Ok(Reply::data(Value::Null))
}

/// `PVE::SectionConfig::delete_from_config` with the rule type's options.
fn delete_option(rule: &mut HaRule, call: &Call, key: &str) -> Result<(), String> {
    let Some((_, optional)) = rule.kind.options().iter().find(|(k, _)| *k == key) else {
        return Err(format!("no such option '{key}'"));
    };
    if !optional {
        return Err(format!("unable to delete required option '{key}'"));
    }
    // A false `disable` was dropped before `check_config`, so it is not "set".
    let given = match key {
        "disable" => call.bool(key) == Some(true),
        _ => call.params.contains_key(key),
    };
    if given {
        return Err(format!(
            "cannot set and delete property '{key}' at the same time!"
        ));
    }
    match key {
        "strict" => rule.strict = None,
        "disable" => rule.disable = false,
        _ => rule.comment = None,
    }
    Ok(())
}

/// `delete_rule`: a rule that does not exist is no error.
pub fn delete(world: &mut World, call: &Call) -> ApiResult {
    require(world, "/", "Sys.Console")?;
    let id = call.path_str("rule");
    if world.ha.rules.get(id).is_some() {
        world.ha.rules.remove(id);
        schedule_round(world);
    }
    Ok(Reply::data(Value::Null))
}

/// The CRM reads the changed rules on its next round.
fn schedule_round(world: &mut World) {
    let delay = std::time::Duration::from_millis(world.timings.ha_delay_ms);
    world.ha.schedule(delay);
}
