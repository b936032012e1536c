//! Create, steps 1–7 of the design: prechecks, VMID slot, clone, seed, config, disk, power,
//! address; resuming whatever an earlier run left.

use std::time::Duration;

use pve::ErrorKind;
use tokio::time::Instant;

use super::super::model::{Desired, Observed};
use super::prechecks::{check_seed_storage, resolve_template};
use super::read::observe_with;
use super::slot::{Slot, choose_slot, config_after_clone, fresh_listing};
use super::steps::{
    clone_vm, ensure_power, grow_disk, upload_seed, wait_for_address, write_config,
};
use super::{Failure, StepError};
use crate::context::Configured;

/// Create, steps 1–7 of the design, resuming whatever an earlier run left.
pub async fn create(configured: &Configured, desired: &Desired) -> Result<Observed, Failure> {
    let deadline = Instant::now() + desired.timeouts.create;
    let client = &configured.client;
    let _name_guard = configured.runtime.lock_name(&desired.name).await;
    let before = |error: StepError| Failure { made: None, error };

    check_seed_storage(client, &desired.node, &desired.seed_storage)
        .await
        .map_err(before)?;
    // One listing serves the template lookup and the first choice of VMID.
    let listing = fresh_listing(client).await.map_err(before)?;
    let template = resolve_template(client, &listing, &desired.template, &desired.node)
        .await
        .map_err(before)?;
    let (mut slot, mut reservation) = choose_slot(configured, desired, &listing, deadline)
        .await
        .map_err(before)?;
    // Another process may take a fresh VMID between our look and our clone: PVE then
    // refuses the clone, and we look again.
    for attempt in 1.. {
        let Slot::Fresh(vmid) = slot else { break };
        match clone_vm(client, (&template.0, template.1), vmid, desired).await {
            Ok(()) => {
                slot = Slot::Adopt(vmid, desired.node.clone());
            }
            Err(StepError::Pve(e)) if e.kind() == ErrorKind::AlreadyExists && attempt < 5 => {
                tracing::info!(vmid, "VMID taken meanwhile; choosing again");
                // Our own claim on the VMID must not make us skip it: it may be ours now.
                drop(reservation);
                let listing = fresh_listing(client).await.map_err(before)?;
                let (next, claim) = choose_slot(configured, desired, &listing, deadline)
                    .await
                    .map_err(before)?;
                slot = next;
                reservation = claim;
            }
            Err(StepError::Pve(e)) if e.kind() == ErrorKind::Locked && attempt < 5 => {
                tracing::info!(vmid, "template busy; cloning again");
                tokio::time::sleep(Duration::from_millis(250 * attempt)).await;
            }
            Err(error) => {
                // A failed clone task removes what it made; only a VM that exists is ours to track.
                let exists = client.node(&desired.node).qemu(vmid).config().await.is_ok();
                return Err(Failure {
                    made: exists.then(|| (vmid, desired.node.clone())),
                    error,
                });
            }
        }
    }
    let Slot::Adopt(vmid, node) = slot else {
        unreachable!("the loop leaves only adopted slots")
    };
    configured.runtime.forget_listing().await;
    // An adopted clone may still be running, and may end on another node: follow it.
    let found = config_after_clone(client, &node, vmid, deadline)
        .await
        .map_err(|error| Failure {
            made: Some((vmid, node.clone())),
            error,
        })?;
    let Some((node, _)) = found else {
        return Err(Failure {
            made: None,
            error: StepError::Plain(format!("VM {vmid} vanished right after its clone")),
        });
    };
    let _claim = reservation;
    let made = || Some((vmid, node.clone()));
    let after = |error: StepError| Failure {
        made: made(),
        error,
    };

    let seed_volume = upload_seed(client, &node, vmid, desired)
        .await
        .map_err(after)?;
    write_config(client, &node, vmid, desired, Some(&seed_volume))
        .await
        .map_err(after)?;
    grow_disk(client, &node, vmid, desired.disk_gib)
        .await
        .map_err(after)?;
    ensure_power(client, &node, vmid, desired.started)
        .await
        .map_err(after)?;
    let reported = if desired.started && desired.wait_for_address {
        Some(
            wait_for_address(client, &node, vmid, deadline)
                .await
                .map_err(after)?,
        )
    } else {
        None
    };
    match observe_with(client, &node, vmid, desired.pool.clone(), reported).await {
        Ok(Some(observed)) => Ok(observed),
        Ok(None) => Err(after(StepError::Plain(format!(
            "VM {vmid} vanished right after it was created"
        )))),
        Err(error) => Err(after(error)),
    }
}
