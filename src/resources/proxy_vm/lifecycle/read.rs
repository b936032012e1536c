//! Read: finds the state's VM through the shared listing (following a migration), observes
//! it, and says whose it is.

use super::super::model::Observed;
use super::error::Step;
use super::expected::Expected;
use super::observe::observe_known;
use crate::context::Configured;
use crate::ownership::Mark;

/// What a read finds at a VMID.
#[derive(Debug)]
pub enum Found {
    /// This resource's VM.
    Ours(Box<Observed>),
    /// Still being cloned: it exists, but shows nothing to compare yet.
    Cloning,
    /// Nothing there.
    Gone,
    /// A VM that is not this state's: never touched, dropped from state with this reason.
    NotOurs {
        why: String,
        mark: Option<Box<Mark>>,
    },
    /// A VM with the state's name whose description no longer carries any mark (edited by
    /// hand): most likely this state's VM, but it cannot be proven, so it is never written to.
    MarkLost { vmid: u32, node: String },
}

/// Finds VM `vmid` through the shared listing (following a migration) and observes it.
pub async fn read(configured: &Configured, vmid: u32, expected: Expected<'_>) -> Step<Found> {
    let listing = configured.runtime.vm_listing(&configured.client).await?;
    let Some(entry) = listing.iter().find(|vm| vm.vmid == vmid) else {
        return Ok(Found::Gone);
    };
    if entry.lock.as_deref() == Some("clone") {
        return Ok(Found::Cloning);
    }
    // The power state comes from the node's listing, shared by every read of this refresh.
    // A VM missing from it (migrated since the cluster listing) is asked directly.
    let power = configured
        .runtime
        .node_power(&configured.client, &entry.node)
        .await?;
    let status = power.get(&vmid).cloned();
    let Some(mut observed) = observe_known(
        &configured.client,
        &entry.node,
        vmid,
        entry.pool.clone(),
        status,
        None,
    )
    .await?
    else {
        return Ok(Found::Gone);
    };
    observed.ha_listed = entry.hastate.is_some();
    if observed.mark.is_none()
        && expected
            .name
            .is_some_and(|name| !name.is_empty() && observed.name == name)
    {
        tracing::warn!(
            vmid,
            "the VM of this state's name carries no ownership mark"
        );
        return Ok(Found::MarkLost {
            vmid,
            node: observed.node,
        });
    }
    if let Some(why) = expected.mismatch(observed.mark.as_ref()) {
        tracing::warn!(vmid, %why, "the VM at this VMID is not this state's: treating ours as \
            gone");
        return Ok(Found::NotOurs {
            why: format!(
                "VM {vmid} on {} is not this state's VM ({why}); it was left untouched",
                observed.node
            ),
            mark: observed.mark.map(Box::new),
        });
    }
    Ok(Found::Ours(Box::new(observed)))
}
