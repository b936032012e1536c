//! Shared handler plumbing: errors in PVE's shapes, parameter access, permission checks and
//! dispatch from a routed template to its handler.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::server::Shared;
use crate::world::{Vm, World};

/// An error answer as PVE renders it.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: u16,
    /// JSON `message` (keeps PVE's trailing newline); the status line uses its first line.
    pub message: String,
    pub errors: Option<BTreeMap<String, String>>,
    /// 401/595 have no body at all.
    pub empty_body: bool,
    /// Answer only after this long (the agent's ping timeout, PVE's auth delay).
    pub delay: Option<Duration>,
    /// The VM's config flock is held: the dispatcher retries until `lock_config`'s
    /// timeout, then answers PVE's lock timeout error.
    pub flock_busy: Option<u32>,
}

impl ApiError {
    /// A plain `die "text\n"` in a handler: HTTP 500.
    pub fn die(message: impl Into<String>) -> ApiError {
        let mut message = message.into();
        if !message.ends_with('\n') {
            message.push('\n');
        }
        ApiError {
            status: 500,
            message,
            errors: None,
            empty_body: false,
            delay: None,
            flock_busy: None,
        }
    }

    pub fn params(errors: BTreeMap<String, String>) -> ApiError {
        ApiError {
            status: 400,
            message: "Parameter verification failed.\n".into(),
            errors: Some(errors),
            empty_body: false,
            delay: None,
            flock_busy: None,
        }
    }

    pub fn param(key: &str, message: impl Into<String>) -> ApiError {
        ApiError::params(BTreeMap::from([(key.to_string(), message.into())]))
    }

    pub fn perm(what: impl Into<String>) -> ApiError {
        ApiError {
            status: 403,
            message: format!("Permission check failed ({})\n", what.into()),
            errors: None,
            empty_body: false,
            delay: None,
            flock_busy: None,
        }
    }

    /// An `or` permission check that failed names neither path nor privilege
    /// (pve-access-control `RPCEnvironment.pm` `exec_api2_perm_check`).
    pub fn perm_unnamed() -> ApiError {
        ApiError {
            status: 403,
            message: "Permission check failed\n".into(),
            errors: None,
            empty_body: false,
            delay: None,
            flock_busy: None,
        }
    }

    pub fn not_implemented(method: &str, path: &str) -> ApiError {
        ApiError {
            status: 501,
            message: format!("Method '{method} {path}' not implemented"),
            errors: None,
            empty_body: false,
            delay: None,
            flock_busy: None,
        }
    }

    pub fn bare(status: u16, reason: &str) -> ApiError {
        ApiError {
            status,
            message: reason.to_string(),
            errors: None,
            empty_body: true,
            delay: None,
            flock_busy: None,
        }
    }

    pub fn flock_busy(vmid: u32) -> ApiError {
        let mut error = ApiError::die(crate::tasks::lock_timeout_message(vmid));
        error.flock_busy = Some(vmid);
        error
    }

    pub fn after(mut self, delay: Duration) -> ApiError {
        self.delay = Some(delay);
        self
    }
}

/// What a handler asks the dispatcher to wait for before answering (`background_delay` and
/// storage delete `delay`).
#[derive(Debug, Clone)]
pub struct TaskWait {
    pub upid: String,
    pub max: Duration,
    /// Error text prefix when the task failed within the delay (`None` = answer the UPID).
    pub failure_prefix: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub data: Value,
    pub total: Option<u64>,
    pub wait: Option<TaskWait>,
}

impl Reply {
    pub fn data(data: Value) -> Reply {
        Reply {
            data,
            total: None,
            wait: None,
        }
    }
}

pub type ApiResult = Result<Reply, ApiError>;

/// One authenticated, validated request.
#[derive(Debug)]
pub struct Call<'a> {
    pub method: &'a str,
    pub template: &'a str,
    pub path: &'a BTreeMap<String, String>,
    pub params: &'a Map<String, Value>,
    /// `user@realm` of the token.
    pub user: &'a str,
    /// Token name (the part after `!`).
    pub token_name: &'a str,
    pub now: Instant,
}

