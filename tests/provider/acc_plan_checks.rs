//! Acceptance: every mistake is refused before apply, on the attribute at fault. A table of
//! invalid configurations (provider block and resource) is run through `terraform validate`
//! and `terraform plan`, each asserting the stage that refuses it, that the diagnostic points
//! at the attribute's line, and that pve-sim saw no write. A no-change plan makes no request
//! beyond its refresh; the first errors users meet (certificate, refused connection,
//! refused token) carry their hints.

use crate::support;

use serde_json::Value;
use support::{SimClient, Workspace, acceptance_enabled, start_sim};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    Validate,
    Plan,
}

struct Case {
    label: &'static str,
    /// Extra lines in the provider block.
    provider: &'static [(&'static str, &'static str)],
    /// Resource attributes, overriding the valid defaults.
    resource: &'static [(&'static str, &'static str)],
    /// The attribute the diagnostic must point at.
    attribute: &'static str,
    stage: Stage,
}

const fn case(
    label: &'static str,
    provider: &'static [(&'static str, &'static str)],
    resource: &'static [(&'static str, &'static str)],
    attribute: &'static str,
    stage: Stage,
) -> Case {
    Case {
        label,
        provider,
        resource,
        attribute,
        stage,
    }
}

use Stage::{Plan, Validate};

