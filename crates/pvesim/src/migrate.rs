//! `/nodes/{node}/qemu/{vmid}/migrate`: the precondition (`GET`) and the migration
//! (`POST`), with the checks qemu-server `API2/Qemu.pm` `migrate_vm_precondition` and
//! `migrate_vm` make before the worker; the worker is `migrate_task`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::api::{check_lock, check_quorum, load_vm, require};
use crate::call::{ApiError, ApiResult, Call, Reply};
use crate::guest_volumes::{
    StorageMap, VolumeRef, attached_storages, local_resources, storage_check_enabled, volume_refs,
};
use crate::ha_request::{Request, intercept};
use crate::shared::Shared;
use crate::world::{Vm, World};

/// `$check_vm_disks_local`: volumes not on a shared storage (CD-ROM `none` left out).
pub fn local_disks(world: &World, vm: &Vm) -> Vec<VolumeRef> {
    volume_refs(vm)
        .into_values()
        .filter(|r| {
            let shared_storage = r
                .storage()
                .and_then(|s| world.storage(s))
                .is_some_and(|s| s.shared);
            let empty_cdrom = r.cdrom && r.volid == "none";
            !(shared_storage || r.shared || empty_cdrom)
        })
        .collect()
}

/// `migrate_vm_precondition`.
pub fn precondition(world: &World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    require(world, &format!("/vms/{vmid}"), "VM.Migrate")?;
    check_quorum(world)?;
    let vm = load_vm(world, call.node(), vmid)?;
    check_lock(vm).map_err(ApiError::die)?;
    let mut allowed = Vec::new();
    let mut not_allowed = serde_json::Map::new();
    // An HA-managed VM: `get_resource_motion_info` names the services that follow it and,
    // per node, those in negative affinity that block it there.
    let managed = world.ha.is_managed(vmid);
    let sid = crate::ha_state::vm_sid(vmid);
    let compiled = crate::ha_placement::compiled_rules(world);
    let (dependent, blocking) = if managed {
        crate::ha_placement::motion_info(world, &compiled, &sid)
    } else {
        Default::default()
    };
    for node in world.nodes.iter().filter(|n| n.name != vm.node) {
        let unavailable = unavailable_storages(world, vm, &node.name);
        // `check_local_storage_availability` has an entry (a hash) for every node and the
        // precondition copies each: every other node appears, allowed ones as `{}`.
        let mut info = serde_json::Map::new();
        if !unavailable.is_empty() {
            info.insert("unavailable_storages".into(), json!(unavailable));
        }
        if let Some(blockers) = blocking.get(&node.name) {
            let rows: Vec<Value> = blockers
                .iter()
                .map(|csid| json!({"sid": csid, "cause": "resource-affinity"}))
                .collect();
            info.insert("blocking-ha-resources".into(), Value::Array(rows));
        }
        if info.is_empty() {
            allowed.push(node.name.clone());
        }
        not_allowed.insert(node.name.clone(), Value::Object(info));
    }
    let disks: Vec<Value> = local_disks(world, vm)
        .iter()
        .map(VolumeRef::precondition_json)
        .collect();
    let mut answer = json!({
        "running": i32::from(vm.running),
        "allowed_nodes": allowed,
        "not_allowed_nodes": not_allowed,
        "local_disks": disks,
        "local_resources": local_resources(vm),
        "mapped-resources": [],
        "mapped-resource-info": {},
        "has-dbus-vmstate": 1,
    });
    if managed {
        answer["dependent-ha-resources"] = json!(dependent);
    }
    Ok(Reply::data(answer))
}

