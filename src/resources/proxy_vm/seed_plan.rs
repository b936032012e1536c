//! The plan's word on where a kept seed lives: with `seed_lifetime = "vm"` the seed stays
//! attached as a CD-ROM, and a CD-ROM on storage other nodes cannot see stops every
//! migration (qemu-server `QemuMigrate.pm`, `scan_local_volumes`: "can't migrate local disk
//! 'VOLID': local cdrom image") and leaves an HA-recovered VM naming an ISO on the failed
//! node. Only a cluster of more than one node is warned: for a planned create that keeps
//! its seed by choice, and at every plan for a VM whose seed stays for a reason found once
//! (#39: no marker, a guest refusing reads, no agent, a failed first boot).

use tfplugin::{AttributePath, Diagnostic, Value};

use super::attr;
use super::model::SeedStays;
use crate::context::Configured;

/// The warning for a planned create that keeps its seed on node-local storage in a
/// cluster of more than one node; `None` when the facts cannot be had (other checks say
/// why) or nothing is wrong.
pub(super) async fn kept_seed_warning(
    configured: &Configured,
    planned: &Value,
    node: &str,
) -> Option<Diagnostic> {
    if planned.get_attr(attr::SEED_LIFETIME).as_str() != Some("vm") {
        return None;
    }
    let storage = planned.get_attr(attr::SEED_STORAGE).as_str()?;
    let (client, facts) = (&configured.client, &configured.facts);
    let nodes = facts.nodes(client).await.ok()?;
    if nodes.len() < 2 {
        return None;
    }
    let storages = facts.storages(client, node).await.ok()?;
    let seed_storage = storages.iter().find(|s| s.storage == storage)?;
    if seed_storage.shared {
        return None;
    }
    Some(
        Diagnostic::warning(
            "Kept seed on node-local storage",
            format!(
                "seed_lifetime = \"vm\" keeps the seed ISO attached for the VM's life, and \
                 `{storage}` is local to node {node}: PVE refuses to migrate a VM with a local \
                 CD-ROM image (\"can't migrate local disk … local cdrom image\"), so this VM \
                 cannot be moved for node maintenance, and HA cannot recover it on another node. \
                 Use the default seed_lifetime = \"until_ready\" (the seed leaves once cloud-init \
                 finished), or a shared seed_storage."
            ),
        )
        .with_attribute(AttributePath::root().attr(attr::SEED_LIFETIME)),
    )
}

/// The warning, at every plan, for a VM whose seed stays for the VM's life (`why`, found
/// once: `Private::seed_stays`) on node-local storage in a cluster of more than one node.
/// Costs no request beyond the plan's shared facts (the node and storage listings).
pub(super) async fn staying_seed_warning(
    configured: &Configured,
    prior: &Value,
    why: SeedStays,
) -> Option<Diagnostic> {
    let volume = prior
        .get_attr(attr::SEED_VOLUME)
        .as_str()
        .filter(|v| !v.is_empty())?;
    let (storage, _) = volume.split_once(':')?;
    let node = prior.get_attr(attr::NODE).as_str()?;
    let vm = prior.get_attr(attr::VMID).as_i64()?;
    let name = prior.get_attr(attr::NAME).as_str().unwrap_or("?");
    if !is_node_local(configured, node, storage).await? {
        return None;
    }
    Some(Diagnostic::warning(
        "Seed stays on node-local storage",
        format!(
            "VM {vm} (`{name}`) keeps its seed ISO {volume}: {}. `{storage}` is local to node \
             {node}, so PVE refuses to migrate the VM (\"can't migrate local disk … local \
             cdrom image\") and HA cannot recover it on another node while the seed is \
             attached. Use a shared seed_storage, or see the Guests guide for what the image \
             needs for the seed to leave.",
            why.describe()
        ),
    ))
}

/// Whether `storage` is local to `node` in a cluster of more than one node; `None` when the
/// facts cannot be had.
async fn is_node_local(configured: &Configured, node: &str, storage: &str) -> Option<bool> {
    let (client, facts) = (&configured.client, &configured.facts);
    let nodes = facts.nodes(client).await.ok()?;
    if nodes.len() < 2 {
        return Some(false);
    }
    let storages = facts.storages(client, node).await.ok()?;
    Some(!storages.iter().find(|s| s.storage == storage)?.shared)
}
