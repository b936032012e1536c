//! `/cluster/ha/...`: HA resources and the HA status (pve-ha-manager
//! `src/PVE/API2/HA/Resources.pm`, `Status.pm`, `src/PVE/HA/Config.pm`); the rules are
//! `ha_rules_api`, the groups `ha_groups`.

use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::api::require;
use crate::call::{ApiError, ApiResult, Call, Reply};
use crate::ha_state::{HaResource, HaState, Service};
use crate::world::World;

/// The options a `vm` resource takes (`HA/Resources/PVEVM.pm` `options`).
const OPTIONS: &[&str] = &[
    "state",
    "group",
    "comment",
    "failback",
    "max_restart",
    "max_relocate",
];

/// pve-manager `API2/HAConfig.pm` `index`.
pub fn index(world: &World) -> ApiResult {
    require(world, "/", "Sys.Audit")?;
    Ok(Reply::data(crate::api::subdirs(
        "id",
        &["status", "resources", "groups", "rules"],
    )))
}

/// `API2/HA/Status.pm` `index`.
pub fn status_index() -> ApiResult {
    Ok(Reply::data(crate::api::subdirs(
        "name",
        &["current", "manager_status", "disarm-ha", "arm-ha"],
    )))
}

/// `get_service_status`, as `status/current` of a VM shows it under `ha`.
pub fn service_status(world: &World, vmid: u32) -> Value {
    if !world.ha.is_managed(vmid) {
        return json!({"managed": 0});
    }
    let state = world
        .ha
        .services
        .get(&crate::ha_state::vm_sid(vmid))
        .map(|s| s.state.clone());
    json!({"managed": 1, "state": state})
}

/// `PVE::HA::Config::parse_sid`: `vm:100`, or a bare VMID of an existing guest.
fn parse_sid(world: &World, sid: &str) -> Result<(String, String, String), ApiError> {
    if !sid.is_empty() && sid.bytes().all(|b| b.is_ascii_digit()) {
        if !world.vms.contains_key(&sid.parse().unwrap_or(0)) {
            return Err(ApiError::die(format!(
                "unable to detect SID from VMID - VM/CT {sid} does not exist"
            )));
        }
        return Ok((format!("vm:{sid}"), "vm".into(), sid.into()));
    }
    match sid.split_once(':') {
        Some((kind, name)) => Ok((sid.into(), kind.into(), name.into())),
        None => Err(ApiError::die(format!("unable to parse service id '{sid}'"))),
    }
}

fn ha_delay(world: &World) -> Duration {
    Duration::from_millis(world.timings.ha_delay_ms)
}

/// `api_copy_config`: the section, its sid and the file's digest (`group` left out, as
/// HA groups have been migrated to rules).
fn resource_json(ha: &HaState, sid: &str, resource: &HaResource) -> Value {
    let mut row = Map::new();
    row.insert("sid".into(), json!(sid));
    row.insert("type".into(), json!("vm"));
    row.insert("digest".into(), json!(ha.digest()));
    if let Some(state) = &resource.state {
        row.insert("state".into(), json!(state));
    }
    if let Some(failback) = resource.failback {
        row.insert("failback".into(), json!(i32::from(failback)));
    }
    if let Some(n) = resource.max_restart {
        row.insert("max_restart".into(), json!(n));
    }
    if let Some(n) = resource.max_relocate {
        row.insert("max_relocate".into(), json!(n));
    }
    if let Some(comment) = &resource.comment {
        row.insert("comment".into(), json!(comment));
    }
    Value::Object(row)
}

