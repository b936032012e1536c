//! Node events through the admin API (`POST /_sim/nodes/{node}/reboot|fail|recover`): a
//! node that reboots, fails or comes back, and what its boot does: pve-manager
//! `PVE/API2/Nodes.pm` `startall` starts the `onboot` VMs that are not HA-managed, in
//! `startup` order, waiting each VM's `up` delay (3 s by default) after starting it; the
//! HA stack starts its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, json};
use tokio::time::Instant;

use crate::call::Call;
use crate::ha_state::NodeDown;
use crate::http::{HttpResponse, json_response, plain_error};
use crate::shared::Shared;
use crate::world::World;

/// `nodes/{node}/{event}` after `/_sim/`.
pub fn handle(shared: &Arc<Shared>, path: &str) -> HttpResponse {
    let parts: Vec<&str> = path.split('/').collect();
    let [_, node, event] = parts.as_slice() else {
        return plain_error(404, "expected /_sim/nodes/{node}/reboot|fail|recover");
    };
    let outcome = {
        let mut world = shared.lock();
        match *event {
            "reboot" => go_down(&mut world, node, true),
            "fail" => go_down(&mut world, node, false),
            "recover" => come_back(&mut world, node),
            _ => Err(format!("no node event '{event}'")),
        }
    };
    if let Err(message) = outcome {
        return plain_error(400, &message);
    }
    let node = node.to_string();
    match *event {
        "reboot" => {
            let shared = Arc::clone(shared);
            tokio::spawn(async move {
                let down = shared.lock().timings.node_reboot_ms;
                tokio::time::sleep(Duration::from_millis(down)).await;
                come_back(&mut shared.lock(), &node).ok();
                startall(shared, node).await;
            });
        }
        "recover" => {
            tokio::spawn(startall(Arc::clone(shared), node.clone()));
        }
        _ => {}
    }
    json_response(
        200,
        None,
        &json!({ "node": path.split('/').nth(1), "event": event }),
    )
}

/// The node goes offline (595 for every request addressed to it) and every VM on it stops.
/// A failed node's HA services are fenced and recovered elsewhere; a rebooting node's are
/// frozen until it is back.
fn go_down(world: &mut World, node: &str, rebooting: bool) -> Result<(), String> {
    let Some(index) = world.nodes.iter().position(|n| n.name == node) else {
        return Err(format!("no such node '{node}'"));
    };
    if !world.nodes[index].online {
        return Err(format!("node '{node}' is already offline"));
    }
    world.nodes[index].online = false;
    let on_node: Vec<u32> = world
        .vms
        .values()
        .filter(|vm| vm.node == node)
        .map(|vm| vm.vmid)
        .collect();
    for vmid in on_node {
        crate::qemu::halt(world, vmid);
    }
    let since = Instant::now();
    world
        .ha
        .nodes_down
        .insert(node.to_string(), NodeDown { since, rebooting });
    let delay = Duration::from_millis(world.timings.ha_delay_ms);
    world.ha.schedule(delay);
    Ok(())
}

/// The node is online again; the HA manager looks at its services after the delay.
fn come_back(world: &mut World, node: &str) -> Result<(), String> {
    let Some(index) = world.nodes.iter().position(|n| n.name == node) else {
        return Err(format!("no such node '{node}'"));
    };
    if world.nodes[index].online {
        return Err(format!("node '{node}' is online"));
    }
    world.nodes[index].online = true;
    world.ha.nodes_down.remove(node);
    let delay = Duration::from_millis(world.timings.ha_delay_ms);
    world.ha.schedule(delay);
    Ok(())
}

/// A `startup` property string: `order` (the default key), `up`, `down`.
fn startup(value: Option<&String>) -> (u64, Option<u64>) {
    let mut order = u64::MAX;
    let mut up = None;
    for part in value.map(String::as_str).unwrap_or_default().split(',') {
        match part.split_once('=') {
            Some(("order", v)) => order = v.parse().unwrap_or(order),
            Some(("up", v)) => up = v.parse().ok(),
            Some(_) => {}
            None => order = part.parse().unwrap_or(order),
        }
    }
    (order, up)
}

/// `get_start_stop_list`: the node's `onboot` VMs that are not templates and not
/// HA-managed, by order then VMID, with their `up` delay.
fn start_list(world: &World, node: &str) -> BTreeMap<u64, Vec<(u32, Option<u64>)>> {
    let mut list: BTreeMap<u64, Vec<(u32, Option<u64>)>> = BTreeMap::new();
    for vm in world.vms.values() {
        let onboot = vm.config.get("onboot").is_some_and(|v| v == "1");
        if vm.node != node || !onboot || vm.is_template() || world.ha.is_managed(vm.vmid) {
            continue;
        }
        let (order, up) = startup(vm.config.get("startup"));
        list.entry(order).or_default().push((vm.vmid, up));
    }
    list
}

/// `startall`: each order group in turn, each VM started as `root@pam` and followed by its
/// `up` delay; the next group once every start of this one has ended.
async fn startall(shared: Arc<Shared>, node: String) {
    let list = start_list(&shared.lock(), &node);
    for (_, group) in list {
        let mut started = Vec::new();
        for (vmid, up) in group {
            let (upid, second) = {
                let mut world = shared.lock();
                (
                    start_vm(&shared, &mut world, &node, vmid),
                    world.timings.startup_second_ms,
                )
            };
            started.extend(upid);
            let wait = up.unwrap_or(3) * second;
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        while started.iter().any(|upid| {
            let world = shared.lock();
            world
                .tasks
                .get(upid)
                .is_some_and(|t| t.exitstatus.is_none())
        }) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// `vm_start` as startall calls it, unless the VM runs already (or left the node).
fn start_vm(shared: &Arc<Shared>, world: &mut World, node: &str, vmid: u32) -> Option<String> {
    let vm = world.vms.get(&vmid)?;
    if vm.running || vm.node != node || !world.node_online(node) {
        return None;
    }
    let path = BTreeMap::from([
        ("node".to_string(), node.to_string()),
        ("vmid".to_string(), vmid.to_string()),
    ]);
    let params = Map::new();
    let call = Call::internal("/nodes/{node}/qemu/{vmid}/status/start", &path, &params);
    let reply = crate::qemu::start(shared, world, &call).ok()?;
    reply.data.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_order_is_the_default_key() {
        assert_eq!(
            startup(Some(&"order=2,up=30,down=60".to_string())),
            (2, Some(30))
        );
        assert_eq!(startup(Some(&"3".to_string())), (3, None));
        assert_eq!(startup(Some(&"up=5".to_string())), (u64::MAX, Some(5)));
        assert_eq!(startup(None), (u64::MAX, None));
    }
}
