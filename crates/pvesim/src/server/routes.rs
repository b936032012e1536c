//! Which handler answers which route template. The server owns this table; the handler
//! modules know only the call types and the shared state, never the server.

use std::sync::Arc;

use crate::call::{ApiError, ApiResult, Call};
use crate::shared::Shared;
use crate::world::World;
use crate::{agent, cluster, guest_files, ha_api, ha_groups, ha_rules_api, migrate, qemu, storage};

/// Every handler has this shape; most ignore the shared state (it is only needed to start
/// background tasks).
type Handler = fn(&Arc<Shared>, &mut World, &Call) -> ApiResult;

/// `(method, route template, handler)`; templates as `schema::route` names them.
const ROUTES: &[(&str, &str, Handler)] = &[
    ("GET", "/version", |_, w, _| cluster::version(w)),
    ("GET", "/nodes", |_, w, c| cluster::nodes(w, c)),
    ("GET", "/nodes/{node}/status", |_, w, c| {
        cluster::node_status(w, c)
    }),
    ("GET", "/nodes/{node}/version", |_, w, _| {
        cluster::version(w)
    }),
    ("GET", "/nodes/{node}/network", |_, w, c| {
        cluster::node_network(w, c)
    }),
    ("GET", "/cluster/resources", |_, w, c| {
        cluster::resources(w, c)
    }),
    ("GET", "/cluster/nextid", |_, w, c| cluster::nextid(w, c)),
    ("GET", "/cluster/status", |_, w, _| {
        cluster::cluster_status(w)
    }),
    ("GET", "/access/permissions", |_, w, c| {
        cluster::permissions(w, c)
    }),
    ("GET", "/pools", |_, w, c| cluster::pools_list(w, c)),
    ("POST", "/pools", |_, w, c| cluster::pools_create(w, c)),
    ("PUT", "/pools", |_, w, c| cluster::pools_update(w, c)),
    ("DELETE", "/pools", |_, w, c| cluster::pools_delete(w, c)),
    ("GET", "/pools/{poolid}", |_, w, c| cluster::pool_get(w, c)),
    ("GET", "/nodes/{node}/tasks", |_, w, c| {
        cluster::tasks_list(w, c)
    }),
    ("GET", "/nodes/{node}/tasks/{upid}", |_, w, c| {
        cluster::task_index(w, c)
    }),
    ("DELETE", "/nodes/{node}/tasks/{upid}", |_, w, c| {
        cluster::task_stop(w, c)
    }),
    ("GET", "/nodes/{node}/tasks/{upid}/status", |_, w, c| {
        cluster::task_status(w, c)
    }),
    ("GET", "/nodes/{node}/tasks/{upid}/log", |_, w, c| {
        cluster::task_log(w, c)
    }),
    ("GET", "/nodes/{node}/qemu", |_, w, c| qemu::list(w, c)),
    ("POST", "/nodes/{node}/qemu", qemu::create),
    ("GET", "/nodes/{node}/qemu/{vmid}", |_, w, c| {
        qemu::index(w, c)
    }),
    ("DELETE", "/nodes/{node}/qemu/{vmid}", qemu::destroy),
    ("POST", "/nodes/{node}/qemu/{vmid}/clone", qemu::clone),
    ("GET", "/nodes/{node}/qemu/{vmid}/config", |_, w, c| {
        qemu::config_get(w, c)
    }),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/config",
        qemu::config_post,
    ),
    ("PUT", "/nodes/{node}/qemu/{vmid}/config", |_, w, c| {
        qemu::config_put(w, c)
    }),
    ("GET", "/nodes/{node}/qemu/{vmid}/pending", |_, w, c| {
        qemu::pending(w, c)
    }),
    ("PUT", "/nodes/{node}/qemu/{vmid}/resize", qemu::resize),
    ("POST", "/nodes/{node}/qemu/{vmid}/template", qemu::template),
    ("GET", "/nodes/{node}/qemu/{vmid}/status", |_, w, c| {
        qemu::status_index(w, c)
    }),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/status/current",
        |_, w, c| qemu::status_current(w, c),
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/start",
        qemu::start,
    ),
    ("POST", "/nodes/{node}/qemu/{vmid}/status/stop", qemu::stop),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/shutdown",
        qemu::shutdown,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/reboot",
        qemu::reboot,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/reset",
        qemu::reset,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/suspend",
        qemu::suspend,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/resume",
        qemu::resume,
    ),
    ("GET", "/nodes/{node}/qemu/{vmid}/agent", |_, w, c| {
        agent::index(w, c)
    }),
    ("POST", "/nodes/{node}/qemu/{vmid}/agent", |_, w, c| {
        let command = c.str("command").unwrap_or_default();
        agent::command(w, c, &command)
    }),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
        |_, w, c| agent::command(w, c, "network-get-interfaces"),
    ),
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/ping", |_, w, c| {
        agent::command(w, c, "ping")
    }),
    ("GET", "/nodes/{node}/qemu/{vmid}/agent/info", |_, w, c| {
        agent::command(w, c, "info")
    }),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/get-osinfo",
        |_, w, c| agent::command(w, c, "get-osinfo"),
    ),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/get-host-name",
        |_, w, c| agent::command(w, c, "get-host-name"),
    ),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/file-read",
        |_, w, c| guest_files::file_read(w, c),
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/file-write",
        |_, w, c| guest_files::file_write(w, c),
    ),
    ("GET", "/nodes/{node}/storage", |_, w, c| {
        storage::node_list(w, c)
    }),
    ("GET", "/nodes/{node}/storage/{storage}", |_, w, c| {
        storage::node_index(w, c)
    }),
    (
        "GET",
        "/nodes/{node}/storage/{storage}/status",
        |_, w, c| storage::status(w, c),
    ),
    (
        "GET",
        "/nodes/{node}/storage/{storage}/content",
        |_, w, c| storage::content_list(w, c),
    ),
    (
        "POST",
        "/nodes/{node}/storage/{storage}/content",
        |_, w, c| storage::content_alloc(w, c),
    ),
    (
        "GET",
        "/nodes/{node}/storage/{storage}/content/{volume}",
        |_, w, c| storage::content_get(w, c),
    ),
    (
        "PUT",
        "/nodes/{node}/storage/{storage}/content/{volume}",
        |_, w, c| storage::content_update(w, c),
    ),
    (
        "DELETE",
        "/nodes/{node}/storage/{storage}/content/{volume}",
        storage::content_delete,
    ),
    (
        "POST",
        "/nodes/{node}/storage/{storage}/download-url",
        storage::download_url,
    ),
    (
        "POST",
        "/nodes/{node}/storage/{storage}/upload",
        storage::upload,
    ),
    ("GET", "/nodes/{node}/qemu/{vmid}/migrate", |_, w, c| {
        migrate::precondition(w, c)
    }),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/migrate",
        migrate::migrate_vm,
    ),
    ("GET", "/cluster/ha", |_, w, _| ha_api::index(w)),
    ("GET", "/cluster/ha/status", |_, _, _| {
        ha_api::status_index()
    }),
    ("GET", "/cluster/ha/resources", |_, w, c| ha_api::list(w, c)),
    ("POST", "/cluster/ha/resources", |_, w, c| {
        ha_api::create(w, c)
    }),
    ("GET", "/cluster/ha/resources/{sid}", |_, w, c| {
        ha_api::read(w, c)
    }),
    ("PUT", "/cluster/ha/resources/{sid}", |_, w, c| {
        ha_api::update(w, c)
    }),
    ("DELETE", "/cluster/ha/resources/{sid}", |_, w, c| {
        ha_api::delete(w, c)
    }),
    ("POST", "/cluster/ha/resources/{sid}/migrate", |_, w, c| {
        ha_api::motion(w, c, "migrate")
    }),
    ("POST", "/cluster/ha/resources/{sid}/relocate", |_, w, c| {
        ha_api::motion(w, c, "relocate")
    }),
    ("GET", "/cluster/ha/status/current", |_, w, c| {
        ha_api::status_current(w, c)
    }),
    ("GET", "/cluster/ha/rules", |_, w, c| {
        ha_rules_api::list(w, c)
    }),
    ("POST", "/cluster/ha/rules", |_, w, c| {
        ha_rules_api::create(w, c)
    }),
    ("GET", "/cluster/ha/rules/{rule}", |_, w, c| {
        ha_rules_api::read(w, c)
    }),
    ("PUT", "/cluster/ha/rules/{rule}", |_, w, c| {
        ha_rules_api::update(w, c)
    }),
    ("DELETE", "/cluster/ha/rules/{rule}", |_, w, c| {
        ha_rules_api::delete(w, c)
    }),
    ("GET", "/cluster/ha/groups", |_, w, c| {
        ha_groups::refuse(w, c)
    }),
    ("POST", "/cluster/ha/groups", |_, w, c| {
        ha_groups::refuse(w, c)
    }),
    ("GET", "/cluster/ha/groups/{group}", |_, w, c| {
        ha_groups::refuse(w, c)
    }),
    ("PUT", "/cluster/ha/groups/{group}", |_, w, c| {
        ha_groups::refuse(w, c)
    }),
    ("DELETE", "/cluster/ha/groups/{group}", |_, w, c| {
        ha_groups::refuse(w, c)
    }),
    ("GET", "/storage", |_, w, c| storage::cluster_list(w, c)),
    ("GET", "/storage/{storage}", |_, w, c| {
        storage::cluster_get(w, c)
    }),
];

/// Routes a validated call to its handler.
pub fn dispatch(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    match ROUTES
        .iter()
        .find(|(method, template, _)| *method == call.method && *template == call.template)
    {
        Some((_, _, handler)) => handler(shared, world, call),
        None => Err(ApiError::not_implemented(call.method, call.template)),
    }
}
