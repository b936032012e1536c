//! Acceptance: failure paths. A create cut short (timeout mid-clone, a fault at any step)
//! leaves a state that destroy cleans up completely; one 5xx, 595 or reset at any step of
//! create, refresh or destroy, and a lock held for seconds on the template or the VM, are
//! waited out and every operation succeeds; an interrupted reboot never hides a pending
//! change; a destroy re-run while an earlier destroy task still runs succeeds; inputs that
//! could only end in an inconsistent result are refused before any write.
//!
//! The heavy runs (15 and 20 VMs under random faults) are `#[ignore]`d and run by
//! `scripts/soak.sh`; their figures are in docs/dev/reliability.md.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{SimClient, Workspace, flat, simulator_only, start_sim};

const TEMPLATE_VMID: u32 = 9000;

fn one_vm_tf(extra: &str) -> String {
    format!(
        r##"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "one" {{
  name      = "fault-1"
  node      = "pve1"
  template  = "debian-13-proxy"
  cores     = 1
  disk_gib  = 6
  user_data = "#cloud-config\npackages: [haproxy]\n"
{extra}}}
"##,
        Workspace::preamble()
    )
}

/// VMs that carry our mark or tag, and our seed ISOs.
async fn leftovers(sim: &SimClient) -> (usize, usize) {
    (
        sim.our_vms().await.len(),
        sim.volumes_on("proxy-seeds").await.len(),
    )
}

async fn set_faults(sim: &SimClient, faults: Value) {
    sim.set_faults(faults).await;
}

fn one_fault(method: &str, path_regex: &str, kind: &str) -> Value {
    let mut fault = json!({"method": method, "path_regex": path_regex, "count": 1});
    match kind {
        "reset" => fault["reset"] = json!(true),
        status => fault["status"] = json!(status.parse::<u16>().unwrap()),
    }
    json!({ "http": [fault] })
}

