//! `/nodes/{node}/qemu/{vmid}/status/...`: power state and the power commands.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{start_vm_task_after, upid_reply};
use crate::agent::{blocked_command, pings_from};
use crate::api::{check_lock, require, subdirs, vm_on_node};
use crate::call::{ApiError, ApiResult, Call, Reply};
use crate::ha_request::{Request, intercept};
use crate::shared::Shared;
use crate::tasks::TaskLog;
use crate::world::{Drive, World, agent_enabled, is_drive_key, vm_status_json};

pub fn status_index(world: &World, call: &Call) -> ApiResult {
    vm_on_node(world, call.node(), call.vmid())?;
    Ok(Reply::data(subdirs(
        "subdir",
        &[
            "current", "start", "stop", "reset", "shutdown", "suspend", "reboot", "resume",
        ],
    )))
}

pub fn status_current(world: &World, call: &Call) -> ApiResult {
    require(world, &format!("/vms/{}", call.vmid()), "VM.Audit")?;
    let vm = vm_on_node(world, call.node(), call.vmid())?;
    let mut row = vm_status_json(vm, call.now, true);
    row["ha"] = crate::ha_api::service_status(world, vm.vmid);
    Ok(Reply::data(row))
}

fn power_task(
    shared: &Arc<Shared>,
    world: &mut World,
    call: &Call,
    task_type: &str,
    body: impl FnOnce(&mut World, &mut TaskLog, u32) -> Result<(), String> + Send + 'static,
) -> ApiResult {
    power_task_after(shared, world, call, task_type, None, body)
}

/// As [`power_task`], the worker waiting `wait` (for a guest that ignores it) before its
/// run time and its end.
fn power_task_after(
    shared: &Arc<Shared>,
    world: &mut World,
    call: &Call,
    task_type: &str,
    wait: Option<Duration>,
    body: impl FnOnce(&mut World, &mut TaskLog, u32) -> Result<(), String> + Send + 'static,
) -> ApiResult {
    let vmid = call.vmid();
    let upid = start_vm_task_after(shared, world, call, task_type, wait, move |world, log| {
        if !world.vms.contains_key(&vmid) {
            return Err(format!("VM {vmid} does not exist"));
        }
        body(world, log, vmid)
    });
    upid_reply(upid)
}

fn power_prechecks(world: &World, call: &Call) -> Result<(), ApiError> {
    require(world, &format!("/vms/{}", call.vmid()), "VM.PowerMgmt")?;
    vm_on_node(world, call.node(), call.vmid())?;
    if call.params.contains_key("skiplock") {
        return Err(ApiError::param(
            "skiplock",
            "Only root may use this option.",
        ));
    }
    Ok(())
}

/// Boots the guest: pending changes applied, then cloud-init and the agent (`cloud_init`).
fn boot(world: &mut World, vmid: u32) {
    let pid = world.alloc_pid();
    let Some(vm) = world.vms.get_mut(&vmid) else {
        return;
    };
    let pending = std::mem::take(&mut vm.pending);
    vm.config.extend(pending);
    for key in std::mem::take(&mut vm.pending_delete) {
        vm.config.remove(&key);
    }
    vm.running = true;
    vm.paused = false;
    vm.pid = pid;
    let now = Instant::now();
    vm.started_at = Some(now);
    crate::cloud_init::boot(world, vmid, now);
}

pub(crate) fn halt(world: &mut World, vmid: u32) {
    if let Some(vm) = world.vms.get_mut(&vmid) {
        crate::cloud_init::halt(vm, Instant::now());
        vm.running = false;
        vm.paused = false;
        vm.agent = None;
        vm.started_at = None;
        vm.pid = 0;
    }
}

pub fn start(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    power_prechecks(world, call)?;
    if let Some(upid) = intercept(shared, world, call, Request::Start) {
        return upid_reply(upid);
    }
    power_task(shared, world, call, "qmstart", |world, log, vmid| {
        let vm = &world.vms[&vmid];
        let resume = vm.lock() == Some("suspended");
        if !resume {
            check_lock(vm)?;
        }
        if vm.is_template() {
            return Err("you can't start a vm if it's a template".into());
        }
        if vm.running {
            return Err(format!("VM {vmid} already running"));
        }
        // The command line needs every NIC's bridge on this node: qemu-server's
        // `print_netdev_full` reads its MTU with pve-common's `read_bridge_mtu`, which dies
        // "bridge '<bridge>' does not exist". Pending values apply before (vmconfig_apply_pending).
        let bridges = world
            .node(&vm.node)
            .map(|n| n.bridges.clone())
            .unwrap_or_default();
        let mut nics: BTreeMap<&String, &String> = vm
            .config
            .iter()
            .filter(|(key, _)| !vm.pending_delete.contains(*key))
            .collect();
        nics.extend(&vm.pending);
        for (key, value) in nics {
            if key
                .strip_prefix("net")
                .is_none_or(|i| i.parse::<u8>().is_err())
            {
                continue;
            }
            let bridge = value
                .split(',')
                .find_map(|part| part.strip_prefix("bridge="));
            if let Some(bridge) = bridge
                && !bridges.iter().any(|b| b == bridge)
            {
                return Err(format!("bridge '{bridge}' does not exist"));
            }
        }
        // QEMU needs every attached volume (the seed ISO too) to exist on this node.
        for (key, value) in &vm.config {
            if !is_drive_key(key) || key.starts_with("unused") {
                continue;
            }
            let drive = Drive::parse(value);
            if !drive.volid.contains(':') {
                continue;
            }
            if world.volume(&drive.volid, &vm.node).is_none() {
                return Err(format!("volume '{}' does not exist", drive.volid));
            }
        }
        if resume {
            log.info("Resuming suspended VM");
            let node = world.vms[&vmid].node.clone();
            let state = world.vms.get_mut(&vmid).and_then(|vm| {
                vm.config.remove("lock");
                vm.config.remove("vmstate")
            });
            if let Some(volid) = state {
                world.remove_volume(&volid, &node);
            }
        }
        boot(world, vmid);
        Ok(())
    })
}

