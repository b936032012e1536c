//! What a `list "proxmox_proxy_vm"` block asks for, and which VMs that keeps: first among the
//! cluster listing (our tag, fleet tag, node, tags, and the name where the listing shows one),
//! then by the ownership mark each candidate's config carries (fleet, name, phase).
//!
//! Pure: it reads no VM itself.

use pve::cluster::ClusterVm;
use tfplugin::Value;

use super::attr;
use crate::data_sources::proxy_vms;
use crate::ownership::{Mark, Phase, normalise_tags};

/// The filters of one list, read from its `config` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The fleet whose VMs are listed; `None`: every fleet.
    pub fleet: Option<String>,
    pub name_prefix: Option<String>,
    /// The node the VMs are on now.
    pub node: Option<String>,
    /// Tags every listed VM carries, as PVE stores them.
    pub tags: Vec<String>,
    /// Whether creates that did not finish and VMs being destroyed are listed too.
    pub include_unfinished: bool,
}

impl Filter {
    /// The filters of `config` (an object of nulls when the block is absent), for a provider
    /// managing `provider_fleet`.
    pub fn from_config(config: &Value, provider_fleet: &str) -> Filter {
        let text = |name: &str| config.get_attr(name).as_str().map(str::to_owned);
        let all_fleets = config.get_attr(attr::ALL_FLEETS).as_bool() == Some(true);
        let fleet = match (all_fleets, text(attr::FLEET)) {
            (true, _) => None,
            (false, Some(fleet)) => Some(fleet),
            (false, None) => Some(provider_fleet.to_owned()),
        };
        let tags = config
            .get_attr(attr::TAGS)
            .as_string_list()
            .unwrap_or_default();
        Filter {
            fleet,
            name_prefix: text(attr::NAME_PREFIX).filter(|p| !p.is_empty()),
            node: text(attr::NODE),
            tags: normalise_tags(tags.iter().copied()),
            include_unfinished: config.get_attr(attr::INCLUDE_UNFINISHED).as_bool() == Some(true),
        }
    }