/// Whether the simulator answered a matching request with the injected fault (a reset is
/// journalled with status 0).
async fn fired(sim: &SimClient, since: usize, method: &str, path_regex: &str, kind: &str) -> bool {
    let status = kind.parse::<u64>().unwrap_or(0);
    let path = regex::Regex::new(path_regex).unwrap();
    sim.journal().await[since..].iter().any(|e| {
        e["method"] == method
            && e["status"].as_u64() == Some(status)
            && e["path"].as_str().is_some_and(|p| path.is_match(p))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_timed_out_mid_clone_is_tracked_and_destroyed_with_its_seed() {
    if !simulator_only(
        "a_create_timed_out_mid_clone_is_tracked_and_destroyed_with_its_seed",
        "injected faults",
    ) {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    config.timings.task_ms.insert("qmclone".into(), 5000);
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&one_vm_tf("  timeouts = { create = \"2s\" }\n"))
        .await;
    let out = ws.apply().await.failure();
    assert!(out.all_text().contains("timeout"), "{}", out.all_text());
    let state = ws.state().await;
    let vm = &state["values"]["root_module"]["resources"][0]["values"];
    assert_eq!(vm["name"], "fault-1", "{state}");
    assert!(vm["vmid"].as_u64().is_some(), "{state}");
    // A refresh while (and after) the clone runs keeps the VM in state.
    ws.terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    let destroy = ws.destroy().await.success();
    assert!(
        destroy.stdout().contains("1 destroyed"),
        "{}",
        destroy.all_text()
    );
    assert_eq!(leftovers(&sim).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_failed_after_the_upload_destroys_the_vm_and_its_seed() {
    if !simulator_only(
        "a_create_failed_after_the_upload_destroys_the_vm_and_its_seed",
        "injected faults",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&one_vm_tf("")).await;
    // The config step keeps failing (a 500 of no known meaning, every time): the create
    // fails after the seed was uploaded.
    set_faults(
        &sim,
        json!({"http": [{"method": "POST", "path_regex": "/qemu/\\d+/config$", "status": 500}]}),
    )
    .await;
    ws.apply().await.failure();
    let state = ws.state().await;
    let vm = &state["values"]["root_module"]["resources"][0]["values"];
    assert!(
        vm["seed_volume"]
            .as_str()
            .is_some_and(|v| v.starts_with("proxy-seeds:iso/")),
        "the state lost the uploaded seed: {state}"
    );
    set_faults(&sim, json!({})).await;
    ws.destroy().await.success();
    assert_eq!(leftovers(&sim).await, (0, 0));
}

/// The create steps, as (method, path) of the request a fault hits.
const CREATE_STEPS: &[(&str, &str, &str)] = &[
    ("clone POST", "POST", "/clone$"),
    (
        "clone task status",
        "GET",
        "/tasks/[^/]*qmclone[^/]*/status$",
    ),
    ("seed upload", "POST", "/upload$"),
    ("config", "POST", "/qemu/\\d+/config$"),
    ("resize", "PUT", "/resize$"),
    ("start", "POST", "/status/start$"),
    ("agent", "GET", "/agent/network-get-interfaces$"),
    // cloud-init's verdict and the seed's detach (`seed_lifetime = "until_ready"`).
    ("cloud-init verdict", "GET", "/agent/file-read$"),
    ("detach", "PUT", "/qemu/\\d+/config$"),
    (
        "detached seed delete",
        "DELETE",
        "/storage/proxy-seeds/content/",
    ),
];

/// Refresh and destroy calls.
const LATER_STEPS: &[(&str, &str, &str)] = &[
    ("refresh listing", "GET", "^/cluster/resources"),
    ("refresh config", "GET", "/qemu/\\d+/pending$"),
    // Power states come from one live listing per node.
    ("refresh status", "GET", "^/nodes/[^/]+/qemu$"),
    ("destroy stop", "POST", "/status/stop$"),
    (
        "destroy seed delete",
        "DELETE",
        "/storage/proxy-seeds/content/",
    ),
    ("destroy DELETE", "DELETE", "/qemu/\\d+$"),
];

async fn one_fault_everywhere(kind: &str) {
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&one_vm_tf("")).await;
    for (step, method, path) in CREATE_STEPS {
        let since = sim.journal().await.len();
        set_faults(&sim, one_fault(method, path, kind)).await;
        let out = ws.apply().await;
        assert!(
            out.output.status.success(),
            "one {kind} on the {step} failed the apply:\n{}",
            out.all_text()
        );
        assert!(
            fired(&sim, since, method, path, kind).await,
            "the {kind} on the {step} never fired"
        );
        set_faults(&sim, json!({})).await;
        ws.destroy().await.success();
        assert_eq!(
            leftovers(&sim).await,
            (0, 0),
            "after a {kind} on the {step}"
        );
    }
    // Destroy deletes the seed only of a VM that keeps it.
    ws.write_main_tf(&one_vm_tf("  seed_lifetime = \"vm\"\n"));
    ws.apply().await.success();
    for (step, method, path) in LATER_STEPS {
        let since = sim.journal().await.len();
        set_faults(&sim, one_fault(method, path, kind)).await;
        let out = if step.starts_with("refresh") {
            ws.terraform(&["plan", "-detailed-exitcode", "-no-color", "-input=false"])
                .await
        } else {
            ws.destroy().await
        };
        assert_eq!(
            out.code(),
            0,
            "one {kind} on the {step} failed it:\n{}",
            out.all_text()
        );
        assert!(
            fired(&sim, since, method, path, kind).await,
            "the {kind} on the {step} never fired"
        );
        set_faults(&sim, json!({})).await;
        if !step.starts_with("refresh") {
            assert_eq!(
                leftovers(&sim).await,
                (0, 0),
                "after a {kind} on the {step}"
            );
            ws.apply().await.success();
        }
    }
    ws.destroy().await.success();
    assert_eq!(leftovers(&sim).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn one_http_500_at_any_step_is_survived() {
    if simulator_only(
        "one_http_500_at_any_step_is_survived",
        "injected HTTP faults at every step",
    ) {
        one_fault_everywhere("500").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_http_503_at_any_step_is_survived() {
    if simulator_only(
        "one_http_503_at_any_step_is_survived",
        "injected HTTP faults at every step",
    ) {
        one_fault_everywhere("503").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_http_595_at_any_step_is_survived() {
    if simulator_only(
        "one_http_595_at_any_step_is_survived",
        "injected HTTP faults at every step",
    ) {
        one_fault_everywhere("595").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_connection_reset_at_any_step_is_survived() {
    if simulator_only(
        "one_connection_reset_at_any_step_is_survived",
        "injected connection resets at every step",
    ) {
        one_fault_everywhere("reset").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_held_for_seconds_are_waited_out_in_create_update_and_destroy() {
    if !simulator_only(
        "locks_held_for_seconds_are_waited_out_in_create_update_and_destroy",
        "injected held locks (only root@pam may set one on PVE)",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    for seconds in [1.0, 3.0, 6.0] {
        // A backup holds the template while the create wants to clone it.
        ws.init_with(&one_vm_tf("")).await;
        set_faults(
            &sim,
            json!({"held_locks": [{"vmid": TEMPLATE_VMID, "lock": "backup", "seconds": seconds}]}),
        )
        .await;
        let out = ws.apply().await;
        assert!(
            out.output.status.success(),
            "a {seconds} s template lock failed the create:\n{}",
            out.all_text()
        );
        let vmid = ws.state().await["values"]["root_module"]["resources"][0]["values"]["vmid"]
            .as_u64()
            .unwrap();
        // A backup holds the VM while an update and then a destroy want it.
        set_faults(
            &sim,
            json!({"held_locks": [{"vmid": vmid, "lock": "backup", "seconds": seconds}]}),
        )
        .await;
        ws.write_main_tf(&one_vm_tf("  tags = [\"backup-test\"]\n"));
        let out = ws.apply().await;
        assert!(
            out.output.status.success(),
            "a {seconds} s VM lock failed the update:\n{}",
            out.all_text()
        );
        set_faults(
            &sim,
            json!({"held_locks": [{"vmid": vmid, "lock": "backup", "seconds": seconds}]}),
        )
        .await;
        let started = Instant::now();
        let out = ws.destroy().await;
        assert!(
            out.output.status.success(),
            "a {seconds} s VM lock failed the destroy after {:?}:\n{}",
            started.elapsed(),
            out.all_text()
        );
        assert_eq!(leftovers(&sim).await, (0, 0));
        set_faults(&sim, json!({})).await;
    }
}

/// Polls the journal until a request matching `method` and `path` was answered.
async fn wait_for_request(sim: &SimClient, method: &str, path_suffix: &str, since: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = sim.journal().await[since..].iter().any(|e| {
            e["method"] == method && e["path"].as_str().is_some_and(|p| p.ends_with(path_suffix))
        });
        if seen {
            return;
        }
        assert!(Instant::now() < deadline, "no {method} …{path_suffix} seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_reboot_update_never_hides_the_pending_change() {
    if !simulator_only(
        "an_interrupted_reboot_update_never_hides_the_pending_change",
        "the request journal, to kill at a request",
    ) {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    config.timings.task_ms.insert("qmreboot".into(), 3000);
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let tf = |cores: u32| {
        one_vm_tf(
            "  reboot_if_needed = true
  timeouts = { update = \"2m\" }
",
        )
        .replace("cores     = 1", &format!("cores     = {cores}"))
    };
    ws.init_with(&tf(1)).await;
    ws.apply().await.success();
    let cores_of = |state: &Value| {
        state["vms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|vm| vm["name"] == "fault-1")
            .map(|vm| (vm["config"]["cores"].clone(), vm["status"].clone()))
            .unwrap()
    };

    // One 500 on the pending read: the update still reboots and converges.
    ws.write_main_tf(&tf(2));
    set_faults(&sim, one_fault("GET", "/pending$", "500")).await;
    ws.apply().await.success();
    set_faults(&sim, json!({})).await;
    assert_eq!(cores_of(&sim.state().await), (json!("2"), json!("running")));
    ws.assert_plans_empty().await;

    // Killed during the reboot: PVE finishes its reboot task, and the next apply converges
    // to the configured cores on a running VM.
    ws.write_main_tf(&tf(3));
    let since = sim.journal().await.len();
    let apply = ws.spawn_terraform(&["apply", "-auto-approve", "-input=false", "-no-color"]);
    wait_for_request(&sim, "POST", "/status/reboot", since).await;
    apply.kill_group();
    ws.apply().await.success();
    let deadline = Instant::now() + Duration::from_secs(30);
    while cores_of(&sim.state().await) != (json!("3"), json!("running")) {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            cores_of(&sim.state().await)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ws.assert_plans_empty().await;

    // Without reboot_if_needed, a pending change is named in every plan until a reboot.
    ws.write_main_tf(&one_vm_tf("").replace("cores     = 1", "cores     = 4"));
    let out = ws.apply().await.success();
    assert!(
        out.all_text().contains("pending until reboot"),
        "{}",
        out.all_text()
    );
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    assert!(
        plan.all_text().contains("Changes pending until reboot")
            && plan.all_text().contains("cores"),
        "{}",
        plan.all_text()
    );
    ws.destroy().await.success();
    assert_eq!(leftovers(&sim).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destroy_rerun_while_the_first_destroy_task_runs_succeeds() {
    if !simulator_only(
        "a_destroy_rerun_while_the_first_destroy_task_runs_succeeds",
        "slowed destroy tasks and the request journal",
    ) {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    config.timings.task_ms.insert("qmdestroy".into(), 3000);
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&one_vm_tf("")).await;
    for round in 0..3 {
        ws.apply().await.success();
        let since = sim.journal().await.len();
        let destroy = ws.spawn_terraform(&["destroy", "-auto-approve", "-input=false"]);
        wait_for_request(&sim, "DELETE", "", since).await;
        // Let the DELETE of the VM itself go out too (the seed's goes first).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !sim.journal().await[since..].iter().any(|e| {
            e["method"] == "DELETE" && e["path"].as_str().is_some_and(|p| p.contains("/qemu/"))
        }) {
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        destroy.kill_group();
        let out = ws.destroy().await;
        assert!(
            out.output.status.success(),
            "round {round}: the re-run destroy failed:\n{}",
            out.all_text()
        );
        assert_eq!(leftovers(&sim).await, (0, 0), "round {round}");
    }
}

/// As above, with the first destroy's worker held (the `stalled_tasks` fault) in qemu-server's
/// `lock: destroyed` phase, its disks freed, when the rerun comes, with the seed gone after
/// the first boot and with it kept for the VM's life: the rerun succeeds, whatever the
/// machine's load, and nothing is left once PVE's worker ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_destroy_rerun_meeting_the_first_destroy_in_its_locked_phase_succeeds() {
    if !simulator_only(
        "a_destroy_rerun_meeting_the_first_destroy_in_its_locked_phase_succeeds",
        "a stalled destroy task and the request journal",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    for extra in ["", "  seed_lifetime = \"vm\"\n"] {
        ws.init_with(&one_vm_tf(extra)).await;
        ws.apply().await.success();
        let vmid = ws.state().await["values"]["root_module"]["resources"][0]["values"]["vmid"]
            .as_u64()
            .unwrap();
        sim.set_faults(json!({"stalled_tasks": [{"task_type": "qmdestroy"}]}))
            .await;
        let since = sim.journal().await.len();
        let destroy = ws.spawn_terraform(&["destroy", "-auto-approve", "-input=false"]);
        wait_for_request(&sim, "DELETE", &format!("/qemu/{vmid}"), since).await;
        let config = format!("/nodes/pve1/qemu/{vmid}/config");
        assert!(
            sim.until_destroy_locked("pve1", vmid).await,
            "the destroy never locked the VM"
        );
        destroy.kill_group();

        let out = ws.destroy().await;
        let text = flat(&out.all_text());
        assert!(
            out.output.status.success(),
            "{extra}: the re-run failed:\n{text}"
        );
        sim.set_faults(json!({})).await;
        let destroy_task = sim
            .tasks()
            .await
            .into_iter()
            .rfind(|t| t.task_type == "qmdestroy")
            .expect("the first destroy's task");
        sim.wait_task(&json!(destroy_task.upid)).await;
        assert_eq!(leftovers(&sim).await, (0, 0), "{extra}");
        assert!(
            sim.try_api("GET", &config, &[]).await.is_none(),
            "VM {vmid} is left"
        );
    }
}

/// A clone task that fails leaves no VM (qemu-server's `clone_vm` frees the new disks and
/// removes the config before its task dies), so the failed create keeps nothing in the
/// state: no tainted instance of a VM that does not exist, which a plan would only drop
/// (fuzzer seed 22036). The next apply makes the VM.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_clone_leaves_nothing_in_the_state() {
    if !simulator_only(
        "a_failed_clone_leaves_nothing_in_the_state",
        "an injected clone failure",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&one_vm_tf("")).await;
    sim.set_faults(json!({"task_failures": [{"task_type": "qmclone", "nth": 1,
        "exitstatus": "clone failed: no space left on device"}]}))
        .await;
    let out = ws.apply().await.failure();
    assert!(
        out.all_text()
            .contains("clone failed: no space left on device"),
        "{}",
        out.all_text()
    );
    assert!(ws.state().await["values"].is_null(), "the state holds a VM");
    assert_eq!(leftovers(&sim).await, (0, 0));
    sim.set_faults(json!({})).await;
    ws.apply().await.success();
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert_eq!(leftovers(&sim).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn inputs_that_could_only_end_inconsistent_are_refused_before_any_write() {
    if !simulator_only(
        "inputs_that_could_only_end_inconsistent_are_refused_before_any_write",
        "the request journal (no write at all)",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    // Our own ownership tag: refused at validate, pointing at `tags`.
    ws.init_with(&one_vm_tf("  tags = [\"proxyvm\", \"web\"]\n"))
        .await;
    let out = ws.terraform(&["validate", "-no-color"]).await.failure();
    assert!(
        out.all_text().contains("the provider's own ownership tag"),
        "{}",
        out.all_text()
    );
    // A disk smaller than the template's (4 GiB): refused before the clone.
    ws.write_main_tf(&one_vm_tf("").replace("disk_gib  = 6", "disk_gib  = 2"));
    let out = ws.apply().await.failure();
    assert!(
        out.all_text()
            .contains("smaller than the template's disk (4 GiB)"),
        "{}",
        out.all_text()
    );
    let writes = sim.writes_since(0).await;
    assert!(writes.is_empty(), "{writes:?}");
    assert!(ws.state().await["values"].is_null(), "nothing in state");
}

/// `count` VMs under a fault mix: the apply converges within one re-apply, the plan is
/// empty, destroy leaves nothing; prints the figures docs/dev/reliability.md records.
async fn soak(count: usize, faults: Value, label: &str) {
    let mut config = pvesim::SimConfig::default();
    config.timings.task_ms.insert("qmclone".into(), 300);
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let tf = format!(
        r##"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "soak" {{
  count     = {count}
  name      = "soak-${{count.index}}"
  node      = "pve${{count.index % 3 + 1}}"
  template  = "debian-13-proxy"
  disk_gib  = 6
}}
"##,
        Workspace::preamble()
    );
    ws.init_with(&tf).await;
    set_faults(&sim, faults.clone()).await;
    let started = Instant::now();
    let mut applies = 1;
    if !ws
        .terraform(&[
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-parallelism=10",
        ])
        .await
        .output
        .status
        .success()
    {
        applies += 1;
        ws.terraform(&[
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-parallelism=10",
        ])
        .await
        .success();
    }
    let apply_time = started.elapsed();
    let journal = sim.journal().await;
    let faults_fired = journal
        .iter()
        .filter(|e| e["status"].as_u64().is_some_and(|s| s == 0 || s >= 500))
        .count();
    set_faults(&sim, json!({})).await;
    ws.assert_plans_empty().await;
    let names: Vec<String> = sim
        .our_vms()
        .await
        .iter()
        .map(|vm| vm["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(names.len(), count, "{names:?}");
    assert_eq!(unique.len(), count, "duplicates: {names:?}");
    ws.destroy().await.success();
    assert_eq!(leftovers(&sim).await, (0, 0));
    println!(
        "soak {label}: {count} VMs, {applies} apply run(s), {} requests, {faults_fired} answered \
            with an error (injected 5xx/595/resets, plus the guest agent's 500 before it is up), \
            apply {:.1} s",
        journal.len(),
        apply_time.as_secs_f64()
    );
}

fn every_endpoint_5xx(rate: f64) -> Value {
    json!({"http": [
        {"path_regex": ".", "status": 500, "rate": rate / 2.0},
        {"path_regex": ".", "status": 503, "rate": rate / 2.0}
    ]})
}

fn mixed_faults() -> Value {
    json!({
        "latency_ms": 5,
        "http": [
            {"path_regex": ".", "status": 500, "rate": 0.03},
            {"path_regex": ".", "status": 503, "rate": 0.02},
            {"path_regex": ".", "status": 595, "rate": 0.02},
            {"path_regex": ".", "reset": true, "rate": 0.03}
        ],
        "task_failures": [{"task_type": "qmstart", "nth": 3, "exitstatus": "start failed: \
            injected"}],
        "held_locks": [{"vmid": TEMPLATE_VMID, "lock": "backup", "seconds": 2.0}]
    })
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "soak: run by scripts/soak.sh"]
async fn soak_15_vms_under_10_percent_5xx() {
    if simulator_only("soak_15_vms_under_10_percent_5xx", "injected faults") {
        soak(15, every_endpoint_5xx(0.10), "10% 5xx").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "soak: run by scripts/soak.sh"]
async fn soak_20_vms_under_10_percent_5xx() {
    if simulator_only("soak_20_vms_under_10_percent_5xx", "injected faults") {
        soak(20, every_endpoint_5xx(0.10), "10% 5xx").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "soak: run by scripts/soak.sh"]
async fn soak_15_vms_under_mixed_faults() {
    if simulator_only("soak_15_vms_under_mixed_faults", "injected faults") {
        soak(15, mixed_faults(), "mixed").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "soak: run by scripts/soak.sh"]
async fn soak_20_vms_under_mixed_faults() {
    if simulator_only("soak_20_vms_under_mixed_faults", "injected faults") {
        soak(20, mixed_faults(), "mixed").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reboot_whose_answer_was_lost_is_sent_once() {
    if !simulator_only(
        "a_reboot_whose_answer_was_lost_is_sent_once",
        "a lost answer injected on the reboot",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let tf = |cores: u32| {
        one_vm_tf("  reboot_if_needed = true\n")
            .replace("cores     = 1", &format!("cores     = {cores}"))
    };
    ws.init_with(&tf(1)).await;
    ws.apply().await.success();
    ws.write_main_tf(&tf(2));
    // PVE starts the reboot, but its answer never arrives.
    set_faults(
        &sim,
        json!({"http": [{
            "method": "POST",
            "path_regex": "/status/reboot$",
            "reset": true,
            "after_handling": true,
            "count": 1,
        }]}),
    )
    .await;
    let since = sim.journal().await.len();
    ws.apply().await.success();
    set_faults(&sim, json!({})).await;
    let reboots = sim.journal().await[since..]
        .iter()
        .filter(|e| {
            e["method"] == "POST"
                && e["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/status/reboot"))
        })
        .count();
    assert_eq!(reboots, 1, "the VM was rebooted {reboots} times");
    ws.assert_plans_empty().await;
}

/// A destroy whose answer was lost while PVE's destroy task runs on: the provider finds the
/// VM going (its config locked `destroyed`), sends no second destroy, and waits until PVE no
/// longer knows the VM; then the seed goes too.
#[tokio::test(flavor = "multi_thread")]
async fn a_destroy_whose_answer_was_lost_is_sent_once_and_waited_for() {
    if !simulator_only(
        "a_destroy_whose_answer_was_lost_is_sent_once_and_waited_for",
        "a lost answer injected on the destroy",
    ) {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    config.timings.task_ms.insert("qmdestroy".into(), 1500);
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    // The seed stays with the VM, so its delete after the VM's shows the wait.
    ws.init_with(&one_vm_tf("  seed_lifetime = \"vm\"\n")).await;
    ws.apply().await.success();
    set_faults(
        &sim,
        json!({"http": [{
            "method": "DELETE",
            "path_regex": "/qemu/[0-9]+$",
            "reset": true,
            "after_handling": true,
            "count": 1,
        }]}),
    )
    .await;
    let since = sim.journal().await.len();
    ws.destroy().await.success();
    set_faults(&sim, json!({})).await;
    let journal = sim.journal().await;
    let destroys = journal[since..]
        .iter()
        .filter(|e| {
            e["method"] == "DELETE" && e["path"].as_str().is_some_and(|p| p.contains("/qemu/"))
        })
        .count();
    let seen: Vec<String> = journal[since..]
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {}",
                e["received_ms"], e["method"], e["path"], e["status"]
            )
        })
        .collect();
    assert_eq!(
        destroys, 1,
        "the VM's destroy was sent {destroys} times: {seen:#?}"
    );
    let tasks = sim.tasks().await;
    let destroyed = tasks
        .iter()
        .find(|t| t.task_type == "qmdestroy")
        .and_then(|t| t.ended_ms)
        .expect("the destroy task ended");
    let seed_deleted = journal[since..]
        .iter()
        .find(|e| {
            e["method"] == "DELETE" && e["path"].as_str().is_some_and(|p| p.contains("/storage/"))
        })
        .and_then(|e| e["received_ms"].as_u64())
        .expect("the seed was deleted");
    assert!(
        seed_deleted >= destroyed,
        "the seed's delete ({seed_deleted} ms) waited for the VM's ({destroyed} ms)"
    );
    assert_eq!(leftovers(&sim).await, (0, 0));
}
