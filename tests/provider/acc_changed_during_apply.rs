//! Acceptance: a VM that PVE changes while its apply runs. Terraform holds a provider to its
//! plan: a value the plan knew that comes back otherwise is "Provider produced inconsistent
//! result after apply", and a new VM so reported is tainted, so the next apply destroys a VM
//! that was fine. The apply ends well instead, with a warning naming what changed; the state
//! keeps the plan's values, and the next plan shows the change and puts it back. A VM that
//! stops before cloud-init's verdict could be read ends the wait for it at once.
//!
//! Shown with pve-sim's hold, not with timings: the world stands still once the request
//! before the apply's last look (the final config and the power state, sent together) is
//! handled, the VM's node reboots meanwhile, and the apply goes on once the node is back,
//! however loaded the machine is. (Held at the look itself, whichever of its two reads came
//! first would be held and the other might pass before the reboot.)

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;

use support::sim_state::until;
use support::{SimClient, Workspace, acceptance_enabled, start_sim};

/// One VM its node's boot leaves stopped (`start_on_boot = false`), so a reboot of the node
/// stops it for good; `extra` lines go into the resource.
fn one_vm(extra: &str) -> String {
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "edge" {{
  name          = "meanwhile-0"
  template      = "debian-13-proxy"
  node          = "pve1"
  start_on_boot = false
{extra}}}
"#,
        Workspace::preamble()
    )
}

/// A simulator, its client and a working directory initialised with `one_vm(extra)`.
async fn world(extra: &str) -> (pvesim::Sim, SimClient, Workspace) {
    let (sim_handle, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&one_vm(extra)).await;
    (sim_handle, sim, ws)
}

