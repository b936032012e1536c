//! Which daemon runs each endpoint pve-sim serves, as PVE's API schema declares it: a
//! `protected` method runs in pvedaemon (pveproxy runs as `www-data` and forwards it:
//! pve-manager `PVE/HTTPServer.pm` `rest_handler`, `proxy => 'localhost'`), any other in the
//! pveproxy worker that took the request; a method with `proxyto => 'node'` runs on the node
//! its path names (pveproxy forwards it to that node's pveproxy first). The table is checked
//! against PVE's schema dump by `cost_profile::dispatch_follows_the_api_schema`.

/// How PVE routes one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatch {
    /// Runs in pvedaemon (`protected => 1`).
    pub protected: bool,
    /// Runs on the node of the path's `{node}` (`proxyto => 'node'`).
    pub proxyto_node: bool,
}

const PROXY: Dispatch = Dispatch {
    protected: false,
    proxyto_node: false,
};
const PROXY_ON_NODE: Dispatch = Dispatch {
    protected: false,
    proxyto_node: true,
};
const DAEMON: Dispatch = Dispatch {
    protected: true,
    proxyto_node: false,
};
const DAEMON_ON_NODE: Dispatch = Dispatch {
    protected: true,
    proxyto_node: true,
};

/// `(method, route template, dispatch)` for every route of the server's table.
const DISPATCH: &[(&str, &str, Dispatch)] = &[
    ("GET", "/version", PROXY),
    ("GET", "/nodes", PROXY),
    ("GET", "/nodes/{node}/status", PROXY_ON_NODE),
    ("GET", "/nodes/{node}/version", PROXY_ON_NODE),
    ("GET", "/nodes/{node}/network", PROXY_ON_NODE),
    ("GET", "/cluster/resources", PROXY),
    ("GET", "/cluster/nextid", PROXY),
    ("GET", "/cluster/status", DAEMON),
    ("GET", "/access/permissions", PROXY),
    ("GET", "/pools", PROXY),
    ("POST", "/pools", DAEMON),
    ("PUT", "/pools", DAEMON),
    ("DELETE", "/pools", DAEMON),
    ("GET", "/pools/{poolid}", PROXY),
    ("GET", "/nodes/{node}/tasks", PROXY_ON_NODE),
    ("GET", "/nodes/{node}/tasks/{upid}", PROXY),
    ("DELETE", "/nodes/{node}/tasks/{upid}", DAEMON_ON_NODE),
    ("GET", "/nodes/{node}/tasks/{upid}/status", DAEMON_ON_NODE),
    ("GET", "/nodes/{node}/tasks/{upid}/log", DAEMON_ON_NODE),
    ("GET", "/nodes/{node}/qemu", DAEMON_ON_NODE),
    ("POST", "/nodes/{node}/qemu", DAEMON_ON_NODE),
    ("GET", "/nodes/{node}/qemu/{vmid}", PROXY_ON_NODE),
    ("DELETE", "/nodes/{node}/qemu/{vmid}", DAEMON_ON_NODE),
    ("POST", "/nodes/{node}/qemu/{vmid}/clone", DAEMON_ON_NODE),
    ("GET", "/nodes/{node}/qemu/{vmid}/config", PROXY_ON_NODE),
    ("POST", "/nodes/{node}/qemu/{vmid}/config", DAEMON_ON_NODE),
    ("PUT", "/nodes/{node}/qemu/{vmid}/config", DAEMON_ON_NODE),
    ("GET", "/nodes/{node}/qemu/{vmid}/pending", PROXY_ON_NODE),
    ("PUT", "/nodes/{node}/qemu/{vmid}/resize", DAEMON_ON_NODE),
    ("POST", "/nodes/{node}/qemu/{vmid}/template", DAEMON_ON_NODE),
    ("GET", "/nodes/{node}/qemu/{vmid}/status", PROXY_ON_NODE),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/status/current",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/start",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/stop",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/shutdown",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/reboot",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/reset",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/suspend",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/resume",
        DAEMON_ON_NODE,
    ),
    ("GET", "/nodes/{node}/qemu/{vmid}/agent", PROXY_ON_NODE),
    ("POST", "/nodes/{node}/qemu/{vmid}/agent", DAEMON_ON_NODE),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/ping",
        DAEMON_ON_NODE,
    ),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/info",
        DAEMON_ON_NODE,
    ),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/get-osinfo",
        DAEMON_ON_NODE,
    ),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/get-host-name",
        DAEMON_ON_NODE,
    ),
    (
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/file-read",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/file-write",
        DAEMON_ON_NODE,
    ),
    ("GET", "/nodes/{node}/storage", DAEMON_ON_NODE),
    ("GET", "/nodes/{node}/storage/{storage}", PROXY),
    (
        "GET",
        "/nodes/{node}/storage/{storage}/status",
        DAEMON_ON_NODE,
    ),
    (
        "GET",
        "/nodes/{node}/storage/{storage}/content",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/storage/{storage}/content",
        DAEMON_ON_NODE,
    ),
    (
        "GET",
        "/nodes/{node}/storage/{storage}/content/{volume}",
        DAEMON_ON_NODE,
    ),
    (
        "PUT",
        "/nodes/{node}/storage/{storage}/content/{volume}",
        DAEMON_ON_NODE,
    ),
    (
        "DELETE",
        "/nodes/{node}/storage/{storage}/content/{volume}",
        DAEMON_ON_NODE,
    ),
    (
        "POST",
        "/nodes/{node}/storage/{storage}/download-url",
        DAEMON_ON_NODE,
    ),
    ("POST", "/nodes/{node}/storage/{storage}/upload", DAEMON),
    ("GET", "/nodes/{node}/qemu/{vmid}/migrate", DAEMON_ON_NODE),
    ("POST", "/nodes/{node}/qemu/{vmid}/migrate", DAEMON_ON_NODE),
    ("GET", "/cluster/ha", PROXY),
    ("GET", "/cluster/ha/status", PROXY),
    ("GET", "/cluster/ha/resources", PROXY),
    ("POST", "/cluster/ha/resources", DAEMON),
    ("GET", "/cluster/ha/resources/{sid}", PROXY),
    ("PUT", "/cluster/ha/resources/{sid}", DAEMON),
    ("DELETE", "/cluster/ha/resources/{sid}", DAEMON),
    ("POST", "/cluster/ha/resources/{sid}/migrate", DAEMON),
    ("POST", "/cluster/ha/resources/{sid}/relocate", DAEMON),
    ("GET", "/cluster/ha/status/current", PROXY),
    ("GET", "/cluster/ha/rules", PROXY),
    ("POST", "/cluster/ha/rules", DAEMON),
    ("GET", "/cluster/ha/rules/{rule}", PROXY),
    ("PUT", "/cluster/ha/rules/{rule}", DAEMON),
    ("DELETE", "/cluster/ha/rules/{rule}", DAEMON),
    ("GET", "/cluster/ha/groups", PROXY),
    ("POST", "/cluster/ha/groups", DAEMON),
    ("GET", "/cluster/ha/groups/{group}", PROXY),
    ("PUT", "/cluster/ha/groups/{group}", DAEMON),
    ("DELETE", "/cluster/ha/groups/{group}", DAEMON),
    ("GET", "/storage", PROXY),
    ("GET", "/storage/{storage}", PROXY),
];

/// How PVE routes `method template`; `None` for a route the server does not serve.
pub fn route_dispatch(method: &str, template: &str) -> Option<Dispatch> {
    DISPATCH
        .iter()
        .find(|(m, t, _)| *m == method && *t == template)
        .map(|(_, _, dispatch)| *dispatch)
}
