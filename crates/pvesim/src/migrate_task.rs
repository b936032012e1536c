//! The `qmigrate` worker (qemu-server `QemuMigrate.pm` under pve-guest-common
//! `AbstractMigrate.pm` `migrate`): `prepare` and phase 1 (the `migrate` lock,
//! `scan_local_volumes`) as soon as the config lock is held, then, after the task's run time,
//! the local volumes copied and the config moved to the target (`phase3_cleanup`). An online
//! migration keeps the VM running.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::clock;
use crate::guest_volumes::{
    StorageMap, VolumeRef, local_resources, storage_check_enabled, volume_refs,
};
use crate::shared::Shared;
use crate::tasks::{TaskLocks, TaskLog, start_task_with_prologue};
use crate::world::{Drive, World, is_drive_key, unix_now};

/// What `migrate_vm` hands the worker.
#[derive(Debug, Clone)]
pub struct Plan {
    pub vmid: u32,
    pub source: String,
    pub target: String,
    pub online: bool,
    pub with_local_disks: bool,
    pub force: bool,
    pub storagemap: StorageMap,
}

/// A local volume to copy, and the storage it goes to.
#[derive(Debug, Clone)]
struct LocalVolume {
    volid: String,
    target_storage: String,
}

/// `AbstractMigrate`'s log lines: a timestamp, `ERROR:` for errors.
fn line(log: &mut TaskLog, error: bool, text: &str) {
    let stamp = clock::iso_datetime(unix_now());
    let level = if error { " ERROR:" } else { "" };
    log.info(format!("{stamp}{level} {text}"));
}

/// Starts the worker on the source node; returns its UPID.
pub fn start(shared: &Arc<Shared>, world: &mut World, user: &str, plan: Plan) -> String {
    let started = unix_now();
    let scan = plan.clone();
    let finish = plan.clone();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<LocalVolume>>();
    start_task_with_prologue(
        shared,
        world,
        &plan.source,
        "qmigrate",
        &plan.vmid.to_string(),
        user,
        TaskLocks::exclusive(plan.vmid),
        (
            Duration::ZERO,
            Box::new(move |world, log, _injected| {
                let volumes = prepare_and_phase1(world, log, &scan)
                    .map_err(|error| abort(log, started, &error))?;
                let _ = tx.send(volumes);
                Ok(())
            }),
        ),
        Box::new(move |world, log, injected| {
            let volumes = rx.try_recv().unwrap_or_default();
            if let Some(failure) = injected {
                unlock(world, finish.vmid);
                return Err(abort(log, started, &failure));
            }
            move_to_target(world, log, &finish, &volumes);
            let took = clock::duration(unix_now().saturating_sub(started));
            line(
                log,
                false,
                &format!("migration finished successfully (duration {took})"),
            );
            Ok(())
        }),
    )
}

/// The outer `eval` of `AbstractMigrate::migrate`: log the error, end with "migration
/// aborted".
fn abort(log: &mut TaskLog, started: u64, error: &str) -> String {
    let took = clock::duration(unix_now().saturating_sub(started));
    line(
        log,
        true,
        &format!("migration aborted (duration {took}): {error}"),
    );
    "migration aborted".into()
}

fn unlock(world: &mut World, vmid: u32) {
    if let Some(vm) = world.vms.get_mut(&vmid)
        && vm.lock() == Some("migrate")
    {
        vm.config.remove("lock");
    }
}

/// `prepare`, then `phase1` up to `scan_local_volumes` (a failure there runs
/// `phase1_cleanup`: the lock goes again).
fn prepare_and_phase1(
    world: &mut World,
    log: &mut TaskLog,
    plan: &Plan,
) -> Result<Vec<LocalVolume>, String> {
    prepare(world, plan)?;
    let index = world.nodes.iter().position(|n| n.name == plan.target);
    let ip = format!("192.0.2.{}", index.unwrap_or(0) + 11);
    line(
        log,
        false,
        &format!(
            "starting migration of VM {} to node '{}' ({ip})",
            plan.vmid, plan.target
        ),
    );
    if let Some(vm) = world.vms.get_mut(&plan.vmid) {
        vm.config.insert("lock".into(), "migrate".into());
    }
    scan_local_volumes(world, log, plan).map_err(|error| {
        let error = format!("Problem found while scanning volumes - {error}");
        line(log, true, &error);
        line(log, false, "aborting phase 1 - cleanup resources");
        unlock(world, plan.vmid);
        error
    })
}

