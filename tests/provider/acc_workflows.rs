//! Acceptance: the Terraform workflows users reach for around plan → apply → destroy.
//! Destroy is never blocked by a plan-time check of a VM that does not exist, a
//! `create_before_destroy` replacement is made beside its predecessor, import records where
//! the VM is, and the everyday commands (saved plans, `-target`, `-replace`, `-refresh-only`,
//! `moved`, `removed`, `state rm` + import, workspaces) end with an empty plan and nothing
//! left behind. These run only on the in-process pve-sim (they read its state).

use crate::support;

use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use support::{SimClient, Workspace, acceptance_enabled, start_sim};

const GIB: u64 = 1 << 30;

fn config(resources: &str) -> String {
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}
{resources}"#,
        Workspace::preamble()
    )
}

fn vm(label: &str, name: &str, extra: &str) -> String {
    format!(
        r#"
resource "proxmox_proxy_vm" "{label}" {{
  name             = "{name}"
  template         = "debian-13-proxy"
  wait_for         = "none"
  # Not waiting, the seed would leave at the next apply (an in-place change, #30); these
  # plans must stay empty.
  seed_lifetime    = "vm"
{extra}}}
"#
    )
}

/// Asserts that nothing of ours is left: no marked VM, no seed ISO.
async fn assert_nothing_left(sim: &SimClient) {
    assert!(sim.our_vms().await.is_empty(), "{:?}", sim.our_vms().await);
    assert!(
        sim.volumes_on("proxy-seeds").await.is_empty(),
        "{:?}",
        sim.volumes_on("proxy-seeds").await
    );
}

/// The VMIDs of our VMs named `name`.
async fn vmids_named(sim: &SimClient, name: &str) -> BTreeSet<u64> {
    sim.our_vms()
        .await
        .iter()
        .filter(|vm| vm["name"] == name)
        .map(|vm| vm["vmid"].as_u64().unwrap())
        .collect()
}

fn resource_values<'a>(state: &'a Value, address: &str) -> &'a Value {
    state["values"]["root_module"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["address"] == address)
        .map(|r| &r["values"])
        .unwrap_or_else(|| panic!("{address} not in state: {state}"))
}