const CASES: &[Case] = &[
    // The provider block, at validate.
    case(
        "http endpoint",
        &[("endpoint", "\"http://pve1:8006\"")],
        &[],
        "endpoint",
        Validate,
    ),
    case(
        "endpoint with a path",
        &[("endpoint", "\"https://pve1:8006/foo\"")],
        &[],
        "endpoint",
        Validate,
    ),
    case(
        "endpoint not a URL",
        &[("endpoint", "\"pve1 port 8006\"")],
        &[],
        "endpoint",
        Validate,
    ),
    case(
        "endpoint with credentials",
        &[("endpoint", "\"https://root:pw@pve1:8006\"")],
        &[],
        "endpoint",
        Validate,
    ),
    case(
        "token without secret",
        &[("api_token", "\"terraform@pve!provider\"")],
        &[],
        "api_token",
        Validate,
    ),
    case(
        "token with empty secret",
        &[("api_token", "\"terraform@pve!provider=\"")],
        &[],
        "api_token",
        Validate,
    ),
    case(
        "token without realm",
        &[("api_token", "\"terraform!provider=abc\"")],
        &[],
        "api_token",
        Validate,
    ),
    case(
        "CA not PEM",
        &[("ca_cert", "\"not a certificate\"")],
        &[],
        "ca_cert",
        Validate,
    ),
    case(
        "bad seed storage id",
        &[("seed_storage", "\"bad storage!\"")],
        &[],
        "seed_storage",
        Validate,
    ),
    case(
        "bad clone storage id",
        &[("clone_storage", "\"-x\"")],
        &[],
        "clone_storage",
        Validate,
    ),
    case(
        "VMID range below PVE's",
        &[("vmid_range_start", "50")],
        &[],
        "vmid_range_start",
        Validate,
    ),
    case(
        "empty VMID range",
        &[("vmid_range_start", "200000"), ("vmid_range_end", "100000")],
        &[],
        "vmid_range_start",
        Validate,
    ),
    case(
        "upper-case fleet",
        &[("fleet", "\"Prod\"")],
        &[],
        "fleet",
        Validate,
    ),
    // The resource, at validate.
    case(
        "name with underscore",
        &[],
        &[("name", "\"edge_1\"")],
        "name",
        Validate,
    ),
    case("empty name", &[], &[("name", "\"\"")], "name", Validate),
    case("empty node", &[], &[("node", "\"\"")], "node", Validate),
    case(
        "empty template",
        &[],
        &[("template", "\"\"")],
        "template",
        Validate,
    ),
    case("VMID below 100", &[], &[("vmid", "50")], "vmid", Validate),
    case("no cores", &[], &[("cores", "0")], "cores", Validate),
    case(
        "too little memory",
        &[],
        &[("memory", "8")],
        "memory",
        Validate,
    ),
    case("no disk", &[], &[("disk_gib", "0")], "disk_gib", Validate),
    case(
        "VLAN out of range",
        &[],
        &[("vlan_tag", "5000")],
        "vlan_tag",
        Validate,
    ),
    case(
        "bad bridge name",
        &[],
        &[("bridge", "\"1vmbr\"")],
        "bridge",
        Validate,
    ),
    case(
        "upper-case tag",
        &[],
        &[("tags", "[\"Web\"]")],
        "tags",
        Validate,
    ),
    case(
        "our own tag",
        &[],
        &[("tags", "[\"proxyvm\"]")],
        "tags",
        Validate,
    ),
    case(
        "our own fleet tag",
        &[],
        &[("tags", "[\"proxyvm.fleet.x\"]")],
        "tags",
        Validate,
    ),
    case(
        "tag with a space",
        &[],
        &[("tags", "[\"a b\"]")],
        "tags",
        Validate,
    ),
    case(
        "user_data not cloud-config",
        &[],
        &[("user_data", "\"packages: [nginx]\"")],
        "user_data",
        Validate,
    ),
    case(
        "network_config not YAML",
        &[],
        &[("network_config", "\"{\"")],
        "network_config",
        Validate,
    ),
    case(
        "bad resource seed storage id",
        &[],
        &[("seed_storage", "\"x y\"")],
        "seed_storage",
        Validate,
    ),
    case(
        "zero create timeout",
        &[],
        &[("timeouts", "{ create = \"0s\" }")],
        "timeouts",
        Validate,
    ),
    case(
        "timeout not a duration",
        &[],
        &[("timeouts", "{ delete = \"soon\" }")],
        "timeouts",
        Validate,
    ),
    // The resource, at plan, against the cluster.
    case(
        "template typo",
        &[],
        &[("template", "\"debian-13-prxy\"")],
        "template",
        Plan,
    ),
    case(
        "template is a plain VM",
        &[],
        &[("template", "\"dns1\"")],
        "template",
        Plan,
    ),
    case(
        "template VMID of nothing",
        &[],
        &[("template", "\"4242\"")],
        "template",
        Plan,
    ),
    case(
        "template on another node's local disk",
        &[],
        &[("node", "\"pve1\""), ("template", "\"local-tpl\"")],
        "template",
        Plan,
    ),
    case(
        "node not in the cluster",
        &[],
        &[("node", "\"pve9\"")],
        "node",
        Plan,
    ),
    case("node offline", &[], &[("node", "\"pve4\"")], "node", Plan),
    case(
        "seed storage missing",
        &[],
        &[("seed_storage", "\"nosuch\"")],
        "seed_storage",
        Plan,
    ),
    case(
        "seed storage without ISO",
        &[],
        &[("seed_storage", "\"disks-only\"")],
        "seed_storage",
        Plan,
    ),
    // Not in the resource's configuration: Terraform can point only at its block.
    case(
        "provider's seed storage without ISO",
        &[("seed_storage", "\"disks-only\"")],
        &[],
        "resource",
        Plan,
    ),
    case(
        "seed storage disabled",
        &[],
        &[("seed_storage", "\"disabled-iso\"")],
        "seed_storage",
        Plan,
    ),
    case(
        "clone storage missing",
        &[],
        &[("clone_storage", "\"nosuch\"")],
        "clone_storage",
        Plan,
    ),
    case(
        "clone storage without images",
        &[],
        &[("clone_storage", "\"iso-only\"")],
        "clone_storage",
        Plan,
    ),
    case("pool missing", &[], &[("pool", "\"nosuch\"")], "pool", Plan),
    case(
        "bridge missing",
        &[],
        &[("bridge", "\"vmbr9\"")],
        "bridge",
        Plan,
    ),
    case(
        "VMID of the template",
        &[],
        &[("vmid", "9000")],
        "vmid",
        Plan,
    ),
    case(
        "VMID of a foreign VM",
        &[],
        &[("vmid", "100")],
        "vmid",
        Plan,
    ),
    case(
        "disk below the template's",
        &[],
        &[("disk_gib", "2")],
        "disk_gib",
        Plan,
    ),
];

