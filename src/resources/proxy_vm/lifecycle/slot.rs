//! Finding, allocating and adopting the VMID a create works on: the configured one or the
//! name's probe sequence in its fleet, skipping foreign VMs and other names' VMs, resuming an
//! unfinished create of this name, and refusing (with an import hint) a finished one.

use std::time::Duration;

use pve::qemu::VmConfig;
use pve::{Backoff, Client, ErrorKind, RetryPolicy, retry_idempotent};
use tokio::time::Instant;

use super::super::model::{Desired, seed_hash};
use super::error::{Step, StepError, unworkable};
use crate::context::Configured;
use crate::ownership::{self, Mark, Ownership, Phase};

/// A VMID to create on: fresh (nothing there) or ours to adopt (on this node). An adopted
/// VM that this working directory's own killed run finished carries that run's create token,
/// which the resumed create takes over (see `crate::journal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Slot {
    Fresh(u32),
    Adopt {
        vmid: u32,
        node: String,
        /// The create token of this directory's finished create that Terraform never
        /// stored, which the resumed create takes over.
        resumed_token: Option<String>,
    },
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

/// How often a VM's node is found unreachable before a create stops: a 595 can be a moment's
/// hiccup of the cluster's proxy, a node that is down stays down.
const UNREACHABLE_LOOKS: u32 = 4;

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
    let mut unreachable = 0;
    loop {
        match client.node(&node).qemu(vmid).config().await {
            // The node is down: its VM's mark cannot be read however long the create waits,
            // and a VM of this name may be there, so nothing is made beside it.
            Err(e) if e.status() == Some(595) => {
                unreachable += 1;
                if unreachable == UNREACHABLE_LOOKS {
                    return unworkable(format!(
                        "VMID {vmid} holds a VM on node {node}, which PVE cannot reach (HTTP \
                         595: the node is down): whose VM it is cannot be read, and it may be \
                         this name's, so no VM was created. Bring the node back, then apply \
                         again."
                    ));
                }
            }
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
            return unworkable(format!(
                "VM {vmid} on {node} stayed locked by a clone until the timeout"
            ));
        }
    }
}

/// The error for a finished VM of ours with this name: it belongs to another state (or to
/// one that was lost), so it is never taken over; the message says how to import it.
pub(super) fn already_made(vmid: u32, node: &str, desired: &Desired) -> StepError {
    StepError::AlreadyMade {
        vmid,
        node: node.to_owned(),
        name: desired.name.clone(),
        fleet: desired.fleet.clone(),
    }
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
    if desired.vmid.is_none()
        && let Some(own) = own_create_in_journal(configured, desired, listing, deadline).await?
    {
        return Ok(own);
    }
    let runtime = &configured.runtime;
    for vmid in candidate_vmids(configured, desired) {
        if !runtime.reserve_vmid(vmid) {
            if desired.vmid.is_some() {
                return unworkable(format!(
                    "VMID {vmid} is also being created by another resource in this run"
                ));
            }
            continue;
        }
        let reservation = Reservation { runtime, vmid };
        let Some((node, config)) = taken_vm(configured, desired, listing, vmid, deadline).await?
        else {
            return Ok((Slot::Fresh(vmid), reservation));
        };
        if let Some(slot) = judge_taken(configured, desired, vmid, node, &config)? {
            return Ok((slot, reservation));
        }
    }
    Err(StepError::NoFreeVmid {
        range: configured.vmid_range.to_string(),
        name: desired.name.clone(),
    })
}

/// The VM at `vmid` once any clone onto it ended: where it is and its config, or `None` when
/// the VMID is free. Whether it is taken is asked of PVE for that VMID alone; `listing`
/// (possibly stale) only guesses the node of a taken one, and a wrong guess is corrected
/// by a fresh look.
async fn taken_vm(
    configured: &Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
    vmid: u32,
    deadline: Instant,
) -> Step<Option<(String, VmConfig)>> {
    let client = &configured.client;
    if vmid_is_free(client, vmid).await? {
        return Ok(None);
    }
    // The listing may predate the VM; a create not placed yet has no node to guess, so
    // the VMID itself is looked up.
    let listed = listing
        .iter()
        .find(|vm| vm.vmid == vmid)
        .map(|vm| vm.node.clone());
    let node = match listed {
        Some(node) => node,
        None if !desired.node.is_empty() => desired.node.clone(),
        None => {
            match retry_idempotent(&RetryPolicy::default(), || client.cluster().locate_vm(vmid))
                .await?
            {
                Some(entry) => entry.node,
                // Gone since the probe: free again.
                None => return Ok(None),
            }
        }
    };
    // A VM being cloned has no mark yet: its ownership shows once the clone ends. `None`:
    // a clone that failed and cleaned up, so the VMID is free again.
    config_after_clone(client, &node, vmid, deadline).await
}

