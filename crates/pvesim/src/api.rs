//! Helpers the handlers share: permission checks, VM lookups and index listings.

use serde_json::{Value, json};

use crate::call::ApiError;
use crate::world::{Vm, World};

/// `Permission check failed (<path>, <priv>)` unless the token holds the privilege.
pub fn require(world: &World, path: &str, privilege: &str) -> Result<(), ApiError> {
    if world.has_privilege(path, privilege) {
        Ok(())
    } else {
        Err(ApiError::perm(format!("{path}, {privilege}")))
    }
}

/// Any of several privileges (`check_any`): `(<path>, A|B)`.
pub fn require_any(world: &World, path: &str, privileges: &[&str]) -> Result<(), ApiError> {
    if privileges.iter().any(|p| world.has_privilege(path, p)) {
        Ok(())
    } else {
        Err(ApiError::perm(format!("{path}, {}", privileges.join("|"))))
    }
}

/// `AbstractConfig::load_config` on the addressed node.
pub fn load_vm<'w>(world: &'w World, node: &str, vmid: u32) -> Result<&'w Vm, ApiError> {
    world
        .vms
        .get(&vmid)
        .filter(|vm| vm.node == node)
        .ok_or_else(|| {
            ApiError::die(format!(
                "Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            ))
        })
}

/// `assert_config_exists_on_node` (status endpoints).
pub fn vm_on_node<'w>(world: &'w World, node: &str, vmid: u32) -> Result<&'w Vm, ApiError> {
    world
        .vms
        .get(&vmid)
        .filter(|vm| vm.node == node)
        .ok_or_else(|| {
            ApiError::die(format!(
                "unable to find configuration file for VM {vmid} on node '{node}'"
            ))
        })
}

/// pmxcfs is writable only with quorum: more than half of the nodes online
/// (`PVE::Cluster::check_cfs_quorum`).
pub fn check_quorum(world: &World) -> Result<(), ApiError> {
    let online = world
        .nodes
        .iter()
        .filter(|n| world.node_online(&n.name))
        .count();
    if online * 2 <= world.nodes.len() {
        return Err(ApiError::die("cluster not ready - no quorum?"));
    }
    Ok(())
}

pub fn check_lock(vm: &Vm) -> Result<(), String> {
    match vm.lock() {
        Some(lock) => Err(format!("VM is locked ({lock})")),
        None => Ok(()),
    }
}

/// Directory listing rows (`[{"subdir": "x"}, ...]`) as PVE's index endpoints return.
pub fn subdirs(key: &str, names: &[&str]) -> Value {
    Value::Array(names.iter().map(|n| json!({ key: n })).collect())
}