pub fn stop(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    power_prechecks(world, call)?;
    if world.ha.is_managed(call.vmid())
        && !call.is_internal()
        && call.bool("overrule-shutdown").unwrap_or(false)
    {
        return Err(ApiError::param(
            "overrule-shutdown",
            "Not applicable for HA resources.",
        ));
    }
    if let Some(upid) = intercept(shared, world, call, Request::Stop { timeout: 0 }) {
        return upid_reply(upid);
    }
    power_task(shared, world, call, "qmstop", |world, _log, vmid| {
        check_lock(&world.vms[&vmid])?;
        halt(world, vmid);
        Ok(())
    })
}

fn check_running_for(world: &World, call: &Call, verb: &str) -> Result<(), ApiError> {
    let vm = vm_on_node(world, call.node(), call.vmid())?;
    if !vm.running {
        return Err(ApiError::die(format!("VM {} not running", vm.vmid)));
    }
    if vm.paused && !(verb == "shutdown" && call.bool("forceStop").unwrap_or(false)) {
        return Err(ApiError::die(format!("VM is paused - cannot {verb}")));
    }
    Ok(())
}

pub fn shutdown(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    power_prechecks(world, call)?;
    let paused = vm_on_node(world, call.node(), call.vmid())?.paused;
    if paused && !call.bool("forceStop").unwrap_or(false) {
        return Err(ApiError::die("VM is paused - cannot shutdown"));
    }
    let timeout = call.int("timeout").unwrap_or(60);
    if let Some(upid) = intercept(shared, world, call, Request::Stop { timeout }) {
        return upid_reply(upid);
    }
    check_running_for(world, call, "shutdown")?;
    let force = call.bool("forceStop").unwrap_or(false);
    let asked = Asked::of(world, call.vmid());
    let wait = asked.wait(world, timeout);
    power_task_after(
        shared,
        world,
        call,
        "qmshutdown",
        wait,
        move |world, log, vmid| {
            check_lock(&world.vms[&vmid])?;
            power_down(world, log, vmid, asked, force)
        },
    )
}

/// qemu-server `vm_reboot` (`src/PVE/QemuServer.pm`, 9.2.6): `_do_vm_stop` with
/// `$shutdown` and no `$force`, so a guest that refuses the shutdown fails the task and runs
/// on (qmeventd starts only a VM that stopped).
pub fn reboot(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    power_prechecks(world, call)?;
    check_running_for(world, call, "reboot")?;
    let asked = Asked::of(world, call.vmid());
    let wait = asked.wait(world, call.int("timeout").unwrap_or(60));
    power_task_after(
        shared,
        world,
        call,
        "qmreboot",
        wait,
        move |world, log, vmid| {
            check_lock(&world.vms[&vmid])?;
            power_down(world, log, vmid, asked, false)?;
            boot(world, vmid);
            Ok(())
        },
    )
}

/// How qemu-server's `_do_vm_stop` with `$shutdown` (`src/PVE/QemuServer.pm`, 9.2.6) asks
/// the guest, decided when its worker starts: QGA `guest-shutdown` when the config enables
/// the agent and `qga_check_running`'s ping answers, else ACPI `system_powerdown`; a paused
/// VM is not asked (the API turns a forced shutdown into a stop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    /// The guest shuts down.
    Heeded,
    /// The agent's `guest-shutdown` failed (blocked in qemu-ga): the command fails at once.
    AgentRefused,
    /// The ACPI event is ignored (`acpi_ignored`): PVE waits out `timeout` seconds.
    AcpiIgnored,
}

