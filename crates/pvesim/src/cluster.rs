//! Cluster-wide and node endpoints: version, nodes, resources, nextid, status, permissions,
//! pools and tasks.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::api::{require, subdirs};
use crate::call::{ApiError, ApiResult, Call, Reply};
use crate::tasks::decode_upid;
use crate::world::{Vm, World, boot_disk_size, cpu_count, memory_mib};

pub fn version(world: &World) -> ApiResult {
    Ok(Reply::data(json!({
        "version": world.version.version,
        "release": world.version.release,
        "repoid": world.version.repoid,
    })))
}

fn node_row(world: &World, node: &crate::world::Node) -> Value {
    let online = world.node_online(&node.name);
    let mut row = json!({
        "node": node.name,
        "status": if online { "online" } else { "offline" },
        "type": "node",
        "id": format!("node/{}", node.name),
        "level": "",
        "ssl_fingerprint": concat!(
            "5A:8B:2C:11:90:3F:4D:6E:7A:81:92:A3:B4:C5:D6:E7:",
            "F8:09:1A:2B:3C:4D:5E:6F:70:81:92:A3:B4:C5:D6:E7",
        ),
    });
    if online && world.has_privilege(&format!("/nodes/{}", node.name), "Sys.Audit") {
        let used: u64 = world
            .vms
            .values()
            .filter(|vm| vm.node == node.name && vm.running)
            .map(|vm| memory_mib(&vm.config) << 20)
            .sum();
        let extra = json!({
            "cpu": 0.03,
            "maxcpu": node.cpus,
            "mem": used + (2 << 30),
            "maxmem": node.memory_bytes,
            "disk": 8u64 << 30,
            "maxdisk": 100u64 << 30,
            "uptime": crate::world::unix_now().saturating_sub(world.boot_time) + 86_400,
        });
        if let (Some(row), Value::Object(extra)) = (row.as_object_mut(), extra) {
            row.extend(extra);
        }
    }
    row
}

pub fn nodes(world: &World, _call: &Call) -> ApiResult {
    let rows: Vec<Value> = world.nodes.iter().map(|n| node_row(world, n)).collect();
    Ok(Reply::data(Value::Array(rows)))
}

pub fn node_status(world: &World, call: &Call) -> ApiResult {
    let node = call.node();
    require(world, &format!("/nodes/{node}"), "Sys.Audit")?;
    let info = world
        .node(node)
        .cloned()
        .unwrap_or_else(|| crate::world::Node {
            name: node.to_string(),
            online: true,
            cpus: 1,
            memory_bytes: 1 << 30,
            bridges: vec![],
        });
    let used: u64 = world
        .vms
        .values()
        .filter(|vm| vm.node == node && vm.running)
        .map(|vm| memory_mib(&vm.config) << 20)
        .sum::<u64>()
        + (2 << 30);
    Ok(Reply::data(json!({
        "uptime": crate::world::unix_now().saturating_sub(world.boot_time) + 86_400,
        "idle": 0,
        "wait": 0.001,
        "cpu": 0.03,
        "loadavg": ["0.12", "0.10", "0.08"],
        "kversion": "Linux 6.14.11-4-pve #1 SMP PREEMPT_DYNAMIC PMX 6.14.11-4 (2025-10-10T08:04Z)",
        "current-kernel": {
            "sysname": "Linux",
            "release": "6.14.11-4-pve",
            "version": "#1 SMP PREEMPT_DYNAMIC PMX 6.14.11-4 (2025-10-10T08:04Z)",
            "machine": "x86_64",
        },
        "boot-info": {"mode": "efi", "secureboot": 0},
        "cpuinfo": {
            "model": "pve-sim virtual CPU",
            "cpus": info.cpus,
            "sockets": 1,
            "cores": info.cpus,
            "hvm": "1",
            "flags": "",
            "mhz": "2400.000",
            "user_hz": 100,
        },
        "memory": {
            "total": info.memory_bytes,
            "used": used,
            "free": info.memory_bytes.saturating_sub(used),
            "available": info.memory_bytes.saturating_sub(used),
        },
        "ksm": {"shared": 0},
        "swap": {"total": 0, "used": 0, "free": 0},
        "rootfs": {
            "total": 100u64 << 30,
            "used": 8u64 << 30,
            "avail": 92u64 << 30,
            "free": 92u64 << 30,
        },
        "pveversion": format!("pve-manager/{}/{}", world.version.version, world.version.repoid),
    })))
}

