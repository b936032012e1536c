//! Our parameter rules against PVE's official API schema dump (`../shared/pve/api-schema.json`,
//! pve-docs 9.1.3). Skips with a message where that file is absent, as on a user's machine.
//! Endpoints the subset lacks (migration, HA) are taken from the whole tree beside it
//! (`api-schema-full.json`), flattened the same way.

use crate::common::skipped;
use pvesim::schema::{self, Format, ParamRule, ParamType};
use serde_json::{Map, Value};

const SCHEMA_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/pve/api-schema.json"
);
const FULL_SCHEMA_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/pve/api-schema-full.json"
);

/// The full tree as the subset lists it: each method's `info` with `path` added.
fn flatten(node: &Value, out: &mut Vec<Value>) {
    if let Some(items) = node.as_array() {
        items.iter().for_each(|item| flatten(item, out));
        return;
    }
    if let Some(info) = node["info"].as_object() {
        for method in info.values() {
            let mut entry = method.clone();
            entry["path"] = node["path"].clone();
            out.push(entry);
        }
    }
    if let Some(children) = node.get("children") {
        flatten(children, out);
    }
}

/// The subset's endpoints, then the full tree's (absent file: none).
fn pve_endpoints(subset: &Value) -> Vec<Value> {
    let mut all = subset["endpoints"]
        .as_array()
        .expect("endpoints array")
        .clone();
    if let Ok(text) = std::fs::read_to_string(FULL_SCHEMA_PATH) {
        let tree: Value = serde_json::from_str(&text).expect("api-schema-full.json is JSON");
        flatten(&tree, &mut all);
    }
    all
}

fn as_f64(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        // Perl schemas sometimes write numbers as strings (`minimum => '0'`).
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn perl_true(value: Option<&Value>) -> bool {
    match value {
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty() && s != "0",
        _ => false,
    }
}

fn compare(ours: &ParamRule, theirs: &Map<String, Value>, at: &str, mismatches: &mut Vec<String>) {
    let mut differ = |what: &str, our: String, their: String| {
        if our != their {
            mismatches.push(format!("{at}: {what}: ours {our}, PVE {their}"));
        }
    };
    if let Some(alias) = ours.alias {
        differ(
            "alias",
            alias.into(),
            theirs
                .get("alias")
                .and_then(Value::as_str)
                .unwrap_or("-")
                .into(),
        );
        differ(
            "keyAlias",
            ours.key_alias.unwrap_or("-").into(),
            theirs
                .get("keyAlias")
                .and_then(Value::as_str)
                .unwrap_or("-")
                .into(),
        );
        return;
    }
    let their_type = theirs.get("type").and_then(Value::as_str).unwrap_or("-");
    differ("type", ours.ty.as_str().into(), their_type.into());
    // PVE treats a property-string key that is its format's default key as optional only if
    // declared so.
    differ(
        "optional",
        ours.optional.to_string(),
        perl_true(theirs.get("optional")).to_string(),
    );
    differ(
        "default_key",
        ours.default_key.to_string(),
        perl_true(theirs.get("default_key")).to_string(),
    );
    let number = |v: Option<f64>| v.map_or("-".to_string(), |n| n.to_string());
    differ(
        "minimum",
        number(ours.minimum),
        number(theirs.get("minimum").and_then(as_f64)),
    );
    differ(
        "maximum",
        number(ours.maximum),
        number(theirs.get("maximum").and_then(as_f64)),
    );
    differ(
        "maxLength",
        ours.max_length.map_or("-".into(), |n| n.to_string()),
        theirs
            .get("maxLength")
            .and_then(as_f64)
            .map_or("-".into(), |n| n.to_string()),
    );
    differ(
        "minLength",
        ours.min_length.map_or("-".into(), |n| n.to_string()),
        theirs
            .get("minLength")
            .and_then(as_f64)
            .map_or("-".into(), |n| n.to_string()),
    );
    differ(
        "pattern",
        ours.pattern.unwrap_or("-").into(),
        theirs
            .get("pattern")
            .and_then(Value::as_str)
            .unwrap_or("-")
            .into(),
    );
    differ(
        "requires",
        ours.requires.unwrap_or("-").into(),
        theirs
            .get("requires")
            .and_then(Value::as_str)
            .unwrap_or("-")
            .into(),
    );
    let their_enum = match theirs.get("enum") {
        Some(Value::Array(values)) => values
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".into(),
    };
    differ(
        "enum",
        ours.enumeration.map_or("-".into(), |e| e.join(",")),
        their_enum,
    );
    let their_types = match theirs.get("instance-types") {
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".into(),
    };
    differ(
        "instance-types",
        ours.instance_types.map_or("-".into(), |t| t.join(",")),
        their_types,
    );
    if let Some(default) = ours.default {
        let their_default = match theirs.get("default") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => "-".into(),
            Some(other) => other.to_string(),
        };
        differ("default", default.into(), their_default);
    }
    match (ours.format, theirs.get("format")) {
        (None, None) => {}
        (Some(Format::Named(name)), Some(Value::String(their))) => {
            differ("format", name.into(), their.clone())
        }
        (Some(Format::Keys(keys)), Some(Value::Object(their_keys))) => {
            compare_keys(keys, their_keys, at, mismatches);
        }
        (ours_format, their_format) => mismatches.push(format!(
            "{at}: format: ours {ours_format:?}, PVE {}",
            their_format.map_or("-".into(), |f| f
                .to_string()
                .chars()
                .take(80)
                .collect::<String>())
        )),
    }
}

