//! The forms this crate sends, checked against PVE's own API schema
//! (`shared/pve/api-schema-full.json`, pve-docs' `apidata.js`): every key is a parameter the
//! endpoint declares, every value passes its type and enum. Skipped where the checkout has no
//! `shared/` beside it, as the facts test in `error.rs` is.

use serde_json::Value;

use crate::cluster::ha::{HaResourceSettings, HaState};
use crate::qemu::agent_files::{file_read_query, file_write_form};
use crate::qemu::{ConfigUpdate, MigrateRequest};
use crate::wire::{CdromDrive, Form, Startup};

fn schema() -> Option<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/pve/api-schema-full.json"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        println!("skipped: no PVE API schema at {path}");
        return None;
    };
    Some(serde_json::from_str(&text).unwrap())
}

fn find<'a>(nodes: &'a Value, path: &str) -> Option<&'a Value> {
    nodes.as_array()?.iter().find_map(|node| {
        if node["path"] == path {
            Some(node)
        } else {
            find(&node["children"], path)
        }
    })
}

/// Whether `value`, as sent in a form, passes the declared parameter `rule`.
fn passes(rule: &Value, value: &str) -> bool {
    let type_ok = match rule["type"].as_str() {
        Some("boolean") => value == "0" || value == "1",
        Some("integer") => value.parse::<i64>().is_ok(),
        _ => true,
    };
    let enum_ok = rule["enum"]
        .as_array()
        .is_none_or(|allowed| allowed.iter().any(|a| a == value));
    let length_ok = rule["maxLength"]
        .as_u64()
        .is_none_or(|max| value.chars().count() as u64 <= max);
    type_ok && enum_ok && length_ok
}

/// Checks `form` against the parameters of `method path`.
fn check(schema: &Value, method: &str, path: &str, form: &Form) {
    let endpoint = find(schema, path).unwrap_or_else(|| panic!("{path} not in the schema"));
    let params = &endpoint["info"][method]["parameters"]["properties"];
    assert!(params.is_object(), "{method} {path} not in the schema");
    for (key, value) in form.pairs() {
        // Indexed keys are declared once: `ide2` as `ide[n]`.
        let indexed = format!("{}[n]", key.trim_end_matches(|c: char| c.is_ascii_digit()));
        let rule = match &params[key.as_str()] {
            Value::Null => &params[indexed.as_str()],
            rule => rule,
        };
        assert!(
            rule.is_object(),
            "{method} {path}: PVE has no parameter {key:?}"
        );
        assert!(
            passes(rule, value),
            "{method} {path}: {key}={value:?} does not pass {rule}"
        );
    }
    for (key, rule) in params.as_object().unwrap() {
        let in_path = path.contains(&format!("{{{key}}}"));
        if rule["optional"] != 1 && !in_path {
            assert!(
                form.get(key).is_some(),
                "{method} {path}: required {key} missing"
            );
        }
    }
}

#[test]
fn migrate_forms_match_pve_schema() {
    let Some(schema) = schema() else { return };
    let path = "/nodes/{node}/qemu/{vmid}/migrate";
    check(&schema, "POST", path, &MigrateRequest::to("pve2").to_form());
    let full = MigrateRequest {
        target: "pve3".into(),
        online: false,
        with_local_disks: true,
        targetstorage: Some("local-lvm".into()),
    };
    check(&schema, "POST", path, &full.to_form());
    check(&schema, "GET", path, &Form::new().text("target", "pve2"));
}

#[test]
fn agent_file_forms_match_pve_schema() {
    let Some(schema) = schema() else { return };
    let read = "/nodes/{node}/qemu/{vmid}/agent/file-read";
    check(&schema, "GET", read, &file_read_query("/run/x", None));
    check(
        &schema,
        "GET",
        read,
        &file_read_query("/run/x", Some((7, 4096))),
    );
    let write = "/nodes/{node}/qemu/{vmid}/agent/file-write";
    check(
        &schema,
        "POST",
        write,
        &file_write_form("/etc/x", b"hello").unwrap(),
    );
    let largest = vec![0xff; crate::qemu::FILE_WRITE_MAX_BYTES];
    check(
        &schema,
        "POST",
        write,
        &file_write_form("/etc/x", &largest).unwrap(),
    );
}

#[test]
fn ha_resource_forms_match_pve_schema() {
    let Some(schema) = schema() else { return };
    for state in [
        HaState::Started,
        HaState::Stopped,
        HaState::Enabled,
        HaState::Disabled,
        HaState::Ignored,
    ] {
        let settings = HaResourceSettings {
            state: Some(state),
            comment: Some("edge".into()),
            max_restart: Some(1),
            max_relocate: Some(1),
            failback: Some(true),
            ..HaResourceSettings::default()
        };
        check(
            &schema,
            "POST",
            "/cluster/ha/resources",
            &settings.add_form("vm:100"),
        );
        check(
            &schema,
            "PUT",
            "/cluster/ha/resources/{sid}",
            &settings.update_form(&["comment"], Some("abc")),
        );
    }
    check(
        &schema,
        "GET",
        "/cluster/ha/resources",
        &Form::new().text("type", "vm"),
    );
}

#[test]
fn config_forms_match_pve_schema() {
    let Some(schema) = schema() else { return };
    let update = ConfigUpdate::new()
        .onboot(true)
        .startup(&Startup {
            order: Some(1),
            up: Some(30),
            down: None,
        })
        .cdrom("ide2", &CdromDrive::none());
    check(
        &schema,
        "PUT",
        "/nodes/{node}/qemu/{vmid}/config",
        &update.to_form(),
    );
    check(
        &schema,
        "POST",
        "/nodes/{node}/qemu/{vmid}/config",
        &update.to_form(),
    );
}

#[test]
fn the_check_refuses_what_pve_would() {
    let Some(schema) = schema() else { return };
    let path = "/nodes/{node}/qemu/{vmid}/migrate";
    let refused =
        |form: Form| std::panic::catch_unwind(|| check(&schema, "POST", path, &form)).is_err();
    let target = || Form::new().text("target", "pve2");
    assert!(
        refused(target().bool("with_local_disks", true)),
        "unknown key"
    );
    assert!(refused(target().text("online", "true")), "boolean not 0/1");
    assert!(
        refused(target().text("migration_type", "fast")),
        "not in the enum"
    );
    assert!(refused(Form::new().bool("online", true)), "target missing");
    assert!(!refused(target()));
}
