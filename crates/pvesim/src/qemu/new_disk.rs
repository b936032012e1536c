//! Drive values that ask PVE to allocate a disk: `storage:SIZE_GIB` and `storage:cloudinit`.

use crate::world::Drive;

/// qemu-server `Cloudinit.pm` `CLOUDINIT_DISK_SIZE`: a new cloud-init drive's size.
pub(super) const CLOUDINIT_DISK_SIZE: u64 = 4 << 20;

/// The storage of a drive given as `<storage>:cloudinit` (a cloud-init drive to allocate).
pub(super) fn cloudinit_storage(volid: &str) -> Option<String> {
    let (storage, name) = volid.split_once(':')?;
    (name == "cloudinit" && !storage.is_empty()).then(|| storage.to_string())
}

/// qemu-server `Drive.pm` `drive_is_cloudinit`: the volume is `vm-<vmid>-cloudinit[.fmt]`.
pub(super) fn is_cloudinit_drive(value: &str) -> bool {
    let volid = Drive::parse(value).volid;
    let file = crate::world::volume_file_name(&volid);
    let stem = file.split_once('.').map_or(file, |(stem, _)| stem);
    stem.strip_prefix("vm-")
        .and_then(|rest| rest.strip_suffix("-cloudinit"))
        .is_some_and(|id| id.parse::<u32>().is_ok())
}

/// `storage:SIZE_GIB` in a drive value asks PVE to allocate a new disk: its storage and size.
pub(super) fn new_disk_spec(drive: &Drive) -> Option<(String, u64)> {
    if drive.is_cdrom() {
        return None;
    }
    let (storage, size) = drive.volid.split_once(':')?;
    let gib: f64 = size.parse().ok()?;
    Some((storage.to_string(), (gib * (1u64 << 30) as f64) as u64))
}