/// `QemuMigrate::prepare`: the config, its lock, the power state, local devices, every
/// volume's storage on both nodes, and the target reachable.
fn prepare(world: &World, plan: &Plan) -> Result<(), String> {
    let vm = world
        .vms
        .get(&plan.vmid)
        .filter(|vm| vm.node == plan.source)
        .ok_or_else(|| {
            format!(
                "Configuration file 'nodes/{}/qemu-server/{}.conf' does not exist",
                plan.source, plan.vmid
            )
        })?;
    crate::api::check_lock(vm)?;
    if vm.running && !plan.online {
        return Err("can't migrate running VM without --online".into());
    }
    let devices = local_resources(vm);
    if !devices.is_empty() && (vm.running || !plan.force) {
        return Err(format!(
            "can't migrate VM which uses local devices: {}",
            devices.join(", ")
        ));
    }
    for volume in volume_refs(vm).values() {
        let Some(sid) = volume.storage() else {
            continue;
        };
        storage_check_enabled(world, sid, None)?;
        target_storage_check_available(world, plan, volume)?;
    }
    // The ssh test (`/bin/true` on the target).
    if !world.node_online(&plan.target) {
        return Err("Can't connect to destination address using public key".into());
    }
    Ok(())
}

/// The storage a volume goes to: its own for shared storages, else the mapped one.
fn target_storage(world: &World, plan: &Plan, sid: &str) -> String {
    if world.storage(sid).is_some_and(|s| s.shared) {
        sid.to_string()
    } else {
        plan.storagemap.map(sid)
    }
}

/// `target_storage_check_available`.
fn target_storage_check_available(
    world: &World,
    plan: &Plan,
    volume: &VolumeRef,
) -> Result<(), String> {
    let Some(sid) = volume.storage() else {
        return Ok(());
    };
    let target_sid = target_storage(world, plan, sid);
    storage_check_enabled(world, &target_sid, Some(&plan.target))?;
    let vtype = volume.content_type();
    let takes = world
        .storage(&target_sid)
        .is_some_and(|s| s.content.iter().any(|c| c == vtype));
    if !takes {
        return Err(format!(
            "{}: content type '{vtype}' is not available on storage '{target_sid}'",
            volume.volid
        ));
    }
    Ok(())
}

/// `scan_local_volumes`: every volume not on a shared storage must be one the worker can
/// copy; each refusal is logged as "can't migrate local disk 'VOLID': reason".
fn scan_local_volumes(
    world: &World,
    log: &mut TaskLog,
    plan: &Plan,
) -> Result<Vec<LocalVolume>, String> {
    let vm = &world.vms[&plan.vmid];
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for volume in volume_refs(vm).values() {
        match check_volume(world, plan, volume) {
            Ok(Some(local)) => found.push((volume.clone(), local)),
            Ok(None) => {}
            Err((reason, local)) => {
                if let Some(local) = local {
                    found.push((volume.clone(), local));
                }
                errors.push((volume.volid.clone(), reason));
            }
        }
    }
    for (volume, _) in &found {
        let kind = if volume.is_attached {
            " (attached)"
        } else {
            " (unused)"
        };
        line(
            log,
            false,
            &format!("found local disk '{}'{kind}", volume.volid),
        );
        if volume.is_attached && vm.running && !plan.with_local_disks {
            errors.push((
                volume.volid.clone(),
                "can't live migrate attached local disks without with-local-disks option".into(),
            ));
        }
    }
    errors.sort();
    for (volid, reason) in &errors {
        line(
            log,
            false,
            &format!("can't migrate local disk '{volid}': {reason}"),
        );
    }
    if !errors.is_empty() {
        return Err("can't migrate VM - check log".into());
    }
    Ok(found.into_iter().map(|(_, local)| local).collect())
}

