//! `data "proxmox_proxy_vms"`: every VM of ours across the cluster, from one
//! `/cluster/resources` listing, so users can find VMs no state knows about.

use std::sync::Arc;

use pve::cluster::ClusterVm;
use tfplugin::{Context, DataSource, DataSourceResponse, Diagnostic, Diagnostics, Schema, Value};

use crate::context::Shared;
use crate::diagnostics;
use crate::ownership::{OWNER_TAG, fleet_in_tags, user_tags};
use crate::schema_table::{self, Kind, Mode, Spec};

pub const TYPE_NAME: &str = "proxmox_proxy_vms";

/// The attribute names, each written once.
mod attr {
    pub const ALL_FLEETS: &str = "all_fleets";
    pub const NAME_PREFIX: &str = "name_prefix";
    pub const VMS: &str = "vms";
    // Each of `vms`.
    pub const VMID: &str = "vmid";
    pub const NAME: &str = "name";
    pub const NODE: &str = "node";
    pub const STATUS: &str = "status";
    pub const TAGS: &str = "tags";
    pub const LOCK: &str = "lock";
    pub const FLEET: &str = "fleet";
}

#[derive(Debug)]
pub struct ProxyVmsDataSource {
    shared: Arc<Shared>,
}

impl ProxyVmsDataSource {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

/// The attributes of each of `vms`.
const VM_ATTRIBUTES: &[Spec] = &[
    Spec::new(attr::VMID, Kind::Number, Mode::Computed).description("VMID."),
    Spec::new(attr::NAME, Kind::String, Mode::Computed).description(
        "VM name. PVE's listing shows names only once its statistics daemon has seen the VM \
         (about 10 s after a clone), so a VM that was just created has an empty name.",
    ),
    Spec::new(attr::NODE, Kind::String, Mode::Computed).description("Node the VM is on now."),
    Spec::new(attr::STATUS, Kind::String, Mode::Computed).description(
        "`running`, `stopped`, or `unknown` while PVE has no statistics for the VM (just \
         cloned, or its node offline).",
    ),
    Spec::new(attr::TAGS, Kind::StringList, Mode::Computed).built_description(|| {
        format!(
            "The VM's tags as PVE stores them (lower-case, sorted), without the provider's own \
             `{OWNER_TAG}` tag."
        )
    }),
    Spec::new(attr::LOCK, Kind::String, Mode::Computed).description(
        "PVE's config lock (`clone`, `backup`, …), or an empty string when the VM is not \
         locked.",
    ),
    Spec::new(attr::FLEET, Kind::String, Mode::Computed)
        .description("The fleet the VM belongs to (empty for the default fleet)."),
];

/// The data source's attributes, in the order the schema lists them.
const ATTRIBUTES: &[Spec] = &[
    Spec::new(attr::ALL_FLEETS, Kind::Bool, Mode::Optional).description(
        "List the VMs of every fleet, not only the provider's `fleet`. Defaults to `false`.",
    ),
    Spec::new(attr::NAME_PREFIX, Kind::String, Mode::Optional).description(
        "Only VMs whose name starts with this prefix. VMs whose name PVE does not report yet \
         (just cloned) never match a non-empty prefix.",
    ),
    Spec::new(attr::VMS, Kind::ObjectList(VM_ATTRIBUTES), Mode::Computed)
        .description("The VMs of ours, sorted by VMID."),
];

pub fn schema() -> Schema {
    let description = format!(
        "Lists every VM of the provider's fleet that carries the provider's ownership tag \
         `{OWNER_TAG}` across the cluster, from one `GET /cluster/resources?type=vm` call, \
         sorted by VMID. Compare it with the VMs in state to find orphans (VMs of ours \
         that no configuration manages, e.g. after a lost state: bring them back with \
         `import` blocks). Only VMs the token may audit (`VM.Audit`) are visible; other \
         guests, including containers, never appear. A VM whose clone has not finished yet \
         carries no tag and is not listed."
    );
    Schema::new(schema_table::block(description, ATTRIBUTES))
}

/// Our VMs in a listing: QEMU guests with our tag, of `fleet` (every fleet when `None`),
/// optionally by name prefix, by VMID.
pub fn ours<'a>(
    listing: &'a [ClusterVm],
    fleet: Option<&str>,
    name_prefix: Option<&str>,
) -> Vec<&'a ClusterVm> {
    let mut out: Vec<&ClusterVm> = listing
        .iter()
        .filter(|vm| vm.guest_type == "qemu")
        .filter(|vm| match fleet_in_tags(vm.tags.as_deref().unwrap_or("")) {
            None => false,
            Some(found) => fleet.is_none_or(|wanted| wanted == found),
        })
        .filter(|vm| {
            name_prefix.is_none_or(|prefix| vm.name.as_deref().unwrap_or("").starts_with(prefix))
        })
        .collect();
    out.sort_by_key(|vm| vm.vmid);
    out
}

fn vm_value(vm: &ClusterVm) -> Value {
    Value::object([
        (attr::VMID, Value::from(i64::from(vm.vmid))),
        (attr::NAME, Value::from(vm.name.clone().unwrap_or_default())),
        (attr::NODE, Value::from(vm.node.clone())),
        (
            attr::STATUS,
            Value::from(vm.status.clone().unwrap_or_else(|| "unknown".to_owned())),
        ),
        (
            attr::TAGS,
            Value::List(
                user_tags(vm.tags.as_deref().unwrap_or(""))
                    .into_iter()
                    .map(Value::from)
                    .collect(),
            ),
        ),
        (attr::LOCK, Value::from(vm.lock.clone().unwrap_or_default())),
        (
            attr::FLEET,
            Value::from(fleet_in_tags(vm.tags.as_deref().unwrap_or("")).unwrap_or_default()),
        ),
    ])
}