pub fn node_network(world: &World, call: &Call) -> ApiResult {
    let node = call.node();
    let bridges = world
        .node(node)
        .map(|n| n.bridges.clone())
        .unwrap_or_default();
    let wanted = call.str("type");
    let rows: Vec<Value> = bridges
        .iter()
        .enumerate()
        .filter(|_| {
            wanted
                .as_deref()
                .is_none_or(|t| t == "bridge" || t == "any_bridge")
        })
        .map(|(i, bridge)| {
            json!({
                "iface": bridge,
                "type": "bridge",
                "active": 1,
                "autostart": 1,
                "bridge_ports": format!("eno{}", i + 1),
                "bridge_stp": "off",
                "bridge_fd": "0",
                "method": "manual",
                "method6": "manual",
                "families": ["inet"],
                "priority": 3 + i,
            })
        })
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

pub fn resources(world: &World, call: &Call) -> ApiResult {
    let kind = call.str("type");
    let want = |k: &str| kind.as_deref().is_none_or(|t| t == k);
    let mut rows = Vec::new();
    if want("pool") {
        for poolid in world.pools.keys() {
            if world.has_privilege(&format!("/pool/{poolid}"), "Pool.Audit") {
                rows.push(json!({"id": format!("/pool/{poolid}"), "pool": poolid, "type": "pool"}));
            }
        }
    }
    if want("vm") {
        for vm in world.vms.values() {
            if world.has_privilege(&format!("/vms/{}", vm.vmid), "VM.Audit") {
                rows.push(vm_resource(world, call, vm));
            }
        }
    }
    if want("node") {
        for node in &world.nodes {
            let mut row = node_row(world, node);
            if let Some(row) = row.as_object_mut() {
                row.remove("ssl_fingerprint");
                row.insert("cgroup-mode".into(), json!(2));
                row.insert("host-arch".into(), json!("x86_64"));
            }
            rows.push(row);
        }
    }
    if want("storage") {
        for node in &world.nodes {
            for storage in &world.storages {
                if !World::storage_on_node(storage, &node.name) {
                    continue;
                }
                let available = world.node_online(&node.name) && storage.enabled;
                rows.push(json!({
                    "id": format!("storage/{}/{}", node.name, storage.id),
                    "storage": storage.id,
                    "node": node.name,
                    "type": "storage",
                    "plugintype": storage.plugin_type,
                    "status": if available { "available" } else { "unknown" },
                    "shared": i32::from(storage.shared),
                    "content": storage.content.join(","),
                    "disk": world.used_bytes(&storage.id, &node.name),
                    "maxdisk": storage.total_bytes,
                }));
            }
        }
    }
    if want("sdn") {
        for node in &world.nodes {
            rows.push(json!({
                "id": format!("sdn/{}/localnetwork", node.name),
                "sdn": "localnetwork",
                "node": node.name,
                "type": "sdn",
                "status": "ok",
            }));
        }
    }
    Ok(Reply::data(Value::Array(rows)))
}

/// One `qemu` row of `/cluster/resources`.
fn vm_resource(world: &World, call: &Call, vm: &Vm) -> Value {
    let mut row = Map::new();
    row.insert("id".into(), json!(format!("qemu/{}", vm.vmid)));
    row.insert("vmid".into(), json!(vm.vmid));
    row.insert("node".into(), json!(vm.node));
    row.insert("type".into(), json!("qemu"));
    // Name, status and sizes come from pvestatd's RRD data: absent until its cycle
    // has seen the VM, and absent for VMs on offline nodes.
    let has_stats = call.now >= vm.stats_from && world.node_online(&vm.node);
    if has_stats {
        let maxmem = memory_mib(&vm.config) << 20;
        let uptime = vm
            .started_at
            .filter(|_| vm.running)
            .map(|t| call.now.saturating_duration_since(t).as_secs())
            .unwrap_or(0);
        row.insert(
            "status".into(),
            json!(if vm.running { "running" } else { "stopped" }),
        );
        row.insert("name".into(), json!(vm.name()));
        row.insert("template".into(), json!(i32::from(vm.is_template())));
        row.insert("maxcpu".into(), json!(cpu_count(&vm.config)));
        row.insert("cpu".into(), json!(if vm.running { 0.01 } else { 0.0 }));
        row.insert("maxmem".into(), json!(maxmem));
        row.insert("mem".into(), json!(if vm.running { maxmem / 4 } else { 0 }));
        row.insert(
            "memhost".into(),
            json!(if vm.running { maxmem / 4 } else { 0 }),
        );
        row.insert("maxdisk".into(), json!(boot_disk_size(&vm.config)));
        row.insert("disk".into(), json!(0));
        row.insert("uptime".into(), json!(uptime));
        for key in ["netin", "netout", "diskread", "diskwrite"] {
            row.insert(key.into(), json!(0));
        }
    } else {
        row.insert("status".into(), json!("unknown"));
    }
    if let Some(lock) = vm.lock() {
        row.insert("lock".into(), json!(lock));
    }
    if let Some(tags) = vm.config.get("tags") {
        row.insert("tags".into(), json!(tags));
    }
    // pve-manager `API2/Cluster.pm` `resources`: the CRM's state of an HA service, else the
    // requested state when one is set.
    let sid = crate::ha_state::vm_sid(vm.vmid);
    let hastate = match world.ha.services.get(&sid) {
        Some(service) => Some(service.state.clone()),
        None => world.ha.resources.get(&sid).and_then(|r| r.state.clone()),
    };
    if let Some(hastate) = hastate {
        row.insert("hastate".into(), json!(hastate));
    }
    // pve-manager `API2/Cluster.pm` `resources`: the pool only with Pool.Audit on it.
    let pool_of = world
        .pools
        .iter()
        .find(|(_, p)| p.vms.contains(&vm.vmid))
        .map(|(id, _)| id.clone());
    if let Some(pool) = pool_of
        && world.has_privilege(&format!("/pool/{pool}"), "Pool.Audit")
    {
        row.insert("pool".into(), json!(pool));
    }
    Value::Object(row)
}

pub fn nextid(world: &World, call: &Call) -> ApiResult {
    if let Some(vmid) = call.int("vmid") {
        if world.vms.contains_key(&(vmid as u32)) {
            return Err(ApiError::param("vmid", format!("VM {vmid} already exists")));
        }
        // Perl returns the parameter it was given: an integer, not a string.
        return Ok(Reply::data(json!(vmid)));
    }
    let free = (world.next_id_lower..world.next_id_upper).find(|id| !world.vms.contains_key(id));
    match free {
        // A hash key in Perl: JSON-encoded as a string.
        Some(id) => Ok(Reply::data(json!(id.to_string()))),
        None => Err(ApiError::die(format!(
            "unable to get any free VMID in range [{}, {}]",
            world.next_id_lower, world.next_id_upper
        ))),
    }
}

pub fn cluster_status(world: &World) -> ApiResult {
    require(world, "/", "Sys.Audit")?;
    let online = world
        .nodes
        .iter()
        .filter(|n| world.node_online(&n.name))
        .count();
    let mut rows = vec![json!({
        "type": "cluster",
        "id": "cluster",
        "name": "pve-sim",
        "nodes": world.nodes.len(),
        "version": world.nodes.len() + 2,
        "quorate": i32::from(online * 2 > world.nodes.len()),
    })];
    for (index, node) in world.nodes.iter().enumerate() {
        rows.push(json!({
            "type": "node",
            "id": format!("node/{}", node.name),
            "name": node.name,
            "nodeid": index + 1,
            "ip": format!("192.0.2.{}", index + 11),
            "local": i32::from(index == 0),
            "online": i32::from(world.node_online(&node.name)),
            "level": "",
        }));
    }
    Ok(Reply::data(Value::Array(rows)))
}

/// pve-access-control `API2/AccessControl.pm` `permissions` (the caller's own): with `path`
/// what it holds there, else `RPCEnvironment.pm` `get_effective_permissions`.
pub fn permissions(world: &World, call: &Call) -> ApiResult {
    let mut out = Map::new();
    match call.str("path") {
        Some(path) => {
            // The effective privileges at that path (inherited from parents).
            let all: BTreeSet<&String> = world.privileges.values().flatten().collect();
            let privs: Map<String, Value> = all
                .into_iter()
                .filter(|p| world.has_privilege(&path, p))
                .map(|p| (p.clone(), json!(1)))
                .collect();
            out.insert(path, Value::Object(privs));
        }
        None => {
            // `get_effective_permissions`: the top-level paths, every ACL path and every
            // pool member, each with what the token holds there (inherited included);
            // paths where it holds nothing are left out.
            let mut paths: BTreeSet<String> = [
                "/",
                "/access",
                "/access/groups",
                "/nodes",
                "/pool",
                "/sdn",
                "/storage",
                "/vms",
            ]
            .into_iter()
            .map(str::to_string)
            .collect();
            paths.extend(world.privileges.keys().cloned());
            for pool in world.pools.values() {
                paths.extend(pool.vms.iter().map(|vmid| format!("/vms/{vmid}")));
            }
            let all: BTreeSet<&String> = world.privileges.values().flatten().collect();
            for path in paths {
                let privs: Map<String, Value> = all
                    .iter()
                    .filter(|p| world.has_privilege(&path, p))
                    .map(|p| (p.to_string(), json!(1)))
                    .collect();
                if !privs.is_empty() {
                    out.insert(path, Value::Object(privs));
                }
            }
        }
    }
    Ok(Reply::data(Value::Object(out)))
}

fn pool_members(world: &World, poolid: &str) -> Vec<Value> {
    let Some(pool) = world.pools.get(poolid) else {
        return vec![];
    };
    pool.vms
        .iter()
        .filter_map(|vmid| world.vms.get(vmid))
        .map(|vm| {
            json!({
                "id": format!("qemu/{}", vm.vmid),
                "vmid": vm.vmid,
                "node": vm.node,
                "type": "qemu",
                "name": vm.name(),
                "status": if vm.running { "running" } else { "stopped" },
                "template": i32::from(vm.is_template()),
            })
        })
        .collect()
}

pub fn pools_list(world: &World, call: &Call) -> ApiResult {
    let filter = call.str("poolid");
    if let Some(poolid) = &filter
        && !world.pools.contains_key(poolid)
    {
        return Err(ApiError::die(format!("pool '{poolid}' does not exist")));
    }
    let rows: Vec<Value> = world
        .pools
        .iter()
        .filter(|(id, _)| filter.as_ref().is_none_or(|f| f == *id))
        .filter(|(id, _)| world.has_privilege(&format!("/pool/{id}"), "Pool.Audit"))
        .map(|(id, pool)| {
            let mut row = json!({ "poolid": id });
            if let Some(comment) = &pool.comment {
                row["comment"] = json!(comment);
            }
            if filter.is_some() {
                row["members"] = Value::Array(pool_members(world, id));
            }
            row
        })
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

pub fn pool_get(world: &World, call: &Call) -> ApiResult {
    let poolid = call.path_str("poolid");
    require(world, &format!("/pool/{poolid}"), "Pool.Audit")?;
    let pool = world
        .pools
        .get(poolid)
        .ok_or_else(|| ApiError::die(format!("pool '{poolid}' does not exist")))?;
    let mut out = json!({ "members": pool_members(world, poolid) });
    if let Some(comment) = &pool.comment {
        out["comment"] = json!(comment);
    }
    Ok(Reply::data(out))
}

pub fn pools_create(world: &mut World, call: &Call) -> ApiResult {
    let poolid = call.str("poolid").unwrap_or_default();
    require(world, &format!("/pool/{poolid}"), "Pool.Allocate")?;
    if world.pools.contains_key(&poolid) {
        return Err(ApiError::die(format!("pool '{poolid}' already exists")));
    }
    world.pools.insert(
        poolid,
        crate::world::Pool {
            comment: call.str("comment"),
            vms: BTreeSet::new(),
        },
    );
    Ok(Reply::data(Value::Null))
}

pub fn pools_update(world: &mut World, call: &Call) -> ApiResult {
    let poolid = call.str("poolid").unwrap_or_default();
    require(world, &format!("/pool/{poolid}"), "Pool.Allocate")?;
    if !world.pools.contains_key(&poolid) {
        return Err(ApiError::die(format!("pool '{poolid}' does not exist")));
    }
    let delete = call.bool("delete").unwrap_or(false);
    let vmids: Vec<u32> = call
        .str("vms")
        .unwrap_or_default()
        .split([',', ';', ' '])
        .filter_map(|v| v.parse().ok())
        .collect();
    for vmid in &vmids {
        if !world.vms.contains_key(vmid) {
            return Err(ApiError::die(format!("no such VMID '{vmid}'")));
        }
        if !delete
            && world
                .pools
                .iter()
                .any(|(id, p)| *id != poolid && p.vms.contains(vmid))
        {
            return Err(ApiError::die(format!(
                "VM {vmid} belongs already to a pool"
            )));
        }
    }
    let comment = call.str("comment");
    if let Some(pool) = world.pools.get_mut(&poolid) {
        if let Some(comment) = comment {
            pool.comment = Some(comment);
        }
        for vmid in vmids {
            if delete {
                pool.vms.remove(&vmid);
            } else {
                pool.vms.insert(vmid);
            }
        }
    }
    Ok(Reply::data(Value::Null))
}

pub fn pools_delete(world: &mut World, call: &Call) -> ApiResult {
    let poolid = call.str("poolid").unwrap_or_default();
    require(world, &format!("/pool/{poolid}"), "Pool.Allocate")?;
    let pool = world
        .pools
        .get(&poolid)
        .ok_or_else(|| ApiError::die(format!("pool '{poolid}' does not exist")))?;
    if !pool.vms.is_empty() {
        return Err(ApiError::die(format!("pool '{poolid}' is not empty")));
    }
    world.pools.remove(&poolid);
    Ok(Reply::data(Value::Null))
}

fn task_json(task: &crate::world::Task) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("upid".into(), json!(task.upid));
    row.insert("node".into(), json!(task.node));
    row.insert("pid".into(), json!(task.pid));
    row.insert("pstart".into(), json!(task.pstart));
    row.insert("starttime".into(), json!(task.starttime));
    row.insert("type".into(), json!(task.task_type));
    row.insert("id".into(), json!(task.id));
    row.insert("user".into(), json!(task.user));
    if let Some(token) = &task.tokenid {
        row.insert("tokenid".into(), json!(token));
    }
    row
}

/// `GET /nodes/{node}/tasks` as pve-manager's `node_tasks` (`PVE/API2/Tasks.pm`) serves it:
/// `source=active` lists the active file's tasks, which hold no ended one (pve-common's
/// `RESTEnvironment::active_workers` moves each to the index as it ends) and carry the status
/// `RUNNING`; `archive` (the default) reads the index backwards, newest end first; `all` is
/// the one followed by the other. `$filter_task` drops, in its order: another user's task
/// unless `userfilter` is a case-insensitive part of its user, a task of another user or
/// token unless the caller has `Sys.Audit` on the node (`$check_task_user`), another type or
/// VM, one started before `since` or after `until`, and one whose status class
/// (`upid_normalize_status_type`: `ok`, `warning`, `error`, `unknown` for a running one) is
/// not in `statusfilter` (`errors=1`: every class but `ok`); `start`/`limit` then page what is
/// left, and `total` counts it all. An archived task's user is split into `user` and
/// `tokenid` (`$convert_token_task`); an active one's is not, so it is `user@realm!token`.
pub fn tasks_list(world: &World, call: &Call) -> ApiResult {
    let node = call.node();
    let limit = call.int("limit").unwrap_or(50).max(0) as usize;
    let start = call.int("start").unwrap_or(0).max(0) as usize;
    let vmid = call.int("vmid").map(|v| v.to_string());
    let typefilter = call.str("typefilter");
    let userfilter = call.str("userfilter").map(|u| u.to_lowercase());
    let classes = status_classes(call);
    let source = call.str("source").unwrap_or_else(|| "archive".into());
    let since = call.int("since");
    let until = call.int("until");
    let caller = call.token_user();
    let auditor = world.has_privilege(&format!("/nodes/{node}"), "Sys.Audit");
    let on_node = world
        .task_order
        .iter()
        .rev()
        .filter_map(|upid| world.tasks.get(upid))
        .filter(|t| t.node == node);
    let running = on_node.clone().filter(|t| t.exitstatus.is_none());
    let mut ended: Vec<_> = on_node.filter(|t| t.exitstatus.is_some()).collect();
    // The index is appended to as tasks end; read backwards, the latest end comes first.
    ended.sort_by_key(|t| std::cmp::Reverse(t.endtime.unwrap_or(t.starttime)));
    let listed: Vec<&crate::world::Task> = match source.as_str() {
        "active" => running.collect(),
        "archive" => ended,
        _ => running.chain(ended).collect(),
    };
    let matching: Vec<&crate::world::Task> = listed
        .into_iter()
        .filter(|t| {
            userfilter
                .as_ref()
                .is_none_or(|f| listed_user(t).to_lowercase().contains(f.as_str()))
        })
        .filter(|t| auditor || t.user == caller || t.token_user() == caller)
        .filter(|t| typefilter.as_ref().is_none_or(|f| *f == t.task_type))
        .filter(|t| vmid.as_ref().is_none_or(|v| *v == t.id))
        .filter(|t| since.is_none_or(|s| t.starttime as i64 >= s))
        .filter(|t| until.is_none_or(|u| t.starttime as i64 <= u))
        .filter(|t| {
            classes
                .iter()
                .any(|c| c == status_class(t.exitstatus.as_deref()))
        })
        .collect();
    let total = matching.len() as u64;
    let rows: Vec<Value> = matching
        .into_iter()
        .skip(start)
        .take(limit)
        .map(|t| {
            let mut row = task_json(t);
            match &t.exitstatus {
                Some(status) => {
                    row.insert("status".into(), json!(status));
                    row.insert("endtime".into(), json!(t.endtime.unwrap_or(t.starttime)));
                }
                None => {
                    row.insert("user".into(), json!(t.token_user()));
                    row.remove("tokenid");
                    row.insert("status".into(), json!("RUNNING"));
                }
            }
            Value::Object(row)
        })
        .collect();
    Ok(Reply {
        total: Some(total),
        ..Reply::data(Value::Array(rows))
    })
}

/// The user `userfilter` is matched against: an active task's is not split yet.
fn listed_user(task: &crate::world::Task) -> String {
    match task.exitstatus {
        Some(_) => task.user.clone(),
        None => task.token_user(),
    }
}

/// pve-common `Tools.pm` `upid_normalize_status_type`; a running task has no status yet.
fn status_class(exitstatus: Option<&str>) -> &'static str {
    match exitstatus {
        None | Some("") | Some("unexpected status") => "unknown",
        Some("OK") => "ok",
        Some(s) if s.starts_with("WARNINGS: ") && s[10..].parse::<u64>().is_ok() => "warning",
        Some(_) => "error",
    }
}

