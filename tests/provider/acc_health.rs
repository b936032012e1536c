//! Acceptance: `data "proxmox_health"` through the real terraform against pve-sim. Every
//! failure case yields its documented reason code as data (never a crashed run), a
//! `precondition` blocks an apply, a `check` block only warns, and the per-node checks run
//! concurrently. The tests that need no world of their own (and no journal) also run in live
//! mode (see `tests/provider/support/host.rs`).

use crate::support;

use std::collections::BTreeMap;

use pvesim::{Faults, HttpFault, NodeConfig, SimConfig, StorageConfig};
use serde_json::Value;
use support::{Host, Target, Workspace, flat, simulator_only, start_sim};

fn provider_block() -> String {
    format!("{}\nprovider \"proxmox\" {{}}\n", Workspace::preamble())
}

/// The provider block of a test that runs in both modes: the lab's seed storage (the
/// health data source's default `iso_storage`), never the provider's default `local`.
fn host_provider_block(host: &Host) -> String {
    format!(
        "{}\nprovider \"proxmox\" {{\n  seed_storage = \"{}\"\n}}\n",
        Workspace::preamble(),
        host.facts.seed_storage
    )
}

/// A configuration with one health data source (arguments as HCL lines) and its whole
/// value as an output.
fn health_config(provider: &str, arguments: &str) -> String {
    format!(
        "{provider}\ndata \"proxmox_health\" \"pve\" {{\n{arguments}\n}}\n\noutput \"health\" \
            {{\n  value = data.proxmox_health.pve\n}}\n",
    )
}

/// `node_names = [the test nodes]` on a live host, where other nodes are none of the
/// test's business; nothing (every node) on the simulator.
fn test_nodes(host: &Host) -> String {
    if !host.is_live() {
        return String::new();
    }
    format!("  node_names = [{}]\n", quoted(&host.facts.nodes))
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Applies the configuration (the provider block with default settings) and returns the
/// data source's value.
async fn health(target: Target, arguments: &str) -> Value {
    health_with(target, &provider_block(), arguments).await
}

/// [`health`] for a test running in both modes: the lab's seed storage.
async fn host_health(host: &Host, target: Target, arguments: &str) -> Value {
    health_with(target, &host_provider_block(host), arguments).await
}

async fn health_with(target: Target, provider: &str, arguments: &str) -> Value {
    let ws = Workspace::new(target);
    ws.write_main_tf(&health_config(provider, arguments));
    ws.init().await;
    ws.apply().await.success();
    let out = ws
        .terraform(&["output", "-json", "-no-color", "health"])
        .await
        .success();
    serde_json::from_str(&out.stdout()).expect("terraform output printed no JSON")
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// Node name → its reason codes.
fn node_reasons(health: &Value) -> BTreeMap<String, Vec<String>> {
    health["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("no nodes: {health}"))
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_owned(),
                strings(&n["reasons"]),
            )
        })
        .collect()
}

