//! What the cluster holds for a create's fleet and name, the I/O of the VMID choice: every
//! VM the whole-cluster listing names with the name, and every VMID this directory's journal
//! says a create of the name cloned onto, each read for its mark once any clone onto it
//! ended (#38: a VM of the name beyond a freed VMID is found too); and, for a new VM, the
//! first free VMID of the name's probe sequence. `decide` judges what it finds.

use std::collections::BTreeMap;
use std::time::Duration;

use pve::qemu::VmConfig;
use pve::{Backoff, Client, ErrorKind};
use tokio::time::Instant;

use super::super::super::model::{Desired, seed_hash};
use super::super::error::{Step, StepError, unworkable};
use super::super::operation;
use super::Reservation;
use super::decide::{Found, NameFacts};
use crate::context::Configured;
use crate::ownership::{self, Ownership};

/// How often a VM's node is found unreachable before a create stops: a 595 can be a moment's
/// hiccup of the cluster's proxy, a node that is down stays down.
const UNREACHABLE_LOOKS: u32 = 4;

/// Every VM of the name the cluster holds, wherever it is. `listing` (the process's
/// whole-cluster listing) names the candidates; the journal adds the VMIDs its creates of the
/// name cloned onto (a VM the listing predates). Each candidate's config is read once.
pub(super) async fn survey(
    configured: &Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
    deadline: Instant,
) -> Step<NameFacts> {
    let mut candidates: BTreeMap<u32, Option<String>> = listing
        .iter()
        .filter(|vm| !vm.template && vm.name.as_deref() == Some(desired.name.as_str()))
        .map(|vm| (vm.vmid, Some(vm.node.clone())))
        .collect();
    for (_, vmid) in configured
        .journal
        .unconfirmed_vms(&desired.fleet, &desired.name)
    {
        candidates
            .entry(vmid)
            .or_insert_with(|| listed_node(listing, vmid));
    }
    let mut facts = NameFacts {
        found: Vec::new(),
        explicit_vmid: desired.vmid,
    };
    for (vmid, node) in candidates {
        if let Some((node, config)) = taken_at(configured, desired, node, vmid, deadline).await? {
            facts
                .found
                .extend(judge(configured, desired, vmid, node, &config));
        }
    }
    Ok(facts)
}

/// What the name's probe sequence (or the configured `vmid`) offers a new VM.
pub(super) enum Probed<'a> {
    /// A free VMID, reserved in this process.
    Free(u32, Reservation<'a>),
    /// A VM of the name the survey did not know (made since the listing): decide again.
    Named(Found),
}

/// The first free VMID of the name's candidates, skipping the VMs already judged and VMs of
/// other names or foreign ones (refused for a configured `vmid`: it is never modified).
pub(super) async fn first_free<'a>(
    configured: &'a Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
    facts: &NameFacts,
    deadline: Instant,
) -> Step<Probed<'a>> {
    let runtime = &configured.runtime;
    for vmid in candidate_vmids(configured, desired) {
        if facts.found.iter().any(|found| found.vmid == vmid) {
            continue;
        }
        if !runtime.reserve_vmid(vmid) {
            if desired.vmid.is_some() {
                return unworkable(format!(
                    "VMID {vmid} is also being created by another resource in this run"
                ));
            }
            continue;
        }
        let reservation = Reservation { runtime, vmid };
        let node = listed_node(listing, vmid);
        let Some((node, config)) = taken_at(configured, desired, node, vmid, deadline).await?
        else {
            return Ok(Probed::Free(vmid, reservation));
        };
        if let Some(found) = judge(configured, desired, vmid, node, &config) {
            return Ok(Probed::Named(found));
        }
        if desired.vmid.is_some() {
            return unworkable(taken_text(vmid, desired, &config));
        }
        tracing::debug!(
            vmid,
            "VMID taken by a VM that is not this resource's; probing on"
        );
    }
    Err(StepError::NoFreeVmid {
        range: configured.vmid_range.to_string(),
        name: desired.name.clone(),
    })
}

