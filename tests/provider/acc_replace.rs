//! Acceptance: what a provider process learned during an apply follows the changes the apply
//! itself makes. Replacing every VM of a fleet on a cluster with room for only a few more
//! works, because placement sees the VMs the replacement deleted go (before, a listing taken
//! while they existed kept counting them: "not enough memory" after two creates).

use crate::support;

use serde_json::Value;
use support::{SimClient, Workspace, acceptance_enabled, start_sim};

const GIB: u64 = 1 << 30;

fn fleet_tf(count: usize, prefix: &str) -> String {
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "fleet" {{
  count            = {count}
  name             = "{prefix}-${{count.index}}"
  template         = "debian-13-proxy"
  node_candidates  = ["pve1"]
  memory           = 1024
  wait_for         = "none"
  # Not waiting, the seeds would leave at the next apply (an in-place change): this test
  # is about replacements, whose plans must otherwise be empty.
  seed_lifetime    = "vm"
}}

# Made in the same apply as the replacement: its create lists the cluster while the old
# VMs still exist, so that listing is what the replacement's creates start from.
resource "proxmox_proxy_vm" "canary" {{
  count            = {canary}
  name             = "canary"
  template         = "debian-13-proxy"
  node_candidates  = ["pve1"]
  memory           = 512
  wait_for         = "none"
  # Not waiting, the seeds would leave at the next apply (an in-place change): this test
  # is about replacements, whose plans must otherwise be empty.
  seed_lifetime    = "vm"
}}
"#,
        Workspace::preamble(),
        canary = usize::from(prefix == "green"),
    )
}

/// Memory (bytes) the VMs already on `node` take, as placement counts it.
fn used_on(state: &Value, node: &str) -> u64 {
    state["vms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| vm["node"] == node && vm["config"]["template"].as_str() != Some("1"))
        .map(|vm| {
            vm["config"]["memory"]
                .as_str()
                .and_then(|m| m.parse::<u64>().ok())
                .or_else(|| vm["config"]["memory"].as_u64())
                .unwrap_or(0)
                << 20
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn replacing_10_vms_on_a_cluster_with_memory_for_12_succeeds() {
    if !acceptance_enabled("replacing_10_vms_on_a_cluster_with_memory_for_12_succeeds") {
        return;
    }
    // Measure what the default world already uses on pve1, then give pve1 room for exactly
    // 12 VMs of 1 GiB more.
    let (sim_probe, target) = start_sim(pvesim::SimConfig::default()).await;
    let used = used_on(&SimClient::new(&target).state().await, "pve1");
    drop(sim_probe);
    let mut config = pvesim::SimConfig::default();
    for node in &mut config.nodes {
        if node.name == "pve1" {
            // 12 VMs of 1 GiB, the canary, and a little to spare.
            node.memory_bytes = used + 12 * GIB + GIB / 2 + GIB / 4;
        }
    }
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet_tf(10, "blue")).await;
    ws.apply().await.success();
    assert_eq!(sim.our_vms().await.len(), 10);

    // New names replace all 10, on other VMIDs (derived from the names): each create must
    // see the VMs the replacement deleted go, or the node looks full after two.
    // Two at a time, so most creates come after the process first listed the cluster.
    ws.write_main_tf(&fleet_tf(10, "green"));
    let out = ws
        .terraform(&[
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-parallelism=2",
        ])
        .await
        .success();
    assert!(
        out.stdout().contains("11 added, 0 changed, 10 destroyed"),
        "{}",
        out.stdout()
    );
    assert_eq!(sim.our_vms().await.len(), 11);
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}
