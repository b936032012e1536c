//! Acceptance: one VM per fleet and name, from any working directory (#38, invariant I2).
//! A create finds every VM of its fleet and name in the cluster, not only those on its VMID
//! probe path: a fleet that rolled once under `create_before_destroy` has its VMs off their
//! base VMIDs, and a fresh working directory (a lost state, a new CI runner, `state rm`) must
//! still be refused with the import hint instead of making a second VM of the name.

use crate::support;

use std::collections::BTreeSet;
use support::{SimClient, Workspace, acceptance_enabled, start_sim};

fn fleet(greeting: &str) -> String {
    format!(
        r##"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "edge" {{
  name      = "roll-1"
  template  = "debian-13-proxy"
  memory    = 512
  user_data = "#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: {greeting}\n"

  lifecycle {{
    create_before_destroy = true
  }}
}}
"##,
        Workspace::preamble()
    )
}

/// Our VMs named `name`: VMID and node.
async fn named(sim: &SimClient, name: &str) -> BTreeSet<(u64, String)> {
    sim.our_vms()
        .await
        .iter()
        .filter(|vm| vm["name"] == name)
        .map(|vm| {
            let node = vm["node"].as_str().unwrap().to_owned();
            (vm["vmid"].as_u64().unwrap(), node)
        })
        .collect()
}

/// A simulator with `roll-1` applied once from a workspace (under `create_before_destroy`):
/// the simulator (kept running), its client, the workspace and the VM's VMID and node.
async fn one_vm_applied() -> (pvesim::Sim, SimClient, Workspace, (u64, String)) {
    let (sim_handle, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    ws.init_with(&fleet("one")).await;
    ws.apply().await.success();
    let made = named(&sim, "roll-1").await;
    assert_eq!(made.len(), 1, "{made:?}");
    let made = made.into_iter().next().unwrap();
    (sim_handle, sim, ws, made)
}

/// Asserts that an apply in `ws` (and its plan, when `plan_refuses`) is refused with the
/// import hint naming the live VM, and that they wrote nothing to PVE. A plan leaves a VM
/// its directory's state once held to the apply (it may be the one a taint replaces).
async fn assert_refused_without_writes(
    sim: &SimClient,
    ws: &Workspace,
    live: &(u64, String),
    plan_refuses: bool,
) {
    let since = sim.journal().await.len();
    let plan = ws.terraform(&["plan", "-input=false", "-no-color"]).await;
    if plan_refuses {
        let text = support::flat(&plan.failure().all_text());
        assert!(
            text.contains("already exists") && text.contains(&format!("{}/{}", live.1, live.0)),
            "the plan refuses it, naming the live VM: {text}"
        );
    } else {
        plan.success();
    }
    let out = ws.apply().await.failure();
    let text = support::flat(&out.all_text());
    let (vmid, node) = live;
    assert!(text.contains("already exists"), "{text}");
    assert!(
        text.contains("terraform import") && text.contains(&format!("{node}/{vmid}")),
        "the refusal names the live VM's node and VMID for the import: {text}"
    );
    let writes = sim.writes_since(since).await;
    assert!(writes.is_empty(), "the refused apply wrote: {writes:?}");
}

/// `apply`, then `apply -replace` under `create_before_destroy` (the new VM lands beside its
/// predecessor, off the name's base VMID, and the predecessor is destroyed), then the same
/// configuration from a fresh working directory and after `terraform state rm`: both are
/// refused with the import hint naming the live VM, and write nothing. Fails on 0afa8e7:
/// the fresh directory made a second `roll-1` at the freed base VMID.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_that_rolled_is_refused_from_a_fresh_directory() {
    if !acceptance_enabled("a_fleet_that_rolled_is_refused_from_a_fresh_directory") {
        return;
    }
    let (_sim, sim, ws, made) = one_vm_applied().await;
    let target = ws.target.clone();
    let base = BTreeSet::from([made]);
    ws.terraform(&[
        "apply",
        "-auto-approve",
        "-input=false",
        "-no-color",
        "-replace=proxmox_proxy_vm.edge",
    ])
    .await
    .success();
    let rolled = named(&sim, "roll-1").await;
    assert_eq!(rolled.len(), 1, "{rolled:?}");
    assert!(
        rolled.is_disjoint(&base),
        "the roll moved the VM off its base VMID"
    );
    let live = rolled.iter().next().unwrap().clone();

    let fresh = Workspace::new(target.clone());
    fresh.init_with(&fleet("one")).await;
    assert_refused_without_writes(&sim, &fresh, &live, true).await;
    assert_eq!(
        named(&sim, "roll-1").await,
        rolled,
        "no second VM of the name"
    );

    // A plan first: until a refresh shows Terraform stored the roll's new VM, this
    // directory's journal cannot tell it from a create killed before it was stored, and the
    // next create would take it back (the same VM, not a second one).
    ws.terraform(&["plan", "-input=false", "-no-color"])
        .await
        .success();
    ws.terraform(&["state", "rm", "proxmox_proxy_vm.edge"])
        .await
        .success();
    assert_refused_without_writes(&sim, &ws, &live, false).await;
    assert_eq!(
        named(&sim, "roll-1").await,
        rolled,
        "no second VM of the name"
    );
}