fn world() -> pvesim::SimConfig {
    let mut config = pvesim::SimConfig::default();
    config.nodes.push(pvesim::NodeConfig {
        name: "pve4".into(),
        online: false,
        ..pvesim::NodeConfig::default()
    });
    for (id, content, enabled) in [
        ("iso-only", "iso", true),
        ("disks-only", "images", true),
        ("disabled-iso", "iso", false),
    ] {
        config.storages.push(pvesim::StorageConfig {
            id: id.into(),
            plugin_type: "lvmthin".into(),
            content: vec![content.into()],
            shared: false,
            enabled,
            has_path: content == "iso",
            ..pvesim::StorageConfig::default()
        });
    }
    // A template whose disk is on storage only its own node has.
    let mut template = config
        .vms
        .iter()
        .find(|vm| vm.vmid == 9000)
        .unwrap()
        .clone();
    template.vmid = 9100;
    template.node = "pve2".into();
    template.config.insert("name".into(), "local-tpl".into());
    template.config.insert(
        "scsi0".into(),
        "disks-only:base-9100-disk-0,iothread=1,size=4G".into(),
    );
    template.config.insert(
        "net0".into(),
        "virtio=BC:24:11:9A:01:00,bridge=vmbr0".into(),
    );
    template.config.insert(
        "smbios1".into(),
        "uuid=6f1c2a9e-3c1b-4f7e-9a0d-2b9f0c1d9100".into(),
    );
    template.config.remove("vmgenid");
    config.vms.push(template);
    config
}

fn render(case: &Case) -> String {
    let mut provider = vec![("seed_storage", "\"proxy-seeds\"")];
    for (key, value) in case.provider {
        provider.retain(|(k, _)| k != key);
        provider.push((key, value));
    }
    let mut resource = vec![
        ("name", "\"edge-0\""),
        ("node", "\"pve1\""),
        ("template", "\"debian-13-proxy\""),
    ];
    for (key, value) in case.resource {
        resource.retain(|(k, _)| k != key);
        resource.push((key, value));
    }
    let lines = |attrs: &[(&str, &str)]| {
        attrs
            .iter()
            .map(|(k, v)| format!("  {k} = {v}\n"))
            .collect::<String>()
    };
    format!(
        "{}\nprovider \"proxmox\" {{\n{}}}\n\nresource \"proxmox_proxy_vm\" \"edge\" {{\n{}}}\n",
        Workspace::preamble(),
        lines(&provider),
        lines(&resource)
    )
}

/// The error diagnostics of `terraform validate -json` or `terraform plan -json`.
fn errors(stdout: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for line in stdout.lines() {
        let Ok(json) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        // validate -json prints one document with a list; plan -json prints one per line.
        let found: Vec<Value> = match json.get("diagnostics") {
            Some(list) => list.as_array().cloned().unwrap_or_default(),
            None => json.get("diagnostic").cloned().into_iter().collect(),
        };
        out.extend(found.into_iter().filter(|d| d["severity"] == "error"));
    }
    if out.is_empty()
        && let Ok(json) = serde_json::from_str::<Value>(stdout)
        && let Some(list) = json.get("diagnostics").and_then(Value::as_array)
    {
        out.extend(list.iter().filter(|d| d["severity"] == "error").cloned());
    }
    out
}

