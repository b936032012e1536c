//! The detach phase (`seed_lifetime = "until_ready"`): once cloud-init finished without
//! errors, the seed leaves the VM and the storage, in an order that makes a crash anywhere
//! harmless and resumable:
//! 1. the guest must hold cloud-init's `manual-clean` marker (`nocloud::render::
//!    MANUAL_CLEAN_MARKER`), or it would lose its datasource at the next boot: without it the
//!    seed stays, with a warning;
//! 2. `ide2: none,media=cdrom`, a conditional write through the owner's handle (PVE applies
//!    a media change on a running VM at once);
//! 3. the ISO is deleted.
//!
//! A crash between 2 and 3 leaves a file no VM boots, still named in the state: the next
//! apply (whose plan shows the detach) or destroy deletes it. Nothing a VM boots is deleted.

use std::sync::Mutex;

use pve::qemu::ConfigUpdate;
use pve::wire::CdromDrive;

use super::super::model::SeedStays;
use super::cloud_init::{GuestFile, read_guest_file};
use super::error::Step;
use super::guest::Guest;
use super::owned::{OwnedVm, Seen, tolerate_gone};

/// How a detach ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detach {
    /// The seed is detached and its ISO deleted.
    Done,
    /// The seed stays attached: why, for a warning, and for good.
    Kept { why: String, stays: SeedStays },
}

/// What a detach decides from, read at once: the VM's config (its digest for the write) and
/// the guest's `manual-clean` marker.
pub(super) struct Looked {
    seen: Step<Seen>,
    marker: Step<Option<(String, SeedStays)>>,
}

/// The detach's two reads, sent together (and beside the caller's own: the first boot's
/// instance-id), so a create's detach waits for one answer, not three in turn.
pub(super) async fn look(vm: &OwnedVm<'_>) -> Looked {
    let (seen, marker) = tokio::join!(vm.read(), marker_missing(vm));
    Looked { seen, marker }
}

/// Detaches `seed_volume` (uploaded to `seed_node`) from the VM and deletes it; see the
/// module doc. A VM that boots another volume as `ide2` keeps it, and `seed_volume` is
/// deleted only when no VM of ours boots it. `looked`: the reads [`look`] made, decided
/// from first (a read that failed is made again, as is everything after a refused digest).
pub(super) async fn detach_seed(
    vm: &OwnedVm<'_>,
    seed_node: &str,
    seed_volume: &str,
    looked: Option<Looked>,
) -> Step<Detach> {
    let (seen, marker) = match looked {
        Some(Looked { seen, marker }) => (seen.ok(), Some(marker)),
        None => (None, None),
    };
    // The marker read once: a later attempt (its digest refused) asks the guest again.
    let marker = Mutex::new(marker);
    // One read decides: a VM still booting the seed needs the guest's marker first, then
    // the conditional write; one whose `ide2` is empty already (a detach resumed) only the
    // file's delete.
    let kept: Mutex<Option<(String, SeedStays)>> = Mutex::new(None);
    let attempt = |seen: Seen| {
        let (kept, marker) = (&kept, &marker);
        async move {
            let boots_seed = seen
                .config
                .cdrom("ide2")
                .and_then(Result::ok)
                .is_some_and(|d| d.volume == seed_volume);
            if !boots_seed {
                return Ok(());
            }
            let looked = marker.lock().unwrap_or_else(|e| e.into_inner()).take();
            let missing = match looked {
                Some(missing) => missing?,
                None => marker_missing(vm).await?,
            };
            if let Some(why) = missing {
                *kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                return Ok(());
            }
            let update = ConfigUpdate::new().cdrom("ide2", &CdromDrive::none());
            vm.write(&seen.change(update)).await?;
            tracing::info!(vmid = vm.vmid(), "detached the seed");
            Ok(())
        }
    };
    match seen {
        Some(seen) => {
            vm.conditional_from(seen, "detach the seed", attempt)
                .await?
        }
        None => vm.conditional("detach the seed", attempt).await?,
    }
    if let Some((why, stays)) = kept.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Ok(Detach::Kept { why, stays });
    }
    if let Some((storage, _)) = seed_volume.split_once(':') {
        // Where it was uploaded, and where the VM is when it moved before its seed was
        // attached (the create uploaded it again there: `create/seed.rs` `follow_the_vm`).
        let mut nodes = vec![seed_node];
        if vm.node() != seed_node {
            nodes.push(vm.node());
        }
        for node in nodes {
            let store = vm.client().node(node).storage(storage);
            tolerate_gone(
                vm.op()
                    .run_answered_task(|| store.delete_volume_answered(seed_volume))
                    .await,
            )?;
        }
        tracing::info!(vmid = vm.vmid(), volume = %seed_volume, "deleted the detached seed");
    }
    Ok(Detach::Done)
}

/// Why the seed must stay, when the guest lacks cloud-init's `manual-clean` marker or
/// cannot be asked; `None` when the marker is there.
async fn marker_missing(vm: &OwnedVm<'_>) -> Step<Option<(String, SeedStays)>> {
    let marker = nocloud::render::MANUAL_CLEAN_MARKER;
    Ok(match read_guest_file(Guest::Owned(vm), marker).await? {
        GuestFile::Read(_) => None,
        GuestFile::Missing => Some((
            format!(
                "the guest of VM {} has no {marker} (its cloud-init does not honour \
             `manual_cache_clean`, older than 20.x, or the user-data turned vendor-data off): \
             without its seed it would lose its datasource and network config at the next \
             boot, so the seed stays attached. Set seed_lifetime = \"vm\" to say so and \
             silence this.",
                vm.vmid()
            ),
            SeedStays::NoMarker,
        )),
        GuestFile::Refused { why, stays } => Some((
            format!("{why} Its seed stays attached."),
            stays.unwrap_or(SeedStays::GuestRefuses),
        )),
    })
}
