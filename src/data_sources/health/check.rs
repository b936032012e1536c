//! The health check itself, apart from Terraform: gather facts from PVE (cluster-wide calls,
//! then every node's calls concurrently, in [`gather`]), then judge each node from the facts
//! alone (in [`judge`], pure: plain values in, findings out).
//!
//! Every call is made once, without retries: a health check reports what it sees. A failed
//! call becomes a [`Finding`], never an error, so the caller always gets a report.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use pve::access::Permissions;
use pve::nodes::{NodeStatus, NodeSummary};
use pve::storage::StorageInfo;

use super::gather;
use super::judge;
use super::reason::{Finding, Reason};
use crate::context::Configured;

/// The oldest PVE major release the provider supports.
pub const MIN_PVE_MAJOR: u32 = 9;

/// Below this many free bytes the ISO storage cannot take a seed ISO.
pub const MIN_ISO_FREE_BYTES: u64 = 1 << 20;

/// Privileges on `/vms` (or any ancestor, propagated) for clone, config, power, destroy and
/// agent reads: every VM call the provider makes.
pub const VM_PRIVILEGES: &[&str] = &[
    "VM.Allocate",
    "VM.Audit",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Disk",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.GuestAgent.Audit",
    "VM.PowerMgmt",
];

/// Privilege on `/vms/{template}`: cloning reads the template.
pub const TEMPLATE_PRIVILEGES: &[&str] = &["VM.Clone"];

/// Privileges on `/storage/{iso_storage}`: upload (`AllocateTemplate`), delete
/// (`Allocate`) and list/status (`Audit`) of seed ISOs.
pub const ISO_STORAGE_PRIVILEGES: &[&str] = &[
    "Datastore.Allocate",
    "Datastore.AllocateTemplate",
    "Datastore.Audit",
];

/// Privilege on every storage a cloned disk lands on (the template's disk storages, or
/// the provider's `clone_storage`): clone and resize allocate space there.
pub const DISK_STORAGE_PRIVILEGES: &[&str] = &["Datastore.AllocateSpace"];

/// Privilege on `/nodes/{node}`: node status (version) for this check.
pub const NODE_PRIVILEGES: &[&str] = &["Sys.Audit"];

/// Privilege on `/sdn/zones/localnetwork/{bridge}` (`…/{bridge}/{tag}` with a VLAN tag) for
/// every bridge named in `bridges` and every NIC of the templates: PVE checks it before it
/// clones (`check_bridge_access`) and on every NIC a config write sets.
pub const BRIDGE_PRIVILEGES: &[&str] = &["SDN.Use"];

/// Privilege on `/pool/{pool}` for every pool named in `pools`: without it PVE leaves the
/// `pool` out of `/cluster/resources`, so the provider cannot see which pool a VM is in.
pub const POOL_PRIVILEGES: &[&str] = &["Pool.Audit"];

/// What to check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthRequest {
    /// Only these nodes; `None` = every node `/nodes` lists.
    pub node_names: Option<Vec<String>>,
    /// Template names or VMIDs.
    pub templates: Vec<String>,
    pub iso_storage: String,
    pub bridges: Vec<String>,
    /// Resource pools the VMs go into (`pool` of `proxmox_proxy_vm`).
    pub pools: Vec<String>,
    /// The provider's `clone_storage`, whose space clones allocate.
    pub clone_storage: Option<String>,
}

/// The result for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeReport {
    pub name: String,
    pub online: bool,
    /// `9.2.11`; empty when unknown.
    pub version: String,
    pub iso_storage_ok: bool,
    pub iso_storage_free_bytes: Option<u64>,
    pub templates_ok: bool,
    pub privileges_ok: bool,
    pub bridges_ok: bool,
    /// The node's memory, bytes (`GET /nodes`); `None` when unknown.
    pub memory_total_bytes: Option<u64>,
    /// Memory configured for the VMs on the node (templates not counted), bytes, from
    /// `/cluster/resources`; `None` when the listing could not be read.
    pub memory_promised_bytes: Option<u64>,
    pub findings: Vec<Finding>,
}

