//! `/cluster/ha/groups[/{group}]` (pve-ha-manager 5.2.0 `src/PVE/API2/HA/Groups.pm`): PVE 9
//! migrated HA groups to node-affinity rules, and pve-sim's world has no group, so
//! `have_groups_been_migrated` holds and every group endpoint refuses, after its
//! permission check, with the handler's own text.

use crate::api::require;
use crate::call::{ApiError, ApiResult, Call};
use crate::world::World;

/// Each handler's first check: `cannot <what>: ha groups have been migrated to rules`.
pub fn refuse(world: &World, call: &Call) -> ApiResult {
    let (privilege, what) = match (call.method, call.template) {
        ("GET", "/cluster/ha/groups") => ("Sys.Audit", "index groups"),
        ("GET", _) => ("Sys.Audit", "read group"),
        ("POST", _) => ("Sys.Console", "create group"),
        ("PUT", _) => ("Sys.Console", "update group"),
        _ => ("Sys.Console", "delete group"),
    };
    require(world, "/", privilege)?;
    Err(ApiError::die(format!(
        "cannot {what}: ha groups have been migrated to rules"
    )))
}
