//! The HA state a destroy meets, read before anything is written.
//!
//! qemu-server's `destroy_vm` (`PVE/API2/Qemu.pm`, 9.2.6) asks nothing of the HA state: with
//! `purge` it destroys any stopped VM that is an HA resource and removes the resource
//! (`early_checks`, then `delete_service_from_config`). What the HA state decides is the
//! stop before it: for an HA-managed VM a stop is a request (`vm_stop`: `ha-manager
//! crm-command stop`), which pve-ha-manager refuses for a service in `error`
//! (`API2/HA/Resources.pm` `check_service_state`: "service 'vm:N' in error state, must be
//! disabled and fixed first"), and which the CRM drops when a migration is under way
//! (`HA/Manager.pm` `change_service_state` clears the queued command). So: a VM that is not
//! running is destroyed without a stop, whatever its HA state; a running VM in `error` is
//! refused before any write with the command that gets it out; a VM the HA manager is moving
//! is waited for (within the delete timeout) and found where it landed.
//!
//! A VM outside HA costs nothing more: the cluster listing the delete reads anyway says
//! whether it is an HA resource (`hastate`), and only then is its status read.

use std::time::Duration;

use pve::cluster::ha::CrmState;
use pve::{Backoff, ErrorKind};

use super::super::error::{Step, StepError, unworkable};
use super::super::owned::{OwnedVm, Seen};
use crate::context::Configured;

/// Whether the destroy sends a stop first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopFirst {
    /// The VM may run (or is not an HA resource: its stop is sent without a status read, as
    /// before, since PVE's stop of a stopped VM ends at once).
    Yes,
    /// The VM does not run: no stop request, which the HA stack could refuse.
    No,
}

/// The VM as the destroy should act on it: where it is now (after a move the HA manager
/// made), the read that proves it ours, and whether it is stopped first.
pub(super) async fn before_destroy<'a>(
    configured: &Configured,
    vm: OwnedVm<'a>,
    seen: Seen,
    known_ha: bool,
) -> Step<(OwnedVm<'a>, Seen, StopFirst)> {
    if !known_ha && !listed_as_ha(configured, vm.vmid()).await? {
        return Ok((vm, seen, StopFirst::Yes));
    }
    let (mut vm, mut seen) = (vm, seen);
    let mut polls = Backoff::new(
        Duration::from_millis(100),
        Duration::from_secs(3),
        vm.deadline(),
    );
    let mut waited = false;
    loop {
        let status = match vm.op().retry(|| vm.qemu().status()).await {
            Ok(status) => status,
            // Moved by the HA manager since it was located: found where it is now.
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let Some(node) = now_on(&vm).await? else {
                    return Ok((vm, seen, StopFirst::No));
                };
                vm = vm.on_node(&node);
                seen = vm.read().await?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let crm_state = status
            .ha
            .as_ref()
            .filter(|ha| ha.managed)
            .and_then(|ha| ha.state.as_deref())
            .map(CrmState::parse);
        let running = status.is_running();
        match crm_state {
            Some(state) if state.is_moving() => {
                tracing::debug!(
                    vmid = vm.vmid(),
                    ?state,
                    "waiting for the HA manager's move"
                );
                if !polls.pause().await {
                    return still_moving(&vm, state);
                }
                waited = true;
            }
            Some(CrmState::Error) if running => return Err(refused_in_error(&vm)),
            _ => {
                if waited {
                    // The config the destroy writes conditionally must be this one.
                    seen = vm.read().await?;
                }
                return Ok((vm, seen, stop_first(running, crm_state)));
            }
        }
    }
}

/// A VM that runs is stopped first; one that does not is stopped first only when the HA
/// manager may start it meanwhile (a service meant to run), so the stop request makes it
/// `stopped` as before. A service `stopped` (or `disabled`) or in `error`, and a VM the HA
/// stack does not manage (`ignored`), get no request.
fn stop_first(running: bool, crm_state: Option<CrmState>) -> StopFirst {
    match crm_state {
        _ if running => StopFirst::Yes,
        None | Some(CrmState::Stopped | CrmState::Error) => StopFirst::No,
        Some(_) => StopFirst::Yes,
    }
}

/// Whether the cluster listing (read once per provider process, which the delete located
/// the VM with) shows the VM as an HA resource.
async fn listed_as_ha(configured: &Configured, vmid: u32) -> Step<bool> {
    let listing = configured
        .runtime
        .cluster_vms_once(&configured.client, false)
        .await?;
    Ok(listing
        .iter()
        .any(|row| row.vmid == vmid && row.hastate.is_some()))
}

/// The node the VM is on now, from a fresh listing; `None` when it is gone.
async fn now_on(vm: &OwnedVm<'_>) -> Step<Option<String>> {
    let cluster = vm.client().cluster();
    let entry = vm.op().retry(|| cluster.locate_vm(vm.vmid())).await?;
    Ok(entry.map(|entry| entry.node))
}

fn refused_in_error(vm: &OwnedVm<'_>) -> StepError {
    let vmid = vm.vmid();
    StepError::DestroyRefused {
        vmid,
        node: vm.node().to_owned(),
        why: format!(
            "it runs and its HA service vm:{vmid} is in the `error` state, in which the HA \
             stack refuses to stop it (PVE would answer \"service 'vm:{vmid}' in error state, \
             must be disabled and fixed first\"), and PVE destroys no running VM"
        ),
        hint: format!(
            "Disable the service, which stops the VM (`ha-manager set vm:{vmid} --state \
             disabled`, or PVE web UI: Datacenter > HA > Resources), and run destroy again."
        ),
    }
}

fn still_moving<T>(vm: &OwnedVm<'_>, state: CrmState) -> Step<T> {
    unworkable(format!(
        "VM {} is an HA resource that the HA manager was still moving ({state:?}) when the \
         delete timeout ran out; nothing was changed. `ha-manager status` shows the move; run \
         destroy again once it has ended.",
        vm.vmid()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_vm_that_may_run_is_stopped_first() {
        assert_eq!(stop_first(true, Some(CrmState::Stopped)), StopFirst::Yes);
        assert_eq!(stop_first(true, None), StopFirst::Yes);
        for state in [None, Some(CrmState::Stopped), Some(CrmState::Error)] {
            assert_eq!(stop_first(false, state), StopFirst::No, "{state:?}");
        }
        for state in [CrmState::Started, CrmState::RequestStop, CrmState::Recovery] {
            assert_eq!(stop_first(false, Some(state)), StopFirst::Yes, "{state:?}");
        }
    }
}
