//! The boot phase of create and update: the VM started (or stopped) as wanted, and the one
//! reboot that applies pending changes. Each power task is sent right after a check that the
//! VM is still this instance's, and a lost answer is checked before anything is sent again.

use pve::{MaybeLocked, wait_out_locks};

use super::error::Step;
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
        op.wait(&upid).await?;
        // qemu-server's reboot ends once the VM stopped; qmeventd (or, for an HA-managed
        // VM, the HA manager) starts it again, so its power state is what counts.
        settle(vm, true).await
    })
    .await
}