impl Call<'_> {
    pub fn path_str(&self, key: &str) -> &str {
        self.path.get(key).map(String::as_str).unwrap_or_default()
    }

    pub fn node(&self) -> &str {
        self.path_str("node")
    }

    pub fn vmid(&self) -> u32 {
        self.path_str("vmid").parse().unwrap_or(0)
    }

    pub fn str(&self, key: &str) -> Option<String> {
        self.params.get(key).and_then(value_as_string)
    }

    pub fn bool(&self, key: &str) -> Option<bool> {
        self.params.get(key).and_then(value_as_bool)
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        self.params.get(key).and_then(value_as_int)
    }

    pub fn token_user(&self) -> String {
        format!("{}!{}", self.user, self.token_name)
    }
}

/// A parameter as the string PVE would store (booleans as `0`/`1`).
pub fn value_as_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(if *b { "1" } else { "0" }.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

pub fn value_as_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => n.as_i64().map(|n| n != 0),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Some(true),
            "0" | "false" | "no" | "off" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

pub fn value_as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

/// `Permission check failed (<path>, <priv>)` unless the token holds the privilege.
pub fn require(world: &World, path: &str, privilege: &str) -> Result<(), ApiError> {
    if world.has_privilege(path, privilege) {
        Ok(())
    } else {
        Err(ApiError::perm(format!("{path}, {privilege}")))
    }
}

/// Any of several privileges (`check_any`): `(<path>, A|B)`.
pub fn require_any(world: &World, path: &str, privileges: &[&str]) -> Result<(), ApiError> {
    if privileges.iter().any(|p| world.has_privilege(path, p)) {
        Ok(())
    } else {
        Err(ApiError::perm(format!("{path}, {}", privileges.join("|"))))
    }
}

/// `AbstractConfig::load_config` on the addressed node.
pub fn load_vm<'w>(world: &'w World, node: &str, vmid: u32) -> Result<&'w Vm, ApiError> {
    world
        .vms
        .get(&vmid)
        .filter(|vm| vm.node == node)
        .ok_or_else(|| {
            ApiError::die(format!(
                "Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            ))
        })
}

/// `assert_config_exists_on_node` (status endpoints).
pub fn vm_on_node<'w>(world: &'w World, node: &str, vmid: u32) -> Result<&'w Vm, ApiError> {
    world
        .vms
        .get(&vmid)
        .filter(|vm| vm.node == node)
        .ok_or_else(|| {
            ApiError::die(format!(
                "unable to find configuration file for VM {vmid} on node '{node}'"
            ))
        })
}

pub fn check_lock(vm: &Vm) -> Result<(), String> {
    match vm.lock() {
        Some(lock) => Err(format!("VM is locked ({lock})")),
        None => Ok(()),
    }
}

