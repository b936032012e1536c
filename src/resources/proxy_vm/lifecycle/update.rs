//! In-place changes: config, disk growth, power, and the reboot that applies pending changes,
//! all through the [`OwnedVm`] of the state's create token: a VM that is no longer this
//! instance's (replaced at its VMID by another state's) is never written to.

use pve::qemu::GuestInterface;
use tokio::time::Instant;

use super::super::model::Desired;
use super::configure::write_config;
use super::disk::grow_disk;
use super::error::Step;
use super::expected::Expected;
use super::guest::Guest;
use super::ha::ensure as ensure_ha;
use super::operation::Operation;
use super::owned::OwnedVm;
use super::power::{ensure_power, reboot};
use super::ready::wait_for_address;
use crate::context::Configured;

/// What an update did that the caller reports.
#[derive(Debug, Default)]
pub struct Updated {
    /// Where the VM is: the node the update was given, or where it followed the VM to.
    pub node: String,
    /// Config keys PVE holds until the next boot (left pending: no reboot was allowed).
    pub pending: Vec<String>,
    /// The VM was (re)started and its agent already reported these interfaces.
    pub interfaces: Option<Vec<GuestInterface>>,
}

/// In-place changes: config, disk growth, power, and the reboot that applies pending
/// changes when the user allows it. A VM that had to be started or rebooted is waited on
/// like a created one, so its address is known when the apply ends.
///
/// The node comes from a listing the whole apply shares, so the VM may have moved since (the
/// HA manager's rebalancer, an operator's migration): the handle follows it (see
/// `OwnedVm::followed`), and the update says where it ended.
pub async fn update(
    configured: &Configured,
    node: &str,
    vmid: u32,
    expected: Expected<'_>,
    desired: &Desired,
    disk_changed: bool,
    deadline: Instant,
) -> Step<Updated> {
    let vm = OwnedVm::new(
        Operation::new(&configured.client, deadline),
        node,
        vmid,
        expected,
    );
    // Checked before anything else (its read checks the mark), so a VM that is not ours is
    // not even read for status. A destroy interrupted after its mark: this apply keeps the
    // VM, so it is marked finished again.
    vm.unmark_deleting().await?;
    write_config(&vm, desired, None, false).await?;
    if disk_changed {
        grow_disk(&vm, desired.disk_gib).await?;
    }
    // Before the power steps: a state the HA manager keeps must not undo them.
    ensure_ha(&vm, desired, false).await?;
    let mut updated = Updated::default();
    let qemu = vm.qemu();
    let was_running = vm.op().retry(|| qemu.status()).await?.is_running();
    let mut rebooted = false;
    if desired.started && was_running {
        let pending = vm.op().retry(|| qemu.pending_view()).await?.pending_keys;
        if !pending.is_empty() {
            if desired.reboot_if_needed {
                tracing::info!(vmid, ?pending, "rebooting to apply pending changes");
                reboot(&vm).await?;
                rebooted = true;
            } else {
                updated.pending = pending;
            }
        }
    }
    ensure_power(&vm, desired.started).await?;
    let booted = desired.started && (!was_running || rebooted);
    if booted && desired.wait_for.waits_for_address() {
        updated.interfaces =
            Some(wait_for_address(Guest::Owned(&vm), &desired.template, deadline).await?);
    }
    updated.node = vm.node().to_owned();
    Ok(updated)
}