/// A create that no node can run (memory beyond every node) is refused by a normal plan,
/// before any write, and never blocks `terraform destroy` or `terraform plan -destroy` of
/// what was made: Terraform's destroy starts with a normal plan that plans every configured
/// instance, the uncreated ones included.
#[tokio::test(flavor = "multi_thread")]
async fn destroy_runs_when_a_create_fails_plan_time_checks() {
    if !acceptance_enabled("destroy_runs_when_a_create_fails_plan_time_checks") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let first = vm("first", "wf-first", "  node = \"pve1\"\n  vmid = 150000\n");
    ws.init_with(&config(&first)).await;
    ws.apply().await.success();

    // A sibling no node can run: plan refuses it on `memory`-driven placement.
    let huge = vm("huge", "wf-huge", "  memory = 900000\n");
    // A sibling whose explicit VMID is taken by `first`.
    let clash = vm("clash", "wf-clash", "  node = \"pve1\"\n  vmid = 150000\n");
    for sibling in [&huge, &clash] {
        ws.write_main_tf(&config(&format!("{first}{sibling}")));
        let out = ws
            .terraform(&["plan", "-no-color", "-input=false"])
            .await
            .failure();
        let text = out.all_text();
        assert!(
            text.contains("No node can run this VM") || text.contains("VMID taken"),
            "{text}"
        );
        ws.terraform(&["plan", "-destroy", "-no-color", "-input=false"])
            .await
            .success();
    }
    // With both siblings configured, destroy removes what exists.
    ws.write_main_tf(&config(&format!("{first}{huge}{clash}")));
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// `-target` applies one resource; another, never created, is changed beyond every node:
/// destroy still runs.
#[tokio::test(flavor = "multi_thread")]
async fn destroy_runs_after_a_targeted_apply() {
    if !acceptance_enabled("destroy_runs_after_a_targeted_apply") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let a = vm("a", "wf-target-a", "  node = \"pve1\"\n");
    ws.init_with(&config(&format!(
        "{a}{}",
        vm("b", "wf-target-b", "  node = \"pve2\"\n")
    )))
    .await;
    ws.terraform(&[
        "apply",
        "-auto-approve",
        "-input=false",
        "-no-color",
        "-target=proxmox_proxy_vm.a",
    ])
    .await
    .success();
    assert_eq!(sim.our_vms().await.len(), 1);
    ws.write_main_tf(&config(&format!(
        "{a}{}",
        vm("b", "wf-target-b", "  memory = 900000\n")
    )));
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// A full cluster leaves some instances of a fleet uncreated; destroy removes the rest.
#[tokio::test(flavor = "multi_thread")]
async fn destroy_runs_after_an_apply_that_filled_the_cluster() {
    if !acceptance_enabled("destroy_runs_after_an_apply_that_filled_the_cluster") {
        return;
    }
    let mut world = pvesim::SimConfig::default();
    for node in &mut world.nodes {
        node.memory_bytes = 64 * GIB;
    }
    let (_sim, target) = start_sim(world).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let fleet = |count: usize| {
        vm(
            "fleet",
            "wf-full-${count.index}",
            &format!("  count = {count}\n  memory = 8192\n"),
        )
    };
    ws.init_with(&config(&fleet(3))).await;
    ws.apply().await.success();
    // Another state fills the cluster meanwhile: the next VMs of this fleet fit nowhere.
    let other = Workspace::new(ws.target.clone());
    other
        .init_with(&config(&vm(
            "filler",
            "wf-filler-${count.index}",
            "  count = 3\n  memory = 60000\n  node = \"pve${count.index + 1}\"\n",
        )))
        .await;
    other.apply().await.success();
    ws.write_main_tf(&config(&fleet(6)));
    let out = ws.apply().await.failure();
    assert!(
        out.all_text().contains("No node can run this VM"),
        "{}",
        out.all_text()
    );
    ws.destroy().await.success();
    other.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// `terraform import` with a node records the VM only where it is: a wrong node is refused
/// with the right ID, and the right one imports with an empty plan.
#[tokio::test(flavor = "multi_thread")]
async fn import_with_the_wrong_node_names_the_right_id() {
    if !acceptance_enabled("import_with_the_wrong_node_names_the_right_id") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    // `wait_for` keeps its default: an import cannot know a setting of the config.
    let placed = r#"
resource "proxmox_proxy_vm" "v" {
  name     = "wf-import"
  template = "debian-13-proxy"
}
"#;
    ws.init_with(&config(placed)).await;
    ws.apply().await.success();
    let state = ws.state().await;
    let values = resource_values(&state, "proxmox_proxy_vm.v");
    let vmid = values["vmid"].as_u64().unwrap();
    let node = values["node"].as_str().unwrap().to_owned();
    let other = ["pve1", "pve2", "pve3"]
        .into_iter()
        .find(|n| *n != node)
        .unwrap();
    ws.terraform(&["state", "rm", "proxmox_proxy_vm.v"])
        .await
        .success();
    let out = ws
        .terraform(&[
            "import",
            "-no-color",
            "-input=false",
            "proxmox_proxy_vm.v",
            &format!("{other}/{vmid}"),
        ])
        .await
        .failure();
    let text = out.all_text();
    assert!(text.contains(&format!("{node}/{vmid}")), "{text}");
    ws.terraform(&[
        "import",
        "-no-color",
        "-input=false",
        "proxmox_proxy_vm.v",
        &format!("{node}/{vmid}"),
    ])
    .await
    .success();
    let state = ws.state().await;
    let values = resource_values(&state, "proxmox_proxy_vm.v");
    assert_eq!(values["node"], node.as_str());
    assert_eq!(values["current_node"], node.as_str());
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

fn rolling_fleet(count: usize, greeting: &str) -> String {
    config(&format!(
        r##"
resource "proxmox_proxy_vm" "edge" {{
  count     = {count}
  name      = "roll-${{count.index}}"
  template  = "debian-13-proxy"
  memory    = 512
  user_data = "#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: {greeting}\n"

  lifecycle {{
    create_before_destroy = true
  }}
}}
"##
    ))
}

/// `create_before_destroy` with a stable name: a `user_data` change makes each new VM beside
/// its predecessor (its own VMID, the same name), then destroys the predecessor; a saved
/// plan applied by another process does the same. A finished VM of the name that is not this
/// instance's predecessor is still refused.
#[tokio::test(flavor = "multi_thread")]
async fn create_before_destroy_replaces_beside_the_predecessor() {
    if !acceptance_enabled("create_before_destroy_replaces_beside_the_predecessor") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&rolling_fleet(2, "one")).await;
    ws.apply().await.success();
    let first = vmids_named(&sim, "roll-0").await;
    assert_eq!(first.len(), 1);

    ws.write_main_tf(&rolling_fleet(2, "two"));
    let out = ws.apply().await.success();
    assert!(
        out.stdout().contains("2 added, 0 changed, 2 destroyed"),
        "{}",
        out.stdout()
    );
    let second = vmids_named(&sim, "roll-0").await;
    assert_eq!(second.len(), 1, "one VM of the name is left");
    assert!(
        second.is_disjoint(&first),
        "the replacement has its own VMID"
    );
    ws.assert_plans_empty().await;

    // A saved plan, applied by another terraform process.
    ws.write_main_tf(&rolling_fleet(2, "three"));
    ws.terraform(&["plan", "-input=false", "-no-color", "-out=roll.tfplan"])
        .await
        .success();
    ws.terraform(&["apply", "-input=false", "-no-color", "roll.tfplan"])
        .await
        .success();
    let third = vmids_named(&sim, "roll-0").await;
    assert_eq!(third.len(), 1);
    assert!(third.is_disjoint(&second));
    ws.assert_plans_empty().await;

    // Another state with the same names (and create_before_destroy) takes nothing.
    let other = Workspace::new(ws.target.clone());
    other.init_with(&rolling_fleet(1, "three")).await;
    let out = other.apply().await.failure();
    assert!(
        out.all_text().contains("already exists"),
        "{}",
        out.all_text()
    );
    assert_eq!(vmids_named(&sim, "roll-0").await, third);
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// A 10-VM fleet rolled to new `user_data` under `create_before_destroy` at
/// `-parallelism=5`: sampled from the simulator all along the apply, at least 10 VMs of the
/// fleet are running with an address at every moment.
#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_replacement_keeps_the_whole_fleet_up() {
    if !acceptance_enabled("a_rolling_replacement_keeps_the_whole_fleet_up") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&rolling_fleet(10, "one")).await;
    ws.apply().await.success();
    let up = |state: Value| {
        state["vms"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|vm| {
                vm["name"].as_str().is_some_and(|n| n.starts_with("roll-"))
                    && vm["status"] == "running"
                    && vm["agent_ready"] == true
            })
            .count()
    };
    assert_eq!(up(sim.state().await), 10);
    ws.write_main_tf(&rolling_fleet(10, "two"));
    let mut apply =
        ws.spawn_terraform(&["apply", "-auto-approve", "-input=false", "-parallelism=5"]);
    let (fewest, samples, succeeded) = apply
        .sample_until_exit(|| async { up(sim.state().await) })
        .await;
    assert!(succeeded, "the rolling apply failed");
    eprintln!("rolling replacement: fewest VMs up {fewest} of 10 over {samples} samples");
    assert_eq!(
        fewest, 10,
        "fewest VMs running with an address during the roll"
    );
    assert_eq!(sim.our_vms().await.len(), 10);
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// A create killed after its last write to PVE (the mark says `done`) and before Terraform
/// stored the VM is resumed by the next apply in the same working directory, with no import;
/// ten times over.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_killed_after_it_finished_is_resumed_without_import() {
    if !acceptance_enabled("a_create_killed_after_it_finished_is_resumed_without_import") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&config(&vm("v", "wf-crash-done", "  node = \"pve2\"\n")))
        .await;
    for round in 0..10 {
        let apply = ws.spawn_terraform(&["apply", "-auto-approve", "-input=false"]);
        // Once the VM runs, only the final mark write and the closing reads are left: slow
        // every PVE request down so that the kill lands between them, before Terraform
        // hears of the VM.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut slowed = false;
        let vmid = loop {
            let state = sim.state().await;
            let ours = state["vms"]
                .as_array()
                .unwrap()
                .iter()
                .find(|vm| vm["name"] == "wf-crash-done")
                .cloned();
            if let Some(vm) = ours {
                let description = vm["config"]["description"].as_str().unwrap_or_default();
                if description.contains("proxyvm-phase: done") {
                    break vm["vmid"].as_u64().unwrap();
                }
                if vm["status"] == "running" && !slowed {
                    sim.set_faults(serde_json::json!({"latency_ms": 400})).await;
                    slowed = true;
                }
            }
            assert!(Instant::now() < deadline, "round {round}: never finished");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        apply.kill_group();
        sim.set_faults(serde_json::json!({})).await;
        let stored = ws.state().await;
        let resources = &stored["values"]["root_module"]["resources"];
        assert!(
            resources.as_array().is_none_or(Vec::is_empty),
            "round {round}: terraform stored the VM before the kill: {resources}"
        );
        ws.apply().await.success();
        assert_eq!(
            vmids_named(&sim, "wf-crash-done").await,
            BTreeSet::from([vmid]),
            "round {round}: the finished VM was resumed, not duplicated"
        );
        ws.assert_plans_empty().await;
        ws.destroy().await.success();
        assert_nothing_left(&sim).await;
    }
}

/// Runs `terraform apply` and kills it at the first seed upload of the apply, which comes
/// after the clone of `name` ended, long before its create does: pve-sim holds that request,
/// so what the apply did is the same however loaded the machine is. Returns the VMID,
/// whose mark says the create is unfinished.
async fn kill_apply_once_cloned(sim: &SimClient, ws: &Workspace, name: &str) -> u64 {
    sim.hold_counting(1, "/upload").await;
    let mut apply = ws.spawn_terraform(&["apply", "-auto-approve", "-input=false"]);
    assert!(
        sim.until_held(|| apply.exited()).await,
        "the create of {name} reached its seed's upload"
    );
    apply.kill_group();
    sim.release_hold().await;
    let state = sim.state().await;
    let cloned: Vec<&Value> = state["vms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| vm["config"]["name"] == name)
        .collect();
    assert_eq!(cloned.len(), 1, "{state}");
    assert!(cloned[0]["lock"].is_null(), "the clone ended: {state}");
    let phase = cloned[0]["config"]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(phase.contains("proxyvm-phase: creating"), "{phase}");
    cloned[0]["vmid"].as_u64().unwrap()
}

/// A killed create resumed by the next apply, whose resumed create then fails: the tainted
/// VM the failed apply records is the resumed one, under the token its mark carries, so
/// the refresh keeps it and the next apply replaces it (no VM dropped as another state's,
/// none left).
#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_create_that_fails_is_kept_tainted_and_replaced() {
    if !acceptance_enabled("a_resumed_create_that_fails_is_kept_tainted_and_replaced") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let name = "wf-resumed-fails";
    ws.init_with(&config(&vm("v", name, ""))).await;
    let killed = kill_apply_once_cloned(&sim, &ws, name).await;
    sim.set_faults(serde_json::json!({
        "task_failures": [{"task_type": "qmstart", "nth": 1, "exitstatus": "start failed: boom"}]
    }))
    .await;
    let failed = ws.apply().await.failure();
    assert!(failed.all_text().contains("boom"), "{}", failed.all_text());
    sim.set_faults(serde_json::json!({})).await;
    let state = ws.state().await;
    assert_eq!(
        resource_values(&state, "proxmox_proxy_vm.v")["vmid"],
        killed
    );
    let refreshed = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    let text = support::flat(&refreshed.all_text());
    assert!(text.contains("is tainted, so must be replaced"), "{text}");
    assert!(!text.contains("Warning"), "{text}");
    ws.apply().await.success();
    assert_eq!(sim.our_vms().await.len(), 1, "{:?}", sim.our_vms().await);
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// A create killed after its clone, made at the name's second VMID because the first held a
/// VM of another name then (the shape of fuzzer seed 11150): once the first VMID is free
/// again, the next apply resumes the killed create where the journal says it cloned; it
/// neither clones a second VM at the freed VMID nor leaves the half-made one.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_create_is_resumed_where_it_cloned_after_an_earlier_vmid_is_freed() {
    if !acceptance_enabled(
        "a_killed_create_is_resumed_where_it_cloned_after_an_earlier_vmid_is_freed",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let name = "wf-crash-beside";
    let first = terraform_provider_proxmox::vmid::VmidRange::default()
        .probe_sequence_in_fleet("", name)
        .next()
        .unwrap();
    let first_id = first.to_string();
    let clone = [("newid", first_id.as_str()), ("name", "someone-else")];
    let upid = sim.api("POST", "/nodes/pve1/qemu/9000/clone", &clone).await;
    sim.wait_task(&upid).await;
    let ws = Workspace::new(target);
    ws.init_with(&config(&vm("v", name, "  node = \"pve2\"\n")))
        .await;
    let second = kill_apply_once_cloned(&sim, &ws, name).await;
    assert_ne!(second, u64::from(first));
    let upid = sim
        .api("DELETE", &format!("/nodes/pve1/qemu/{first}"), &[])
        .await;
    sim.wait_task(&upid).await;
    ws.apply().await.success();
    assert_eq!(
        vmids_named(&sim, name).await,
        BTreeSet::from([second]),
        "the killed create was resumed where it cloned, not made again"
    );
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// A create killed after its clone whose resource then leaves the configuration: no create
/// resumes it, so the apply after leaves it (an orphan only this directory's journal knows);
/// the next full `terraform destroy` removes it and says so (fuzzer seed 12339), while a
/// `-target`ed destroy leaves it alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_destroy_removes_a_killed_create_the_configuration_dropped() {
    if !acceptance_enabled("a_full_destroy_removes_a_killed_create_the_configuration_dropped") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let kept = vm("kept", "wf-kept", "  node = \"pve1\"\n");
    let dropped = vm("dropped", "wf-dropped", "  node = \"pve2\"\n");
    ws.init_with(&config(&kept)).await;
    ws.apply().await.success();
    ws.write_main_tf(&config(&format!("{kept}{dropped}")));
    let orphan = kill_apply_once_cloned(&sim, &ws, "wf-dropped").await;
    ws.write_main_tf(&config(&kept));
    ws.apply().await.success();
    assert_eq!(
        vmids_named(&sim, "wf-dropped").await,
        BTreeSet::from([orphan])
    );
    // A targeted destroy is about its targets only.
    let targeted = ws
        .terraform(&[
            "destroy",
            "-auto-approve",
            "-input=false",
            "-target=proxmox_proxy_vm.kept",
        ])
        .await
        .success();
    assert!(
        !targeted.all_text().contains("killed create"),
        "{}",
        targeted.all_text()
    );
    assert_eq!(
        vmids_named(&sim, "wf-dropped").await,
        BTreeSet::from([orphan])
    );
    ws.apply().await.success();
    let out = ws.destroy().await.success();
    let text = support::flat(&out.all_text());
    assert!(
        text.contains("Proxy VM of a killed create removed"),
        "{text}"
    );
    assert!(
        text.contains(&format!("VM {orphan} (`wf-dropped`)")),
        "{text}"
    );
    assert_nothing_left(&sim).await;
}

/// A create killed after its VM was finished on PVE and before it answered Terraform, whose
/// resource then leaves the configuration (fuzzer seed 8312): the next full destroy removes
/// it and the seed it never deleted. A VM Terraform did store, which a `state rm` took out
/// before any refresh, is just as unconfirmed in the journal, and that destroy leaves it: the
/// user let it go.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_destroy_removes_a_finished_killed_create_but_not_a_vm_state_rm_let_go() {
    if !acceptance_enabled(
        "a_full_destroy_removes_a_finished_killed_create_but_not_a_vm_state_rm_let_go",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let kept = vm("kept", "wf-kept", "  node = \"pve1\"\n");
    let let_go = vm("let_go", "wf-let-go", "  node = \"pve1\"\n");
    // Waits for cloud-init, so the create's last request is its seed's delete.
    let dropped = r#"
resource "proxmox_proxy_vm" "dropped" {
  name     = "wf-dropped"
  template = "debian-13-proxy"
  node     = "pve2"
}
"#;
    ws.init_with(&config(&format!("{kept}{let_go}"))).await;
    ws.apply().await.success();
    let let_go_vmids = vmids_named(&sim, "wf-let-go").await;
    ws.terraform(&["state", "rm", "proxmox_proxy_vm.let_go"])
        .await
        .success();
    ws.write_main_tf(&config(&format!("{kept}{dropped}")));
    sim.hold_counting(1, "/content/proxy-seeds:iso/seed-wf-dropped")
        .await;
    let mut apply = ws.spawn_terraform(&["apply", "-auto-approve", "-input=false"]);
    assert!(
        sim.until_held(|| apply.exited()).await,
        "the seed's delete never came"
    );
    apply.kill_group();
    sim.release_hold().await;
    let finished: Vec<Value> = sim
        .our_vms()
        .await
        .into_iter()
        .filter(|vm| vm["name"] == "wf-dropped")
        .collect();
    assert_eq!(finished.len(), 1, "{finished:?}");
    let description = finished[0]["config"]["description"].as_str().unwrap_or("");
    assert!(description.contains("proxyvm-phase: done"), "{description}");
    let orphan = finished[0]["vmid"].as_u64().unwrap();
    ws.write_main_tf(&config(&kept));
    ws.apply().await.success();
    assert_eq!(
        vmids_named(&sim, "wf-dropped").await,
        BTreeSet::from([orphan])
    );
    let out = ws.destroy().await.success();
    let text = support::flat(&out.all_text());
    assert!(
        text.contains(&format!("VM {orphan} (`wf-dropped`)")),
        "{text}"
    );
    assert!(!text.contains("wf-let-go"), "{text}");
    assert!(vmids_named(&sim, "wf-dropped").await.is_empty());
    assert_eq!(vmids_named(&sim, "wf-let-go").await, let_go_vmids);
    // The VM let go is the user's to take back: imported, it is destroyed like any other.
    let vmid = let_go_vmids.first().unwrap().to_string();
    ws.write_main_tf(&config(&let_go));
    ws.terraform(&["import", "-input=false", "proxmox_proxy_vm.let_go", &vmid])
        .await
        .success();
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// The stranded-VM case the journal cannot cover (the killed run's working directory is
/// gone, as on a fresh CI runner): the error carries a ready import block, and following it
/// converges with an empty plan.
#[tokio::test(flavor = "multi_thread")]
async fn a_stranded_vm_without_the_journal_is_recovered_by_the_import_block_it_names() {
    if !acceptance_enabled(
        "a_stranded_vm_without_the_journal_is_recovered_by_the_import_block_it_names",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let resource = vm("v", "wf-stranded", "  node = \"pve3\"\n");
    ws.init_with(&config(&resource)).await;
    ws.apply().await.success();
    // The state and the journal are lost together; the VM is not.
    std::fs::remove_file(ws.work_dir().join("terraform.tfstate")).unwrap();
    std::fs::remove_dir_all(ws.work_dir().join(".terraform/proxyvm")).unwrap();
    let out = ws.apply().await.failure();
    let text = out.all_text();
    let id = regex::Regex::new(r#"id = "(pve\d/\d+)""#)
        .unwrap()
        .captures(&text)
        .unwrap_or_else(|| panic!("no import block in: {text}"))[1]
        .to_owned();
    ws.write_main_tf(&config(&format!(
        "{resource}\nimport {{\n  to = proxmox_proxy_vm.v\n  id = \"{id}\"\n}}\n"
    )));
    ws.apply().await.success();
    assert_eq!(sim.our_vms().await.len(), 1);
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// A saved plan with `node` unset (placement), applied by a second terraform process.
#[tokio::test(flavor = "multi_thread")]
async fn a_saved_plan_with_placement_is_applied_by_another_process() {
    if !acceptance_enabled("a_saved_plan_with_placement_is_applied_by_another_process") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&config(&vm(
        "p",
        "wf-saved-${count.index}",
        "  count = 3\n",
    )))
    .await;
    ws.terraform(&["plan", "-input=false", "-no-color", "-out=saved.tfplan"])
        .await
        .success();
    ws.terraform(&["apply", "-input=false", "-no-color", "saved.tfplan"])
        .await
        .success();
    assert_eq!(sim.our_vms().await.len(), 3);
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// `-target`, `-replace` and `-refresh-only`, each with the result a user expects.
#[tokio::test(flavor = "multi_thread")]
async fn target_replace_and_refresh_only_do_what_they_say() {
    if !acceptance_enabled("target_replace_and_refresh_only_do_what_they_say") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let both = format!(
        "{}{}",
        vm("a", "wf-cmd-a", "  node = \"pve1\"\n"),
        vm("b", "wf-cmd-b", "  node = \"pve2\"\n")
    );
    ws.init_with(&config(&both)).await;
    let apply = |extra: &'static str| {
        let ws = &ws;
        async move {
            ws.terraform(&["apply", "-auto-approve", "-input=false", "-no-color", extra])
                .await
                .success()
        }
    };
    apply("-target=proxmox_proxy_vm.a").await;
    assert_eq!(vmids_named(&sim, "wf-cmd-b").await.len(), 0);
    apply("-input=false").await;
    let before = vmids_named(&sim, "wf-cmd-a").await;
    let out = apply("-replace=proxmox_proxy_vm.a").await;
    assert!(
        out.stdout().contains("1 added, 0 changed, 1 destroyed"),
        "{}",
        out.stdout()
    );
    assert_eq!(vmids_named(&sim, "wf-cmd-a").await.len(), 1);
    let after = vmids_named(&sim, "wf-cmd-a").await;
    assert_eq!(after, before, "a replaced VM comes back at its name's VMID");
    ws.assert_plans_empty().await;

    // Someone stops `b` by hand: -refresh-only records it and changes nothing on PVE.
    let b = *vmids_named(&sim, "wf-cmd-b").await.iter().next().unwrap();
    let upid = sim
        .api("POST", &format!("/nodes/pve2/qemu/{b}/status/stop"), &[])
        .await;
    sim.wait_task(&upid).await;
    let writes = sim.journal().await.len();
    apply("-refresh-only").await;
    let state = ws.state().await;
    assert_eq!(
        resource_values(&state, "proxmox_proxy_vm.b")["status"],
        "stopped"
    );
    assert!(
        sim.writes_since(writes).await.is_empty(),
        "-refresh-only wrote to PVE"
    );
    // The next ordinary apply starts it again.
    apply("-input=false").await;
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// `moved` from `count` to `for_each` changes nothing; a `removed` block with
/// `destroy = false` forgets the VMs and an `import` block takes them back with an empty
/// plan; `state rm` and `terraform import` do the same.
#[tokio::test(flavor = "multi_thread")]
async fn moved_removed_and_reimport_keep_the_vms() {
    if !acceptance_enabled("moved_removed_and_reimport_keep_the_vms") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let counted = r#"
resource "proxmox_proxy_vm" "edge" {
  count    = 2
  name     = "wf-move-${count.index}"
  node     = "pve1"
  template = "debian-13-proxy"
}
"#;
    let keyed = r#"
resource "proxmox_proxy_vm" "edge" {
  for_each = toset(["0", "1"])
  name     = "wf-move-${each.key}"
  node     = "pve1"
  template = "debian-13-proxy"
}
"#;
    ws.init_with(&config(counted)).await;
    ws.apply().await.success();
    let vmids: BTreeSet<u64> = sim
        .our_vms()
        .await
        .iter()
        .map(|vm| vm["vmid"].as_u64().unwrap())
        .collect();
    let moved = "moved {\n  from = proxmox_proxy_vm.edge[0]\n  to   = \
        proxmox_proxy_vm.edge[\"0\"]\n}\nmoved {\n  from = proxmox_proxy_vm.edge[1]\n  to   = \
        proxmox_proxy_vm.edge[\"1\"]\n}\n";
    ws.write_main_tf(&config(&format!("{keyed}{moved}")));
    let out = ws.apply().await.success();
    assert!(
        out.stdout().contains("0 added, 0 changed, 0 destroyed"),
        "{}",
        out.stdout()
    );
    ws.assert_plans_empty().await;

    // removed { destroy = false }: out of the state, still on the cluster.
    ws.write_main_tf(&config(
        "removed {\n  from = proxmox_proxy_vm.edge\n  lifecycle {\n    destroy = false\n  }\n}\n",
    ));
    ws.apply().await.success();
    assert_eq!(sim.our_vms().await.len(), 2);
    let mut imports = String::new();
    for vmid in &vmids {
        let vm = sim
            .our_vms()
            .await
            .into_iter()
            .find(|vm| vm["vmid"] == *vmid)
            .unwrap();
        let key = vm["name"]
            .as_str()
            .unwrap()
            .trim_start_matches("wf-move-")
            .to_owned();
        imports.push_str(&format!(
            "import {{\n  to = proxmox_proxy_vm.edge[\"{key}\"]\n  id = \"pve1/{vmid}\"\n}}\n"
        ));
    }
    ws.write_main_tf(&config(&format!("{keyed}{imports}")));
    let out = ws
        .terraform(&["plan", "-input=false", "-no-color"])
        .await
        .success();
    assert!(
        out.stdout()
            .contains("2 to import, 0 to add, 0 to change, 0 to destroy"),
        "{}",
        out.stdout()
    );
    ws.apply().await.success();
    ws.assert_plans_empty().await;

    // state rm + terraform import.
    ws.write_main_tf(&config(keyed));
    ws.terraform(&["state", "rm", "proxmox_proxy_vm.edge[\"0\"]"])
        .await
        .success();
    let zero = sim
        .our_vms()
        .await
        .into_iter()
        .find(|vm| vm["name"] == "wf-move-0")
        .unwrap();
    ws.terraform(&[
        "import",
        "-input=false",
        "-no-color",
        "proxmox_proxy_vm.edge[\"0\"]",
        &zero["vmid"].to_string(),
    ])
    .await
    .success();
    ws.assert_plans_empty().await;
    assert_eq!(sim.our_vms().await.len(), 2);
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// One configuration, two workspaces, `fleet = terraform.workspace`: each workspace has its
/// own VMs of the same names, and destroying one leaves the other.
#[tokio::test(flavor = "multi_thread")]
async fn workspaces_with_their_own_fleet_share_names() {
    if !acceptance_enabled("workspaces_with_their_own_fleet_share_names") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let tf = format!(
        "{}\nprovider \"proxmox\" {{\n  seed_storage = \"proxy-seeds\"\n  fleet        = \
            terraform.workspace\n}}\n{}",
        Workspace::preamble(),
        vm("edge", "wf-ws-0", "  node = \"pve1\"\n")
    );
    ws.init_with(&tf).await;
    for workspace in ["blue", "green"] {
        ws.terraform(&["workspace", "new", "-no-color", workspace])
            .await
            .success();
        ws.apply().await.success();
        ws.assert_plans_empty().await;
    }
    assert_eq!(vmids_named(&sim, "wf-ws-0").await.len(), 2);
    ws.destroy().await.success();
    assert_eq!(vmids_named(&sim, "wf-ws-0").await.len(), 1);
    ws.terraform(&["workspace", "select", "-no-color", "blue"])
        .await
        .success();
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}

/// Destroy needs neither the template nor a reachable node to be refused cleanly: with the
/// template deleted it succeeds; with the VM's node offline it fails clearly, keeps the
/// state, and succeeds once the node is back.
#[tokio::test(flavor = "multi_thread")]
async fn destroy_without_the_template_and_with_the_node_offline() {
    if !acceptance_enabled("destroy_without_the_template_and_with_the_node_offline") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&config(&format!(
        "{}{}",
        vm("a", "wf-gone-a", "  node = \"pve1\"\n"),
        vm(
            "b",
            "wf-gone-b",
            "  node = \"pve2\"\n  timeouts = {\n    delete = \"20s\"\n  }\n"
        )
    )))
    .await;
    ws.apply().await.success();
    let upid = sim.api("DELETE", "/nodes/pve1/qemu/9000", &[]).await;
    sim.wait_task(&upid).await;

    sim.set_faults(serde_json::json!({"offline_nodes": ["pve2"]}))
        .await;
    let out = ws.destroy().await.failure();
    let text = out.all_text();
    assert!(text.contains("wf-gone-b"), "{text}");
    let state = ws.state().await;
    let left: Vec<&str> = state["values"]["root_module"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["address"].as_str().unwrap())
        .collect();
    assert_eq!(left, ["proxmox_proxy_vm.b"], "{text}");
    sim.set_faults(serde_json::json!({})).await;
    ws.destroy().await.success();
    assert_nothing_left(&sim).await;
}
