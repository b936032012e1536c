//! Where a VM is now. A VM moves behind the state's back (an operator's migration, a node
//! drained for maintenance, the HA manager recovering it from a failed node): an update acts
//! on the node the cluster lists it on, never on the state's last-known node.

use super::error::Step;
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
