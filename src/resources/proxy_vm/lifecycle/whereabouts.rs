//! Where a VM is now. A VM moves behind the state's back (an operator's migration, a node
//! drained for maintenance, the HA manager recovering it from a failed node): an update acts
//! on the node the cluster lists it on, never on the state's last-known node.

use pve::Client;
use pve::qemu::GuestInterface;

use super::super::model::Observed;
use super::error::{Step, StepError};
use super::observe::observe_with;
use super::operation;
use crate::context::Configured;

/// How many moves between nodes one look for a VM follows: a VM still not where each newer
/// listing put it keeps moving (or the listing and the node disagree), and the look stops.
pub(super) const MOVES_FOLLOWED: usize = 3;

/// The node the cluster listing (fetched once per provider process, as delete's) shows VM
/// `vmid` on, else `last_known` (a VM not listed is looked for there, and its absence
/// reported as today).
pub async fn node_now(configured: &Configured, vmid: u32, last_known: &str) -> Step<String> {
    let listing = configured
        .runtime
        .cluster_vms_once(&configured.client, false)
        .await?;
    let listed = listing.iter().find(|vm| vm.vmid == vmid);
    Ok(match listed {
        Some(vm) if vm.node != last_known => {
            tracing::info!(vmid, from = last_known, to = %vm.node, "the VM moved: following it");
            vm.node.clone()
        }
        _ => last_known.to_owned(),
    })
}

/// [`observe_with`] where the VM is now: a VM PVE no longer knows on `node` (the HA manager
/// or an operator moved it while a create or update finished with it) is looked for in a
/// fresh cluster listing and observed there. `None` when the cluster lists it nowhere else.
pub async fn observe_where_it_is(
    client: &Client,
    node: &str,
    vmid: u32,
    pool: Option<String>,
    reported: Option<Vec<GuestInterface>>,
) -> Step<Option<Observed>> {
    let mut node = node.to_owned();
    for _ in 0..=MOVES_FOLLOWED {
        let observed = observe_with(client, &node, vmid, pool.clone(), reported.clone()).await?;
        if observed.is_some() {
            return Ok(observed);
        }
        let cluster = client.cluster();
        let listed = operation::read(|| cluster.locate_vm(vmid)).await?;
        match listed.map(|vm| vm.node).filter(|now| *now != node) {
            Some(now) => {
                tracing::info!(vmid, from = %node, to = %now, "the VM moved: following it");
                node = now;
            }
            None => return Ok(None),
        }
    }
    Err(kept_moving(vmid, &node))
}

/// The error of an operation that followed VM `vmid` [`MOVES_FOLLOWED`] times and finds it
/// moved again, to `now`.
pub(super) fn kept_moving(vmid: u32, now: &str) -> StepError {
    StepError::Unworkable(format!(
        "VM {vmid} moved between nodes {MOVES_FOLLOWED} times while this operation worked on \
         it (it is now on {now}); run the command again once it settles"
    ))
}
