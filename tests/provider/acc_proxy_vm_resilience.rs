//! Acceptance: creates that are killed (terraform and the provider, SIGKILL) at every step
//! boundary and in the middle of the clone converge on the next apply to exactly one VM; a
//! failed start leaves a tainted VM that the next apply replaces; twenty VMs from one
//! template in one apply never trip over locks or VMIDs. All but the injected start failure
//! also run in live mode (see `tests/provider/support/host.rs`), observed through the PVE API.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Facts, Host, Observer, SimClient, Workspace, simulator_only, start_sim};

/// The VLAN of the crash VM: 9 on the simulator, the lab's own (or none) on a live host.
fn crash_vlan(host: &Host) -> Option<u32> {
    if host.is_live() {
        host.facts.vlan
    } else {
        Some(9)
    }
}

fn one_vm_tf(host: &Host) -> String {
    one_vm_tf_on(&host.facts, &host.name("crash-0"), crash_vlan(host))
}

fn one_vm_tf_on(facts: &Facts, name: &str, vlan: Option<u32>) -> String {
    let vlan = vlan
        .map(|v| format!("  vlan_tag  = {v}\n"))
        .unwrap_or_default();
    format!(
        r##"{}
provider "proxmox" {{
  seed_storage = "{}"
}}

resource "proxmox_proxy_vm" "crash" {{
  name      = "{name}"
  node      = "{}"
  template  = "{}"
  cores     = 2
  disk_gib  = 10
{vlan}  user_data = "#cloud-config\npackages: [haproxy]\n"
}}
"##,
        Workspace::preamble(),
        facts.seed_storage,
        facts.node(1),
        facts.template,
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
        // The detached seed's delete (#30): a window between `ide2: none` and the file gone.
        ("imgdel", 700),
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
    /// Inside the seed's detach: `ide2` empty, the ISO not deleted yet.
    InDetach,
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
        KillPoint::InDetach => {
            config["ide2"]
                .as_str()
                .is_some_and(|d| d.starts_with("none"))
                && seeds
        }
    }
}

/// Whether a clone task (`qmclone`) runs now on any node, as PVE's task list shows it.
async fn a_clone_task_runs(pve: &Observer) -> bool {
    let nodes = pve.api("GET", "/nodes", &[]).await;
    for node in nodes.as_array().cloned().unwrap_or_default() {
        let Some(node) = node["node"].as_str() else {
            continue;
        };
        let active = pve
            .api(
                "GET",
                &format!("/nodes/{node}/tasks"),
                &[("source", "active"), ("typefilter", "qmclone")],
            )
            .await;
        if active.as_array().is_some_and(|tasks| !tasks.is_empty()) {
            return true;
        }
    }
    false
}

/// On a live host, whether the create got at least as far as `point`: a real host (or a
/// pve-sim run as one) is not slowed down for the test, so the kill may land later than
/// `point`, never earlier; mid-clone is seen exactly (the clone's temporary config, `lock:
/// clone`, while PVE lists a running `qmclone` task). Only this VM's probe VMIDs and this
/// test's seeds are looked at.
async fn reached_live(point: KillPoint, host: &Host, pve: &Observer, before: &[u64]) -> bool {
    let name = host.name("crash-0");
    let probes: Vec<u64> = terraform_provider_proxmox::vmid::VmidRange::default()
        .probe_sequence_in_fleet("", &name)
        .take(8)
        .map(u64::from)
        .filter(|v| !before.contains(v))
        .collect();
    let vms = pve.vms_among(&probes).await;
    let Some(vm) = vms.first() else { return false };
    let config = &vm["config"];
    let named = config["name"] == name.as_str();
    let seeds = !pve.volumes_on(&host.facts.seed_storage).await.is_empty();
    let size_10g = config["scsi0"]
        .as_str()
        .is_some_and(|d| d.contains("size=10G"));
    match point {
        KillPoint::MidClone => vm["lock"] == "clone" && a_clone_task_runs(pve).await,
        KillPoint::AfterClone => named && vm["lock"].is_null(),
        KillPoint::AfterSeedUpload => named && seeds,
        KillPoint::AfterConfig => named && config["ide2"].is_string(),
        KillPoint::AfterResize => named && size_10g,
        KillPoint::AfterStart => named && vm["status"] == "running",
        KillPoint::InDetach => {
            named
                && config["ide2"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("none"))
        }
    }
}

