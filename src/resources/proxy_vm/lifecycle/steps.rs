//! The single steps of a create, each a waited-on PVE task and each safe to repeat; update
//! reuses the config, disk and power steps.

use std::time::Duration;

use pve::qemu::{CloneRequest, ConfigUpdate, GuestInterface};
use pve::storage::Upload;
use pve::wire::{ByteSize, CdromDrive};
use pve::{Client, RetryPolicy, retry_idempotent};
use tokio::time::Instant;

use super::super::model::{Desired, seed_hash};
use super::{Step, StepError, patient, plain, wait};
use crate::ownership::{self, Mark};

/// Clones the template onto `vmid`, waiting out the task. A lost answer is checked against
/// the cluster before anything is sent again, so a clone never happens twice.
pub(super) async fn clone_vm(
    client: &Client,
    template: (&str, u32),
    vmid: u32,
    desired: &Desired,
) -> Step<()> {
    let mut request = CloneRequest::full(vmid);
    request.name = Some(desired.name.clone());
    request.description = Some(Mark::new(&desired.name, &desired.template).render());
    request.target = (template.0 != desired.node).then(|| desired.node.clone());
    request.storage = desired.clone_storage.clone();
    request.pool = desired.pool.clone();
    let source = client.node(template.0).qemu(template.1);
    let dispatched = pve::retry_with_check(
        &RetryPolicy::default(),
        || async { source.clone_to(&request).await.map(Some) },
        || async {
            // Did the lost request start a clone? Then the VMID exists now.
            match client.cluster().vm_resources().await {
                Ok(list) if list.iter().any(|vm| vm.vmid == vmid) => Ok(Some(None)),
                Ok(_) => Ok(None),
                Err(e) => Err(e),
            }
        },
    )
    .await?;
    if let Some(upid) = dispatched {
        wait(client, &upid).await?;
    }
    Ok(())
}

pub(super) async fn upload_seed(
    client: &Client,
    node: &str,
    vmid: u32,
    desired: &Desired,
) -> Step<String> {
    let seed = desired
        .seed(node, vmid)
        .build()
        .map_err(|e| StepError::Plain(format!("building the seed ISO failed: {e}")))?;
    let bytes = bytes::Bytes::from(seed.bytes);
    let file = seed.file_name_suggestion;
    let storage = client.node(node).storage(&desired.seed_storage);
    // Uploads overwrite, so repeating one is harmless.
    let upid = retry_idempotent(&patient(), || {
        storage.upload(Upload::iso(&file, bytes.clone()))
    })
    .await?;
    wait(client, &upid).await?;
    Ok(format!("{}:iso/{file}", desired.seed_storage))
}

/// Writes cores, memory, agent, the seed as `ide2`, tags, the mark with the seed hash, and
/// net0's bridge/VLAN keeping its MAC. Only keys whose value differs are sent.
pub(super) async fn write_config(
    client: &Client,
    node: &str,
    vmid: u32,
    desired: &Desired,
    seed_volume: Option<&str>,
) -> Step<()> {
    let qemu = client.node(node).qemu(vmid);
    let current = retry_idempotent(&patient(), || qemu.config()).await?;
    let mut update = ConfigUpdate::new();
    if let Some(cores) = desired.cores.filter(|c| *c != current.cores()) {
        update = update.cores(cores);
    }
    if let Some(memory) = desired.memory_mib.filter(|m| *m != current.memory_mib()) {
        update = update.memory_mib(memory);
    }
    if !current.agent_enabled() {
        update = update.agent(true);
    }
    if let Some(volume) = seed_volume {
        let (storage, file) = volume
            .split_once(":iso/")
            .ok_or_else(|| StepError::Plain(format!("unexpected seed volume `{volume}`")))?;
        let wanted = CdromDrive::iso(storage, file);
        let attached = current.cdrom("ide2").and_then(Result::ok);
        if attached.as_ref().map(|d| &d.volume) != Some(&wanted.volume) {
            update = update.cdrom("ide2", &wanted);
        }
    }
    let user_tags = match &desired.tags {
        Some(tags) => ownership::normalise_tags(tags.iter().map(String::as_str)),
        None => ownership::user_tags(&current.tags().join(";")),
    };
    let tags = ownership::tags_to_write(&user_tags);
    if ownership::normalise_tags(current.tags().iter().map(String::as_str)).join(";") != tags {
        update = update.set("tags", tags);
    }
    let mark = Mark::new(&desired.name, &desired.template).with_seed_hash(&seed_hash(
        desired.user_data.as_deref(),
        desired.network_config.as_deref(),
    ));
    let description = mark.render();
    if current.description().as_deref().map(str::trim_end) != Some(description.as_str()) {
        update = update.description(&description);
    }
    if desired.bridge.is_some() || desired.vlan_tag.is_some() {
        match current.net(0) {
            Some(Ok(mut net)) => {
                let before = net.clone();
                if let Some(bridge) = &desired.bridge {
                    net.bridge = Some(bridge.clone());
                }
                if let Some(tag) = desired.vlan_tag {
                    net.tag = Some(tag);
                }
                // The MAC stays in the value we send: without it PVE would make a new one.
                if net != before {
                    update = update.net(0, &net);
                }
            }
            Some(Err(e)) => return plain(format!("the VM's net0 cannot be read: {e}")),
            None => {
                return plain(
                    "the template has no net0 network interface to put on a bridge or VLAN",
                );
            }
        }
    }
    if update.is_empty() {
        return Ok(());
    }
    let upid = retry_idempotent(&patient(), || qemu.update_config_async(&update)).await?;
    wait(client, &upid).await?;
    Ok(())
}

