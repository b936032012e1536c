//! What must hold before anything is cloned, so a wrong template or seed storage leaves
//! nothing to clean up.

use crate::fitness::{self, Content, StorageProblem};
use pve::Client;

use super::super::model::networks::Nic;
use super::error::{Step, StepError, unworkable};
use super::operation;

/// A template found in the cluster.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    pub node: String,
    pub vmid: u32,
    /// Size of its boot disk, when it has one.
    pub disk: Option<pve::wire::ByteSize>,
    /// The storage of its boot disk.
    pub disk_storage: Option<String>,
    /// Its memory, MiB (what a clone gets unless `memory` is set).
    pub memory_mib: u64,
    /// Its NICs (`net0`, `net1`, …) with their bridges, in index order: a clone keeps them
    /// (only net0's bridge changes, when `bridge` is set).
    pub nic_bridges: Vec<(String, String)>,
}

impl Template {
    /// The bridges a clone of it uses (see [`bridges_used`]).
    pub fn bridges_used(&self, bridge: Option<&str>) -> Vec<BridgeUse> {
        bridges_used(&self.nic_bridges, bridge)
    }
}

/// The bridges a clone of a template with these NICs uses: theirs, net0's replaced by
/// `bridge` when set.
pub(crate) fn bridges_used(nics: &[(String, String)], bridge: Option<&str>) -> Vec<BridgeUse> {
    let mut used: Vec<BridgeUse> = nics
        .iter()
        .filter(|(nic, _)| bridge.is_none() || nic != "net0")
        .map(|(nic, name)| BridgeUse {
            bridge: name.clone(),
            template_nic: Some(nic.clone()),
            network: None,
        })
        .collect();
    if let Some(bridge) = bridge {
        used.insert(
            0,
            BridgeUse {
                bridge: bridge.to_owned(),
                template_nic: None,
                network: None,
            },
        );
    }
    used
}

/// `used` with the further NICs `networks` configures (when set): they replace the
/// template's `net1`… (the configure step deletes those beyond the list).
pub(crate) fn with_networks(used: Vec<BridgeUse>, networks: Option<&[Nic]>) -> Vec<BridgeUse> {
    let Some(nics) = networks else {
        return used;
    };
    let mut used: Vec<BridgeUse> = used
        .into_iter()
        .filter(|u| u.template_nic.as_deref().is_none_or(|nic| nic == "net0"))
        .collect();
    used.extend(nics.iter().enumerate().map(|(index, nic)| BridgeUse {
        bridge: nic.bridge.clone(),
        template_nic: None,
        network: Some(index),
    }));
    used
}

/// A bridge a VM will use, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BridgeUse {
    pub bridge: String,
    /// The template's NIC that names it; `None` when it is the resource's `bridge` or a
    /// `networks` element.
    pub template_nic: Option<String>,
    /// The `networks` element that names it.
    pub network: Option<usize>,
}

impl BridgeUse {
    /// `vmbr0` (the template's net0), `vmbr1` (networks[0], net1), or `vmbr7` for the
    /// resource's own `bridge`.
    pub fn describe(&self) -> String {
        match (&self.template_nic, self.network) {
            (Some(nic), _) => format!("`{}` (the template's {nic})", self.bridge),
            (None, Some(index)) => {
                format!("`{}` (networks[{index}], net{})", self.bridge, index + 1)
            }
            (None, None) => format!("`{}`", self.bridge),
        }
    }
}

/// A VM config's NICs and their bridges, in index order (NICs without a bridge left out).
pub(crate) fn nic_bridges(config: &pve::qemu::VmConfig) -> Vec<(String, String)> {
    let mut nics: Vec<(u8, String)> = config
        .raw()
        .keys()
        .filter_map(|key| key.strip_prefix("net")?.parse::<u8>().ok())
        .filter_map(|index| {
            let bridge = config.net(index)?.ok()?.bridge?;
            Some((index, bridge))
        })
        .collect();
    nics.sort();
    nics.into_iter()
        .map(|(index, bridge)| (format!("net{index}"), bridge))
        .collect()
}

