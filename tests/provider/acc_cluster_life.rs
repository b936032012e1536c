//! Acceptance: a proxy fleet on a living cluster (#31). Nodes reboot, are drained and fail;
//! operators put proxies under HA. The provider keeps the proxies running (`start_on_boot`),
//! follows them wherever PVE moved them (the plan stays empty), waits for the VM's real state
//! when HA turns its power calls into requests, and leaves nothing behind on destroy.
//!
//! The PVE behaviour these rely on, as pve-sim models it from PVE's source: a power call on
//! an HA-managed VM is a `hastart`/`hastop` request task (qemu-server `API2/Qemu.pm`
//! `vm_start`, `vm_stop`, `vm_shutdown`); a reboot is not (`vm_reboot` runs `qmreboot`); a
//! destroy with `purge` removes the HA resource (`API2/Qemu.pm` `destroy_vm`); a local CD-ROM
//! image blocks a migration (`QemuMigrate.pm` `scan_local_volumes`: "local cdrom image");
//! a node boot starts its `onboot` VMs in `startup` order (pve-manager `API2/Nodes.pm`
//! `startall`). Node events (`/_sim/nodes/…`) and HA need the in-process pve-sim; the drain
//! and the migration refusal run on a live lab too (two nodes; the drain also a shared ISO
//! storage), and skip with the reason when it lacks them.

use std::time::{Duration, Instant};

use crate::support;

use serde_json::Value;
use support::sim_state::{ha_resources, the_vm, until, vmid, vms_named};
use support::{Host, Observer, SimClient, Workspace, flat, simulator_only, start_sim};

/// A shared ISO storage, so a VM's seed moves with it (the default `proxy-seeds` is local to
/// each node).
const SHARED_SEEDS: &str = "shared-seeds";

fn world() -> pvesim::SimConfig {
    let mut config = pvesim::SimConfig::default();
    config.storages.push(pvesim::config::StorageConfig {
        id: SHARED_SEEDS.into(),
        plugin_type: "nfs".into(),
        content: vec!["iso".into()],
        shared: true,
        nodes: None,
        enabled: true,
        total_bytes: 1 << 40,
        has_path: true,
    });
    config
}

/// `count` proxies named `{base}-N` on `node`, seeds on `seed_storage`; `extra` goes into
/// the resource block.
fn fleet(base: &str, count: usize, node: &str, seed_storage: &str, extra: &str) -> String {
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "{seed_storage}"
}}

resource "proxmox_proxy_vm" "edge" {{
  count    = {count}
  name     = "{base}-${{count.index}}"
  template = "debian-13-proxy"
  node     = "{node}"
  # The seed stays attached: these tests are about what it means for a migration.
  seed_lifetime = "vm"
{extra}}}
"#,
        Workspace::preamble()
    )
}

/// What a destroy must leave: no VM of `base`, no ISO on `storage`, no HA resource.
async fn assert_nothing_left(sim: &SimClient, base: &str, storage: &str) {
    let state = sim.state().await;
    assert!(vms_named(&state, base).is_empty(), "{state}");
    let isos: Vec<Value> = sim
        .volumes_on(storage)
        .await
        .into_iter()
        .filter(|v| v["content"] == "iso")
        .collect();
    assert!(isos.is_empty(), "{isos:?}");
    let ha = ha_resources(sim).await;
    assert!(ha.is_empty(), "{ha:?}");
}

