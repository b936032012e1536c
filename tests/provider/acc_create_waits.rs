//! Acceptance (#42): what a create waits for one answer at a time. Reads that do not depend
//! on each other go out together: the config write's read beside the seed's upload, the
//! detach's reads beside the first boot's instance-id, the power state beside the final
//! config. Shown with pve-sim's hold, not with timings: the world stands still at the first
//! request of each pair, and the other one must arrive all the same (the provider waits for
//! no answer before it sends it), however loaded the machine is.

use std::time::Duration;

use crate::support;

use support::{Running, SimClient, Workspace, acceptance_enabled, start_sim};

fn one_vm() -> String {
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "edge" {{
  name     = "waits-0"
  template = "debian-13-proxy"
  node     = "pve1"
}}
"#,
        Workspace::preamble()
    )
}

/// A request of the journal (answered) or of the hold (waiting), as `METHOD /path`, with
/// its `file` parameter (an agent's file read) after `?file=`.
fn line(entry: &serde_json::Value) -> String {
    let method = entry["method"].as_str().unwrap_or_default();
    let path = entry["path"].as_str().unwrap_or_default();
    match entry["params"]["file"].as_str() {
        Some(file) => format!("{method} {path}?file={file}"),
        None => format!("{method} {path}"),
    }
}

/// Waits until the request `counting` names is held and one that `beside` picks arrived
/// too (answered since `since`, or held behind it); says what arrived when the apply ends
/// first, or when the other request has not come a minute after the held one (a provider
/// that waits for the held answer before it sends the other request never sends it: only
/// its retries of the held one come).
async fn arrives_beside(
    sim: &SimClient,
    apply: &mut Running,
    since: usize,
    counting: &str,
    beside: impl Fn(&str) -> bool,
) -> Result<(), String> {
    let mut held_since = None;
    loop {
        let status = sim.hold_status().await;
        let answered: Vec<String> = sim.journal().await[since..].iter().map(line).collect();
        let held = &status.held_requests;
        let counted = held.iter().any(|l| l.contains(counting));
        if counted && answered.iter().chain(held).any(|l| beside(l)) {
            return Ok(());
        }
        let waited = counted.then(|| *held_since.get_or_insert_with(std::time::Instant::now));
        if apply.exited() || waited.is_some_and(|at| at.elapsed() > Duration::from_secs(60)) {
            return Err(format!(
                "one answer at a time: with `{counting}` held, the request sent beside it did \
                 not arrive.\nheld: {held:#?}\nanswered since the hold: {answered:#?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The three pairs of a create, each held at its first request: the upload and the config
/// write's read; the first boot's instance-id and the `manual-clean` marker's read; the
/// final config (`pending`) and the power state. Released, the apply ends well (the held
/// requests were dropped: reads and an upload are sent again) and the plan is empty.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_sends_reads_that_need_no_answer_together() {
    if !acceptance_enabled("a_create_sends_reads_that_need_no_answer_together") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&one_vm()).await;

    let since = sim.journal().await.len();
    sim.hold_counting(1, "/upload").await;
    let mut apply = ws.spawn_terraform(&["apply", "-auto-approve", "-input=false", "-no-color"]);
    let vm_config = |l: &str| {
        // The new VM's config, not the template's (which a create reads before its clone).
        l.starts_with("GET /nodes/pve1/qemu/") && l.ends_with("/config") && !l.contains("/9000/")
    };
    let mut beside = arrives_beside(&sim, &mut apply, since, "/upload", vm_config).await;

    let since = sim.journal().await.len();
    let instance_id = "file=/var/lib/cloud/data/instance-id";
    let marker = |l: &str| l.ends_with("file=/var/lib/cloud/instance/manual-clean");
    if beside.is_ok() {
        sim.hold_counting(1, instance_id).await;
        beside = arrives_beside(&sim, &mut apply, since, instance_id, marker).await;
    }

    let since = sim.journal().await.len();
    let power = |l: &str| l.starts_with("GET /nodes/pve1/qemu/") && l.ends_with("/status/current");
    if beside.is_ok() {
        sim.hold_counting(1, "/pending").await;
        beside = arrives_beside(&sim, &mut apply, since, "/pending", power).await;
    }
    if let Err(why) = beside {
        if !apply.exited() {
            apply.kill_group();
        }
        sim.release_hold().await;
        panic!("{why}");
    }
    sim.release_hold().await;
    let (_, _, succeeded) = apply.sample_until_exit(|| async { 0 }).await;
    assert!(succeeded, "the apply ended well once the hold was released");
    let vms = sim.our_vms().await;
    assert_eq!(vms.len(), 1, "{vms:?}");
    assert!(
        sim.volumes_on("proxy-seeds").await.is_empty(),
        "the seed is gone"
    );
    ws.assert_plans_empty().await;
}
