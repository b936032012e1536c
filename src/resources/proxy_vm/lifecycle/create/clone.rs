//! The clone phase of a create: the template full-cloned onto the slot's VMID with this
//! attempt's mark in the clone call itself, choosing again when another process took the
//! VMID meanwhile; a lost answer is checked before anything is sent again, so a clone never
//! happens twice. An adopted slot (an unfinished create resumed) is followed to where its
//! clone ended.

use std::time::Duration;

use pve::qemu::CloneRequest;
use pve::{Backoff, Client, ErrorKind, LockPacer, wait_out_locks};
use tokio::time::Instant;

use super::super::super::model::Desired;
use super::super::ProgressCell;
use super::super::error::{Step, StepError, unworkable};
use super::super::marks::creating_mark;
use super::super::operation::Operation;
use super::super::orphans::KilledCreate;
use super::super::prechecks::Template;
use super::super::slot::{Choice, Chosen, Reservation, Slot, choose, config_after_clone};
use crate::context::Configured;

/// How long a clone whose answer was lost is looked for before it is sent again: PVE
/// answers with the UPID before its worker writes the new VMID's temporary config.
const CLONE_WINDOW: Duration = Duration::from_secs(4);

/// How often a fresh VMID taken by another process between our look and our clone is
/// chosen again before the create gives up.
const CHOICES: u32 = 5;

/// The VM a create works on from here: where it is, the reservation of its VMID, and the
/// create token of a finished create of this directory it resumes (see `slot`).
pub(super) struct Cloned<'a> {
    pub vmid: u32,
    pub node: String,
    pub resumed_token: Option<String>,
    pub reservation: Reservation<'a>,
    /// This create's own clone made the VM (nobody else can have started it yet).
    pub made_here: bool,
    /// A `create_before_destroy` replacement: its predecessor stands beside it.
    pub beside_predecessor: bool,
}

/// What a create works on, decided once over what the cluster holds for the name (see
/// `slot`). A refusal first removes this directory's own unfinished creates of the name:
/// once another state's VM of the name stands, nothing would ever finish them (#38). This
/// directory's own finished create of other content is removed, and the slot chosen again.
pub(super) async fn choose_slot<'a>(
    configured: &'a Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
    deadline: Instant,
) -> Step<Chosen<'a>> {
    let name = (desired.fleet.as_str(), desired.name.as_str());
    let mut remade = false;
    loop {
        match choose(configured, desired, listing, deadline).await? {
            Choice::Slot(chosen) => return Ok(chosen),
            Choice::Refused { error, discard } => {
                for found in discard {
                    let Some(token) = found.token.as_deref() else {
                        continue;
                    };
                    let at = (found.vmid, found.node.as_str());
                    let killed = KilledCreate::unfinished(name, token, at);
                    match killed.remove(configured, deadline).await {
                        Ok(removed) => tracing::info!(
                            vmid = found.vmid,
                            removed = removed.is_some(),
                            "removing this directory's own unfinished create of a refused name"
                        ),
                        Err(e) => tracing::warn!(vmid = found.vmid, error = %e,
                            "could not remove this directory's own unfinished create"),
                    }
                }
                return Err(error);
            }
            Choice::Remake { stale } => {
                let (vmid, token) = (stale.vmid, stale.token.as_deref().unwrap_or_default());
                // Removed, it is not found again; a second sight means it could not be.
                if remade {
                    return unworkable(format!(
                        "VM {vmid} of `{}`, made by a killed run of this working directory \
                         with other user_data or network_config, could not be removed to make \
                         it again; destroy it, or run apply again",
                        desired.name
                    ));
                }
                tracing::info!(vmid, name = %desired.name, "this working directory's killed \
                    create finished with other content; destroying it to make it again");
                let at = (vmid, stale.node.as_str());
                KilledCreate::finished(name, token, at)
                    .remove(configured, deadline)
                    .await?;
                configured.runtime.forget_vm(vmid).await;
                remade = true;
            }
        }
    }
}

