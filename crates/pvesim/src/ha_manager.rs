//! The simulated HA manager: one loop per simulator that runs a round of the CRM's state
//! machine (pve-ha-manager `src/PVE/HA/Manager.pm` `manage`) whenever a round was scheduled,
//! `ha_delay_ms` after each request, and does the LRM's work (`src/PVE/HA/LRM.pm`
//! `exec_resource_agent`) as the real API calls the LRM makes as `root@pam`
//! (`Resources/PVEVM.pm`: `vm_start`, `vm_shutdown`/`vm_stop`, `migrate_vm`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::call::{Call, INTERNAL_USER};
use crate::ha_state::{HaResource, Service};
use crate::shared::Shared;
use crate::world::World;

/// Runs rounds as they fall due until the simulator shuts down.
pub async fn run(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let (next, wake) = {
            let world = shared.lock();
            (
                world.ha.wakeups.first().copied(),
                Arc::clone(&world.ha.wake),
            )
        };
        let due = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = due => {
                let mut world = shared.lock();
                let now = Instant::now();
                world.ha.wakeups.retain(|at| *at > now);
                round(&shared, &mut world);
            }
            _ = wake.notified() => {}
            _ = shutdown.changed() => break,
        }
    }
}

fn delay(world: &World) -> Duration {
    Duration::from_millis(world.timings.ha_delay_ms)
}

fn vmid_of(sid: &str) -> Option<u32> {
    sid.strip_prefix("vm:")?.parse().ok()
}

/// One CRM round: services added and removed, commands taken, every service stepped until
/// none changes (as `manage` repeats).
fn round(shared: &Arc<Shared>, world: &mut World) {
    world.ha.last_round = crate::world::unix_now();
    sync_services(world);
    take_commands(world);
    for _ in 0..16 {
        let sids: Vec<String> = world.ha.services.keys().cloned().collect();
        let mut changed = false;
        for sid in sids {
            changed |= step(shared, world, &sid);
        }
        if !changed {
            break;
        }
    }
}

/// A resource whose last change the CRM has not seen yet (younger than the delay).
fn fresh(world: &World, resource: &HaResource) -> bool {
    resource.changed_at + delay(world) > Instant::now()
}

/// `manage`: add new services (`request_start` or `request_stop`), drop stale and ignored.
fn sync_services(world: &mut World) {
    let mut added = Vec::new();
    for (sid, resource) in &world.ha.resources {
        if world.ha.services.contains_key(sid)
            || resource.requested() == "ignored"
            || fresh(world, resource)
        {
            continue;
        }
        let Some(vm) = vmid_of(sid).and_then(|vmid| world.vms.get(&vmid)) else {
            continue;
        };
        let state = if resource.requested() == "started" {
            "request_start"
        } else {
            "request_stop"
        };
        added.push((sid.clone(), Service::new(state, &vm.node)));
    }
    for (sid, service) in added {
        world.ha.log(format!(
            "adding new service '{sid}' on node '{}'",
            service.node
        ));
        world.ha.services.insert(sid, service);
    }
    let resources = &world.ha.resources;
    world.ha.services.retain(|sid, _| {
        resources
            .get(sid)
            .is_some_and(|r| r.requested() != "ignored")
    });
}

/// `update_crm_commands`: due `migrate`/`relocate`/`stop` commands onto their services.
fn take_commands(world: &mut World) {
    let due_before = Instant::now() - delay(world);
    let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut world.ha.commands)
        .into_iter()
        .partition(|c| c.queued_at <= due_before);
    world.ha.commands = later;
    for command in due {
        let words: Vec<&str> = command.text.split_whitespace().collect();
        let (verb, sid, arg) = match words.as_slice() {
            [verb, sid, arg] => (*verb, *sid, *arg),
            _ => continue,
        };
        if verb != "stop" && !world.node_online(arg) {
            let line = format!("crm command error - node not online: {}", command.text);
            world.ha.log(line);
            continue;
        }
        match world.ha.services.get_mut(sid) {
            Some(service) if verb != "stop" && service.node == arg => {}
            Some(service) => service.cmd = Some(vec![verb.to_string(), arg.to_string()]),
            None => {}
        }
    }
}