/// The refusal of a configured `vmid` that another VM holds.
fn taken_text(vmid: u32, desired: &Desired, config: &VmConfig) -> String {
    let description = config.description();
    let whose = match ownership::classify(description.as_deref(), &desired.name, &desired.fleet) {
        Ownership::OursForAnother(mark) | Ownership::OursForThisName(mark) => {
            format!("the proxy VM {}", ownership::describe_owner(&mark))
        }
        Ownership::Foreign => "a VM not managed by this provider".to_owned(),
    };
    format!(
        "VMID {vmid} is taken by {whose}; it is never modified. Choose another `vmid`, or \
         leave it unset to derive one."
    )
}

/// The VM at `vmid` as this create sees it, when its mark names this fleet and name.
fn judge(
    configured: &Configured,
    desired: &Desired,
    vmid: u32,
    node: String,
    config: &VmConfig,
) -> Option<Found> {
    let (fleet, name) = (&desired.fleet, &desired.name);
    let Ownership::OursForThisName(mark) =
        ownership::classify(config.description().as_deref(), name, fleet)
    else {
        return None;
    };
    let journal = &configured.journal;
    let token = mark.create_token.clone();
    let fingerprint = mark.render();
    // This attempt's own token in the journal is this create, not a killed one.
    let own_unconfirmed = token.as_deref().is_some_and(|token| {
        token != desired.create_token
            && journal.is_unconfirmed_for(fleet, name, token, vmid, &fingerprint)
    });
    let replaced = token
        .as_deref()
        .is_some_and(|token| journal.is_replaced(fleet, name, token));
    let same_content = token.as_deref().is_some_and(|token| {
        let ours = seed_hash(
            Some(token),
            desired.user_data.as_deref(),
            desired.network_config.as_deref(),
        );
        mark.seed_hash.as_deref() == Some(ours.as_str())
    });
    Some(Found {
        vmid,
        node,
        phase: mark.phase,
        token,
        own_unconfirmed,
        replaced,
        same_content,
        rank: configured.vmid_range.probe_rank_in_fleet(fleet, name, vmid),
    })
}

fn listed_node(listing: &[pve::cluster::ClusterVm], vmid: u32) -> Option<String> {
    listing
        .iter()
        .find(|vm| vm.vmid == vmid)
        .map(|vm| vm.node.clone())
}

/// Whether nothing is at `vmid`, asked of PVE for that one VMID (`GET /cluster/nextid?vmid=N`),
/// so probing costs the same however big the cluster is.
async fn vmid_is_free(client: &Client, vmid: u32) -> Step<bool> {
    match operation::read(|| client.cluster().next_id(Some(vmid))).await {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The VM at `vmid` once any clone onto it ended: where it is and its config, or `None` when
/// the VMID is free. Whether it is taken is asked of PVE for that VMID alone; `node` (from a
/// possibly stale listing) only guesses where a taken one is, and a wrong guess is corrected
/// by a fresh look.
async fn taken_at(
    configured: &Configured,
    desired: &Desired,
    node: Option<String>,
    vmid: u32,
    deadline: Instant,
) -> Step<Option<(String, VmConfig)>> {
    let client = &configured.client;
    if vmid_is_free(client, vmid).await? {
        return Ok(None);
    }
    // A create not placed yet has no node to guess: the VMID itself is looked up.
    let node = match node {
        Some(node) => node,
        None if !desired.node.is_empty() => desired.node.clone(),
        None => {
            match operation::read(|| client.cluster().locate_vm(vmid)).await? {
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

/// Waits until a VM is no longer locked by a clone: a half-made VM has no name or
/// description until the clone writes its config, so ownership is decided afterwards. A
/// clone with `target` ends by moving the config to the target node, so a VM that vanishes
/// from one node is looked for on the others. Returns where it is and its config, or `None`
/// when it is gone (a failed clone cleans up after itself).
pub(in super::super) async fn config_after_clone(
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
            Err(e) if e.node_unreachable() => {
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
                match operation::read(|| client.cluster().locate_vm(vmid)).await? {
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
