//! The health check itself, apart from Terraform: gather facts from PVE (cluster-wide calls,
//! then every node's calls concurrently, in [`gather`]), then judge each node from the facts
//! alone (in [`judge`], pure: plain values in, findings out).
//!
//! Every call is made once, without retries: a health check reports what it sees. A failed
//! call becomes a [`Finding`], never an error, so the caller always gets a report.

use std::collections::BTreeMap;
use std::sync::Arc;

use pve::nodes::NodeSummary;

use super::facts::ClusterSnapshot;
use super::gather;
use super::judge;
use super::reason::Finding;
use super::report::{HealthReport, HealthRequest};
use crate::context::Configured;

/// Runs the whole check against the configured provider.
pub async fn run(configured: &Configured, request: &HealthRequest) -> HealthReport {
    let client = &configured.client;
    // The VM listing finds the templates and sums each node's promised memory. Not the
    // runtime's shared listing: that one retries, and a health check reports what a single
    // attempt sees.
    let (version, nodes, permissions, listing) = tokio::join!(
        client.version(),
        client.nodes(),
        client.permissions(None),
        async { client.cluster().vm_resources().await.map(Arc::new) }
    );
    let promised = listing.as_ref().ok().map(|vms| promised_memory(vms));
    let listing = (!request.templates.is_empty()).then_some(listing);

    // An endpoint-wide failure means no other call can succeed: report it on every node.
    if let Err(error) = &version {
        let finding = Finding::from_error("Checking the PVE API", error);
        if finding.reason.is_cluster_wide() {
            return HealthReport::unusable(request, finding);
        }
    }

    let mut report_findings = Vec::new();
    let listed: BTreeMap<String, NodeSummary> = match &nodes {
        Ok(rows) => rows.iter().map(|n| (n.node.clone(), n.clone())).collect(),
        Err(error) => {
            report_findings.push(Finding::from_error(
                "Unable to list the cluster's nodes",
                error,
            ));
            BTreeMap::new()
        }
    };
    let targets: Vec<String> = match &request.node_names {
        Some(names) => names.clone(),
        None => listed.keys().cloned().collect(),
    };

    let node_online: BTreeMap<String, bool> = listed
        .iter()
        .map(|(name, n)| (name.clone(), n.is_online()))
        .collect();
    // The bridges: those asked for, and those the templates' NICs name.
    let want_bridges = !request.bridges.is_empty() || !request.templates.is_empty();
    let node_calls = gather::nodes(client, &targets, &listed, want_bridges);
    let template_calls = gather::templates(client, &request.templates, listing, &node_online);
    let (node_facts, templates) = tokio::join!(node_calls, template_calls);

    let facts = ClusterSnapshot {
        version: version.map_err(|e| Finding::from_error("Unable to read the PVE version", &e)),
        permissions: permissions
            .map_err(|e| Finding::from_error("Unable to read the token's permissions", &e)),
        templates,
    };
    let mut report = judge::judge(request, &facts, targets, node_facts, report_findings);
    for node in &mut report.nodes {
        node.memory_total_bytes = listed.get(&node.name).and_then(|n| n.maxmem);
        node.memory_promised_bytes = promised
            .as_ref()
            .and_then(|by_node| by_node.get(&node.name).copied().unwrap_or(Some(0)));
    }
    report
}

/// Per node, the memory configured for its VMs (templates never run), as placement counts it;
/// `None` for a node the listing shows a VM of without its memory. PVE's listing takes a VM's
/// memory (and its template flag) from the statistics its node last reported (pve-manager
/// `PVE/API2Tools.pm` `extract_vm_stats`: without them the entry has only its id, node,
/// type and status `unknown`), so the VMs of an offline node, and one cloned moments ago,
/// come without it: an unknown sum, never a 0.
fn promised_memory(vms: &[pve::cluster::ClusterVm]) -> BTreeMap<String, Option<u64>> {
    let mut out: BTreeMap<String, Option<u64>> = BTreeMap::new();
    for vm in vms.iter().filter(|vm| !vm.template) {
        let sum = out.entry(vm.node.clone()).or_insert(Some(0));
        *sum = sum.zip(vm.maxmem).map(|(sum, memory)| sum + memory);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_listed_without_its_memory_makes_its_nodes_sum_unknown() {
        let vms: Vec<pve::cluster::ClusterVm> = serde_json::from_value(serde_json::json!([
            {"id": "qemu/100", "vmid": 100, "node": "pve1", "type": "qemu",
                "status": "running", "maxmem": 1024, "template": 0},
            {"id": "qemu/101", "vmid": 101, "node": "pve1", "type": "qemu",
                "status": "stopped", "maxmem": 2048, "template": 0},
            {"id": "qemu/9000", "vmid": 9000, "node": "pve1", "type": "qemu",
                "status": "stopped", "maxmem": 4096, "template": 1},
            // pve2 is offline: its VMs come without statistics.
            {"id": "qemu/200", "vmid": 200, "node": "pve2", "type": "qemu",
                "status": "unknown"},
            {"id": "qemu/201", "vmid": 201, "node": "pve2", "type": "qemu",
                "status": "running", "maxmem": 1024, "template": 0},
        ]))
        .unwrap();
        let promised = promised_memory(&vms);
        assert_eq!(promised["pve1"], Some(3072));
        assert_eq!(promised["pve2"], None);
        assert!(!promised.contains_key("pve3"));
    }
}
