//! Placement: the node a VM without `node` is created on. Eligible nodes are online, can
//! clone the template (their own copy, or its disk on storage shared with them), have the
//! seed storage active and taking ISO images, have every bridge the VM will use (its
//! template's NICs', net0's replaced by `bridge` when set, net1… by `networks` when set), and
//! have memory left for the VM.
//! Among them wins the node with the most memory not yet promised to VMs (the configured
//! memory of the VMs on it, plus the creates this process placed there and the listing does
//! not show yet), then the one with the fewest VMs of this fleet. Gathering is separate from
//! judging ([`judge`] is pure), so the rule is unit-tested with plain values.

use crate::fitness::{self, Content, StorageProblem};
use pve::cluster::ClusterVm;
use pve::nodes::NetworkInterface;
use pve::storage::StorageInfo;

use super::super::model::Desired;
use super::prechecks::{BridgeUse, Template, bridges_used, nic_bridges, with_networks};
use crate::cluster_facts::Fact;
use crate::context::Configured;
use crate::ownership;

/// What placement knows of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub online: bool,
    /// Memory total, bytes (unknown without Sys.Audit).
    pub memory_total: Option<u64>,
    /// Memory configured for the VMs on it (and creates placed there by this process).
    pub memory_promised: u64,
    /// VMs of this fleet on it.
    pub fleet_vms: usize,
    /// Why the template cannot be cloned onto it, if it cannot.
    pub template_problem: Option<String>,
    /// Why the seed storage is unusable there, if it is.
    pub seed_problem: Option<String>,
    /// Why the bridge is missing there, if it is.
    pub bridge_problem: Option<String>,
}

/// The chosen node, or every node with the reason it was rejected.
pub fn judge(nodes: &[NodeView], memory_needed: u64) -> Result<String, Vec<(String, String)>> {
    let mut rejected = Vec::new();
    let mut eligible: Vec<(&NodeView, u64)> = Vec::new();
    for node in nodes {
        let free = node
            .memory_total
            .map(|total| total.saturating_sub(node.memory_promised));
        let why = if !node.online {
            Some("offline".to_owned())
        } else if let Some(problem) = &node.template_problem {
            Some(problem.clone())
        } else if let Some(problem) = &node.seed_problem {
            Some(problem.clone())
        } else if let Some(problem) = &node.bridge_problem {
            Some(problem.clone())
        } else {
            match free {
                Some(free) if free < memory_needed => Some(format!(
                    "not enough memory: {} MiB not yet promised to VMs, {} MiB needed",
                    free >> 20,
                    memory_needed >> 20
                )),
                _ => None,
            }
        };
        match why {
            Some(why) => rejected.push((node.name.clone(), why)),
            None => eligible.push((node, free.unwrap_or(0))),
        }
    }
    eligible
        .iter()
        .max_by(|(a, free_a), (b, free_b)| {
            free_a
                .cmp(free_b)
                // Ties: fewer VMs of this fleet first, then the name, so the choice is stable.
                .then(b.fleet_vms.cmp(&a.fleet_vms))
                .then(b.name.cmp(&a.name))
        })
        .map(|(node, _)| node.name.clone())
        .ok_or(rejected)
}

/// The error for no eligible node: each node with its reason.
pub fn no_node_message(rejected: &[(String, String)], candidates: Option<&[String]>) -> String {
    let scope = match candidates {
        Some(list) => format!(" among node_candidates ({})", list.join(", ")),
        None => String::new(),
    };
    let mut lines: Vec<String> = rejected
        .iter()
        .map(|(node, why)| format!("  {node}: {why}"))
        .collect();
    // Candidates placement never saw are not in the cluster: say so, so no candidate goes
    // without a reason.
    for candidate in candidates.unwrap_or_default() {
        if !rejected.iter().any(|(node, _)| node == candidate) {
            lines.push(format!("  {candidate}: not in the cluster"));
        }
    }
    format!(
        "no node can run this VM{scope}:\n{}\nSet `node` to choose one yourself, or fix what keeps \
        the nodes out.",
        lines.join("\n")
    )
}

fn storage_problem(storages: &Fact<Vec<StorageInfo>>, storage: &str) -> Option<String> {
    match storages {
        Err(e) => Some(format!("its storages could not be read ({e})")),
        Ok(list) => match fitness::storage(list, storage, Content::Iso) {
            Err(StorageProblem::Missing) => Some(format!("no seed storage `{storage}`")),
            Err(StorageProblem::Inactive) => Some(format!("seed storage `{storage}` not active")),
            Err(StorageProblem::LacksContent) => {
                Some(format!("seed storage `{storage}` takes no ISO images"))
            }
            Ok(_) => None,
        },
    }
}

