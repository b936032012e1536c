//! The admin API under `/_sim/`, outside PVE's tree: inspection and fault control for tests.
//! Authenticated with the same token; a revoked token (fault) still works here so tests can
//! undo the fault.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Request;
use hyper::body::Incoming;
use serde_json::json;

use crate::config::{Faults, Timings};
use crate::http::{HttpResponse, json_response, plain_error, read_body, url_decode};
use crate::inspect::{NodeState, SimState, TaskTiming, VmState, VolumeState};
use crate::shared::Shared;
use crate::world::World;

pub async fn handle(shared: &Arc<Shared>, req: Request<Incoming>, path: &str) -> HttpResponse {
    let authorised = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|h| {
            h.split_once("PVEAPIToken")
                .and_then(|(_, rest)| rest.get(1..).map(str::to_string))
        })
        .is_some_and(|value| value == format!("{}={}", shared.token_id, shared.token_secret));
    if !authorised {
        return plain_error(401, "No ticket");
    }
    // What a test looks at is the world as a request now would see it.
    crate::guest_power_due::settle(&mut shared.lock(), tokio::time::Instant::now());
    let method = req.method().as_str().to_string();
    match (method.as_str(), path) {
        ("GET", "state") => json_response(200, None, &json!(state(&shared.lock()))),
        ("GET", "journal") => {
            // `?since=N`: the entries after the first N answered (`journal/len` counts
            // them, dropped ones included), so a benchmark of hundreds of thousands of
            // requests reads each once.
            let since = req
                .uri()
                .query()
                .and_then(|query| query.split('&').find_map(|kv| kv.strip_prefix("since=")))
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            let world = shared.lock();
            let kept = since.saturating_sub(world.journal_dropped);
            let tail = world.journal.get(kept..).unwrap_or_default();
            json_response(200, None, &json!(tail))
        }
        ("GET", "tasks") => {
            let world = shared.lock();
            let tasks: Vec<TaskTiming> = world
                .task_order
                .iter()
                .filter_map(|upid| world.tasks.get(upid))
                .map(|t| TaskTiming {
                    upid: t.upid.clone(),
                    node: t.node.clone(),
                    task_type: t.task_type.clone(),
                    id: t.id.clone(),
                    started_ms: t.started_ms,
                    ended_ms: t.ended_ms,
                    exitstatus: t.exitstatus.clone(),
                })
                .collect();
            json_response(200, None, &json!(tasks))
        }
        ("GET", "journal/len") => {
            let world = shared.lock();
            json_response(
                200,
                None,
                &json!(world.journal_dropped + world.journal.len()),
            )
        }
        ("GET", "faults") => json_response(200, None, &json!(shared.lock().faults)),
        ("PUT", "faults") => {
            let body = match read_body(req).await {
                Ok(body) => body,
                Err(resp) => return resp,
            };
            let faults: Faults = match serde_json::from_slice(&body) {
                Ok(faults) => faults,
                Err(err) => return plain_error(400, &format!("invalid faults: {err}")),
            };
            for fault in &faults.http {
                if let Err(err) = regex::Regex::new(&fault.path_regex) {
                    return plain_error(400, &format!("invalid path_regex: {err}"));
                }
            }
            let name_regexes = (faults.cloud_init_errors.iter().map(|f| &f.vm_name_regex))
                .chain(
                    faults
                        .agent_blocked_commands
                        .iter()
                        .map(|f| &f.vm_name_regex),
                )
                .chain(faults.guest_profiles.iter().map(|f| &f.vm_name_regex));
            for pattern in name_regexes {
                if let Err(err) = regex::Regex::new(pattern) {
                    return plain_error(400, &format!("invalid vm_name_regex: {err}"));
                }
            }
            install_faults(shared, faults);
            json_response(200, None, &json!(shared.lock().faults))
        }
        ("GET", "hold") => json_response(200, None, &json!(shared.hold.status())),
        ("PUT", "hold") => {
            let body = match read_body(req).await {
                Ok(body) => body,
                Err(resp) => return resp,
            };
            match serde_json::from_slice::<crate::hold::HoldRequest>(&body) {
                Ok(ask) if ask.request >= 1 => {
                    shared.hold.set(ask);
                    json_response(200, None, &json!(shared.hold.status()))
                }
                Ok(_) => plain_error(400, "invalid hold: request counts from 1"),
                Err(err) => plain_error(400, &format!("invalid hold: {err}")),
            }
        }
        ("DELETE", "hold") => {
            shared.hold.release();
            json_response(200, None, &json!(shared.hold.status()))
        }
        ("POST", "hold/resume") => {
            shared.hold.resume();
            json_response(200, None, &json!(shared.hold.status()))
        }
        ("GET", "timings") => json_response(200, None, &json!(shared.lock().timings)),
        ("PUT", "timings") => {
            let body = match read_body(req).await {
                Ok(body) => body,
                Err(resp) => return resp,
            };
            match serde_json::from_slice::<Timings>(&body) {
                Ok(timings) => {
                    let mut world = shared.lock();
                    // HA work waiting on the old delay is looked at again with the new one.
                    let delay = Duration::from_millis(timings.ha_delay_ms);
                    world.timings = timings;
                    world.ha.schedule(delay);
                    drop(world);
                    json_response(200, None, &json!(shared.lock().timings))
                }
                Err(err) => plain_error(400, &format!("invalid timings: {err}")),
            }
        }
        ("GET", "costs") | ("POST", "costs/reset") => costs(shared, path == "costs/reset"),
        ("GET", p) if p.starts_with("volume/") => volume(shared, &p["volume/".len()..]),
        ("POST", p) if p.starts_with("nodes/") => crate::node_events::handle(shared, p),
        ("POST", p) if p.starts_with("vms/") => {
            let path = p.to_string();
            match read_body(req).await {
                Ok(body) => crate::operator_migrate::handle(shared, &path, &body).await,
                Err(resp) => resp,
            }
        }
        (_, p) if p.starts_with("ha/") => {
            let path = p.to_string();
            match read_body(req).await {
                Ok(body) => crate::ha_admin::handle(shared, &method, &path, &body),
                Err(resp) => resp,
            }
        }
        _ => plain_error(404, &format!("no admin endpoint {method} /_sim/{path}")),
    }
}