impl NodeReport {
    /// The node's reason codes, sorted, each once.
    pub fn reasons(&self) -> Vec<Reason> {
        let set: BTreeSet<Reason> = self.findings.iter().map(|f| f.reason).collect();
        set.into_iter().collect()
    }

    pub(super) fn unknown(name: &str, findings: Vec<Finding>) -> NodeReport {
        NodeReport {
            name: name.to_owned(),
            online: false,
            version: String::new(),
            iso_storage_ok: false,
            iso_storage_free_bytes: None,
            templates_ok: false,
            privileges_ok: false,
            bridges_ok: false,
            memory_total_bytes: None,
            memory_promised_bytes: None,
            findings,
        }
    }
}

/// The whole result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthReport {
    /// The API endpoint's PVE version; empty when unknown.
    pub version: String,
    /// Findings about the endpoint or cluster rather than one node (also copied onto
    /// every node).
    pub cluster_findings: Vec<Finding>,
    pub nodes: Vec<NodeReport>,
}

impl HealthReport {
    /// Healthy: at least one node checked and no finding anywhere.
    pub fn healthy(&self) -> bool {
        self.cluster_findings.is_empty()
            && !self.nodes.is_empty()
            && self.nodes.iter().all(|n| n.findings.is_empty())
    }

    /// Every reason code, sorted, each once.
    pub fn reasons(&self) -> Vec<Reason> {
        let set: BTreeSet<Reason> = self
            .cluster_findings
            .iter()
            .chain(self.nodes.iter().flat_map(|n| &n.findings))
            .map(|f| f.reason)
            .collect();
        set.into_iter().collect()
    }

    /// Every message once: cluster ones first, then node ones prefixed with the node.
    pub fn messages(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .cluster_findings
            .iter()
            .map(|f| f.message.clone())
            .collect();
        for node in &self.nodes {
            for finding in &node.findings {
                if !self.cluster_findings.contains(finding) {
                    out.push(format!("{}: {}", node.name, finding.message));
                }
            }
        }
        out
    }

    /// A report for when no call could be made at all.
    pub fn unusable(request: &HealthRequest, finding: Finding) -> HealthReport {
        let nodes = request
            .node_names
            .iter()
            .flatten()
            .map(|name| NodeReport::unknown(name, vec![finding.clone()]))
            .collect();
        HealthReport {
            version: String::new(),
            cluster_findings: vec![finding],
            nodes,
        }
    }
}

/// A template as found in the cluster, with what decides where it can be cloned to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateFact {
    /// Nothing with that name or VMID is visible.
    Missing,
    /// The listing could not be read, or the template's config could not.
    Unknown(Finding),
    /// Found, on `node`.
    Found {
        vmid: u32,
        node: String,
        is_template: bool,
        node_online: bool,
        /// Storages of its disks (not cdroms).
        disk_storages: Vec<String>,
        /// Bridge and VLAN tag of each NIC (a clone keeps them).
        networks: Vec<(String, Option<u16>)>,
    },
}

/// What one node's calls returned (`None` = not asked, e.g. the node is offline), as plain
/// values: the judge never sees an API error, only the finding it became.
#[derive(Debug, Default)]
pub struct NodeFacts {
    pub listed: Option<NodeSummary>,
    /// A failed call is already its finding (naming the node and the call).
    pub status: Option<Result<NodeStatus, Finding>>,
    pub storages: Option<Result<Vec<StorageInfo>, Finding>>,
    pub bridges: Option<Result<Vec<String>, Finding>>,
}

/// Cluster-wide facts gathered before and beside the per-node calls.
#[derive(Debug)]
pub struct ClusterFacts {
    pub version: Result<pve::version::Version, Finding>,
    pub permissions: Result<Permissions, Finding>,
    /// Requested template (as written) → every copy found, in listing order (empty: none).
    pub templates: BTreeMap<String, Vec<TemplateFact>>,
}

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

    let facts = ClusterFacts {
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
