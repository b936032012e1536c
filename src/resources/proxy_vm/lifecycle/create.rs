//! Create, steps 1–7 of the design: prechecks, VMID slot, clone, seed, config, disk, power,
//! address; resuming whatever an earlier run left.

use pve::{Backoff, ErrorKind, wait_out_locks};
use tokio::time::Instant;

use super::super::model::{Desired, Observed};
use super::prechecks::{
    Template, check_disk_size, check_seed_storage, choose_template, judge_template,
    resolve_template,
};
use super::read::observe_with;
use super::slot::{Slot, choose_slot, config_after_clone};
use super::steps::{Hold, build_seed, clone_vm, upload_seed, wait_for_address};
use super::{ProgressCell, Step, StepError, placement, run_task};
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
    let vm = choose_template(listing, &desired.template, "").map_err(StepError::Failed)?;
    let config = configured
        .facts
        .config(&configured.client, &vm.node, vm.vmid)
        .await
        .map_err(|e| StepError::Pve(Box::new((*e).clone())))?;
    let template = judge_template(vm, &config, &desired.template).map_err(StepError::Failed)?;
    let views = placement::gather(configured, desired, listing, &template).await?;
    let memory_mib = desired.memory_mib.unwrap_or(template.memory_mib);
    match placement::judge(&views, memory_mib << 20) {
        Ok(node) => {
            tracing::info!(name = %desired.name, %node, "placed on the node with the most memory \
                left");
            let index = configured.runtime.place(&node, memory_mib << 20);
            placed.node = node;
            Ok((placed, Some(index)))
        }
        Err(rejected) => Err(StepError::Failed(placement::no_node_message(
            &rejected,
            desired.node_candidates.as_deref(),
        ))),
    }
}

/// The seed storage checked and the template found for `desired.node`, once per process:
/// neither changes during an apply, and a fleet's creates share them. A template `listing`
/// does not know yet is looked for once more in a fresh one.
async fn checked_template(
    configured: &Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
) -> Step<Template> {
    let (client, runtime) = (&configured.client, &configured.runtime);
    runtime
        .once(
            &format!("seed storage {}/{}", desired.node, desired.seed_storage),
            || check_seed_storage(client, &desired.node, &desired.seed_storage),
        )
        .await?;
    runtime
        .once(
            &format!("template {} for {}", desired.template, desired.node),
            || async {
                match resolve_template(client, listing, &desired.template, &desired.node).await {
                    Ok(template) => Ok(template),
                    Err(_) => {
                        let fresh = runtime.template_listing(client, true).await?;
                        resolve_template(client, &fresh, &desired.template, &desired.node).await
                    }
                }
            },
        )
        .await
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
    let template = checked_template(configured, desired, &listing).await?;
    check_disk_size(&template, &desired.name, desired.disk_gib).map_err(StepError::Failed)?;
    let (mut slot, mut reservation) = choose_slot(configured, desired, &listing, deadline).await?;
    // Another process may take a fresh VMID between our look and our clone: PVE then
    // refuses the clone, and we look again.
    // The clone's worker may meet a lock on the template (a backup started meanwhile): it is
    // waited out on one schedule for the whole create.
    let mut template_locks = Backoff::for_locks(deadline);
    let mut cloned_here = false;
    for attempt in 1.. {
        let Slot::Fresh(vmid) = slot else { break };
        progress.update(|p| p.vm = Some((vmid, desired.node.clone())));
        let cloned = wait_out_locks(&mut template_locks, || {
            clone_vm(
                client,
                (&template.node, template.vmid),
                vmid,
                desired,
                deadline,
            )
        })
        .await;
        match cloned {
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
                return Err(StepError::Failed(format!(
                    "VM {vmid} vanished right after its clone"
                )));
            }
        },
    };
    progress.update(|p| p.vm = Some((vmid, node.clone())));
    let _claim = reservation;
    let hold = Hold::new(client, &node, vmid, desired, deadline);
    // The first config write makes the VM this attempt's (and tags it, so listings show it).
    hold.claim().await?;
    let (seed_volume, seed_bytes) = build_seed(desired, &node, vmid)?;
    progress.update(|p| p.seed_volume = Some(seed_volume.clone()));
    let outcome = async {
        upload_seed(client, &node, &seed_volume, seed_bytes, deadline).await?;
        hold.write_config_unless_taken_over(&seed_volume).await?;
        hold.grow_disk().await?;
        hold.ensure_power().await?;
        let reported = if desired.started && desired.wait_for_address {
            Some(wait_for_address(client, &node, vmid, deadline).await?)
        } else {
            None
        };
        hold.finish().await?;
        // Finished, so no other create can take the VM any more: a seed an earlier attempt
        // at this VM slot uploaded (an interrupted create this one resumed, a VM deleted by
        // hand and made again) is nobody's now.
        remove_earlier_seeds(client, &node, vmid, desired, &seed_volume, deadline).await;
        Ok::<_, StepError>(reported)
    }
    .await;
    let reported = match outcome {
        Ok(reported) => reported,
        Err(error) => {
            if error.is_not_ours() {
                // The VM is another create's, and no state will name our seed: this attempt
                // removes the file it uploaded (its own name: nobody else's VM boots it).
                remove_seed(client, &node, &seed_volume, deadline).await;
            }
            return Err(error);
        }
    };
    match observe_with(client, &node, vmid, desired.pool.clone(), reported).await? {
        Some(observed) => Ok(observed),
        None => Err(StepError::Failed(format!(
            "VM {vmid} vanished right after it was created"
        ))),
    }
}

/// Deletes a seed file, logging (not failing) when it cannot: what is left is a file no VM
/// uses, which a later destroy of its state or the test sweeper removes.
async fn remove_seed(client: &pve::Client, node: &str, volume: &str, deadline: Instant) {
    let Some((storage, _)) = volume.split_once(':') else {
        return;
    };
    let store = client.node(node).storage(storage);
    match run_task(client, deadline, || store.delete_volume(volume)).await {
        Ok(_) => tracing::info!(%volume, "deleted a seed no VM uses"),
        Err(StepError::Pve(e)) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(%volume, error = %e, "could not delete a seed no VM uses"),
    }
}

/// Deletes the seeds earlier attempts uploaded for this VM slot (same name, node and VMID,
/// another attempt's tag, or the per-VM name of releases before attempt tags), which no VM
/// boots: the VM at the slot is this create's finished VM, booting `ours`.
async fn remove_earlier_seeds(
    client: &pve::Client,
    node: &str,
    vmid: u32,
    desired: &Desired,
    ours: &str,
    deadline: Instant,
) {
    let stem = format!(
        "{}:iso/{}",
        desired.seed_storage,
        nocloud::file_name_stem(&desired.name, &format!("{node}/{vmid}"))
    );
    // Exactly `STEM.iso` or `STEM-XXXXXXXX.iso`: never another name's seed that happens to
    // start like this one.
    let earlier = |volid: &str| match volid
        .strip_prefix(&stem)
        .and_then(|rest| rest.strip_suffix(".iso"))
    {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('-')
            .is_some_and(|tag| tag.len() == 8 && tag.bytes().all(|b| b.is_ascii_hexdigit())),
        None => false,
    };
    let store = client.node(node).storage(&desired.seed_storage);
    let listed =
        pve::retry_idempotent(&super::patient(deadline), || store.content(Some("iso"))).await;
    let Ok(items) = listed else {
        return;
    };
    for item in items {
        if earlier(&item.volid) && item.volid != ours {
            remove_seed(client, node, &item.volid, deadline).await;
        }
    }
}