/// The node is down for longer than the delay and not rebooting: the CRM fences it.
fn offline_delayed(world: &World, node: &str) -> bool {
    down_for(world, node, delay(world))
}

/// The fence took effect (the failed node's LRM lock expired): one more delay after the
/// CRM started fencing, so `fence` shows in the status meanwhile.
fn fenced(world: &World, node: &str) -> bool {
    down_for(world, node, 2 * delay(world))
}

fn down_for(world: &World, node: &str, span: Duration) -> bool {
    world
        .ha
        .nodes_down
        .get(node)
        .is_some_and(|down| !down.rebooting && down.since + span <= Instant::now())
}

fn set_state(world: &mut World, sid: &str, state: &str) {
    if let Some(service) = world.ha.services.get_mut(sid) {
        service.state = state.to_string();
        service.target = None;
        if state != "started" {
            service.running = false;
        }
    }
}

/// `started` or `request_stop`, as the resource's requested state asks.
fn settled_state(resource: &HaResource) -> &'static str {
    if resource.requested() == "started" {
        "started"
    } else {
        "request_stop"
    }
}

/// One step of one service; whether its state changed.
fn step(shared: &Arc<Shared>, world: &mut World, sid: &str) -> bool {
    let (Some(service), Some(resource)) = (
        world.ha.services.get(sid).cloned(),
        world.ha.resources.get(sid).cloned(),
    ) else {
        return false;
    };
    let Some(vmid) = vmid_of(sid).filter(|vmid| world.vms.contains_key(vmid)) else {
        return false;
    };
    let rebooting = world
        .ha
        .nodes_down
        .get(&service.node)
        .is_some_and(|d| d.rebooting);
    if service.busy.is_some() || fresh(world, &resource) {
        return false;
    }
    if rebooting {
        // The LRM's `conditional` shutdown policy freezes the services of a rebooting node.
        let freezes = matches!(
            service.state.as_str(),
            "started" | "stopped" | "request_stop"
        );
        if freezes {
            set_state(world, sid, "freeze");
        }
        return freezes;
    }
    let before = service.state.clone();
    if !world.node_online(&service.node) {
        node_down_step(world, sid, &service, &resource);
    } else {
        match service.state.as_str() {
            "request_start" => set_state(world, sid, "started"),
            "started" => started_step(shared, world, sid, vmid, &service, &resource),
            "request_stop" => stop_step(shared, world, sid, vmid, &service),
            "stopped" => stopped_step(world, sid, vmid, &service, &resource),
            "migrate" | "relocate" => migrate_step(shared, world, sid, vmid, &service, &resource),
            "fence" | "recovery" => recover(world, sid, vmid, &resource),
            "freeze" => set_state(world, sid, settled_state(&resource)),
            "error" if resource.requested() == "disabled" => set_state(world, sid, "stopped"),
            _ => {}
        }
    }
    world
        .ha
        .services
        .get(sid)
        .is_some_and(|s| s.state != before)
}

/// The service's node is down: fence it once the delay has passed, then recover.
fn node_down_step(world: &mut World, sid: &str, service: &Service, resource: &HaResource) {
    let vmid = vmid_of(sid).unwrap_or(0);
    match service.state.as_str() {
        "fence" | "recovery" => recover(world, sid, vmid, resource),
        "error" => {}
        "stopped" if resource.requested() == "disabled" => {}
        _ if offline_delayed(world, &service.node) => {
            set_state(world, sid, "fence");
            let delay = delay(world);
            world.ha.schedule(delay);
        }
        _ => {}
    }
}

