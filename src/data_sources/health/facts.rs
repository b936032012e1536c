//! The facts the health check gathers (in `gather`) and judges (in `judge`), as plain values:
//! a failed call is already the finding it became.

use std::collections::BTreeMap;

use pve::access::Permissions;
use pve::nodes::{NodeStatus, NodeSummary};
use pve::storage::StorageInfo;

use super::reason::Finding;

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

/// What one health check's cluster-wide calls returned, each a value or the finding it
/// became, gathered once and unretried. Not `crate::cluster_facts::ClusterFacts`, the
/// provider process's memo that plan checks share.
#[derive(Debug)]
pub struct ClusterSnapshot {
    pub version: Result<pve::version::Version, Finding>,
    pub permissions: Result<Permissions, Finding>,
    /// Requested template (as written) → every copy found, in listing order (empty: none).
    pub templates: BTreeMap<String, Vec<TemplateFact>>,
}
