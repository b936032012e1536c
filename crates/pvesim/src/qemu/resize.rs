//! `PUT /nodes/{node}/qemu/{vmid}/resize`: grow a disk.

use std::sync::Arc;

use super::{start_vm_task, upid_reply};
use crate::api::{check_lock, load_vm, require};
use crate::call::{ApiError, ApiResult, Call};
use crate::shared::Shared;
use crate::world::{Drive, World, config_digest, format_size, parse_size};

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