/// Routes a validated call to its handler.
pub fn dispatch(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    use crate::{agent, cluster, qemu, storage};
    match (call.method, call.template) {
        ("GET", "/version") => cluster::version(world),
        ("GET", "/nodes") => cluster::nodes(world, call),
        ("GET", "/nodes/{node}/status") => cluster::node_status(world, call),
        ("GET", "/nodes/{node}/version") => cluster::version(world),
        ("GET", "/nodes/{node}/network") => cluster::node_network(world, call),
        ("GET", "/cluster/resources") => cluster::resources(world, call),
        ("GET", "/cluster/nextid") => cluster::nextid(world, call),
        ("GET", "/cluster/status") => cluster::cluster_status(world),
        ("GET", "/access/permissions") => cluster::permissions(world, call),
        ("GET", "/pools") => cluster::pools_list(world, call),
        ("POST", "/pools") => cluster::pools_create(world, call),
        ("PUT", "/pools") => cluster::pools_update(world, call),
        ("DELETE", "/pools") => cluster::pools_delete(world, call),
        ("GET", "/pools/{poolid}") => cluster::pool_get(world, call),
        ("GET", "/nodes/{node}/tasks") => cluster::tasks_list(world, call),
        ("GET", "/nodes/{node}/tasks/{upid}") => cluster::task_index(world, call),
        ("DELETE", "/nodes/{node}/tasks/{upid}") => cluster::task_stop(world, call),
        ("GET", "/nodes/{node}/tasks/{upid}/status") => cluster::task_status(world, call),
        ("GET", "/nodes/{node}/tasks/{upid}/log") => cluster::task_log(world, call),
        ("GET", "/nodes/{node}/qemu") => qemu::list(world, call),
        ("POST", "/nodes/{node}/qemu") => qemu::create(shared, world, call),
        ("GET", "/nodes/{node}/qemu/{vmid}") => qemu::index(world, call),
        ("DELETE", "/nodes/{node}/qemu/{vmid}") => qemu::destroy(shared, world, call),
        ("POST", "/nodes/{node}/qemu/{vmid}/clone") => qemu::clone(shared, world, call),
        ("GET", "/nodes/{node}/qemu/{vmid}/config") => qemu::config_get(world, call),
        ("POST", "/nodes/{node}/qemu/{vmid}/config") => qemu::config_post(shared, world, call),
        ("PUT", "/nodes/{node}/qemu/{vmid}/config") => qemu::config_put(world, call),
        ("GET", "/nodes/{node}/qemu/{vmid}/pending") => qemu::pending(world, call),
        ("PUT", "/nodes/{node}/qemu/{vmid}/resize") => qemu::resize(shared, world, call),
        ("POST", "/nodes/{node}/qemu/{vmid}/template") => qemu::template(shared, world, call),
        ("GET", "/nodes/{node}/qemu/{vmid}/status") => qemu::status_index(world, call),
        ("GET", "/nodes/{node}/qemu/{vmid}/status/current") => qemu::status_current(world, call),
        ("POST", "/nodes/{node}/qemu/{vmid}/status/start") => qemu::start(shared, world, call),
        ("POST", "/nodes/{node}/qemu/{vmid}/status/stop") => qemu::stop(shared, world, call),
        ("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown") => {
            qemu::shutdown(shared, world, call)
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/status/reboot") => qemu::reboot(shared, world, call),
        ("POST", "/nodes/{node}/qemu/{vmid}/status/reset") => qemu::reset(shared, world, call),
        ("POST", "/nodes/{node}/qemu/{vmid}/status/suspend") => qemu::suspend(shared, world, call),
        ("POST", "/nodes/{node}/qemu/{vmid}/status/resume") => qemu::resume(shared, world, call),
        ("GET", "/nodes/{node}/qemu/{vmid}/agent") => agent::index(world, call),
        ("POST", "/nodes/{node}/qemu/{vmid}/agent") => {
            let command = call.str("command").unwrap_or_default();
            agent::command(world, call, &command)
        }
        ("GET", "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces") => {
            agent::command(world, call, "network-get-interfaces")
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/agent/ping") => agent::command(world, call, "ping"),
        ("GET", "/nodes/{node}/qemu/{vmid}/agent/info") => agent::command(world, call, "info"),
        ("GET", "/nodes/{node}/qemu/{vmid}/agent/get-osinfo") => {
            agent::command(world, call, "get-osinfo")
        }
        ("GET", "/nodes/{node}/qemu/{vmid}/agent/get-host-name") => {
            agent::command(world, call, "get-host-name")
        }
        ("GET", "/nodes/{node}/storage") => storage::node_list(world, call),
        ("GET", "/nodes/{node}/storage/{storage}") => storage::node_index(world, call),
        ("GET", "/nodes/{node}/storage/{storage}/status") => storage::status(world, call),
        ("GET", "/nodes/{node}/storage/{storage}/content") => storage::content_list(world, call),
        ("POST", "/nodes/{node}/storage/{storage}/content") => storage::content_alloc(world, call),
        ("GET", "/nodes/{node}/storage/{storage}/content/{volume}") => {
            storage::content_get(world, call)
        }
        ("PUT", "/nodes/{node}/storage/{storage}/content/{volume}") => {
            storage::content_update(world, call)
        }
        ("DELETE", "/nodes/{node}/storage/{storage}/content/{volume}") => {
            storage::content_delete(shared, world, call)
        }
        ("POST", "/nodes/{node}/storage/{storage}/download-url") => {
            storage::download_url(shared, world, call)
        }
        ("GET", "/storage") => storage::cluster_list(world, call),
        ("GET", "/storage/{storage}") => storage::cluster_get(world, call),
        _ => Err(ApiError::not_implemented(call.method, call.template)),
    }
}

/// Directory listing rows (`[{"subdir": "x"}, ...]`) as PVE's index endpoints return.
pub fn subdirs(key: &str, names: &[&str]) -> Value {
    Value::Array(names.iter().map(|n| json!({ key: n })).collect())
}
