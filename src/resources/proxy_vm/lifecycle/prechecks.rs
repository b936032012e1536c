//! What must hold before anything is cloned, so a wrong template or seed storage leaves
//! nothing to clean up.

use pve::{Client, RetryPolicy, retry_idempotent};

use super::{Step, plain};

/// Where the template lives: (node, vmid).
pub(super) async fn resolve_template(
    client: &Client,
    listing: &[pve::cluster::ClusterVm],
    template: &str,
    node: &str,
) -> Step<(String, u32)> {
    let named: Vec<&pve::cluster::ClusterVm> = match template.parse::<u32>() {
        Ok(vmid) => listing.iter().filter(|vm| vm.vmid == vmid).collect(),
        Err(_) => listing
            .iter()
            .filter(|vm| vm.guest_type == "qemu" && vm.name.as_deref() == Some(template))
            .collect(),
    };
    // Templates first; a plain VM of that name is still chosen, so the error can say what it is.
    let mut candidates: Vec<&pve::cluster::ClusterVm> =
        named.iter().copied().filter(|vm| vm.template).collect();
    if candidates.is_empty() {
        candidates = named;
    }
    let chosen = candidates
        .iter()
        .find(|vm| vm.node == node)
        .or_else(|| candidates.first())
        .copied();
    let Some(vm) = chosen else {
        return plain(format!(
            "template `{template}` was not found in the cluster. Check the name (or give its VMID), and that the API token may see it (VM.Audit)."
        ));
    };
    let config = retry_idempotent(&RetryPolicy::default(), || {
        client.node(&vm.node).qemu(vm.vmid).config()
    })
    .await?;
    if !config.is_template() {
        return plain(format!(
            "VM {} (`{template}`) on {} is not a template. Convert it to a template in PVE (More → Convert to template), or name another.",
            vm.vmid, vm.node
        ));
    }
    Ok((vm.node.clone(), vm.vmid))
}

/// The seed storage must exist on the node, be active and take ISO images: checked before
/// anything is cloned, so a wrong `seed_storage` leaves nothing to clean up.
pub(super) async fn check_seed_storage(client: &Client, node: &str, storage: &str) -> Step<()> {
    let info = retry_idempotent(&RetryPolicy::default(), || {
        client.node(node).storage(storage).status()
    })
    .await?;
    if !info.enabled || !info.active {
        return plain(format!(
            "the seed storage `{storage}` is not active on node {node}. Enable it there, or choose another with `seed_storage`."
        ));
    }
    if !info.accepts("iso") {
        return plain(format!(
            "the seed storage `{storage}` does not take ISO images (its content types: {}). Enable ISO images on it in Datacenter → Storage, or choose another with `seed_storage`.",
            info.content
        ));
    }
    Ok(())
}
