//! Acceptance: the privileges `docs/guides/pve-setup.md` grants, read from the document itself,
//! are exactly enough. With them (including a pool) a pooled VM is created, refreshed,
//! imported with an empty plan and destroyed, and `proxmox_health` is healthy; without any
//! one of the privileges PVE checks on the provider's calls, `proxmox_health` names it.

use crate::support;

use std::collections::BTreeMap;

use serde_json::Value;
use support::{SimClient, Target, Workspace, acceptance_enabled, start_sim};

/// The guide's role (`pveum role add … -privs "…"`) and the paths its ACL loop grants it on
/// (`for path in …; do`).
fn documented_acl() -> (Vec<String>, Vec<String>) {
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guides/pve-setup.md"),
    )
    .unwrap();
    let joined = guide.replace("\\\n", " ");
    let privileges = joined
        .split_once("-privs \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(privs, _)| privs.split_whitespace().map(str::to_owned).collect())
        .expect("pve-setup.md has no `pveum role add … -privs \"…\"`");
    let paths = joined
        .split_once("for path in ")
        .and_then(|(_, rest)| rest.split_once("; do"))
        .map(|(paths, _)| paths.split_whitespace().map(str::to_owned).collect())
        .expect("pve-setup.md has no ACL loop `for path in …; do`");
    (privileges, paths)
}

/// The default world with the token holding the guide's role on the guide's paths, less
/// `without` (privileges on paths).
fn sim_config(without: &[(&str, &str)]) -> pvesim::SimConfig {
    let (privileges, paths) = documented_acl();
    let acl: BTreeMap<String, Vec<String>> = paths
        .iter()
        .map(|path| {
            let granted = privileges
                .iter()
                .filter(|p| !without.contains(&(path.as_str(), p.as_str())))
                .cloned()
                .collect();
            (path.clone(), granted)
        })
        .collect();
    pvesim::SimConfig {
        privileges: acl,
        ..pvesim::SimConfig::default()
    }
}

const HEALTH: &str = r#"
data "proxmox_health" "pve" {
  templates = ["debian-13-proxy"]
  bridges   = ["vmbr0"]
  pools     = ["proxies"]
}

output "health" {
  value = data.proxmox_health.pve
}
"#;

fn pooled_vm_tf() -> String {
    format!(
        r#"{preamble}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "pooled" {{
  name     = "pooled-1"
  node     = "pve1"
  template = "debian-13-proxy"
  bridge   = "vmbr0"
  pool     = "proxies"
}}

output "vmid" {{
  value = proxmox_proxy_vm.pooled.vmid
}}
"#,
        preamble = Workspace::preamble()
    )
}

async fn output(ws: &Workspace, name: &str) -> Value {
    let out = ws
        .terraform(&["output", "-json", "-no-color", name])
        .await
        .success();
    serde_json::from_str(&out.stdout()).expect("terraform output printed no JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_documented_privileges_run_a_pooled_vm_from_create_to_destroy() {
    if !acceptance_enabled("the_documented_privileges_run_a_pooled_vm_from_create_to_destroy") {
        return;
    }
    let (privileges, paths) = documented_acl();
    assert!(
        privileges.contains(&"Pool.Audit".to_owned()),
        "{privileges:?}"
    );
    assert!(paths.contains(&"/pool/proxies".to_owned()), "{paths:?}");

    let (_sim, target) = start_sim(sim_config(&[])).await;
    let sim = SimClient::new(&target);
    let health = health_with(target.clone()).await;
    assert_eq!(health["healthy"], true, "{health}");

    let ws = Workspace::new(target);
    ws.init_with(&pooled_vm_tf()).await;
    ws.apply().await.success();
    ws.assert_plans_empty().await;

    let vmid = output(&ws, "vmid").await;
    let vmid = vmid.as_u64().expect("a numeric vmid").to_string();
    let rows = sim
        .api("GET", "/cluster/resources", &[("type", "vm")])
        .await;
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["vmid"].as_u64().map(|v| v.to_string()) == Some(vmid.clone()))
        .cloned()
        .unwrap();
    assert_eq!(row["pool"], "proxies", "the token sees the pool: {row}");

    // Import the pooled VM: the pool is read back, so nothing would be replaced.
    ws.terraform(&["state", "rm", "proxmox_proxy_vm.pooled"])
        .await
        .success();
    ws.terraform(&[
        "import",
        "-no-color",
        "-input=false",
        "proxmox_proxy_vm.pooled",
        &format!("pve1/{vmid}"),
    ])
    .await
    .success();
    ws.assert_plans_empty().await;

    ws.destroy().await.success();
    assert!(
        sim.our_vms().await.is_empty(),
        "VMs left: {:#?}",
        sim.our_vms().await
    );
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}

