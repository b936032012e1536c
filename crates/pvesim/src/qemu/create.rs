//! `POST /nodes/{node}/qemu`: a new VM from parameters, and what a new VM starts with.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::new_disk::new_disk_spec;
use super::upid_reply;
use crate::api::require;
use crate::call::{ApiError, ApiResult, Call, value_as_string};
use crate::ha_request::Request;
use crate::shared::Shared;
use crate::tasks::{TaskLog, start_task};
use crate::world::{
    Drive, Net, Vm, World, format_size, is_drive_key, is_net_key, normalise_tags, volume_format,
};

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

pub(super) fn new_vm(
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

pub(super) fn random_uuid() -> String {
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