    /// The VMs of the listing worth reading, by VMID: ours by tag (as `proxmox_proxy_vms`
    /// finds them), of the fleet, on the node, with the tags. A name the listing shows must
    /// have the prefix; a VM it shows no name for yet (just cloned) is read to find out.
    pub fn candidates<'a>(&self, listing: &'a [ClusterVm]) -> Vec<&'a ClusterVm> {
        proxy_vms::ours(listing, self.fleet.as_deref(), None)
            .into_iter()
            .filter(|vm| self.node.as_ref().is_none_or(|node| *node == vm.node))
            .filter(|vm| {
                let carried = normalise_tags([vm.tags.as_deref().unwrap_or("")]);
                self.tags.iter().all(|tag| carried.contains(tag))
            })
            .filter(|vm| match (&self.name_prefix, vm.name.as_deref()) {
                (Some(prefix), Some(name)) if !name.is_empty() => name.starts_with(prefix),
                _ => true,
            })
            .collect()
    }

    /// Whether a VM whose config carries `mark` and is named `name` is listed.
    pub fn keeps(&self, mark: &Mark, name: &str) -> bool {
        let fleet = self.fleet.as_ref().is_none_or(|fleet| *fleet == mark.fleet);
        let named = self
            .name_prefix
            .as_ref()
            .is_none_or(|prefix| name.starts_with(prefix.as_str()));
        let phase = mark.phase == Phase::Done || self.include_unfinished;
        fleet && named && phase
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, Value)]) -> Value {
        let mut config = Value::object(
            [
                attr::FLEET,
                attr::ALL_FLEETS,
                attr::NAME_PREFIX,
                attr::NODE,
                attr::TAGS,
                attr::INCLUDE_UNFINISHED,
            ]
            .map(|name| (name, Value::Null)),
        );
        for (name, value) in pairs {
            config.set_attr(*name, value.clone());
        }
        config
    }

    fn listing() -> Vec<ClusterVm> {
        serde_json::from_value(serde_json::json!([
            {"id": "qemu/300", "vmid": 300, "node": "pve2", "type": "qemu",
                "name": "edge-b", "tags": "proxyvm;web"},
            {"id": "qemu/200", "vmid": 200, "node": "pve1", "type": "qemu",
                "name": "edge-a", "tags": "proxyvm"},
            {"id": "qemu/201", "vmid": 201, "node": "pve1", "type": "qemu",
                "tags": "proxyvm;Web"},
            {"id": "qemu/100", "vmid": 100, "node": "pve1", "type": "qemu",
                "name": "edge-x", "tags": "web"},
            {"id": "qemu/500", "vmid": 500, "node": "pve1", "type": "qemu",
                "name": "edge-a", "tags": "proxyvm;proxyvm.fleet.blue"},
        ]))
        .unwrap()
    }

    fn vmids(filter: &Filter) -> Vec<u32> {
        let listing = listing();
        filter
            .candidates(&listing)
            .iter()
            .map(|vm| vm.vmid)
            .collect()
    }

    #[test]
    fn by_default_the_providers_fleet_is_listed_and_finished_vms_kept() {
        let filter = Filter::from_config(&config(&[]), "");
        assert_eq!(filter.fleet.as_deref(), Some(""));
        assert_eq!(vmids(&filter), [200, 201, 300]);
        let done = Mark::creating("edge-a", "", "t", "tpl").with_phase(Phase::Done);
        assert!(filter.keeps(&done, "edge-a"));
        assert!(!filter.keeps(&done.clone().with_phase(Phase::Creating), "edge-a"));
        assert!(!filter.keeps(&done.clone().with_phase(Phase::Deleting), "edge-a"));
        let mut blue = done.clone();
        blue.fleet = "blue".into();
        assert!(!filter.keeps(&blue, "edge-a"), "the mark decides the fleet");
    }

    #[test]
    fn another_fleet_or_every_fleet_is_listed_when_asked_for() {
        let blue = Filter::from_config(&config(&[(attr::FLEET, Value::string("blue"))]), "");
        assert_eq!(vmids(&blue), [500]);
        let all = Filter::from_config(&config(&[(attr::ALL_FLEETS, Value::Bool(true))]), "x");
        assert_eq!(all.fleet, None);
        assert_eq!(vmids(&all), [200, 201, 300, 500]);
    }

    #[test]
    fn node_tags_and_name_prefix_narrow_the_candidates() {
        let on_pve1 = Filter::from_config(&config(&[(attr::NODE, Value::string("pve1"))]), "");
        assert_eq!(vmids(&on_pve1), [200, 201]);
        let tags = Value::Set(vec![Value::string("WEB")]);
        let web = Filter::from_config(&config(&[(attr::TAGS, tags)]), "");
        assert_eq!(vmids(&web), [201, 300]);
        let prefix =
            Filter::from_config(&config(&[(attr::NAME_PREFIX, Value::string("edge-b"))]), "");
        // 201 shows no name in the listing yet: its config is read to find out.
        assert_eq!(vmids(&prefix), [201, 300]);
        let done = Mark::creating("edge-b", "", "t", "tpl").with_phase(Phase::Done);
        assert!(prefix.keeps(&done, "edge-b"));
        assert!(!prefix.keeps(&done, "edge-a"));
    }

    #[test]
    fn unfinished_vms_are_kept_when_asked_for() {
        let filter = Filter::from_config(
            &config(&[(attr::INCLUDE_UNFINISHED, Value::Bool(true))]),
            "",
        );
        let creating = Mark::creating("edge-a", "", "t", "tpl");
        assert!(filter.keeps(&creating, "edge-a"));
        assert!(filter.keeps(&creating.with_phase(Phase::Deleting), "edge-a"));
    }
}
