//! Taking a VM down on the owner's handle, for a delete and for a create that must discard
//! the VM it adopted: a hard stop sent once, and the wait until PVE no longer knows the VM
//! after its destroy (`OwnedVm::destroy`).

use std::time::Duration;

use pve::{Backoff, ErrorKind};

use super::error::{Step, StepError, unworkable};
use super::ha_power::settle;
use super::owned::{OwnedVm, Proof, tolerate_gone};

/// Stops the VM hard when it runs (it is going away), right after a check that it is still
/// this instance's; a VM gone meanwhile (an earlier destroy finished it) is stopped.
pub(super) async fn stop(vm: &OwnedVm<'_>) -> Step<()> {
    match vm.op().retry(|| vm.qemu().status()).await {
        Ok(status) if status.is_running() => {
            let seen = vm.read().await?;
            stop_marked(vm, seen.proof()).await
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Stops the VM hard right after this operation proved it this instance's (a read, or a
/// destroy's conditional mark): no status read first, since PVE's stop of a VM that is not
/// running ends at once (`_do_vm_stop` in qemu-server's QemuServer.pm returns when no
/// process runs). A lost answer is checked first, so a stop is sent once.
pub(super) async fn stop_marked(vm: &OwnedVm<'_>, proof: Proof) -> Step<()> {
    let qemu = vm.qemu();
    let sent = vm
        .send_power_task(
            proof,
            || qemu.stop(),
            || async { Ok(!qemu.status().await?.is_running()) },
        )
        .await;
    if let Some(upid) = tolerate_gone_value(sent)? {
        tolerate_gone(vm.op().wait(&upid).await)?;
        // Under HA the stop was a request (`hastop`, its task ends at once): PVE refuses to
        // destroy a VM that still runs, so its stop is waited for. The task's type says so,
        // with no status read for the VMs HA does not manage.
        if upid.task_type() == "hastop" {
            settle(vm, false).await?;
        }
    }
    Ok(())
}

fn tolerate_gone_value<T>(outcome: Step<Option<T>>) -> Step<Option<T>> {
    match outcome {
        Err(StepError::Pve(e)) if e.kind() == ErrorKind::NotFound => Ok(None),
        other => other,
    }
}

/// An earlier destroy (a killed run's) may still be finishing: the VM is deleted once PVE
/// no longer knows it. Asked of the VM itself, never of the whole cluster.
pub(super) async fn wait_until_gone(vm: &OwnedVm<'_>) -> Step<()> {
    let mut polls = Backoff::new(
        Duration::from_millis(50),
        Duration::from_secs(2),
        vm.deadline(),
    );
    loop {
        let status = vm.qemu().status().await;
        if matches!(&status, Err(e) if e.kind() == ErrorKind::NotFound) {
            return Ok(());
        }
        // Any other answer, an error too, is looked at again while the deadline allows.
        tracing::debug!(vmid = vm.vmid(), "waiting for the VM's destroy to finish");
        if polls.pause().await {
            continue;
        }
        return match status {
            Ok(_) => unworkable(format!(
                "VM {} was still there when the delete timeout ran out; its destroy task may \
                still be running. Run destroy again.",
                vm.vmid()
            )),
            Err(e) => Err(e.into()),
        };
    }
}
