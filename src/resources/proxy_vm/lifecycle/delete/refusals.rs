//! What PVE's destroy would refuse, found before the delete writes anything: a refused
//! destroy must leave the VM as it was (not marked, not stopped, its seed still there).
//!
//! qemu-server's `destroy_vm` (`PVE/API2/Qemu.pm`) checks, in its `early_checks`: the
//! `protection` flag ("can't remove VM N - protection mode enabled"), an HA resource or a
//! replication job when `purge` is not set, and a running VM; its permission check is
//! `VM.Allocate` on `/vms/{vmid}`. Our destroy always sends `purge=1` (which removes the HA
//! resource and the replication jobs) and stops the VM first, which needs `VM.PowerMgmt`; the
//! seed's delete needs `Datastore.Allocate` on its storage. So what is left to check is the
//! protection flag and those privileges.

use pve::qemu::VmConfig;

use super::super::error::{Step, StepError};
use super::super::owned::OwnedVm;
use super::seed::RecordedSeed;
use crate::context::Configured;

/// Stops with [`StepError::DestroyRefused`] when PVE would refuse a step of the destroy.
pub(super) async fn check_destroy_allowed(
    configured: &Configured,
    vm: &OwnedVm<'_>,
    config: &VmConfig,
    seed: Option<&RecordedSeed<'_>>,
) -> Step<()> {
    let refused = |why: String, hint: String| StepError::DestroyRefused {
        vmid: vm.vmid(),
        node: vm.node().to_owned(),
        why,
        hint,
    };
    if config.get_str("protection").as_deref() == Some("1") {
        return Err(refused(
            format!(
                "its protection flag is set (PVE would answer \"can't remove VM {} - protection \
                 mode enabled\")",
                vm.vmid()
            ),
            format!(
                "Turn protection off (PVE web UI: VM {} > Options > Protection, or `qm set {} \
                 --protection 0`) and run destroy again.",
                vm.vmid(),
                vm.vmid()
            ),
        ));
    }
    let vm_path = format!("/vms/{}", vm.vmid());
    let mut needed = vec![(vm_path.clone(), "VM.Allocate"), (vm_path, "VM.PowerMgmt")];
    if let Some((storage, _)) = seed.and_then(|s| s.volume.split_once(':')) {
        needed.push((format!("/storage/{storage}"), "Datastore.Allocate"));
    }
    for (path, privilege) in needed {
        let held = configured
            .facts
            .holds(&configured.client, &path, privilege)
            .await
            .map_err(|e| StepError::Pve(Box::new((*e).clone())))?;
        if !*held {
            return Err(refused(
                format!("the API token lacks {privilege} on {path}"),
                format!(
                    "Grant it to the token's role (docs/guides/pve-setup.md lists the role), e.g. \
                     `pveum acl modify {path} --tokens 'USER@REALM!TOKEN' --roles ROLE`, and run \
                     destroy again."
                ),
            ));
        }
    }
    Ok(())
}
