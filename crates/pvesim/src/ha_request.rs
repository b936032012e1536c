//! What the guest endpoints do differently for an HA-managed VM (qemu-server
//! `API2/Qemu.pm`): `vm_start`, `vm_stop`, `vm_shutdown` and `migrate_vm` only ask the HA
//! stack (tasks `hastart`, `hastop`, `hamigrate` that end at once), and `destroy_vm`'s
//! `$early_checks` refuse an HA resource without `purge`.

use std::sync::Arc;
use std::time::Duration;

use crate::call::{ApiError, Call};
use crate::ha_state::vm_sid;
use crate::shared::Shared;
use crate::tasks::{TaskLog, start_task};
use crate::world::World;

/// The power or migration request an HA-managed VM's endpoint turns into.
#[derive(Debug)]
pub enum Request {
    /// `ha-manager set vm:N --state started`
    Start,
    /// `ha-manager crm-command stop vm:N TIMEOUT` (0 = hard stop)
    Stop { timeout: i64 },
    /// `ha-manager migrate vm:N TARGET`
    Migrate { target: String },
}

impl Request {
    fn task_type(&self) -> &'static str {
        match self {
            Request::Start => "hastart",
            Request::Stop { .. } => "hastop",
            Request::Migrate { .. } => "hamigrate",
        }
    }

    fn announce(&self, vmid: u32) -> String {
        match self {
            Request::Start => format!("Requesting HA start for VM {vmid}"),
            Request::Stop { .. } => format!("Requesting HA stop for VM {vmid}"),
            Request::Migrate { target } => {
                format!("Requesting HA migration for VM {vmid} to node {target}")
            }
        }
    }

    fn command(&self, sid: &str) -> String {
        match self {
            Request::Start => format!("ha-manager set {sid} --state started"),
            Request::Stop { timeout } => format!("ha-manager crm-command stop {sid} {timeout}"),
            Request::Migrate { target } => format!("ha-manager migrate {sid} {target}"),
        }
    }
}

/// For an HA-managed VM and a call from outside the HA stack: the request task's UPID.
/// `None`: the endpoint goes on as for any VM.
pub fn intercept(
    shared: &Arc<Shared>,
    world: &mut World,
    call: &Call,
    request: Request,
) -> Option<String> {
    let vmid = call.vmid();
    if call.is_internal() || !world.ha.is_managed(vmid) {
        return None;
    }
    let user = call.token_user();
    Some(request_task(
        shared,
        world,
        call.node(),
        vmid,
        &user,
        request,
    ))
}

/// The request's task (`hastart`, `hastop`, `hamigrate`) on `node`; its UPID.
pub fn request_task(
    shared: &Arc<Shared>,
    world: &mut World,
    node: &str,
    vmid: u32,
    user: &str,
    request: Request,
) -> String {
    let task_type = request.task_type();
    start_task(
        shared,
        world,
        node,
        task_type,
        &vmid.to_string(),
        user,
        Box::new(move |world, log, injected| {
            log.info(request.announce(vmid));
            if let Some(failure) = injected {
                return Err(failure);
            }
            run_command(world, log, vmid, &request)
        }),
    )
}

/// `create_vm` with `ha-managed`: `ha-manager add vm:N --state started|stopped` once the VM
/// exists; a failed command is a warning of the create task.
pub fn add_created(world: &mut World, log: &mut TaskLog, vmid: u32, started: bool) {
    log.info("Add as HA resource");
    let sid = vm_sid(vmid);
    let state = if started { "started" } else { "stopped" };
    if world.ha.resources.contains_key(&sid) {
        log.info(format!(
            "create resource failed: resource ID '{sid}' already defined"
        ));
        log.warn(format!(
            "command 'ha-manager add {sid} --state {state}' failed: exit code 255"
        ));
        return;
    }
    let resource = crate::ha_state::HaResource {
        state: Some(state.into()),
        group: None,
        failback: None,
        max_restart: None,
        max_relocate: None,
        comment: None,
        changed_at: tokio::time::Instant::now(),
    };
    world.ha.resources.insert(sid, resource);
    world.ha.generation += 1;
    let delay = Duration::from_millis(world.timings.ha_delay_ms);
    world.ha.schedule(delay);
}

/// What the `ha-manager` command does; its failure fails the task as `run_command` does.
fn run_command(
    world: &mut World,
    log: &mut TaskLog,
    vmid: u32,
    request: &Request,
) -> Result<(), String> {
    let sid = vm_sid(vmid);
    let delay = Duration::from_millis(world.timings.ha_delay_ms);
    let ha = &mut world.ha;
    let outcome = match request {
        Request::Start => ha.check_service_state(&sid, Some("started")).map(|()| {
            if let Some(resource) = ha.resources.get_mut(&sid) {
                resource.state = Some("started".into());
                resource.changed_at = tokio::time::Instant::now();
            }
            ha.generation += 1;
            ha.schedule(delay);
        }),
        Request::Stop { timeout } => managed(ha, &sid)
            .and_then(|()| ha.check_service_state(&sid, None))
            .map(|()| ha.queue_command(format!("stop {sid} {timeout}"), delay)),
        Request::Migrate { target } => ha
            .check_service_state(&sid, None)
            .map(|()| ha.queue_command(format!("migrate {sid} {target}"), delay)),
    };
    outcome.map_err(|message| {
        log.info(message);
        format!("command '{}' failed: exit code 255", request.command(&sid))
    })
}

/// `service_is_ha_managed` as the CLI calls it.
fn managed(ha: &crate::ha_state::HaState, sid: &str) -> Result<(), String> {
    let vmid = sid.strip_prefix("vm:").and_then(|n| n.parse().ok());
    if vmid.is_some_and(|vmid| ha.is_managed(vmid)) {
        Ok(())
    } else {
        Err(format!("resource '{sid}' is not HA managed"))
    }
}

/// `destroy_vm`'s `$early_checks`, after `check_protection`: an HA resource needs `purge`.
pub fn check_destroy(world: &World, vmid: u32, purge: bool) -> Result<(), ApiError> {
    if !purge && world.ha.is_configured(vmid) {
        return Err(ApiError::die(format!(
            "unable to remove VM {vmid} - used in HA resources and purge parameter not set."
        )));
    }
    Ok(())
}

/// `destroy_vm` with `purge`: the VM leaves the HA resources (`delete_service_from_config`).
pub fn purge(world: &mut World, log: &mut TaskLog, vmid: u32) {
    log.info(format!("purging VM {vmid} from related configurations.."));
    let sid = vm_sid(vmid);
    if world.ha.resources.remove(&sid).is_some() {
        world.ha.generation += 1;
        world.ha.services.remove(&sid);
        // `delete_service_from_config($sid, $purge)`: out of every rule as well.
        world.ha.rules.purge_resource(&sid);
        log.info(format!(
            "NOTE: removed VM {vmid} from HA resource configuration."
        ));
    }
}
