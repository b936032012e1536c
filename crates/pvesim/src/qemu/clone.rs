//! `POST /nodes/{node}/qemu/{vmid}/clone`: qemu-server's `clone_vm`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::create::{new_vm, random_uuid};
use super::{check_bridge_access, upid_reply};
use crate::api::{check_lock, check_quorum, load_vm, require};
use crate::call::{ApiError, ApiResult, Call};
use crate::cost::clone_disks::{CloneDisks, DiskWork};
use crate::shared::Shared;
use crate::tasks::{TaskLocks, TaskLog, TaskPrologue, TaskStage, start_staged_task};
use crate::world::{Drive, Net, Vm, World, is_drive_key, is_net_key, volume_format};

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