/// The status classes a listing keeps: every one; those `statusfilter` names (unless
/// `errors=1`); or, with `errors=1`, every one but `ok`.
fn status_classes(call: &Call) -> Vec<String> {
    let every = ["ok", "warning", "error", "unknown"]
        .map(String::from)
        .to_vec();
    let errors = call.bool("errors").unwrap_or(false);
    match call.str("statusfilter") {
        _ if errors => every.into_iter().filter(|c| c != "ok").collect(),
        Some(list) => list
            .split(|c: char| c == ',' || c == ';' || c == '\0' || c.is_whitespace())
            .filter(|c| !c.is_empty())
            .map(str::to_lowercase)
            .collect(),
        None => every,
    }
}

fn find_task<'w>(world: &'w World, call: &Call) -> Result<&'w crate::world::Task, ApiError> {
    let upid = call.path_str("upid");
    let Some((upid_node, _, _)) = decode_upid(upid) else {
        return Err(ApiError::param("upid", "unable to parse worker upid"));
    };
    world
        .find_task(upid)
        .filter(|t| t.node == call.node() && upid_node == call.node())
        .ok_or_else(|| ApiError::param("upid", "no such task"))
}

pub fn task_index(world: &World, call: &Call) -> ApiResult {
    find_task(world, call)?;
    Ok(Reply::data(subdirs("name", &["log", "status"])))
}