pub(super) async fn grow_disk(
    client: &Client,
    node: &str,
    vmid: u32,
    disk_gib: Option<u64>,
) -> Step<()> {
    let Some(wanted) = disk_gib else {
        return Ok(());
    };
    let qemu = client.node(node).qemu(vmid);
    let config = retry_idempotent(&patient(), || qemu.config()).await?;
    let Some((key, disk)) = config.boot_disk() else {
        return plain("the VM has no boot disk to grow");
    };
    let current = disk.size.map(|s| s.bytes()).unwrap_or(0);
    if current >= ByteSize::gib(wanted).bytes() {
        return Ok(());
    }
    let upid = retry_idempotent(&patient(), || qemu.resize(&key, ByteSize::gib(wanted))).await?;
    wait(client, &upid).await?;
    Ok(())
}

/// Brings the power state to `running`; start only if stopped.
pub(super) async fn ensure_power(
    client: &Client,
    node: &str,
    vmid: u32,
    running: bool,
) -> Step<()> {
    let qemu = client.node(node).qemu(vmid);
    let status = retry_idempotent(&patient(), || qemu.status()).await?;
    if status.is_running() == running {
        return Ok(());
    }
    let upid = if running {
        pve::retry_with_check(
            &patient(),
            || async { qemu.start().await.map(Some) },
            || async { Ok(qemu.status().await?.is_running().then_some(None)) },
        )
        .await?
    } else {
        // A clean shutdown first; PVE stops it hard after the timeout.
        pve::retry_with_check(
            &patient(),
            || async { qemu.shutdown(Some(60), true).await.map(Some) },
            || async { Ok((!qemu.status().await?.is_running()).then_some(None)) },
        )
        .await?
    };
    if let Some(upid) = upid {
        wait(client, &upid).await?;
    }
    Ok(())
}

/// Polls the guest agent until it reports a usable IPv4 address or the deadline passes, and
/// returns what it reported.
pub(super) async fn wait_for_address(
    client: &Client,
    node: &str,
    vmid: u32,
    deadline: Instant,
) -> Step<Vec<GuestInterface>> {
    let agent = client.node(node).qemu(vmid).agent();
    let mut delay = Duration::from_millis(200);
    let mut last;
    loop {
        match agent.network_get_interfaces().await {
            Ok(interfaces) => {
                if interfaces
                    .iter()
                    .flat_map(|i| &i.ip_addresses)
                    .any(|ip| ip.is_usable_ipv4())
                {
                    return Ok(interfaces);
                }
                last = "the guest agent reports no IPv4 address yet".into();
            }
            Err(e) => last = e.to_string(),
        }
        if Instant::now() + delay > deadline {
            return plain(format!(
                "no IPv4 address from the guest agent within the create timeout (last answer: {last}). The VM runs; check that the image can install qemu-guest-agent (the seed's vendor-data does it on Debian/Ubuntu), or set wait_for_address = false."
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 3 / 2).min(Duration::from_secs(3));
    }
}