/// Waits until the hold holds a request (or an answer), then reboots pve1, waits until it is
/// back with the VM stopped, and lets the held requests go on.
async fn reboot_at_the_hold(sim: &SimClient) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while sim.hold_status().await.held == 0 {
        assert!(
            Instant::now() < deadline,
            "the apply never reached the hold"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sim.reboot_node("pve1").await;
    until(sim, "pve1 is back, the VM stopped", |state| {
        let online = state["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["online"] == true);
        let stopped = state["vms"]
            .as_array()
            .unwrap()
            .iter()
            .any(|vm| vm["name"] == "meanwhile-0" && vm["status"] == "stopped");
        online && stopped
    })
    .await;
    sim.resume_hold().await;
}

/// The apply ended well and said what changed under it (`also`: its other words).
fn says_what_changed(out: support::TfOutput, also: &str) {
    let text = out.success_keeping_the_plan().all_text();
    assert!(!text.contains("inconsistent result"), "{text}");
    assert!(
        text.contains(support::KEPT_PLAN) && text.contains("started") && text.contains(also),
        "the apply says what changed under it:\n{text}"
    );
}

/// The VM stopped, the next plan shows it and starts it in place (the same VM, nothing
/// replaced), and the plans after are empty.
async fn the_next_apply_starts_it(sim: &SimClient, ws: &Workspace) {
    let vms = sim.our_vms().await;
    assert_eq!(vms.len(), 1, "{vms:?}");
    assert_eq!(vms[0]["status"], "stopped", "{vms:?}");
    let vmid = vms[0]["vmid"].clone();
    let plan = ws
        .terraform(&["plan", "-detailed-exitcode", "-input=false", "-no-color"])
        .await;
    let text = plan.all_text();
    assert_eq!(plan.code(), 2, "the plan shows the change:\n{text}");
    assert!(
        text.contains("~ started") && text.contains("false -> true"),
        "{text}"
    );
    assert!(
        !text.contains("must be replaced") && !text.contains("tainted"),
        "{text}"
    );
    ws.apply().await.success();
    let vms = sim.our_vms().await;
    assert_eq!(vms.len(), 1, "{vms:?}");
    assert_eq!(vms[0]["vmid"], vmid, "the same VM: {vms:?}");
    assert_eq!(vms[0]["status"], "running", "{vms:?}");
    ws.assert_plans_empty().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_its_node_stopped_before_the_creates_last_look_is_kept_and_started_again() {
    if !acceptance_enabled(
        "a_vm_its_node_stopped_before_the_creates_last_look_is_kept_and_started_again",
    ) {
        return;
    }
    let (_sim, sim, ws) = world("").await;
    // The seed's delete is the create's last request before its last look.
    sim.hold_answer_counting(1, "DELETE /nodes/pve1/storage/proxy-seeds/content/")
        .await;
    let (out, ()) = tokio::join!(ws.apply(), reboot_at_the_hold(&sim));
    says_what_changed(out, "status");
    let state = ws.state().await;
    let state = &state["values"]["root_module"]["resources"][0]["values"];
    assert_eq!(state["started"], true, "the state keeps the plan: {state}");
    the_next_apply_starts_it(&sim, &ws).await;
}

/// The power state reads among the requests answered since `since`.
async fn power_reads_since(sim: &SimClient, since: usize) -> u64 {
    let journal = sim.journal().await;
    journal[since..]
        .iter()
        .filter(|entry| {
            entry["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/status/current"))
        })
        .count() as u64
}

/// The same for an update, held once the power state read before its last look is handled
/// (counted in an update like it just before: the plan's refresh reads none, the apply's
/// writes look at it, and its last look reads it last). An earlier reboot the update would
/// see and mend: a VM meant to run that it finds stopped, it starts.
#[tokio::test(flavor = "multi_thread")]
async fn a_vm_its_node_stopped_before_an_updates_last_look_is_kept_and_started_again() {
    if !acceptance_enabled(
        "a_vm_its_node_stopped_before_an_updates_last_look_is_kept_and_started_again",
    ) {
        return;
    }
    let tags = |tags: &str| format!("  tags = [{tags}]\n");
    let (_sim, sim, ws) = world(&tags("")).await;
    ws.apply().await.success();

    // An update of the tags alone, to count its looks at the power state.
    let since = sim.journal_len().await;
    ws.write_main_tf(&one_vm(&tags("\"edge\"")));
    ws.apply().await.success();
    let looks = power_reads_since(&sim, since).await;
    assert!(
        looks >= 2,
        "an update reads the VM's power state before its last look"
    );

    ws.write_main_tf(&one_vm(&tags("\"edge\", \"eu\"")));
    sim.hold_answer_counting(looks - 1, "/status/current").await;
    let (out, ()) = tokio::join!(ws.apply(), reboot_at_the_hold(&sim));
    says_what_changed(out, "status");
    the_next_apply_starts_it(&sim, &ws).await;
}

/// A VM stopped before cloud-init's verdict could be read (its node rebooted just before the
/// create's first look at `status.json`) ends the wait at once: nothing answers until
/// something starts the VM, so waiting `cloud_init_timeout` for it would be waiting for
/// nothing. The create warns and keeps the seed with the verdict still to read; the next
/// apply starts the VM, reads the verdict and detaches the seed.
#[tokio::test(flavor = "multi_thread")]
async fn a_vm_its_node_stopped_before_cloud_inits_verdict_is_waited_for_by_the_next_apply() {
    if !acceptance_enabled(
        "a_vm_its_node_stopped_before_cloud_inits_verdict_is_waited_for_by_the_next_apply",
    ) {
        return;
    }
    // Long enough that a create waiting it out would not end before the test gives up.
    let (_sim, sim, ws) = world("  cloud_init_timeout = \"20m\"\n").await;
    sim.hold_counting(1, "file=/run/cloud-init/status.json")
        .await;
    let (out, ()) = tokio::join!(ws.apply(), reboot_at_the_hold(&sim));
    says_what_changed(out, "stopped before cloud-init's verdict could be read");
    assert_eq!(
        sim.volumes_on("proxy-seeds").await.len(),
        1,
        "the seed stays until the verdict is read"
    );
    the_next_apply_starts_it(&sim, &ws).await;
    assert!(
        sim.volumes_on("proxy-seeds").await.is_empty(),
        "the verdict read, the seed is detached and deleted"
    );
}

/// Under `create_before_destroy`, a replacement whose VM stopped before its verdict could be
/// read fails instead, so the VM it replaces is not destroyed; a destroy then leaves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_replacement_stopped_before_its_verdict_fails_and_the_vm_it_replaces_stays() {
    if !acceptance_enabled(
        "a_replacement_stopped_before_its_verdict_fails_and_the_vm_it_replaces_stays",
    ) {
        return;
    }
    let extra = |user_data: &str| {
        format!(
            "  user_data = \"{user_data}\"\n  \
             lifecycle {{\n    create_before_destroy = true\n  }}\n"
        )
    };
    let (_sim, sim, ws) = world(&extra("#cloud-config\\n")).await;
    ws.apply().await.success();
    let first = sim.our_vms().await[0]["vmid"].clone();

    ws.write_main_tf(&one_vm(&extra("#cloud-config\\nhostname: second\\n")));
    sim.hold_counting(1, "file=/run/cloud-init/status.json")
        .await;
    let (out, ()) = tokio::join!(ws.apply(), reboot_at_the_hold(&sim));
    let out = out.failure();
    let text = support::flat(&out.all_text());
    assert!(
        text.contains("stopped before cloud-init's verdict could be read")
            && text.contains("the VM it replaces stays"),
        "{text}"
    );
    let vmids: Vec<Value> = sim
        .our_vms()
        .await
        .iter()
        .map(|vm| vm["vmid"].clone())
        .collect();
    assert!(vmids.contains(&first), "the old VM stays: {vmids:?}");
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}
