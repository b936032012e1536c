//! Create, steps 1–7 of the design: prechecks, VMID slot, clone, seed, config, disk, power,
//! address; resuming whatever an earlier run left.

use pve::ErrorKind;
use tokio::time::Instant;

use super::super::model::{Desired, Observed};
use super::prechecks::{
    Template, check_disk_size, check_seed_storage, choose_template, judge_template,
    resolve_template,
};
use super::read::observe_with;
use super::slot::{Slot, choose_slot, config_after_clone};
use super::steps::{Hold, build_seed, clone_vm, ensure_power, upload_seed, wait_for_address};
use super::{ProgressCell, Step, StepError, next_lock_delay, placement};
use crate::context::Configured;

/// The desired VM with its node: the configured one, or the one placement chooses (see
/// `placement`), with the index of its memory promise in the runtime.
async fn place(
    configured: &Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
) -> Step<(Desired, Option<usize>)> {
    let mut placed = desired.clone();
    if !desired.node.is_empty() {
        return Ok((placed, None));
    }
    // One choice at a time in this process, so parallel creates spread out.
    let _turn = configured.runtime.placement_guard().await;
    // The template's config comes from the process's facts: every placed create of a fleet
    // asks for the same one.
    let vm = choose_template(listing, &desired.template, "").map_err(StepError::Plain)?;
    let config = configured
        .facts
        .config(&configured.client, &vm.node, vm.vmid)
        .await
        .map_err(|e| StepError::Pve(Box::new((*e).clone())))?;
    let template = judge_template(vm, &config, &desired.template).map_err(StepError::Plain)?;
    let views = placement::gather(configured, desired, listing, &template).await?;
    let memory_mib = desired.memory_mib.unwrap_or(template.memory_mib);
    match placement::judge(&views, memory_mib << 20) {
        Ok(node) => {
            tracing::info!(name = %desired.name, %node, "placed on the node with the most memory left");
            let index = configured.runtime.place(&node, memory_mib << 20);
            placed.node = node;
            Ok((placed, Some(index)))
        }
        Err(rejected) => Err(StepError::Plain(placement::no_node_message(
            &rejected,
            desired.node_candidates.as_deref(),
        ))),
    }
}

