//! Delete: stop, delete the seed, destroy with purge; never a VM that is not this state's.
//!
//! Everything PVE will resolve by itself is waited out within the delete timeout: a clone
//! still running on the VM, a lock (a backup), an earlier destroy task still finishing.

use pve::qemu::DestroyOptions;
use pve::{ErrorKind, retry_idempotent};
use tokio::time::Instant;

use super::read::Expected;
use super::slot::config_after_clone;
use super::{Step, StepError, next_lock_delay, patient, run_task, wait};
use crate::context::Configured;

/// Stop, delete the seed, destroy with purge. The seed goes first, so a failed seed delete
/// leaves the VM for the next delete instead of leaking the ISO. A VM already gone is done.
/// Returns a note when the VM at the VMID was not this state's and was left alone.
pub async fn delete(
    configured: &Configured,
    vmid: u32,
    expected: Expected<'_>,
    seed: Option<(&str, &str)>,
    deadline: Instant,
) -> Step<Option<String>> {
    let client = &configured.client;
    let name = expected.name.unwrap_or_default();
    let _name_guard = configured
        .runtime
        .lock_name(&format!("{}/{name}", expected.fleet))
        .await;
    let location = retry_idempotent(&patient(deadline), || client.cluster().locate_vm(vmid))
        .await?
        .map(|entry| entry.node);
    let mut note = None;
    // A clone still running has no mark yet: wait for it to end before judging.
    let found = match &location {
        None => None,
        Some(node) => config_after_clone(client, node, vmid, deadline).await?,
    };
    let ours_on = match found {
        None => None,
        Some((node, config)) => {
            let mark = config
                .description()
                .as_deref()
                .and_then(crate::ownership::Mark::parse);
            match expected.mismatch(mark.as_ref()) {
                None => Some(node),
                Some(why) => {
                    note = Some(format!(
                        "VM {vmid} on {node} is not this state's VM ({why}); it was left untouched."
                    ));
                    None
                }
            }
        }
    };
    if let Some(node) = &ours_on {
        let qemu = client.node(node).qemu(vmid);
        match retry_idempotent(&patient(deadline), || qemu.status()).await {
            Ok(status) if status.is_running() => {
                // Hard stop: the VM is going away. Stopping a stopped VM is fine, so a retry
                // after a lost answer is harmless.
                tolerate_gone(run_task(client, deadline, || qemu.stop()).await)?;
            }
            Ok(_) => {}
            // Gone meanwhile: an earlier destroy finished it.
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some((seed_node, volume)) = seed
        && let Some((storage, _)) = volume.split_once(':')
    {
        let store = client.node(seed_node).storage(storage);
        tolerate_gone(run_task(client, deadline, || store.delete_volume(volume)).await)?;
    }
    if let Some(node) = &ours_on {
        destroy(configured, node, vmid, deadline).await?;
    }
    configured.runtime.forget_listing().await;
    Ok(note)
}

/// A task that failed because the VM no longer exists (an earlier destroy removed it) did
/// what a delete wants.
fn tolerate_gone<T>(outcome: Step<T>) -> Step<()> {
    match outcome {
        Ok(_) => Ok(()),
        Err(StepError::Pve(e)) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Destroys the VM with purge, waiting out locks; a VM that vanishes meanwhile (an earlier
/// destroy task finishing) is done, once it is really gone.
async fn destroy(configured: &Configured, node: &str, vmid: u32, deadline: Instant) -> Step<()> {
    let client = &configured.client;
    let qemu = client.node(node).qemu(vmid);
    let options = DestroyOptions {
        purge: true,
        destroy_unreferenced_disks: true,
    };
    let mut lock_delay = std::time::Duration::from_millis(200);
    loop {
        let sent = pve::retry_with_check(
            &patient(deadline),
            || async { qemu.destroy(options).await.map(Some) },
            // A destroy whose answer was lost: if the VM is gone or going, do not send another.
            || async {
                match qemu.config().await {
                    Ok(config) if config.lock().as_deref() == Some("destroyed") => Ok(Some(None)),
                    Ok(_) => Ok(None),
                    Err(e) if e.kind() == ErrorKind::NotFound => Ok(Some(None)),
                    Err(e) => Err(e),
                }
            },
        )
        .await;
        let outcome = match sent {
            Ok(Some(upid)) => tolerate_gone(wait(client, &upid).await),
            Ok(None) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        };
        match outcome {
            // The worker met a lock (a backup started meanwhile): wait and send again.
            Err(StepError::Pve(e)) if e.kind() == ErrorKind::Locked => {
                let Some(pause) = next_lock_delay(&mut lock_delay, deadline) else {
                    return Err(StepError::Pve(e));
                };
                tracing::info!(vmid, reason = %e.message(), "the destroy met a lock; sending it again");
                tokio::time::sleep(pause).await;
            }
            other => break other?,
        }
    }
    // An earlier destroy (a killed run's) may still be finishing: the VM is deleted once
    // PVE no longer knows it.
    let mut delay = std::time::Duration::from_millis(50);
    loop {
        match client.cluster().locate_vm(vmid).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) | Err(_) if Instant::now() + delay < deadline => {
                tracing::debug!(vmid, "waiting for the VM's destroy to finish");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(2));
            }
            Ok(Some(_)) => {
                return super::plain(format!(
                    "VM {vmid} was still there when the delete timeout ran out; its destroy task may still be running. Run destroy again."
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
}
