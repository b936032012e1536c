//! The seed phase of a delete: the state's recorded seed deleted when it is provably this
//! state's and no VM that is not going boots it.

use tokio::time::Instant;

use super::super::error::{Step, StepError};
use super::super::expected::ExpectedToken;
use super::super::operation::Operation;
use super::super::owned::tolerate_gone;
use super::locate::AtVmid;

/// The seed a state recorded: the node it was uploaded to and its volume id.
#[derive(Debug, Clone, Copy)]
pub struct RecordedSeed<'a> {
    pub node: &'a str,
    pub volume: &'a str,
}

/// Deletes the recorded seed when [`seed_is_ours_to_delete`]; false when it was left.
pub(super) async fn delete_seed(
    client: &pve::Client,
    seed: &RecordedSeed<'_>,
    name: &str,
    vmid: u32,
    token: ExpectedToken<'_>,
    at_vmid: &AtVmid,
    deadline: Instant,
) -> Step<bool> {
    if !seed_is_ours_to_delete(seed, name, vmid, token, at_vmid) {
        return Ok(false);
    }
    if let Some((storage, _)) = seed.volume.split_once(':') {
        let moved_to = match at_vmid {
            AtVmid::Ours(node) if node != seed.node => Some(node.as_str()),
            _ => None,
        };
        let store = client.node(seed.node).storage(storage);
        let op = Operation::new(client, deadline);
        let deleted = op
            .run_answered_task(|| store.delete_volume_answered(seed.volume))
            .await;
        match (deleted, moved_to) {
            // The upload's node is down (595) and the VM was found on another node: a seed
            // it moved with is on storage that node reaches (PVE migrates no local CD-ROM).
            // Not found there, the seed is on the node that is down: an error, so the state
            // keeps it for the next destroy.
            (Err(StepError::Pve(e)), Some(node)) if e.node_unreachable() => {
                let store = client.node(node).storage(storage);
                op.run_answered_task(|| store.delete_volume_answered(seed.volume))
                    .await?;
            }
            // A VM migrated before its seed was attached has its seed uploaded where it went
            // (`create/seed.rs` `follow_the_vm`): on node-local storage, that copy is the one
            // it booted. Deleting a missing ISO ends OK, so on shared storage this is a no-op.
            (outcome, Some(node)) => {
                tolerate_gone(outcome)?;
                let store = client.node(node).storage(storage);
                tolerate_gone(
                    op.run_answered_task(|| store.delete_volume_answered(seed.volume))
                        .await,
                )?;
            }
            (outcome, None) => tolerate_gone(outcome)?,
        }
    }
    Ok(true)
}

/// Whether the state's recorded seed may be deleted: it must be this instance's (named for
/// its create token, or, for a state from before tokens, the one seed name its VM had) and
/// not be what the VM now at the VMID boots, unless that VM is ours and goes too. Only the
/// VM at the state's VMID is asked: a seed named for our token is attached by our create
/// alone.
fn seed_is_ours_to_delete(
    seed: &RecordedSeed<'_>,
    name: &str,
    vmid: u32,
    token: ExpectedToken<'_>,
    at_vmid: &AtVmid,
) -> bool {
    let Some((_, file)) = seed.volume.split_once(":iso/") else {
        return false;
    };
    let named_for_us = match token {
        ExpectedToken::Is { token, .. } => nocloud::file_belongs_to_attempt(file, token),
        _ => false,
    };
    // Seeds from before attempt tags were named per VM (name, node, VMID).
    let named_per_vm = file
        == format!(
            "{}.iso",
            nocloud::file_name_stem(name, &format!("{}/{vmid}", seed.node))
        );
    match at_vmid {
        // Ours is gone by the time its seed is deleted.
        AtVmid::Ours(_) | AtVmid::Gone => named_for_us || named_per_vm,
        AtVmid::MarkLost(_) => false,
        AtVmid::NotOurs { boots, .. } => named_for_us && boots.as_deref() != Some(seed.volume),
    }
}
