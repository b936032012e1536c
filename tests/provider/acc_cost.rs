//! Acceptance (#42): a fleet cloned in parallel onto one storage whose allocations PVE
//! serialises under one lock completes without an error, though PVE refuses the clones that
//! wait on that lock longer than its 10 s (pve-storage `Plugin.pm` `cluster_lock_storage`;
//! pve-common `Tools.pm` `lock_file_full`: "can't lock file
//! '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout", CAPMOX#389). qemu-server
//! `API2/Qemu.pm` `clone_vm` frees what a refused clone allocated and unlinks its temporary
//! config before its task fails, so the provider sends it again; and it learns from the
//! refusals how many clones the storage serves in time, so the refusals stop instead of
//! coming back with every round of retries.

use crate::support;

use support::{SimClient, Workspace, simulator_only, start_sim};

const VMS: usize = 20;
/// One allocation every 2 s: PVE's 10 s lock wait serves about five clones, so of twenty
/// sent at once some fifteen are refused, and fifteen sent again at once would be refused
/// ten at a time.
const ALLOC_MS: u64 = 2000;

fn fleet_tf() -> String {
    format!(
        r##"{preamble}
provider "proxmox" {{
  seed_storage  = "proxy-seeds"
  clone_storage = "local-lvm"
}}

resource "proxmox_proxy_vm" "fleet" {{
  count     = {VMS}
  name      = "cost-${{count.index}}"
  node      = "pve1"
  template  = "debian-13-proxy"
  cores     = 1
  memory    = 512
  bridge    = "vmbr0"
  user_data = "#cloud-config\npackages: [haproxy]\n"
}}
"##,
        preamble = Workspace::preamble(),
    )
}

fn costly_sim() -> pvesim::SimConfig {
    let profile: pvesim::CostProfile = serde_json::from_value(serde_json::json!({
        // The template's 4 GiB copied in a second, so the allocations are what queues.
        "storage": {"local-lvm": {"alloc_ms": ALLOC_MS, "linked_clone_ms": ALLOC_MS,
                                  "copy_mib_per_s": 4096}}
    }))
    .unwrap();
    pvesim::SimConfig {
        cost_profile: Some(profile),
        ..pvesim::SimConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_on_one_storage_absorbs_its_lock_refusals() {
    if !simulator_only(
        "a_fleet_on_one_storage_absorbs_its_lock_refusals",
        "pve-sim's cost profile (storage lock timeouts) and its /_sim/costs",
    ) {
        return;
    }
    let (sim_handle, target) = start_sim(costly_sim()).await;
    let admin = pvesim::testing::Admin::new(&sim_handle);
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet_tf()).await;
    let applied = ws
        .terraform(&[
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            &format!("-parallelism={VMS}"),
        ])
        .await;
    let costs = admin.costs().await;
    let lock = costs
        .storage_locks
        .iter()
        .find(|l| l.storage == "local-lvm")
        .expect("the clones took local-lvm's lock");
    let refusals: Vec<_> = costs
        .lock_timeouts
        .iter()
        .filter(|t| t.lock.ends_with("pve-storage-local-lvm"))
        .collect();
    eprintln!(
        "{} allocations, {} refusals, lock held {} ms, waited {} ms",
        lock.allocations,
        refusals.len(),
        lock.held_ms,
        lock.wait_ms
    );
    eprintln!(
        "refused at (ms): {:?}",
        refusals.iter().map(|r| r.at_ms).collect::<Vec<_>>()
    );
    let text = applied.all_text();
    applied.success();
    assert!(
        !text.contains("got timeout"),
        "a refusal reached the user:\n{text}"
    );
    // Met: PVE did refuse clones (else this test proves nothing) …
    assert!(
        !refusals.is_empty(),
        "no clone was refused: the storage serves this fleet in time: {costs:?}"
    );
    // … and absorbed: every VM made once, none half-made, and the refusals stopped once
    // the provider knew the storage's pace, instead of returning with each round of retries
    // (measured: 14 refusals, all in the first overload; with the gates taken out, 24, in
    // three rounds: 14, 8, 2).
    assert_eq!(lock.allocations as usize, VMS, "one allocation per VM");
    assert!(
        refusals.len() <= VMS,
        "{} refusals for {VMS} clones: the retries were not paced: {refusals:#?}",
        refusals.len()
    );
    let vms = sim.our_vms().await;
    assert_eq!(vms.len(), VMS, "{vms:#?}");
    let state = sim.state().await;
    let locked: Vec<_> = state["vms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| vm["config"]["lock"].is_string())
        .collect();
    assert!(locked.is_empty(), "half-made VMs: {locked:#?}");
    ws.assert_plans_empty().await;
}
