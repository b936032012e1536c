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
            .map(|by_node| by_node.get(&node.name).copied().unwrap_or(0));
    }
    report
}

/// Per node, the memory configured for its VMs (templates never run), as placement counts it.
fn promised_memory(vms: &[pve::cluster::ClusterVm]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for vm in vms.iter().filter(|vm| !vm.template) {
        *out.entry(vm.node.clone()).or_default() += vm.maxmem.unwrap_or(0);
    }
    out
}
