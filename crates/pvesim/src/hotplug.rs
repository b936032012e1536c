//! Which drive and NIC changes a running VM takes at once, and which stay pending until the
//! next start: qemu-server `QemuServer.pm` `vmconfig_hotplug_pending`,
//! `vmconfig_update_disk` and `vmconfig_update_net` (read at 9.2.6, e6352be6), with the VM's
//! `hotplug` option (default `network,disk,usb`).
//!
//! - A cdrom's medium changes at once whatever `hotplug` says (`change_medium`), `none`
//!   included: that is how a seed ISO is ejected from a running VM.
//! - A new drive on `ide`/`sata`, a delete of an `ide`/`sata`/`efidisk`/`tpmstate` drive,
//!   and every disk hotplug without the `disk` feature stay pending.
//! - A cdrom turned into a disk or back is refused by the hotplug ("unable to change media
//!   type") and stays pending.

use std::collections::BTreeMap;

use crate::world::{Drive, Net};

/// Options of an existing disk that a running VM cannot change (`vmconfig_update_disk`).
const COLD_OPTIONS: &[&str] = &[
    "aio", "discard", "iothread", "queues", "product", "cache", "ssd", "vendor", "ro",
];

/// `hotplug` includes `feature` (`1` is the default `network,disk,usb`, `0` none).
fn hotplug_feature(config: &BTreeMap<String, String>, feature: &str) -> bool {
    match config.get("hotplug").map(String::as_str) {
        None | Some("1") => ["network", "disk", "usb"].contains(&feature),
        Some("0") => false,
        Some(list) => list.split(',').any(|f| f.trim() == feature),
    }
}

fn disk_hotplug(config: &BTreeMap<String, String>) -> bool {
    hotplug_feature(config, "disk")
}

/// Setting NIC `key` to `value` on a running VM applies at once (`vmconfig_update_net`): a
/// new bridge, tag, trunks, firewall, rate or link state of an existing NIC is re-plugged
/// into its tap without the `network` feature; a new NIC, or a new model, MAC, queues or MTU
/// (or a bridge added or dropped), is a device hot-unplug and plug, which needs it ("skip":
/// pending).
pub fn net_set_applies(config: &BTreeMap<String, String>, key: &str, value: &str) -> bool {
    let Some(old) = config.get(key).map(|v| Net::parse(v)) else {
        return hotplug_feature(config, "network");
    };
    let new = Net::parse(value);
    let device_changes = old.model != new.model
        || old.mac != new.mac
        || ["queues", "mtu"]
            .iter()
            .any(|option| old.options.get(*option) != new.options.get(*option))
        || old.bridge().is_none()
        || new.bridge().is_none();
    !device_changes || hotplug_feature(config, "network")
}

/// Deleting NIC `key` from a running VM applies at once only with the `network` feature
/// (`vmconfig_hotplug_pending`'s delete: `die "skip\n" if !$hotplug_features->{network}`).
pub fn net_delete_applies(config: &BTreeMap<String, String>) -> bool {
    hotplug_feature(config, "network")
}

fn on_ide_or_sata(key: &str) -> bool {
    key.starts_with("ide") || key.starts_with("sata")
}

/// Setting drive `key` to `value` on a running VM applies at once.
pub fn set_applies(config: &BTreeMap<String, String>, key: &str, value: &str) -> bool {
    if key.starts_with("efidisk") || key.starts_with("tpmstate") || key.starts_with("unused") {
        return false;
    }
    let hotplug = disk_hotplug(config);
    let new = Drive::parse(value);
    let Some(old) = config.get(key).map(|v| Drive::parse(v)) else {
        return hotplug && !on_ide_or_sata(key);
    };
    let media = |d: &Drive| d.option("media").unwrap_or("disk").to_string();
    if media(&old) != media(&new) {
        return false;
    }
    if old.is_cdrom() {
        return true;
    }
    if old.volid != new.volid {
        return hotplug && !on_ide_or_sata(key);
    }
    COLD_OPTIONS
        .iter()
        .all(|option| old.option(option) == new.option(option))
}

/// Deleting drive `key` from a running VM applies at once.
pub fn delete_applies(config: &BTreeMap<String, String>, key: &str) -> bool {
    let cold = ["efidisk", "ide", "sata", "tpmstate", "unused"];
    disk_hotplug(config) && !cold.iter().any(|prefix| key.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_nic_moves_bridges_live_but_comes_and_goes_only_with_network_hotplug() {
        let nic = "virtio=BC:24:11:00:00:02,bridge=vmbr1,tag=20";
        let default = config(&[("net1", nic)]);
        let cold = config(&[("net1", nic), ("hotplug", "disk,usb")]);
        let moved = "virtio=BC:24:11:00:00:02,bridge=vmbr2,tag=30";
        let new_mac = "virtio=BC:24:11:00:00:09,bridge=vmbr1,tag=20";
        for vm in [&default, &cold] {
            assert!(
                net_set_applies(vm, "net1", moved),
                "bridge and tag: a tap re-plug"
            );
        }
        assert!(net_set_applies(&default, "net1", new_mac));
        assert!(
            !net_set_applies(&cold, "net1", new_mac),
            "a new MAC is a new device"
        );
        assert!(net_set_applies(&default, "net2", moved));
        assert!(
            !net_set_applies(&cold, "net2", moved),
            "a new NIC needs network hotplug"
        );
        assert!(net_delete_applies(&default));
        assert!(!net_delete_applies(&cold));
        assert!(!net_delete_applies(&config(&[("hotplug", "0")])));
        assert!(net_delete_applies(&config(&[("hotplug", "1")])));
    }

    #[test]
    fn cdrom_media_change_at_once_new_ide_pending() {
        let seeded = config(&[("ide2", "seeds:iso/a.iso,media=cdrom")]);
        assert!(set_applies(&seeded, "ide2", "none,media=cdrom"));
        assert!(set_applies(&seeded, "ide2", "seeds:iso/b.iso,media=cdrom"));
        assert!(!set_applies(&seeded, "ide2", "vmdata:vm-1-disk-1"));
        assert!(!delete_applies(&seeded, "ide2"));
        let bare = config(&[("hotplug", "0")]);
        assert!(!set_applies(&bare, "ide2", "seeds:iso/a.iso,media=cdrom"));
        assert!(!set_applies(
            &config(&[]),
            "ide2",
            "seeds:iso/a.iso,media=cdrom"
        ));
        assert!(set_applies(&config(&[]), "scsi1", "vmdata:vm-1-disk-1"));
        assert!(!set_applies(&bare, "scsi1", "vmdata:vm-1-disk-1"));
        assert!(delete_applies(&config(&[]), "scsi1"));
        let disk = config(&[("scsi0", "vmdata:vm-1-disk-0,size=4G")]);
        assert!(set_applies(&disk, "scsi0", "vmdata:vm-1-disk-0,size=8G"));
        assert!(!set_applies(
            &disk,
            "scsi0",
            "vmdata:vm-1-disk-0,size=4G,iothread=1"
        ));
    }
}