/// Kills a create at `point` and checks the next apply converges. `placed`: the VM has no
/// `node` (placement chooses among the test's nodes), so the resumed create must find its
/// half-made VM wherever the killed run placed it.
async fn kill_create_at(test: &str, point: KillPoint, placed: bool) {
    let Some(host) = Host::start(test, slow_sim).await else {
        return;
    };
    let pve = host.observer();
    let before = pve.vmids().await;
    let foreign = |state: &Value| -> Vec<Value> {
        state["vms"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|vm| vm["vmid"].as_u64().unwrap() < 100_000)
            .cloned()
            .collect()
    };
    let sim_before = match host.sim() {
        Some(sim) => Some(sim.state().await),
        None => None,
    };
    let ws = Workspace::new(host.target.clone());
    let mut tf = one_vm_tf(&host);
    if placed {
        let candidates: Vec<String> = host
            .facts
            .nodes
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect();
        tf = tf.replace(
            &format!("  node      = \"{}\"\n", host.facts.node(1)),
            &format!("  node_candidates = [{}]\n", candidates.join(", ")),
        );
        assert!(tf.contains("node_candidates"), "{tf}");
    }
    ws.write_main_tf(&tf);
    ws.init().await;

    let apply = ws.spawn_terraform(&[
        "apply",
        "-auto-approve",
        "-input=false",
        "-no-color",
        "-lock=false",
    ]);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = match host.sim() {
            Some(sim) => reached(point, &sim.state().await),
            None => reached_live(point, &host, &pve, &before).await,
        };
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "{point:?} never reached");
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
    let name = host.name("crash-0");
    let ours = pve.ours_named(&name).await;
    assert_eq!(
        ours.len(),
        1,
        "after a kill at {point:?}: {ours:#?}\n{}",
        out.all_text()
    );
    assert_eq!(ours[0]["status"], "running");
    let net0 = ours[0]["config"]["net0"].as_str().unwrap();
    match crash_vlan(&host) {
        Some(tag) => assert!(net0.contains(&format!("tag={tag}")), "{net0}"),
        None => assert!(!net0.contains("tag="), "{net0}"),
    }
    assert!(
        ours[0]["config"]["scsi0"]
            .as_str()
            .unwrap()
            .contains("size=10G")
    );
    // The resumed create waited for cloud-init and detached the seed (#30): no seed is
    // left, not even the killed run's.
    assert_eq!(
        pve.volumes_on(&host.facts.seed_storage).await.len(),
        0,
        "seeds after a kill at {point:?}"
    );
    assert!(
        ours[0]["config"]["ide2"]
            .as_str()
            .is_some_and(|d| d.starts_with("none")),
        "the seed is detached after a kill at {point:?}"
    );
    if let (Some(sim), Some(before)) = (host.sim(), &sim_before) {
        assert_eq!(
            foreign(before),
            foreign(&sim.state().await),
            "a foreign VM or the template changed"
        );
    }
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
    assert!(pve.ours_named(&name).await.is_empty());
    assert!(pve.volumes_on(&host.facts.seed_storage).await.is_empty());
}

macro_rules! kill_point_test {
    ($name:ident, $point:expr) => {
        kill_point_test!($name, $point, false);
    };
    ($name:ident, $point:expr, $placed:expr) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn $name() {
            kill_create_at(stringify!($name), $point, $placed).await;
        }
    };
}

