//! The simulated HA manager: one loop per simulator that runs a round of the CRM's state
//! machine (pve-ha-manager 5.2.0 `src/PVE/HA/Manager.pm` `manage`) whenever a round was
//! scheduled, `ha_delay_ms` after each request, and does the LRM's work
//! (`src/PVE/HA/LRM.pm` `exec_resource_agent`, `handle_service_exitcode`) as the real API
//! calls the LRM makes as `root@pam` (`Resources/PVEVM.pm`: `vm_start`,
//! `vm_shutdown`/`vm_stop`, `migrate_vm`). Where services go is `ha_placement`'s answer,
//! with the HA rules; requested moves pass `ha_motion`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::call::Call;
use crate::ha_placement::{Preference, cluster_nodes, select_node};
use crate::ha_rules::Compiled;
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

/// One CRM round: the node list, services added and removed, the rules compiled, commands
/// taken, every service stepped until none changes (as `manage` repeats).
fn round(shared: &Arc<Shared>, world: &mut World) {
    world.ha.last_round = crate::world::unix_now();
    world.ha.crm_nodes = cluster_nodes(world);
    sync_services(world);
    let compiled = compile_rules(world);
    take_commands(world, &compiled);
    for _ in 0..16 {
        let sids: Vec<String> = world.ha.services.keys().cloned().collect();
        let mut changed = false;
        for sid in sids {
            changed |= step(shared, world, &compiled, &sid);
        }
        if !changed {
            break;
        }
    }
}

/// `Rules->transform` and `compile`; the dropped rules are logged when the rules changed.
fn compile_rules(world: &mut World) -> Compiled {
    let (compiled, dropped) =
        crate::ha_rules::compile(&world.ha.rules.rules, &cluster_nodes(world));
    let generation = world.ha.rules.generation;
    if world.ha.rules_compiled != Some(generation) {
        world.ha.rules_compiled = Some(generation);
        for line in dropped {
            world.ha.log(line);
        }
    }
    compiled
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
    world
        .ha
        .restart_tries
        .retain(|sid, _| resources.contains_key(sid));
}

