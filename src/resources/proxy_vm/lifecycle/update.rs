//! In-place changes: config, disk growth, power, and the reboot that applies pending changes.

use pve::qemu::GuestInterface;
use tokio::time::Instant;

use super::super::model::Desired;
use pve::retry_idempotent;

use super::steps::{ensure_power, grow_disk, reboot, wait_for_address, write_config};
use super::{Step, patient};
use crate::context::Configured;

/// What an update did that the caller reports.
#[derive(Debug, Default)]
pub struct Updated {
    /// Config keys PVE holds until the next boot (left pending: no reboot was allowed).
    pub pending: Vec<String>,
    /// The VM was (re)started and its agent already reported these interfaces.
    pub interfaces: Option<Vec<GuestInterface>>,
}

/// In-place changes: config, disk growth, power, and the reboot that applies pending
/// changes when the user allows it. A VM that had to be started or rebooted is waited on
/// like a created one, so its address is known when the apply ends.
pub async fn update(
    configured: &Configured,
    node: &str,
    vmid: u32,
    desired: &Desired,
    disk_changed: bool,
    deadline: Instant,
) -> Step<Updated> {
    let client = &configured.client;
    write_config(client, node, vmid, desired, deadline).await?;
    if disk_changed {
        grow_disk(client, node, vmid, desired.disk_gib, deadline).await?;
    }
    let mut updated = Updated::default();
    let qemu = client.node(node).qemu(vmid);
    let was_running = retry_idempotent(&patient(deadline), || qemu.status())
        .await?
        .is_running();
    let mut rebooted = false;
    if desired.started && was_running {
        let pending = retry_idempotent(&patient(deadline), || qemu.pending_view())
            .await?
            .pending_keys;
        if !pending.is_empty() {
            if desired.reboot_if_needed {
                tracing::info!(vmid, ?pending, "rebooting to apply pending changes");
                reboot(client, node, vmid, deadline).await?;
                rebooted = true;
            } else {
                updated.pending = pending;
            }
        }
    }
    ensure_power(client, node, vmid, desired.started, deadline).await?;
    let booted = desired.started && (!was_running || rebooted);
    if booted && desired.wait_for_address {
        updated.interfaces = Some(wait_for_address(client, node, vmid, deadline).await?);
    }
    Ok(updated)
}
