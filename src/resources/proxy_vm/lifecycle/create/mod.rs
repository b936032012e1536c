//! Create, read top-down as its phases: place (node, seed storage, template), slot and clone
//! (`clone`), claim (`hold`), seed, configure, grow, boot, ready, finish; resuming whatever
//! an earlier run of this name left unfinished. What it made so far is recorded in the
//! [`ProgressCell`] before each phase sends anything, so a create cut short anywhere still
//! leaves a state that names the VM and its seed.

mod clone;
mod first_boot;
mod hold;
mod place;
mod seed;

use pve::qemu::GuestInterface;
use tokio::time::Instant;

use super::super::model::{Desired, Observed, SeedStays};
use super::ProgressCell;
use super::configure::write_decided;
use super::disk::grow_disk;
use super::error::{Step, StepError};
use super::guest::Guest;
use super::ha::ensure as ensure_ha;
use super::owned::Seen;
use super::power::{ensure_power, start_own_clone};
use super::prechecks::{Template, check_disk_size};
use super::ready::wait_for_address;
use super::seed_life::{FirstBoot, SeedOutcome, after_ready, stopped_before_address};
use super::slot::{Chosen, Slot};
use super::whereabouts::observe_where_it_is;
use crate::context::Configured;
use hold::{Claimed, Hold};

/// A finished create: the VM as read at its end, and what the apply warns about.
#[derive(Debug)]
pub struct Created {
    pub observed: Observed,
    pub warnings: Vec<String>,
    /// The seed was detached and deleted: the state records none.
    pub seed_deleted: bool,
    /// The first boot's verdict is still to be read (see `Private::verdict_pending`).
    pub verdict_pending: bool,
    /// Why the seed stays for the VM's life, when the create found out.
    pub seed_stays: Option<SeedStays>,
}

/// See the module doc.
pub async fn create(
    configured: &Configured,
    desired: &Desired,
    progress: &ProgressCell,
) -> Step<Created> {
    let deadline = Instant::now() + desired.timeouts.create;
    let client = &configured.client;
    let runtime = &configured.runtime;
    let _name_guard = runtime
        .lock_name(&format!("{}/{}", desired.fleet, desired.name))
        .await;
    // One listing per process serves placement and every create's template lookup
    // (templates do not move during an apply; placement adds this process's own creates).
    // VMIDs are probed one by one, so no create lists the whole cluster.
    let listing = runtime.cluster_vms_once(client, false).await?;
    let (chosen, placed, placement) =
        choose_and_place(configured, desired, &listing, deadline).await?;
    let desired = &placed;
    let template = place::checked_template(configured, desired, &listing).await?;
    check_disk_size(&template, &desired.name, desired.disk_gib).map_err(StepError::Unworkable)?;
    let (cloned, resumed, claimed) = clone_and_claim(
        configured,
        desired,
        (&template, &listing),
        chosen,
        progress,
        deadline,
    )
    .await?;
    let (vmid, node) = (cloned.vmid, cloned.node.as_str());
    if let Some(index) = placement {
        runtime.placed_as(index, vmid);
    }
    let desired = &resumed;
    let hold = Hold::new(configured, node, vmid, desired, deadline);
    let built = seed::build_seed(desired, node, vmid)?;
    let seed_volume = built.volume.clone();
    progress.update(|p| p.seed_volume = Some(seed_volume.clone()));
    let how = (cloned.made_here, cloned.beside_predecessor);
    let provisioned = provision(&hold, claimed, &built, how).await;
    let (reported, seed) = match provisioned {
        Ok(provisioned) => provisioned,
        Err(error) => {
            let error = hold.explain(error).await;
            if error.is_not_ours() {
                // The VM is another create's, and no state will name our seed: this attempt
                // removes the file it uploaded (its own name: nobody else's VM boots it).
                seed::remove_seed(client, node, &seed_volume, deadline).await;
            }
            return Err(error);
        }
    };
    drop(cloned.reservation);
    // Where the VM runs: HA may have started it on another node (`ha-rebalance-on-start`),
    // and may move it while it is observed.
    let node = hold.vm.node();
    let pool = desired.pool.clone();
    let Some(observed) = observe_where_it_is(client, node, vmid, pool, reported).await? else {
        return Err(StepError::Unworkable(format!(
            "VM {vmid} vanished right after it was created"
        )));
    };
    Ok(Created {
        observed,
        warnings: seed.warnings,
        seed_deleted: seed.deleted,
        verdict_pending: seed.verdict_pending,
        seed_stays: seed.stays,
    })
}