/// `next_state_recovery` (after the node was fenced): the best online node takes the VM's
/// config (`steal_service`); without one the service waits in `recovery`.
fn recover(world: &mut World, sid: &str, vmid: u32, resource: &HaResource) {
    let fenced_node = world.ha.services[sid].node.clone();
    if !world.node_online(&fenced_node) && !fenced(world, &fenced_node) {
        return;
    }
    let fenced = fenced_node;
    set_state(world, sid, "recovery");
    let Some(node) = select_node(world, sid, false) else {
        world.ha.log(format!(
            "recovering service '{sid}' from fenced node '{fenced}' failed, no recovery node found"
        ));
        if resource.requested() == "disabled" {
            set_state(world, sid, "stopped");
        }
        return;
    };
    world.ha.log(format!(
        "recover service '{sid}' from fenced node '{fenced}' to node '{node}'"
    ));
    crate::qemu::halt(world, vmid);
    if let Some(vm) = world.vms.get_mut(&vmid) {
        vm.node = node.clone();
        vm.config.remove("lock");
    }
    if let Some(service) = world.ha.services.get_mut(sid) {
        service.node = node;
    }
    set_state(world, sid, settled_state(resource));
}

/// `select_service_node` with the basic scheduler: the online node with the fewest active
/// services (ties by name); `try_next` skips the nodes the service failed on.
fn select_node(world: &World, sid: &str, try_next: bool) -> Option<String> {
    let service = &world.ha.services[sid];
    let score = |node: &str| {
        world
            .ha
            .services
            .iter()
            .filter(|(other, _)| other.as_str() != sid)
            .filter(|(_, s)| s.node == node || s.target.as_deref() == Some(node))
            .filter(|(_, s)| !matches!(s.state.as_str(), "stopped" | "error" | "request_start"))
            .count()
    };
    let mut candidates: Vec<(usize, String)> = world
        .nodes
        .iter()
        .filter(|n| world.node_online(&n.name) && !world.ha.nodes_down.contains_key(&n.name))
        .filter(|n| !try_next || !service.failed_nodes.contains(&n.name))
        .map(|n| (score(&n.name), n.name.clone()))
        .collect();
    candidates.sort();
    candidates.into_iter().next().map(|(_, node)| node)
}

fn started_step(
    shared: &Arc<Shared>,
    world: &mut World,
    sid: &str,
    vmid: u32,
    service: &Service,
    resource: &HaResource,
) {
    if matches!(resource.requested(), "stopped" | "disabled") {
        set_state(world, sid, "request_stop");
        return;
    }
    if let Some(cmd) = &service.cmd {
        take_command(world, sid, service, cmd);
        return;
    }
    if world.vms[&vmid].running {
        if let Some(service) = world.ha.services.get_mut(sid) {
            service.running = true;
        }
        return;
    }
    let params = Map::new();
    let upid = lrm_call(shared, world, vmid, "/status/start", &params);
    watch(shared, world, sid, upid, Action::Start);
}

/// A command in `started`: move the service, or stop it (and persist `state: stopped`).
fn take_command(world: &mut World, sid: &str, service: &Service, cmd: &[String]) {
    let (verb, arg) = (cmd[0].as_str(), cmd[1].clone());
    if let Some(s) = world.ha.services.get_mut(sid) {
        s.cmd = None;
    }
    if verb == "stop" {
        set_state(world, sid, "request_stop");
        if let Some(s) = world.ha.services.get_mut(sid) {
            s.timeout = arg.parse().ok();
        }
        if let Some(resource) = world.ha.resources.get_mut(sid) {
            resource.state = Some("stopped".into());
        }
        world.ha.generation += 1;
    } else if world.node_online(&arg) && arg != service.node {
        world
            .ha
            .log(format!("{verb} service '{sid}' to node '{arg}'"));
        set_state(world, sid, verb);
        if let Some(s) = world.ha.services.get_mut(sid) {
            s.target = Some(arg);
        }
    }
}