fn compare_keys(
    ours: &[ParamRule],
    theirs: &Map<String, Value>,
    at: &str,
    mismatches: &mut Vec<String>,
) {
    for rule in ours {
        match theirs.get(rule.name).and_then(Value::as_object) {
            Some(their) => compare(rule, their, &format!("{at}.{}", rule.name), mismatches),
            None => mismatches.push(format!("{at}.{}: key not in PVE's format", rule.name)),
        }
    }
    for name in theirs.keys() {
        if !ours.iter().any(|r| r.name == name) {
            mismatches.push(format!("{at}.{name}: PVE key missing from our format"));
        }
    }
}

/// Where the description states the index range as "(n is 0 to N)", it must match ours.
fn check_index_range(
    rule: &ParamRule,
    theirs: &Map<String, Value>,
    at: &str,
    mismatches: &mut Vec<String>,
) -> bool {
    let description = theirs
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    let Some(rest) = description.split("(n is 0 to ").nth(1) else {
        return false;
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if !rest[digits.len()..].starts_with(')') {
        return false; // e.g. usb: "(n is 0 to 4, for machine version >= 7.1 … up to 14)"
    }
    let last: u32 = digits.parse().expect("index digits");
    if rule.index_count != last + 1 {
        mismatches.push(format!(
            "{at} {}: indexes 0..{} but PVE says 0 to {last}",
            rule.name, rule.index_count
        ));
    }
    true
}

#[test]
fn our_rules_match_pve_api_schema() {
    let Ok(text) = std::fs::read_to_string(SCHEMA_PATH) else {
        skipped("../shared/pve/api-schema.json not present (user machine)");
        return;
    };
    let dump: Value = serde_json::from_str(&text).expect("api-schema.json is JSON");
    let all_endpoints = pve_endpoints(&dump);
    let their_endpoints = &all_endpoints;
    let subset_endpoints = dump["endpoints"].as_array().expect("endpoints array");
    let mut mismatches = Vec::new();
    let mut checked_params = 0;
    let mut checked_ranges = 0;
    for ours in schema::endpoints() {
        let at = format!("{} {}", ours.method, ours.template);
        let Some(theirs) = their_endpoints
            .iter()
            .find(|e| e["method"] == ours.method && e["path"] == ours.template)
        else {
            mismatches.push(format!("{at}: endpoint not in PVE's schema"));
            continue;
        };
        let empty = Map::new();
        let their_params = theirs["parameters"]["properties"]
            .as_object()
            .unwrap_or(&empty);
        for rule in &ours.params {
            checked_params += 1;
            match their_params.get(rule.name).and_then(Value::as_object) {
                Some(their) => {
                    compare(rule, their, &format!("{at} {}", rule.name), &mut mismatches);
                    if check_index_range(rule, their, &at, &mut mismatches) {
                        checked_ranges += 1;
                    }
                }
                None => {
                    mismatches.push(format!("{at} {}: parameter not in PVE's schema", rule.name))
                }
            }
        }
        for name in their_params.keys() {
            if ours.params.iter().all(|r| r.name != name) {
                mismatches.push(format!("{at} {name}: PVE accepts it, we reject it"));
            }
        }
    }
    for theirs in subset_endpoints {
        let (method, path) = (
            theirs["method"].as_str().unwrap_or(""),
            theirs["path"].as_str().unwrap_or(""),
        );
        if schema::endpoint(method, path).is_none() {
            mismatches.push(format!(
                "{method} {path}: in the schema subset but not served"
            ));
        }
    }
    // ide, sata, scsi, virtio, parallel, serial on create and both config updates.
    assert_eq!(checked_ranges, 18, "index ranges checked");
    assert!(
        checked_params > 400,
        "only {checked_params} parameters checked"
    );
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    // The types the rules use must be the four PVE uses for parameters.
    let _ = ParamType::Boolean;
}
