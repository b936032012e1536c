//! The seed phase of a create: the NoCloud seed built (pure: the same input gives the same
//! bytes) and uploaded to its own file, named for this create attempt's token; and the
//! removal of seeds nobody boots (this attempt's, when the VM was taken over; earlier
//! attempts' at this VM slot, once the VM is finished).

use pve::storage::Upload;
use pve::{Client, ErrorKind};
use tokio::time::Instant;

use super::super::super::model::Desired;
use super::super::error::{Step, StepError};
use super::super::operation::Operation;
use super::hold::Finished;

/// A seed built for this VM.
pub(super) struct BuiltSeed {
    /// Its volume id on the seed storage.
    pub volume: String,
    pub bytes: bytes::Bytes,
    /// The instance-id its meta-data names: the guest's cloud-init runs as it when it read
    /// the seed.
    pub instance_id: String,
    /// The node the VM was made on: part of the seed's identity, and where it is uploaded.
    pub made_on: String,
}

/// The seed for this VM (pure: the same input gives the same bytes).
pub(super) fn build_seed(desired: &Desired, node: &str, vmid: u32) -> Step<BuiltSeed> {
    let seed = desired
        .seed(node, vmid)
        .build()
        .map_err(|e| StepError::Unworkable(format!("building the seed ISO failed: {e}")))?;
    Ok(BuiltSeed {
        volume: format!("{}:iso/{}", desired.seed_storage, seed.file_name_suggestion),
        bytes: bytes::Bytes::from(seed.bytes),
        instance_id: seed.instance_id,
        made_on: node.to_owned(),
    })
}

/// Uploads the seed to its storage on the VM's node. Uploads overwrite, so repeating one is
/// harmless.
pub(super) async fn upload_seed(
    client: &Client,
    node: &str,
    volume: &str,
    bytes: bytes::Bytes,
    deadline: Instant,
) -> Step<()> {
    let (storage, file) = volume
        .split_once(":iso/")
        .ok_or_else(|| StepError::Unworkable(format!("unexpected seed volume `{volume}`")))?;
    let storage = client.node(node).storage(storage);
    Operation::new(client, deadline)
        .run_task(|| storage.upload(Upload::iso(file, bytes.clone())))
        .await?;
    Ok(())
}

/// Puts the seed where the VM went when it moved after the upload and before its seed was
/// attached (an operator's migration of the stopped VM: PVE moves a VM with no CD-ROM on
/// node-local storage): a seed on storage the new node reaches stays as it is; one on the
/// old node's own storage is uploaded again where the VM is, and removed from the node it
/// left, where no VM boots it.
pub(super) async fn follow_the_vm(
    client: &Client,
    (from, to): (&str, &str),
    volume: &str,
    bytes: bytes::Bytes,
    deadline: Instant,
) -> Step<()> {
    let Some((storage, _)) = volume.split_once(':') else {
        return Err(StepError::Unworkable(format!(
            "unexpected seed volume `{volume}`"
        )));
    };
    let store = client.node(to).storage(storage);
    // A listing, not the volume's own info: PVE words a missing file there as a failed size
    // query ("volume_size_info on '…' failed - no format"), not as not found.
    let listed = Operation::new(client, deadline)
        .retry(|| store.content(Some("iso")))
        .await?;
    if listed.iter().any(|item| item.volid == volume) {
        return Ok(());
    }
    tracing::info!(%volume, from, to, "the VM moved before its seed was attached: seed follows");
    upload_seed(client, to, volume, bytes, deadline).await?;
    remove_seed(client, from, volume, deadline).await;
    Ok(())
}

/// Deletes a seed file, logging (not failing) when it cannot: what is left is a file no VM
/// uses, which a later destroy of its state or the test sweeper removes.
pub(super) async fn remove_seed(client: &pve::Client, node: &str, volume: &str, deadline: Instant) {
    let Some((storage, _)) = volume.split_once(':') else {
        return;
    };
    let store = client.node(node).storage(storage);
    let op = Operation::new(client, deadline);
    match op
        .run_answered_task(|| store.delete_volume_answered(volume))
        .await
    {
        Ok(_) => tracing::info!(%volume, "deleted a seed no VM uses"),
        Err(StepError::Pve(e)) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(%volume, error = %e, "could not delete a seed no VM uses"),
    }
}

/// Deletes the seeds earlier attempts uploaded for this VM slot (same name, node and VMID,
/// another attempt's tag, or the per-VM name of releases before attempt tags), which no VM
/// boots: the VM at the slot is this create's finished VM, booting `ours`.
pub(super) async fn remove_earlier_seeds(
    _finished: &Finished,
    client: &pve::Client,
    node: &str,
    vmid: u32,
    desired: &Desired,
    ours: &str,
    deadline: Instant,
) {
    let stem = format!(
        "{}:iso/{}",
        desired.seed_storage,
        nocloud::file_name_stem(&desired.name, &format!("{node}/{vmid}"))
    );
    // Exactly `STEM.iso` or `STEM-XXXXXXXX.iso`: never another name's seed that happens to
    // start like this one.
    let earlier = |volid: &str| match volid
        .strip_prefix(&stem)
        .and_then(|rest| rest.strip_suffix(".iso"))
    {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('-')
            .is_some_and(|tag| tag.len() == 8 && tag.bytes().all(|b| b.is_ascii_hexdigit())),
        None => false,
    };
    let store = client.node(node).storage(&desired.seed_storage);
    let op = Operation::new(client, deadline);
    let listed = op.retry(|| store.content(Some("iso"))).await;
    let Ok(items) = listed else {
        return;
    };
    for item in items {
        if earlier(&item.volid) && item.volid != ours {
            remove_seed(client, node, &item.volid, deadline).await;
        }
    }
}
