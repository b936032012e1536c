//! Delete, read top-down as its phases: locate (where the VM is and whose), its HA state
//! (`ha_state`: waited out while the HA manager moves it, refused when it runs in `error`),
//! the checks PVE's destroy would make (`refusals`), mark `deleting`, stop (only a VM that
//! may run), destroy with purge, and last the seed; never a VM that is not this state's,
//! never a seed another VM boots.
//!
//! Nothing is written before every refusal PVE could make is ruled out, so a destroy PVE
//! refuses leaves the VM running with its seed. The seed goes after the VM: a VM never
//! names a deleted seed, and a failed seed delete keeps the seed in state for the next
//! destroy (which finds the VM gone and deletes it). A destroy interrupted after its mark
//! leaves a VM marked `deleting`: the next destroy finishes it, and the next apply restores
//! it (its refresh reads it as stopped, and the update marks it `done` again).
//!
//! Everything PVE will resolve by itself is waited out within the delete timeout: a clone
//! still running on the VM, a lock (a backup), an earlier destroy task still finishing.

mod ha_state;
mod locate;
mod refusals;
mod seed;

use tokio::time::Instant;

use super::error::{Step, StepError};
use super::expected::{Expected, ExpectedToken};
use super::teardown;
use crate::context::Configured;
use ha_state::StopFirst;
use locate::AtVmid;
pub use seed::RecordedSeed;

/// The VM a delete removes: the state's VMID, the node it was last seen on, whose it must
/// be, the seed the state recorded, and the mark lines that would hand it back when its
/// mark was edited away.
#[derive(Debug, Clone)]
pub struct Doomed<'a> {
    pub vmid: u32,
    pub node_hint: &'a str,
    pub expected: Expected<'a>,
    pub seed: Option<RecordedSeed<'a>>,
    pub mark_to_restore: String,
    /// The state made it an HA resource (`ha`): its HA state is read before the destroy
    /// even when the listing does not show it yet.
    pub under_ha: bool,
}

/// See the module doc. Returns a note when the VM at the VMID was not this state's and was
/// left alone; an error, and nothing changed, when its mark was edited away.
pub async fn delete(
    configured: &Configured,
    doomed: Doomed<'_>,
    deadline: Instant,
) -> Step<Option<String>> {
    let name = doomed.expected.name.unwrap_or_default();
    let _name_guard = configured
        .runtime
        .lock_name(&format!("{}/{name}", doomed.expected.fleet))
        .await;
    delete_holding_name(configured, doomed, deadline).await
}

/// [`delete`] for a caller that holds the name's lock already (a create of the name
/// removing what this directory's killed create left): the lock is not reentrant.
pub async fn delete_holding_name(
    configured: &Configured,
    doomed: Doomed<'_>,
    deadline: Instant,
) -> Step<Option<String>> {
    let client = &configured.client;
    let Doomed { vmid, expected, .. } = doomed;
    let name = expected.name.unwrap_or_default();
    let (at_vmid, ours) =
        locate::locate(configured, vmid, doomed.node_hint, expected, deadline).await?;
    let mut note = None;
    // The token of the VM's mark, once the VM proved ours without one in the state (a
    // tainted VM's state, see `ExpectedToken::MadeBeforeTokens`): its seed is named for it.
    let proven_token = ours
        .as_ref()
        .and_then(|(_, seen)| seen.mark.create_token.clone());
    match &at_vmid {
        AtVmid::Gone | AtVmid::Ours(_) => {}
        AtVmid::MarkLost(node) => {
            return Err(StepError::MarkLost {
                vmid,
                node: node.clone(),
                name: name.to_owned(),
                restore: doomed.mark_to_restore,
            });
        }
        AtVmid::NotOurs { why, node, .. } => {
            note = Some(format!(
                "VM {vmid} on {node} is not this state's VM ({why}); it was left untouched."
            ));
        }
    }
    if let Some((vm, seen)) = ours {
        let (vm, seen, stop) =
            ha_state::before_destroy(configured, vm, seen, doomed.under_ha).await?;
        refusals::check_destroy_allowed(configured, &vm, &seen.config, doomed.seed.as_ref())
            .await?;
        // From here on no create adopts it, and every later step checks it is still ours.
        let proof = vm.mark_deleting_from(seen).await?;
        if stop == StopFirst::Yes {
            teardown::stop_marked(&vm, proof).await?;
        }
        if !vm.destroy().await? {
            // An earlier destroy task (a killed run's) is still finishing.
            teardown::wait_until_gone(&vm).await?;
        }
        // Placement and reads of this process no longer count it.
        configured.runtime.forget_vm(vmid).await;
    }
    if let Some(seed) = &doomed.seed {
        let token = match (expected.token, proven_token.as_deref()) {
            (ExpectedToken::MadeBeforeTokens { .. }, Some(token)) => {
                ExpectedToken::Is { token, proof: None }
            }
            (token, _) => token,
        };
        let deleted =
            seed::delete_seed(client, seed, name, vmid, token, &at_vmid, deadline).await?;
        if let (false, Some(note)) = (deleted, &mut note) {
            note.push_str(&format!(
                " Its seed {} was left too: it is not provably this state's, or that VM boots it.",
                seed.volume
            ));
        }
    }
    Ok(note)
}
