//! Acceptance: HA as part of a proxy VM (#40). A destroy reads the HA state first and either
//! destroys the VM in every state PVE allows (a stopped VM in `error` with `purge`, as PVE
//! does) or refuses before any write; `ha` makes a VM an HA resource, keeps it through
//! updates and replacements (under `create_before_destroy` the new VM is protected before
//! the old one goes), reads an operator's changes as drift and is removed by the destroy; a
//! VM configured stopped is not started by its node's boot.
//!
//! The PVE behaviour these rely on, as pve-sim models it from PVE's source: qemu-server
//! 9.2.6 `API2/Qemu.pm` `destroy_vm` (`early_checks`: an HA resource needs `purge`, a
//! running VM is refused, nothing else about HA), `vm_stop`/`vm_start` of an HA-managed VM
//! are `hastop`/`hastart` requests; pve-ha-manager 5.2.0 `API2/HA/Resources.pm`
//! (`check_service_state`: a service in `error` takes only `state=disabled`), `HA/Manager.pm`
//! (the CRM's states); pve-manager `API2/Nodes.pm` `startall` (a node boot starts `onboot`
//! VMs that HA does not manage).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::sim_state::{ha_resources, the_vm, until, vmid, vms_named};
use crate::support::{SimClient, Workspace, flat, simulator_only, start_sim};

/// `count` proxies named `{base}-N` on `node`; `extra` goes into the resource block.
fn fleet(base: &str, count: usize, node: &str, extra: &str) -> String {
    format!(
        r#"{}
resource "proxmox_proxy_vm" "edge" {{
  count    = {count}
  name     = "{base}-${{count.index}}"
  template = "debian-13-proxy"
  node     = "{node}"
  wait_for = "none"
  # Kept: these tests are about HA, not about the seed's detach.
  seed_lifetime = "vm"
{extra}}}
"#,
        Workspace::preamble()
    )
}

/// A world whose HA manager runs quickly (a CRM round every 100 ms).
fn quick_ha() -> pvesim::SimConfig {
    let mut config = pvesim::SimConfig::default();
    config.timings.ha_delay_ms = 100;
    config
}

/// The HA manager's service row of `sid` (`/cluster/ha/status/current`).
async fn service(sim: &SimClient, sid: &str) -> Option<Value> {
    let rows = sim.api("GET", "/cluster/ha/status/current", &[]).await;
    rows.as_array()?
        .iter()
        .find(|row| row["type"] == "service" && row["sid"] == sid)
        .cloned()
}

/// Waits until the CRM shows `sid` in `crm_state`.
async fn until_crm_state(sim: &SimClient, sid: &str, crm_state: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let row = service(sim, sid).await;
        if row.as_ref().is_some_and(|r| r["crm_state"] == crm_state) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{sid} never reached `{crm_state}`: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Puts VM `id` under HA as an operator does, and waits until the CRM runs it.
async fn operator_adds_ha(sim: &SimClient, id: u64) -> String {
    let sid = format!("vm:{id}");
    sim.api("POST", "/cluster/ha/resources", &[("sid", &sid)])
        .await;
    until_crm_state(sim, &sid, "started").await;
    sid
}

/// What a destroy must leave: no VM of `base`, no seed ISO, no HA resource.
async fn assert_nothing_left(sim: &SimClient, base: &str) {
    let state = sim.state().await;
    assert!(vms_named(&state, base).is_empty(), "{state}");
    let isos: Vec<Value> = sim
        .volumes_on("proxy-seeds")
        .await
        .into_iter()
        .filter(|v| v["content"] == "iso")
        .collect();
    assert!(isos.is_empty(), "{isos:?}");
    let ha = ha_resources(sim).await;
    assert!(ha.is_empty(), "{ha:?}");
}

/// #40, case 1: a failed HA recovery leaves the service in `error` with the VM stopped.
/// PVE destroys that VM with `purge` (its `early_checks` ask nothing of the HA state), so the
/// destroy does, without a stop request that the HA stack refuses in `error`.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_vm_in_ha_error_is_destroyed() {
    let test = "a_stopped_vm_in_ha_error_is_destroyed";
    if !simulator_only(test, "pve-sim's HA manager") {
        return;
    }
    let (sim_handle, target) = start_sim(quick_ha()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet("err", 1, "pve1", "")).await;
    ws.apply().await.success();
    let id = vmid(&the_vm(&sim, "err-0").await);
    let sid = operator_adds_ha(&sim, id).await;
    // Stopped through HA, then the service fails.
    sim.api(
        "PUT",
        &format!("/cluster/ha/resources/{sid}"),
        &[("state", "stopped")],
    )
    .await;
    until(&sim, "the HA manager stopped the VM", |state| {
        vms_named(state, "err-0")[0]["status"] == "stopped"
    })
    .await;
    until_crm_state(&sim, &sid, "stopped").await;
    admin.ha_service_error(&sid).await;

    let since = sim.journal().await.len();
    ws.destroy().await.success();
    let writes = sim.writes_since(since).await;
    assert!(
        !writes
            .iter()
            .any(|w| w["path"].as_str().unwrap_or_default().contains("/status/")),
        "no power request for a stopped VM: {writes:#?}"
    );
    assert_nothing_left(&sim, "err-0").await;
}

