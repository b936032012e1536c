//! Power under HA. For a VM the HA stack manages, qemu-server turns a start, stop or
//! shutdown into a request (`API2/Qemu.pm` `vm_start`, `vm_stop`, `vm_shutdown`: a
//! `hastart` or `hastop` task that runs `ha-manager set|crm-command` and ends at once); the
//! HA manager acts on it at its next rounds. So the task's end says nothing of the VM: each
//! power step of an HA-managed VM waits for the VM's own state (`status/current`) instead.
//! A reboot is not routed through HA (`vm_reboot` runs `qmreboot` itself, and the VM is
//! started again by qmeventd or the HA manager), and is waited for the same way.

use std::time::Duration;

use pve::{Backoff, ErrorKind};

use super::error::{Step, StepError, unworkable};
use super::owned::OwnedVm;

/// Polls the VM's status until it runs (`running`) or is stopped, within the operation's
/// deadline.
pub(super) async fn settle(vm: &OwnedVm<'_>, running: bool) -> Step<()> {
    // The HA manager acts in rounds of about ten seconds on PVE (sub-second in pve-sim).
    let mut polls = Backoff::new(
        Duration::from_millis(100),
        Duration::from_secs(3),
        vm.deadline(),
    );
    loop {
        let node = vm.node().to_owned();
        match vm.op().retry(|| vm.qemu().status()).await {
            Ok(status) if status.is_running() == running => return Ok(()),
            Ok(status) => {
                let ha = status.ha.filter(|ha| ha.managed);
                tracing::debug!(
                    vmid = vm.vmid(),
                    running,
                    ?ha,
                    "waiting for the VM's power state"
                );
                if !polls.pause().await {
                    let ha_state = ha.map(|ha| ha.state.unwrap_or_default());
                    return not_settled(vm, running, ha_state.as_deref());
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound && !running => return Ok(()),
            // Started on another node (`ha-rebalance-on-start` relocates a stopped VM
            // first): followed there.
            Err(e) if e.kind() == ErrorKind::NotFound && vm.followed(&node).await? => {}
            Err(e) => return Err(StepError::from(e)),
        }
    }
}

fn not_settled(vm: &OwnedVm<'_>, running: bool, ha_state: Option<&str>) -> Step<()> {
    let wanted = if running { "started" } else { "stopped" };
    let (vmid, node) = (vm.vmid(), &vm.node());
    match ha_state {
        Some(state) => unworkable(format!(
            "VM {vmid} on {node} is HA-managed: PVE passed the request to the HA manager, which \
            had not {wanted} it when the timeout ran out (its HA state: `{state}`). \
            `ha-manager status` says why; a service in `error` leaves it only with \
            `ha-manager set vm:{vmid} --state disabled`."
        )),
        None => unworkable(format!(
            "VM {vmid} on {node} was not {wanted} when the timeout ran out; its task log on \
            the node says why."
        )),
    }
}