fn stop_step(shared: &Arc<Shared>, world: &mut World, sid: &str, vmid: u32, service: &Service) {
    if !world.vms[&vmid].running {
        set_state(world, sid, "stopped");
        return;
    }
    // `PVEVM::shutdown`: a shutdown with forceStop after the timeout, or a hard stop.
    let timeout = service.timeout.unwrap_or(60);
    let mut params = Map::new();
    let path = if timeout == 0 {
        "/status/stop"
    } else {
        params.insert("timeout".into(), json!(timeout));
        params.insert("forceStop".into(), json!(true));
        "/status/shutdown"
    };
    let upid = lrm_call(shared, world, vmid, path, &params);
    watch(shared, world, sid, upid, Action::Stop);
}

fn stopped_step(world: &mut World, sid: &str, vmid: u32, service: &Service, resource: &HaResource) {
    let vm_node = world.vms[&vmid].node.clone();
    if let Some(s) = world.ha.services.get_mut(sid) {
        s.node = vm_node.clone();
    }
    if let Some(cmd) = service.cmd.clone() {
        if let Some(s) = world.ha.services.get_mut(sid) {
            s.cmd = None;
        }
        let target = cmd[1].clone();
        if cmd[0] != "stop" && world.node_online(&target) && target != vm_node {
            set_state(world, sid, &cmd[0]);
            if let Some(s) = world.ha.services.get_mut(sid) {
                s.target = Some(target);
            }
            return;
        }
    }
    if resource.requested() == "started" {
        set_state(world, sid, "request_start");
    }
}

fn migrate_step(
    shared: &Arc<Shared>,
    world: &mut World,
    sid: &str,
    vmid: u32,
    service: &Service,
    resource: &HaResource,
) {
    let Some(target) = service.target.clone() else {
        set_state(world, sid, settled_state(resource));
        return;
    };
    if world.vms[&vmid].node == target {
        moved(world, sid, &target, resource);
        return;
    }
    // `PVEVM::migrate`: a relocation shuts the VM down first.
    let online = service.state == "migrate" && world.vms[&vmid].running;
    if !online {
        crate::qemu::halt(world, vmid);
    }
    let mut params = Map::new();
    params.insert("target".into(), json!(target));
    params.insert("online".into(), json!(online));
    params.insert("with-local-disks".into(), json!(true));
    params.insert("force".into(), json!(true));
    let upid = lrm_call(shared, world, vmid, "/migrate", &params);
    watch(shared, world, sid, upid, Action::Migrate);
}

fn moved(world: &mut World, sid: &str, node: &str, resource: &HaResource) {
    if let Some(s) = world.ha.services.get_mut(sid) {
        s.node = node.to_string();
    }
    set_state(world, sid, settled_state(resource));
}

/// The API call the LRM makes on the service's node, as `root@pam`; its UPID, or the
/// error it died with.
fn lrm_call(
    shared: &Arc<Shared>,
    world: &mut World,
    vmid: u32,
    leaf: &str,
    params: &Map<String, Value>,
) -> Result<String, String> {
    let node = world.vms[&vmid].node.clone();
    let path = BTreeMap::from([
        ("node".to_string(), node),
        ("vmid".to_string(), vmid.to_string()),
    ]);
    let template = match leaf {
        "/status/start" => "/nodes/{node}/qemu/{vmid}/status/start",
        "/status/stop" => "/nodes/{node}/qemu/{vmid}/status/stop",
        "/status/shutdown" => "/nodes/{node}/qemu/{vmid}/status/shutdown",
        _ => "/nodes/{node}/qemu/{vmid}/migrate",
    };
    let call = Call {
        method: "POST",
        template,
        path: &path,
        params,
        user: INTERNAL_USER,
        token_name: "",
        now: Instant::now(),
        upload: None,
    };
    let result = match leaf {
        "/status/start" => crate::qemu::start(shared, world, &call),
        "/status/stop" => crate::qemu::stop(shared, world, &call),
        "/status/shutdown" => crate::qemu::shutdown(shared, world, &call),
        _ => crate::migrate::migrate_vm(shared, world, &call),
    };
    match result {
        Ok(reply) => Ok(reply.data.as_str().unwrap_or_default().to_string()),
        Err(error) => Err(error.message.trim_end().to_string()),
    }
}

