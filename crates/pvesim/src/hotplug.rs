//! Which drive changes a running VM takes at once, and which stay pending until the next
//! start: qemu-server `QemuServer.pm` `vmconfig_hotplug_pending` and
//! `vmconfig_update_disk`, with the VM's `hotplug` option (default `network,disk,usb`).
//!
//! - A cdrom's medium changes at once whatever `hotplug` says (`change_medium`), `none`
//!   included: that is how a seed ISO is ejected from a running VM.
//! - A new drive on `ide`/`sata`, a delete of an `ide`/`sata`/`efidisk`/`tpmstate` drive,
//!   and every disk hotplug without the `disk` feature stay pending.
//! - A cdrom turned into a disk or back is refused by the hotplug ("unable to change media
//!   type") and stays pending.

use std::collections::BTreeMap;

use crate::world::Drive;

/// Options of an existing disk that a running VM cannot change (`vmconfig_update_disk`).
const COLD_OPTIONS: &[&str] = &[
    "aio", "discard", "iothread", "queues", "product", "cache", "ssd", "vendor", "ro",
];

/// `hotplug` includes `disk` (`1` = every feature, `0` = none).
fn disk_hotplug(config: &BTreeMap<String, String>) -> bool {
    match config.get("hotplug").map(String::as_str) {
        None => true,
        Some("1") => true,
        Some("0") => false,
        Some(list) => list.split(',').any(|f| f.trim() == "disk"),
    }
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
