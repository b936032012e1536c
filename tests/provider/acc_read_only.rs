//! Acceptance: the real terraform refuses, at validate, a configuration that sets a read-only
//! attribute of any resource or data source, pointed at its line. The configuration is
//! written from `terraform providers schema -json`, so a read-only attribute added later is
//! tried too. Without the refusal, validate and plan passed and the apply failed with
//! "Provider produced inconsistent result after apply".

use crate::support;

use support::{Target, Workspace, acceptance_enabled, flat};

const SUMMARY: &str = "Invalid Configuration for Read-Only Attribute";

/// An HCL value of a schema attribute's type (`type` or `nested_type`).
fn hcl_value(attribute: &serde_json::Value) -> String {
    if let Some(nested) = attribute.get("nested_type") {
        return match nested["nesting_mode"].as_str() {
            Some("single") => "{}".to_owned(),
            _ => "[{}]".to_owned(),
        };
    }
    fn of(ty: &serde_json::Value) -> String {
        match ty {
            serde_json::Value::String(name) => match name.as_str() {
                "number" => "1".to_owned(),
                "bool" => "true".to_owned(),
                _ => "\"x\"".to_owned(),
            },
            serde_json::Value::Array(parts) => match parts[0].as_str() {
                Some("list" | "set") => format!("[{}]", of(&parts[1])),
                Some("map") => format!("{{ k = {} }}", of(&parts[1])),
                _ => "{}".to_owned(),
            },
            _ => "null".to_owned(),
        }
    }
    of(&attribute["type"])
}

/// Whether only the provider sets the attribute.
fn read_only(attribute: &serde_json::Value) -> bool {
    let flag = |name: &str| attribute[name].as_bool() == Some(true);
    flag("computed") && !flag("optional") && !flag("required")
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_attributes_are_refused_at_validate_on_their_line() {
    if !acceptance_enabled("read_only_attributes_are_refused_at_validate_on_their_line") {
        return;
    }
    // Validate configures nothing, so nothing is contacted.
    let ws = Workspace::new(Target {
        endpoint: "https://127.0.0.1:9".into(),
        token: "validate@pve!read-only=unused".into(),
        ca_pem: None,
    });
    ws.write_main_tf(&Workspace::preamble());
    ws.init().await;
    let out = ws
        .terraform(&["providers", "schema", "-json"])
        .await
        .success();
    let schema: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
    let schemas = &schema["provider_schemas"]["registry.terraform.io/proxyvm/proxmox"];

    let mut hcl = Workspace::preamble();
    // (line, attribute) of every read-only attribute the configuration sets.
    let mut set = Vec::new();
    for (kind, key) in [
        ("resource", "resource_schemas"),
        ("data", "data_source_schemas"),
    ] {
        for (type_name, schema) in schemas[key].as_object().unwrap() {
            let attributes = schema["block"]["attributes"].as_object().unwrap();
            hcl.push_str(&format!("\n{kind} \"{type_name}\" \"all\" {{\n"));
            for (name, attribute) in attributes {
                if attribute["required"] == true {
                    hcl.push_str(&format!("  {name} = {}\n", hcl_value(attribute)));
                } else if read_only(attribute) {
                    set.push((hcl.lines().count() + 1, name.clone()));
                    hcl.push_str(&format!("  {name} = {}\n", hcl_value(attribute)));
                }
            }
            hcl.push_str("}\n");
        }
    }
    for expected in [
        "id",
        "ipv4_address",
        "seed_hash",
        "seed_volume",
        "current_node",
        "vms",
    ] {
        assert!(
            set.iter().any(|(_, name)| name == expected),
            "{expected}: {set:?}"
        );
    }
    ws.write_main_tf(&hcl);
    let out = ws.terraform(&["validate", "-no-color"]).await.failure();
    let text = flat(&out.all_text());
    assert_eq!(text.matches(SUMMARY).count(), set.len(), "{hcl}\n{text}");
    for (line, name) in &set {
        // Terraform quotes the line the diagnostic points at.
        let quoted = format!("on main.tf line {line}, in ");
        let source = format!("{line}: {name} = ");
        assert!(
            text.contains(&quoted) && text.contains(&source),
            "`{name}` (line {line}) not pointed at:\n{hcl}\n{text}"
        );
    }
    assert!(
        !text.contains("Missing required argument") && !text.contains("Incorrect attribute"),
        "the configuration is valid but for the read-only values:\n{text}"
    );
}
