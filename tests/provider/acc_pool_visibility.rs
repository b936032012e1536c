//! Acceptance: PVE lists a VM's pool in `/cluster/resources` only to a token with
//! `Pool.Audit` on that pool. With it, a VM taken out of its pool behind Terraform's back is
//! drift (the plan replaces it, as `pool` forces replacement); without it, the pool is kept
//! as the state has it, and plans stay empty instead of replacing the VM on every run.

use crate::support;

use support::{SimClient, Workspace, acceptance_enabled, start_sim};

fn pooled_tf() -> String {
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "pooled" {{
  name             = "pooled-0"
  node             = "pve1"
  template         = "debian-13-proxy"
  pool             = "proxies"
  wait_for         = "none"
  # Not waiting, the seed would leave at the next apply (an in-place change, #30); these
  # plans must stay empty.
  seed_lifetime    = "vm"
}}
"#,
        Workspace::preamble()
    )
}

async fn vmid_of(ws: &Workspace) -> String {
    ws.state().await["values"]["root_module"]["resources"][0]["values"]["vmid"]
        .as_u64()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn leaving_the_pool_is_drift_for_a_token_that_sees_pools() {
    if !acceptance_enabled("leaving_the_pool_is_drift_for_a_token_that_sees_pools") {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    // The test itself takes the VM out of its pool, as an administrator would.
    config
        .privileges
        .get_mut("/")
        .unwrap()
        .push("Pool.Allocate".into());
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&pooled_tf()).await;
    ws.apply().await.success();
    ws.assert_plans_empty().await;
    let vmid = vmid_of(&ws).await;
    sim.api(
        "PUT",
        "/pools",
        &[("poolid", "proxies"), ("vms", &vmid), ("delete", "1")],
    )
    .await;
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    assert!(
        plan.stdout().contains("forces replacement") && plan.stdout().contains("pool"),
        "{}",
        plan.stdout()
    );
    ws.destroy().await.success();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_without_pool_audit_keeps_the_pool_and_plans_stay_empty() {
    if !acceptance_enabled("a_token_without_pool_audit_keeps_the_pool_and_plans_stay_empty") {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    for privileges in config.privileges.values_mut() {
        privileges.retain(|p| p != "Pool.Audit");
    }
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&pooled_tf()).await;
    let out = ws.apply().await.success();
    // The plan could not see the pool, and said so instead of refusing it.
    assert!(out.all_text().contains("Pool.Audit"), "{}", out.all_text());
    let vm = sim.our_vms().await;
    assert_eq!(vm.len(), 1);
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}