/// Create, steps 1–7 of the design, resuming whatever an earlier run of this name left
/// unfinished. What it made so far is recorded in `progress` before each step is sent, so a
/// create cut short anywhere still leaves a state that names the VM and its seed.
pub async fn create(
    configured: &Configured,
    desired: &Desired,
    progress: &ProgressCell,
) -> Step<Observed> {
    let deadline = Instant::now() + desired.timeouts.create;
    let client = &configured.client;
    let _name_guard = configured
        .runtime
        .lock_name(&format!("{}/{}", desired.fleet, desired.name))
        .await;

    let runtime = &configured.runtime;
    // One listing per process serves placement and every create's template lookup
    // (templates do not move during an apply; placement adds this process's own creates);
    // a template it does not know yet is looked for once more in a fresh one. VMIDs are
    // probed one by one, so no create lists the whole cluster.
    let listing = runtime.template_listing(client, false).await?;
    let (placed, placement) = place(configured, desired, &listing).await?;
    let desired = &placed;
    // The seed storage and the template are checked once per process: neither changes during
    // an apply, and a fleet's creates share them.
    runtime
        .once(
            &format!("seed storage {}/{}", desired.node, desired.seed_storage),
            || check_seed_storage(client, &desired.node, &desired.seed_storage),
        )
        .await?;
    let template: Template = runtime
        .once(
            &format!("template {} for {}", desired.template, desired.node),
            || async {
                match resolve_template(client, &listing, &desired.template, &desired.node).await {
                    Ok(template) => Ok(template),
                    Err(_) => {
                        let fresh = runtime.template_listing(client, true).await?;
                        resolve_template(client, &fresh, &desired.template, &desired.node).await
                    }
                }
            },
        )
        .await?;
    check_disk_size(&template, &desired.name, desired.disk_gib).map_err(StepError::Plain)?;
    let (mut slot, mut reservation) = choose_slot(configured, desired, &listing, deadline).await?;
    // Another process may take a fresh VMID between our look and our clone: PVE then
    // refuses the clone, and we look again.
    let mut lock_delay = std::time::Duration::from_millis(200);
    let mut cloned_here = false;
    for attempt in 1.. {
        let Slot::Fresh(vmid) = slot else { break };
        progress.update(|p| p.vm = Some((vmid, desired.node.clone())));
        match clone_vm(
            client,
            (&template.node, template.vmid),
            vmid,
            desired,
            deadline,
        )
        .await
        {
            Ok(waited) => {
                slot = Slot::Adopt(vmid, desired.node.clone(), None);
                cloned_here = waited;
            }
            Err(StepError::Pve(e)) if e.kind() == ErrorKind::AlreadyExists && attempt < 5 => {
                tracing::info!(vmid, "VMID taken meanwhile; choosing again");
                progress.update(|p| p.vm = None);
                // Our own claim on the VMID must not make us skip it: it may be ours now.
                drop(reservation);
                let (next, claim) = choose_slot(configured, desired, &listing, deadline).await?;
                slot = next;
                reservation = claim;
            }
            // The clone's worker met a lock on the template (a backup started meanwhile).
            Err(StepError::Pve(e)) if e.kind() == ErrorKind::Locked => {
                let Some(pause) = next_lock_delay(&mut lock_delay, deadline) else {
                    return Err(StepError::Pve(e));
                };
                tracing::info!(vmid, reason = %e.message(), "template busy; cloning again");
                tokio::time::sleep(pause).await;
            }
            Err(error) => return Err(error),
        }
    }
    let Slot::Adopt(vmid, node, resumed_token) = slot else {
        unreachable!("the loop leaves only adopted slots")
    };
    // Resuming this directory's own finished create: its token, so its mark stays valid.
    let resumed;
    let desired = match resumed_token {
        Some(create_token) => {
            resumed = Desired {
                create_token,
                ..desired.clone()
            };
            &resumed
        }
        None => desired,
    };
    if let Some(index) = placement {
        configured.runtime.placed_as(index, vmid);
    }
    progress.update(|p| p.vm = Some((vmid, node.clone())));
    configured.runtime.forget_listing().await;
    // An adopted clone may still be running, and may end on another node: follow it. Our
    // own clone, waited for, ended on our node.
    let node = match cloned_here {
        true => node,
        false => match config_after_clone(client, &node, vmid, deadline).await? {
            Some((node, _)) => node,
            None => {
                progress.update(|p| p.vm = None);
                return Err(StepError::Plain(format!(
                    "VM {vmid} vanished right after its clone"
                )));
            }
        },
    };
    progress.update(|p| p.vm = Some((vmid, node.clone())));
    let _claim = reservation;
    let hold = Hold {
        client,
        node: node.clone(),
        vmid,
        desired,
        deadline,
    };
    // The first config write makes the VM this attempt's (and tags it, so listings show it).
    hold.claim().await?;
    let (seed_volume, seed_bytes) = build_seed(desired, &node, vmid)?;
    progress.update(|p| p.seed_volume = Some(seed_volume.clone()));
    upload_seed(client, &node, &seed_volume, seed_bytes, deadline).await?;
    hold.write_config(&seed_volume).await?;
    hold.grow_disk().await?;
    hold.still_ours().await?;
    ensure_power(client, &node, vmid, desired.started, deadline).await?;
    let reported = if desired.started && desired.wait_for_address {
        Some(wait_for_address(client, &node, vmid, deadline).await?)
    } else {
        None
    };
    hold.finish().await?;
    match observe_with(client, &node, vmid, desired.pool.clone(), reported).await? {
        Some(observed) => Ok(observed),
        None => Err(StepError::Plain(format!(
            "VM {vmid} vanished right after it was created"
        ))),
    }
}
