//! What a migration looks at in a VM and the storages: its volumes with what each
//! reference says about them (qemu-server `QemuServer.pm` `foreach_volid`: drives, unused
//! disks, `vmstate`, pending drives), its local devices, whether a storage is usable on a
//! node (pve-storage `storage_check_enabled`), and the storage map of `targetstorage`
//! (pve-common `JSONSchema.pm` `parse_idmap`, `map_id`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::world::{Drive, Vm, World, is_drive_key};

/// `foreach_volid`'s attributes of one volume.
#[derive(Debug, Clone, Default)]
pub struct VolumeRef {
    pub volid: String,
    /// Every reference is a CD-ROM.
    pub cdrom: bool,
    pub is_cloudinit: bool,
    pub is_unused: bool,
    pub is_attached: bool,
    pub is_vmstate: bool,
    pub is_tpmstate: bool,
    pub referenced_in_pending: bool,
    /// Marked `shared=1` on the drive.
    pub shared: bool,
    pub replicate: bool,
    pub size: Option<u64>,
    pub drivename: Option<String>,
}

impl VolumeRef {
    /// The storage of a `storage:name` volume; `None` for paths, `cdrom` and `none`.
    pub fn storage(&self) -> Option<&str> {
        let (storage, _) = self.volid.split_once(':')?;
        Some(storage)
    }

    /// pve-storage `parse_volname`'s content type: `iso/…` is an ISO image, the rest disks.
    pub fn content_type(&self) -> &'static str {
        match self.volid.split_once(':') {
            Some((_, name)) if name.starts_with("iso/") => "iso",
            _ => "images",
        }
    }

    /// The `local_disks` entry of the migration precondition (booleans as 0/1).
    pub fn precondition_json(&self) -> Value {
        let flag = |b: bool| json!(i32::from(b));
        let mut row = Map::new();
        row.insert("volid".into(), json!(self.volid));
        row.insert("cdrom".into(), flag(self.cdrom));
        row.insert("is_cloudinit".into(), flag(self.is_cloudinit));
        row.insert("is_unused".into(), flag(self.is_unused));
        row.insert("is_attached".into(), flag(self.is_attached));
        row.insert("is_vmstate".into(), flag(self.is_vmstate));
        row.insert("is_tpmstate".into(), flag(self.is_tpmstate));
        row.insert("shared".into(), flag(self.shared));
        row.insert("replicate".into(), flag(self.replicate));
        if self.referenced_in_pending {
            row.insert("referenced_in_pending".into(), json!(1));
        }
        if let Some(size) = self.size {
            row.insert("size".into(), json!(size));
        }
        if let Some(drive) = &self.drivename {
            row.insert("drivename".into(), json!(drive));
        }
        Value::Object(row)
    }
}

/// `drive_is_cloudinit`: the volume is `vm-<vmid>-cloudinit[.fmt]`.
fn is_cloudinit(volid: &str) -> bool {
    let file = crate::world::volume_file_name(volid);
    let stem = file.split_once('.').map_or(file, |(stem, _)| stem);
    stem.strip_prefix("vm-")
        .and_then(|rest| rest.strip_suffix("-cloudinit"))
        .is_some_and(|id| id.parse::<u32>().is_ok())
}

/// Every volume `foreach_volid` visits, by volid, its attributes merged over references.
pub fn volume_refs(vm: &Vm) -> BTreeMap<String, VolumeRef> {
    let mut refs: BTreeMap<String, VolumeRef> = BTreeMap::new();
    let mut visit = |key: &str, value: &str, pending: bool| {
        let drive = if key == "vmstate" {
            Drive {
                volid: value.to_string(),
                options: Vec::new(),
            }
        } else {
            Drive::parse(value)
        };
        if drive.volid.is_empty() {
            return;
        }
        let new = !refs.contains_key(&drive.volid);
        let entry = refs.entry(drive.volid.clone()).or_default();
        entry.volid = drive.volid.clone();
        entry.cdrom = (new || entry.cdrom) && drive.is_cdrom();
        entry.is_cloudinit |= is_cloudinit(&drive.volid);
        entry.replicate |= drive.option("replicate") != Some("0");
        entry.shared |= drive.option("shared") == Some("1");
        let unused = key.starts_with("unused");
        entry.is_unused |= unused;
        entry.is_attached |= !entry.is_unused && !pending;
        entry.referenced_in_pending |= pending;
        if entry.size.is_none() {
            entry.size = drive.size();
        }
        entry.is_vmstate |= key == "vmstate";
        entry.is_tpmstate |= key == "tpmstate0";
        if is_drive_key(key) && !unused {
            entry.drivename = Some(key.to_string());
        }
    };
    for (key, value) in &vm.config {
        if is_drive_key(key) || key == "vmstate" {
            visit(key, value, false);
        }
    }
    for (key, value) in &vm.pending {
        if is_drive_key(key) || key == "vmstate" {
            visit(key, value, true);
        }
    }
    refs
}

