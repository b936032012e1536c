//! The boot phase of create and update: the VM started (or stopped) as wanted, and the one
//! reboot that applies pending changes. Each power task is sent right after a check that the
//! VM is still this instance's, and a lost answer is checked before anything is sent again.

use pve::{MaybeLocked, wait_out_locks};

use super::error::{Step, StepError};
use super::ha_power::settle;
use super::owned::{OwnedVm, Seen};

/// Brings the power state to `running`; start only if stopped. Each start or shutdown is
/// sent right after a check that the VM is still this instance's, and a lost answer is
/// checked against the VM's status before the call is sent again.
pub(super) async fn ensure_power(vm: &OwnedVm<'_>, running: bool) -> Step<()> {
    let qemu = &vm.qemu();
    let op = vm.op();
    let vmid = vm.vmid();
    // The worker met a lock (a backup): wait, then look again.
    wait_out_locks(&mut op.locks(), || async move {
        let status = op.retry(|| qemu.status()).await?;
        if status.is_running() == running {
            return Ok(());
        }
        let ha_managed = status.is_ha_managed();
        let upid = if running {
            vm.power_task(
                || qemu.start(),
                || async { Ok(qemu.status().await?.is_running()) },
            )
            .await?
        } else {
            // A clean shutdown first; PVE stops it hard after the timeout.
            vm.power_task(
                || qemu.shutdown(Some(60), true),
                || async { Ok(!qemu.status().await?.is_running()) },
            )
            .await?
        };
        let Some(upid) = upid else { return Ok(()) };
        match op.wait(&upid).await {
            // The task was only the request: the HA manager acts later.
            Ok(_) if ha_managed => settle(vm, running).await,
            Ok(_) => Ok(()),
            Err(locked) if locked.lock().is_some() => Err(locked),
            Err(error) => {
                // Another task brought it there first (`VM … already running`): the state
                // we want is what counts.
                let now = op.retry(|| qemu.status()).await?;
                if now.is_running() != running {
                    return Err(error);
                }
                tracing::info!(
                    vmid,
                    running,
                    "the power task failed, but the VM is already as wanted"
                );
                Ok(())
            }
        }
    })
    .await
}

/// Starts a VM this create's own clone made: it has not run yet, so no status is read first
/// (#42); the ownership read before the start finds a concurrent create that took it over.
/// Returns that read: a start writes nothing to the config, so the create's next write
/// (the finish) is decided from it ([`OwnedVm::conditional_from`]); none after an HA
/// start, which may have placed the VM on another node.
pub(super) async fn start_own_clone(vm: &OwnedVm<'_>) -> Step<Option<Seen>> {
    let qemu = &vm.qemu();
    let op = vm.op();
    wait_out_locks(&mut op.locks(), || async move {
        let seen = vm.read().await?;
        let upid = vm
            .send_power_task(
                seen.proof(),
                || qemu.start(),
                || async { Ok(qemu.status().await?.is_running()) },
            )
            .await?;
        let Some(upid) = upid else {
            return Ok(Some(seen));
        };
        op.wait(&upid).await?;
        // Under HA the start was a request (`hastart`): the VM itself is waited for.
        if upid.task_type() == "hastart" {
            settle(vm, true).await?;
            return Ok(None);
        }
        Ok(Some(seen))
    })
    .await
}

/// Applies pending changes with one PVE reboot task: PVE finishes it even if this process is
/// killed meanwhile, so the VM never stays stopped half-way. Sent once: after a lost answer
/// the node's task list is asked whether a reboot task of this VM started since, before
/// anything is sent again; a lock met by the task is waited out with a fresh ownership check
/// before the next send.
pub(super) async fn reboot(vm: &OwnedVm<'_>) -> Step<()> {
    let qemu = &vm.qemu();
    let node = &vm.client().node(vm.node());
    let op = vm.op();
    wait_out_locks(&mut op.locks(), || async move {
        // The reboot tasks PVE knows before this send: a new one afterwards is ours (task
        // ids, not clocks, so a node's clock skew cannot mislead the check).
        let known: Vec<String> = op
            .retry(|| node.tasks_of_vm(vm.vmid(), "qmreboot"))
            .await?
            .into_iter()
            .map(|t| t.upid)
            .collect();
        let known = &known;
        let upid = vm
            .power_task(
                || qemu.reboot(Some(60)),
                || async move {
                    let tasks = node.tasks_of_vm(vm.vmid(), "qmreboot").await?;
                    Ok(tasks.iter().any(|t| !known.contains(&t.upid)))
                },
            )
            .await?;
        let Some(upid) = upid else { return Ok(()) };
        if let Err(error) = op.wait(&upid).await {
            return Err(match powerdown_failure(&error) {
                Some(exit) => StepError::Unworkable(refused_reboot_text(vm.vmid(), exit)),
                None => error,
            });
        }
        // qemu-server's reboot ends once the VM stopped; qmeventd (or, for an HA-managed
        // VM, the HA manager) starts it again, so its power state is what counts.
        settle(vm, true).await
    })
    .await
}

/// The exit status of a reboot the guest did not shut down for: qemu-server `_do_vm_stop`
/// (`src/PVE/QemuServer.pm`, 9.2.6), which `vm_reboot` runs without `$force`, dies "VM
/// quit/powerdown failed" when the agent's `guest-shutdown` failed, and "… - got timeout"
/// when the guest was still running at the timeout (an ACPI request it ignored).
fn powerdown_failure(error: &StepError) -> Option<&str> {
    let StepError::Pve(error) = error else {
        return None;
    };
    let exit = error.task_failure()?.exitstatus.as_str();
    exit.starts_with("VM quit/powerdown failed").then_some(exit)
}

/// What a reboot the guest did not shut down for means, by what the guest did with the
/// request, and what the user can do.
fn refused_reboot_text(vmid: u32, exit: &str) -> String {
    let how = if exit.ends_with("got timeout") {
        "ignored it until the timeout (an ACPI power-button event, sent when no guest agent \
         answers: the guest needs systemd-logind or acpid to act on it)"
    } else {
        "refused it (PVE asks through the guest agent when one answers, and this guest's \
         qemu-ga refuses `guest-shutdown`: allow it in its `block-rpcs`/`allow-rpcs`)"
    };
    format!(
        "VM {vmid}'s guest did not shut down for the reboot that applies its pending changes \
         (PVE: \"{exit}\"): it {how}. Nothing else was done: the VM runs on as it was, its \
         changes stay pending, and the next apply tries the reboot again. To apply them now, \
         stop and start the VM in PVE (a stop does not ask the guest)."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_reboot_names_what_the_guest_did_with_the_request() {
        let refused = refused_reboot_text(100, "VM quit/powerdown failed");
        assert!(
            refused.contains("qemu-ga refuses `guest-shutdown`"),
            "{refused}"
        );
        assert!(!refused.contains("ACPI"), "{refused}");
        let ignored = refused_reboot_text(100, "VM quit/powerdown failed - got timeout");
        assert!(ignored.contains("ACPI power-button event"), "{ignored}");
        assert!(!ignored.contains("qemu-ga refuses"), "{ignored}");
        for text in [refused, ignored] {
            assert!(text.contains("its changes stay pending"), "{text}");
        }
    }
}