impl Asked {
    fn of(world: &World, vmid: u32) -> Asked {
        let Some(vm) = world.vms.get(&vmid) else {
            return Asked::Heeded;
        };
        if vm.paused {
            return Asked::Heeded;
        }
        let agent_on = vm.config.get("agent").is_some_and(|v| agent_enabled(v));
        let pings = pings_from(world, vm).is_some_and(|at| Instant::now() >= at);
        if agent_on && pings {
            return match blocked_command(world, vm, "guest-shutdown") {
                Some(_) => Asked::AgentRefused,
                None => Asked::Heeded,
            };
        }
        let name = vm
            .config
            .get("name")
            .map(String::as_str)
            .unwrap_or_default();
        let ignores = world
            .faults
            .acpi_ignored
            .iter()
            .any(|re| regex::Regex::new(re).is_ok_and(|re| re.is_match(name)));
        match ignores {
            true => Asked::AcpiIgnored,
            false => Asked::Heeded,
        }
    }

    /// How long the worker waits for the guest before its end: `timeout` seconds for an
    /// ignored request.
    fn wait(self, world: &World, timeout: i64) -> Option<Duration> {
        let seconds = u64::try_from(timeout).unwrap_or(0);
        (self == Asked::AcpiIgnored)
            .then(|| Duration::from_millis(seconds * world.timings.shutdown_second_ms))
    }
}

/// `_do_vm_stop`'s end for a guest asked as `asked`: a refused command fails the task ("VM
/// quit/powerdown failed"), a timeout too ("… - got timeout"), and the VM runs on; with
/// `force` (`forceStop`) QEMU is terminated after the warning instead.
fn power_down(
    world: &mut World,
    log: &mut TaskLog,
    vmid: u32,
    asked: Asked,
    force: bool,
) -> Result<(), String> {
    match (asked, force) {
        (Asked::Heeded, _) => {}
        (Asked::AgentRefused, false) => return Err("VM quit/powerdown failed".into()),
        (Asked::AgentRefused, true) => {
            log.warn("VM quit/powerdown failed - terminating now with SIGTERM");
        }
        (Asked::AcpiIgnored, false) => {
            return Err("VM quit/powerdown failed - got timeout".into());
        }
        (Asked::AcpiIgnored, true) => log.warn("VM still running - terminating now with SIGTERM"),
    }
    halt(world, vmid);
    Ok(())
}

pub fn reset(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    power_prechecks(world, call)?;
    let vm = vm_on_node(world, call.node(), call.vmid())?;
    check_lock(vm).map_err(ApiError::die)?;
    if !vm.running {
        return Err(ApiError::die(format!("VM {} not running", vm.vmid)));
    }
    power_task(shared, world, call, "qmreset", |world, _log, vmid| {
        halt(world, vmid);
        boot(world, vmid);
        Ok(())
    })
}

pub fn suspend(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    power_prechecks(world, call)?;
    let vm = vm_on_node(world, call.node(), call.vmid())?;
    if !vm.running {
        return Err(ApiError::die(format!("VM {} not running", vm.vmid)));
    }
    let to_disk = call.bool("todisk").unwrap_or(false);
    if to_disk && world.ha.is_managed(call.vmid()) {
        return Err(ApiError::die("Cannot suspend HA managed VM to disk"));
    }
    power_task(
        shared,
        world,
        call,
        "qmsuspend",
        move |world, _log, vmid| {
            check_lock(&world.vms[&vmid])?;
            if to_disk {
                let node = world.vms[&vmid].node.clone();
                halt(world, vmid);
                // The RAM image lives on the first storage that takes VM images.
                let storage = world
                    .storages
                    .iter()
                    .find(|s| s.content.iter().any(|c| c == "images"))
                    .map(|s| s.id.clone())
                    .unwrap_or_else(|| "local".into());
                let file_based = world.storage(&storage).is_some_and(|s| s.is_file_based());
                let volid = if file_based {
                    format!("{storage}:{vmid}/vm-{vmid}-state-suspend-{node}.raw")
                } else {
                    format!("{storage}:vm-{vmid}-state-suspend-{node}")
                };
                let memory = crate::world::memory_mib(&world.vms[&vmid].config) << 20;
                let scope = world.scope_for(&storage, &node);
                world.put_volume(scope, &volid, memory, "images", "raw", None, &node);
                if let Some(vm) = world.vms.get_mut(&vmid) {
                    vm.config.insert("lock".into(), "suspended".into());
                    vm.config.insert("vmstate".into(), volid);
                }
            } else if let Some(vm) = world.vms.get_mut(&vmid) {
                vm.paused = true;
            }
            Ok(())
        },
    )
}

pub fn resume(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    power_prechecks(world, call)?;
    let vm = vm_on_node(world, call.node(), call.vmid())?;
    if !vm.running {
        return Err(ApiError::die(format!("VM {} not running", vm.vmid)));
    }
    power_task(shared, world, call, "qmresume", |world, _log, vmid| {
        if let Some(vm) = world.vms.get_mut(&vmid) {
            vm.paused = false;
        }
        Ok(())
    })
}