/// A running VM whose service is in `error` cannot be stopped through HA, and PVE refuses to
/// destroy a running VM: the destroy is refused before any write, with the command that
/// gets the service out of `error`, and the VM is not marked `deleting`.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_vm_in_ha_error_is_refused_before_any_write() {
    let test = "a_running_vm_in_ha_error_is_refused_before_any_write";
    if !simulator_only(test, "pve-sim's HA manager") {
        return;
    }
    let (sim_handle, target) = start_sim(quick_ha()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet("errrun", 1, "pve1", "")).await;
    ws.apply().await.success();
    let id = vmid(&the_vm(&sim, "errrun-0").await);
    let sid = operator_adds_ha(&sim, id).await;
    admin.ha_service_error(&sid).await;

    let since = sim.journal().await.len();
    let out = ws.destroy().await.failure();
    let text = flat(&out.all_text());
    assert!(
        text.contains(&format!("ha-manager set vm:{id} --state disabled")),
        "{text}"
    );
    assert!(text.contains("Nothing was changed"), "{text}");
    let writes = sim.writes_since(since).await;
    assert!(writes.is_empty(), "no write: {writes:#?}");
    let vm = the_vm(&sim, "errrun-0").await;
    assert_eq!(vm["status"], "running", "{vm}");
    let description = vm["config"]["description"].as_str().unwrap_or_default();
    assert!(!description.contains("deleting"), "not marked: {vm}");

    // Fixed as the error says: the destroy goes on.
    sim.api(
        "PUT",
        &format!("/cluster/ha/resources/{sid}"),
        &[("state", "disabled")],
    )
    .await;
    ws.destroy().await.success();
    assert_nothing_left(&sim, "errrun-0").await;
}

