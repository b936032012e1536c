//! The locate phase of a delete: where the state's VM is, and whose it turned out to be.

use pve::retry_idempotent;
use tokio::time::Instant;

use super::super::error::Step;
use super::super::expected::Expected;
use super::super::slot::config_after_clone;
use super::super::tasks::patient;
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

/// Where the VM is (the process's listing, fetched once per provider process so a destroy of
/// N VMs does not list the cluster N times; else the node the state names; else, moved since
/// or not in the listing, one fresh look), and whose it is once any clone on it has ended
/// (a clone still running has no mark yet).
pub(super) async fn locate(
    configured: &Configured,
    vmid: u32,
    node_hint: &str,
    expected: &Expected<'_>,
    deadline: Instant,
) -> Step<AtVmid> {
    let client = &configured.client;
    let listed = configured
        .runtime
        .cluster_vms_once(client, false)
        .await?
        .iter()
        .find(|vm| vm.vmid == vmid)
        .map(|vm| vm.node.clone());
    let location = match listed {
        Some(node) => Some(node),
        None if !node_hint.is_empty() => Some(node_hint.to_owned()),
        None => retry_idempotent(&patient(deadline), || client.cluster().locate_vm(vmid))
            .await?
            .map(|entry| entry.node),
    };
    let found = match &location {
        None => None,
        Some(node) => config_after_clone(client, node, vmid, deadline).await?,
    };
    let Some((node, config)) = found else {
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
