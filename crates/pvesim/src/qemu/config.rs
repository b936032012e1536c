//! `/nodes/{node}/qemu/{vmid}/config` and `/pending`: read and change a VM's config.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::new_disk::{CLOUDINIT_DISK_SIZE, cloudinit_storage, is_cloudinit_drive, new_disk_spec};
use super::{check_bridge_access, start_vm_task};
use crate::api::{check_lock, load_vm, require, require_any};
use crate::call::{ApiError, ApiResult, Call, Reply, TaskWait, value_as_string};
use crate::shared::Shared;
use crate::tasks::TaskLog;
use crate::world::{
    Drive, Net, Vm, World, config_digest, format_size, is_drive_key, is_net_key, normalise_tags,
    typed_config_value, volume_format, volume_owner,
};

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