/// `check_local_storage_availability` for one node: the drives' storages that are
/// disabled or restricted to other nodes (sorted, once each).
fn unavailable_storages(world: &World, vm: &Vm, node: &str) -> Vec<String> {
    let mut out: Vec<String> = attached_storages(vm)
        .into_iter()
        .filter_map(|(sid, _)| {
            let storage = world.storage(&sid)?;
            let restricted = !World::storage_on_node(storage, node);
            (!storage.enabled || restricted).then_some(sid)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `PVE::QemuServer::check_storage_availability`: every drive's storage is enabled on the
/// target and takes the volume's content type.
fn check_storage_availability(world: &World, vm: &Vm, target: &str) -> Result<(), ApiError> {
    for (sid, volume) in attached_storages(vm) {
        storage_check_enabled(world, &sid, None).map_err(ApiError::die)?;
        storage_check_enabled(world, &sid, Some(target)).map_err(ApiError::die)?;
        let vtype = volume.content_type();
        let takes = world
            .storage(&sid)
            .is_some_and(|s| s.content.iter().any(|c| c == vtype));
        if !takes {
            return Err(ApiError::die(format!(
                "{}: content type '{vtype}' is not available on storage '{sid}'",
                volume.volid
            )));
        }
    }
    Ok(())
}

/// `$check_storage_access_migrate`.
fn check_storage_access(world: &World, sid: &str, target: &str) -> Result<(), ApiError> {
    storage_check_enabled(world, sid, Some(target)).map_err(ApiError::die)?;
    require(world, &format!("/storage/{sid}"), "Datastore.AllocateSpace")?;
    let images = world
        .storage(sid)
        .is_some_and(|s| s.content.iter().any(|c| c == "images"));
    if !images {
        return Err(ApiError::die(format!(
            "storage '{sid}' does not support vm images"
        )));
    }
    Ok(())
}

/// The `targetstorage` checks; returns the map the worker uses.
fn check_target_storage(world: &World, call: &Call, vm: &Vm) -> Result<StorageMap, ApiError> {
    let target = call.str("target").unwrap_or_default();
    let Some(text) = call.str("targetstorage").filter(|t| !t.is_empty()) else {
        check_storage_availability(world, vm, &target)?;
        return Ok(StorageMap::default());
    };
    let map = StorageMap::parse(&text).map_err(|e| {
        ApiError::param("targetstorage", format!("failed to parse storage map: {e}"))
    })?;
    if !map.identity {
        require(world, &format!("/vms/{}", vm.vmid), "VM.Config.Disk")?;
    }
    for sid in map.targets() {
        check_storage_access(world, &sid, &target)?;
    }
    if map.identity {
        check_storage_availability(world, vm, &target)?;
    }
    Ok(map)
}

/// The options only `root@pam` may set.
fn check_root_only(call: &Call) -> Result<(), ApiError> {
    if call.is_internal() {
        return Ok(());
    }
    for key in ["force", "migration_type", "migration_network"] {
        let set = match key {
            "force" => call.bool(key).unwrap_or(false),
            _ => call.str(key).is_some_and(|v| !v.is_empty()),
        };
        if set {
            return Err(ApiError::param(key, "Only root may use this option."));
        }
    }
    Ok(())
}

/// `migrate_vm`: the checks, then `hamigrate` for an HA-managed VM or the `qmigrate` worker.
pub fn migrate_vm(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    require(world, &format!("/vms/{vmid}"), "VM.Migrate")?;
    let target = call.str("target").unwrap_or_default();
    if target == call.node() {
        return Err(ApiError::param("target", "target is local node."));
    }
    check_quorum(world)?;
    if world.node(&target).is_none() {
        return Err(ApiError::die(format!("no such cluster node '{target}'")));
    }
    check_root_only(call)?;
    let vm = load_vm(world, call.node(), vmid)?;
    check_lock(vm).map_err(ApiError::die)?;
    let online = vm.running && call.bool("online").unwrap_or(false);
    if vm.running && !online {
        return Err(ApiError::die("can't migrate running VM without --online"));
    }
    let storagemap = check_target_storage(world, call, vm)?;
    let request = Request::Migrate {
        target: target.clone(),
    };
    if let Some(upid) = intercept(shared, world, call, request) {
        return Ok(Reply::data(json!(upid)));
    }
    let plan = crate::migrate_task::Plan {
        vmid,
        source: call.node().to_string(),
        target,
        online,
        with_local_disks: call.bool("with-local-disks").unwrap_or(false),
        force: call.bool("force").unwrap_or(false),
        storagemap,
    };
    let upid = crate::migrate_task::start(shared, world, &call.token_user(), plan);
    Ok(Reply::data(json!(upid)))
}