/// Why a node cannot give the VM its bridges: each missing one, with where it comes from.
fn bridge_problem(used: &[BridgeUse], bridges: &Fact<Vec<NetworkInterface>>) -> Option<String> {
    match bridges {
        Err(e) => Some(format!("its bridges could not be read ({e})")),
        Ok(list) => {
            let present: Vec<&str> = list.iter().map(|b| b.iface.as_str()).collect();
            let wanted: Vec<&str> = used.iter().map(|u| u.bridge.as_str()).collect();
            let lacking = fitness::missing_bridges(&wanted, &present);
            let missing: Vec<String> = used
                .iter()
                .filter(|u| lacking.contains(&u.bridge.as_str()))
                .map(|u| format!("no bridge {}", u.describe()))
                .collect();
            (!missing.is_empty()).then(|| missing.join("; "))
        }
    }
}

/// Gathers what [`judge`] needs for every cluster node (or the candidates).
pub async fn gather(
    configured: &Configured,
    desired: &Desired,
    listing: &[ClusterVm],
    template: &Template,
) -> Result<Vec<NodeView>, pve::Error> {
    let client = &configured.client;
    let facts = &configured.facts;
    let nodes = facts.nodes(client).await.map_err(|e| (*e).clone())?;
    let template_disks: Vec<String> = template.disk_storage.iter().cloned().collect();
    let placed = configured.runtime.placed_memory(listing);
    let mut views = Vec::new();
    for node in nodes.iter() {
        if let Some(candidates) = &desired.node_candidates
            && !candidates.contains(&node.node)
        {
            continue;
        }
        let online = node.is_online();
        let on_node = || {
            listing
                .iter()
                .filter(|vm| vm.node == node.node && !vm.template)
        };
        let memory_promised = on_node().filter_map(|vm| vm.maxmem).sum::<u64>()
            + placed.get(&node.node).copied().unwrap_or(0);
        let fleet_vms = on_node()
            .filter(|vm| {
                ownership::fleet_in_tags(vm.tags.as_deref().unwrap_or("")).as_deref()
                    == Some(desired.fleet.as_str())
            })
            .count();
        let mut view = NodeView {
            name: node.node.clone(),
            online,
            memory_total: node.maxmem,
            memory_promised,
            fleet_vms,
            template_problem: None,
            seed_problem: None,
            bridge_problem: None,
        };
        if online {
            // A node's own copy of the template (same name) is cloned there; else the
            // template's disk must be on storage shared with the node.
            let own_copy =
                super::prechecks::choose_template(listing, &desired.template, &node.node)
                    .ok()
                    .filter(|vm| vm.node == node.node && vm.template);
            let storages = facts.storages(client, &node.node).await;
            // The rule health judges too (`fitness`): shared, and active on this node.
            let not_shared = storages.as_ref().map_or(true, |list| {
                !fitness::disks_not_shared(&template_disks, list).is_empty()
            });
            if own_copy.is_none() && template.node != node.node && not_shared {
                view.template_problem = Some(format!(
                    "the template (VM {} on {}) has its disk on storage not shared with this node",
                    template.vmid, template.node
                ));
            }
            view.seed_problem = storage_problem(&storages, &desired.seed_storage);
            // Every bridge the clone will use: the NICs of the template it is cloned from
            // (the node's own copy, if it has one), net0's replaced by `bridge` when set.
            let nics = match own_copy.filter(|vm| vm.vmid != template.vmid) {
                None => Ok(template.nic_bridges.clone()),
                Some(copy) => facts
                    .config(client, &copy.node, copy.vmid)
                    .await
                    .map(|config| nic_bridges(&config)),
            };
            view.bridge_problem = match nics {
                Err(e) => Some(format!(
                    "its template copy's config could not be read ({e})"
                )),
                Ok(nics) => {
                    let used = bridges_used(&nics, desired.bridge.as_deref());
                    let used = with_networks(used, desired.networks.as_deref());
                    if used.is_empty() {
                        None
                    } else {
                        bridge_problem(&used, &facts.bridges(client, &node.node).await)
                    }
                }
            };
        }
        views.push(view);
    }
    Ok(views)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn node(name: &str, total_gib: u64, promised_gib: u64, fleet_vms: usize) -> NodeView {
        NodeView {
            name: name.into(),
            online: true,
            memory_total: Some(total_gib * GIB),
            memory_promised: promised_gib * GIB,
            fleet_vms,
            template_problem: None,
            seed_problem: None,
            bridge_problem: None,
        }
    }

    #[test]
    fn the_node_with_the_most_unpromised_memory_wins() {
        let nodes = [
            node("pve1", 64, 40, 0),
            node("pve2", 64, 10, 5),
            node("pve3", 32, 20, 0),
        ];
        assert_eq!(judge(&nodes, GIB).unwrap(), "pve2");
    }

    #[test]
    fn ties_go_to_the_node_with_fewer_vms_of_the_fleet_then_the_name() {
        let nodes = [
            node("pve1", 64, 0, 3),
            node("pve2", 64, 0, 1),
            node("pve3", 64, 0, 1),
        ];
        assert_eq!(judge(&nodes, GIB).unwrap(), "pve2");
    }

    #[test]
    fn every_rejected_node_says_why() {
        let mut offline = node("pve1", 64, 0, 0);
        offline.online = false;
        let mut no_bridge = node("pve2", 64, 0, 0);
        no_bridge.bridge_problem = Some("no bridge `vmbr9`".into());
        let full = node("pve3", 8, 7, 0);
        let mut no_template = node("pve4", 64, 0, 0);
        no_template.template_problem = Some("template not reachable".into());
        let rejected = judge(&[offline, no_bridge, full, no_template], 2 * GIB).unwrap_err();
        let reasons: Vec<(&str, &str)> = rejected
            .iter()
            .map(|(n, w)| (n.as_str(), w.as_str()))
            .collect();
        assert_eq!(reasons[0], ("pve1", "offline"));
        assert_eq!(reasons[1], ("pve2", "no bridge `vmbr9`"));
        assert!(
            reasons[2].1.contains("not enough memory: 1024 MiB"),
            "{reasons:?}"
        );
        assert_eq!(reasons[3], ("pve4", "template not reachable"));
        let message = no_node_message(&rejected, None);
        assert!(message.contains("  pve3: not enough memory"), "{message}");
        // A candidate the cluster does not have gets its reason too.
        let message = no_node_message(&[], Some(&["pve9".to_owned()]));
        assert!(
            message.contains("(pve9):\n  pve9: not in the cluster\n"),
            "{message}"
        );
    }

    #[test]
    fn every_bridge_the_clone_uses_is_checked_with_where_it_comes_from() {
        let nics = [
            ("net0".to_owned(), "vmbr0".to_owned()),
            ("net1".to_owned(), "vmbr5".to_owned()),
        ];
        let node_bridges = |names: &[&str]| -> Fact<Vec<NetworkInterface>> {
            Ok(std::sync::Arc::new(
                names
                    .iter()
                    .map(|n| NetworkInterface {
                        iface: (*n).to_owned(),
                        iface_type: "bridge".into(),
                        active: true,
                        autostart: true,
                        vlan_aware: false,
                    })
                    .collect(),
            ))
        };
        // `bridge` unset: the template's NICs, each named.
        let kept = bridges_used(&nics, None);
        assert_eq!(
            bridge_problem(&kept, &node_bridges(&["vmbr5"])).as_deref(),
            Some("no bridge `vmbr0` (the template's net0)")
        );
        assert_eq!(
            bridge_problem(&kept, &node_bridges(&["vmbr0", "vmbr5"])),
            None
        );
        // `bridge` set: it replaces net0's; net1 keeps the template's.
        let replaced = bridges_used(&nics, Some("vmbr7"));
        assert_eq!(
            bridge_problem(&replaced, &node_bridges(&["vmbr0"])).as_deref(),
            Some("no bridge `vmbr7`; no bridge `vmbr5` (the template's net1)")
        );
        // `networks` set: its bridges replace the template's net1, each named by element.
        let further = [super::super::super::model::networks::Nic {
            bridge: "vmbr1".into(),
            vlan_tag: Some(20),
            mac_address: None,
        }];
        let networked = with_networks(bridges_used(&nics, None), Some(&further));
        assert_eq!(
            bridge_problem(&networked, &node_bridges(&["vmbr0", "vmbr5"])).as_deref(),
            Some("no bridge `vmbr1` (networks[0], net1)")
        );
        assert_eq!(
            bridge_problem(&networked, &node_bridges(&["vmbr0", "vmbr1"])),
            None
        );
        // Unset: the template's NICs as they are.
        assert_eq!(with_networks(kept.clone(), None), kept);
    }
}
