//! `/nodes/{node}/qemu/...`: VMs, clone, config, resize, power, destroy; one module each.

mod clone;
mod config;
mod create;
mod destroy;
mod new_disk;
mod power;
mod resize;
mod template;

pub use clone::clone;
pub use config::{config_get, config_post, config_put, pending};
pub use create::create;
pub use destroy::destroy;
pub(crate) use power::halt;
pub use power::{
    reboot, reset, resume, shutdown, start, status_current, status_index, stop, suspend,
};
pub use resize::resize;
pub use template::template;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::api::{load_vm, require, subdirs};
use crate::call::{ApiError, ApiResult, Call, Reply};
use crate::shared::Shared;
use crate::tasks::{
    TaskBody, TaskLocks, TaskLog, TaskPrologue, start_locked_task, start_task_with_prologue,
};
use crate::world::{Net, World, vm_status_json};

fn upid_reply(upid: String) -> ApiResult {
    Ok(Reply::data(json!(upid)))
}

/// A task on one VM holding its config lock, as most VM endpoints start one; a failure
/// injected for the task ends it before `body` runs.
fn start_vm_task(
    shared: &Arc<Shared>,
    world: &mut World,
    call: &Call,
    task_type: &str,
    body: impl FnOnce(&mut World, &mut TaskLog) -> Result<(), String> + Send + 'static,
) -> String {
    start_vm_task_after(shared, world, call, task_type, None, body)
}

/// As [`start_vm_task`], the worker first waiting `wait` once it holds the lock (PVE's wait
/// for a guest that ignores a shutdown), before its run time and its end.
fn start_vm_task_after(
    shared: &Arc<Shared>,
    world: &mut World,
    call: &Call,
    task_type: &str,
    wait: Option<Duration>,
    body: impl FnOnce(&mut World, &mut TaskLog) -> Result<(), String> + Send + 'static,
) -> String {
    let vmid = call.vmid();
    let (node, id, user) = (call.node(), vmid.to_string(), call.token_user());
    let locks = TaskLocks::exclusive(vmid);
    let body: TaskBody = Box::new(move |world, log, injected| match injected {
        Some(failure) => Err(failure),
        None => body(world, log),
    });
    match wait {
        None => start_locked_task(shared, world, node, task_type, &id, &user, locks, body),
        Some(wait) => {
            let waiting: (Duration, TaskPrologue) = (wait, Box::new(|_, _, _| Ok(())));
            start_task_with_prologue(
                shared, world, node, task_type, &id, &user, locks, waiting, body,
            )
        }
    }
}

pub fn list(world: &World, call: &Call) -> ApiResult {
    let node = call.node();
    // `full=1` asks QMP too: `qmpstatus` (paused) and the running machine, but no `ha`/`agent`.
    let full = call.bool("full").unwrap_or(false);
    let rows: Vec<Value> = world
        .vms
        .values()
        .filter(|vm| vm.node == node)
        .filter(|vm| world.has_privilege(&format!("/vms/{}", vm.vmid), "VM.Audit"))
        .map(|vm| {
            let mut row = vm_status_json(vm, call.now, full);
            if let Some(row) = row.as_object_mut() {
                row.remove("ha");
                row.remove("agent");
            }
            row
        })
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

pub fn index(world: &World, call: &Call) -> ApiResult {
    load_vm(world, call.node(), call.vmid())?;
    require(world, &format!("/vms/{}", call.vmid()), "VM.Audit")?;
    Ok(Reply::data(subdirs(
        "subdir",
        &[
            "config",
            "pending",
            "status",
            "unlink",
            "vncproxy",
            "termproxy",
            "migrate",
            "resize",
            "move",
            "rrd",
            "rrddata",
            "monitor",
            "agent",
            "snapshot",
            "spiceproxy",
            "sendkey",
            "firewall",
            "mtunnel",
            "remote_migrate",
        ],
    )))
}

/// `SDN.Use` on `/sdn/zones/localnetwork/<bridge>[/<tag>]` (pve-guest-common
/// `GuestHelpers.pm` `check_vnet_access`).
fn check_bridge_access(world: &World, net: &Net) -> Result<(), ApiError> {
    let Some(bridge) = net.bridge() else {
        return Ok(());
    };
    let path = match net.options.get("tag") {
        Some(tag) => format!("/sdn/zones/localnetwork/{bridge}/{tag}"),
        None => format!("/sdn/zones/localnetwork/{bridge}"),
    };
    require(world, &path, "SDN.Use")
}
