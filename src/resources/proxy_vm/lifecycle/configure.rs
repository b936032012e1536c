//! The configure phase of create and update: cores, memory, agent, the seed as `ide2`, tags,
//! net0's bridge and VLAN (keeping its MAC), and during a create the mark; one write,
//! conditional on the digest of the read it was decided from.

use pve::qemu::{ConfigUpdate, VmConfig};
use pve::wire::CdromDrive;

use super::super::model::Desired;
use super::super::model::networks::{self, Nic};
use super::boot_order;
use super::error::{Step, StepError, unworkable};
use super::marks::creating_mark;
use super::owned::{OwnedVm, Seen};
use crate::ownership;

/// Writes what differs from the desired config, conditionally: a concurrent edit (in the UI,
/// another create) makes PVE refuse the digest, and the write is decided again from a fresh
/// read. `seed_volume` and `creating` are a create's: the seed to attach, and this attempt's
/// mark.
pub(super) async fn write_config(
    vm: &OwnedVm<'_>,
    desired: &Desired,
    seed_volume: Option<&str>,
    creating: bool,
) -> Step<()> {
    write_config_from(vm, None, desired, seed_volume, creating).await
}

/// [`write_config`], decided first from `seen` when the caller read the VM already (beside
/// the seed's upload); else, or when that read failed, from a read of its own.
pub(super) async fn write_config_from(
    vm: &OwnedVm<'_>,
    seen: Option<Step<Seen>>,
    desired: &Desired,
    seed_volume: Option<&str>,
    creating: bool,
) -> Step<()> {
    let attempt = |seen: Seen| write_decided(vm, seen, desired, seed_volume, creating);
    match seen.and_then(Result::ok) {
        Some(seen) => vm.conditional_from(seen, "write the config", attempt).await,
        None => vm.conditional("write the config", attempt).await,
    }
}

/// One attempt of [`write_config`]: what differs from `desired` in the config `seen` read,
/// written conditional on that read's digest (nothing when nothing differs).
pub(super) async fn write_decided(
    vm: &OwnedVm<'_>,
    seen: Seen,
    desired: &Desired,
    seed_volume: Option<&str>,
    creating: bool,
) -> Step<()> {
    let update = config_update(&seen.config, desired, seed_volume, creating)?;
    if update.is_empty() {
        return Ok(());
    }
    vm.write_task(&seen.change(update)).await.map(drop)
}

/// The tags as PVE normalises them, as one string.
pub(super) fn current_tags(config: &VmConfig) -> String {
    ownership::normalise_tags(config.tags().iter().map(String::as_str)).join(";")
}

/// The tags the VM should carry: the desired user tags (or, unset, the ones it has) and the
/// fleet's tags.
pub(super) fn tags_to_write(config: &VmConfig, desired: &Desired) -> String {
    let user = match &desired.tags {
        Some(tags) => ownership::normalise_tags(tags.iter().map(String::as_str)),
        None => ownership::user_tags(&config.tags().join(";")),
    };
    ownership::tags_to_write(&user, &desired.fleet)
}

/// What to change so the VM has the desired cores, memory, agent, seed as `ide2`, tags and
/// net0 bridge/VLAN (keeping its MAC). Only keys whose value differs are included.
fn config_update(
    current: &VmConfig,
    desired: &Desired,
    seed_volume: Option<&str>,
    creating: bool,
) -> Step<ConfigUpdate> {
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
            .ok_or_else(|| StepError::Unworkable(format!("unexpected seed volume `{volume}`")))?;
        let wanted = CdromDrive::iso(storage, file);
        let attached = current.cdrom("ide2").and_then(Result::ok);
        if attached.as_ref().map(|d| &d.volume) != Some(&wanted.volume) {
            update = update.cdrom("ide2", &wanted);
        }
    }
    let tags = tags_to_write(current, desired);
    if current_tags(current) != tags {
        update = update.set("tags", tags);
    }
    if creating {
        let description = creating_mark(desired).render();
        if current.description().as_deref().map(str::trim_end) != Some(description.as_str()) {
            update = update.description(&description);
        }
    }
    if desired.bridge.is_some() || desired.vlan_tag.is_some() || desired.mac_address.is_some() {
        update = net_update(current, desired, update)?;
    }
    if let Some(nics) = &desired.networks {
        update = further_nics_update(current, nics, update)?;
    }
    Ok(boot_order::update(current, desired, update))
}

/// `net1`… as `networks` lists them, in the same write: a NIC changed keeps its model, MAC
/// and options (PVE would make a new MAC for a value without one), a new one gets net0's
/// model, and NICs beyond the list are deleted. PVE hot-plugs each on a running VM
/// (qemu-server `vmconfig_hotplug_pending`, `vmconfig_update_net`) or holds it pending.
fn further_nics_update(
    current: &VmConfig,
    nics: &[Nic],
    mut update: ConfigUpdate,
) -> Step<ConfigUpdate> {
    let model = match current.net(0) {
        Some(Ok(net)) => net.model,
        _ => "virtio".to_owned(),
    };
    for (position, wanted) in nics.iter().enumerate() {
        let index = u8::try_from(position + 1)
            .ok()
            .filter(|index| *index <= networks::MAX_NET_INDEX)
            .ok_or_else(|| {
                StepError::Unworkable(format!(
                    "networks has {} elements; PVE has NICs net1 to net{} only",
                    nics.len(),
                    networks::MAX_NET_INDEX
                ))
            })?;
        let existing = match current.net(index) {
            Some(Ok(net)) => Some(net),
            Some(Err(e)) => return unworkable(format!("the VM's net{index} cannot be read: {e}")),
            None => None,
        };
        let net = networks::net_value(existing.clone(), wanted, &model);
        if existing.as_ref() != Some(&net) {
            update = update.net(index, &net);
        }
    }
    for index in (nics.len() + 1)..=usize::from(networks::MAX_NET_INDEX) {
        let key = format!("net{index}");
        if current.raw().contains_key(&key) {
            update = update.delete(&key);
        }
    }
    Ok(update)
}

/// net0 on the desired bridge, VLAN and MAC; the MAC stays in the value sent (the current
/// one unless a MAC is pinned), since without it PVE would make a new one.
fn net_update(current: &VmConfig, desired: &Desired, update: ConfigUpdate) -> Step<ConfigUpdate> {
    match current.net(0) {
        Some(Ok(mut net)) => {
            let before = net.clone();
            if let Some(bridge) = &desired.bridge {
                net.bridge = Some(bridge.clone());
            }
            if let Some(tag) = desired.vlan_tag {
                net.tag = Some(tag);
            }
            if let Some(mac) = &desired.mac_address {
                net.mac = Some(mac.clone());
            }
            Ok(if net != before {
                update.net(0, &net)
            } else {
                update
            })
        }
        Some(Err(e)) => unworkable(format!("the VM's net0 cannot be read: {e}")),
        None => unworkable("the template has no net0 network interface to put on a bridge or VLAN"),
    }
}