/// `update_crm_commands`: the commands queued at least a delay ago.
fn take_commands(world: &mut World, compiled: &Compiled) {
    let due_before = Instant::now() - delay(world);
    let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut world.ha.commands)
        .into_iter()
        .partition(|c| c.queued_at <= due_before);
    world.ha.commands = later;
    for command in due {
        crate::ha_motion::crm_command(world, compiled, &command.text);
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

/// `change_service_state`: a new state keeps the node and the failed nodes; the command,
/// target, timeout and the running flag of the old one are gone.
fn set_state(world: &mut World, sid: &str, state: &str) {
    if let Some(service) = world.ha.services.get_mut(sid) {
        service.state = state.to_string();
        service.target = None;
        service.cmd = None;
        service.timeout = None;
        service.running = false;
    }
}

/// A move to `target` (`migrate` or `relocate`), as `change_service_state` with a target.
fn set_moving(world: &mut World, sid: &str, verb: &str, target: &str) {
    set_state(world, sid, verb);
    if let Some(service) = world.ha.services.get_mut(sid) {
        service.target = Some(target.to_string());
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
fn step(shared: &Arc<Shared>, world: &mut World, compiled: &Compiled, sid: &str) -> bool {
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
    let lrm = Lrm { shared, vmid };
    if !world.node_online(&service.node) {
        node_down_step(world, compiled, sid, &service, &resource);
    } else {
        match service.state.as_str() {
            "request_start" => request_start_step(world, compiled, sid, &service),
            "request_start_balance" => balance_step(&lrm, world, sid, &service, &resource),
            "started" => started_step(&lrm, world, compiled, sid, &service, &resource),
            "request_stop" => stop_step(&lrm, world, sid, &service),
            "stopped" => stopped_step(&lrm, world, sid, &service, &resource),
            "migrate" | "relocate" => migrate_step(&lrm, world, sid, &service, &resource),
            "fence" | "recovery" => recover(world, compiled, sid, vmid, &resource),
            "freeze" => set_state(world, sid, settled_state(&resource)),
            "error" => error_step(world, sid, &resource),
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
fn node_down_step(
    world: &mut World,
    compiled: &Compiled,
    sid: &str,
    service: &Service,
    resource: &HaResource,
) {
    let vmid = vmid_of(sid).unwrap_or(0);
    match service.state.as_str() {
        "fence" | "recovery" => recover(world, compiled, sid, vmid, resource),
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

/// `$fence_recovery_cleanup`: the locks safe to remove once the old node was reset.
const REMOVABLE_LOCKS: &[&str] = &[
    "backup",
    "mounted",
    "migrate",
    "clone",
    "rollback",
    "snapshot",
    "snapshot-delete",
    "suspending",
    "suspended",
];

/// `next_state_recovery` (after the node was fenced): the best node the rules allow takes
/// the VM's config (`steal_service`); without one the service waits in `recovery`.
fn recover(world: &mut World, compiled: &Compiled, sid: &str, vmid: u32, resource: &HaResource) {
    let fenced_node = world.ha.services[sid].node.clone();
    if !world.node_online(&fenced_node) && !fenced(world, &fenced_node) {
        return;
    }
    set_state(world, sid, "recovery");
    let Some(node) = select_node(world, compiled, sid, Preference::BestScore) else {
        world.ha.log(format!(
            "recovering service '{sid}' from fenced node '{fenced_node}' failed, no recovery \
             node found"
        ));
        if resource.requested() == "disabled" {
            if let Some(service) = world.ha.services.get_mut(sid) {
                service.failed_nodes.clear();
            }
            set_state(world, sid, "stopped");
        }
        return;
    };
    let line = if node == fenced_node {
        format!("recover service '{sid}' to previous failed and fenced node '{node}' again")
    } else {
        format!("recover service '{sid}' from fenced node '{fenced_node}' to node '{node}'")
    };
    world.ha.log(line);
    crate::qemu::halt(world, vmid);
    let mut removed = None;
    if let Some(vm) = world.vms.get_mut(&vmid) {
        vm.node = node.clone();
        if vm
            .lock()
            .is_some_and(|lock| REMOVABLE_LOCKS.contains(&lock))
        {
            removed = vm.config.remove("lock");
        }
    }
    if let Some(lock) = removed {
        world.ha.log(format!(
            "removed leftover lock '{lock}' from recovered service '{sid}' to allow its start."
        ));
    }
    if let Some(service) = world.ha.services.get_mut(sid) {
        service.node = node;
    }
    set_state(world, sid, settled_state(resource));
}

/// `next_state_error`: only `disabled` gets a service out of `error`.
fn error_step(world: &mut World, sid: &str, resource: &HaResource) {
    if resource.requested() == "disabled" {
        if let Some(service) = world.ha.services.get_mut(sid) {
            service.failed_nodes.clear();
        }
        set_state(world, sid, "stopped");
    }
}

/// The LRM of the service's node: its API calls as `root@pam`.
struct Lrm<'a> {
    shared: &'a Arc<Shared>,
    vmid: u32,
}

/// `next_state_started` without an LRM result: a command, the node the rules want
/// (`select_service_node` with `none`, so a service moves where its rules say), and the
/// LRM's `started` (start the VM when it is not running).
fn started_step(
    lrm: &Lrm,
    world: &mut World,
    compiled: &Compiled,
    sid: &str,
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
    let wanted = select_node(world, compiled, sid, Preference::Stay);
    if let Some(node) = wanted.filter(|node| *node != service.node) {
        world.ha.log(format!(
            "migrate service '{sid}' to node '{node}' (running)"
        ));
        set_moving(world, sid, "migrate", &node);
        return;
    }
    if world.vms[&lrm.vmid].running {
        if let Some(service) = world.ha.services.get_mut(sid) {
            service.running = true;
        }
        return;
    }
    let upid = lrm_call(lrm, world, "/status/start", &Map::new());
    watch(lrm.shared, world, sid, upid, Action::Start);
}

/// A command in `started`: move the service, or stop it (and persist `state: stopped`).
fn take_command(world: &mut World, sid: &str, service: &Service, cmd: &[String]) {
    let (verb, arg) = (cmd[0].as_str(), cmd[1].clone());
    if let Some(s) = world.ha.services.get_mut(sid) {
        s.cmd = None;
    }
    if verb == "stop" {
        let line = if arg == "0" {
            format!("request immediate service hard-stop for service '{sid}'")
        } else {
            format!("request graceful stop with timeout '{arg}' for service '{sid}'")
        };
        world.ha.log(line);
        set_state(world, sid, "request_stop");
        if let Some(s) = world.ha.services.get_mut(sid) {
            s.timeout = arg.parse().ok();
        }
        if let Some(resource) = world.ha.resources.get_mut(sid) {
            resource.state = Some("stopped".into());
        }
        world.ha.generation += 1;
    } else if !crate::ha_placement::online_nodes(world).contains(&arg) {
        world.ha.log(format!(
            "ignore service '{sid}' {verb} request - node '{arg}' not online"
        ));
    } else if arg == service.node {
        world.ha.log(format!(
            "ignore service '{sid}' {verb} request - service already on node '{arg}'"
        ));
    } else {
        world
            .ha
            .log(format!("{verb} service '{sid}' to node '{arg}'"));
        set_moving(world, sid, verb, &arg);
    }
}

fn stop_step(lrm: &Lrm, world: &mut World, sid: &str, service: &Service) {
    if !world.vms[&lrm.vmid].running {
        set_state(world, sid, "stopped");
        return;
    }
    let upid = lrm_stop(lrm, world, service.timeout);
    watch(lrm.shared, world, sid, upid, Action::Stop);
}

/// `PVEVM::shutdown`: a shutdown with `forceStop` after the timeout (default 60), or a hard
/// stop for timeout 0.
fn lrm_stop(lrm: &Lrm, world: &mut World, timeout: Option<i64>) -> Result<String, String> {
    let timeout = timeout.unwrap_or(60);
    let mut params = Map::new();
    let path = if timeout == 0 {
        "/status/stop"
    } else {
        params.insert("timeout".into(), json!(timeout));
        params.insert("forceStop".into(), json!(true));
        "/status/shutdown"
    };
    lrm_call(lrm, world, path, &params)
}

/// `next_state_stopped`, then the LRM's `stopped`: a VM still running is shut down (its
/// result is not the CRM's business).
fn stopped_step(lrm: &Lrm, world: &mut World, sid: &str, service: &Service, resource: &HaResource) {
    let vm_node = world.vms[&lrm.vmid].node.clone();
    if service.node != vm_node {
        world.ha.log(format!(
            "fixup service '{sid}' location ({} => {vm_node})",
            service.node
        ));
    }
    if let Some(s) = world.ha.services.get_mut(sid) {
        s.node = vm_node.clone();
    }
    if let Some(cmd) = service.cmd.clone() {
        if let Some(s) = world.ha.services.get_mut(sid) {
            s.cmd = None;
        }
        let target = cmd[1].clone();
        let online = crate::ha_placement::online_nodes(world).contains(&target);
        if cmd[0] == "stop" {
            world.ha.log(format!(
                "ignore service '{sid}' stop request - service already stopped"
            ));
        } else if online && target != vm_node {
            set_moving(world, sid, &cmd[0], &target);
            return;
        }
    }
    if resource.requested() == "started" {
        set_state(world, sid, "request_start");
        return;
    }
    if world.vms[&lrm.vmid].running {
        let upid = lrm_stop(lrm, world, None);
        watch(lrm.shared, world, sid, upid, Action::Enforce);
    }
}

/// `next_state_request_start`: with `ha-rebalance-on-start`, the start goes to the node
/// `select_service_node` scores best (`best-score`, the rules applied); another node than
/// the current one makes the service `request_start_balance` with that target.
fn request_start_step(world: &mut World, compiled: &Compiled, sid: &str, service: &Service) {
    if world.ha.rebalance_on_start {
        let selected = select_node(world, compiled, sid, Preference::BestScore)
            .unwrap_or_else(|| service.node.clone());
        let which = if selected == service.node {
            "current"
        } else {
            "new"
        };
        world.ha.log(format!(
            "service {sid}: re-balance selected {which} node {selected} for startup"
        ));
        if selected != service.node {
            set_moving(world, sid, "request_start_balance", &selected);
            return;
        }
    }
    set_state(world, sid, "started");
}

/// The LRM's `request_start_balance` (`LRM.pm` `exec_resource_agent`) and the CRM's reading
/// of it (`next_state_request_start_balance`): a VM already running stays where it is
/// (`IGNORED`); a stopped one is relocated to the target like `relocate`, and starts there,
/// or where it is when the move fails.
fn balance_step(lrm: &Lrm, world: &mut World, sid: &str, service: &Service, resource: &HaResource) {
    if world.vms[&lrm.vmid].running {
        world.ha.log(format!(
            "ignoring rebalance-on-start for service {sid} - already running"
        ));
        world.ha.log(format!(
            "service '{sid}' - rebalance-on-start request ignored - service already running"
        ));
        moved(world, sid, &service.node, resource);
        return;
    }
    migrate_step(lrm, world, sid, service, resource);
}

fn migrate_step(lrm: &Lrm, world: &mut World, sid: &str, service: &Service, resource: &HaResource) {
    let Some(target) = service.target.clone() else {
        set_state(world, sid, settled_state(resource));
        return;
    };
    if world.vms[&lrm.vmid].node == target {
        moved(world, sid, &target, resource);
        return;
    }
    // `PVEVM::migrate`: a relocation shuts the VM down first.
    let online = service.state == "migrate" && world.vms[&lrm.vmid].running;
    if !online {
        crate::qemu::halt(world, lrm.vmid);
    }
    let mut params = Map::new();
    params.insert("target".into(), json!(target));
    params.insert("online".into(), json!(online));
    params.insert("with-local-disks".into(), json!(true));
    params.insert("force".into(), json!(true));
    let upid = lrm_call(lrm, world, "/migrate", &params);
    watch(lrm.shared, world, sid, upid, Action::Migrate);
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
    lrm: &Lrm,
    world: &mut World,
    leaf: &str,
    params: &Map<String, Value>,
) -> Result<String, String> {
    let vmid = lrm.vmid;
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
    let call = Call::internal(template, &path, params);
    let shared = lrm.shared;
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
    /// The LRM's `stopped` command, whose result the CRM does not read.
    Enforce,
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
    let Some(service) = world.ha.services.get_mut(sid) else {
        return;
    };
    service.busy = Some(upid.clone());
    // The result belongs to this state (PVE keys LRM results by the state's `uid`).
    let state = service.state.clone();
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
            let Some(service) = world.ha.services.get_mut(&sid) else {
                return;
            };
            service.busy = None;
            if service.state == state {
                record(&mut world, &sid, action, ok);
            } else {
                let delay = delay(&world);
                world.ha.schedule(delay);
            }
            return;
        }
    });
}

/// The CRM's reading of an LRM result (`next_state_started`, `next_state_request_stop`,
/// `next_state_migrate_relocate`), after the LRM's restart policy
/// (`handle_service_exitcode`).
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
        (Action::Start, true) => start_succeeded(world, sid, &service),
        (Action::Start, false) => {
            if !restart_again(world, sid, &resource) {
                start_failed(world, sid, &service, &resource);
            }
        }
        (Action::Stop, true) => set_state(world, sid, "stopped"),
        (Action::Stop, false) => {
            world
                .ha
                .log(format!("service '{sid}' stop failed (exit code 1)"));
            set_state(world, sid, "error");
        }
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
        (Action::Enforce, _) => {}
    }
    let delay = delay(world);
    world.ha.schedule(delay);
}

fn start_succeeded(world: &mut World, sid: &str, service: &Service) {
    world.ha.restart_tries.insert(sid.to_string(), 0);
    if !service.failed_nodes.is_empty() {
        world.ha.log(format!(
            "relocation policy successful for '{sid}' on node '{}', failed nodes: {}",
            service.node,
            service.failed_nodes.join(", ")
        ));
    }
    if let Some(s) = world.ha.services.get_mut(sid) {
        s.running = true;
        s.failed_nodes.clear();
    }
}

/// The LRM's restart policy: up to `max_restart` more tries on the same node before the
/// CRM hears of the failure. Whether it tries again.
fn restart_again(world: &mut World, sid: &str, resource: &HaResource) -> bool {
    let tries = world.ha.restart_tries.entry(sid.to_string()).or_insert(0);
    if *tries >= resource.max_restart() {
        let line = format!("unable to start service {sid} on local node after {tries} retries");
        *tries = 0;
        world.ha.log(line);
        return false;
    }
    *tries += 1;
    let line = format!("restart policy: retry number {tries} for service '{sid}'");
    world.ha.log(line);
    true
}

/// `next_state_started` after an LRM start error: relocate while `max_relocate` allows
/// (`select_service_node` with `try-next`), else `error`.
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
    let compiled = crate::ha_placement::compiled_rules(world);
    match select_node(world, &compiled, sid, Preference::TryNext) {
        Some(node) if node != service.node => {
            world.ha.log(format!(
                "migrate service '{sid}' to node '{node}' (running)"
            ));
            set_moving(world, sid, "migrate", &node);
        }
        Some(_) => {}
        None => world.ha.log(format!(
            "Start Error Recovery: Tried all available nodes for service '{sid}', retry start \
             on current node. Tried nodes: {}",
            failed.join(", ")
        )),
    }
}
