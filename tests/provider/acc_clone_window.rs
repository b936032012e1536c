//! Acceptance: PVE answers a clone with its UPID before the worker has written the new
//! VM's temporary config, so for a moment the new VMID does not exist anywhere. When that
//! answer is lost, the provider must still end with exactly one VM and an empty plan.

use crate::support;

use pvesim::{Faults, HttpFault};
use support::{SimClient, Workspace, acceptance_enabled, start_sim};

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_clone_answer_inside_the_window_yields_one_vm() {
    if !acceptance_enabled("a_lost_clone_answer_inside_the_window_yields_one_vm") {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    // A window longer than the provider's first retry delay, and a copy longer than the 1 s
    // a second clone waits for the new VMID's lock: both as on a real cluster.
    config.timings.clone_config_ms = 1500;
    config.timings.task_ms.insert("qmclone".into(), 3000);
    config.faults = Faults {
        http: vec![HttpFault {
            method: Some("POST".into()),
            path_regex: "/qemu/9000/clone$".into(),
            reset: true,
            after_handling: true,
            count: Some(1),
            ..HttpFault::default()
        }],
        ..Faults::default()
    };
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "one" {{
  name     = "window-1"
  node     = "pve1"
  template = "debian-13-proxy"
}}
"#,
        Workspace::preamble()
    ))
    .await;
    let applied = ws.apply().await;
    let vms = sim.our_vms().await;
    assert_eq!(
        vms.len(),
        1,
        "VMs of ours: {vms:#?}\n{}",
        applied.all_text()
    );
    applied.success();
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}