/// This working directory's own create of the name that Terraform never stored, found where
/// the journal says it cloned: an unfinished create, or a finished one the journal names
/// with its mark. Looked for before the probe sequence, which may stop before it: at a
/// VMID freed since it was cloned, or at another state's VM of the name that looked like
/// someone else's when it was (its mark edited away then; fuzzer seed 11150). Resumed, as
/// the run that was killed would have finished it.
async fn own_create_in_journal<'a>(
    configured: &'a Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
    deadline: Instant,
) -> Step<Option<(Slot, Reservation<'a>)>> {
    let runtime = &configured.runtime;
    let journal = &configured.journal;
    let (fleet, name) = (&desired.fleet, &desired.name);
    for (token, vmid) in journal.unconfirmed_vms(fleet, name) {
        if token == desired.create_token || !runtime.reserve_vmid(vmid) {
            continue;
        }
        let reservation = Reservation { runtime, vmid };
        let Some((node, config)) = taken_vm(configured, desired, listing, vmid, deadline).await?
        else {
            continue;
        };
        let description = config.description();
        let Ownership::OursForThisName(mark) =
            ownership::classify(description.as_deref(), name, fleet)
        else {
            continue;
        };
        // The VM a plan of this directory replaces is never the replacement.
        let resumable = mark.phase != Phase::Deleting
            && mark.create_token.as_deref() == Some(token.as_str())
            && !journal.is_replaced(fleet, name, &token)
            && journal.is_unconfirmed_for(fleet, name, &token, vmid, &mark.render());
        if !resumable {
            continue;
        }
        tracing::info!(vmid, %node, %name, "resuming this working directory's own create \
            where the journal says it cloned");
        let resumed_token = match mark.phase {
            Phase::Done => Some(token),
            _ => own_killed_create(configured, desired, vmid, &mark),
        };
        let slot = Slot::Adopt {
            vmid,
            node,
            resumed_token,
        };
        return Ok(Some((slot, reservation)));
    }
    Ok(None)
}

/// Whose the taken VMID's VM is, for this create: an unfinished create of this name to
/// resume, this directory's finished create Terraform never stored, the VM a
/// `create_before_destroy` plan of this directory replaces (`None`: probe on beside it), a
/// VM of another name or foreign (`None`: probe on, or refused for an explicit `vmid`), or
/// a finished VM of this name (refused: another state's).
fn judge_taken(
    configured: &Configured,
    desired: &Desired,
    vmid: u32,
    node: String,
    config: &VmConfig,
) -> Step<Option<Slot>> {
    match ownership::classify(
        config.description().as_deref(),
        &desired.name,
        &desired.fleet,
    ) {
        Ownership::OursForThisName(mark) if mark.phase == Phase::Creating => {
            tracing::info!(vmid, %node, name = %desired.name, "resuming an unfinished create \
                of this name");
            return Ok(Some(Slot::Adopt {
                vmid,
                node,
                resumed_token: own_killed_create(configured, desired, vmid, &mark),
            }));
        }
        // Its owner's destroy has begun: never adopted, and not shadowed by a second VM
        // of the name while it is still there.
        Ownership::OursForThisName(mark) if mark.phase == Phase::Deleting => {
            return Err(StepError::BeingDestroyed {
                vmid,
                node,
                name: desired.name.clone(),
            });
        }
        Ownership::OursForThisName(mark) => {
            let journal = &configured.journal;
            let (fleet, name) = (&desired.fleet, &desired.name);
            match mark.create_token {
                // This directory's create that finished after Terraform last heard of
                // it (killed before it stored the VM): resumed, not refused.
                Some(token)
                    if journal.is_unconfirmed_for(fleet, name, &token, vmid, &mark.render()) =>
                {
                    tracing::info!(vmid, %node, %name, "resuming this working directory's \
                        finished create that Terraform never stored");
                    return Ok(Some(Slot::Adopt {
                        vmid,
                        node,
                        resumed_token: Some(token),
                    }));
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
                return unworkable(format!(
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
    Ok(None)
}

/// The token of an unfinished create this working directory ran (its journal still holds
/// the token as one Terraform never stored) with the very content this create would seed
/// (the mark's keyed seed hash): resumed under that token, the seed it may have booted is
/// this create's own. Any other unfinished create is another attempt's.
fn own_killed_create(
    configured: &Configured,
    desired: &Desired,
    vmid: u32,
    mark: &Mark,
) -> Option<String> {
    let token = mark.create_token.as_deref()?;
    let same_content = mark.seed_hash.as_deref()
        == Some(&seed_hash(
            Some(token),
            desired.user_data.as_deref(),
            desired.network_config.as_deref(),
        ));
    let ours = configured.journal.is_unconfirmed_for(
        &desired.fleet,
        &desired.name,
        token,
        vmid,
        &mark.render(),
    );
    (same_content && ours).then(|| token.to_owned())
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
