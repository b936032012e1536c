//! Gathering the health check's facts from PVE: every call it makes, each once, with a
//! failed call turned into the [`Finding`] that names it. Judges nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use pve::cluster::ClusterVm;
use pve::nodes::NodeSummary;
use serde::Deserialize;
use tokio::task::JoinSet;

use super::facts::{NodeFacts, TemplateFact};
use super::reason::{Finding, Reason};

/// Every target node's calls, all nodes at once: per node the status first, then the storages
/// and bridges together.
pub async fn nodes(
    client: &pve::Client,
    targets: &[String],
    listed: &BTreeMap<String, NodeSummary>,
    want_bridges: bool,
) -> Vec<NodeFacts> {
    let mut tasks = JoinSet::new();
    for (index, name) in targets.iter().enumerate() {
        let listed = listed.get(name).cloned();
        let client = client.clone();
        let name = name.clone();
        tasks.spawn(async move {
            // An offline node is not asked: PVE would spend up to 30 s on its 595.
            let facts = match &listed {
                Some(summary) if summary.is_online() => {
                    let node = client.node(&name);
                    // The status call comes first: a node PVE cannot reach (595) is not
                    // asked again, and the status says which release it runs.
                    let status = node.status().await.map_err(|e| {
                        Finding::from_error(
                            &format!("Unable to read the status of node {name}"),
                            &e,
                        )
                    });
                    let unreachable = status
                        .as_ref()
                        .is_err_and(|f| f.reason == Reason::NodeOffline);
                    if unreachable {
                        NodeFacts {
                            listed,
                            status: Some(status),
                            ..NodeFacts::default()
                        }
                    } else {
                        let (storages, bridges) = tokio::join!(node.storages(None), async {
                            if want_bridges {
                                Some(node_bridges(&client, &name).await)
                            } else {
                                None
                            }
                        });
                        let storages = storages.map_err(|e| {
                            Finding::from_error(
                                &format!("Unable to list the storages of node {name}"),
                                &e,
                            )
                        });
                        let bridges = bridges.map(|b| {
                            b.map_err(|e| {
                                Finding::from_error(
                                    &format!("Unable to list the network of node {name}"),
                                    &e,
                                )
                            })
                        });
                        NodeFacts {
                            listed,
                            status: Some(status),
                            storages: Some(storages),
                            bridges,
                        }
                    }
                }
                _ => NodeFacts {
                    listed,
                    ..NodeFacts::default()
                },
            };
            (index, facts)
        });
    }
    let mut out: Vec<Option<NodeFacts>> = (0..targets.len()).map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        // A task only ends by finishing: nothing in it panics or is cancelled.
        if let Ok((index, facts)) = joined {
            out[index] = Some(facts);
        }
    }
    out.into_iter().map(Option::unwrap_or_default).collect()
}

#[derive(Deserialize)]
struct NetworkRow {
    iface: String,
}

/// `GET /nodes/{node}/network?type=any_bridge` (bridges and OVS bridges).
async fn node_bridges(client: &pve::Client, node: &str) -> pve::Result<Vec<String>> {
    let rows: Vec<NetworkRow> = client
        .get(
            &format!("/nodes/{node}/network"),
            &pve::wire::Form::new().text("type", "any_bridge"),
        )
        .await?;
    Ok(rows.into_iter().map(|r| r.iface).collect())
}

/// Finds every copy of each requested template in the cluster listing and reads their
/// configs (all at once).
pub async fn templates(
    client: &pve::Client,
    wanted: &[String],
    listing: Option<pve::Result<Arc<Vec<ClusterVm>>>>,
    node_online: &BTreeMap<String, bool>,
) -> BTreeMap<String, Vec<TemplateFact>> {
    let listing = match listing {
        None => return BTreeMap::new(),
        Some(Err(error)) => {
            let finding = Finding::from_error("Unable to list the cluster's VMs", &error);
            return wanted
                .iter()
                .map(|w| (w.clone(), vec![TemplateFact::Unknown(finding.clone())]))
                .collect();
        }
        Some(Ok(listing)) => listing,
    };
    let mut tasks = JoinSet::new();
    let mut out: BTreeMap<String, Vec<Option<TemplateFact>>> = BTreeMap::new();
    for wanted_name in wanted {
        let rows = find_template_rows(&listing, wanted_name);
        let copies = out.entry(wanted_name.clone()).or_default();
        copies.resize(rows.len(), None);
        for (index, row) in rows.into_iter().enumerate() {
            let (vmid, node) = (row.vmid, row.node.clone());
            if !node_online.get(&node).copied().unwrap_or(false) {
                copies[index] = Some(TemplateFact::Found {
                    vmid,
                    node,
                    is_template: row.template,
                    node_online: false,
                    disk_storages: Vec::new(),
                    networks: Vec::new(),
                });
                continue;
            }
            let client = client.clone();
            let wanted_name = wanted_name.clone();
            tasks.spawn(async move {
                let fact = template_fact(&client, &wanted_name, vmid, node).await;
                (wanted_name, index, fact)
            });
        }
    }
    while let Some(joined) = tasks.join_next().await {
        if let Ok((wanted_name, index, fact)) = joined
            && let Some(slot) = out.get_mut(&wanted_name).and_then(|c| c.get_mut(index))
        {
            *slot = Some(fact);
        }
    }
    out.into_iter()
        .map(|(name, copies)| (name, copies.into_iter().flatten().collect()))
        .collect()
}

