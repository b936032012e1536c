//! `/nodes/{node}/qemu/...`: VMs, clone, config, resize, power, destroy.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::api::{check_lock, load_vm, require, require_any, subdirs, vm_on_node};
use crate::call::{ApiError, ApiResult, Call, Reply, TaskWait, value_as_string};
use crate::cost::clone_disks::{CloneDisks, DiskWork};
use crate::ha_request::{Request, check_destroy, intercept};
use crate::shared::Shared;
use crate::tasks::{
    TaskLocks, TaskLog, TaskPrologue, TaskStage, start_locked_task, start_staged_task, start_task,
    start_task_with_prologue,
};
use crate::world::{
    Drive, Net, Vm, World, config_digest, format_size, is_drive_key, is_net_key, normalise_tags,
    parse_size, typed_config_value, vm_status_json, volume_format, volume_owner,
};

fn upid_reply(upid: String) -> ApiResult {
    Ok(Reply::data(json!(upid)))
}

/// A task on one VM holding its config lock, as most VM endpoints start one; a failure
/// injected for the task ends it before `body` runs.
fn start_vm_task(
    shared: &Arc<Shared>,
    world: &mut World,
    call: &Call,
    task_type: &str,
    body: impl FnOnce(&mut World, &mut TaskLog) -> Result<(), String> + Send + 'static,
) -> String {
    let vmid = call.vmid();
    start_locked_task(
        shared,
        world,
        call.node(),
        task_type,
        &vmid.to_string(),
        &call.token_user(),
        TaskLocks::exclusive(vmid),
        Box::new(move |world, log, injected| match injected {
            Some(failure) => Err(failure),
            None => body(world, log),
        }),
    )
}

