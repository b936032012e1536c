//! Delete, read top-down as its phases: locate (where the VM is and whose), mark `deleting`,
//! stop, seed, destroy with purge; never a VM that is not this state's, never a seed another
//! VM boots.
//!
//! Everything PVE will resolve by itself is waited out within the delete timeout: a clone
//! still running on the VM, a lock (a backup), an earlier destroy task still finishing.

mod destroy;
mod locate;
mod seed;

use tokio::time::Instant;

use super::error::Step;
use super::expected::Expected;
use super::owned::OwnedVm;
use crate::context::Configured;
use locate::AtVmid;
pub use seed::RecordedSeed;

/// Mark `deleting`, stop, delete the seed, destroy with purge. The seed goes before the
/// destroy, so a failed seed delete leaves the VM for the next delete instead of leaking the
/// ISO. A VM already gone is done. Returns a note when the VM at the VMID was not this
/// state's and was left alone.
pub async fn delete(
    configured: &Configured,
    vmid: u32,
    node_hint: &str,
    expected: Expected<'_>,
    seed: Option<RecordedSeed<'_>>,
    deadline: Instant,
) -> Step<Option<String>> {
    let client = &configured.client;
    let name = expected.name.unwrap_or_default();
    let _name_guard = configured
        .runtime
        .lock_name(&format!("{}/{name}", expected.fleet))
        .await;
    let at_vmid = locate::locate(configured, vmid, node_hint, &expected, deadline).await?;
    let vm = match &at_vmid {
        AtVmid::Ours(node) => Some(OwnedVm {
            client,
            node: node.clone(),
            vmid,
            expected,
            deadline,
        }),
        _ => None,
    };
    if let Some(vm) = &vm {
        // From here on no create adopts it, and every later step checks it is still ours.
        vm.mark_deleting().await?;
        destroy::stop(vm).await?;
    }
    let mut note = match &at_vmid {
        AtVmid::NotOurs { why, node, .. } => Some(format!(
            "VM {vmid} on {node} is not this state's VM ({why}); it was left untouched."
        )),
        _ => None,
    };
    if let Some(seed) = seed {
        let deleted = seed::delete_seed(
            client,
            &seed,
            name,
            vmid,
            expected.token,
            &at_vmid,
            deadline,
        )
        .await?;
        if let (false, Some(note)) = (deleted, &mut note) {
            note.push_str(&format!(
                " Its seed {} was left too: it is not provably this state's, or that VM boots it.",
                seed.volume
            ));
        }
    }
    if let Some(vm) = &vm {
        vm.destroy().await?;
        destroy::wait_until_gone(vm).await?;
        // Placement and reads of this process no longer count it.
        configured.runtime.forget_vm(vmid).await;
    }
    Ok(note)
}