/// One copy of a template, from its config.
async fn template_fact(
    client: &pve::Client,
    wanted: &str,
    vmid: u32,
    node: String,
) -> TemplateFact {
    match client.node(&node).qemu(vmid).config().await {
        Ok(config) => TemplateFact::Found {
            vmid,
            is_template: config.is_template(),
            node_online: true,
            disk_storages: disk_storages(config.raw()),
            networks: networks(config.raw()),
            node,
        },
        // The template's node is unreachable: a fact about the template, not about every
        // node that wants to clone it.
        Err(error) if Reason::of_error(&error) == Reason::NodeOffline => TemplateFact::Found {
            vmid,
            node,
            is_template: true,
            node_online: false,
            disk_storages: Vec::new(),
            networks: Vec::new(),
        },
        Err(error) => TemplateFact::Unknown(Finding::from_error(
            &format!("Unable to read the config of template {wanted} (VMID {vmid})"),
            &error,
        )),
    }
}

/// The listing rows a template reference means, in listing order: a VMID matches its VM; a
/// name matches every template of that name (as `proxmox_proxy_vm` resolves it), else the
/// first VM of that name (to report `NotATemplate`).
fn find_template_rows<'a>(listing: &'a [ClusterVm], wanted: &str) -> Vec<&'a ClusterVm> {
    let qemu = || listing.iter().filter(|vm| vm.guest_type == "qemu");
    if let Ok(vmid) = wanted.parse::<u32>() {
        return qemu().filter(|vm| vm.vmid == vmid).collect();
    }
    let named = || qemu().filter(|vm| vm.name.as_deref() == Some(wanted));
    let templates: Vec<&ClusterVm> = named().filter(|vm| vm.template).collect();
    if templates.is_empty() {
        named().take(1).collect()
    } else {
        templates
    }
}

/// The bridge and VLAN tag of each of a VM's NICs, each once, in key order: a clone copies
/// them, and PVE checks `SDN.Use` on each before it clones.
fn networks(config: &BTreeMap<String, serde_json::Value>) -> Vec<(String, Option<u16>)> {
    let mut out = Vec::new();
    for (key, value) in config {
        let is_net = key
            .strip_prefix("net")
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        let Some(text) = value.as_str().filter(|_| is_net) else {
            continue;
        };
        if let Ok(net) = text.parse::<pve::wire::NetConfig>()
            && let Some(bridge) = net.bridge
            && !out.contains(&(bridge.clone(), net.tag))
        {
            out.push((bridge, net.tag));
        }
    }
    out
}

/// The storages holding a VM's disks (cdroms and empty drives excluded), each once.
fn disk_storages(config: &BTreeMap<String, serde_json::Value>) -> Vec<String> {
    let mut out = BTreeSet::new();
    for (key, value) in config {
        let is_disk_key = pve::wire::is_drive_key(key)
            || key.starts_with("efidisk")
            || key.starts_with("tpmstate");
        let Some(text) = value.as_str().filter(|_| is_disk_key) else {
            continue;
        };
        if let Ok(drive) = text.parse::<pve::wire::DiskDrive>()
            && !drive.is_cdrom()
            && let Some(storage) = drive.storage()
        {
            out.insert(storage.to_owned());
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_references_match_vmid_then_every_template_of_the_name() {
        let rows: Vec<ClusterVm> = serde_json::from_value(serde_json::json!([
            {"id": "qemu/100", "vmid": 100, "node": "pve1", "type": "qemu",
             "name": "debian", "template": 0},
            {"id": "qemu/9000", "vmid": 9000, "node": "pve1", "type": "qemu",
             "name": "debian", "template": 1},
            {"id": "qemu/9001", "vmid": 9001, "node": "pve2", "type": "qemu",
             "name": "debian", "template": 1},
            {"id": "qemu/101", "vmid": 101, "node": "pve2", "type": "qemu", "name": "web"},
            {"id": "lxc/200", "vmid": 200, "node": "pve1", "type": "lxc", "name": "ct"},
        ]))
        .unwrap();
        let vmids = |wanted: &str| -> Vec<u32> {
            find_template_rows(&rows, wanted)
                .iter()
                .map(|r| r.vmid)
                .collect()
        };
        assert_eq!(vmids("debian"), [9000, 9001]);
        assert_eq!(vmids("100"), [100]);
        assert_eq!(vmids("web"), [101], "a plain VM, to report NotATemplate");
        assert_eq!(vmids("200"), Vec::<u32>::new());
        assert_eq!(vmids("ct"), Vec::<u32>::new());
    }

    #[test]
    fn networks_are_bridge_and_tag_per_nic() {
        let config: BTreeMap<String, serde_json::Value> =
            serde_json::from_value(serde_json::json!({
                "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1",
                "net1": "virtio=BC:24:11:00:00:02,bridge=vmbr1,tag=20",
                "net2": "virtio=BC:24:11:00:00:03,bridge=vmbr0",
                "netdev": "not a nic",
            }))
            .unwrap();
        assert_eq!(
            networks(&config),
            vec![("vmbr0".to_owned(), None), ("vmbr1".to_owned(), Some(20))]
        );
    }

    #[test]
    fn disk_storages_skip_cdroms() {
        let config: BTreeMap<String, serde_json::Value> =
            serde_json::from_value(serde_json::json!({
                "scsi0": "vmdata:base-9000-disk-0,size=4G",
                "efidisk0": "local-lvm:vm-9000-disk-1,size=1M",
                "ide2": "local:iso/seed.iso,media=cdrom",
                "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
            }))
            .unwrap();
        assert_eq!(disk_storages(&config), vec!["local-lvm", "vmdata"]);
    }
}
