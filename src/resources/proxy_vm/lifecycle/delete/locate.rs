//! The locate phase of a delete: where the state's VM is, and whose it turned out to be.

use tokio::time::Instant;

use super::super::error::{Step, StepError};
use super::super::expected::Expected;
use super::super::operation::Operation;
use super::super::owned::{OwnedVm, Seen};
use super::super::slot::config_after_clone;
use crate::context::Configured;

/// Whose the VM at the state's VMID turned out to be.
pub(super) enum AtVmid {
    Gone,
    Ours(String),
    /// A VM of the state's name whose description carries no mark at all (edited by hand):
    /// most likely the state's VM, but unprovable, so it is neither destroyed nor forgotten.
    MarkLost(String),
    /// Another's VM, with the seed volume it boots (`ide2`), if any.
    NotOurs {
        why: String,
        node: String,
        boots: Option<String>,
    },
}

/// Where the VM is and whose: the state's own VM with the read that proved it (one read in
/// the usual case), or what else is at the VMID.
pub(super) async fn locate<'a>(
    configured: &'a Configured,
    vmid: u32,
    node_hint: &str,
    expected: Expected<'a>,
    deadline: Instant,
) -> Step<(AtVmid, Option<(OwnedVm<'a>, Seen)>)> {
    let Some(node) = node_of(configured, vmid, node_hint, deadline).await? else {
        return Ok((AtVmid::Gone, None));
    };
    let op = Operation::new(&configured.client, deadline);
    let vm = OwnedVm::new(op, &node, vmid, expected);
    match vm.read().await {
        Ok(seen) => return Ok((AtVmid::Ours(node), Some((vm, seen)))),
        Err(StepError::NotOurs { .. }) => {}
        Err(e) => return Err(e),
    }
    // Not provably ours at first sight: a clone still running (no mark yet), a VM moved
    // or gone, a mark edited or another's. Judged once any clone has ended.
    let at_vmid = whose(&configured.client, &node, vmid, &expected, deadline).await?;
    let AtVmid::Ours(node) = at_vmid else {
        return Ok((at_vmid, None));
    };
    let vm = vm.on_node(&node);
    let seen = vm.read().await?;
    Ok((AtVmid::Ours(node), Some((vm, seen))))
}

/// Where the VM is: the process's listing (fetched once per provider process, so a destroy
/// of N VMs does not list the cluster N times), else the node the state names, else (moved
/// since, or not in the listing) one fresh look.
async fn node_of(
    configured: &Configured,
    vmid: u32,
    node_hint: &str,
    deadline: Instant,
) -> Step<Option<String>> {
    let client = &configured.client;
    let listed = configured
        .runtime
        .cluster_vms_once(client, false)
        .await?
        .iter()
        .find(|vm| vm.vmid == vmid)
        .map(|vm| vm.node.clone());
    Ok(match listed {
        Some(node) => Some(node),
        None if !node_hint.is_empty() => Some(node_hint.to_owned()),
        None => Operation::new(client, deadline)
            .retry(|| client.cluster().locate_vm(vmid))
            .await?
            .map(|entry| entry.node),
    })
}

/// Whose the VM at `vmid` is, once any clone on it has ended (a clone still running has no
/// mark yet).
async fn whose(
    client: &pve::Client,
    node: &str,
    vmid: u32,
    expected: &Expected<'_>,
    deadline: Instant,
) -> Step<AtVmid> {
    let Some((node, config)) = config_after_clone(client, node, vmid, deadline).await? else {
        return Ok(AtVmid::Gone);
    };
    let mark = config
        .description()
        .as_deref()
        .and_then(crate::ownership::Mark::parse);
    let named_as_ours = expected
        .name
        .is_some_and(|name| !name.is_empty() && config.name().as_deref() == Some(name));
    if mark.is_none() && named_as_ours {
        return Ok(AtVmid::MarkLost(node));
    }
    Ok(match expected.mismatch(mark.as_ref()) {
        None => AtVmid::Ours(node),
        Some(why) => AtVmid::NotOurs {
            why,
            node,
            boots: config.cdrom("ide2").and_then(Result::ok).map(|d| d.volume),
        },
    })
}