fn node<'a>(health: &'a Value, name: &str) -> &'a Value {
    health["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node {name}: {health}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn healthy_cluster_reports_every_node_ok() {
    let Some(host) = Host::start("healthy_cluster_reports_every_node_ok", SimConfig::default).await
    else {
        return;
    };
    // The template by name and, where it is one VM every node clones from, by VMID too; a
    // lab with a copy per node has no single VMID for it.
    let template_vmid = if host.is_live() {
        let copies = host.templates().await;
        (copies.len() == 1).then(|| copies[0].1)
    } else {
        Some(9000)
    };
    let templates = match template_vmid {
        Some(vmid) => format!("\"{}\", \"{vmid}\"", host.facts.template),
        None => format!("\"{}\"", host.facts.template),
    };
    let health = host_health(
        &host,
        host.target.clone(),
        &format!(
            "  templates = [{templates}]\n  bridges = [\"{}\"]\n{}",
            host.facts.bridge,
            test_nodes(&host)
        ),
    )
    .await;
    assert_eq!(health["healthy"], true, "{health:#}");
    // A live host runs whichever PVE 9 release it runs.
    let version = health["version"].as_str().unwrap().to_owned();
    if host.is_live() {
        assert!(version.starts_with("9."), "{version}");
    } else {
        assert_eq!(version, "9.2.11");
    }
    assert_eq!(
        health["iso_storage"],
        host.facts.seed_storage.as_str(),
        "defaults to the provider's seed storage"
    );
    assert_eq!(strings(&health["reasons"]), Vec::<String>::new());
    let reasons = node_reasons(&health);
    // The test nodes, each once: on a live host exactly the ones named.
    let mut expected = host.facts.nodes.clone();
    expected.sort();
    assert_eq!(
        reasons.keys().cloned().collect::<Vec<_>>(),
        expected,
        "{health:#}"
    );
    for (name, codes) in &reasons {
        assert!(codes.is_empty(), "{name}: {codes:?}");
        let node = node(&health, name);
        for flag in [
            "online",
            "iso_storage_ok",
            "templates_ok",
            "privileges_ok",
            "bridges_ok",
            "eligible",
        ] {
            assert_eq!(node[flag], true, "{name}.{flag}: {node}");
        }
        assert_eq!(node["version"], version.as_str());
        assert!(
            node["iso_storage_free_bytes"].as_u64().unwrap() > 0,
            "{node}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_template_and_plain_vm_are_named() {
    let Some(host) = Host::start(
        "missing_template_and_plain_vm_are_named",
        SimConfig::default,
    )
    .await
    else {
        return;
    };
    // `dns1` is an ordinary VM of the default world; a live test makes its own.
    let plain = if host.is_live() {
        host.make_unmarked_vm("plain").await.1
    } else {
        "dns1".into()
    };
    let health = host_health(
        &host,
        host.target.clone(),
        &format!(
            "  templates = [\"no-such-template\", \"{plain}\"]\n{}",
            test_nodes(&host)
        ),
    )
    .await;
    assert_eq!(health["healthy"], false);
    for (name, codes) in node_reasons(&health) {
        assert_eq!(codes, ["NotATemplate", "TemplateNotFound"], "{name}");
        assert_eq!(node(&health, &name)["templates_ok"], false);
        assert_eq!(node(&health, &name)["iso_storage_ok"], true);
    }
    let messages = strings(&health["messages"]).join("\n");
    assert!(messages.contains("no-such-template"), "{messages}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_template_on_local_storage_only_counts_on_its_node() {
    if !simulator_only(
        "a_template_on_local_storage_only_counts_on_its_node",
        "worlds of its own (a template on one node's local storage, then a copy on a second node)",
    ) {
        return;
    }
    // The default world's `local-lvm` (LVM-thin) is local to each node.
    let mut config = SimConfig::default();
    let template = config.vms.iter_mut().find(|vm| vm.vmid == 9000).unwrap();
    template
        .config
        .insert("scsi0".into(), "local-lvm:base-9000-disk-0,size=4G".into());
    let local_copy = template.clone();
    let (_sim, target) = start_sim(config.clone()).await;
    let one_copy = health(target, "  templates = [\"debian-13-proxy\"]").await;
    let reasons = node_reasons(&one_copy);
    assert_eq!(reasons["pve1"], Vec::<String>::new());
    assert_eq!(reasons["pve2"], ["TemplateNotShared"]);
    assert_eq!(reasons["pve3"], ["TemplateNotShared"]);
    // Placement (`node` unset) may use pve1 only, for the same reason.
    assert_eq!(node(&one_copy, "pve1")["eligible"], true);
    assert_eq!(node(&one_copy, "pve2")["eligible"], false);
    assert_eq!(node(&one_copy, "pve3")["eligible"], false);

    // A second copy of the same name on pve2: each of pve1 and pve2 clones its own copy.
    let mut pve2_copy = local_copy;
    pve2_copy.vmid = 9001;
    pve2_copy.node = "pve2".into();
    pve2_copy
        .config
        .insert("scsi0".into(), "local-lvm:base-9001-disk-0,size=4G".into());
    config.vms.push(pve2_copy);
    let (_sim, target) = start_sim(config).await;
    let two_copies = health(target, "  templates = [\"debian-13-proxy\"]").await;
    let reasons = node_reasons(&two_copies);
    assert_eq!(reasons["pve1"], Vec::<String>::new());
    assert_eq!(reasons["pve2"], Vec::<String>::new());
    assert_eq!(reasons["pve3"], ["TemplateNotShared"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_and_inactive_storages_are_named() {
    if !simulator_only(
        "missing_and_inactive_storages_are_named",
        "a world of its own (a storage on one node only, a disabled one)",
    ) {
        return;
    }
    let mut config = SimConfig::default();
    // Available on pve1 only: inactive on the other nodes.
    config.storages.push(StorageConfig {
        id: "seeds-pve1".into(),
        content: vec!["iso".into()],
        nodes: Some(vec!["pve1".into()]),
        ..StorageConfig::default()
    });
    // Disabled everywhere.
    config.storages.push(StorageConfig {
        id: "seeds-off".into(),
        content: vec!["iso".into()],
        enabled: false,
        ..StorageConfig::default()
    });
    // Holds disks only.
    let (_sim, target) = start_sim(config).await;

    let missing = health(target.clone(), "  iso_storage = \"nosuch\"").await;
    for (name, codes) in node_reasons(&missing) {
        assert_eq!(codes, ["StorageNotFound"], "{name}");
        assert_eq!(node(&missing, &name)["iso_storage_ok"], false);
    }

    let restricted = health(target.clone(), "  iso_storage = \"seeds-pve1\"").await;
    let reasons = node_reasons(&restricted);
    assert_eq!(reasons["pve1"], Vec::<String>::new());
    assert_eq!(reasons["pve2"], ["StorageInactive"]);
    assert_eq!(reasons["pve3"], ["StorageInactive"]);

    let disabled = health(target.clone(), "  iso_storage = \"seeds-off\"").await;
    for (name, codes) in node_reasons(&disabled) {
        assert_eq!(codes, ["StorageInactive"], "{name}");
    }

    let no_iso = health(target, "  iso_storage = \"vmdata\"").await;
    for (name, codes) in node_reasons(&no_iso) {
        assert_eq!(codes, ["StorageNoIsoContent"], "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn offline_nodes_are_reported_from_the_listing_and_from_595() {
    if !simulator_only(
        "offline_nodes_are_reported_from_the_listing_and_from_595",
        "an offline node and injected 595 answers",
    ) {
        return;
    }
    let mut config = SimConfig::default();
    // pve3 is down as the cluster sees it; pve1, the template's node, is listed online but
    // PVE cannot proxy to it.
    config.nodes[2] = NodeConfig {
        name: "pve3".into(),
        online: false,
        ..NodeConfig::default()
    };
    config.faults = Faults {
        http: vec![HttpFault {
            path_regex: "^/nodes/pve1/".into(),
            status: Some(595),
            ..HttpFault::default()
        }],
        ..Faults::default()
    };
    let (_sim, target) = start_sim(config).await;
    let health = health(target, "  templates = [\"debian-13-proxy\"]").await;
    assert_eq!(health["healthy"], false);
    let reasons = node_reasons(&health);
    assert_eq!(reasons["pve1"], ["NodeOffline"]);
    // pve2 itself is fine, but the template it would clone from is out of reach.
    assert_eq!(reasons["pve2"], ["TemplateNotFound"]);
    assert_eq!(reasons["pve3"], ["NodeOffline"]);
    assert_eq!(node(&health, "pve1")["online"], false);
    assert_eq!(node(&health, "pve2")["online"], true);
    assert_eq!(node(&health, "pve3")["online"], false);
    let messages = strings(&node(&health, "pve1")["messages"]).join("\n");
    assert!(messages.contains("595"), "{messages}");
}

/// PVE lists the VMs of an offline node without their memory (pve-manager
/// `PVE/API2Tools.pm` `extract_vm_stats`: no statistics, no `maxmem`), so what the node has
/// promised is unknown there: null, not 0.
#[tokio::test(flavor = "multi_thread")]
async fn an_offline_nodes_promised_memory_is_unknown_not_zero() {
    if !simulator_only(
        "an_offline_nodes_promised_memory_is_unknown_not_zero",
        "an offline node that holds a VM",
    ) {
        return;
    }
    let mut config = SimConfig::default();
    config.timings.cluster_resources_lag_ms = 0;
    config.nodes[2].online = false;
    let pve3 = config.nodes[2].name.clone();
    config.vms.push(pvesim::VmSeed {
        vmid: 777,
        node: pve3.clone(),
        running: true,
        config: [("name", "stranded"), ("memory", "2048")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    });
    let (_sim, target) = start_sim(config).await;
    let health = health(target, "").await;
    let offline = node(&health, &pve3);
    assert_eq!(offline["online"], false, "{offline:#}");
    assert_eq!(offline["memory_promised_bytes"], Value::Null, "{offline:#}");
    let online = node(&health, "pve2");
    assert!(online["memory_promised_bytes"].is_u64(), "{online:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_token_secret_is_credentials_unavailable_everywhere() {
    let Some(host) = Host::start(
        "a_wrong_token_secret_is_credentials_unavailable_everywhere",
        SimConfig::default,
    )
    .await
    else {
        return;
    };
    let mut target = host.target.clone();
    let (id, _secret) = target.token.rsplit_once('=').unwrap();
    target.token = format!("{id}=00000000-0000-4000-8000-000000000000");

    let named = host_health(
        &host,
        target.clone(),
        &format!(
            "  node_names = [\"{}\", \"{}\"]",
            host.facts.node(0),
            host.facts.node(1)
        ),
    )
    .await;
    assert_eq!(named["healthy"], false);
    for (name, codes) in node_reasons(&named) {
        assert_eq!(codes, ["CredentialsUnavailable"], "{name}");
    }

    assert!(
        !named
            .to_string()
            .contains("00000000-0000-4000-8000-000000000000"),
        "the secret leaked into the result: {named}"
    );

    // The message says what PVE answered, once, and what to check.
    let messages = strings(&node(&named, host.facts.node(0))["messages"]).join("\n");
    assert!(
        messages.contains("GET /version: HTTP 401") && !messages.contains("/version: GET /version"),
        "{messages}"
    );
    assert!(!messages.contains("did not answer"), "{messages}");
    assert!(
        messages.contains("Check the token id and secret"),
        "{messages}"
    );

    // Without node names nothing can list the nodes: the code is at the top.
    let all = host_health(&host, target, "").await;
    assert_eq!(strings(&all["reasons"]), ["CredentialsUnavailable"]);
    assert_eq!(all["nodes"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_token_is_credentials_unavailable() {
    if !simulator_only(
        "a_revoked_token_is_credentials_unavailable",
        "an injected token revocation",
    ) {
        return;
    }
    let config = SimConfig {
        faults: Faults {
            token_revoked: true,
            ..Faults::default()
        },
        ..SimConfig::default()
    };
    let (_sim, target) = start_sim(config).await;
    let health = health(target, "  node_names = [\"pve1\"]").await;
    assert_eq!(node_reasons(&health)["pve1"], ["CredentialsUnavailable"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ca_that_does_not_match_is_certificate_invalid() {
    let Some(host) = Host::start(
        "a_ca_that_does_not_match_is_certificate_invalid",
        SimConfig::default,
    )
    .await
    else {
        return;
    };
    let mut target = host.target.clone();
    // A CA that signed nothing the host serves (made once with openssl, valid until 2125).
    target.ca_pem = Some(include_str!("fixtures/unrelated-ca.pem").to_owned());
    let health = host_health(
        &host,
        target,
        &format!("  node_names = [{}]", quoted(&host.facts.nodes)),
    )
    .await;
    assert_eq!(health["healthy"], false);
    assert_eq!(strings(&health["reasons"]), ["CertificateInvalid"]);
    for (name, codes) in node_reasons(&health) {
        assert_eq!(codes, ["CertificateInvalid"], "{name}");
    }
    let messages = strings(&health["messages"]).join("\n");
    assert!(
        messages.contains("ca_cert"),
        "no hint about ca_cert: {messages}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_privileges_are_named_with_their_path() {
    if !simulator_only(
        "missing_privileges_are_named_with_their_path",
        "a token without Datastore.AllocateTemplate",
    ) {
        return;
    }
    let mut config = SimConfig::default();
    let everything = config.privileges.remove("/").unwrap();
    let without_upload: Vec<String> = everything
        .into_iter()
        .filter(|p| p != "Datastore.AllocateTemplate")
        .collect();
    config.privileges.insert("/".into(), without_upload);
    let (_sim, target) = start_sim(config).await;
    let health = health(target, "  node_names = [\"pve1\"]").await;
    assert_eq!(node_reasons(&health)["pve1"], ["PermissionMissing"]);
    assert_eq!(node(&health, "pve1")["privileges_ok"], false);
    let messages = strings(&health["messages"]).join("\n");
    assert!(
        messages.contains("Datastore.AllocateTemplate on /storage/local"),
        "{messages}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_bridge_is_named() {
    if !simulator_only(
        "a_missing_bridge_is_named",
        "a world of its own (a bridge on one node only)",
    ) {
        return;
    }
    let mut config = SimConfig::default();
    config.nodes[1].bridges.push("vmbr1".into());
    let (_sim, target) = start_sim(config).await;
    let health = health(target, "  bridges = [\"vmbr0\", \"vmbr1\"]").await;
    let reasons = node_reasons(&health);
    assert_eq!(reasons["pve1"], ["BridgeNotFound"]);
    assert_eq!(reasons["pve2"], Vec::<String>::new());
    assert_eq!(reasons["pve3"], ["BridgeNotFound"]);
    assert_eq!(node(&health, "pve1")["bridges_ok"], false);
    assert_eq!(node(&health, "pve2")["bridges_ok"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn pve_8_is_version_unsupported() {
    if !simulator_only("pve_8_is_version_unsupported", "a host answering as PVE 8") {
        return;
    }
    let config = SimConfig {
        version: pvesim::VersionInfo {
            version: "8.4.1".into(),
            release: "8.4".into(),
            repoid: "2a5fa54a8503f96d".into(),
        },
        ..SimConfig::default()
    };
    let (_sim, target) = start_sim(config).await;
    let health = health(target, "").await;
    assert_eq!(health["version"], "8.4.1");
    assert_eq!(strings(&health["reasons"]), ["VersionUnsupported"]);
    for (name, codes) in node_reasons(&health) {
        assert_eq!(codes, ["VersionUnsupported"], "{name}");
        assert_eq!(node(&health, &name)["version"], "8.4.1");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_nobody_listens_on_is_unreachable() {
    if !simulator_only(
        "an_endpoint_nobody_listens_on_is_unreachable",
        "a host it can stop",
    ) {
        return;
    }
    let (sim, target) = start_sim(SimConfig::default()).await;
    // The port of a simulator that has stopped: nothing listens there any more.
    sim.shutdown().await;
    let health = health(target, "  node_names = [\"pve1\"]").await;
    assert_eq!(strings(&health["reasons"]), ["Unreachable"]);
    assert_eq!(node_reasons(&health)["pve1"], ["Unreachable"]);
    assert_eq!(health["version"], "");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_precondition_blocks_the_apply_when_unhealthy() {
    let Some(host) = Host::start(
        "a_precondition_blocks_the_apply_when_unhealthy",
        SimConfig::default,
    )
    .await
    else {
        return;
    };
    let ws = Workspace::new(host.target.clone());
    ws.write_main_tf(&format!(
        r#"{}
data "proxmox_health" "pve" {{
  templates = ["no-such-template"]
{}}}

resource "terraform_data" "fleet_gate" {{
  lifecycle {{
    precondition {{
      condition     = data.proxmox_health.pve.healthy
      error_message = join(" ", [
        "PVE is not ready for proxy VMs:",
        join(", ", data.proxmox_health.pve.reasons),
      ])
    }}
  }}
}}
"#,
        host_provider_block(&host),
        test_nodes(&host)
    ));
    ws.init().await;
    let out = ws.apply().await.failure();
    let text = flat(&out.all_text());
    assert!(text.contains("Resource precondition failed"), "{text}");
    assert!(
        text.contains("PVE is not ready for proxy VMs: TemplateNotFound"),
        "{text}"
    );
    let state = ws.terraform(&["state", "list"]).await;
    assert!(
        !state.stdout().contains("terraform_data.fleet_gate"),
        "the gate was created"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_block_only_warns() {
    let Some(host) = Host::start("a_check_block_only_warns", SimConfig::default).await else {
        return;
    };
    let ws = Workspace::new(host.target.clone());
    ws.write_main_tf(&format!(
        r#"{}
check "proxmox" {{
  data "proxmox_health" "pve" {{
    iso_storage = "nosuch"
  {}}}

  assert {{
    condition     = data.proxmox_health.pve.healthy
    error_message = "PVE health: ${{join("; ", data.proxmox_health.pve.messages)}}"
  }}
}}

resource "terraform_data" "after_check" {{}}
"#,
        host_provider_block(&host),
        test_nodes(&host)
    ));
    ws.init().await;
    let out = ws.apply().await.success();
    let text = flat(&out.all_text());
    assert!(
        text.contains("Warning: Check block assertion failed"),
        "{text}"
    );
    // The first node named is the cluster's first: `pve1` on the simulator.
    let expected = if host.is_live() {
        "Storage nosuch does not exist"
    } else {
        "PVE health: pve1: Storage nosuch does not exist"
    };
    assert!(text.contains("PVE health: "), "{text}");
    assert!(text.contains(expected), "{text}");
    let state = ws.terraform(&["state", "list"]).await.success();
    assert!(
        state.stdout().contains("terraform_data.after_check"),
        "{}",
        state.all_text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_arguments_point_at_their_attribute() {
    let Some(host) = Host::start(
        "invalid_arguments_point_at_their_attribute",
        SimConfig::default,
    )
    .await
    else {
        return;
    };
    let ws = Workspace::new(host.target.clone());
    ws.write_main_tf(&health_config(
        &host_provider_block(&host),
        "  iso_storage = \"Bad Storage\"\n  templates = [\"\"]\n  node_names = []",
    ));
    ws.init().await;
    let out = ws.terraform(&["validate", "-no-color"]).await.failure();
    let text = out.all_text();
    assert!(text.contains("Attribute iso_storage"), "{text}");
    assert!(text.contains("Attribute templates[0]"), "{text}");
    assert!(text.contains("at least one node"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn per_node_checks_run_concurrently() {
    if !simulator_only(
        "per_node_checks_run_concurrently",
        "injected latency and the request journal",
    ) {
        return;
    }
    // Every request waits 500 ms before PVE handles (and journals) it. Each node asks for
    // its status, then for its storages. Run one node after another, the journal would read
    // status₁ storage₁ status₂ storage₂ …; run together, every node's status call is
    // answered before any node's storage call, half a second apart.
    let config = SimConfig {
        faults: Faults {
            latency_ms: 500,
            ..Faults::default()
        },
        ..SimConfig::default()
    };
    let (sim, target) = start_sim(config).await;
    let health = health(target, "").await;
    assert_eq!(health["healthy"], true, "{health:#}");

    let journal = pvesim::testing::Admin::new(&sim).journal().await;
    let per_node: Vec<(String, &str)> = journal
        .iter()
        .filter_map(|entry| {
            let rest = entry.path.strip_prefix("/nodes/")?;
            let (node, leaf) = rest.split_once('/')?;
            let kind = match leaf {
                "status" => "status",
                "storage" => "storage",
                _ => return None,
            };
            Some((node.to_owned(), kind))
        })
        .collect();
    // The data source is read at plan and again at apply: judge each read on its own.
    let reads: Vec<&[(String, &str)]> = per_node.chunks(6).collect();
    assert!(
        !reads.is_empty() && reads.iter().all(|r| r.len() == 6),
        "{per_node:?}"
    );
    for read in reads {
        let last_status = read
            .iter()
            .rposition(|(_, kind)| *kind == "status")
            .unwrap();
        let first_storage = read
            .iter()
            .position(|(_, kind)| *kind == "storage")
            .unwrap();
        assert!(
            last_status < first_storage,
            "a node's storage call was answered before another node's status call, so the nodes \
                were not checked together: {read:?}"
        );
        let nodes: std::collections::BTreeSet<&str> =
            read.iter().map(|(node, _)| node.as_str()).collect();
        assert_eq!(nodes.len(), 3, "{read:?}");
    }
}

/// Benchmark, not a test: wall time of one health check for 1 node and for 3 nodes with
/// 200 ms added to every request. Run with
/// `cargo test --release --test provider -- --ignored --nocapture
/// acc_health::bench_health_wall_time`
/// (figures recorded in docs/guides/benchmarks-health.md).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: prints wall times, asserts only that the checks pass"]
async fn bench_health_wall_time() {
    use std::time::{Duration, Instant};
    use terraform_provider_proxmox::context::Configured;
    use terraform_provider_proxmox::data_sources::health::{HealthRequest, check};

    const LATENCY_MS: u64 = 200;
    const RUNS: usize = 7;
    let config = SimConfig {
        faults: Faults {
            latency_ms: LATENCY_MS,
            ..Faults::default()
        },
        ..SimConfig::default()
    };
    let (_sim, target) = start_sim(config).await;
    let configured = || {
        let token = pve::ApiToken::parse(&target.token).unwrap();
        let tls = pve::TlsTrust::CaPem(target.ca_pem.clone().unwrap());
        Configured {
            client: pve::Client::new(pve::ClientConfig::new(&target.endpoint, token, tls)).unwrap(),
            seed_storage: "local".into(),
            clone_storage: None,
            vmid_range: Default::default(),
            fleet: String::new(),
            runtime: Default::default(),
            facts: Default::default(),
            journal: terraform_provider_proxmox::journal::Journal::at(None),
        }
    };
    let mut rows = Vec::new();
    for nodes in [vec!["pve1"], vec!["pve1", "pve2", "pve3"]] {
        let request = HealthRequest {
            node_names: Some(nodes.iter().map(|n| n.to_string()).collect()),
            templates: vec!["debian-13-proxy".into()],
            iso_storage: "local".into(),
            bridges: vec!["vmbr0".into()],
            pools: vec![],
            clone_storage: None,
            ha: false,
        };
        let mut times: Vec<Duration> = Vec::new();
        for _ in 0..RUNS {
            // A fresh client and cache per run: every run pays for its connections.
            let configured = configured();
            let started = Instant::now();
            let report = check::run(&configured, &request).await;
            times.push(started.elapsed());
            assert!(report.healthy(), "{report:?}");
        }
        times.sort();
        rows.push((nodes.len(), times[RUNS / 2], times[0], times[RUNS - 1]));
    }
    println!("latency per request: {LATENCY_MS} ms, {RUNS} runs each");
    println!("| nodes | median | min | max |");
    println!("|---|---|---|---|");
    for (nodes, median, min, max) in rows {
        println!(
            "| {nodes} | {} ms | {} ms | {} ms |",
            median.as_millis(),
            min.as_millis(),
            max.as_millis()
        );
    }
}