/// Replaces the faults and starts the lock holders.
pub fn install_faults(shared: &Arc<Shared>, faults: Faults) {
    let held = faults.held_locks.clone();
    {
        let mut world = shared.lock();
        world.set_faults(faults);
        for hold in &held {
            if let Some(vm) = world.vms.get_mut(&hold.vmid) {
                vm.config.insert("lock".into(), hold.lock.clone());
            }
        }
    }
    for hold in held {
        let shared = Arc::clone(shared);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(hold.seconds.max(0.0))).await;
            let mut world = shared.lock();
            if let Some(vm) = world.vms.get_mut(&hold.vmid)
                && vm.config.get("lock") == Some(&hold.lock)
            {
                vm.config.remove("lock");
            }
        });
    }
}

/// The cost profile's accounts, after starting them afresh when `reset`.
fn costs(shared: &Shared, reset: bool) -> HttpResponse {
    let Some(cost) = &shared.cost else {
        return plain_error(404, "no cost profile: set `cost_profile` in the config");
    };
    if reset {
        cost.reset();
    }
    json_response(200, None, &json!(cost.stats()))
}

fn volume(shared: &Shared, rest: &str) -> HttpResponse {
    let mut parts = rest.splitn(3, '/');
    let (Some(node), Some(storage), Some(volume)) = (parts.next(), parts.next(), parts.next())
    else {
        return plain_error(404, "expected /_sim/volume/{node}/{storage}/{volid}");
    };
    let volume = url_decode(volume);
    let volid = if volume.contains(':') {
        volume
    } else {
        format!("{storage}:{volume}")
    };
    let world = shared.lock();
    match world.volume(&volid, node).and_then(|v| v.data.clone()) {
        Some(data) => {
            let mut resp = hyper::Response::new(http_body_util::Full::new(Bytes::clone(&data)));
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/octet-stream"),
            );
            resp
        }
        None => plain_error(
            404,
            &format!("no uploaded volume '{volid}' on node '{node}'"),
        ),
    }
}

pub fn state(world: &World) -> SimState {
    let nodes = world
        .nodes
        .iter()
        .map(|n| NodeState {
            name: n.name.clone(),
            online: world.node_online(&n.name),
        })
        .collect();
    let vms = world
        .vms
        .values()
        .map(|vm| VmState {
            node: vm.node.clone(),
            vmid: vm.vmid,
            name: vm.config.get("name").cloned(),
            status: match (vm.running, vm.paused) {
                (false, _) => "stopped",
                (true, true) => "paused",
                (true, false) => "running",
            }
            .to_string(),
            lock: vm.lock().map(str::to_string),
            tags: vm.config.get("tags").cloned(),
            template: vm.is_template(),
            config: vm.config.clone(),
            pending: vm.pending.clone(),
            agent_ready: vm.agent.is_some(),
            guest: crate::cloud_init::guest_state(vm, tokio::time::Instant::now()),
        })
        .collect();
    let volumes = world
        .volumes
        .iter()
        .flat_map(|(scope, vols)| {
            vols.values().map(move |v| VolumeState {
                node: scope.node.clone().unwrap_or_else(|| v.origin_node.clone()),
                storage: scope.storage.clone(),
                shared: scope.node.is_none(),
                volid: v.volid.clone(),
                size: v.size,
                content: v.content.clone(),
            })
        })
        .collect();
    SimState {
        nodes,
        vms,
        volumes,
    }
}