/// One volume of `scan_local_volumes`' `$test_volid`: `None` for shared ones, the copy to
/// make for local ones, or why it cannot be copied (with the copy when it was recorded
/// before the refusal, as PVE lists such volumes as found too).
#[allow(clippy::type_complexity)]
fn check_volume(
    world: &World,
    plan: &Plan,
    volume: &VolumeRef,
) -> Result<Option<LocalVolume>, (String, Option<LocalVolume>)> {
    if volume.volid.starts_with('/') {
        return Err(("local file/device".into(), None));
    }
    if volume.cdrom && volume.volid == "cdrom" {
        return Err(("can't migrate local cdrom drive".into(), None));
    }
    if volume.cdrom && volume.volid == "none" {
        return Ok(None);
    }
    let Some(sid) = volume.storage() else {
        return Ok(None);
    };
    if world.storage(sid).is_some_and(|s| s.shared) {
        return Ok(None);
    }
    let local = LocalVolume {
        volid: volume.volid.clone(),
        target_storage: target_storage(world, plan, sid),
    };
    if world.volume(&volume.volid, &plan.source).is_none() {
        let reason = format!("unable to determine size for volume '{}'", volume.volid);
        return Err((reason, Some(local)));
    }
    if volume.cdrom && !volume.is_cloudinit {
        return Err(("local cdrom image".into(), Some(local)));
    }
    let owner = crate::world::volume_owner(&volume.volid);
    if owner != Some(plan.vmid) {
        let owner = owner.map_or_else(String::new, |o| o.to_string());
        let reason = format!("owned by other VM (owner = VM {owner})");
        return Err((reason, Some(local)));
    }
    Ok(Some(local))
}

/// `sync_offline_local_volumes` / the NBD mirror, then `phase3_cleanup`: the volumes on
/// the target, the config moved (`move_config_to_node`), the lock cleared.
fn move_to_target(world: &mut World, log: &mut TaskLog, plan: &Plan, volumes: &[LocalVolume]) {
    if !volumes.is_empty() {
        line(log, false, "copying local disk images");
    }
    let mut renamed = Vec::new();
    let mut taken = BTreeSet::new();
    for local in volumes {
        let Some(mut volume) = world.remove_volume(&local.volid, &plan.source) else {
            continue;
        };
        let (sid, _) = local.volid.split_once(':').unwrap_or_default();
        let scope = world.scope_for(&local.target_storage, &plan.target);
        let free = world
            .volumes
            .get(&scope)
            .is_none_or(|vols| !vols.contains_key(&local.volid));
        let new_volid = if sid == local.target_storage && free {
            local.volid.clone()
        } else {
            let format = Some(volume.format.as_str()).filter(|f| *f != "raw");
            let storage = &local.target_storage;
            world.new_disk_volid(storage, &plan.target, plan.vmid, format, &taken)
        };
        taken.insert(new_volid.clone());
        volume.volid = new_volid.clone();
        volume.origin_node = plan.target.clone();
        world
            .volumes
            .entry(scope)
            .or_default()
            .insert(new_volid.clone(), volume);
        line(
            log,
            false,
            &format!("volume '{}' is '{new_volid}' on the target", local.volid),
        );
        renamed.push((local.volid.clone(), new_volid));
    }
    let Some(vm) = world.vms.get_mut(&plan.vmid) else {
        return;
    };
    for (key, value) in vm.config.iter_mut() {
        if !is_drive_key(key) {
            continue;
        }
        let mut drive = Drive::parse(value);
        if let Some((_, new)) = renamed.iter().find(|(old, _)| *old == drive.volid) {
            drive.volid = new.clone();
            *value = drive.print();
        }
    }
    vm.node = plan.target.clone();
    vm.config.remove("lock");
}