/// #40, case 3: `started = false` with `start_on_boot` unset: the node's boot does not start
/// the VM (`onboot` follows `started`), and the plan after the reboot is empty.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_vm_stays_stopped_through_a_node_reboot() {
    let test = "a_stopped_vm_stays_stopped_through_a_node_reboot";
    if !simulator_only(test, "pve-sim's node reboot") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet("asleep", 1, "pve2", "  started = false\n"))
        .await;
    ws.apply().await.success();
    let vm = the_vm(&sim, "asleep-0").await;
    assert_eq!(vm["status"], "stopped", "{vm}");
    sim.reboot_node("pve2").await;
    until(&sim, "pve2 is back", |state| {
        state["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["online"] == true)
    })
    .await;
    let vm = the_vm(&sim, "asleep-0").await;
    assert_eq!(vm["status"], "stopped", "not started by the boot: {vm}");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

/// A world with a shared ISO storage, so a VM's seed moves with it and HA can migrate,
/// relocate and recover it.
fn shared_world() -> pvesim::SimConfig {
    let mut config = quick_ha();
    config.storages.push(pvesim::config::StorageConfig {
        id: "shared-seeds".into(),
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

fn shared_fleet(base: &str, count: usize, extra: &str) -> String {
    format!(
        "provider \"proxmox\" {{\n  seed_storage = \"shared-seeds\"\n}}\n{}",
        fleet(base, count, "pve1", extra)
    )
}

/// One VM named `{base}-0` under HA (`with_ha`), on a world with a shared seed storage:
/// applied, and started by the CRM. The simulator handle, its admin, a client, the
/// working directory, the VMID and the HA sid.
async fn one_ha_vm(
    base: &str,
    with_ha: &str,
) -> (
    pvesim::Sim,
    pvesim::testing::Admin,
    SimClient,
    Workspace,
    u64,
    String,
) {
    let (sim_handle, target) = start_sim(shared_world()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&shared_fleet(base, 1, with_ha)).await;
    ws.apply().await.success();
    let id = vmid(&the_vm(&sim, &format!("{base}-0")).await);
    let sid = format!("vm:{id}");
    until_crm_state(&sim, &sid, "started").await;
    (sim_handle, admin, sim, ws, id, sid)
}

async fn set_ha_state(sim: &SimClient, sid: &str, state: &str) {
    let path = format!("/cluster/ha/resources/{sid}");
    sim.api("PUT", &path, &[("state", state)]).await;
}

/// Destroy from the requested states `started`, `stopped`, `disabled` and `ignored`: nothing
/// is left (no VM, seed or HA resource), and no power request is sent to a VM that does not
/// run.
#[tokio::test(flavor = "multi_thread")]
async fn destroy_from_each_requested_state_leaves_nothing() {
    let test = "destroy_from_each_requested_state_leaves_nothing";
    if !simulator_only(test, "pve-sim's HA manager") {
        return;
    }
    let (_sim, target) = start_sim(quick_ha()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet("states", 4, "pve1", "")).await;
    ws.apply().await.success();
    let state = sim.state().await;
    let mut sids = Vec::new();
    for i in 0..4 {
        let id = vmid(vms_named(&state, &format!("states-{i}"))[0]);
        sids.push(operator_adds_ha(&sim, id).await);
    }
    set_ha_state(&sim, &sids[1], "stopped").await;
    set_ha_state(&sim, &sids[2], "disabled").await;
    set_ha_state(&sim, &sids[3], "ignored").await;
    until(&sim, "the HA manager stopped states-1 and -2", |state| {
        ["states-1", "states-2"]
            .iter()
            .all(|name| vms_named(state, name)[0]["status"] == "stopped")
    })
    .await;
    until_crm_state(&sim, &sids[1], "stopped").await;
    until_crm_state(&sim, &sids[2], "stopped").await;

    let since = sim.journal().await.len();
    ws.destroy().await.success();
    let writes = sim.writes_since(since).await;
    for sid in &sids[1..3] {
        let id = sid.trim_start_matches("vm:");
        let stops: Vec<&Value> = writes
            .iter()
            .filter(|w| w["path"] == format!("/nodes/pve1/qemu/{id}/status/stop"))
            .collect();
        assert!(stops.is_empty(), "no stop of a stopped VM: {stops:#?}");
    }
    assert_nothing_left(&sim, "states-").await;
}

/// Destroy while the HA manager migrates one VM and relocates another: each is waited for,
/// then destroyed where it landed.
#[tokio::test(flavor = "multi_thread")]
async fn destroy_waits_out_an_ha_migration_and_relocation() {
    let test = "destroy_waits_out_an_ha_migration_and_relocation";
    if !simulator_only(test, "pve-sim's HA manager") {
        return;
    }
    let (sim_handle, target) = start_sim(shared_world()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&shared_fleet("moving", 2, "")).await;
    ws.apply().await.success();
    let state = sim.state().await;
    let ids: Vec<u64> = (0..2)
        .map(|i| vmid(vms_named(&state, &format!("moving-{i}"))[0]))
        .collect();
    let mut sids = Vec::new();
    for id in &ids {
        sids.push(operator_adds_ha(&sim, *id).await);
    }
    // Moves slow enough for the destroy to meet them.
    admin.set_task_ms("qmigrate", 3000).await;
    for (sid, verb) in sids.iter().zip(["migrate", "relocate"]) {
        let path = format!("/cluster/ha/resources/{sid}/{verb}");
        sim.api("POST", &path, &[("node", "pve2")]).await;
    }
    until_crm_state(&sim, &sids[0], "migrate").await;

    let since = sim.journal().await.len();
    ws.destroy().await.success();
    let journal: Vec<Value> = sim.journal().await.into_iter().skip(since).collect();
    for id in &ids {
        let destroys: Vec<&Value> = journal
            .iter()
            .filter(|e| e["method"] == "DELETE" && e["path"] == format!("/nodes/pve2/qemu/{id}"))
            .collect();
        assert_eq!(destroys.len(), 1, "destroyed where it landed: {journal:#?}");
        assert_eq!(destroys[0]["status"], 200, "{destroys:?}");
    }
    assert_nothing_left(&sim, "moving-").await;
}

/// Destroy of a VM whose node failed, while its service is in `fence` and then in `recovery`
/// (a strict node-affinity rule leaves no other node): refused before any write (PVE cannot
/// reach the node that holds its config); once the node is back and the VM runs again, the
/// destroy leaves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn destroy_during_fence_and_recovery_writes_nothing() {
    let test = "destroy_during_fence_and_recovery_writes_nothing";
    if !simulator_only(test, "pve-sim's node failure and HA manager") {
        return;
    }
    let mut config = shared_world();
    config.timings.ha_delay_ms = 1500;
    let (sim_handle, target) = start_sim(config).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&shared_fleet("fenced", 1, "")).await;
    ws.apply().await.success();
    let id = vmid(&the_vm(&sim, "fenced-0").await);
    let sid = operator_adds_ha(&sim, id).await;
    let rule = [
        ("rule", "pin"),
        ("type", "node-affinity"),
        ("resources", sid.as_str()),
        ("nodes", "pve1"),
        ("strict", "1"),
    ];
    sim.api("POST", "/cluster/ha/rules", &rule).await;
    admin.fail_node("pve1").await;
    for crm_state in ["fence", "recovery"] {
        until_crm_state(&sim, &sid, crm_state).await;
        let since = sim.journal().await.len();
        let out = ws.destroy().await.failure();
        let text = flat(&out.all_text());
        assert!(text.contains("PVE could not reach the node"), "{text}");
        let writes = sim.writes_since(since).await;
        assert!(writes.is_empty(), "{crm_state}: no write: {writes:#?}");
    }
    admin.recover_node("pve1").await;
    until(&sim, "the HA manager started the VM again", |state| {
        vms_named(state, "fenced-0")[0]["status"] == "running"
    })
    .await;
    ws.destroy().await.success();
    assert_nothing_left(&sim, "fenced-0").await;
}

/// What a failed HA recovery really leaves (#40's report): the node fails, the VM's seed is
/// on that node's local storage, so its start fails on every recovery node and the service
/// ends in `error`, stopped. Once the node is back, the destroy removes VM, seed and resource.
#[tokio::test(flavor = "multi_thread")]
async fn destroy_after_a_failed_recovery_leaves_nothing() {
    let test = "destroy_after_a_failed_recovery_leaves_nothing";
    if !simulator_only(test, "pve-sim's node failure and HA manager") {
        return;
    }
    let (sim_handle, target) = start_sim(quick_ha()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet("lost", 1, "pve1", "")).await;
    ws.apply().await.success();
    let id = vmid(&the_vm(&sim, "lost-0").await);
    let sid = operator_adds_ha(&sim, id).await;
    admin.fail_node("pve1").await;
    until_crm_state(&sim, &sid, "error").await;
    admin.recover_node("pve1").await;
    until(&sim, "pve1 is back", |state| {
        state["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["online"] == true)
    })
    .await;
    ws.destroy().await.success();
    assert_nothing_left(&sim, "lost-0").await;
}
/// #40, case 2: a VM an operator put under HA, with `ha` unset: a plan that replaces it says
/// the replacement will not be under HA.
#[tokio::test(flavor = "multi_thread")]
async fn replacing_a_vm_an_operator_put_under_ha_warns() {
    let test = "replacing_a_vm_an_operator_put_under_ha_warns";
    if !simulator_only(test, "pve-sim's HA manager") {
        return;
    }
    let (_sim, target) = start_sim(quick_ha()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let data = |n: u32| format!("  user_data = \"#cloud-config\\n# {n}\\n\"\n");
    ws.init_with(&fleet("opha", 1, "pve1", &data(1))).await;
    ws.apply().await.success();
    let id = vmid(&the_vm(&sim, "opha-0").await);
    operator_adds_ha(&sim, id).await;
    ws.assert_plans_empty().await;

    ws.write_main_tf(&fleet("opha", 1, "pve1", &data(2)));
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    let text = flat(&plan.all_text());
    assert!(text.contains("must be replaced"), "{text}");
    assert!(
        text.contains(&format!(
            "VM {id} is an HA resource (vm:{id}), put under HA outside this configuration"
        )),
        "{text}"
    );
    ws.destroy().await.success();
    assert_nothing_left(&sim, "opha-0").await;
}

/// The journal index of the first entry `matches` picks.
fn first_index(journal: &[Value], matches: impl Fn(&Value) -> bool) -> Option<usize> {
    journal.iter().position(matches)
}

/// The VMID of each VM named `{base}-N`, by N.
fn vmids_by_name(state: &Value, base: &str, count: usize) -> Vec<u64> {
    (0..count)
        .map(|i| vmid(vms_named(state, &format!("{base}-{i}"))[0]))
        .collect()
}

/// An HA fleet rolled by a `user_data` change under `create_before_destroy`: every new VM
/// is an HA resource before its predecessor's destroy starts (its first write), so the
/// running set is never without HA protection; afterwards every VM is under HA and the
/// plans are empty.
#[tokio::test(flavor = "multi_thread")]
async fn an_ha_fleet_rolls_without_a_moment_outside_ha() {
    let test = "an_ha_fleet_rolls_without_a_moment_outside_ha";
    if !simulator_only(test, "pve-sim's HA manager and journal") {
        return;
    }
    let (_sim, target) = start_sim(quick_ha()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let hcl = |n: u32| {
        let extra = format!(
            "  user_data = \"#cloud-config\\n# {n}\\n\"\n  ha = {{\n    max_restart = 2\n  }}\n  \
             lifecycle {{\n    create_before_destroy = true\n  }}\n"
        );
        fleet("roll", 3, "pve1", &extra)
    };
    ws.init_with(&hcl(1)).await;
    ws.apply().await.success();
    let before = vmids_by_name(&sim.state().await, "roll", 3);
    let resources = ha_resources(&sim).await;
    for id in &before {
        let sid = format!("vm:{id}");
        let resource = resources.iter().find(|r| r["sid"] == sid);
        let resource = resource.unwrap_or_else(|| panic!("{sid} under HA: {resources:?}"));
        assert_eq!(resource["max_restart"], 2, "{resource}");
        until_crm_state(&sim, &sid, "started").await;
    }
    ws.assert_plans_empty().await;

    let since = sim.journal().await.len();
    ws.write_main_tf(&hcl(2));
    ws.apply().await.success();
    let journal: Vec<Value> = sim.journal().await.into_iter().skip(since).collect();
    let state = sim.state().await;
    assert_eq!(vms_named(&state, "roll-").len(), 3, "{state}");
    let after = vmids_by_name(&state, "roll", 3);
    let resources = ha_resources(&sim).await;
    assert_eq!(resources.len(), 3, "{resources:?}");
    for (predecessor, new) in before.iter().zip(&after) {
        assert_ne!(predecessor, new);
        let sid = format!("vm:{new}");
        assert!(resources.iter().any(|r| r["sid"] == sid), "{resources:?}");
        let added = first_index(&journal, |e| {
            e["method"] == "POST"
                && e["path"] == "/cluster/ha/resources"
                && e["params"]["sid"] == sid
                && e["status"] == 200
        })
        .unwrap_or_else(|| panic!("{sid} added: {journal:#?}"));
        let destroy_starts = first_index(&journal, |e| {
            let path = e["path"].as_str().unwrap_or_default();
            matches!(e["method"].as_str(), Some("POST" | "PUT" | "DELETE"))
                && path.starts_with(&format!("/nodes/pve1/qemu/{predecessor}"))
        })
        .unwrap_or_else(|| panic!("{predecessor} destroyed: {journal:#?}"));
        assert!(
            added < destroy_starts,
            "{sid} under HA (entry {added}) before {predecessor}'s destroy starts (entry \
             {destroy_starts})"
        );
    }
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim, "roll-").await;
}

/// `ha` read back: an operator's change of the resource shows in the plan and the apply
/// puts it back; a resource removed by hand is added again; `ha` dropped from the
/// configuration takes the VM out of HA and keeps the VM. A rebalancer's move leaves an
/// empty plan.
#[tokio::test(flavor = "multi_thread")]
async fn ha_drift_is_planned_and_the_rebalancer_s_move_is_not() {
    let test = "ha_drift_is_planned_and_the_rebalancer_s_move_is_not";
    if !simulator_only(test, "pve-sim's HA manager and rebalancer") {
        return;
    }
    let with_ha = "  ha = {\n    max_restart = 2\n    comment     = \"edge\"\n  }\n";
    let (_sim_handle, admin, sim, ws, id, sid) = one_ha_vm("drift", with_ha).await;
    ws.assert_plans_empty().await;

    // The rebalancer moves it: followed, nothing planned.
    admin.ha_rebalance(&sid, "pve2").await.expect("a rebalance");
    until(&sim, "the rebalancer moved the VM", |state| {
        let vm = vms_named(state, "drift-0")[0];
        vm["node"] == "pve2" && vm["status"] == "running"
    })
    .await;
    until_crm_state(&sim, &sid, "started").await;
    ws.assert_plans_empty().await;

    // An operator's change: planned back.
    let path = format!("/cluster/ha/resources/{sid}");
    sim.api("PUT", &path, &[("max_restart", "5")]).await;
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    let text = flat(&plan.stdout());
    assert!(text.contains("~ max_restart = 5 -> 2"), "{text}");
    ws.apply().await.success();
    let resource = sim.api("GET", &path, &[]).await;
    assert_eq!(resource["max_restart"], 2, "{resource}");
    ws.assert_plans_empty().await;

    // Removed by hand: added again.
    sim.api("DELETE", &path, &[]).await;
    ws.apply().await.success();
    assert_eq!(ha_resources(&sim).await.len(), 1);
    ws.assert_plans_empty().await;

    // `ha` dropped: the VM leaves HA and stays.
    ws.write_main_tf(&shared_fleet("drift", 1, ""));
    ws.apply().await.success();
    assert!(ha_resources(&sim).await.is_empty());
    assert_eq!(vmid(&the_vm(&sim, "drift-0").await), id);
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

/// #42: a refresh keeps one cluster listing however long it runs, so a VM may move after
/// it. The read that does not find the VM on its listed node looks in a listing made after
/// that look and follows the VM; a listing kept for 5 s left the same window, in which the
/// read called the VM gone. Deterministic: pve-sim holds the refresh's config read of the
/// VM (its request index, from a reference run) while the rebalancer moves the VM, then
/// drops that read unanswered, and the provider asks again, on the old node.
#[tokio::test(flavor = "multi_thread")]
async fn a_vm_moved_during_the_refresh_is_followed_not_lost() {
    let test = "a_vm_moved_during_the_refresh_is_followed_not_lost";
    if !simulator_only(test, "pve-sim's request hold and rebalancer") {
        return;
    }
    let with_ha = "  ha = {\n    max_restart = 2\n  }\n";
    let (_sim_handle, admin, sim, ws, id, sid) = one_ha_vm("moved", with_ha).await;
    let refresh = [
        "apply",
        "-refresh-only",
        "-auto-approve",
        "-input=false",
        "-no-color",
    ];
    let config_read = |node: &str| format!("/nodes/{node}/qemu/{id}/pending");

    // The reference run: where the refresh reads the VM's config.
    let since = sim.journal_len().await;
    ws.terraform(&refresh).await.success();
    let run = sim.journal_since(since).await;
    let index = run
        .iter()
        .position(|e| e["method"] == "GET" && e["path"] == config_read("pve1"))
        .unwrap_or_else(|| panic!("the refresh read the config: {run:#?}"))
        + 1;

    let since = sim.journal_len().await;
    sim.hold_request(index as u64, false).await;
    let ended = std::sync::atomic::AtomicBool::new(false);
    let refreshed = async {
        let out = ws.terraform(&refresh).await;
        ended.store(true, std::sync::atomic::Ordering::SeqCst);
        out
    };
    let move_it = async {
        let held = sim
            .until_held(|| ended.load(std::sync::atomic::Ordering::SeqCst))
            .await;
        assert!(held, "the refresh reached the VM's config read");
        admin.ha_rebalance(&sid, "pve2").await.expect("a rebalance");
        until(&sim, "the rebalancer moved the VM", |state| {
            let vm = vms_named(state, "moved-0")[0];
            vm["node"] == "pve2" && vm["status"] == "running"
        })
        .await;
        sim.release_hold().await;
    };
    let (out, ()) = tokio::join!(refreshed, move_it);
    let out = out.success();

    // Asked again on the listed node, not found there, listed again, read where it is.
    let run = sim.journal_since(since).await;
    let after = |from: usize, what: &dyn Fn(&Value) -> bool| {
        run.iter().skip(from).position(what).map(|at| at + from)
    };
    let not_there = after(0, &|e| {
        e["path"] == config_read("pve1") && e["status"] != 200
    })
    .unwrap_or_else(|| panic!("the read on the old node: {run:#?}"));
    let listed = after(not_there, &|e| e["path"] == "/cluster/resources")
        .unwrap_or_else(|| panic!("a listing after the miss: {run:#?}"));
    after(listed, &|e| {
        e["path"] == config_read("pve2") && e["status"] == 200
    })
    .unwrap_or_else(|| panic!("the read on the new node after the listing: {run:#?}"));

    let state = ws.state().await;
    let vm = &state["values"]["root_module"]["resources"][0]["values"];
    assert_eq!(vm["current_node"], "pve2", "{}\n{}", vm, out.all_text());
    assert_eq!(vm["vmid"], id, "{vm}");
    assert_eq!(vm["status"], "running", "{vm}");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

/// A VM that moves again before the read that followed it looks (pve1 to pve2 to pve3, HA
/// relocating it twice within one refresh) is followed again: a listing made after each
/// miss says where it is, and only one that no longer lists it makes it gone. Following a
/// single move called it gone, and Terraform dropped a running VM from the state.
/// Deterministic: pve-sim holds each config read until the rebalancer has moved the VM on.
#[tokio::test(flavor = "multi_thread")]
async fn a_vm_moved_twice_during_the_refresh_is_followed_not_lost() {
    let test = "a_vm_moved_twice_during_the_refresh_is_followed_not_lost";
    if !simulator_only(test, "pve-sim's request hold and rebalancer") {
        return;
    }
    let with_ha = "  ha = {\n    max_restart = 2\n  }\n";
    let (_sim_handle, admin, sim, ws, id, sid) = one_ha_vm("twice", with_ha).await;
    let config_read = |node: &str| format!("GET /nodes/{node}/qemu/{id}/pending");
    let refresh = [
        "apply",
        "-refresh-only",
        "-auto-approve",
        "-input=false",
        "-no-color",
    ];
    let move_to = |node: &'static str| {
        let (admin, sim, sid) = (&admin, &sim, &sid);
        async move {
            admin.ha_rebalance(sid, node).await.expect("a rebalance");
            until(sim, "the rebalancer moved the VM", |state| {
                let vm = vms_named(state, "twice-0")[0];
                vm["node"] == node && vm["status"] == "running"
            })
            .await;
        }
    };

    sim.hold_counting(1, &config_read("pve1")).await;
    let ended = std::sync::atomic::AtomicBool::new(false);
    let refreshed = async {
        let out = ws.terraform(&refresh).await;
        ended.store(true, std::sync::atomic::Ordering::SeqCst);
        out
    };
    let move_twice = async {
        let gone = || ended.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            sim.until_held(gone).await,
            "the refresh read the VM on pve1"
        );
        move_to("pve2").await;
        // Replacing the hold drops the held read: the provider asks pve1 again, misses,
        // lists, and its read on pve2 is held in turn.
        sim.hold_counting(1, &config_read("pve2")).await;
        assert!(
            sim.until_held(gone).await,
            "the refresh followed the VM to pve2"
        );
        move_to("pve3").await;
        sim.resume_hold().await;
    };
    let (out, ()) = tokio::join!(refreshed, move_twice);
    let out = out.success();
    let state = ws.state().await;
    let vm = &state["values"]["root_module"]["resources"][0]["values"];
    assert_eq!(vm["current_node"], "pve3", "{}\n{}", vm, out.all_text());
    assert_eq!(vm["vmid"], id, "{vm}");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

/// One HA-managed VM named `name` on pve1, seeds on the shared storage, with the default
/// waits (the address, then cloud-init's verdict) and the seed's detach.
fn one_waiting_ha_vm(name: &str) -> String {
    one_ha_vm_config(name, true)
}

/// [`one_waiting_ha_vm`], running or not as `started` says.
fn one_ha_vm_config(name: &str, started: bool) -> String {
    format!(
        "provider \"proxmox\" {{\n  seed_storage = \"shared-seeds\"\n}}\n{}\
         resource \"proxmox_proxy_vm\" \"edge\" {{\n  name     = \"{name}\"\n  \
         template = \"debian-13-proxy\"\n  node     = \"pve1\"\n  started  = {started}\n  \
         ha = {{\n    max_restart = 2\n  }}\n}}\n",
        Workspace::preamble()
    )
}

/// After an apply whose output is `out`: the VM named `name`, made on pve1 and started
/// where HA or an operator moved it, runs on `node`; the state says so, with its address
/// and its seed detached; nothing is planned; the destroy leaves nothing.
async fn ran_where_it_went(sim: &SimClient, ws: &Workspace, name: &str, node: &str, out: &str) {
    let vm = the_vm(sim, name).await;
    assert_eq!(vm["node"], node, "{vm}\n{out}");
    assert_eq!(vm["status"], "running", "{vm}");
    let state = ws.state().await;
    let values = &state["values"]["root_module"]["resources"][0]["values"];
    assert_eq!(values["node"], "pve1", "{values}");
    assert_eq!(values["current_node"], node, "{values}");
    assert_eq!(values["status"], "running", "{values}");
    let address = values["ipv4_address"].as_str();
    assert!(address.is_some_and(|a| !a.is_empty()), "{values}");
    assert_eq!(values["seed_volume"], "", "the seed was detached: {values}");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(sim, name).await;
}

/// A move of the HA-managed VM named `name` to node `to`, by the rebalancer.
struct Move<'a> {
    name: &'a str,
    to: &'a str,
}

/// Runs `command` while pve-sim holds its first request whose line contains `read`, moves
/// the VM meanwhile and lets the request go on once the VM runs where it went: a move
/// between what the command listed and its read, at a request, not at a time.
async fn moved_at_read<T>(
    sim: &SimClient,
    admin: &pvesim::testing::Admin,
    read: &str,
    moved: Move<'_>,
    command: impl std::future::Future<Output = T>,
) -> T {
    sim.hold_counting(1, read).await;
    let ended = std::sync::atomic::AtomicBool::new(false);
    let ran = async {
        let out = command.await;
        ended.store(true, std::sync::atomic::Ordering::SeqCst);
        out
    };
    let move_it = async {
        let gone = || ended.load(std::sync::atomic::Ordering::SeqCst);
        assert!(sim.until_held(gone).await, "the command sent `{read}`");
        // Known only now for a VM the command itself made.
        let sid = format!("vm:{}", vmid(&the_vm(sim, moved.name).await));
        admin
            .ha_rebalance(&sid, moved.to)
            .await
            .expect("a rebalance");
        until(sim, "the rebalancer moved the VM", |state| {
            let vm = vms_named(state, moved.name)[0];
            vm["node"] == moved.to && vm["status"] == "running"
        })
        .await;
        sim.resume_hold().await;
    };
    let (out, ()) = tokio::join!(ran, move_it);
    out
}

/// A create killed after it made its VM an HA resource, whose resource then leaves the
/// configuration: the next full destroy removes that VM even when HA moves it after the
/// destroy listed the cluster. The sweep found the VM through the process's listing and
/// read it on the listed node; a VM no longer there was skipped as "not ours", and the
/// destroy left it running. Deterministic: pve-sim holds the sweep's first read of the VM
/// while the rebalancer moves it, then lets the read go on to the old node.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_create_moved_by_ha_during_the_destroy_is_still_removed() {
    let test = "a_killed_create_moved_by_ha_during_the_destroy_is_still_removed";
    if !simulator_only(test, "pve-sim's request hold and rebalancer") {
        return;
    }
    let (sim_handle, target) = start_sim(shared_world()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let kept = "resource \"proxmox_proxy_vm\" \"kept\" {\n  name     = \"swept-kept\"\n  \
        template = \"debian-13-proxy\"\n  node     = \"pve1\"\n  wait_for = \"none\"\n}\n";
    let dropped = "resource \"proxmox_proxy_vm\" \"dropped\" {\n  name     = \"swept-ha\"\n  \
        template = \"debian-13-proxy\"\n  node     = \"pve1\"\n  wait_for = \"none\"\n  \
        ha = {\n    max_restart = 2\n  }\n}\n";
    let config = |body: &str| {
        format!(
            "provider \"proxmox\" {{\n  seed_storage = \"shared-seeds\"\n}}\n{}{body}",
            Workspace::preamble()
        )
    };
    ws.init_with(&config(kept)).await;
    ws.apply().await.success();

    // Killed once its VM is an HA resource, before the create finished.
    ws.write_main_tf(&config(&format!("{kept}{dropped}")));
    sim.hold_answer_counting(1, "POST /cluster/ha/resources")
        .await;
    let mut apply = ws.spawn_terraform(&["apply", "-auto-approve", "-input=false"]);
    assert!(
        sim.until_held(|| apply.exited()).await,
        "the create made its VM an HA resource"
    );
    apply.kill_group();
    sim.release_hold().await;
    let orphan = vmid(&the_vm(&sim, "swept-ha").await);
    let sid = format!("vm:{orphan}");
    until_crm_state(&sim, &sid, "started").await;
    let description = the_vm(&sim, "swept-ha").await["config"]["description"].clone();
    assert!(
        description
            .as_str()
            .is_some_and(|d| d.contains("proxyvm-phase: creating")),
        "{description}"
    );

    // The destroy's sweep reads the VM where its listing put it; HA moves it first.
    ws.write_main_tf(&config(kept));
    let read = format!("GET /nodes/pve1/qemu/{orphan}/config");
    let moved = Move {
        name: "swept-ha",
        to: "pve2",
    };
    let out = moved_at_read(&sim, &admin, &read, moved, ws.destroy()).await;
    let text = flat(&out.success().all_text());
    assert!(
        text.contains(&format!("VM {orphan} (`swept-ha`) on pve2")),
        "{text}"
    );
    assert_nothing_left(&sim, "swept-").await;
}

/// An update follows a VM that HA moved after the apply listed the cluster: the apply keeps
/// one listing for all its resources, so a VM may move after it (the rebalancer, an
/// operator's migration during a long apply). The update read the VM on the listed node,
/// missed it there, and failed saying the VM was "no longer this state's". Deterministic:
/// pve-sim holds the update's first read of the VM while the rebalancer moves it.
#[tokio::test(flavor = "multi_thread")]
async fn an_update_follows_a_vm_moved_after_the_apply_listed_it() {
    let test = "an_update_follows_a_vm_moved_after_the_apply_listed_it";
    if !simulator_only(test, "pve-sim's request hold and rebalancer") {
        return;
    }
    let with_ha = "  ha = {\n    max_restart = 2\n  }\n";
    let (_sim_handle, admin, sim, ws, id, _sid) = one_ha_vm("follow", with_ha).await;
    // A change that takes a reboot: the steps after the move run where the VM went.
    let change = format!("  cores = 2\n  reboot_if_needed = true\n{with_ha}");
    ws.write_main_tf(&shared_fleet("follow", 1, &change));
    ws.terraform(&["plan", "-input=false", "-out=tfplan"])
        .await
        .success();
    let read = format!("GET /nodes/pve1/qemu/{id}/config");
    let moved = Move {
        name: "follow-0",
        to: "pve2",
    };
    let applied = ws.terraform(&["apply", "-input=false", "tfplan"]);
    let out = moved_at_read(&sim, &admin, &read, moved, applied).await;
    let out = out.success();
    let vm = the_vm(&sim, "follow-0").await;
    assert_eq!(vm["node"], "pve2", "{vm}\n{}", out.all_text());
    assert_eq!(vm["config"]["cores"], "2", "{vm}");
    assert_eq!(vm["pending"], serde_json::json!({}), "{vm}");
    let state = ws.state().await;
    let values = &state["values"]["root_module"]["resources"][0]["values"];
    assert_eq!(values["current_node"], "pve2", "{values}");
    assert_eq!(values["cores"], 2, "{values}");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

/// A cluster with `crs: ha-rebalance-on-start=1` starts a new HA service on the node its
/// scheduler scores best, relocating the stopped VM there first (pve-ha-manager
/// `next_state_request_start`): the create's VM, made HA before its start, starts on
/// another node than the one it was cloned on. The create follows it there, waits for its
/// first boot there, and the state records where it runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_follows_its_vm_when_ha_starts_it_on_another_node() {
    let test = "a_create_follows_its_vm_when_ha_starts_it_on_another_node";
    if !simulator_only(test, "pve-sim's HA manager with rebalance-on-start") {
        return;
    }
    let mut world = shared_world();
    world.ha_rebalance_on_start = true;
    let (sim_handle, target) = start_sim(world).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    // Waits for cloud-init's verdict and detaches the seed, both through the guest.
    ws.init_with(&one_waiting_ha_vm("balanced")).await;
    let out = ws.apply().await.success();
    let vm = the_vm(&sim, "balanced").await;
    let id = vmid(&vm);
    assert_eq!(vm["node"], "pve3", "{vm}\n{}", out.all_text());
    assert_eq!(vm["status"], "running", "{vm}");
    let log = admin.ha_log().await;
    let selected = format!("service vm:{id}: re-balance selected new node pve3 for startup");
    assert!(log.contains(&selected), "{log:?}");
    ran_where_it_went(&sim, &ws, "balanced", "pve3", &out.all_text()).await;
}

/// Under `ha-rebalance-on-start`, an HA VM made stopped starts where the HA manager's
/// scheduler puts it when an update starts it: the update follows it there, its first boot
/// is judged there and its seed detached, and the state records where it runs.
#[tokio::test(flavor = "multi_thread")]
async fn an_update_that_starts_an_ha_vm_follows_it_to_where_ha_starts_it() {
    let test = "an_update_that_starts_an_ha_vm_follows_it_to_where_ha_starts_it";
    if !simulator_only(test, "pve-sim's HA manager with rebalance-on-start") {
        return;
    }
    let mut world = shared_world();
    world.ha_rebalance_on_start = true;
    let (_sim_handle, target) = start_sim(world).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let config = |started: bool| one_ha_vm_config("later", started);
    ws.init_with(&config(false)).await;
    ws.apply().await.success();
    let vm = the_vm(&sim, "later").await;
    assert_eq!(
        (&vm["node"], &vm["status"]),
        (&"pve1".into(), &"stopped".into())
    );
    ws.write_main_tf(&config(true));
    let out = ws.apply().await.success();
    ran_where_it_went(&sim, &ws, "later", "pve3", &out.all_text()).await;
}

/// A create whose VM HA moves while the create waits on its guest: the create follows it
/// and waits there. A running VM moves under the rebalancer, a node-affinity rule or an
/// operator's migration; the guest agent's calls went to the node the wait began on, where
/// PVE no longer knows the VM, and the create failed with its VM running elsewhere.
/// Deterministic: pve-sim holds the create's first guest request whose line contains
/// `guest_read` while the rebalancer moves the VM, then lets it go on to the old node.
async fn a_create_follows_its_vm_moved_while_it_waits_on(test: &str, guest_read: &str) {
    if !simulator_only(test, "pve-sim's request hold and rebalancer") {
        return;
    }
    let (sim_handle, target) = start_sim(shared_world()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    // Waits for the address and cloud-init's verdict, and detaches the seed, all through
    // the guest agent.
    ws.init_with(&one_waiting_ha_vm("waited")).await;
    let moved = Move {
        name: "waited",
        to: "pve2",
    };
    let out = moved_at_read(&sim, &admin, guest_read, moved, ws.apply()).await;
    let out = out.success();
    ran_where_it_went(&sim, &ws, "waited", "pve2", &out.all_text()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_follows_its_vm_moved_while_it_waits_for_the_address() {
    a_create_follows_its_vm_moved_while_it_waits_on(
        "a_create_follows_its_vm_moved_while_it_waits_for_the_address",
        "/agent/network-get-interfaces",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_follows_its_vm_moved_while_it_waits_for_cloud_init() {
    a_create_follows_its_vm_moved_while_it_waits_on(
        "a_create_follows_its_vm_moved_while_it_waits_for_cloud_init",
        "file=/run/cloud-init/status.json",
    )
    .await;
}

/// The seed's detach asks the guest for cloud-init's `manual-clean` marker beside its read
/// of the config: both go where the VM went.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_follows_its_vm_moved_while_it_detaches_the_seed() {
    a_create_follows_its_vm_moved_while_it_waits_on(
        "a_create_follows_its_vm_moved_while_it_detaches_the_seed",
        "file=/var/lib/cloud/instance/manual-clean",
    )
    .await;
}

/// The create's last look at its VM (config, power state) for the state it returns.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_follows_its_vm_moved_while_it_observes_it() {
    a_create_follows_its_vm_moved_while_it_waits_on(
        "a_create_follows_its_vm_moved_while_it_observes_it",
        "/pending",
    )
    .await;
}

/// An update that starts an HA VM made stopped waits for its first boot's verdict, then
/// detaches its seed: a VM the HA manager moves during that wait is followed, and the state
/// records where it runs. Deterministic: pve-sim holds the verdict's first read while the
/// rebalancer moves the VM.
#[tokio::test(flavor = "multi_thread")]
async fn an_update_follows_its_vm_moved_while_it_waits_for_the_first_verdict() {
    let test = "an_update_follows_its_vm_moved_while_it_waits_for_the_first_verdict";
    if !simulator_only(test, "pve-sim's request hold and rebalancer") {
        return;
    }
    let (sim_handle, target) = start_sim(shared_world()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let config = |started: bool| one_ha_vm_config("verdict", started);
    ws.init_with(&config(false)).await;
    ws.apply().await.success();
    ws.write_main_tf(&config(true));
    let moved = Move {
        name: "verdict",
        to: "pve2",
    };
    let status_read = "file=/run/cloud-init/status.json";
    let out = moved_at_read(&sim, &admin, status_read, moved, ws.apply()).await;
    let out = out.success();
    ran_where_it_went(&sim, &ws, "verdict", "pve2", &out.all_text()).await;
}