/// A plan that would replace the VM under `create_before_destroy` (its `user_data`
/// changed), not applied; then `terraform state rm` (or a state file a killed terraform left
/// empty: its local backend truncates the file before writing it) and `apply` in the same
/// directory. That apply is a plain create, so the VM the earlier plan was to replace is
/// now a finished VM of the name that this state does not hold: refused with the import hint,
/// nothing written. Found by the three-VM roll's kill sweep (#38): before the fix the
/// create took the VM for its predecessor, made a second VM of the name beside it and left
/// the first out of every state.
#[tokio::test(flavor = "multi_thread")]
async fn a_replacement_planned_then_dropped_from_state_is_refused_not_doubled() {
    if !acceptance_enabled("a_replacement_planned_then_dropped_from_state_is_refused_not_doubled") {
        return;
    }
    let (_sim, sim, ws, live) = one_vm_applied().await;

    ws.write_main_tf(&fleet("two"));
    let plan = ws
        .terraform(&["plan", "-input=false", "-no-color"])
        .await
        .success();
    assert!(
        plan.stdout().contains("must be replaced"),
        "{}",
        plan.all_text()
    );
    ws.terraform(&["state", "rm", "proxmox_proxy_vm.edge"])
        .await
        .success();
    assert_refused_without_writes(&sim, &ws, &live, false).await;
    assert_eq!(
        named(&sim, "roll-1").await,
        BTreeSet::from([live.clone()]),
        "no second VM of the name"
    );

    // The same with the state file emptied, as a terraform killed while writing it leaves it.
    ws.terraform(&[
        "import",
        "proxmox_proxy_vm.edge",
        &format!("{}/{}", live.1, live.0),
    ])
    .await
    .success();
    ws.terraform(&["plan", "-input=false", "-no-color"])
        .await
        .success();
    std::fs::write(ws.work_dir().join("terraform.tfstate"), b"").unwrap();
    assert_refused_without_writes(&sim, &ws, &live, false).await;
    assert_eq!(named(&sim, "roll-1").await, BTreeSet::from([live]));
}

/// A `create_before_destroy` roll killed after Terraform deposed the old VM and wrote that
/// state, before the new VM was stored (with several VMs, another VM's end writes the state
/// mid-roll): the next apply, a new run, creates the name again while its state holds the
/// old VM deposed. That VM is the create's predecessor (this run refreshes it and destroys
/// it after the create), so the create goes beside it, and the deposed VM is destroyed: one
/// VM of the name. Found by the three-VM roll's kill sweep on ee10f61, whose journal counted
/// only the replacement records of the run that planned them.
#[tokio::test(flavor = "multi_thread")]
async fn a_roll_killed_after_the_depose_is_finished_by_the_next_apply() {
    if !acceptance_enabled("a_roll_killed_after_the_depose_is_finished_by_the_next_apply") {
        return;
    }
    let (_sim, sim, ws, made) = one_vm_applied().await;
    let old = BTreeSet::from([made]);

    // The killed run's plan: it records the replacement (another run than the next apply).
    ws.write_main_tf(&fleet("two"));
    ws.terraform(&["plan", "-input=false", "-no-color"])
        .await
        .success();
    // The state it left: the old VM deposed, no current object of the resource yet.
    let path = ws.work_dir().join("terraform.tfstate");
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    state["serial"] = serde_json::json!(state["serial"].as_u64().unwrap() + 1);
    state["resources"][0]["instances"][0]["deposed"] = serde_json::json!("00000001");
    std::fs::write(&path, serde_json::to_vec_pretty(&state).unwrap()).unwrap();

    ws.apply().await.success();
    let now = named(&sim, "roll-1").await;
    assert_eq!(now.len(), 1, "one VM of the name: {now:?}");
    assert!(
        now.is_disjoint(&old),
        "the deposed VM is destroyed: {now:?}"
    );
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(named(&sim, "roll-1").await.is_empty());
}