/// Clones onto the chosen slot (or adopts what is there), choosing again when another
/// process took a fresh VMID meanwhile, then follows the VM to where its clone ended.
pub(super) async fn clone_into_slot<'a>(
    configured: &'a Configured,
    desired: &Desired,
    template: &Template,
    listing: &[pve::cluster::ClusterVm],
    chosen: Chosen<'a>,
    progress: &ProgressCell,
    deadline: Instant,
) -> Step<Cloned<'a>> {
    let client = &configured.client;
    let beside_predecessor = chosen.predecessor.is_some();
    let (mut slot, mut reservation) = (chosen.slot, chosen.reservation);
    // The clone's worker may meet a lock on the template (a backup started meanwhile): it is
    // waited out on one schedule for the whole create.
    let mut template_locks = Backoff::for_locks(deadline);
    let gates = gates(desired, template);
    let pacing = Pacing {
        pacer: configured.runtime.lock_pacer(),
        gates: &gates,
    };
    let mut cloned_here = false;
    let mut choices = 1;
    let journal = &configured.journal;
    let (fleet, name) = (&desired.fleet, &desired.name);
    while let Slot::Fresh(vmid) = slot {
        progress.update(|p| p.vm = Some((vmid, desired.node.clone())));
        // Before the clone: a later create here finds this one's VM wherever it ends up.
        journal.record_clone(fleet, name, &desired.create_token, vmid);
        let source = (template.node.as_str(), template.vmid);
        let cloned = wait_out_locks(&mut template_locks, || {
            clone_vm(client, &pacing, source, vmid, desired, deadline)
        })
        .await;
        match cloned {
            Ok(waited) => {
                slot = Slot::Adopt {
                    vmid,
                    node: desired.node.clone(),
                    resumed_token: None,
                };
                cloned_here = waited;
            }
            // Another process took the fresh VMID between our look and our clone.
            Err(StepError::Pve(e)) if e.kind() == ErrorKind::AlreadyExists && choices < CHOICES => {
                tracing::info!(vmid, "VMID taken meanwhile; choosing again");
                progress.update(|p| p.vm = None);
                choices += 1;
                // Our own claim on the VMID must not make us skip it: it may be ours now.
                drop(reservation);
                let again = choose_slot(configured, desired, listing, deadline).await?;
                (slot, reservation) = (again.slot, again.reservation);
            }
            Err(error) => {
                if left_nothing(client, &error, vmid).await {
                    progress.update(|p| p.vm = None);
                }
                return Err(error);
            }
        }
    }
    let Slot::Adopt {
        vmid,
        node,
        resumed_token,
    } = slot
    else {
        unreachable!("the loop leaves only adopted slots")
    };
    progress.update(|p| p.vm = Some((vmid, node.clone())));
    if !cloned_here {
        // Adopted: the claim will make it this create's (or it is resumed under its token).
        let token = resumed_token.as_deref().unwrap_or(&desired.create_token);
        journal.record_clone(fleet, name, token, vmid);
    }
    configured.runtime.forget_listing().await;
    // An adopted clone may still be running, and may end on another node: follow it. Our
    // own clone, waited for, ended on our node.
    let node = if cloned_here {
        node
    } else {
        match config_after_clone(client, &node, vmid, deadline).await? {
            Some((node, _)) => node,
            None => {
                progress.update(|p| p.vm = None);
                return Err(StepError::Unworkable(format!(
                    "VM {vmid} vanished right after its clone"
                )));
            }
        }
    };
    progress.update(|p| p.vm = Some((vmid, node.clone())));
    Ok(Cloned {
        vmid,
        node,
        resumed_token,
        reservation,
        made_here: cloned_here,
        beside_predecessor,
    })
}

