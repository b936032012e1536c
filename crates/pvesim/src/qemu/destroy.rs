//! `DELETE /nodes/{node}/qemu/{vmid}`: qemu-server's `destroy_vm`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::upid_reply;
use crate::api::{check_lock, load_vm, require};
use crate::call::{ApiError, ApiResult, Call};
use crate::ha_request::check_destroy;
use crate::shared::Shared;
use crate::tasks::{TaskLocks, TaskLog, start_task_with_prologue};
use crate::world::{Drive, Vm, World, is_drive_key, volume_owner};

pub fn destroy(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    let node = call.node().to_string();
    require(world, &format!("/vms/{vmid}"), "VM.Allocate")?;
    let vm = load_vm(world, &node, vmid)?;
    if call.params.contains_key("skiplock") {
        return Err(ApiError::param(
            "skiplock",
            "Only root may use this option.",
        ));
    }
    if vm.config.get("protection").is_some_and(|p| p == "1") {
        return Err(ApiError::die(format!(
            "can't remove VM {vmid} - protection mode enabled"
        )));
    }
    let purge = call.bool("purge").unwrap_or(false);
    check_destroy(world, vmid, purge)?;
    if vm.running {
        return Err(ApiError::die(format!(
            "VM {vmid} is running - destroy failed"
        )));
    }
    let unreferenced = call.bool("destroy-unreferenced-disks").unwrap_or(false);
    // qemu-server `destroy_vm` frees the disks (half the task's run time here: the config
    // keeps its mark meanwhile), then leaves the config `lock: destroyed`; the handler's
    // purge and the config's removal end the task a run time later (see
    // `free_and_lock_destroyed`).
    let freeing = Duration::from_millis(world.timings.task("qmdestroy") / 2);
    let task_node = node.clone();
    let upid = start_task_with_prologue(
        shared,
        world,
        &task_node,
        "qmdestroy",
        &vmid.to_string(),
        &call.token_user(),
        TaskLocks::exclusive(vmid),
        (
            freeing,
            Box::new(move |world, log, injected| match injected {
                // A failure the faults inject ends the task before it changes anything.
                Some(_) => Ok(()),
                None => free_and_lock_destroyed(world, log, (&node, vmid), unreferenced),
            }),
        ),
        Box::new(move |world, log, injected| {
            if let Some(failure) = injected {
                return Err(failure);
            }
            if purge {
                crate::ha_request::purge(world, log, vmid);
            }
            world.vms.remove(&vmid);
            for pool in world.pools.values_mut() {
                pool.vms.remove(&vmid);
            }
            Ok(())
        }),
    );
    upid_reply(upid)
}

/// The VM's own volumes (`vm-<vmid>-…`, `base-<vmid>-…`) its drives and `vmstate` name.
fn owned_volumes(vm: &Vm) -> Vec<String> {
    let vmid = vm.vmid;
    vm.config
        .iter()
        .filter(|(k, _)| is_drive_key(k) || k.as_str() == "vmstate")
        .map(|(k, v)| {
            if k == "vmstate" {
                v.clone()
            } else {
                Drive::parse(v).volid
            }
        })
        .filter(|volid| !volid.contains(":iso/") && volid != "none")
        .filter(|volid| {
            volid.contains(&format!("vm-{vmid}-")) || volid.contains(&format!("base-{vmid}-"))
        })
        .collect()
}

/// A template's base volume may still back linked clones.
fn check_no_linked_clone(world: &World, vmid: u32, owned: &[String]) -> Result<(), String> {
    for volid in owned {
        let base = volid.split_once(':').map(|x| x.1).unwrap_or_default();
        let in_use = world.vms.values().any(|other| {
            other.vmid != vmid
                && other
                    .config
                    .values()
                    .any(|v| v.contains(&format!("{base}/")))
        });
        let is_base = crate::world::volume_file_name(volid).starts_with("base-");
        if is_base && in_use {
            return Err(format!(
                "base volume '{volid}' is still in use by linked cloned"
            ));
        }
    }
    Ok(())
}

/// `destroy-unreferenced-disks`: every other image of the VMID on the storages its node
/// sees.
fn remove_unreferenced_volumes(world: &mut World, log: &mut TaskLog, vmid: u32, vm_node: &str) {
    let mut orphans = Vec::new();
    for (scope, vols) in &world.volumes {
        let visible = scope.node.as_ref().is_none_or(|n| *n == vm_node);
        if !visible {
            continue;
        }
        for (volid, volume) in vols {
            if volume.content != "iso" && volume_owner(volid) == Some(vmid) {
                orphans.push(volid.clone());
            }
        }
    }
    for volid in orphans {
        world.remove_volume(&volid, vm_node);
        log.info(format!("Removed unreferenced volume '{volid}'"));
    }
}

/// The first part of qemu-server's `destroy_vm` (`src/PVE/QemuServer.pm`): the lock check,
/// a template's base volumes still backing linked clones, the VM's own disks freed (and
/// with `destroy-unreferenced-disks` every other volume of the VMID), then the config
/// replaced by `{ lock => 'destroyed' }`, which stays until the handler removes the config
/// at the task's end ("else we can have reuse race", `src/PVE/API2/Qemu.pm`).
fn free_and_lock_destroyed(
    world: &mut World,
    log: &mut TaskLog,
    (node, vmid): (&str, u32),
    unreferenced: bool,
) -> Result<(), String> {
    let vm = world.vms.get(&vmid).ok_or_else(|| {
        format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
    })?;
    if vm.lock().is_some_and(|l| l != "suspended") {
        check_lock(vm)?;
    }
    let vm_node = vm.node.clone();
    let owned = owned_volumes(vm);
    check_no_linked_clone(world, vmid, &owned)?;
    for volid in owned {
        if world.remove_volume(&volid, &vm_node).is_some() {
            log.info(format!("Removed volume '{volid}'"));
        } else {
            log.warn(format!(
                "Could not remove disk '{volid}', check manually: no such volume"
            ));
        }
    }
    if unreferenced {
        remove_unreferenced_volumes(world, log, vmid, &vm_node);
    }
    if let Some(vm) = world.vms.get_mut(&vmid) {
        vm.config = BTreeMap::from([("lock".to_string(), "destroyed".to_string())]);
    }
    Ok(())
}