fn resources(state: &Value) -> Vec<Value> {
    state["values"]["root_module"]["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A node reboot stops every VM on it; its `onboot` VMs start again in `startup` order, so
/// the fleet runs again without an apply and the next plan is empty.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_survives_a_node_reboot() {
    let test = "a_fleet_survives_a_node_reboot";
    if !simulator_only(test, "pve-sim's node reboot (/_sim/nodes/{node}/reboot)") {
        return;
    }
    let (sim_handle, target) = start_sim(pvesim::SimConfig::default()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let order = "  startup  = { order = count.index + 1, up = 1 }\n";
    ws.init_with(&fleet("boot", 3, "pve2", "proxy-seeds", order))
        .await;
    ws.apply().await.success();
    let state = sim.state().await;
    let fleet = vms_named(&state, "boot-");
    assert_eq!(fleet.len(), 3, "{state}");
    for vm in &fleet {
        assert_eq!(vm["config"]["onboot"], "1", "{vm}");
        assert!(
            vm["config"]["startup"]
                .as_str()
                .is_some_and(|s| s.starts_with("order=") && s.ends_with(",up=1")),
            "{vm}"
        );
    }
    for resource in resources(&ws.state().await) {
        assert_eq!(resource["values"]["start_on_boot"], true, "{resource}");
    }

    admin.reboot_node("pve2").await;
    until(&sim, "every proxy ran again after the reboot", |state| {
        let fleet = vms_named(state, "boot-");
        fleet.len() == 3
            && fleet
                .iter()
                .all(|vm| vm["status"] == "running" && vm["agent_ready"] == true)
            && state["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|n| n["online"] == true)
    })
    .await;
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim, "boot-", "proxy-seeds").await;
}

/// `start_on_boot = false` turns `onboot` off in place, without a reboot; unset again, the
/// default turns it back on (as the first apply after an upgrade does for older states).
#[tokio::test(flavor = "multi_thread")]
async fn start_on_boot_changes_in_place() {
    let test = "start_on_boot_changes_in_place";
    if !simulator_only(test, "the simulator's state") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let off = "  start_on_boot = false\n  wait_for = \"none\"\n";
    ws.init_with(&fleet("onboot", 1, "pve1", "proxy-seeds", off))
        .await;
    ws.apply().await.success();
    let vm = vms_named(&sim.state().await, "onboot-")[0].clone();
    // PVE's default is off: the key stays unset.
    assert!(vm["config"]["onboot"].is_null(), "{vm}");
    let booted = vm["guest"]["seed_boots"].clone();

    ws.write_main_tf(&fleet(
        "onboot",
        1,
        "pve1",
        "proxy-seeds",
        "  wait_for = \"none\"\n",
    ));
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    let text = flat(&plan.stdout());
    assert!(text.contains("~ start_on_boot = false -> true"), "{text}");
    assert!(
        text.contains("0 to add, 1 to change, 0 to destroy"),
        "{text}"
    );
    ws.apply().await.success();
    let vm = vms_named(&sim.state().await, "onboot-")[0].clone();
    assert_eq!(vm["config"]["onboot"], "1", "{vm}");
    assert_eq!(vm["status"], "running", "{vm}");
    assert_eq!(vm["guest"]["seed_boots"], booted, "no reboot: {vm}");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

/// Migrates `vmid` from `from` to `to` as an operator does through PVE's API, and waits for
/// the task.
async fn migrate(pve: &Observer, from: &str, vmid: u64, to: &str) -> Value {
    let path = format!("/nodes/{from}/qemu/{vmid}/migrate");
    let form = [("target", to), ("online", "1"), ("with-local-disks", "1")];
    pve.api("POST", &path, &form).await
}

/// A drain: every VM of a node migrated away through PVE's API. The plan stays empty, the
/// state follows (`current_node`), an update acts where the VM is now, also with a stale
/// state (`-refresh=false`), and destroy leaves nothing. On a live lab it needs two nodes
/// and a shared ISO storage (found through `GET /storage`).
#[tokio::test(flavor = "multi_thread")]
async fn a_drained_node_leaves_an_empty_plan() {
    let test = "a_drained_node_leaves_an_empty_plan";
    let Some(host) = Host::start(test, world).await else {
        return;
    };
    let pve = host.observer();
    if host.facts.nodes.len() < 2 {
        return support::skip(test, "needs two nodes (PROXMOX_VE_TEST_NODES)");
    }
    let Some(seeds) = shared_iso_storage(&pve).await else {
        return support::skip(
            test,
            "needs a shared storage with content `iso` on every node",
        );
    };
    let (from, to) = (host.facts.node(0).to_owned(), host.facts.node(1).to_owned());
    let base = host.name("drain");
    let ws = Workspace::new(host.target.clone());
    let hcl = |extra: &str| lab_fleet(&host, &base, 2, &from, &seeds, extra);
    ws.init_with(&hcl("")).await;
    ws.apply().await.success();
    let vms = lab_vms(&pve, &base, 2).await;
    if !may_migrate(&host, &from, vmid(&vms[0])).await {
        return skip_without_migrate(test, &ws).await;
    }
    for vm in &vms {
        pve.wait_task(&migrate(&pve, &from, vmid(vm), &to).await)
            .await;
    }
    for vm in lab_vms(&pve, &base, 2).await {
        assert_eq!(vm["node"], to.as_str(), "{vm}");
        assert_eq!(vm["status"], "running", "{vm}");
    }
    ws.assert_plans_empty().await;
    ws.apply().await.success();
    for resource in resources(&ws.state().await) {
        assert_eq!(resource["values"]["node"], from.as_str(), "{resource}");
        assert_eq!(
            resource["values"]["current_node"],
            to.as_str(),
            "{resource}"
        );
    }

    // Moved again behind a state that is not refreshed: the update finds it.
    pve.wait_task(&migrate(&pve, &to, vmid(&vms[0]), &from).await)
        .await;
    ws.write_main_tf(&hcl("  tags     = [\"drained\"]\n"));
    let out = ws
        .terraform(&[
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-refresh=false",
        ])
        .await
        .success();
    assert!(
        out.stdout().contains("0 added, 2 changed, 0 destroyed"),
        "{}",
        out.stdout()
    );
    for vm in lab_vms(&pve, &base, 2).await {
        let tags = vm["tags"].as_str().unwrap_or_default();
        assert!(tags.split([';', ',', ' ']).any(|t| t == "drained"), "{vm}");
    }
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(pve.our_vms().await.is_empty(), "{:?}", pve.our_vms().await);
    assert!(pve.volumes_on(&seeds).await.is_empty());
}

/// Whether the test's token may migrate `vmid` (an operator's privilege, `VM.Migrate`, that
/// the provider itself never needs): PVE's migration precondition asks the same.
async fn may_migrate(host: &Host, node: &str, vmid: u64) -> bool {
    let path = format!("/nodes/{node}/qemu/{vmid}/migrate");
    SimClient::new(&host.target)
        .try_api("GET", &path, &[])
        .await
        .is_some()
}

/// Skips the rest of a test whose token may not migrate, after destroying what it made.
async fn skip_without_migrate(test: &str, ws: &Workspace) {
    ws.destroy().await.success();
    support::skip(
        test,
        "the test token lacks VM.Migrate, which an operator's migration needs",
    );
}

/// A storage that takes ISO images and is shared by every node, if the cluster has one.
async fn shared_iso_storage(pve: &Observer) -> Option<String> {
    let storages = pve.api("GET", "/storage", &[]).await;
    storages.as_array()?.iter().find_map(|storage| {
        let content = storage["content"].as_str().unwrap_or_default();
        let shared = storage["shared"] == 1 || storage["shared"] == "1";
        let everywhere = storage["nodes"].is_null();
        let enabled = storage["disable"].is_null() || storage["disable"] == 0;
        (shared && everywhere && enabled && content.split(',').any(|c| c == "iso"))
            .then(|| storage["storage"].as_str().unwrap_or_default().to_owned())
    })
}

/// `count` proxies named `{base}-N` on `node` of the lab, seeds on `seeds`.
fn lab_fleet(
    host: &Host,
    base: &str,
    count: usize,
    node: &str,
    seeds: &str,
    extra: &str,
) -> String {
    let bridge = &host.facts.bridge;
    let template = &host.facts.template;
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "{seeds}"
}}

resource "proxmox_proxy_vm" "edge" {{
  count    = {count}
  name     = "{base}-${{count.index}}"
  template = "{template}"
  node     = "{node}"
  bridge   = "{bridge}"
  # The seed stays attached: these tests are about what it means for a migration.
  seed_lifetime = "vm"
{extra}}}
"#,
        Workspace::preamble()
    )
}