/// What an LRM task was for.
#[derive(Debug, Clone, Copy)]
enum Action {
    Start,
    Stop,
    Migrate,
}

/// Marks the service busy until the LRM task ends, then records its result and schedules
/// the round that reads it.
fn watch(
    shared: &Arc<Shared>,
    world: &mut World,
    sid: &str,
    upid: Result<String, String>,
    action: Action,
) {
    let upid = match upid {
        Ok(upid) => upid,
        Err(error) => {
            world.ha.log(format!("service '{sid}': {error}"));
            record(world, sid, action, false);
            return;
        }
    };
    if let Some(s) = world.ha.services.get_mut(sid) {
        s.busy = Some(upid.clone());
    }
    let shared = Arc::clone(shared);
    let sid = sid.to_string();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let mut world = shared.lock();
            // A task that vanished counts as failed.
            let ok = match world.tasks.get(&upid).map(|t| t.exitstatus.clone()) {
                Some(None) => continue,
                Some(Some(exit)) => crate::tasks::exit_ok(&exit),
                None => false,
            };
            if let Some(s) = world.ha.services.get_mut(&sid) {
                s.busy = None;
            }
            record(&mut world, &sid, action, ok);
            return;
        }
    });
}

/// The CRM's reading of an LRM result (`next_state_started`, `next_state_request_stop`,
/// `next_state_migrate_relocate`).
fn record(world: &mut World, sid: &str, action: Action, ok: bool) {
    let (Some(service), Some(resource)) = (
        world.ha.services.get(sid).cloned(),
        world.ha.resources.get(sid).cloned(),
    ) else {
        return;
    };
    let vm_node = vmid_of(sid)
        .and_then(|vmid| world.vms.get(&vmid))
        .map(|vm| vm.node.clone());
    match (action, ok) {
        (Action::Start, true) => {
            if let Some(s) = world.ha.services.get_mut(sid) {
                s.running = true;
                s.failed_nodes.clear();
            }
        }
        (Action::Start, false) => start_failed(world, sid, &service, &resource),
        (Action::Stop, true) => set_state(world, sid, "stopped"),
        (Action::Stop, false) => set_state(world, sid, "error"),
        (Action::Migrate, _) => {
            let target = service.target.clone().unwrap_or_default();
            if ok && vm_node.as_deref() == Some(target.as_str()) {
                moved(world, sid, &target, &resource);
            } else {
                world
                    .ha
                    .log(format!("service '{sid}' - migration failed (exit code 1)"));
                moved(world, sid, &service.node, &resource);
            }
        }
    }
    let delay = delay(world);
    world.ha.schedule(delay);
}

/// `next_state_started` after an LRM start error: relocate while `max_relocate` allows,
/// else `error`.
fn start_failed(world: &mut World, sid: &str, service: &Service, resource: &HaResource) {
    let failed = {
        let Some(s) = world.ha.services.get_mut(sid) else {
            return;
        };
        s.running = false;
        s.failed_nodes.push(service.node.clone());
        s.failed_nodes.clone()
    };
    if failed.len() > resource.max_relocate() {
        world.ha.log(format!(
            "recovery policy for service {sid} failed, entering error state. Failed nodes: {}",
            failed.join(", ")
        ));
        set_state(world, sid, "error");
        return;
    }
    world.ha.log(format!(
        "starting service {sid} on node '{}' failed, relocating service.",
        service.node
    ));
    if let Some(node) = select_node(world, sid, true).filter(|n| *n != service.node) {
        set_state(world, sid, "migrate");
        if let Some(s) = world.ha.services.get_mut(sid) {
            s.target = Some(node);
        }
    }
}
