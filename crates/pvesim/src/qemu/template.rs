//! `POST /nodes/{node}/qemu/{vmid}/template`: turn a VM into a template.

use std::sync::Arc;

use super::{start_vm_task, upid_reply};
use crate::api::{check_lock, load_vm, require};
use crate::call::{ApiError, ApiResult, Call};
use crate::shared::Shared;
use crate::world::{Drive, World, is_drive_key};

pub fn template(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    let node = call.node().to_string();
    let vm = load_vm(world, &node, vmid)?;
    require(world, &format!("/vms/{vmid}"), "VM.Allocate")?;
    check_lock(vm).map_err(ApiError::die)?;
    if vm.is_template() {
        return Err(ApiError::die(format!("VM {vmid} is already a template")));
    }
    if vm.running {
        return Err(ApiError::die(
            "you can't convert a VM to template if VM is running",
        ));
    }
    let upid = start_vm_task(shared, world, call, "qmtemplate", move |world, _log| {
        let vm = world.vms.get(&vmid).ok_or("VM vanished")?;
        let vm_node = vm.node.clone();
        let disks: Vec<(String, Drive)> = vm
            .config
            .iter()
            .filter(|(k, _)| is_drive_key(k) && !k.starts_with("unused"))
            .map(|(k, v)| (k.clone(), Drive::parse(v)))
            .filter(|(_, d)| !d.is_cdrom() && d.volid.contains(&format!("vm-{vmid}-disk-")))
            .collect();
        let mut updates = Vec::new();
        for (key, mut drive) in disks {
            let base = drive
                .volid
                .replace(&format!("vm-{vmid}-disk-"), &format!("base-{vmid}-disk-"));
            if let Some(mut volume) = world.remove_volume(&drive.volid, &vm_node) {
                volume.volid = base.clone();
                let (storage, _) = base.split_once(':').unwrap_or_default();
                let scope = world.scope_for(storage, &vm_node);
                world
                    .volumes
                    .entry(scope)
                    .or_default()
                    .insert(base.clone(), volume);
            }
            drive.volid = base;
            updates.push((key, drive.print()));
        }
        if let Some(vm) = world.vms.get_mut(&vmid) {
            vm.config.extend(updates);
            vm.config.insert("template".into(), "1".into());
        }
        Ok(())
    });
    upid_reply(upid)
}