pub fn task_status(world: &World, call: &Call) -> ApiResult {
    let task = find_task(world, call)?;
    let mut row = task_json(task);
    match &task.exitstatus {
        Some(exit) => {
            row.insert("status".into(), json!("stopped"));
            row.insert("exitstatus".into(), json!(exit));
        }
        None => {
            row.insert("status".into(), json!("running"));
        }
    }
    Ok(Reply::data(Value::Object(row)))
}

pub fn task_log(world: &World, call: &Call) -> ApiResult {
    let task = find_task(world, call)?;
    let start = call.int("start").unwrap_or(0).max(0) as usize;
    let limit = call.int("limit").unwrap_or(50).max(0) as usize;
    let lines: Vec<&str> = if task.log.is_empty() {
        vec!["no content"]
    } else {
        task.log.iter().map(String::as_str).collect()
    };
    let rows: Vec<Value> = lines
        .iter()
        .enumerate()
        .skip(start)
        .take(limit)
        .map(|(i, t)| json!({"n": i + 1, "t": t}))
        .collect();
    Ok(Reply {
        data: Value::Array(rows),
        total: Some(lines.len() as u64),
        wait: None,
    })
}

pub fn task_stop(world: &mut World, call: &Call) -> ApiResult {
    let upid = find_task(world, call)?.upid.clone();
    let ended_ms = world.elapsed_ms();
    if let Some(task) = world.tasks.get_mut(&upid)
        && task.exitstatus.is_none()
    {
        task.log.push("received interrupt".into());
        task.log.push("TASK ERROR: received interrupt".into());
        task.exitstatus = Some("received interrupt".into());
        task.endtime = Some(crate::world::unix_now());
        task.ended_ms = Some(ended_ms);
    }
    Ok(Reply::data(Value::Null))
}