#[tfplugin::async_trait]
impl DataSource for ProxyVmsDataSource {
    fn type_name(&self) -> &str {
        TYPE_NAME
    }

    fn schema(&self) -> Schema {
        schema()
    }

    async fn read(&self, _ctx: &Context, config: &Value) -> DataSourceResponse {
        let mut diagnostics = Diagnostics::new();
        let configured = match self.shared.get() {
            Ok(configured) => configured,
            Err(diag) => {
                diagnostics.push(diag);
                return DataSourceResponse {
                    state: config.clone(),
                    diagnostics,
                };
            }
        };
        let listing = match configured.runtime.vm_listing(&configured.client).await {
            Ok(listing) => listing,
            Err(error) => {
                diagnostics.push(Diagnostic::error(
                    "Unable to list proxy VMs",
                    diagnostics::with_hint(
                        format!("Listing the cluster's VMs failed: {error}"),
                        &error,
                    ),
                ));
                return DataSourceResponse {
                    state: config.clone(),
                    diagnostics,
                };
            }
        };
        let prefix = config.get_attr(attr::NAME_PREFIX).as_str();
        let all = config.get_attr(attr::ALL_FLEETS).as_bool() == Some(true);
        let fleet = (!all).then_some(configured.fleet.as_str());
        let vms = ours(&listing, fleet, prefix);
        let mut state = config.clone();
        state.set_attr(
            attr::VMS,
            Value::List(vms.into_iter().map(vm_value).collect()),
        );
        DataSourceResponse { state, diagnostics }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing() -> Vec<ClusterVm> {
        serde_json::from_value(serde_json::json!([
            {"id": "qemu/300", "vmid": 300, "node": "pve2", "type": "qemu",
                "status": "running", "name": "edge-b", "tags": "proxyvm;web"},
            {"id": "qemu/200", "vmid": 200, "node": "pve1", "type": "qemu",
                "status": "stopped", "name": "edge-a", "tags": "proxyvm", "lock": "backup"},
            {"id": "qemu/201", "vmid": 201, "node": "pve1", "type": "qemu",
                "status": "unknown", "tags": "proxyvm", "lock": "clone"},
            {"id": "qemu/100", "vmid": 100, "node": "pve1", "type": "qemu",
                "status": "running", "name": "edge-x", "tags": "infra"},
            {"id": "lxc/400", "vmid": 400, "node": "pve1", "type": "lxc",
                "status": "running", "name": "edge-ct", "tags": "proxyvm"},
            {"id": "qemu/500", "vmid": 500, "node": "pve1", "type": "qemu",
                "status": "running", "name": "edge-a", "tags": "proxyvm;proxyvm.fleet.prod"},
        ]))
        .unwrap()
    }

    #[test]
    fn every_attribute_name_has_a_spec() {
        let source = include_str!("mod.rs");
        let names = source
            .split("mod attr {")
            .nth(1)
            .unwrap()
            .split('}')
            .next()
            .unwrap();
        let mut declared: Vec<&str> = ATTRIBUTES
            .iter()
            .chain(VM_ATTRIBUTES)
            .map(|s| s.name)
            .collect();
        declared.sort_unstable();
        let mut named = schema_table::declared_names(names);
        named.sort_unstable();
        assert_eq!(named, declared);
    }

    #[test]
    fn only_tagged_qemu_vms_sorted_by_vmid() {
        let listing = listing();
        let vmids: Vec<u32> = ours(&listing, Some(""), None)
            .iter()
            .map(|vm| vm.vmid)
            .collect();
        assert_eq!(vmids, vec![200, 201, 300]);
    }

    #[test]
    fn fleets_are_kept_apart_unless_all_are_asked_for() {
        let listing = listing();
        let vmids = |fleet| -> Vec<u32> {
            ours(&listing, fleet, None)
                .iter()
                .map(|vm| vm.vmid)
                .collect()
        };
        assert_eq!(vmids(Some("prod")), vec![500]);
        assert_eq!(vmids(None), vec![200, 201, 300, 500]);
        let prod = vm_value(ours(&listing, Some("prod"), None)[0]);
        assert_eq!(prod.get_attr("fleet").as_str(), Some("prod"));
        assert_eq!(prod.get_attr("tags").as_string_list(), Some(vec![]));
    }

    #[test]
    fn prefix_filters_by_name_and_skips_nameless() {
        let listing = listing();
        let vmids: Vec<u32> = ours(&listing, Some(""), Some("edge-b"))
            .iter()
            .map(|vm| vm.vmid)
            .collect();
        assert_eq!(vmids, vec![300]);
        let vmids: Vec<u32> = ours(&listing, Some(""), Some("edge"))
            .iter()
            .map(|vm| vm.vmid)
            .collect();
        assert_eq!(vmids, vec![200, 300]);
    }

    #[test]
    fn values_hide_our_tag_and_default_missing_fields() {
        let listing = listing();
        let nameless = vm_value(ours(&listing, Some(""), None)[1]);
        assert_eq!(nameless.get_attr("name").as_str(), Some(""));
        assert_eq!(nameless.get_attr("lock").as_str(), Some("clone"));
        let web = vm_value(ours(&listing, Some(""), None)[2]);
        assert_eq!(web.get_attr("tags").as_string_list(), Some(vec!["web"]));
        assert_eq!(web.get_attr("lock").as_str(), Some(""));
    }
}
