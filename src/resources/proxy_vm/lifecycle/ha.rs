//! The HA resource of a VM with `ha` (pve-ha-manager 5.2.0 `API2/HA/Resources.pm`): added
//! by the create after the VM is configured and before its start, as qemu-server's create
//! with `ha-managed` does (`API2/Qemu.pm` `create_vm`: `ha-manager add vm:N --state
//! started|stopped`, then the start, an HA request); changed in place by an update, each
//! change conditional on the digest of the resources file it was decided from (another
//! writer in between makes PVE refuse it, and it is decided again from a fresh read);
//! removed by an update that drops `ha`. A destroy removes it with the VM (`purge`).
//!
//! Each write comes right after a read of the VM that proves it this instance's.

use pve::ErrorKind;
use pve::cluster::ha::{HaResource, vm_sid};

use super::super::model::{Desired, HaSpec};
use super::error::{Step, unworkable};
use super::owned::OwnedVm;

/// How often a change met another writer's before it gives up.
const CONFLICT_TRIES: usize = 5;

/// Makes the VM the HA resource `desired.ha` asks for (and removes it when `ha` was dropped).
/// `fresh`: the VM is this create's own new clone, so no resource can exist yet and none is
/// read first.
pub(super) async fn ensure(vm: &OwnedVm<'_>, desired: &Desired, fresh: bool) -> Step<()> {
    let Some(spec) = &desired.ha else {
        if desired.ha_before {
            return remove(vm).await;
        }
        return Ok(());
    };
    let ha = vm.client().cluster().ha();
    let sid = vm_sid(vm.vmid());
    if fresh {
        vm.read().await?;
        let settings = spec.settings(desired.started);
        match vm.op().retry(|| ha.add_resource(&sid, &settings)).await {
            Ok(()) => return Ok(()),
            // A lost answer whose add took, or a resource another writer added: checked below.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
    }
    for _ in 0..CONFLICT_TRIES {
        if change(vm, spec, desired.started).await? {
            return Ok(());
        }
    }
    unworkable(format!(
        "the HA resource {sid} kept changing while this apply tried to change it; something \
         else is editing PVE's HA resources"
    ))
}

/// One read of the resource and the change it needs: an add when there is none, a `PUT`
/// conditional on the digest read when it differs. False when another writer came between
/// the read and the write (decided again from a fresh read).
async fn change(vm: &OwnedVm<'_>, spec: &HaSpec, started: bool) -> Step<bool> {
    let ha = vm.client().cluster().ha();
    let sid = vm_sid(vm.vmid());
    let Some(resource) = read(vm).await? else {
        vm.read().await?;
        let settings = spec.settings(started);
        return match vm.op().retry(|| ha.add_resource(&sid, &settings)).await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e.into()),
        };
    };
    let Some((settings, delete)) = spec.changes(started, &resource) else {
        return Ok(true);
    };
    vm.read().await?;
    let digest = resource.digest.as_deref();
    // Not retried: a lost answer is found out by the next read (the digest moved on).
    match ha.update_resource(&sid, &settings, &delete, digest).await {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::Conflict => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Takes the VM out of HA (`ha` dropped from the configuration); the VM stays as it is.
async fn remove(vm: &OwnedVm<'_>) -> Step<()> {
    let ha = vm.client().cluster().ha();
    let sid = vm_sid(vm.vmid());
    vm.read().await?;
    match vm.op().retry(|| ha.delete_resource(&sid)).await {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// The VM's HA resource, `None` when it is none.
pub(super) async fn read(vm: &OwnedVm<'_>) -> Step<Option<HaResource>> {
    let ha = vm.client().cluster().ha();
    let sid = vm_sid(vm.vmid());
    match vm.op().retry(|| ha.resource(&sid)).await {
        Ok(resource) => Ok(Some(resource)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The HA resource of VM `vmid`, for a refresh: `None` when it is none.
pub async fn observe_resource(client: &pve::Client, vmid: u32) -> Step<Option<HaResource>> {
    let ha = client.cluster().ha();
    let sid = vm_sid(vmid);
    match super::operation::read(|| ha.resource(&sid)).await {
        Ok(resource) => Ok(Some(resource)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}
