//! The grow phase of create and update: the boot disk grown to `disk_gib` when it is
//! smaller, conditional on the digest of the read that decided it. Disks never shrink.

use pve::qemu::VmConfig;
use pve::wire::ByteSize;

use super::error::{Step, unworkable};
use super::owned::OwnedVm;

/// Grows the boot disk to `disk_gib` (unset: nothing to do).
pub(super) async fn grow_disk(vm: &OwnedVm<'_>, disk_gib: Option<u64>) -> Step<()> {
    let Some(wanted) = disk_gib else {
        return Ok(());
    };
    vm.conditional("grow the disk", |seen| async move {
        let Some((key, size)) = growth_needed(&seen.config, wanted)? else {
            return Ok(());
        };
        vm.grow(&key, size, &seen).await
    })
    .await
}

/// The boot disk's key and new size when it is smaller than `wanted` GiB.
fn growth_needed(config: &VmConfig, wanted: u64) -> Step<Option<(String, ByteSize)>> {
    let Some((key, disk)) = config.boot_disk() else {
        return unworkable("the VM has no boot disk to grow");
    };
    let current = disk.size.map(|s| s.bytes()).unwrap_or(0);
    if current >= ByteSize::gib(wanted).bytes() {
        return Ok(None);
    }
    Ok(Some((key, ByteSize::gib(wanted))))
}
