//! The VMID a create works on, chosen once: `probe` finds what the cluster holds for the
//! fleet and name (wherever it is) and `decide` judges it: resume a VM (an unfinished create
//! of the name, or this directory's own create Terraform never stored), make a new one on the
//! first free VMID of the name's probe sequence (beside a `create_before_destroy`
//! predecessor), or refuse: a finished VM of the name that is another state's, with the
//! import hint, or one being destroyed.

mod decide;
mod probe;

use tokio::time::Instant;

use super::super::model::Desired;
use super::error::{Step, StepError, unworkable};
use crate::context::Configured;
pub(super) use decide::Found;
use decide::{Decision, NameFacts, Refusal, decide};
pub(super) use probe::config_after_clone;
use probe::{Probed, first_free, survey};

/// A VMID to create on: fresh (nothing there) or ours to adopt (on this node). An adopted
/// VM that this working directory's own killed run made carries that run's create token,
/// which the resumed create takes over (see `crate::journal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Slot {
    Fresh(u32),
    Adopt {
        vmid: u32,
        node: String,
        /// The create token of this directory's create that Terraform never stored, which
        /// the resumed create takes over.
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

/// The slot a create works on.
pub(super) struct Chosen<'a> {
    pub slot: Slot,
    pub reservation: Reservation<'a>,
    /// A finished VM of the name this directory's plan replaces stands beside it (its VMID
    /// and node): the create is a `create_before_destroy` replacement.
    pub predecessor: Option<(u32, String)>,
}

fn chosen<'a>(facts: &NameFacts, slot: Slot, reservation: Reservation<'a>) -> Chosen<'a> {
    let predecessor = facts
        .found
        .iter()
        .find(|found| found.replaced && found.phase == crate::ownership::Phase::Done)
        .map(|found| (found.vmid, found.node.clone()));
    Chosen {
        slot,
        reservation,
        predecessor,
    }
}

/// What a create does, decided once over what the cluster holds for the name.
pub(super) enum Choice<'a> {
    Slot(Chosen<'a>),
    /// Make nothing: `error` says why. `discard`: this directory's own unfinished creates of
    /// the name, which the caller removes first (nothing else ever would).
    Refused {
        error: StepError,
        discard: Vec<Found>,
    },
    /// This directory's own finished create of other content stands at the name: the
    /// caller removes it and chooses again (see `decide::Decision::Remake`).
    Remake {
        stale: Found,
    },
}

/// See the module doc.
pub(super) async fn choose<'a>(
    configured: &'a Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
    deadline: Instant,
) -> Step<Choice<'a>> {
    let mut facts = survey(configured, desired, listing, deadline).await?;
    loop {
        tracing::debug!(?facts, "what the cluster holds for the name");
        match decide(&facts) {
            Decision::Refuse { refusal, discard } => {
                let error = refused(refusal, desired);
                return Ok(Choice::Refused { error, discard });
            }
            Decision::Remake { stale } => return Ok(Choice::Remake { stale }),
            Decision::Resume { vmid, node, token } => {
                let runtime = &configured.runtime;
                if !runtime.reserve_vmid(vmid) {
                    return unworkable(format!(
                        "VM {vmid} of `{}` is also being worked on by another resource in this \
                         run",
                        desired.name
                    ));
                }
                tracing::info!(vmid, %node, name = %desired.name, resumed = token.is_some(),
                    "resuming a create of this name");
                let slot = Slot::Adopt {
                    vmid,
                    node,
                    resumed_token: token,
                };
                let reservation = Reservation { runtime, vmid };
                return Ok(Choice::Slot(chosen(&facts, slot, reservation)));
            }
            Decision::MakeNew => {
                match first_free(configured, desired, listing, &facts, deadline).await? {
                    Probed::Free(vmid, reservation) => {
                        let slot = Slot::Fresh(vmid);
                        return Ok(Choice::Slot(chosen(&facts, slot, reservation)));
                    }
                    // Made since the listing: judged with the rest.
                    Probed::Named(found) => facts.found.push(found),
                }
            }
        }
    }
}

/// The plan's question (the same decision a create makes, from what the listing and the
/// journal name, without probing for a free VMID): why a create of the name would make
/// nothing, if it would not. A VM this directory's state held, or a plan of it replaces, is
/// left to the apply: the plan of a replacement that destroys first carries nothing of its
/// predecessor when Terraform plans it without a refresh (a taint with `-refresh=false`,
/// fuzzer seed 102) or keeps its `vmid`, and by the create the predecessor is gone.
pub async fn refusal_at_plan(
    configured: &Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
    deadline: Instant,
) -> Step<Option<StepError>> {
    let mut facts = survey(configured, desired, listing, deadline).await?;
    let journal = &configured.journal;
    facts.found.retain(|found| {
        let held = found
            .token
            .as_deref()
            .is_some_and(|token| journal.is_held(&desired.fleet, &desired.name, token));
        !found.replaced && !held
    });
    Ok(match decide(&facts) {
        Decision::Refuse { refusal, .. } => Some(refused(refusal, desired)),
        Decision::Resume { .. } | Decision::MakeNew | Decision::Remake { .. } => None,
    })
}

fn refused(refusal: Refusal, desired: &Desired) -> StepError {
    match refusal {
        Refusal::AlreadyMade { vmid, node } => already_made(vmid, &node, desired),
        Refusal::BeingDestroyed { vmid, node } => StepError::BeingDestroyed {
            vmid,
            node,
            name: desired.name.clone(),
        },
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