/// `foreach_volume`: the drives in use (no unused disks, no pending ones), CD-ROMs too.
pub fn attached_storages(vm: &Vm) -> Vec<(String, VolumeRef)> {
    volume_refs(vm)
        .into_values()
        .filter(|r| r.is_attached && r.volid != "none" && r.volid != "cdrom")
        .filter_map(|r| Some((r.storage()?.to_string(), r)))
        .collect()
}

/// `PVE::QemuMigrate::Helpers::check_local_resources`: passed-through devices and host USB.
pub fn local_resources(vm: &Vm) -> Vec<String> {
    vm.config
        .iter()
        .filter(|(key, value)| {
            let indexed = |prefix: &str| {
                key.strip_prefix(prefix)
                    .is_some_and(|n| n.parse::<u8>().is_ok())
            };
            indexed("hostpci")
                || (indexed("usb") && !value.contains("spice"))
                || key.as_str() == "ivshmem"
        })
        .map(|(key, _)| key.clone())
        .collect()
}

/// pve-storage `storage_check_enabled` (with a node: also `storage_check_node`).
pub fn storage_check_enabled(world: &World, sid: &str, node: Option<&str>) -> Result<(), String> {
    let storage = world
        .storage(sid)
        .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
    if !storage.enabled {
        return Err(format!("storage '{sid}' is disabled"));
    }
    if let Some(node) = node
        && !World::storage_on_node(storage, node)
    {
        return Err(format!("storage '{sid}' is not available on node '{node}'"));
    }
    Ok(())
}

/// A parsed `targetstorage` (`storage-pair-list`).
#[derive(Debug, Clone, Default)]
pub struct StorageMap {
    pub identity: bool,
    pub default: Option<String>,
    pub entries: BTreeMap<String, String>,
}

impl StorageMap {
    /// `parse_idmap`; the error is its die text.
    pub fn parse(text: &str) -> Result<StorageMap, String> {
        let mut map = StorageMap::default();
        for entry in crate::schema::split_list(text) {
            if entry == "1" {
                map.identity = true;
            } else if let Some((source, target)) = entry.split_once(':') {
                if map.entries.contains_key(source) {
                    return Err(format!("duplicate mapping for source '{source}'"));
                }
                map.entries.insert(source.into(), target.into());
            } else {
                if map.default.is_some() {
                    return Err("default target ID can only be provided once".into());
                }
                map.default = Some(entry.into());
            }
        }
        if map.identity && (map.default.is_some() || !map.entries.is_empty()) {
            return Err("identity mapping cannot be combined with other mappings".into());
        }
        Ok(map)
    }

    /// `map_id`.
    pub fn map(&self, source: &str) -> String {
        if self.identity {
            return source.to_string();
        }
        self.entries
            .get(source)
            .or(self.default.as_ref())
            .cloned()
            .unwrap_or_else(|| source.to_string())
    }

    /// The target storages named (the entries' and the default).
    pub fn targets(&self) -> BTreeSet<String> {
        self.entries
            .values()
            .chain(self.default.iter())
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_maps_parse_like_parse_idmap() {
        let map = StorageMap::parse("local-lvm:local,vmdata").unwrap();
        assert_eq!(map.map("local-lvm"), "local");
        assert_eq!(map.map("other"), "vmdata");
        assert!(StorageMap::parse("1").unwrap().identity);
        assert_eq!(
            StorageMap::parse("1").unwrap().map("local-lvm"),
            "local-lvm"
        );
        assert_eq!(
            StorageMap::parse("1,local").unwrap_err(),
            "identity mapping cannot be combined with other mappings"
        );
        assert_eq!(
            StorageMap::parse("a,b").unwrap_err(),
            "default target ID can only be provided once"
        );
        assert_eq!(StorageMap::default().map("x"), "x");
    }

    #[test]
    fn volume_refs_merge_attributes_as_foreach_volid_does() {
        let mut world = crate::world::World::new(&crate::SimConfig::default());
        let vm = world.vms.get_mut(&100).unwrap();
        vm.config
            .insert("ide2".into(), "local:iso/seed.iso,media=cdrom".into());
        vm.config
            .insert("unused0".into(), "local-lvm:vm-100-disk-1".into());
        vm.pending
            .insert("scsi1".into(), "local-lvm:vm-100-disk-1,size=1G".into());
        let refs = volume_refs(&world.vms[&100]);
        let iso = &refs["local:iso/seed.iso"];
        assert!(iso.cdrom && iso.is_attached && iso.size.is_none());
        assert_eq!(iso.content_type(), "iso");
        let unused = &refs["local-lvm:vm-100-disk-1"];
        assert!(unused.is_unused && unused.referenced_in_pending && !unused.is_attached);
        assert_eq!(unused.size, Some(1 << 30));
        let disk = &refs["local-lvm:vm-100-disk-0"];
        assert_eq!(disk.drivename.as_deref(), Some("scsi0"));
        assert_eq!(disk.size, Some(32 << 30));
    }
}