pub fn list(world: &World, call: &Call) -> ApiResult {
    let node = call.node();
    // `full=1` asks QMP too: `qmpstatus` (paused) and the running machine, but no `ha`/`agent`.
    let full = call.bool("full").unwrap_or(false);
    let rows: Vec<Value> = world
        .vms
        .values()
        .filter(|vm| vm.node == node)
        .filter(|vm| world.has_privilege(&format!("/vms/{}", vm.vmid), "VM.Audit"))
        .map(|vm| {
            let mut row = vm_status_json(vm, call.now, full);
            if let Some(row) = row.as_object_mut() {
                row.remove("ha");
                row.remove("agent");
            }
            row
        })
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

pub fn index(world: &World, call: &Call) -> ApiResult {
    load_vm(world, call.node(), call.vmid())?;
    require(world, &format!("/vms/{}", call.vmid()), "VM.Audit")?;
    Ok(Reply::data(subdirs(
        "subdir",
        &[
            "config",
            "pending",
            "status",
            "unlink",
            "vncproxy",
            "termproxy",
            "migrate",
            "resize",
            "move",
            "rrd",
            "rrddata",
            "monitor",
            "agent",
            "snapshot",
            "spiceproxy",
            "sendkey",
            "firewall",
            "mtunnel",
            "remote_migrate",
        ],
    )))
}

pub fn create(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let node = call.node().to_string();
    let vmid = call.int("vmid").unwrap_or(0) as u32;
    // qemu-server 9.1.8 `create_vm`: enabling HA needs what adding an HA resource needs.
    let ha_managed = call.bool("ha-managed").unwrap_or(false);
    if ha_managed {
        require(world, "/", "Sys.Console")?;
    }
    require(world, &format!("/vms/{vmid}"), "VM.Allocate")?;
    if let Some(existing) = world.vms.get(&vmid) {
        return Err(ApiError::die(format!(
            "unable to create VM {vmid} - VM {vmid} already exists on node '{}'",
            existing.node
        )));
    }
    let mut config = BTreeMap::new();
    let mut new_volumes = Vec::new();
    let mut taken = BTreeSet::new();
    for (key, value) in call.params {
        if matches!(
            key.as_str(),
            "node"
                | "vmid"
                | "start"
                | "pool"
                | "unique"
                | "force"
                | "archive"
                | "storage"
                | "bwlimit"
                | "live-restore"
                | "ha-managed"
        ) {
            continue;
        }
        let Some(mut text) = value_as_string(value) else {
            continue;
        };
        if is_net_key(key) {
            let mut net = Net::parse(&text);
            if net.mac.is_none() {
                net.mac = Some(world.random_mac());
            }
            text = net.print();
        } else if is_drive_key(key) {
            let mut drive = Drive::parse(&text);
            if let Some((storage, gib)) = new_disk_spec(&drive) {
                let volid =
                    world.new_disk_volid(&storage, &node, vmid, drive.option("format"), &taken);
                taken.insert(volid.clone());
                drive.volid = volid.clone();
                drive.set_option("size", format_size(gib));
                new_volumes.push((storage, volid, gib));
                text = drive.print();
            }
        } else if key == "tags" {
            text = normalise_tags(&text);
        }
        config.insert(key.clone(), text);
    }
    config.insert("lock".into(), "create".into());
    let vm = new_vm(world, vmid, &node, config, call.now);
    world.vms.insert(vmid, vm);
    let pool = call.str("pool");
    let start_after = call.bool("start").unwrap_or(false);
    let body_node = node.clone();
    let task_shared = Arc::clone(shared);
    let user = call.token_user();
    let upid = start_task(
        shared,
        world,
        &node,
        "qmcreate",
        &vmid.to_string(),
        &call.token_user(),
        Box::new(move |world, log, injected| {
            if let Some(failure) = injected {
                world.vms.remove(&vmid);
                return Err(failure);
            }
            for (storage, volid, size) in new_volumes {
                let scope = world.scope_for(&storage, &body_node);
                let format = volume_format(&volid);
                world.put_volume(scope, &volid, size, "images", format, None, &body_node);
                log.info(format!("created volume '{volid}'"));
            }
            if let Some(pool) = pool
                && let Some(pool) = world.pools.get_mut(&pool)
            {
                pool.vms.insert(vmid);
            }
            if let Some(vm) = world.vms.get_mut(&vmid) {
                vm.config.remove("lock");
            }
            if ha_managed {
                crate::ha_request::add_created(world, log, vmid, start_after);
            }
            if start_after {
                autostart(&task_shared, world, log, (&body_node, vmid), &user);
            }
            Ok(())
        }),
    );
    upid_reply(upid)
}

/// `create_vm`'s "Execute autostart": `vm_start`, which for an HA-managed VM starts a
/// `hastart` task of its own.
fn autostart(
    shared: &Arc<Shared>,
    world: &mut World,
    log: &mut TaskLog,
    (node, vmid): (&str, u32),
    user: &str,
) {
    log.info("Execute autostart");
    if world.ha.is_managed(vmid) {
        crate::ha_request::request_task(shared, world, node, vmid, user, Request::Start);
        return;
    }
    if let Some(vm) = world.vms.get_mut(&vmid) {
        vm.running = true;
        vm.started_at = Some(Instant::now());
    }
}

/// `storage:SIZE_GIB` in a drive value asks PVE to allocate a new disk.
/// qemu-server `Cloudinit.pm` `CLOUDINIT_DISK_SIZE`: a new cloud-init drive's size.
const CLOUDINIT_DISK_SIZE: u64 = 4 << 20;

/// The storage of a drive given as `<storage>:cloudinit` (a cloud-init drive to allocate).
fn cloudinit_storage(volid: &str) -> Option<String> {
    let (storage, name) = volid.split_once(':')?;
    (name == "cloudinit" && !storage.is_empty()).then(|| storage.to_string())
}

/// qemu-server `Drive.pm` `drive_is_cloudinit`: the volume is `vm-<vmid>-cloudinit[.fmt]`.
fn is_cloudinit_drive(value: &str) -> bool {
    let volid = Drive::parse(value).volid;
    let file = crate::world::volume_file_name(&volid);
    let stem = file.split_once('.').map_or(file, |(stem, _)| stem);
    stem.strip_prefix("vm-")
        .and_then(|rest| rest.strip_suffix("-cloudinit"))
        .is_some_and(|id| id.parse::<u32>().is_ok())
}

fn new_disk_spec(drive: &Drive) -> Option<(String, u64)> {
    if drive.is_cdrom() {
        return None;
    }
    let (storage, size) = drive.volid.split_once(':')?;
    let gib: f64 = size.parse().ok()?;
    Some((storage.to_string(), (gib * (1u64 << 30) as f64) as u64))
}

fn new_vm(
    world: &mut World,
    vmid: u32,
    node: &str,
    config: BTreeMap<String, String>,
    now: Instant,
) -> Vm {
    let lag = Duration::from_millis(world.timings.cluster_resources_lag_ms);
    Vm {
        vmid,
        node: node.to_string(),
        config,
        pending: BTreeMap::new(),
        pending_delete: BTreeSet::new(),
        running: false,
        paused: false,
        started_at: None,
        stats_from: now + lag,
        agent: None,
        guest: crate::guest::Guest::default(),
        pid: 0,
    }
}

fn random_uuid() -> String {
    let hex: String = (0..32)
        .map(|_| format!("{:x}", fastrand::u8(0..16)))
        .collect();
    format!(
        "{}-{}-4{}-a{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// What `clone_vm`'s `$load_and_check` establishes before the fork (and again in the worker).
struct ClonePlan {
    full: bool,
    /// Drive key → parsed drive, for every disk to copy (cdroms are copied verbatim).
    disks: Vec<(String, Drive)>,
}

/// qemu-server `API2/Qemu.pm` `clone_vm`: `$load_and_check`, in its order, with
/// `$check_storage_access_clone` (`Datastore.AllocateSpace` on every disk's storage, or on
/// `storage`) and `check_bridge_access` (`SDN.Use` on every NIC's bridge/VLAN).
fn clone_load_and_check(world: &World, call: &Call) -> Result<ClonePlan, ApiError> {
    let node = call.node();
    let vmid = call.vmid();
    let newid = call.int("newid").unwrap_or(0) as u32;
    let (target, storage) = check_clone_destination(world, call)?;
    check_quorum(world)?;
    let source = load_vm(world, node, vmid)?;
    check_lock(source).map_err(ApiError::die)?;
    if let Some(snapshot) = call.str("snapname") {
        // pve-sim models no snapshots.
        return Err(ApiError::die(format!(
            "snapshot '{snapshot}' does not exist"
        )));
    }
    let full = call.bool("full").unwrap_or(!source.is_template());
    for param in ["storage", "format"] {
        if !full && call.params.contains_key(param) {
            return Err(ApiError::die(format!(
                "parameter '{param}' not allowed for linked clones"
            )));
        }
    }
    let (disks, shared_vm) = clone_disks(world, source, storage.as_deref())?;
    for (key, value) in &source.config {
        if is_net_key(key) {
            check_bridge_access(world, &Net::parse(value))?;
        }
    }
    if let Some(target) = &target
        && !shared_vm
    {
        return Err(ApiError::die(format!(
            "can't clone VM to node '{target}' (VM uses local storage)"
        )));
    }
    if world.vms.get(&newid).is_some_and(|vm| vm.node == node) {
        return Err(ApiError::die(format!(
            "unable to create VM {newid}: config file already exists"
        )));
    }
    if !full
        && !source.is_template()
        && let Some((key, drive)) = disks.first()
    {
        // Only base volumes of a template have the 'clone' feature.
        return Err(ApiError::die(format!(
            "Linked clone feature is not supported for '{}' ({key})",
            drive.volid
        )));
    }
    Ok(ClonePlan { full, disks })
}

/// The pool, the target node and the target storage exist, and the storage can take the
/// clone there; returns the target (`None` = this node) and the storage.
fn check_clone_destination(
    world: &World,
    call: &Call,
) -> Result<(Option<String>, Option<String>), ApiError> {
    let node = call.node();
    if let Some(pool) = call.str("pool")
        && !world.pools.contains_key(&pool)
    {
        return Err(ApiError::perm(format!("pool '{pool}' does not exist")));
    }
    let target = call.str("target").filter(|t| t != node);
    if let Some(target) = &target
        && world.node(target).is_none()
    {
        return Err(ApiError::die(format!("no such cluster node '{target}'")));
    }
    let storage = call.str("storage");
    if let Some(storage) = &storage {
        let config = match world.storage(storage) {
            None => return Err(ApiError::die(format!("storage '{storage}' does not exist"))),
            Some(s) if !s.enabled => {
                return Err(ApiError::die(format!("storage '{storage}' is disabled")));
            }
            Some(s) => s,
        };
        if !config.content.iter().any(|c| c == "images") {
            return Err(ApiError::param(
                "storage",
                format!("storage '{storage}' does not support vm images"),
            ));
        }
        if let Some(target) = &target {
            if !World::storage_on_node(config, target) {
                return Err(ApiError::die(format!(
                    "storage '{storage}' is not available on node '{target}'"
                )));
            }
            if !config.shared {
                return Err(ApiError::die(format!(
                    "can't clone to non-shared storage '{storage}'"
                )));
            }
        }
    }
    Ok((target, storage))
}

/// pmxcfs is writable only with quorum: more than half of the nodes online.
fn check_quorum(world: &World) -> Result<(), ApiError> {
    let online = world
        .nodes
        .iter()
        .filter(|n| world.node_online(&n.name))
        .count();
    if online * 2 <= world.nodes.len() {
        return Err(ApiError::die("cluster not ready - no quorum?"));
    }
    Ok(())
}

/// The disks to copy (cdroms are copied verbatim), each after `Datastore.AllocateSpace`
/// on the storage it goes to, and whether every disk is on shared storage.
fn clone_disks(
    world: &World,
    source: &Vm,
    storage: Option<&str>,
) -> Result<(Vec<(String, Drive)>, bool), ApiError> {
    let mut shared_vm = true;
    let mut disks = Vec::new();
    for (key, value) in &source.config {
        if !is_drive_key(key) || key.starts_with("unused") {
            continue;
        }
        let drive = Drive::parse(value);
        let Some((sid, _)) = drive.volid.split_once(':') else {
            continue;
        };
        if world.storage(sid).is_none_or(|s| !s.shared) {
            shared_vm = false;
        }
        if drive.is_cdrom() {
            continue;
        }
        let space_on = storage.unwrap_or(sid);
        require(
            world,
            &format!("/storage/{space_on}"),
            "Datastore.AllocateSpace",
        )?;
        disks.push((key.clone(), drive));
    }
    Ok((disks, shared_vm))
}

/// `SDN.Use` on `/sdn/zones/localnetwork/<bridge>[/<tag>]` (pve-guest-common
/// `GuestHelpers.pm` `check_vnet_access`).
fn check_bridge_access(world: &World, net: &Net) -> Result<(), ApiError> {
    let Some(bridge) = net.bridge() else {
        return Ok(());
    };
    let path = match net.options.get("tag") {
        Some(tag) => format!("/sdn/zones/localnetwork/{bridge}/{tag}"),
        None => format!("/sdn/zones/localnetwork/{bridge}"),
    };
    require(world, &path, "SDN.Use")
}

pub fn clone(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let node = call.node().to_string();
    let vmid = call.vmid();
    let newid = call.int("newid").unwrap_or(0) as u32;
    check_clone_permission(world, call, vmid, newid)?;
    let plan = clone_load_and_check(world, call)?;
    let source = load_vm(world, &node, vmid)?;
    let source_running = source.running;
    let job = CloneJob {
        vmid,
        newid,
        node: node.clone(),
        plan,
        source_config: source.config.clone(),
        source_disk: source.guest.disk_copy(),
        source_pending: !source.pending.is_empty(),
        target: call.str("target").filter(|t| *t != node),
        storage: call.str("storage"),
        format: call.str("format"),
        name: call.str("name"),
        description: call.str("description"),
        pool: call.str("pool"),
    };
    // Source shared when stopped (parallel clones of a template), exclusive when running;
    // newid exclusive; both with clone's 1 s timeout.
    let clone_locks = TaskLocks {
        vms: vec![(vmid, source_running), (newid, true)],
        timeout: Duration::from_secs(1),
    };
    let prologue_delay = Duration::from_millis(world.timings.clone_config_ms);
    let disk_stage = shared.cost.as_ref().map(|_| {
        let storage = job.storage.as_deref();
        clone_disk_stage(world, &node, newid, &job.plan, storage)
    });
    let upid = start_staged_task(
        shared,
        world,
        &node,
        "qmclone",
        &vmid.to_string(),
        &call.token_user(),
        clone_locks,
        (prologue_delay, clone_prologue(vmid, newid, node.clone())),
        disk_stage,
        Box::new(move |world, log, injected| job.run(world, log, injected)),
    );
    upid_reply(upid)
}

/// Under the cost profile, the clone's disk work (allocation under the storage lock, then
/// the copy) takes its time before the new VM is complete: each disk goes to `storage`, or
/// stays on its own storage (a linked clone's always does: `vdisk_clone` of its base).
fn clone_disk_stage(
    world: &World,
    node: &str,
    newid: u32,
    plan: &ClonePlan,
    storage: Option<&str>,
) -> TaskStage {
    let disks = plan
        .disks
        .iter()
        .map(|(_, drive)| {
            let source = drive.volid.split_once(':').map_or("", |(sid, _)| sid);
            let target = storage.filter(|_| plan.full).unwrap_or(source);
            let config = world.storage(target);
            DiskWork {
                storage: target.to_string(),
                plugin_type: config.map(|s| s.plugin_type.clone()).unwrap_or_default(),
                shared: config.is_some_and(|s| s.shared),
                full: plan.full,
                size: drive.size().unwrap_or(0),
            }
        })
        .collect();
    let work = CloneDisks {
        node: node.to_string(),
        newid,
        disks,
    };
    Box::new(move |shared, upid| Box::pin(crate::cost::clone_disks::run(shared, upid, work)))
}

/// The method's permission schema: VM.Clone on the source, and VM.Allocate on the new
/// VMID *or* on the pool it goes into (an 'or' failure names no path).
fn check_clone_permission(
    world: &World,
    call: &Call,
    vmid: u32,
    newid: u32,
) -> Result<(), ApiError> {
    require(world, &format!("/vms/{vmid}"), "VM.Clone")?;
    let may_allocate = world.has_privilege(&format!("/vms/{newid}"), "VM.Allocate")
        || call
            .str("pool")
            .is_some_and(|p| world.has_privilege(&format!("/pool/{p}"), "VM.Allocate"));
    if may_allocate {
        Ok(())
    } else {
        Err(ApiError::perm_unnamed())
    }
}

/// The worker, once it holds the locks: repeat the checks, announce itself, then write
/// the temporary config. Until then the new VMID does not exist anywhere.
fn clone_prologue(vmid: u32, newid: u32, node: String) -> TaskPrologue {
    Box::new(move |world, log, _injected| {
        let vm = world.vms.get(&vmid).filter(|vm| vm.node == node);
        let vm = vm.ok_or_else(|| {
            format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
        })?;
        check_lock(vm)?;
        if let Some(existing) = world.vms.get(&newid) {
            return Err(if existing.node == node {
                format!("unable to create VM {newid}: config file already exists")
            } else {
                // pmxcfs refuses a VMID owned by another node.
                format!(
                    "close (rename) atomic file \
                     '/etc/pve/nodes/{node}/qemu-server/{newid}.conf' \
                     failed: File exists"
                )
            });
        }
        log.info(format!("creating a clone of VM {vmid} with ID {newid}"));
        let temp = BTreeMap::from([("lock".to_string(), "clone".to_string())]);
        let vm = new_vm(world, newid, &node, temp, Instant::now());
        world.vms.insert(newid, vm);
        Ok(())
    })
}

/// What the clone worker needs, taken from the request and the source when it starts.
struct CloneJob {
    vmid: u32,
    newid: u32,
    node: String,
    plan: ClonePlan,
    source_config: BTreeMap<String, String>,
    /// What the source's disks hold: a clone's guest starts from it (a dirty template is
    /// dirty in every clone).
    source_disk: crate::guest::Guest,
    source_pending: bool,
    target: Option<String>,
    storage: Option<String>,
    format: Option<String>,
    name: Option<String>,
    description: Option<String>,
    pool: Option<String>,
}

/// A new volume: storage, volid, size in bytes.
type NewVolume = (String, String, u64);

impl CloneJob {
    fn run(
        self,
        world: &mut World,
        log: &mut TaskLog,
        injected: Option<String>,
    ) -> Result<(), String> {
        if let Some(failure) = injected {
            world.vms.remove(&self.newid);
            return Err(failure);
        }
        if self.source_pending {
            log.info("found pending changes, discarding for clone");
        }
        let (mut config, new_volumes) = self.copy_config(world, log);
        self.name_and_identify(&mut config);
        for (storage, volid, size) in new_volumes {
            let scope = world.scope_for(&storage, &self.node);
            let format = volume_format(&volid);
            world.put_volume(scope, &volid, size, "images", format, None, &self.node);
        }
        if let Some(pool) = &self.pool
            && let Some(pool) = world.pools.get_mut(pool)
        {
            pool.vms.insert(self.newid);
        }
        let newid = self.newid;
        let Some(vm) = world.vms.get_mut(&newid) else {
            return Err(format!("clone failed: VM {newid} vanished"));
        };
        vm.config = config;
        vm.guest = self.source_disk;
        if let Some(target) = self.target {
            vm.node = target;
        }
        Ok(())
    }

    /// The source's config without its snapshot and template state: new MACs, and every
    /// disk copied (full) or linked to its base (linked).
    fn copy_config(
        &self,
        world: &mut World,
        log: &mut TaskLog,
    ) -> (BTreeMap<String, String>, Vec<NewVolume>) {
        let mut config = BTreeMap::new();
        let mut taken = BTreeSet::new();
        let mut new_volumes = Vec::new();
        for (key, value) in &self.source_config {
            if matches!(
                key.as_str(),
                "snapshots" | "parent" | "snaptime" | "vmstate" | "snapstate" | "template" | "lock"
            ) || key.starts_with("unused")
            {
                continue;
            }
            if is_net_key(key) {
                let mut net = Net::parse(value);
                net.mac = Some(world.random_mac());
                config.insert(key.clone(), net.print());
                continue;
            }
            let Some((_, drive)) = self.plan.disks.iter().find(|(k, _)| k == key) else {
                config.insert(key.clone(), value.clone());
                continue;
            };
            let mut drive = drive.clone();
            let (dest_storage, volid, size) = self.copy_disk(world, log, key, &drive, &taken);
            taken.insert(volid.clone());
            new_volumes.push((dest_storage, volid.clone(), size));
            drive.volid = volid;
            config.insert(key.clone(), drive.print());
            let gib = size as f64 / (1u64 << 30) as f64;
            log.info(format!(
                "transferred {gib:.1} GiB of {gib:.1} GiB (100.00%)"
            ));
        }
        (config, new_volumes)
    }

    /// The new volume of one disk, not yet in its storage.
    fn copy_disk(
        &self,
        world: &mut World,
        log: &mut TaskLog,
        key: &str,
        drive: &Drive,
        taken: &BTreeSet<String>,
    ) -> NewVolume {
        let source_storage = drive
            .volid
            .split_once(':')
            .map(|x| x.0.to_string())
            .unwrap_or_default();
        let dest_storage = self.storage.clone().unwrap_or(source_storage);
        let size = drive.size().unwrap_or(0);
        let (node, newid) = (&self.node, self.newid);
        let volid = if self.plan.full {
            log.info(format!(
                "create full clone of drive {key} ({})",
                drive.volid
            ));
            // The requested format, else the source's (qemu-server
            // `resolve_dst_disk_format`); block storages only hold raw.
            let wanted = self
                .format
                .clone()
                .unwrap_or_else(|| volume_format(&drive.volid).to_string());
            world.new_disk_volid(&dest_storage, node, newid, Some(&wanted), taken)
        } else {
            log.info(format!(
                "create linked clone of drive {key} ({})",
                drive.volid
            ));
            world.linked_clone_volid(&drive.volid, node, newid, taken)
        };
        (dest_storage, volid, size)
    }

    /// A new SMBIOS UUID and VM generation ID; the name and description asked for.
    fn name_and_identify(&self, config: &mut BTreeMap<String, String>) {
        config.insert("smbios1".into(), format!("uuid={}", random_uuid()));
        if config.contains_key("vmgenid") {
            config.insert("vmgenid".into(), random_uuid());
        }
        let source_name = self
            .source_config
            .get("name")
            .cloned()
            .unwrap_or_else(|| self.vmid.to_string());
        let name = self.name.clone();
        config.insert(
            "name".into(),
            name.unwrap_or(format!("Copy-of-VM-{source_name}")),
        );
        if let Some(description) = self.description.as_ref().filter(|d| !d.is_empty()) {
            config.insert("description".into(), description.trim_end().to_string());
        }
    }
}

pub fn config_get(world: &World, call: &Call) -> ApiResult {
    require(world, &format!("/vms/{}", call.vmid()), "VM.Audit")?;
    let vm = load_vm(world, call.node(), call.vmid())?;
    let current = call.bool("current").unwrap_or(false);
    let mut effective = vm.config.clone();
    if !current {
        for (k, v) in &vm.pending {
            effective.insert(k.clone(), v.clone());
        }
        for k in &vm.pending_delete {
            effective.remove(k);
        }
    }
    let mut out = Map::new();
    for (k, v) in &effective {
        let value = if k == "cipassword" {
            json!("**********")
        } else {
            typed_config_value(k, v)
        };
        out.insert(k.clone(), value);
    }
    out.insert(
        "digest".into(),
        json!(config_digest(&vm.config, &vm.pending)),
    );
    Ok(Reply::data(Value::Object(out)))
}

pub fn pending(world: &World, call: &Call) -> ApiResult {
    require(world, &format!("/vms/{}", call.vmid()), "VM.Audit")?;
    let vm = load_vm(world, call.node(), call.vmid())?;
    let keys: BTreeSet<&String> = vm
        .config
        .keys()
        .chain(vm.pending.keys())
        .chain(vm.pending_delete.iter())
        .collect();
    let rows: Vec<Value> = keys
        .into_iter()
        .map(|key| {
            let mut row = Map::new();
            row.insert("key".into(), json!(key));
            if let Some(v) = vm.config.get(key) {
                row.insert("value".into(), typed_config_value(key, v));
            }
            if let Some(v) = vm.pending.get(key) {
                row.insert("pending".into(), typed_config_value(key, v));
            }
            if vm.pending_delete.contains(key) {
                row.insert("delete".into(), json!(1));
            }
            Value::Object(row)
        })
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

/// A validated config change, ready to apply.
#[derive(Debug, Default)]
struct ConfigChange {
    set: Vec<(String, String)>,
    delete: Vec<String>,
    revert: Vec<String>,
    new_volumes: Vec<(String, String, u64)>,
}

const CONFIG_CONTROL_PARAMS: &[&str] = &[
    "node",
    "vmid",
    "digest",
    "delete",
    "revert",
    "skiplock",
    "force",
    "background_delay",
];

/// What `$check_vm_modify_config_perm` (qemu-server `API2/Qemu.pm`) asks of a config key.
enum KeyPermission {
    One(&'static str),
    /// Any of these (`check_vm_perm` with `any`).
    Any(&'static [&'static str]),
    /// All of these.
    All(&'static [&'static str]),
    /// Keys outside PVE's tables (`args`, `affinity`, `lock`, ...): root@pam only.
    RootOnly,
}

fn config_privilege(key: &str) -> KeyPermission {
    use KeyPermission::{All, Any, One, RootOnly};
    match key {
        "cores" | "cpu" | "runningcpu" | "cpulimit" | "cpuunits" | "numa" | "smp" | "sockets"
        | "vcpus" => One("VM.Config.CPU"),
        k if k
            .strip_prefix("numa")
            .is_some_and(|n| n.parse::<u32>().is_ok()) =>
        {
            One("VM.Config.CPU")
        }
        "memory" | "balloon" | "shares" | "allow-ksm" => One("VM.Config.Memory"),
        "acpi" | "hotplug" | "kvm" | "machine" | "runningmachine" | "scsihw" | "smbios1"
        | "tablet" | "vga" | "watchdog" | "audio0" | "rng0" => One("VM.Config.HWType"),
        // A serial socket is HWType (checked in the update); real devices are root's.
        k if k.starts_with("serial") => One("VM.Config.HWType"),
        "agent" | "autostart" | "bios" | "description" | "keyboard" | "localtime"
        | "migrate_downtime" | "migrate_speed" | "name" | "onboot" | "ostype" | "protection"
        | "reboot" | "startdate" | "startup" | "tdf" | "template" => One("VM.Config.Options"),
        // Tags have their own rules (`assert_tag_permissions`): VM.Config.Options on the VM.
        "tags" => One("VM.Config.Options"),
        "freeze" => One("VM.PowerMgmt"),
        // `boot` is a disk option to PVE, not a general one.
        "boot" | "bootdisk" | "vmstatestorage" => One("VM.Config.Disk"),
        k if is_net_key(k) => One("VM.Config.Network"),
        k if is_drive_key(k) => One("VM.Config.Disk"),
        k if k.starts_with("ipconfig")
            || matches!(
                k,
                "ciuser"
                    | "cipassword"
                    | "sshkeys"
                    | "nameserver"
                    | "searchdomain"
                    | "citype"
                    | "ciupgrade"
                    | "cicustom"
            ) =>
        {
            Any(&["VM.Config.Cloudinit", "VM.Config.Network"])
        }
        "vmstate" => All(&["VM.Config.Disk", "VM.PowerMgmt"]),
        _ => RootOnly,
    }
}

fn require_key_permission(world: &World, vm_path: &str, key: &str) -> Result<(), ApiError> {
    match config_privilege(key) {
        KeyPermission::One(privilege) => require(world, vm_path, privilege),
        KeyPermission::Any(privileges) => require_any(world, vm_path, privileges),
        KeyPermission::All(privileges) => privileges
            .iter()
            .try_for_each(|privilege| require(world, vm_path, privilege)),
        KeyPermission::RootOnly => Err(ApiError::die(format!("only root can set '{key}' config"))),
    }
}

fn prepare_config_change(world: &World, vm: &Vm, call: &Call) -> Result<ConfigChange, ApiError> {
    let vmid = vm.vmid;
    let vm_path = format!("/vms/{vmid}");
    if call.params.contains_key("skiplock") {
        return Err(ApiError::param(
            "skiplock",
            "Only root may use this option.",
        ));
    }
    let mut change = ConfigChange::default();
    let split_list = |text: String| -> Vec<String> {
        text.split([',', ';', ' '])
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    change.delete = call.str("delete").map(split_list).unwrap_or_default();
    change.revert = call.str("revert").map(split_list).unwrap_or_default();
    let mut errors = BTreeMap::new();
    let mut taken = BTreeSet::new();
    for (key, value) in call.params {
        if CONFIG_CONTROL_PARAMS.contains(&key.as_str()) {
            continue;
        }
        if change.delete.contains(key) {
            errors.insert(
                key.clone(),
                format!("unable to delete '{key}' - option is also set"),
            );
            continue;
        }
        let Some(mut text) = value_as_string(value) else {
            continue;
        };
        if key == "tags" {
            require(world, &vm_path, "VM.Config.Options")?;
            text = normalise_tags(&text);
        } else if !is_drive_key(key) {
            // Drives are checked by value (CDROM or Disk) in the update itself.
            require_key_permission(world, &vm_path, key)?;
        }
        if is_net_key(key) {
            let mut net = Net::parse(&text);
            if net.mac.is_none() {
                net.mac = Some(world.random_mac());
            }
            check_bridge_access(world, &net)?;
            text = net.print();
        } else if is_drive_key(key) {
            let mut drive = Drive::parse(&text);
            if drive.volid.contains(":iso/") && !drive.is_cdrom() {
                errors.insert(
                    key.clone(),
                    "explicit 'media=cdrom' is required for iso images".into(),
                );
                continue;
            }
            if let Some(storage) = cloudinit_storage(&drive.volid) {
                let volume = cloudinit_drive(world, vm, &change, key, &mut drive, storage)?;
                change.new_volumes.push(volume);
                text = drive.print();
            } else if let Some((storage, size)) = new_disk_spec(&drive) {
                let volume = new_disk(world, vm, &mut drive, storage, size, &taken)?;
                taken.insert(volume.1.clone());
                change.new_volumes.push(volume);
                text = drive.print();
            } else {
                check_volume_access(world, vmid, &drive.volid)?;
            }
        } else if key == "description" {
            text = text.trim_end().to_string();
            if text.is_empty() {
                change.delete.push(key.clone());
                continue;
            }
        }
        change.set.push((key.clone(), text));
    }
    for key in change.delete.iter().filter(|k| !is_drive_key(k)) {
        require_key_permission(world, &vm_path, key)?;
    }
    if !errors.is_empty() {
        return Err(ApiError::params(errors));
    }
    if change.set.is_empty() && change.delete.is_empty() && change.revert.is_empty() {
        return Err(ApiError::die("no options specified"));
    }
    Ok(change)
}

/// qemu-server `create_disks`: one cloud-init drive per VM, allocated as
/// `vm-<vmid>-cloudinit` (qcow2 where the storage has a path), 4 MiB. Points `drive` at
/// it and returns the volume to create.
fn cloudinit_drive(
    world: &World,
    vm: &Vm,
    change: &ConfigChange,
    key: &str,
    drive: &mut Drive,
    storage: String,
) -> Result<(String, String, u64), ApiError> {
    let vmid = vm.vmid;
    let attached = vm
        .config
        .iter()
        .chain(&vm.pending)
        .chain(change.set.iter().map(|(k, v)| (k, v)))
        .find(|(other, value)| *other != key && is_drive_key(other) && is_cloudinit_drive(value));
    if let Some((other, _)) = attached {
        return Err(ApiError::die(format!(
            "{key} - cloud-init drive is already attached at '{other}'"
        )));
    }
    let Some(config) = world.storage(&storage) else {
        return Err(ApiError::die(format!("storage '{storage}' does not exist")));
    };
    let volid = if config.is_file_based() {
        let format = drive.option("format").unwrap_or("qcow2");
        format!("{storage}:{vmid}/vm-{vmid}-cloudinit.{format}")
    } else {
        format!("{storage}:vm-{vmid}-cloudinit")
    };
    drive.volid = volid.clone();
    drive.set_option("media", "cdrom".into());
    drive.options.retain(|(k, _)| k != "format");
    Ok((storage, volid, CLOUDINIT_DISK_SIZE))
}

/// A disk given as `<storage>:<GiB>`: allocated under a free name after
/// `Datastore.AllocateSpace` on its storage. Points `drive` at it and returns the volume.
fn new_disk(
    world: &World,
    vm: &Vm,
    drive: &mut Drive,
    storage: String,
    size: u64,
    taken: &BTreeSet<String>,
) -> Result<(String, String, u64), ApiError> {
    require(
        world,
        &format!("/storage/{storage}"),
        "Datastore.AllocateSpace",
    )?;
    let volid = world.new_disk_volid(&storage, &vm.node, vm.vmid, drive.option("format"), taken);
    drive.volid = volid.clone();
    drive.set_option("size", format_size(size));
    drive.options.retain(|(k, _)| k != "format");
    drive.options.sort();
    Ok((storage, volid, size))
}

/// pve-storage `Storage.pm` `check_volume_access` for an existing volume in a drive:
/// `Datastore.Allocate` on its storage suffices; else an ISO needs `Datastore.AllocateSpace`
/// or `Datastore.Audit` there, and another VM's disk `Datastore.Audit` plus `VM.Config.Disk`
/// on that VM.
fn check_volume_access(world: &World, vmid: u32, volid: &str) -> Result<(), ApiError> {
    let Some((storage, _)) = volid.split_once(':') else {
        return Ok(());
    };
    let storage_path = format!("/storage/{storage}");
    if world.has_privilege(&storage_path, "Datastore.Allocate") {
        return Ok(());
    }
    if volid.contains(":iso/") {
        return require_any(
            world,
            &storage_path,
            &["Datastore.AllocateSpace", "Datastore.Audit"],
        );
    }
    match volume_owner(volid) {
        Some(owner) if owner == vmid => Ok(()),
        Some(owner) => {
            require(world, &storage_path, "Datastore.Audit")?;
            require(world, &format!("/vms/{owner}"), "VM.Config.Disk")
        }
        None => Err(ApiError::die(format!(
            "missing privileges to access {volid}"
        ))),
    }
}

/// The privilege a drive value needs (`$check_drive_perms` in `$update_vm_api`).
fn drive_privilege(value: &str) -> &'static str {
    if Drive::parse(value).is_cdrom() {
        "VM.Config.CDROM"
    } else {
        "VM.Config.Disk"
    }
}

/// The part of qemu-server `API2/Qemu.pm` `$update_vm_api`'s `$updatefn` that runs under
/// the config lock (in the `qmconfig` worker for POST, inline for PUT) before anything is
/// written: drive privileges by value (old and new), then `create_disks`, which activates
/// every existing volume (`volume '…' does not exist`) and records its size; a new cdrom is
/// appended to an explicit boot order.
fn finish_config_change(world: &World, vm: &Vm, change: &mut ConfigChange) -> Result<(), ApiError> {
    let vm_path = format!("/vms/{}", vm.vmid);
    for key in change.delete.iter().filter(|k| is_drive_key(k)) {
        if let Some(old) = vm.config.get(key).or_else(|| vm.pending.get(key)) {
            require(world, &vm_path, drive_privilege(old))?;
        }
    }
    let mut boot_order: Option<Vec<String>> = vm
        .pending
        .get("boot")
        .or_else(|| vm.config.get("boot"))
        .and_then(|boot| {
            boot.split(',')
                .find_map(|part| part.strip_prefix("order="))
                .map(|order| order.split(';').map(str::to_string).collect())
        });
    let mut boot_changed = false;
    let new_volids: BTreeSet<&String> = change.new_volumes.iter().map(|(_, v, _)| v).collect();
    for (key, value) in change.set.iter_mut() {
        if !is_drive_key(key) {
            continue;
        }
        if let Some(old) = vm.config.get(key.as_str()) {
            require(world, &vm_path, drive_privilege(old))?;
        }
        require(world, &vm_path, drive_privilege(value))?;
        let mut drive = Drive::parse(value);
        if drive.volid.contains(':') && !new_volids.contains(&drive.volid) {
            let volume = world
                .volume(&drive.volid, &vm.node)
                .ok_or_else(|| ApiError::die(format!("volume '{}' does not exist", drive.volid)))?;
            drive.set_option("size", format_size(volume.size));
            drive.options.sort();
            *value = drive.print();
        }
        if drive.is_cdrom()
            && let Some(order) = boot_order.as_mut()
            && !order.iter().any(|k| k == key)
        {
            order.push(key.clone());
            boot_changed = true;
        }
    }
    if boot_changed
        && let Some(order) = boot_order
        && !change.set.iter().any(|(k, _)| k == "boot")
    {
        change
            .set
            .push(("boot".into(), format!("order={}", order.join(";"))));
    }
    Ok(())
}

/// Options that apply at once even on a running VM (fast-plug, and the NIC and drive rules
/// of `hotplug`); everything else stays pending until the next start.
fn hot_applies(config: &BTreeMap<String, String>, key: &str, value: Option<&str>) -> bool {
    if is_drive_key(key) {
        return match value {
            Some(value) => crate::hotplug::set_applies(config, key, value),
            None => crate::hotplug::delete_applies(config, key),
        };
    }
    if is_net_key(key) {
        return match value {
            Some(value) => crate::hotplug::net_set_applies(config, key, value),
            None => crate::hotplug::net_delete_applies(config),
        };
    }
    matches!(
        key,
        "name"
            | "description"
            | "tags"
            | "onboot"
            | "protection"
            | "lock"
            | "startup"
            | "hookscript"
    )
}

fn apply_config_change(world: &mut World, vmid: u32, change: ConfigChange, log: &mut TaskLog) {
    let Some(node) = world.vms.get(&vmid).map(|vm| vm.node.clone()) else {
        return;
    };
    for (storage, volid, size) in &change.new_volumes {
        let scope = world.scope_for(storage, &node);
        world.put_volume(
            scope,
            volid,
            *size,
            "images",
            volume_format(volid),
            None,
            &node,
        );
    }
    let Some(vm) = world.vms.get_mut(&vmid) else {
        return;
    };
    for key in &change.revert {
        vm.pending.remove(key);
        vm.pending_delete.remove(key);
    }
    for key in &change.delete {
        if !vm.running || hot_applies(&vm.config, key, None) {
            vm.config.remove(key);
            vm.pending.remove(key);
        } else {
            vm.pending_delete.insert(key.clone());
        }
    }
    for (key, value) in change.set {
        log.info(format!("update VM {vmid}: -{key} ..."));
        if !vm.running || hot_applies(&vm.config, &key, Some(&value)) {
            vm.pending.remove(&key);
            vm.pending_delete.remove(&key);
            vm.config.insert(key, value);
        } else {
            vm.pending_delete.remove(&key);
            vm.pending.insert(key, value);
        }
    }
    // pve-guest-common AbstractConfig.pm `cleanup_pending`: nothing stays pending that
    // would change nothing (a value equal to the current one, a delete of an unset key).
    let config = &vm.config;
    vm.pending
        .retain(|key, value| config.get(key) != Some(value));
    vm.pending_delete.retain(|key| config.contains_key(key));
}

fn check_digest(vm: &Vm, call: &Call) -> Result<(), String> {
    match call.str("digest") {
        Some(digest) if digest != config_digest(&vm.config, &vm.pending) => {
            Err("checksum mismatch (file change by other user?)".into())
        }
        _ => Ok(()),
    }
}

pub fn config_post(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    let vm = load_vm(world, call.node(), vmid)?;
    check_digest(vm, call).map_err(ApiError::die)?;
    check_lock(vm).map_err(ApiError::die)?;
    let change = prepare_config_change(world, vm, call)?;
    // PVE checks the digest again inside the worker, under the config lock
    // (qemu-server Qemu.pm, update_vm_api's $updatefn): a write that raced ours loses there.
    let digest = call.str("digest");
    let upid = start_vm_task(shared, world, call, "qmconfig", move |world, log| {
        let vm = world
            .vms
            .get(&vmid)
            .ok_or_else(|| format!("VM {vmid} does not exist"))?;
        if let Some(digest) = &digest
            && *digest != config_digest(&vm.config, &vm.pending)
        {
            return Err("checksum mismatch (file change by other user?)".into());
        }
        check_lock(vm)?;
        let mut change = change;
        finish_config_change(world, vm, &mut change).map_err(|e| e.message)?;
        apply_config_change(world, vmid, change, log);
        Ok(())
    });
    let wait = call
        .int("background_delay")
        .filter(|d| *d > 0)
        .map(|d| TaskWait {
            upid: upid.clone(),
            max: Duration::from_secs(d as u64),
            failure_prefix: Some(format!("failed to update VM {vmid}: ")),
        });
    Ok(Reply {
        data: json!(upid),
        total: None,
        wait,
    })
}

pub fn config_put(world: &mut World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    let vm = load_vm(world, call.node(), vmid)?;
    if world.flock_busy(vmid) {
        return Err(ApiError::flock_busy(vmid));
    }
    check_digest(vm, call).map_err(ApiError::die)?;
    check_lock(vm).map_err(ApiError::die)?;
    let mut change = prepare_config_change(world, vm, call)?;
    finish_config_change(world, vm, &mut change)?;
    let mut log = TaskLog::default();
    apply_config_change(world, vmid, change, &mut log);
    Ok(Reply::data(Value::Null))
}

pub fn resize(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    let node = call.node().to_string();
    require(world, &format!("/vms/{vmid}"), "VM.Config.Disk")?;
    load_vm(world, &node, vmid)?;
    if call.params.contains_key("skiplock") {
        return Err(ApiError::param(
            "skiplock",
            "Only root may use this option.",
        ));
    }
    let disk = call.str("disk").unwrap_or_default();
    let size = call.str("size").unwrap_or_default();
    let digest = call.str("digest");
    let upid = start_vm_task(shared, world, call, "resize", move |world, log| {
        let vm = world.vms.get(&vmid).ok_or_else(|| {
            format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
        })?;
        if let Some(digest) = &digest
            && *digest != config_digest(&vm.config, &vm.pending)
        {
            return Err("checksum mismatch (file change by other user?)".into());
        }
        check_lock(vm)?;
        let value = vm
            .config
            .get(&disk)
            .ok_or_else(|| format!("disk '{disk}' does not exist"))?;
        let mut drive = Drive::parse(value);
        if drive.is_cdrom() {
            return Err("you can't resize a cdrom".into());
        }
        // Checked by the worker, so a missing privilege is a task error.
        let storage = drive.volid.split_once(':').map_or("", |x| x.0);
        require(
            world,
            &format!("/storage/{storage}"),
            "Datastore.AllocateSpace",
        )
        .map_err(|e| e.message)?;
        let current = drive.size().unwrap_or(0);
        let (relative, amount) = match size.strip_prefix('+') {
            Some(rest) => (true, rest),
            None => (false, size.as_str()),
        };
        let amount = parse_size(amount).ok_or_else(|| format!("invalid size '{size}'"))?;
        let new_size = if relative { current + amount } else { amount };
        if new_size < current {
            return Err("shrinking disks is not supported".into());
        }
        if new_size == current {
            return Ok(());
        }
        drive.set_option("size", format_size(new_size));
        let volid = drive.volid.clone();
        let vm_node = vm.node.clone();
        let printed = drive.print();
        if let Some(vm) = world.vms.get_mut(&vmid) {
            vm.config.insert(disk.clone(), printed);
        }
        if let Some(volume) = world.volume_mut(&volid, &vm_node) {
            volume.size = new_size;
        }
        log.info(format!(
            "Image resized: {disk} from {} to {}",
            format_size(current),
            format_size(new_size)
        ));
        Ok(())
    });
    upid_reply(upid)
}

pub fn template(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    let node = call.node().to_string();
    let vm = load_vm(world, &node, vmid)?;
    require(world, &format!("/vms/{vmid}"), "VM.Allocate")?;
    check_lock(vm).map_err(ApiError::die)?;
    if vm.is_template() {
        return Err(ApiError::die(format!("VM {vmid} is already a template")));
    }
    if vm.running {
        return Err(ApiError::die(
            "you can't convert a VM to template if VM is running",
        ));
    }
    let upid = start_vm_task(shared, world, call, "qmtemplate", move |world, _log| {
        let vm = world.vms.get(&vmid).ok_or("VM vanished")?;
        let vm_node = vm.node.clone();
        let disks: Vec<(String, Drive)> = vm
            .config
            .iter()
            .filter(|(k, _)| is_drive_key(k) && !k.starts_with("unused"))
            .map(|(k, v)| (k.clone(), Drive::parse(v)))
            .filter(|(_, d)| !d.is_cdrom() && d.volid.contains(&format!("vm-{vmid}-disk-")))
            .collect();
        let mut updates = Vec::new();
        for (key, mut drive) in disks {
            let base = drive
                .volid
                .replace(&format!("vm-{vmid}-disk-"), &format!("base-{vmid}-disk-"));
            if let Some(mut volume) = world.remove_volume(&drive.volid, &vm_node) {
                volume.volid = base.clone();
                let (storage, _) = base.split_once(':').unwrap_or_default();
                let scope = world.scope_for(storage, &vm_node);
                world
                    .volumes
                    .entry(scope)
                    .or_default()
                    .insert(base.clone(), volume);
            }
            drive.volid = base;
            updates.push((key, drive.print()));
        }
        if let Some(vm) = world.vms.get_mut(&vmid) {
            vm.config.extend(updates);
            vm.config.insert("template".into(), "1".into());
        }
        Ok(())
    });
    upid_reply(upid)
}

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
    let vmid = call.vmid();
    let upid = start_vm_task(shared, world, call, task_type, move |world, log| {
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
    power_task(shared, world, call, "qmshutdown", |world, _log, vmid| {
        check_lock(&world.vms[&vmid])?;
        halt(world, vmid);
        Ok(())
    })
}

pub fn reboot(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    power_prechecks(world, call)?;
    check_running_for(world, call, "reboot")?;
    power_task(shared, world, call, "qmreboot", |world, _log, vmid| {
        check_lock(&world.vms[&vmid])?;
        halt(world, vmid);
        boot(world, vmid);
        Ok(())
    })
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

pub fn destroy(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    let node = call.node().to_string();
    require(world, &format!("/vms/{vmid}"), "VM.Allocate")?;
    let vm = load_vm(world, &node, vmid)?;
    if call.params.contains_key("skiplock") {
        return Err(ApiError::param(
            "skiplock",
            "Only root may use this option.",
        ));
    }
    if vm.config.get("protection").is_some_and(|p| p == "1") {
        return Err(ApiError::die(format!(
            "can't remove VM {vmid} - protection mode enabled"
        )));
    }
    let purge = call.bool("purge").unwrap_or(false);
    check_destroy(world, vmid, purge)?;
    if vm.running {
        return Err(ApiError::die(format!(
            "VM {vmid} is running - destroy failed"
        )));
    }
    let unreferenced = call.bool("destroy-unreferenced-disks").unwrap_or(false);
    // qemu-server `destroy_vm` frees the disks (half the task's run time here: the config
    // keeps its mark meanwhile), then leaves the config `lock: destroyed`; the handler's
    // purge and the config's removal end the task a run time later (see
    // `free_and_lock_destroyed`).
    let freeing = Duration::from_millis(world.timings.task("qmdestroy") / 2);
    let task_node = node.clone();
    let upid = start_task_with_prologue(
        shared,
        world,
        &task_node,
        "qmdestroy",
        &vmid.to_string(),
        &call.token_user(),
        TaskLocks::exclusive(vmid),
        (
            freeing,
            Box::new(move |world, log, injected| match injected {
                // A failure the faults inject ends the task before it changes anything.
                Some(_) => Ok(()),
                None => free_and_lock_destroyed(world, log, (&node, vmid), unreferenced),
            }),
        ),
        Box::new(move |world, log, injected| {
            if let Some(failure) = injected {
                return Err(failure);
            }
            if purge {
                crate::ha_request::purge(world, log, vmid);
            }
            world.vms.remove(&vmid);
            for pool in world.pools.values_mut() {
                pool.vms.remove(&vmid);
            }
            Ok(())
        }),
    );
    upid_reply(upid)
}

/// The VM's own volumes (`vm-<vmid>-…`, `base-<vmid>-…`) its drives and `vmstate` name.
fn owned_volumes(vm: &Vm) -> Vec<String> {
    let vmid = vm.vmid;
    vm.config
        .iter()
        .filter(|(k, _)| is_drive_key(k) || k.as_str() == "vmstate")
        .map(|(k, v)| {
            if k == "vmstate" {
                v.clone()
            } else {
                Drive::parse(v).volid
            }
        })
        .filter(|volid| !volid.contains(":iso/") && volid != "none")
        .filter(|volid| {
            volid.contains(&format!("vm-{vmid}-")) || volid.contains(&format!("base-{vmid}-"))
        })
        .collect()
}

/// A template's base volume may still back linked clones.
fn check_no_linked_clone(world: &World, vmid: u32, owned: &[String]) -> Result<(), String> {
    for volid in owned {
        let base = volid.split_once(':').map(|x| x.1).unwrap_or_default();
        let in_use = world.vms.values().any(|other| {
            other.vmid != vmid
                && other
                    .config
                    .values()
                    .any(|v| v.contains(&format!("{base}/")))
        });
        let is_base = crate::world::volume_file_name(volid).starts_with("base-");
        if is_base && in_use {
            return Err(format!(
                "base volume '{volid}' is still in use by linked cloned"
            ));
        }
    }
    Ok(())
}

/// `destroy-unreferenced-disks`: every other image of the VMID on the storages its node
/// sees.
fn remove_unreferenced_volumes(world: &mut World, log: &mut TaskLog, vmid: u32, vm_node: &str) {
    let mut orphans = Vec::new();
    for (scope, vols) in &world.volumes {
        let visible = scope.node.as_ref().is_none_or(|n| *n == vm_node);
        if !visible {
            continue;
        }
        for (volid, volume) in vols {
            if volume.content != "iso" && volume_owner(volid) == Some(vmid) {
                orphans.push(volid.clone());
            }
        }
    }
    for volid in orphans {
        world.remove_volume(&volid, vm_node);
        log.info(format!("Removed unreferenced volume '{volid}'"));
    }
}

/// The first part of qemu-server's `destroy_vm` (`src/PVE/QemuServer.pm`): the lock check,
/// a template's base volumes still backing linked clones, the VM's own disks freed (and
/// with `destroy-unreferenced-disks` every other volume of the VMID), then the config
/// replaced by `{ lock => 'destroyed' }`, which stays until the handler removes the config
/// at the task's end ("else we can have reuse race", `src/PVE/API2/Qemu.pm`).
fn free_and_lock_destroyed(
    world: &mut World,
    log: &mut TaskLog,
    (node, vmid): (&str, u32),
    unreferenced: bool,
) -> Result<(), String> {
    let vm = world.vms.get(&vmid).ok_or_else(|| {
        format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
    })?;
    if vm.lock().is_some_and(|l| l != "suspended") {
        check_lock(vm)?;
    }
    let vm_node = vm.node.clone();
    let owned = owned_volumes(vm);
    check_no_linked_clone(world, vmid, &owned)?;
    for volid in owned {
        if world.remove_volume(&volid, &vm_node).is_some() {
            log.info(format!("Removed volume '{volid}'"));
        } else {
            log.warn(format!(
                "Could not remove disk '{volid}', check manually: no such volume"
            ));
        }
    }
    if unreferenced {
        remove_unreferenced_volumes(world, log, vmid, &vm_node);
    }
    if let Some(vm) = world.vms.get_mut(&vmid) {
        vm.config = BTreeMap::from([("lock".to_string(), "destroyed".to_string())]);
    }
    Ok(())
}
