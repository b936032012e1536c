//! Acceptance: creates that are killed (terraform and the provider, SIGKILL) at every step
//! boundary and in the middle of the clone converge on the next apply to exactly one VM; a
//! failed start leaves a tainted VM that the next apply replaces; twenty VMs from one
//! template in one apply never trip over locks or VMIDs.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{SimClient, Workspace, acceptance_enabled, start_sim};

fn one_vm_tf() -> String {
    format!(
        r##"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "crash" {{
  name      = "crash-0"
  node      = "pve2"
  template  = "debian-13-proxy"
  cores     = 2
  disk_gib  = 10
  vlan_tag  = 9
  user_data = "#cloud-config\npackages: [haproxy]\n"
}}
"##,
        Workspace::preamble()
    )
}

/// Slow enough tasks that every step boundary is visible from outside.
fn slow_sim() -> pvesim::SimConfig {
    let mut config = pvesim::SimConfig::default();
    for (task, ms) in [
        ("qmclone", 1500),
        ("imgcopy", 700),
        ("qmconfig", 700),
        ("resize", 700),
        ("qmstart", 700),
    ] {
        config.timings.task_ms.insert(task.into(), ms);
    }
    config.timings.agent_boot_ms = 1500;
    config
}

fn ours_named<'a>(state: &'a Value, name: &str) -> Vec<&'a Value> {
    state["vms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| {
            vm["config"]["description"]
                .as_str()
                .is_some_and(|d| d.contains(&format!("proxyvm-owner: {name}")))
        })
        .collect()
}

/// Where the create is, as seen from the simulator.
#[derive(Debug, Clone, Copy, PartialEq)]
enum KillPoint {
    MidClone,
    AfterClone,
    AfterSeedUpload,
    AfterConfig,
    AfterResize,
    AfterStart,
}