fn points_at(diagnostic: &Value, attribute: &str) -> bool {
    let code = diagnostic["snippet"]["code"].as_str().unwrap_or_default();
    if attribute == "resource" {
        return code.starts_with("resource \"proxmox_proxy_vm\"")
            && diagnostic["detail"]
                .as_str()
                .is_some_and(|d| d.contains("the provider's `seed_storage` default"));
    }
    code.trim_start().starts_with(&format!("{attribute} ="))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_invalid_configuration_is_refused_at_its_stage_on_its_attribute() {
    if !acceptance_enabled("every_invalid_configuration_is_refused_at_its_stage_on_its_attribute") {
        return;
    }
    assert!(CASES.len() >= 40, "{} cases", CASES.len());
    let (_sim, target) = start_sim(world()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&render(&case("valid", &[], &[], "", Plan)))
        .await;
    // The valid configuration plans cleanly: every failure below is the case's own.
    ws.terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    let mut failures = Vec::new();
    for case in CASES {
        ws.write_main_tf(&render(case));
        let validate = ws.terraform(&["validate", "-json", "-no-color"]).await;
        let at_validate = errors(&validate.stdout());
        let (stage, found) = if at_validate.is_empty() {
            let plan = ws
                .terraform(&["plan", "-json", "-no-color", "-input=false"])
                .await;
            (Plan, errors(&plan.stdout()))
        } else {
            (Validate, at_validate)
        };
        if found.is_empty() {
            failures.push(format!("{}: accepted at plan", case.label));
            continue;
        }
        if stage != case.stage {
            failures.push(format!(
                "{}: refused at {stage:?}, expected {:?}: {found:?}",
                case.label, case.stage
            ));
        }
        if !found.iter().any(|d| points_at(d, case.attribute)) {
            failures.push(format!(
                "{}: no diagnostic points at `{}`: {found:?}",
                case.label, case.attribute
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let writes = sim.writes_since(0).await;
    assert!(writes.is_empty(), "{writes:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_no_change_plan_asks_nothing_beyond_its_refresh() {
    if !acceptance_enabled("a_no_change_plan_asks_nothing_beyond_its_refresh") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "fleet" {{
  count            = 30
  name             = "quiet-${{count.index}}"
  node             = "pve${{count.index % 3 + 1}}"
  template         = "debian-13-proxy"
  bridge           = "vmbr0"
  pool             = "proxies"
  wait_for         = "none"
  # Not waiting, the seed would leave at the next apply (an in-place change, #30); these
  # plans must stay empty.
  seed_lifetime    = "vm"
}}
"#,
        Workspace::preamble()
    ))
    .await;
    ws.terraform(&["apply", "-auto-approve", "-input=false", "-parallelism=10"])
        .await
        .success();
    let count = |entries: &[Value]| entries.len();
    let before = sim.journal().await.len();
    ws.terraform(&["plan", "-refresh-only", "-input=false", "-no-color"])
        .await
        .success();
    let refresh_only = count(&sim.journal().await[before..]);
    let before = sim.journal().await.len();
    let plan = ws
        .terraform(&["plan", "-input=false", "-no-color"])
        .await
        .success();
    assert!(plan.stdout().contains("No changes."), "{}", plan.stdout());
    let planned = count(&sim.journal().await[before..]);
    assert_eq!(
        planned, refresh_only,
        "a no-change plan made requests beyond its refresh"
    );
    ws.destroy().await.success();
}

fn one_vm() -> String {
    format!(
        "{}\nresource \"proxmox_proxy_vm\" \"edge\" {{\n  name         = \
            \"edge-0\"\n  node         = \"pve1\"\n  template     = \
            \"debian-13-proxy\"\n  seed_storage = \"proxy-seeds\"\n}}\n",
        Workspace::preamble()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_errors_users_meet_carry_their_hints() {
    if !acceptance_enabled("the_first_errors_users_meet_carry_their_hints") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let (_other, other_target) = start_sim(pvesim::SimConfig::default()).await;

    // A CA that is valid PEM but not the cluster's: refused at plan, naming the fix.
    let mut ws = Workspace::new(target.clone());
    ws.set_env(
        "PROXMOX_VE_CA_CERT",
        other_target.ca_pem.as_deref().unwrap(),
    );
    ws.init_with(&one_vm()).await;
    let out = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .failure();
    let text = out.all_text();
    assert!(text.contains("certificate is not trusted"), "{text}");
    assert!(
        text.contains("ca_cert") && text.contains("PROXMOX_VE_CA_CERT"),
        "{text}"
    );
    assert!(text.contains("/etc/pve/pve-root-ca.pem"), "{text}");
    assert!(text.contains("insecure"), "{text}");

    // A refused connection: plan warns and says which; apply fails naming host and port.
    let mut ws = Workspace::new(target.clone());
    ws.set_env("PROXMOX_VE_ENDPOINT", "https://127.0.0.1:1");
    ws.init_with(&one_vm()).await;
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    let text = plan.all_text();
    assert!(text.contains("Not checked against the cluster"), "{text}");
    assert!(text.contains("connection refused"), "{text}");
    let out = ws.apply().await.failure();
    let text = out.all_text();
    assert!(
        text.contains("Nothing accepted the connection at 127.0.0.1:1"),
        "{text}"
    );
    assert!(!text.contains("did not answer in time"), "{text}");

    // A refused token: refused at plan, with what to check.
    let mut ws = Workspace::new(target.clone());
    let (id, _) = target.token.rsplit_once('=').unwrap();
    ws.set_env("PROXMOX_VE_API_TOKEN", &format!("{id}=wrong-secret"));
    ws.init_with(&one_vm()).await;
    let out = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .failure();
    let text = out.all_text();
    assert!(text.contains("PVE refused the API token"), "{text}");
    assert!(text.contains("PROXMOX_VE_API_TOKEN"), "{text}");
}