/// The listing entry a template name (or VMID) means for a VM on `node`: a template before a
/// plain VM of that name (so the error can say what it is), the node's own copy before another
/// node's.
pub(crate) fn choose_template<'a>(
    listing: &'a [pve::cluster::ClusterVm],
    template: &str,
    node: &str,
) -> Result<&'a pve::cluster::ClusterVm, String> {
    let named: Vec<&pve::cluster::ClusterVm> = match template.parse::<u32>() {
        Ok(vmid) => listing.iter().filter(|vm| vm.vmid == vmid).collect(),
        Err(_) => listing
            .iter()
            .filter(|vm| vm.guest_type == "qemu" && vm.name.as_deref() == Some(template))
            .collect(),
    };
    let mut candidates: Vec<&pve::cluster::ClusterVm> =
        named.iter().copied().filter(|vm| vm.template).collect();
    if candidates.is_empty() {
        candidates = named;
    }
    if let Some(vm) = candidates
        .iter()
        .find(|vm| vm.node == node)
        .or_else(|| candidates.first())
    {
        return Ok(vm);
    }
    let mut templates: Vec<&str> = listing
        .iter()
        .filter(|vm| vm.template)
        .filter_map(|vm| vm.name.as_deref())
        .collect();
    templates.sort_unstable();
    templates.dedup();
    let known = if templates.is_empty() {
        "the token sees no templates".to_owned()
    } else {
        format!("templates: {}", templates.join(", "))
    };
    Err(format!(
        "template `{template}` was not found in the cluster ({known}). Check the name (or give its \
        VMID), and that the API token may see it (VM.Audit)."
    ))
}

/// Whether the chosen VM is a template, and its disk: from its config.
pub(crate) fn judge_template(
    vm: &pve::cluster::ClusterVm,
    config: &pve::qemu::VmConfig,
    template: &str,
) -> Result<Template, String> {
    if !config.is_template() {
        return Err(format!(
            "VM {} (`{template}`) on {} is not a template. Convert it to a template in PVE \
            (More → Convert to template), or name another.",
            vm.vmid, vm.node
        ));
    }
    let disk = config.boot_disk();
    Ok(Template {
        node: vm.node.clone(),
        vmid: vm.vmid,
        disk: disk.as_ref().and_then(|(_, d)| d.size),
        disk_storage: disk.and_then(|(_, d)| d.storage().map(str::to_owned)),
        memory_mib: config.memory_mib(),
        nic_bridges: nic_bridges(config),
    })
}

/// Where the template lives, and how big its disk is.
pub(super) async fn resolve_template(
    client: &Client,
    listing: &[pve::cluster::ClusterVm],
    template: &str,
    node: &str,
) -> Step<Template> {
    let vm = choose_template(listing, template, node).map_err(StepError::Unworkable)?;
    let config = operation::read(|| client.node(&vm.node).qemu(vm.vmid).config()).await?;
    judge_template(vm, &config, template).map_err(StepError::Unworkable)
}

/// A clone cannot be smaller than its template (PVE cannot shrink disks): refused before
/// anything is cloned, instead of an apply whose result differs from its plan.
pub(crate) fn check_disk_size(
    template: &Template,
    name: &str,
    disk_gib: Option<u64>,
) -> Result<(), String> {
    let (Some(wanted), Some(size)) = (disk_gib, template.disk) else {
        return Ok(());
    };
    let template_gib = size.gib_ceil();
    if wanted < template_gib {
        return Err(format!(
            "disk_gib = {wanted} is smaller than the template's disk ({template_gib} GiB) of VM {} \
            on {}; PVE cannot shrink disks. Set disk_gib to {template_gib} or more for `{name}`, \
            or leave it unset to keep the template's size.",
            template.vmid, template.node
        ));
    }
    Ok(())
}

/// The seed storage must exist on the node, be active and take ISO images: checked before
/// anything is cloned, so a wrong `seed_storage` leaves nothing to clean up.
pub(super) async fn check_seed_storage(client: &Client, node: &str, storage: &str) -> Step<()> {
    let info = operation::read(|| client.node(node).storage(storage).status()).await?;
    match fitness::storage_usable(&info, Content::Iso) {
        Err(StorageProblem::Inactive) => unworkable(format!(
            "the seed storage `{storage}` is not active on node {node}. Enable it there, or choose \
            another with `seed_storage`."
        )),
        Err(_) => unworkable(format!(
            "the seed storage `{storage}` does not take ISO images (its content types: {}). Enable \
            ISO images on it in Datacenter → Storage, or choose another with `seed_storage`.",
            info.content
        )),
        Ok(()) => Ok(()),
    }
}
