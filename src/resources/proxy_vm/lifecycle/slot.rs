//! Finding, allocating and adopting the VMID a create works on: the configured one or the
//! name's probe sequence, skipping foreign VMs, adopting this resource's own half-made VM.

use std::time::Duration;

use pve::qemu::VmConfig;
use pve::{Client, ErrorKind, RetryPolicy, retry_idempotent};
use tokio::time::Instant;

use super::super::model::Desired;
use super::{Step, plain};
use crate::context::Configured;
use crate::ownership::{self, Ownership};

/// A VMID to create on: fresh (nothing there) or ours to adopt (on this node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Slot {
    Fresh(u32),
    Adopt(u32, String),
}

/// Holds a VMID reservation for as long as a create uses it.
pub(super) struct Reservation<'a> {
    pub(super) runtime: &'a crate::runtime::Runtime,
    pub(super) vmid: u32,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.runtime.release_vmid(self.vmid);
    }
}

/// Waits until a VM is no longer locked by a clone: a half-made VM has no name or
/// description until the clone writes its config, so ownership is decided afterwards. A
/// clone with `target` ends by moving the config to the target node, so a VM that vanishes
/// from one node is looked for on the others. Returns where it is and its config, or `None`
/// when it is gone (a failed clone cleans up after itself).
pub(super) async fn config_after_clone(
    client: &Client,
    node: &str,
    vmid: u32,
    deadline: Instant,
) -> Step<Option<(String, VmConfig)>> {
    let mut node = node.to_owned();
    let mut delay = Duration::from_millis(100);
    loop {
        match client.node(&node).qemu(vmid).config().await {
            Ok(config) if config.lock().as_deref() == Some("clone") => {}
            Ok(config) => return Ok(Some((node, config))),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                match retry_idempotent(&RetryPolicy::default(), || client.cluster().locate_vm(vmid))
                    .await?
                {
                    Some(entry) if entry.node != node => {
                        node = entry.node;
                        continue;
                    }
                    Some(_) => {}
                    None => return Ok(None),
                }
            }
            Err(e) if e.kind() == ErrorKind::Transient => {}
            Err(e) => return Err(e.into()),
        }
        if Instant::now() + delay > deadline {
            return plain(format!(
                "VM {vmid} on {node} stayed locked by a clone until the timeout"
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// A fresh listing, for decisions a cached one could get wrong: it may predate VMs made a
/// moment ago.
pub(super) async fn fresh_listing(client: &Client) -> Step<Vec<pve::cluster::ClusterVm>> {
    Ok(retry_idempotent(&RetryPolicy::default(), || client.cluster().vm_resources()).await?)
}

pub(super) async fn choose_slot<'a>(
    configured: &'a Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
    deadline: Instant,
) -> Step<(Slot, Reservation<'a>)> {
    let client = &configured.client;
    let runtime = &configured.runtime;
    let candidates = candidate_vmids(configured, desired);
    for vmid in candidates {
        if !runtime.reserve_vmid(vmid) {
            if desired.vmid.is_some() {
                return plain(format!(
                    "VMID {vmid} is also being created by another resource in this run"
                ));
            }
            continue;
        }
        let reservation = Reservation { runtime, vmid };
        let Some(existing) = listing.iter().find(|vm| vm.vmid == vmid) else {
            return Ok((Slot::Fresh(vmid), reservation));
        };
        let found = config_after_clone(client, &existing.node, vmid, deadline).await?;
        let Some((node, config)) = found else {
            // It was a clone that failed and cleaned up: the VMID is free again.
            return Ok((Slot::Fresh(vmid), reservation));
        };
        match ownership::classify(config.description().as_deref(), &desired.name) {
            Ownership::OursForThisName => {
                tracing::info!(vmid, %node, name = %desired.name, "adopting a VM this resource made earlier");
                return Ok((Slot::Adopt(vmid, node), reservation));
            }
            other => {
                if desired.vmid.is_some() {
                    let whose = match other {
                        Ownership::OursForAnotherName(owner) => format!("the proxy VM `{owner}`"),
                        _ => "a VM not managed by this provider".to_owned(),
                    };
                    return plain(format!(
                        "VMID {vmid} is taken by {whose}; it is never modified. Choose another `vmid`, or leave it unset to derive one."
                    ));
                }
                tracing::debug!(
                    vmid,
                    "VMID taken by a VM that is not this resource's; probing on"
                );
            }
        }
    }
    plain(format!(
        "no free VMID left in the provider's range {} for `{}`",
        configured.vmid_range, desired.name
    ))
}

/// The VMIDs a create tries, in order: the configured one, or the name's probe sequence.
pub(super) fn candidate_vmids<'a>(
    configured: &'a Configured,
    desired: &'a Desired,
) -> Box<dyn Iterator<Item = u32> + Send + 'a> {
    match desired.vmid {
        Some(vmid) => Box::new(std::iter::once(vmid)),
        None => Box::new(configured.vmid_range.probe_sequence(&desired.name)),
    }
}

/// The VM this resource made, if one exists: where a create that was cut short left it.
pub async fn locate_own(configured: &Configured, desired: &Desired) -> Option<(u32, String)> {
    let client = &configured.client;
    let listing = client.cluster().vm_resources().await.ok()?;
    let candidates = candidate_vmids(configured, desired);
    for vmid in candidates {
        // Probing stops where a create would have stopped: at the first free VMID.
        let entry = listing.iter().find(|vm| vm.vmid == vmid)?;
        let config = client.node(&entry.node).qemu(vmid).config().await.ok()?;
        let is_clone_in_progress = config.lock().as_deref() == Some("clone");
        // A clone in progress has no description yet, so it may be ours.
        if is_clone_in_progress
            || ownership::classify(config.description().as_deref(), &desired.name)
                == Ownership::OursForThisName
        {
            return Some((vmid, entry.node.clone()));
        }
    }
    None
}