pub fn list(world: &World, call: &Call) -> ApiResult {
    require(world, "/", "Sys.Audit")?;
    let wanted = call.str("type");
    let rows: Vec<Value> = world
        .ha
        .resources
        .iter()
        .filter(|_| wanted.as_deref().is_none_or(|t| t == "vm"))
        .map(|(sid, resource)| resource_json(&world.ha, sid, resource))
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

pub fn read(world: &World, call: &Call) -> ApiResult {
    require(world, "/", "Sys.Audit")?;
    let (sid, _, _) = parse_sid(world, call.path_str("sid"))?;
    let resource = world
        .ha
        .resources
        .get(&sid)
        .ok_or_else(|| ApiError::die(format!("no such resource '{sid}'")))?;
    Ok(Reply::data(resource_json(&world.ha, &sid, resource)))
}

/// The sid's type and name as `create` and `update` check them.
fn check_type(call: &Call, kind: &str) -> Result<(), ApiError> {
    if call.str("type").is_some_and(|t| t != kind) {
        return Err(ApiError::die("types does not match"));
    }
    if call.params.contains_key("group") {
        // No HA group exists in pve-sim, so `have_groups_been_migrated` holds.
        return Err(ApiError::die(
            "invalid parameter 'group': ha groups have been migrated to rules",
        ));
    }
    Ok(())
}

/// `Resources.pm` `create`: the plugin's `verify_name` and `exists`, then the section.
pub fn create(world: &mut World, call: &Call) -> ApiResult {
    require(world, "/", "Sys.Console")?;
    crate::api::check_quorum(world)?;
    let (sid, kind, name) = parse_sid(world, &call.str("sid").unwrap_or_default())?;
    check_type(call, &kind)?;
    match kind.as_str() {
        "vm" | "ct" => {}
        other => return Err(ApiError::die(format!("unknown section type '{other}'"))),
    }
    let vmid: u32 = name
        .parse()
        .ok()
        .filter(|_| name.len() > 1 && !name.starts_with('0'))
        .ok_or_else(|| ApiError::die("invalid VMID"))?;
    if kind == "ct" || !world.vms.contains_key(&vmid) {
        return Err(ApiError::die(format!(
            "resource '{sid}' does not exist in cluster"
        )));
    }
    if world.ha.resources.contains_key(&sid) {
        return Err(ApiError::die(format!(
            "create resource failed: resource ID '{sid}' already defined"
        )));
    }
    let mut resource = HaResource {
        state: None,
        group: None,
        failback: None,
        max_restart: None,
        max_relocate: None,
        comment: None,
        changed_at: Instant::now(),
    };
    apply(&mut resource, call);
    world.ha.resources.insert(sid, resource);
    world.ha.generation += 1;
    let delay = ha_delay(world);
    world.ha.schedule(delay);
    Ok(Reply::data(Value::Null))
}

fn apply(resource: &mut HaResource, call: &Call) {
    if let Some(state) = call.str("state") {
        resource.state = Some(state);
    }
    if let Some(failback) = call.bool("failback") {
        resource.failback = Some(failback);
    }
    if let Some(n) = call.int("max_restart") {
        resource.max_restart = Some(n);
    }
    if let Some(n) = call.int("max_relocate") {
        resource.max_relocate = Some(n);
    }
    if let Some(comment) = call.str("comment") {
        resource.comment = Some(comment);
    }
    resource.changed_at = Instant::now();
}

/// `Resources.pm` `update` and `Config.pm` `update_resources_config`.
pub fn update(world: &mut World, call: &Call) -> ApiResult {
    require(world, "/", "Sys.Console")?;
    let (sid, kind, _) = parse_sid(world, call.path_str("sid"))?;
    check_type(call, &kind)?;
    world
        .ha
        .check_service_state(&sid, call.str("state").as_deref())
        .map_err(ApiError::die)?;
    if call.str("digest").is_some_and(|d| d != world.ha.digest()) {
        return Err(ApiError::die(
            "update resources config failed: detected modified configuration - file \
             changed by other user? Try again.",
        ));
    }
    let Some(resource) = world.ha.resources.get_mut(&sid) else {
        return Err(ApiError::die(format!(
            "update resources config failed: no such resource '{sid}'"
        )));
    };
    let delete = call.str("delete").unwrap_or_default();
    let keys = crate::schema::split_list(&delete);
    if let Some(unknown) = keys.iter().find(|k| !OPTIONS.contains(k)) {
        return Err(ApiError::die(format!(
            "update resources config failed: no such option '{unknown}'"
        )));
    }
    apply(resource, call);
    for key in keys {
        match key {
            "state" => resource.state = None,
            "group" => resource.group = None,
            "comment" => resource.comment = None,
            "failback" => resource.failback = None,
            "max_restart" => resource.max_restart = None,
            _ => resource.max_relocate = None,
        }
    }
    world.ha.generation += 1;
    let delay = ha_delay(world);
    world.ha.schedule(delay);
    Ok(Reply::data(Value::Null))
}

/// `Resources.pm` `delete` and `Config.pm` `delete_service_from_config`: with `purge`
/// (the default) the resource also leaves every HA rule, and rules left empty go.
pub fn delete(world: &mut World, call: &Call) -> ApiResult {
    require(world, "/", "Sys.Console")?;
    let (sid, _, _) = parse_sid(world, call.path_str("sid"))?;
    if world.ha.resources.remove(&sid).is_none() {
        return Err(ApiError::die(format!(
            "cannot delete service '{sid}', not HA managed!"
        )));
    }
    if call.bool("purge").unwrap_or(true) {
        world.ha.rules.purge_resource(&sid);
    }
    world.ha.generation += 1;
    let delay = ha_delay(world);
    world.ha.schedule(delay);
    Ok(Reply::data(Value::Null))
}

/// `Resources.pm` `migrate` / `relocate`: queue the CRM command, and answer which services
/// move along (positive affinity) and which ones block the target (negative affinity), as
/// `get_resource_motion_info` sees them now; the CRM decides when it reads the command.
pub fn motion(world: &mut World, call: &Call, task: &str) -> ApiResult {
    require(world, "/", "Sys.Console")?;
    let (sid, _, _) = parse_sid(world, call.path_str("sid"))?;
    let node = call.str("node").unwrap_or_default();
    let managed = world
        .ha
        .resources
        .get(&sid)
        .is_some_and(|r| r.requested() != "ignored");
    if !managed {
        return Err(ApiError::die(format!("resource '{sid}' is not HA managed")));
    }
    world
        .ha
        .check_service_state(&sid, None)
        .map_err(ApiError::die)?;
    let delay = ha_delay(world);
    world
        .ha
        .queue_command(format!("{task} {sid} {node}"), delay);
    let compiled = crate::ha_placement::compiled_rules(world);
    let (comigrated, mut blocking) = crate::ha_placement::motion_info(world, &compiled, &sid);
    let mut answer = json!({"sid": sid, "requested-node": node});
    if !comigrated.is_empty() {
        answer["comigrated-resources"] = json!(comigrated);
    }
    if let Some(blockers) = blocking.remove(&node) {
        let rows: Vec<Value> = blockers
            .iter()
            .map(|csid| json!({"sid": csid, "cause": "resource-affinity"}))
            .collect();
        answer["blocking-resources"] = Value::Array(rows);
    }
    Ok(Reply::data(answer))
}

/// `PVE::HA::Tools::get_verbose_service_state`.
fn verbose_state(service: Option<&Service>, resource: &HaResource, vm_exists: bool) -> String {
    let requested = resource.requested();
    if requested == "ignored" {
        return "ignored".into();
    }
    if !vm_exists {
        return "not found".into();
    }
    let Some(service) = service else {
        return "queued".into();
    };
    let state = service.state.as_str();
    match state {
        "stopped" if requested == "started" => "starting",
        "stopped" if requested == "disabled" => "disabled",
        "started" if !service.running => "starting",
        "started" if requested == "stopped" || requested == "disabled" => "stopping",
        "error" if requested == "disabled" => "clearing error flag",
        _ => state,
    }
    .to_string()
}

/// The node `status/current` answers from: the first online node.
fn local_node(world: &World) -> String {
    world
        .nodes
        .iter()
        .find(|n| world.node_online(&n.name))
        .map(|n| n.name.clone())
        .unwrap_or_default()
}

/// `Status.pm` `status`: quorum, master, fencing, one `lrm` row per node and one row per
/// service.
pub fn status_current(world: &World, _call: &Call) -> ApiResult {
    require(world, "/", "Sys.Audit")?;
    let local = local_node(world);
    let mut rows = vec![json!({
        "id": "quorum", "type": "quorum", "node": local, "status": "OK", "quorate": 1,
    })];
    let ha = &world.ha;
    let active = ha.last_round > 0;
    if active {
        let when = crate::clock::ctime(ha.last_round);
        rows.push(json!({
            "id": "master", "type": "master", "node": local,
            "status": format!("{local} (active, {when})"), "timestamp": ha.last_round,
        }));
    }
    let (armed, watchdog) = if active {
        ("armed", "active")
    } else {
        ("standby", "standby")
    };
    rows.push(json!({
        "id": "fencing", "type": "fencing", "node": local,
        "status": format!("{armed} (CRM watchdog {watchdog})"), "armed-state": armed,
    }));
    if active {
        rows.extend(world.nodes.iter().map(|n| lrm_row(world, &n.name)));
    }
    for (sid, resource) in &ha.resources {
        rows.push(service_row(world, sid, resource));
    }
    Ok(Reply::data(Value::Array(rows)))
}

fn lrm_row(world: &World, node: &str) -> Value {
    let ha = &world.ha;
    let when = crate::clock::ctime(ha.last_round);
    let status = if !world.node_online(node) {
        format!("{node} (old timestamp - dead?, watchdog standby, {when})")
    } else if ha
        .services
        .values()
        .any(|s| s.node == node && s.state != "stopped")
    {
        format!("{node} (active, watchdog active, {when})")
    } else {
        format!("{node} (idle, watchdog standby, {when})")
    };
    json!({
        "id": format!("lrm:{node}"), "type": "lrm", "node": node, "status": status,
        "timestamp": ha.last_round,
    })
}

fn service_row(world: &World, sid: &str, resource: &HaResource) -> Value {
    let service = world.ha.services.get(sid);
    let vm = sid
        .strip_prefix("vm:")
        .and_then(|n| n.parse::<u32>().ok())
        .and_then(|vmid| world.vms.get(&vmid));
    let node = service
        .map(|s| s.node.clone())
        .or_else(|| vm.map(|vm| vm.node.clone()));
    let state = verbose_state(service, resource, vm.is_some());
    let mut row = Map::new();
    row.insert("id".into(), json!(format!("service:{sid}")));
    row.insert("type".into(), json!("service"));
    row.insert("sid".into(), json!(sid));
    if let Some(node) = &node {
        row.insert("node".into(), json!(node));
    }
    if let Some(service) = service {
        row.insert("crm_state".into(), json!(service.state));
    }
    let shown = node.as_deref().unwrap_or("---");
    row.insert("status".into(), json!(format!("{sid} ({shown}, {state})")));
    row.insert("state".into(), json!(state));
    // `read_and_check_resources_config` fills in the defaults.
    row.insert("request_state".into(), json!(resource.requested()));
    row.insert(
        "max_restart".into(),
        json!(resource.max_restart.unwrap_or(1)),
    );
    row.insert(
        "max_relocate".into(),
        json!(resource.max_relocate.unwrap_or(1)),
    );
    let failback = resource.failback.unwrap_or(true);
    row.insert("failback".into(), json!(i32::from(failback)));
    if let Some(comment) = &resource.comment {
        row.insert("comment".into(), json!(comment));
    }
    Value::Object(row)
}
