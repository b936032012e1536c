//! The HA stack through the admin API (`/_sim/ha/...`): what PVE's CRM does on its own or
//! only after a failure, on a test's request. `POST /_sim/ha/rebalance` is the automatic
//! rebalancing of pve-ha-manager 5.2.0 (`Manager.pm` `load_balance`) choosing one move;
//! `PUT /_sim/ha/services/{sid}` puts a service in `error`, the state only failures reach;
//! `GET /_sim/ha/log` is the CRM's log (PVE's `pve-ha-crm` syslog lines).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use crate::http::{HttpResponse, json_response, plain_error};
use crate::shared::Shared;
use crate::world::World;

/// `POST /_sim/ha/rebalance`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RebalanceRequest {
    sid: String,
    target: String,
}

/// `PUT /_sim/ha/services/{sid}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceStateRequest {
    state: String,
}

/// `ha/...` after `/_sim/`, with the request's method and body.
pub fn handle(shared: &Arc<Shared>, method: &str, path: &str, body: &[u8]) -> HttpResponse {
    let mut world = shared.lock();
    match (method, path) {
        ("GET", "ha/log") => json_response(200, None, &json!(world.ha.log)),
        ("POST", "ha/rebalance") => match serde_json::from_slice(body) {
            Ok(request) => rebalance(&mut world, &request),
            Err(err) => plain_error(400, &format!("invalid rebalance request: {err}")),
        },
        ("PUT", p) if p.starts_with("ha/services/") => {
            let sid = crate::http::url_decode(&p["ha/services/".len()..]);
            match serde_json::from_slice(body) {
                Ok(request) => set_service_state(&mut world, &sid, &request),
                Err(err) => plain_error(400, &format!("invalid service state: {err}")),
            }
        }
        _ => plain_error(404, &format!("no admin endpoint {method} /_sim/{path}")),
    }
}

fn schedule_round(world: &mut World) {
    let delay = Duration::from_millis(world.timings.ha_delay_ms);
    world.ha.schedule(delay);
}

/// The rebalancer moves the bundle of `sid` to `target` through the CRM's normal path
/// (`queue_resource_motion`, then `migrate` and the LRM's `migrate_vm`).
fn rebalance(world: &mut World, request: &RebalanceRequest) -> HttpResponse {
    let compiled = crate::ha_placement::compiled_rules(world);
    match crate::ha_motion::rebalance(world, &compiled, &request.sid, &request.target) {
        Ok(bundle) => {
            schedule_round(world);
            let answer = json!({
                "sid": bundle[0], "target": request.target, "resources": bundle,
            });
            json_response(200, None, &answer)
        }
        Err(message) => plain_error(409, &message),
    }
}

/// `change_service_state` to `error`: the LRM leaves the VM as it is, and only
/// `state: disabled` gets the service out again.
fn set_service_state(world: &mut World, sid: &str, request: &ServiceStateRequest) -> HttpResponse {
    if request.state != "error" {
        return plain_error(
            400,
            &format!(
                "state '{}' is reached through the simulator's events; only 'error' is set here",
                request.state
            ),
        );
    }
    let Some(service) = world.ha.services.get_mut(sid) else {
        return plain_error(404, &format!("no HA service '{sid}' in the CRM's status"));
    };
    let old = std::mem::replace(&mut service.state, "error".into());
    service.target = None;
    service.cmd = None;
    service.timeout = None;
    service.running = false;
    let node = service.node.clone();
    world.ha.log(format!(
        "service '{sid}': state changed from '{old}' to 'error'"
    ));
    schedule_round(world);
    json_response(
        200,
        None,
        &json!({"sid": sid, "state": "error", "node": node}),
    )
}
