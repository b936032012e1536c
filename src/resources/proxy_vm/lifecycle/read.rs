//! Read: finds the state's VM through the shared listing (following a migration), observes
//! it, and says whose it is.

use std::time::Instant;

use super::super::model::Observed;
use super::error::{Step, unworkable};
use super::expected::Expected;
use super::observe::observe_known;
use super::whereabouts::MOVES_FOLLOWED;
use crate::context::Configured;
use crate::ownership::Mark;
use crate::runtime::GONE_LISTING_AGE;

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
///
/// The listing serves the whole refresh, so it may be older than the VM's last move: a VM
/// not on its listed node is looked for in a listing made after that look, and a VM not
/// listed at all is gone only if a listing at most [`GONE_LISTING_AGE`] old says so.
pub async fn read(configured: &Configured, vmid: u32, expected: Expected<'_>) -> Step<Found> {
    let runtime = &configured.runtime;
    let client = &configured.client;
    let mut listing = runtime.listing(client).await?;
    if listing.vm(vmid).is_none() {
        let recent = Instant::now()
            .checked_sub(GONE_LISTING_AGE)
            .unwrap_or_else(Instant::now);
        listing = runtime.listing_since(client, recent).await?;
    }
    let Some(mut entry) = listing.vm(vmid).cloned() else {
        return Ok(Found::Gone);
    };
    let mut follows = 0;
    let (entry, mut observed) = loop {
        let looked = Instant::now();
        match observe_listed(configured, &entry).await? {
            Listed::Cloning => return Ok(Found::Cloning),
            Listed::Observed(observed) => break (entry, observed),
            // Looked for where a listing made after this look says it is: gone only when
            // that listing no longer has it (HA may move a VM twice within one refresh).
            Listed::NotThere => {
                let again = runtime.listing_since(client, looked).await?;
                let Some(now) = again.vm(vmid) else {
                    return Ok(Found::Gone);
                };
                if follows == MOVES_FOLLOWED {
                    return unworkable(format!(
                        "VM {vmid} moved between nodes {follows} times while this refresh \
                         read it, and was never where the cluster listed it. It is still \
                         listed (on {}), so it stays in the state; run the command again once \
                         it settles.",
                        now.node
                    ));
                }
                follows += 1;
                entry = now.clone();
            }
        }
    };
    observed.ha_listed = entry.hastate.is_some();
    // qemu-server's `destroy_vm` freed the disks and left the config only `lock: destroyed`
    // until its worker ends: whoever's VM it was, it is gone (its mark went with its config).
    if observed.being_destroyed {
        return Ok(Found::Gone);
    }
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
    Ok(Found::Ours(observed))
}

/// What one look at a listed VM on its listed node found.
enum Listed {
    Cloning,
    Observed(Box<Observed>),
    /// Not on that node (moved since the listing, or gone).
    NotThere,
}

async fn observe_listed(configured: &Configured, entry: &pve::cluster::ClusterVm) -> Step<Listed> {
    if entry.lock.as_deref() == Some("clone") {
        return Ok(Listed::Cloning);
    }
    // The power state comes from the node's listing, shared by every read of this refresh.
    // A VM missing from it (moved onto the node since) is asked directly.
    let power = configured
        .runtime
        .node_power(&configured.client, &entry.node)
        .await?;
    let status = power.get(&entry.vmid).cloned();
    let observed = observe_known(
        &configured.client,
        &entry.node,
        entry.vmid,
        entry.pool.clone(),
        status,
        None,
    )
    .await?;
    Ok(match observed {
        Some(observed) => Listed::Observed(Box::new(observed)),
        None => Listed::NotThere,
    })
}