/// `kill-1`, with `vmid` when given.
fn kill_target(vmid: Option<u64>) -> String {
    let vmid = vmid.map(|v| format!("vmid = {v}")).unwrap_or_default();
    format!(
        r##"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "edge" {{
  name      = "kill-1"
  template  = "debian-13-proxy"
  memory    = 512
  {vmid}
}}
"##,
        Workspace::preamble()
    )
}

/// The index, counted from before the apply, of the config write that attaches the seed in
/// a create of `kill-1` on a fresh simulator: a kill point after the seed's upload.
async fn seed_attach_index() -> u64 {
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    ws.init_with(&kill_target(None)).await;
    let since = sim.journal().await.len();
    ws.apply().await.success();
    let journal = sim.journal().await;
    let run = &journal[since..];
    let path = |e: &serde_json::Value| e["path"].as_str().unwrap().to_owned();
    let upload = run
        .iter()
        .position(|e| e["method"] == "POST" && path(e).ends_with("/upload"))
        .expect("a create uploads its seed");
    let attach = upload
        + run[upload..]
            .iter()
            .position(|e| e["method"] == "POST" && path(e).ends_with("/config"))
            .expect("a create writes its config after the upload");
    attach as u64 + 1
}

/// This directory's killed create of `kill-1` (its seed uploaded, never attached), then
/// another state's VM of the name: the next apply here is refused at its plan with the
/// import hint, writing nothing; the user imports that VM as the hint says, and this
/// directory's full destroy removes it and what the killed create left, its VM and its
/// unattached seed (fuzzer seed 38906's shape).
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_create_beside_another_states_vm_is_refused_then_swept() {
    if !acceptance_enabled("a_killed_create_beside_another_states_vm_is_refused_then_swept") {
        return;
    }
    let attach = seed_attach_index().await;
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ours = Workspace::new(target.clone());
    ours.init_with(&kill_target(None)).await;
    sim.hold_request(attach, false).await;
    let mut apply = ours.spawn_terraform(&["apply", "-auto-approve", "-input=false", "-no-color"]);
    assert!(
        sim.until_held(|| apply.exited()).await,
        "the create reached its config write"
    );
    apply.kill_group();
    sim.release_hold().await;
    let killed = named(&sim, "kill-1").await;
    assert_eq!(killed.len(), 1, "the killed create's VM: {killed:?}");
    let killed_vmid = killed.iter().next().unwrap().0;
    let seeds = sim.volumes_on("proxy-seeds").await;
    assert_eq!(seeds.len(), 1, "its seed, unattached: {seeds:?}");

    // Another state makes the name's VM at a VMID of its own.
    let theirs = Workspace::new(target.clone());
    theirs.init_with(&kill_target(Some(killed_vmid + 1))).await;
    theirs.apply().await.success();
    let live = named(&sim, "kill-1")
        .await
        .into_iter()
        .find(|(vmid, _)| *vmid == killed_vmid + 1)
        .expect("the other state's VM");

    let since = sim.journal().await.len();
    let text = support::flat(&ours.apply().await.failure().all_text());
    assert!(
        text.contains("already exists") && text.contains(&format!("{}/{}", live.1, live.0)),
        "refused with the import hint naming the live VM: {text}"
    );
    let writes = sim.writes_since(since).await;
    assert!(writes.is_empty(), "the refused apply wrote: {writes:?}");

    let id = format!("{}/{}", live.1, live.0);
    ours.terraform(&[
        "import",
        "-input=false",
        "-no-color",
        "proxmox_proxy_vm.edge",
        &id,
    ])
    .await
    .success();
    ours.assert_plans_empty().await;
    let destroyed = support::flat(&ours.destroy().await.success().all_text());
    assert!(
        destroyed.contains("Proxy VM of a killed create removed"),
        "the destroy says what it removed: {destroyed}"
    );
    assert!(named(&sim, "kill-1").await.is_empty());
    let left = sim.volumes_on("proxy-seeds").await;
    assert!(left.is_empty(), "no seed is left: {left:?}");
}
