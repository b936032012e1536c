//! Finding, allocating and adopting the VMID a create works on: the configured one or the
//! name's probe sequence in its fleet, skipping foreign VMs and other names' VMs, resuming an
//! unfinished create of this name, and refusing (with an import hint) a finished one.

use std::time::Duration;

use pve::qemu::VmConfig;
use pve::{Backoff, Client, ErrorKind, RetryPolicy, retry_idempotent};
use tokio::time::Instant;

use super::super::model::Desired;
use super::{Step, StepError, failed};
use crate::context::Configured;
use crate::ownership::{self, Ownership, Phase};

/// A VMID to create on: fresh (nothing there) or ours to adopt (on this node). An adopted
/// VM that this working directory's own killed run finished carries that run's create token,
/// which the resumed create takes over (see `crate::journal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Slot {
    Fresh(u32),
    Adopt(u32, String, Option<String>),
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
    let mut polls = Backoff::new(Duration::from_millis(100), Duration::from_secs(2), deadline);
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
            Err(e) if e.kind() == ErrorKind::Transient || e.is_unexplained_server_error() => {}
            Err(e) => return Err(e.into()),
        }
        if !polls.pause().await {
            return failed(format!(
                "VM {vmid} on {node} stayed locked by a clone until the timeout"
            ));
        }
    }
}

/// The error for a finished VM of ours with this name: it belongs to another state (or to
/// one that was lost), so it is never taken over; the message says how to import it.
pub(super) fn already_made(vmid: u32, node: &str, desired: &Desired) -> StepError {
    let fleet = if desired.fleet.is_empty() {
        String::new()
    } else {
        format!(" in fleet `{}`", desired.fleet)
    };
    StepError::AlreadyMade(format!(
        "a proxy VM named `{name}`{fleet} already exists: VM {vmid} on node {node}, finished by \
        another Terraform state (another working directory, workspace or team) or by an earlier \
        run whose state was lost. It is never taken over, and nothing was changed.\n\nTo manage \
        that VM from this configuration, import it (ADDRESS is this resource's address, e.g. \
        proxmox_proxy_vm.edge[0]):\n  terraform import 'ADDRESS' {node}/{vmid}\nor with an import \
        block:\n  import {{\n    to = ADDRESS\n    id = \"{node}/{vmid}\"\n  }}\nOtherwise choose \
        another `name`, or give each configuration its own provider `fleet` (e.g. fleet = \
        terraform.workspace).",
        name = desired.name,
    ))
}

/// Whether nothing is at `vmid`, asked of PVE for that one VMID (`GET /cluster/nextid?vmid=N`),
/// so probing costs the same however big the cluster is.
async fn vmid_is_free(client: &Client, vmid: u32) -> Step<bool> {
    match retry_idempotent(&RetryPolicy::default(), || {
        client.cluster().next_id(Some(vmid))
    })
    .await
    {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The first VMID of the name's candidates that is free, or holds an unfinished create of this
/// name to resume. Each candidate is asked of PVE on its own (whether it is taken); only a
/// taken one has its config read, to classify whose it is. `listing` is a possibly stale
/// listing, used only to guess the node of a taken VMID (a wrong guess is corrected by a
/// fresh look).
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
                return failed(format!(
                    "VMID {vmid} is also being created by another resource in this run"
                ));
            }
            continue;
        }
        let reservation = Reservation { runtime, vmid };
        if vmid_is_free(client, vmid).await? {
            return Ok((Slot::Fresh(vmid), reservation));
        }
        let node = listing
            .iter()
            .find(|vm| vm.vmid == vmid)
            .map_or(desired.node.as_str(), |vm| vm.node.as_str());
        // A VM being cloned has no mark yet: its ownership shows once the clone ends.
        let found = config_after_clone(client, node, vmid, deadline).await?;
        let Some((node, config)) = found else {
            // It was a clone that failed and cleaned up: the VMID is free again.
            return Ok((Slot::Fresh(vmid), reservation));
        };
        match ownership::classify(
            config.description().as_deref(),
            &desired.name,
            &desired.fleet,
        ) {
            Ownership::OursForThisName(mark) if mark.phase == Phase::Creating => {
                tracing::info!(vmid, %node, name = %desired.name, "resuming an unfinished create \
                    of this name");
                return Ok((Slot::Adopt(vmid, node, None), reservation));
            }
            // Its owner's destroy has begun: never adopted, and not shadowed by a second VM
            // of the name while it is still there.
            Ownership::OursForThisName(mark) if mark.phase == Phase::Deleting => {
                return failed(format!(
                    "VM {vmid} on {node}, named `{}`, is being destroyed by the state that owns \
                    it; nothing was changed. Apply again once that destroy has finished.",
                    desired.name
                ));
            }
            Ownership::OursForThisName(mark) => {
                let journal = &configured.journal;
                let (fleet, name) = (&desired.fleet, &desired.name);
                match mark.create_token {
                    // This directory's create that finished after Terraform last heard of
                    // it (killed before it stored the VM): resumed, not refused.
                    Some(token) if journal.is_unconfirmed(fleet, name, &token) => {
                        tracing::info!(vmid, %node, %name, "resuming this working directory's \
                            finished create that Terraform never stored");
                        return Ok((Slot::Adopt(vmid, node, Some(token)), reservation));
                    }
                    // The VM a plan of this directory replaces (create_before_destroy): the
                    // replacement is made beside it, on the next VMID of the name.
                    Some(token)
                        if desired.vmid.is_none() && journal.is_replaced(fleet, name, &token) =>
                    {
                        tracing::info!(vmid, %node, %name, "the VM this create replaces; creating \
                            beside it");
                    }
                    _ => return Err(already_made(vmid, &node, desired)),
                }
            }
            other => {
                if desired.vmid.is_some() {
                    let whose = match other {
                        Ownership::OursForAnother(mark) => {
                            format!("the proxy VM {}", ownership::describe_owner(&mark))
                        }
                        _ => "a VM not managed by this provider".to_owned(),
                    };
                    return failed(format!(
                        "VMID {vmid} is taken by {whose}; it is never modified. Choose another \
                        `vmid`, or leave it unset to derive one."
                    ));
                }
                tracing::debug!(
                    vmid,
                    "VMID taken by a VM that is not this resource's; probing on"
                );
            }
        }
    }
    Err(StepError::NoFreeVmid(format!(
        "no free VMID left in the provider's range {} for `{}`",
        configured.vmid_range, desired.name
    )))
}

/// The VMIDs a create tries, in order: the configured one, or the name's probe sequence in
/// its fleet.
fn candidate_vmids<'a>(
    configured: &'a Configured,
    desired: &'a Desired,
) -> Box<dyn Iterator<Item = u32> + Send + 'a> {
    match desired.vmid {
        Some(vmid) => Box::new(std::iter::once(vmid)),
        None => Box::new(
            configured
                .vmid_range
                .probe_sequence_in_fleet(&desired.fleet, &desired.name),
        ),
    }
}
