//! In-place changes: config, disk growth, power, and the reboot that applies pending changes.

use pve::qemu::GuestInterface;
use tokio::time::Instant;

use super::super::model::Desired;
use super::Step;
use super::steps::{ensure_power, grow_disk, wait_for_address, write_config};
use crate::context::Configured;

/// What an update did that the caller reports.
#[derive(Debug, Default)]
pub struct Updated {
    /// PVE holds some changes until a reboot.
    pub pending_warning: Option<String>,
    /// The VM was (re)started and its agent already reported these interfaces.
    pub interfaces: Option<Vec<GuestInterface>>,
}

/// In-place changes: config, disk growth, power. A VM that had to be started is waited on
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
    write_config(client, node, vmid, desired, None).await?;
    if disk_changed {
        grow_disk(client, node, vmid, desired.disk_gib).await?;
    }
    let mut updated = Updated::default();
    let qemu = client.node(node).qemu(vmid);
    let was_running = qemu.status().await?.is_running();
    let mut rebooting = false;
    if desired.started && was_running {
        let pending: Vec<String> = qemu
            .pending()
            .await?
            .into_iter()
            .filter(|p| p.is_pending())
            .map(|p| p.key)
            .collect();
        if !pending.is_empty() {
            if desired.reboot_if_needed {
                tracing::info!(vmid, ?pending, "rebooting to apply pending changes");
                ensure_power(client, node, vmid, false).await?;
                rebooting = true;
            } else {
                updated.pending_warning = Some(format!(
                    "PVE applies these changes to VM {vmid} at its next boot: {}. Reboot it, or set reboot_if_needed = true to let the provider do it.",
                    pending.join(", ")
                ));
            }
        }
    }
    ensure_power(client, node, vmid, desired.started).await?;
    let booted = desired.started && (!was_running || rebooting);
    if booted && desired.wait_for_address {
        updated.interfaces = Some(wait_for_address(client, node, vmid, deadline).await?);
    }
    Ok(updated)
}