/// Clones (or takes up) the slot and claims the VM; a VM that may have booted another
/// attempt's seed is discarded and cloned again, once. Returns the clone, the create as it
/// goes on (a resumed create under the token it resumed) and the claim.
async fn clone_and_claim<'a>(
    configured: &'a Configured,
    desired: &Desired,
    (template, listing): (&Template, &[pve::cluster::ClusterVm]),
    chosen: Chosen<'a>,
    progress: &ProgressCell,
    deadline: Instant,
) -> Step<(clone::Cloned<'a>, Desired, Claimed)> {
    let runtime = &configured.runtime;
    // A VM that may have booted another attempt's seed is discarded and cloned again, once.
    let mut discarded = false;
    let mut chosen = Some(chosen);
    loop {
        // After a discard the slot is chosen again: the VM is gone.
        let slot = match chosen.take() {
            Some(slot) => slot,
            None => clone::choose_slot(configured, desired, listing, deadline).await?,
        };
        let cloned = clone::clone_into_slot(
            configured, desired, template, listing, slot, progress, deadline,
        )
        .await?;
        // Resuming this directory's own create: its token, so its mark and seed stay valid.
        let resumed = match cloned.resumed_token.clone() {
            Some(create_token) => Desired {
                create_token,
                ..desired.clone()
            },
            None => desired.clone(),
        };
        progress.update(|p| p.resumed_token = cloned.resumed_token.clone());
        let hold = Hold::new(configured, &cloned.node, cloned.vmid, &resumed, deadline);
        // The first config write makes the VM this attempt's (and tags it, so listings
        // show it).
        let (claimed, attached) = match cloned.made_here {
            true => (hold.claim_own_clone(), None),
            false => hold.claim().await?,
        };
        if !first_boot::booted_another_seed(&hold, cloned.made_here, attached.as_deref()).await? {
            return Ok((cloned, resumed, claimed));
        }
        if discarded {
            return Err(StepError::Unworkable(format!(
                "VM {} was started by another create of `{}` again after this one discarded it; \
                 run apply again",
                cloned.vmid, resumed.name
            )));
        }
        first_boot::discard(&hold).await?;
        progress.update(|p| {
            p.vm = None;
            p.resumed_token = None;
        });
        runtime.forget_vm(cloned.vmid).await;
        discarded = true;
    }
}

/// The slot, decided once before placement, and the node: a VM that exists is resumed where
/// it is, and placement (which may find no room left for a VM already there) is not run for
/// it; else the configured node, or placement's choice (with its index in the runtime).
async fn choose_and_place<'a>(
    configured: &'a Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
    deadline: Instant,
) -> Step<(Chosen<'a>, Desired, Option<usize>)> {
    let chosen = clone::choose_slot(configured, desired, listing, deadline).await?;
    if let Some(predecessor) = &chosen.predecessor {
        place::mac_free_beside(configured, desired, predecessor, deadline).await?;
    }
    match (&chosen.slot, desired.node.is_empty()) {
        (Slot::Adopt { node, .. }, true) => {
            let node = node.clone();
            Ok((
                chosen,
                Desired {
                    node,
                    ..desired.clone()
                },
                None,
            ))
        }
        _ => {
            let (placed, placement) = place::place(configured, desired, listing).await?;
            Ok((chosen, placed, placement))
        }
    }
}

