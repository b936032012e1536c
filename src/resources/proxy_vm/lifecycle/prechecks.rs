//! What must hold before anything is cloned, so a wrong template or seed storage leaves
//! nothing to clean up.

use pve::{Client, RetryPolicy, retry_idempotent};

use super::{Step, plain};

/// A template found in the cluster.
#[derive(Debug, Clone)]
pub(super) struct Template {
    pub node: String,
    pub vmid: u32,
    /// Size of its boot disk, when it has one.
    pub disk: Option<pve::wire::ByteSize>,
}

/// Where the template lives, and how big its disk is.
pub(super) async fn resolve_template(
    client: &Client,
    listing: &[pve::cluster::ClusterVm],
    template: &str,
    node: &str,
) -> Step<Template> {
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
    Ok(Template {
        node: vm.node.clone(),
        vmid: vm.vmid,
        disk: config.boot_disk().and_then(|(_, disk)| disk.size),
    })
}

/// A clone cannot be smaller than its template (PVE cannot shrink disks): refused before
/// anything is cloned, instead of an apply whose result differs from its plan.
pub(super) fn check_disk_size(template: &Template, name: &str, disk_gib: Option<u64>) -> Step<()> {
    let (Some(wanted), Some(size)) = (disk_gib, template.disk) else {
        return Ok(());
    };
    let template_gib = size.gib_ceil();
    if wanted < template_gib {
        return plain(format!(
            "disk_gib = {wanted} is smaller than the template's disk ({template_gib} GiB) of VM {} on {}; PVE cannot shrink disks. Set disk_gib to {template_gib} or more for `{name}`, or leave it unset to keep the template's size.",
            template.vmid, template.node
        ));
    }
    Ok(())
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