kill_point_test!(killed_in_the_middle_of_the_clone_task, KillPoint::MidClone);
kill_point_test!(killed_after_the_clone, KillPoint::AfterClone);
kill_point_test!(killed_after_the_seed_upload, KillPoint::AfterSeedUpload);
kill_point_test!(killed_after_the_config, KillPoint::AfterConfig);
kill_point_test!(killed_after_the_resize, KillPoint::AfterResize);
kill_point_test!(killed_after_the_start, KillPoint::AfterStart);
// The same kill points with `node` unset: the create resumes where placement put the VM.
kill_point_test!(placed_and_killed_mid_clone, KillPoint::MidClone, true);
kill_point_test!(
    placed_and_killed_after_the_clone,
    KillPoint::AfterClone,
    true
);
kill_point_test!(
    placed_and_killed_after_the_seed_upload,
    KillPoint::AfterSeedUpload,
    true
);
kill_point_test!(
    placed_and_killed_after_the_config,
    KillPoint::AfterConfig,
    true
);
kill_point_test!(
    placed_and_killed_after_the_resize,
    KillPoint::AfterResize,
    true
);
kill_point_test!(
    placed_and_killed_after_the_start,
    KillPoint::AfterStart,
    true
);
kill_point_test!(killed_inside_the_detach, KillPoint::InDetach);

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_during_create_stops_promptly_and_the_next_apply_converges() {
    let Some(host) = Host::start(
        "ctrl_c_during_create_stops_promptly_and_the_next_apply_converges",
        slow_sim,
    )
    .await
    else {
        return;
    };
    let pve = host.observer();
    let before = pve.vmids().await;
    let ws = Workspace::new(host.target.clone());
    ws.write_main_tf(&one_vm_tf(&host));
    ws.init().await;
    let apply = ws.spawn_terraform(&["apply", "-auto-approve", "-input=false", "-no-color"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let uploaded = match host.sim() {
            Some(sim) => reached(KillPoint::AfterSeedUpload, &sim.state().await),
            None => reached_live(KillPoint::AfterSeedUpload, &host, &pve, &before).await,
        };
        if uploaded {
            break;
        }
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
    assert_eq!(pve.ours_named(&host.name("crash-0")).await.len(), 1);
    // The converged VM's seed left once cloud-init finished (#30): none is left over.
    assert_eq!(pve.volumes_on(&host.facts.seed_storage).await.len(), 0);
    ws.destroy().await.success();
    assert!(pve.our_vms().await.is_empty());
    assert!(pve.volumes_on(&host.facts.seed_storage).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_start_taints_then_replaces_and_destroys_cleanly() {
    if !simulator_only(
        "failed_start_taints_then_replaces_and_destroys_cleanly",
        "an injected start failure",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    sim.set_faults(
        json!({"task_failures": [{"task_type": "qmstart", "nth": 1, "exitstatus": "start failed: \
            QEMU exited with code 1"}]}),
    )
    .await;
    let ws = Workspace::new(target);
    ws.write_main_tf(&one_vm_tf_on(&Facts::sim(), "crash-0", Some(9)));
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
    // The replacement's own seed left once cloud-init finished (#30), so any seed here is
    // the tainted VM's.
    assert_eq!(
        sim.volumes_on("proxy-seeds").await.len(),
        0,
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
    let Some(host) = Host::start(
        "twenty_vms_from_one_template_with_parallelism_ten",
        pvesim::SimConfig::default,
    )
    .await
    else {
        return;
    };
    let pve = host.observer();
    let ws = Workspace::new(host.target.clone());
    let nodes = host
        .facts
        .nodes
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    ws.write_main_tf(&format!(
        r##"{}
provider "proxmox" {{
  seed_storage = "{}"
}}

locals {{
  nodes = [{nodes}]
}}

resource "proxmox_proxy_vm" "fleet" {{
  count     = 20
  name      = "{}fleet-${{count.index}}"
  node      = local.nodes[count.index % length(local.nodes)]
  template  = "{}"
  user_data = "#cloud-config\npackages: [squid]\n"
}}
"##,
        Workspace::preamble(),
        host.facts.seed_storage,
        host.prefix,
        host.facts.template,
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
    let ours = pve.our_vms().await;
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
    assert!(pve.our_vms().await.is_empty());
    assert!(pve.volumes_on(&host.facts.seed_storage).await.is_empty());
}