fn reached(point: KillPoint, state: &Value) -> bool {
    let seeds = state["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["storage"] == "proxy-seeds");
    // During the clone the VM has only `lock: clone`: no name or description yet.
    let vms: Vec<&Value> = state["vms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| vm["vmid"].as_u64().unwrap() >= 100_000)
        .collect();
    let Some(vm) = vms.first() else { return false };
    let config = &vm["config"];
    match point {
        KillPoint::MidClone => vm["lock"] == "clone",
        KillPoint::AfterClone => vm["lock"].is_null() && !seeds,
        KillPoint::AfterSeedUpload => seeds && config["ide2"].is_null(),
        KillPoint::AfterConfig => {
            config["ide2"].is_string()
                && config["scsi0"]
                    .as_str()
                    .is_some_and(|d| d.contains("size=4G"))
        }
        KillPoint::AfterResize => {
            config["scsi0"]
                .as_str()
                .is_some_and(|d| d.contains("size=10G"))
                && vm["status"] == "stopped"
        }
        KillPoint::AfterStart => vm["status"] == "running",
    }
}

async fn kill_create_at(point: KillPoint) {
    let (_sim, target) = start_sim(slow_sim()).await;
    let sim = SimClient::new(&target);
    let before = sim.state().await;
    let ws = Workspace::new(target);
    ws.write_main_tf(&one_vm_tf());
    ws.init().await;

    let apply = ws.spawn_terraform(&[
        "apply",
        "-auto-approve",
        "-input=false",
        "-no-color",
        "-lock=false",
    ]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = sim.state().await;
        if reached(point, &state) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{point:?} never reached; state: {state:#}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    apply.kill_group();

    // The next apply converges: one VM of that name, one seed, foreign VMs untouched.
    let out = ws
        .terraform(&[
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-lock=false",
        ])
        .await
        .success();
    let after = sim.state().await;
    let ours = ours_named(&after, "crash-0");
    assert_eq!(
        ours.len(),
        1,
        "after a kill at {point:?}: {ours:#?}\n{}",
        out.all_text()
    );
    assert_eq!(ours[0]["status"], "running");
    assert!(
        ours[0]["config"]["net0"]
            .as_str()
            .unwrap()
            .contains("tag=9")
    );
    assert!(
        ours[0]["config"]["scsi0"]
            .as_str()
            .unwrap()
            .contains("size=10G")
    );
    assert_eq!(
        sim.volumes_on("proxy-seeds").await.len(),
        1,
        "seeds after a kill at {point:?}"
    );
    let foreign = |state: &Value| -> Vec<Value> {
        state["vms"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|vm| vm["vmid"].as_u64().unwrap() < 100_000)
            .cloned()
            .collect()
    };
    assert_eq!(
        foreign(&before),
        foreign(&after),
        "a foreign VM or the template changed"
    );
    ws.terraform(&[
        "plan",
        "-detailed-exitcode",
        "-input=false",
        "-no-color",
        "-lock=false",
    ])
    .await
    .success();

    ws.terraform(&[
        "destroy",
        "-auto-approve",
        "-input=false",
        "-no-color",
        "-lock=false",
    ])
    .await
    .success();
    let end = sim.state().await;
    assert!(ours_named(&end, "crash-0").is_empty());
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}

macro_rules! kill_point_test {
    ($name:ident, $point:expr) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn $name() {
            if acceptance_enabled(stringify!($name)) {
                kill_create_at($point).await;
            }
        }
    };
}

kill_point_test!(killed_in_the_middle_of_the_clone_task, KillPoint::MidClone);
kill_point_test!(killed_after_the_clone, KillPoint::AfterClone);
kill_point_test!(killed_after_the_seed_upload, KillPoint::AfterSeedUpload);
kill_point_test!(killed_after_the_config, KillPoint::AfterConfig);
kill_point_test!(killed_after_the_resize, KillPoint::AfterResize);
kill_point_test!(killed_after_the_start, KillPoint::AfterStart);

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_during_create_stops_promptly_and_the_next_apply_converges() {
    if !acceptance_enabled("ctrl_c_during_create_stops_promptly_and_the_next_apply_converges") {
        return;
    }
    let (_sim, target) = start_sim(slow_sim()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.write_main_tf(&one_vm_tf());
    ws.init().await;
    let apply = ws.spawn_terraform(&["apply", "-auto-approve", "-input=false", "-no-color"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !reached(KillPoint::AfterSeedUpload, &sim.state().await) {
        assert!(
            Instant::now() < deadline,
            "the create never uploaded its seed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // StopProvider must end the create well before its 15 minute timeout.
    let succeeded =
        tokio::task::spawn_blocking(move || apply.interrupt_and_wait(Duration::from_secs(30)))
            .await
            .unwrap();
    assert!(!succeeded, "an interrupted apply reported success");
    // The half-made VM is in state (tainted), so nothing is orphaned.
    let state = ws.state().await;
    assert!(
        state["values"]["root_module"]["resources"][0]["values"]["vmid"].is_u64(),
        "the interrupted VM is not tracked: {state:#}"
    );
    ws.apply().await.success();
    assert_eq!(ours_named(&sim.state().await, "crash-0").len(), 1);
    assert_eq!(sim.volumes_on("proxy-seeds").await.len(), 1);
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_start_taints_then_replaces_and_destroys_cleanly() {
    if !acceptance_enabled("failed_start_taints_then_replaces_and_destroys_cleanly") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    sim.put_admin(
        "faults",
        json!({"task_failures": [{"task_type": "qmstart", "nth": 1, "exitstatus": "start failed: QEMU exited with code 1"}]}),
    )
    .await;
    let ws = Workspace::new(target);
    ws.write_main_tf(&one_vm_tf());
    ws.init().await;

    let out = ws.apply().await.failure();
    let text = out.all_text();
    assert!(text.contains("Unable to create proxy VM crash-0"), "{text}");
    assert!(
        text.contains("start failed: QEMU exited with code 1"),
        "PVE's message is not quoted:\n{text}"
    );
    let state = ws.state().await;
    let resource = &state["values"]["root_module"]["resources"][0];
    let vmid = resource["values"]["vmid"]
        .as_u64()
        .expect("the failed VM's VMID is kept in state");
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    assert!(
        plan.stdout().contains("is tainted, so must be replaced"),
        "{}",
        plan.stdout()
    );

    ws.apply().await.success();
    let after = sim.state().await;
    let ours = ours_named(&after, "crash-0");
    assert_eq!(ours.len(), 1, "{ours:#?}");
    assert_eq!(ours[0]["status"], "running");
    assert_eq!(
        sim.volumes_on("proxy-seeds").await.len(),
        1,
        "the tainted VM's seed leaked"
    );
    assert!(
        ours[0]["vmid"].as_u64() == Some(vmid)
            || !after["vms"]
                .as_array()
                .unwrap()
                .iter()
                .any(|vm| vm["vmid"].as_u64() == Some(vmid)),
        "the tainted VM {vmid} was left behind"
    );
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_vms_from_one_template_with_parallelism_ten() {
    if !acceptance_enabled("twenty_vms_from_one_template_with_parallelism_ten") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.write_main_tf(&format!(
        r##"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "fleet" {{
  count     = 20
  name      = "fleet-${{count.index}}"
  node      = "pve${{count.index % 3 + 1}}"
  template  = "debian-13-proxy"
  user_data = "#cloud-config\npackages: [squid]\n"
}}
"##,
        Workspace::preamble()
    ));
    ws.init().await;
    ws.terraform(&[
        "apply",
        "-auto-approve",
        "-input=false",
        "-no-color",
        "-parallelism=10",
    ])
    .await
    .success();
    let ours = sim.our_vms().await;
    assert_eq!(ours.len(), 20);
    assert!(ours.iter().all(|vm| vm["status"] == "running"));
    let mut vmids: Vec<u64> = ours.iter().map(|vm| vm["vmid"].as_u64().unwrap()).collect();
    vmids.sort_unstable();
    vmids.dedup();
    assert_eq!(vmids.len(), 20);
    ws.assert_plans_empty().await;
    ws.terraform(&[
        "destroy",
        "-auto-approve",
        "-input=false",
        "-no-color",
        "-parallelism=10",
    ])
    .await
    .success();
    assert!(sim.our_vms().await.is_empty());
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}
