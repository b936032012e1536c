//! Delete: stop, delete the seed, destroy with purge; never a VM without our mark.

use pve::qemu::DestroyOptions;
use pve::{ErrorKind, RetryPolicy, retry_idempotent};

use super::{Step, patient, wait};
use crate::context::Configured;
use crate::ownership::{self, Ownership};

/// Stop, delete the seed, destroy with purge. The seed goes first, so a failed seed delete
/// leaves the VM for the next delete instead of leaking the ISO. A VM already gone is done.
pub async fn delete(
    configured: &Configured,
    vmid: u32,
    name: &str,
    seed: Option<(&str, &str)>,
) -> Step<Option<String>> {
    let client = &configured.client;
    let _name_guard = configured.runtime.lock_name(name).await;
    let listing =
        retry_idempotent(&RetryPolicy::default(), || client.cluster().vm_resources()).await?;
    let location = listing
        .iter()
        .find(|vm| vm.vmid == vmid)
        .map(|vm| vm.node.clone());
    let mut note = None;
    let vm_is_ours = match &location {
        None => false,
        Some(node) => {
            match retry_idempotent(&patient(), || client.node(node).qemu(vmid).config()).await {
                Ok(config) => match ownership::classify(config.description().as_deref(), name) {
                    Ownership::OursForThisName => true,
                    _ => {
                        note = Some(format!(
                            "VM {vmid} now belongs to something else (no ownership mark for `{name}`); it was left untouched."
                        ));
                        false
                    }
                },
                Err(e) if e.kind() == ErrorKind::NotFound => false,
                Err(e) => return Err(e.into()),
            }
        }
    };
    if let (true, Some(node)) = (vm_is_ours, &location) {
        let qemu = client.node(node).qemu(vmid);
        if retry_idempotent(&patient(), || qemu.status())
            .await?
            .is_running()
        {
            // Hard stop: the VM is going away.
            let upid = retry_idempotent(&patient(), || qemu.stop()).await?;
            wait(client, &upid).await?;
        }
    }
    if let Some((seed_node, volume)) = seed
        && let Some((storage, _)) = volume.split_once(':')
    {
        let store = client.node(seed_node).storage(storage);
        match retry_idempotent(&patient(), || store.delete_volume(volume)).await {
            Ok(upid) => {
                wait(client, &upid).await?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let (true, Some(node)) = (vm_is_ours, &location) {
        let qemu = client.node(node).qemu(vmid);
        let options = DestroyOptions {
            purge: true,
            destroy_unreferenced_disks: true,
        };
        match retry_idempotent(&patient(), || qemu.destroy(options)).await {
            Ok(upid) => {
                wait(client, &upid).await?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    configured.runtime.forget_listing().await;
    Ok(note)
}