/// The phases after the claim, on the held VM: seed, configure, grow, boot, ready, finish;
/// then the seeds of earlier attempts at this VM slot go. The agent's interfaces when the
/// create waited for them, and the warnings of cloud-init's verdict and the seed's detach.
async fn provision(
    hold: &Hold<'_>,
    claimed: Claimed,
    built: &seed::BuiltSeed,
    (made_here, beside_predecessor): (bool, bool),
) -> Step<(Option<Vec<GuestInterface>>, SeedOutcome)> {
    let (vm, desired) = (&hold.vm, hold.desired);
    let seed_volume = built.volume.as_str();
    let made_on = built.made_on.as_str();
    let bytes = built.bytes.clone();
    // The config write's read goes out beside the upload: the write, conditional on its
    // digest, still comes after the seed is on the storage.
    let (uploaded, seen) = tokio::join!(
        seed::upload_seed(vm.client(), made_on, seed_volume, bytes, vm.deadline()),
        vm.read()
    );
    uploaded?;
    // Each attempt attaches the seed where the VM is: an operator may migrate the stopped VM
    // until it is attached, and the write's read follows it.
    let seed_on = std::sync::Mutex::new(made_on.to_owned());
    let attempt = |seen: Seen| async {
        let here = vm.node().to_owned();
        let was = seed_on.lock().expect("not poisoned").clone();
        if here != was {
            let bytes = built.bytes.clone();
            let nodes = (was.as_str(), here.as_str());
            seed::follow_the_vm(vm.client(), nodes, seed_volume, bytes, vm.deadline()).await?;
            *seed_on.lock().expect("not poisoned") = here;
        }
        write_decided(vm, seen, desired, Some(seed_volume), true).await
    };
    let written = match seen {
        Ok(seen) => vm.conditional_from(seen, "write the config", attempt).await,
        Err(_) => vm.conditional("write the config", attempt).await,
    };
    hold.unless_taken_over(written)?;
    hold.unless_taken_over(grow_disk(vm, desired.disk_gib).await)?;
    // Under HA before the start, as PVE's create with `ha-managed` does.
    hold.unless_taken_over(ensure_ha(vm, desired, made_here).await)?;
    let started = match (made_here, desired.started) {
        (true, true) => start_own_clone(vm).await,
        (true, false) => Ok(None),
        (false, _) => ensure_power(vm, desired.started).await.map(|()| None),
    };
    let started = hold.unless_taken_over(started)?;
    let mut stopped_waiting = false;
    let reported = if desired.started && desired.wait_for.waits_for_address() {
        match wait_for_address(Guest::Owned(vm), &desired.template, vm.deadline()).await {
            Ok(interfaces) => Some(interfaces),
            // Made, then stopped: whether that came before or after the address was seen
            // is timing, so it ends as a stop before the verdict does (`stopped_before_address`).
            Err(StepError::StoppedWaiting { .. }) => {
                stopped_waiting = true;
                None
            }
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    let finished = hold.finish(claimed, started).await?;
    // Finished, so no other create can take the VM any more: a seed an earlier attempt
    // at this VM slot uploaded (an interrupted create this one resumed, a VM deleted by
    // hand and made again) is nobody's now.
    // Named for the node the VM was made on, and uploaded there.
    seed::remove_earlier_seeds(
        &finished,
        vm.client(),
        made_on,
        vm.vmid(),
        desired,
        seed_volume,
        vm.deadline(),
    )
    .await;
    // After the finish: a create that fails on cloud-init's verdict leaves a finished VM
    // (with its seed, for debugging) that the next apply replaces.
    let first_boot = FirstBoot {
        timeout: desired.cloud_init_timeout,
        instance_id: &built.instance_id,
        replaces_beside: beside_predecessor,
    };
    if stopped_waiting {
        return Ok((
            None,
            stopped_before_address(vm.vmid(), desired, first_boot)?,
        ));
    }
    let seed = (vm.node(), seed_volume);
    let seed = after_ready(vm, desired, seed, reported.is_some(), first_boot).await?;
    Ok((reported, seed))
}
