//! What the health check is asked and what it answers, per node and for the whole cluster.

use std::collections::BTreeSet;

use super::reason::{Finding, Reason};

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
    /// The proxy VMs use `ha`: HA resources need `Sys.Console` on `/`.
    pub ha: bool,
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