/// The lab's VMs of the fleet `base`, by name, `count` of them.
async fn lab_vms(pve: &Observer, base: &str, count: usize) -> Vec<Value> {
    let mut vms = Vec::new();
    for i in 0..count {
        let named = pve.ours_named(&format!("{base}-{i}")).await;
        assert_eq!(named.len(), 1, "one VM {base}-{i}: {named:?}");
        vms.extend(named);
    }
    vms
}
/// `status/current` of VM `vmid` on `node`.
async fn current(sim: &SimClient, node: &str, vmid: u64) -> Value {
    let path = format!("/nodes/{node}/qemu/{vmid}/status/current");
    sim.api("GET", &path, &[]).await
}

/// An operator puts a proxy under HA. Every power step is then a request the HA manager
/// carries out later: the update's reboot for a pending change (`reboot_if_needed`), the
/// start of a VM found stopped (drift), and the destroy's stop, which must have stopped the
/// VM before PVE destroys it. Nothing is left: no VM, no seed, no HA resource.
#[tokio::test(flavor = "multi_thread")]
async fn a_proxy_under_ha_is_updated_rebooted_restarted_and_destroyed() {
    let test = "a_proxy_under_ha_is_updated_rebooted_restarted_and_destroyed";
    if !simulator_only(test, "pve-sim's HA manager") {
        return;
    }
    // An HA manager slower than any request task, as on PVE (rounds of ~10 s): a step that
    // took the request's end for the VM's state would be found out.
    let mut slow_ha = pvesim::SimConfig::default();
    slow_ha.timings.ha_delay_ms = 1500;
    let (_sim, target) = start_sim(slow_ha).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    // No wait for an address: the start itself must be waited for.
    let reboot = "  reboot_if_needed = true\n  wait_for = \"none\"\n";
    ws.init_with(&fleet("ha", 1, "pve1", "proxy-seeds", reboot))
        .await;
    ws.apply().await.success();
    let id = vmid(&the_vm(&sim, "ha-0").await);
    let sid = format!("vm:{id}");
    sim.api("POST", "/cluster/ha/resources", &[("sid", &sid)])
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while current(&sim, "pve1", id).await["ha"]["state"] != "started" {
        assert!(Instant::now() < deadline, "the HA manager never took {sid}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ws.assert_plans_empty().await;

    // A change PVE applies at the next boot: the reboot applies it.
    let cores = format!("{reboot}  cores            = 2\n");
    ws.write_main_tf(&fleet("ha", 1, "pve1", "proxy-seeds", &cores));
    ws.apply().await.success();
    let vm = the_vm(&sim, "ha-0").await;
    assert_eq!(vm["config"]["cores"], "2", "{vm}");
    assert!(vm["pending"].as_object().unwrap().is_empty(), "{vm}");
    assert_eq!(vm["status"], "running", "{vm}");
    ws.assert_plans_empty().await;

    // Stopped behind Terraform's back (through HA, as PVE routes it): drift starts it.
    let upid = sim
        .api("POST", &format!("/nodes/pve1/qemu/{id}/status/stop"), &[])
        .await;
    sim.wait_task(&upid).await;
    until(&sim, "the HA manager stopped the VM", |state| {
        vms_named(state, "ha-0")[0]["status"] == "stopped"
    })
    .await;
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    assert!(
        flat(&plan.stdout()).contains("~ started = false -> true"),
        "{}",
        plan.stdout()
    );
    ws.apply().await.success();
    let vm = the_vm(&sim, "ha-0").await;
    assert_eq!(
        vm["status"], "running",
        "started through HA, waited for: {vm}"
    );
    assert_eq!(current(&sim, "pve1", id).await["ha"]["managed"], 1);
    ws.assert_plans_empty().await;

    // Destroyed while running under HA: stopped through HA, then destroyed with purge, sent
    // once the VM stopped (PVE refuses a running VM's destroy).
    let since = sim.journal().await.len();
    ws.destroy().await.success();
    let destroys: Vec<Value> = sim
        .journal()
        .await
        .into_iter()
        .skip(since)
        .filter(|e| e["method"] == "DELETE" && e["path"] == format!("/nodes/pve1/qemu/{id}"))
        .collect();
    assert_eq!(destroys.len(), 1, "one destroy: {destroys:?}");
    assert_eq!(destroys[0]["status"], 200, "{destroys:?}");
    assert_eq!(destroys[0]["params"]["purge"], "1", "{destroys:?}");
    assert_nothing_left(&sim, "ha-0", "proxy-seeds").await;
}

/// A node fails: its HA-managed proxy is recovered to another node and followed (the plan
/// is empty); a proxy on a node that is still down keeps its last known state with a
/// warning, and nothing is planned for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_node_s_proxies_are_recovered_or_kept() {
    let test = "a_failed_node_s_proxies_are_recovered_or_kept";
    if !simulator_only(test, "pve-sim's node failure and HA manager") {
        return;
    }
    let (sim_handle, target) = start_sim(world()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let hcl = format!(
        "{}\nresource \"proxmox_proxy_vm\" \"plain\" {{\n  name     = \"kept-0\"\n  \
         template = \"debian-13-proxy\"\n  node     = \"pve3\"\n}}\n",
        fleet("recovered", 1, "pve1", SHARED_SEEDS, "")
    );
    ws.init_with(&hcl).await;
    ws.apply().await.success();
    let id = vmid(&the_vm(&sim, "recovered-0").await);
    sim.api(
        "POST",
        "/cluster/ha/resources",
        &[("sid", &format!("vm:{id}"))],
    )
    .await;
    admin.fail_node("pve1").await;
    admin.fail_node("pve3").await;
    until(
        &sim,
        "HA recovered the VM to pve2 and started it",
        |state| {
            let vm = vms_named(state, "recovered-0")[0];
            vm["node"] == "pve2" && vm["status"] == "running"
        },
    )
    .await;

    let plan = ws
        .terraform(&["plan", "-detailed-exitcode", "-no-color", "-input=false"])
        .await;
    let text = flat(&plan.all_text());
    assert_eq!(plan.code(), 0, "nothing planned: {text}");
    assert!(
        text.contains("Proxy VM not refreshed: its node is unreachable"),
        "{text}"
    );
    ws.apply().await.success();
    let state = ws.state().await;
    let recovered = resources(&state)
        .into_iter()
        .find(|r| r["name"] == "edge")
        .unwrap();
    assert_eq!(recovered["values"]["current_node"], "pve2", "{recovered}");
    assert_eq!(recovered["values"]["node"], "pve1", "{recovered}");

    admin.recover_node("pve3").await;
    until(&sim, "the kept proxy ran again (onboot)", |state| {
        vms_named(state, "kept-0")[0]["status"] == "running"
    })
    .await;
    ws.assert_plans_empty().await;

    admin.fail_node("pve3").await;
    // A destroy while pve3 is down cannot reach the kept proxy: it fails saying so, and the
    // state keeps that VM for the destroy after the node is back (fuzzer seed 7018).
    let kept = vmid(&the_vm(&sim, "kept-0").await);
    let out = ws.destroy().await.failure();
    let text = flat(&out.all_text());
    assert!(text.contains("PVE could not reach the node"), "{text}");
    assert!(text.contains("The state still holds the VM"), "{text}");
    let listed = ws
        .terraform(&["state", "list", "-no-color"])
        .await
        .success()
        .stdout();
    assert!(listed.contains("proxmox_proxy_vm.plain"), "{listed}");
    assert_eq!(vmid(&the_vm(&sim, "kept-0").await), kept);

    admin.recover_node("pve3").await;
    // The failed destroy destroyed the recovered proxy (its node answers); the kept one
    // goes now. pve1, where the recovered proxy's seed was uploaded, is still down: the
    // seed, on shared storage, was deleted through the node the VM was recovered to.
    ws.destroy().await.success();
    assert_nothing_left(&sim, "recovered-0", SHARED_SEEDS).await;
    assert_nothing_left(&sim, "kept-0", "proxy-seeds").await;
    admin.recover_node("pve1").await;
}

/// A VM whose seed stays attached from a node-local storage cannot be migrated: PVE's
/// migration task refuses the local CD-ROM image (`QemuMigrate.pm` `scan_local_volumes`),
/// and the VM stays where it is, untouched, its plan empty. (The default world's
/// `proxy-seeds` is node-local; on a live lab it needs two nodes and a node-local seed
/// storage.)
#[tokio::test(flavor = "multi_thread")]
async fn a_node_local_seed_blocks_migration() {
    let test = "a_node_local_seed_blocks_migration";
    let Some(host) = Host::start(test, pvesim::SimConfig::default).await else {
        return;
    };
    let pve = host.observer();
    if host.facts.nodes.len() < 2 {
        return support::skip(test, "needs two nodes (PROXMOX_VE_TEST_NODES)");
    }
    let seeds = host.facts.seed_storage.clone();
    let storage = pve.api("GET", &format!("/storage/{seeds}"), &[]).await;
    if storage["shared"] == 1 || storage["shared"] == "1" {
        return support::skip(
            test,
            "the seed storage is shared: the migration would succeed",
        );
    }
    let (from, to) = (host.facts.node(0).to_owned(), host.facts.node(1).to_owned());
    let base = host.name("local");
    let ws = Workspace::new(host.target.clone());
    ws.init_with(&lab_fleet(&host, &base, 1, &from, &seeds, ""))
        .await;
    ws.apply().await.success();
    let vm = lab_vms(&pve, &base, 1).await.remove(0);
    let id = vmid(&vm);
    if !may_migrate(&host, &from, id).await {
        return skip_without_migrate(test, &ws).await;
    }
    let seed = vm["config"]["ide2"]
        .as_str()
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .to_owned();
    let upid = migrate(&pve, &from, id, &to).await;
    let upid = upid.as_str().unwrap().to_owned();
    let status_path = format!("/nodes/{from}/tasks/{upid}/status");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        let status = pve.api("GET", &status_path, &[]).await;
        if status["status"] == "stopped" {
            break status;
        }
        assert!(Instant::now() < deadline, "the migration never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let exit = status["exitstatus"].as_str().unwrap_or_default();
    assert!(exit.contains("migration aborted"), "{status}");
    let log_path = format!("/nodes/{from}/tasks/{upid}/log");
    let log = pve.api("GET", &log_path, &[("limit", "500")]).await;
    let lines: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["t"].as_str())
        .collect();
    let refusal = format!("can't migrate local disk '{seed}': local cdrom image");
    assert!(lines.iter().any(|l| l.contains(&refusal)), "{lines:#?}");
    let vm = pve.vm_at(id).await.expect("the VM is still there");
    assert_eq!(vm["node"], from.as_str(), "{vm}");
    assert_eq!(vm["status"], "running", "{vm}");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(pve.our_vms().await.is_empty(), "{:?}", pve.our_vms().await);
    assert!(pve.volumes_on(&seeds).await.is_empty());
}

/// A create whose name's VMID holds a VM on a node that is down cannot read whose that VM
/// is (PVE answers 595 for it): it fails at once saying so, instead of waiting out its
/// create timeout, and makes nothing (found when a fuzz run stalled for 15 minutes on it).
#[tokio::test(flavor = "multi_thread")]
async fn a_create_meeting_a_vm_on_a_failed_node_fails_at_once() {
    let test = "a_create_meeting_a_vm_on_a_failed_node_fails_at_once";
    if !simulator_only(test, "pve-sim's node failure") {
        return;
    }
    let (sim_handle, target) = start_sim(world()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let first = Workspace::new(target.clone());
    first
        .init_with(&fleet("down", 1, "pve3", "proxy-seeds", ""))
        .await;
    first.apply().await.success();
    let held = vmid(&the_vm(&sim, "down-0").await);
    admin.fail_node("pve3").await;

    // Another state makes the same name elsewhere: before the fix it polled the VM until
    // its create timeout.
    let second = Workspace::new(target);
    let timeouts = "  timeouts = {\n    create = \"40s\"\n  }\n";
    second
        .init_with(&fleet("down", 1, "pve1", "proxy-seeds", timeouts))
        .await;
    let out = second.apply().await.failure();
    let text = flat(&out.all_text());
    assert!(
        text.contains(&format!(
            "VMID {held} holds a VM on node pve3, which PVE cannot reach"
        )),
        "{text}"
    );
    assert!(!text.contains("within its timeout"), "{text}");
    let state = sim.state().await;
    assert_eq!(vms_named(&state, "down-0").len(), 1, "nothing was made");

    admin.recover_node("pve3").await;
    first.destroy().await.success();
    second.destroy().await.success();
    assert_nothing_left(&sim, "down-0", "proxy-seeds").await;
}

/// Runs `apply` while pve-sim holds its first seed upload, and meanwhile an operator
/// migrates the VM named `name` (made by the apply, stopped, no CD-ROM yet) to pve2.
async fn migrated_at_upload<T>(
    sim: &SimClient,
    admin: &pvesim::testing::Admin,
    name: &str,
    apply: impl std::future::Future<Output = T>,
) -> T {
    sim.hold_counting(1, "/upload").await;
    let ended = std::sync::atomic::AtomicBool::new(false);
    let applied = async {
        let out = apply.await;
        ended.store(true, std::sync::atomic::Ordering::SeqCst);
        out
    };
    let move_it = async {
        let gone = || ended.load(std::sync::atomic::Ordering::SeqCst);
        assert!(sim.until_held(gone).await, "the create uploads its seed");
        let id = vmid(&the_vm(sim, name).await);
        let moved = admin.migrate(id as u32, "pve2").await;
        let moved = moved.expect("the VM moves");
        assert_eq!(moved["node"], "pve2", "{moved}");
        sim.resume_hold().await;
    };
    let (out, ()) = tokio::join!(applied, move_it);
    out
}

/// A VM an operator migrates after its create uploaded the seed to the node it was cloned
/// on, and before the seed is attached (the VM is stopped and has no CD-ROM yet, so PVE
/// moves it, disks and all): the create goes on where the VM is and the VM first boots
/// its own seed there, with nothing of the seed left on the node it left. The seed storage
/// is node-local (`proxy-seeds`), so the upload on the old node is no use on the new one.
/// Deterministic: pve-sim holds the create's seed upload while the VM moves.
#[tokio::test(flavor = "multi_thread")]
async fn a_vm_moved_before_its_seed_is_attached_boots_its_own_seed() {
    let test = "a_vm_moved_before_its_seed_is_attached_boots_its_own_seed";
    if !simulator_only(test, "pve-sim's request hold and operator migration") {
        return;
    }
    let (sim_handle, target) = start_sim(world()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet("early", 1, "pve1", "proxy-seeds", ""))
        .await;
    let out = migrated_at_upload(&sim, &admin, "early-0", ws.apply()).await;
    let out = out.success();
    let vm = the_vm(&sim, "early-0").await;
    assert_eq!(vm["node"], "pve2", "{vm}\n{}", out.all_text());
    assert_eq!(vm["status"], "running", "{vm}");
    let state = ws.state().await;
    let values = &state["values"]["root_module"]["resources"][0]["values"];
    let seed = values["seed_volume"].as_str().unwrap().to_owned();
    assert_eq!(
        vm["guest"]["first_seed"]["volid"],
        seed.as_str(),
        "the VM first booted its own seed: {vm}"
    );
    let on = |node: &str| {
        let seeds = sim.volumes_on("proxy-seeds");
        let node = node.to_owned();
        async move {
            seeds
                .await
                .into_iter()
                .filter(|v| v["node"] == node.as_str())
                .count()
        }
    };
    assert_eq!(on("pve1").await, 0, "nothing of the seed stays on pve1");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim, "early", "proxy-seeds").await;
}

/// As above, without waiting (`wait_for = "none"`) and with the seed detached once ready
/// (`until_ready`): the apply after cloud-init finished detaches the seed and deletes the
/// copy where the VM is, not only the node it was uploaded to first.
#[tokio::test(flavor = "multi_thread")]
async fn a_seed_that_followed_its_vm_is_deleted_where_it_is_when_detached() {
    let test = "a_seed_that_followed_its_vm_is_deleted_where_it_is_when_detached";
    if !simulator_only(test, "pve-sim's request hold and operator migration") {
        return;
    }
    let (sim_handle, target) = start_sim(world()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let config = format!(
        "{}\nprovider \"proxmox\" {{\n  seed_storage = \"proxy-seeds\"\n}}\n\
         resource \"proxmox_proxy_vm\" \"edge\" {{\n  name     = \"later\"\n  \
         template = \"debian-13-proxy\"\n  node     = \"pve1\"\n  wait_for = \"none\"\n}}\n",
        Workspace::preamble()
    );
    ws.init_with(&config).await;
    let out = migrated_at_upload(&sim, &admin, "later", ws.apply()).await;
    out.success();
    until(&sim, "cloud-init finished in the guest", |state| {
        vms_named(state, "later")[0]["guest"]["cloud_init"] == "done"
    })
    .await;
    let out = ws.apply().await.success();
    let vm = the_vm(&sim, "later").await;
    assert_eq!(vm["node"], "pve2", "{vm}");
    assert_eq!(
        vm["config"]["ide2"],
        "none,media=cdrom",
        "detached: {vm}\n{}",
        out.all_text()
    );
    let isos = sim.volumes_on("proxy-seeds").await;
    assert!(
        isos.is_empty(),
        "the seed is gone from every node: {isos:?}"
    );
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim, "later", "proxy-seeds").await;
}