/// The value of `proxmox_health` (templates, bridge and pool of the guide) on `target`.
async fn health_with(target: Target) -> Value {
    let ws = Workspace::new(target);
    ws.init_with(&format!(
        "{}\nprovider \"proxmox\" {{\n  seed_storage = \"proxy-seeds\"\n}}\n{HEALTH}",
        Workspace::preamble()
    ))
    .await;
    ws.apply().await.success();
    output(&ws, "health").await
}

/// `proxmox_health` with the guide's privileges less `privilege` on `path` (and on
/// `also_on`, which would grant it too): the node reports `PermissionMissing` and a message
/// naming `privilege` on `path`.
async fn health_names_the_missing(test: &str, path: &str, privilege: &str, also_on: &[&str]) {
    if !acceptance_enabled(test) {
        return;
    }
    let mut without = vec![(path, privilege)];
    without.extend(also_on.iter().map(|other| (*other, privilege)));
    let (_sim, target) = start_sim(sim_config(&without)).await;
    let health = health_with(target).await;
    assert_eq!(health["healthy"], false, "{health}");
    let reasons: Vec<&str> = health["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(reasons, ["PermissionMissing"], "{health}");
    let wanted = format!("The token lacks {privilege} on {path}.");
    let messages: Vec<&str> = health["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        messages.iter().any(|m| m.ends_with(&wanted)),
        "no message {wanted:?} in {messages:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_names_a_missing_vm_config_cdrom() {
    health_names_the_missing(
        "health_names_a_missing_vm_config_cdrom",
        "/vms",
        "VM.Config.CDROM",
        // PVE applies the pool's ACLs to its member VMs: the pool would grant it too.
        &["/pool/proxies"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn health_names_a_missing_allocate_space_on_the_template_storage() {
    health_names_the_missing(
        "health_names_a_missing_allocate_space_on_the_template_storage",
        "/storage/vmdata",
        "Datastore.AllocateSpace",
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn health_names_a_missing_sdn_use_on_the_bridge() {
    health_names_the_missing(
        "health_names_a_missing_sdn_use_on_the_bridge",
        "/sdn/zones/localnetwork/vmbr0",
        "SDN.Use",
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn health_names_a_missing_pool_audit() {
    health_names_the_missing(
        "health_names_a_missing_pool_audit",
        "/pool/proxies",
        "Pool.Audit",
        &[],
    )
    .await;
}

/// The live stage's `guide-acls` lab (tests/live-worlds/, see scripts/test.sh) is this
/// guide's lab: its token holds exactly the guide's role on exactly the guide's paths.
#[test]
fn the_live_guide_lab_holds_exactly_the_documented_acl() {
    let (privileges, paths) = documented_acl();
    let world = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/live-worlds/guide-acls.json"),
    )
    .unwrap();
    let world: pvesim::SimConfig = serde_json::from_str(&world).unwrap();
    let mut role = privileges.clone();
    role.sort();
    let mut documented_paths = paths.clone();
    documented_paths.sort();
    assert_eq!(
        world.privileges.keys().cloned().collect::<Vec<_>>(),
        documented_paths
    );
    for (path, granted) in &world.privileges {
        let mut granted = granted.clone();
        granted.sort();
        assert_eq!(granted, role, "{path}");
    }
    assert!(world.pools.iter().any(|p| p.poolid == "proxies"));
}
