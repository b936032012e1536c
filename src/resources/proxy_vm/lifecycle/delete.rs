//! Delete: mark `deleting`, stop, delete the seed, destroy with purge; never a VM that is not
//! this state's, never a seed another VM boots.
//!
//! Everything PVE will resolve by itself is waited out within the delete timeout: a clone
//! still running on the VM, a lock (a backup), an earlier destroy task still finishing.

use std::time::Duration;

use pve::{Backoff, ErrorKind, retry_idempotent};
use tokio::time::Instant;

use super::owned::{OwnedVm, tolerate_gone};
use super::read::{Expected, ExpectedToken};
use super::slot::config_after_clone;
use super::{Step, StepError, patient, run_task};
use crate::context::Configured;

/// The seed a state recorded: the node it was uploaded to and its volume id.
#[derive(Debug, Clone, Copy)]
pub struct RecordedSeed<'a> {
    pub node: &'a str,
    pub volume: &'a str,
}

/// Whose the VM at the state's VMID turned out to be.
enum AtVmid {
    Gone,
    Ours(String),
    /// Another's VM, with the seed volume it boots (`ide2`), if any.
    NotOurs {
        why: String,
        node: String,
        boots: Option<String>,
    },
}

/// Mark `deleting`, stop, delete the seed, destroy with purge. The seed goes before the
/// destroy, so a failed seed delete leaves the VM for the next delete instead of leaking the
/// ISO. A VM already gone is done. Returns a note when the VM at the VMID was not this
/// state's and was left alone.
pub async fn delete(
    configured: &Configured,
    vmid: u32,
    node_hint: &str,
    expected: Expected<'_>,
    seed: Option<RecordedSeed<'_>>,
    deadline: Instant,
) -> Step<Option<String>> {
    let client = &configured.client;
    let name = expected.name.unwrap_or_default();
    let _name_guard = configured
        .runtime
        .lock_name(&format!("{}/{name}", expected.fleet))
        .await;
    // Where the VM is: the process's listing (fetched once per provider process, so a
    // destroy of N VMs does not list the cluster N times), else the node the state names,
    // else (moved since, or not in the listing) one fresh look.
    let listed = configured
        .runtime
        .template_listing(client, false)
        .await?
        .iter()
        .find(|vm| vm.vmid == vmid)
        .map(|vm| vm.node.clone());
    let location = match listed {
        Some(node) => Some(node),
        None if !node_hint.is_empty() => Some(node_hint.to_owned()),
        None => retry_idempotent(&patient(deadline), || client.cluster().locate_vm(vmid))
            .await?
            .map(|entry| entry.node),
    };
    // A clone still running has no mark yet: wait for it to end before judging.
    let found = match &location {
        None => None,
        Some(node) => config_after_clone(client, node, vmid, deadline).await?,
    };
    let at_vmid = match found {
        None => AtVmid::Gone,
        Some((node, config)) => {
            let mark = config
                .description()
                .as_deref()
                .and_then(crate::ownership::Mark::parse);
            match expected.mismatch(mark.as_ref()) {
                None => AtVmid::Ours(node),
                Some(why) => AtVmid::NotOurs {
                    why,
                    node,
                    boots: config.cdrom("ide2").and_then(Result::ok).map(|d| d.volume),
                },
            }
        }
    };
    let vm = match &at_vmid {
        AtVmid::Ours(node) => Some(OwnedVm {
            client,
            node: node.clone(),
            vmid,
            expected,
            deadline,
        }),
        _ => None,
    };
    if let Some(vm) = &vm {
        // From here on no create adopts it, and every later step checks it is still ours.
        vm.mark_deleting().await?;
        let qemu = vm.qemu();
        match retry_idempotent(&patient(deadline), || qemu.status()).await {
            Ok(status) if status.is_running() => {
                // Hard stop: the VM is going away. A lost answer is checked first, so a stop
                // is sent once.
                let sent = vm
                    .power_task(
                        || qemu.stop(),
                        || async { Ok(!qemu.status().await?.is_running()) },
                    )
                    .await;
                if let Some(upid) = tolerate_gone_value(sent)? {
                    tolerate_gone(super::wait(client, &upid).await)?;
                }
            }
            Ok(_) => {}
            // Gone meanwhile: an earlier destroy finished it.
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut note = match &at_vmid {
        AtVmid::NotOurs { why, node, .. } => Some(format!(
            "VM {vmid} on {node} is not this state's VM ({why}); it was left untouched."
        )),
        _ => None,
    };
    if let Some(seed) = seed {
        if seed_is_ours_to_delete(&seed, name, vmid, expected.token, &at_vmid) {
            if let Some((storage, _)) = seed.volume.split_once(':') {
                let store = client.node(seed.node).storage(storage);
                tolerate_gone(
                    run_task(client, deadline, || store.delete_volume(seed.volume)).await,
                )?;
            }
        } else if let Some(note) = &mut note {
            note.push_str(&format!(
                " Its seed {} was left too: it is not provably this state's, or that VM boots it.",
                seed.volume
            ));
        }
    }
    if let Some(vm) = &vm {
        vm.destroy().await?;
        wait_until_gone(vm).await?;
        // Placement and reads of this process no longer count it.
        configured.runtime.forget_vm(vmid).await;
    }
    Ok(note)
}

/// Whether the state's recorded seed may be deleted: it must be this instance's (named for
/// its create token, or, for a state from before tokens, the one seed name its VM had) and
/// not be what the VM now at the VMID boots, unless that VM is ours and goes too. Only the
/// VM at the state's VMID is asked: a seed named for our token is attached by our create
/// alone.
fn seed_is_ours_to_delete(
    seed: &RecordedSeed<'_>,
    name: &str,
    vmid: u32,
    token: ExpectedToken<'_>,
    at_vmid: &AtVmid,
) -> bool {
    let Some((_, file)) = seed.volume.split_once(":iso/") else {
        return false;
    };
    let named_for_us = match token {
        ExpectedToken::Is { token, .. } => nocloud::file_belongs_to_attempt(file, token),
        _ => false,
    };
    // Seeds from before attempt tags were named per VM (name, node, VMID).
    let named_per_vm = file
        == format!(
            "{}.iso",
            nocloud::file_name_stem(name, &format!("{}/{vmid}", seed.node))
        );
    match at_vmid {
        AtVmid::Ours(_) => named_for_us || named_per_vm,
        AtVmid::Gone => named_for_us || named_per_vm,
        AtVmid::NotOurs { boots, .. } => named_for_us && boots.as_deref() != Some(seed.volume),
    }
}

fn tolerate_gone_value<T>(outcome: Step<Option<T>>) -> Step<Option<T>> {
    match outcome {
        Err(StepError::Pve(e)) if e.kind() == ErrorKind::NotFound => Ok(None),
        other => other,
    }
}

/// An earlier destroy (a killed run's) may still be finishing: the VM is deleted once PVE
/// no longer knows it. Asked of the VM itself, never of the whole cluster.
async fn wait_until_gone(vm: &OwnedVm<'_>) -> Step<()> {
    let mut polls = Backoff::new(
        Duration::from_millis(50),
        Duration::from_secs(2),
        vm.deadline,
    );
    loop {
        let status = vm.qemu().status().await;
        if matches!(&status, Err(e) if e.kind() == ErrorKind::NotFound) {
            return Ok(());
        }
        // Any other answer, an error too, is looked at again while the deadline allows.
        tracing::debug!(vmid = vm.vmid, "waiting for the VM's destroy to finish");
        if polls.pause().await {
            continue;
        }
        return match status {
            Ok(_) => super::failed(format!(
                "VM {} was still there when the delete timeout ran out; its destroy task may \
                still be running. Run destroy again.",
                vm.vmid
            )),
            Err(e) => Err(e.into()),
        };
    }
}