/// The locks a clone of `template` for `desired` waits on: its storage's allocations and the
/// template's config. A clone refused one of them left nothing (PVE's clone_vm frees what it
/// allocated and unlinks its temporary config first), so it is sent again, and from then on
/// this process lets no more clones wait on that lock than PVE served.
fn gates(desired: &Desired, template: &Template) -> Vec<String> {
    let storage = desired.clone_storage.as_ref();
    storage
        .or(template.disk_storage.as_ref())
        .map(|storage| LockPacer::storage(storage))
        .into_iter()
        .chain([LockPacer::config(template.vmid)])
        .collect()
}

/// The process's lock gates and the ones a clone passes.
struct Pacing<'a> {
    pacer: &'a LockPacer,
    gates: &'a [String],
}

/// Clones the template onto `vmid` with the mark of this create attempt, once the lock gates
/// let it in, waiting out the task and a lock on the template. A lost or unexplained answer
/// is checked against the cluster before anything is sent again, so a clone never happens
/// twice. True when this call's own clone task ended well (the VM is then on
/// `desired.node`, unlocked); false when a lost answer's clone was found, whose end nobody
/// waited for. A lock refusal teaches the gate of that lock.
async fn clone_vm(
    client: &Client,
    pacing: &Pacing<'_>,
    template: (&str, u32),
    vmid: u32,
    desired: &Desired,
    deadline: Instant,
) -> Step<bool> {
    let Ok(pass) = tokio::time::timeout_at(deadline, pacing.pacer.enter(pacing.gates)).await else {
        return unworkable(format!(
            "the clone onto VMID {vmid} was still waiting for room on its storage's lock when \
             the operation's timeout ran out (PVE refused earlier clones that waited too long)"
        ));
    };
    let mut request = CloneRequest::full(vmid);
    request.name = Some(desired.name.clone());
    request.description = Some(creating_mark(desired).render());
    request.target = (template.0 != desired.node).then(|| desired.node.clone());
    request.storage = desired.clone_storage.clone();
    request.pool = desired.pool.clone();
    let source = client.node(template.0).qemu(template.1);
    let op = Operation::new(client, deadline);
    let dispatched = pve::retry_with_check(
        &op.policy(),
        || async { source.clone_to(&request).await.map(Some) },
        || clone_started(client, vmid),
    )
    .await?;
    let Some(upid) = dispatched else {
        return Ok(false);
    };
    match op.wait(&upid).await {
        Ok(_) => {
            pass.succeeded();
            Ok(true)
        }
        Err(StepError::Pve(error)) => {
            if let Some(refusal) = error.lock_refusal() {
                pass.refused(&refusal);
            }
            Err(StepError::Pve(error))
        }
        Err(error) => Err(error),
    }
}

/// Whether a clone task that failed left no VM: qemu-server's `clone_vm` frees the new
/// disks and removes the new config as the last thing before its task dies ("clone
/// failed: …", `src/PVE/API2/Qemu.pm`), so the failed create holds nothing. Asked of PVE
/// for that one VMID; a VMID still taken (the clean-up failed, or another create took it
/// since) or a failed look keeps the VM the create's, as before.
async fn left_nothing(client: &Client, error: &StepError, vmid: u32) -> bool {
    let StepError::Pve(error) = error else {
        return false;
    };
    if error.task_failure().is_none() {
        return false;
    }
    client.cluster().next_id(Some(vmid)).await.is_ok()
}

/// Whether a clone whose answer was lost started: `Some(None)` once the VMID is taken (asked
/// of PVE for that one VMID, `GET /cluster/nextid?vmid=N`, so the look costs the same however
/// big the cluster is), `None` when it stayed free through PVE's window. One layer of
/// retries: a failed look goes back to `retry_with_check`, which decides whether to look
/// again.
async fn clone_started(client: &Client, vmid: u32) -> pve::Result<Option<Option<pve::Upid>>> {
    let mut window = Backoff::new(
        Duration::from_millis(100),
        Duration::from_millis(500),
        Instant::now() + CLONE_WINDOW,
    );
    loop {
        match client.cluster().next_id(Some(vmid)).await {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(Some(None)),
            Err(e) => return Err(e),
        }
        if !window.pause().await {
            return Ok(None);
        }
    }
}
