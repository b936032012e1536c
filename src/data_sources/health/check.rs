//! The health check itself, apart from Terraform: gather facts from PVE (cluster-wide calls,
//! then every node's calls concurrently), then judge each node from the facts alone.
//!
//! Every call is made once, without retries: a health check reports what it sees. A failed
//! call becomes a [`Finding`], never an error, so the caller always gets a report.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use pve::access::{Permissions, has_privilege};
use pve::cluster::ClusterVm;
use pve::nodes::{NodeStatus, NodeSummary};
use pve::storage::StorageInfo;
use serde::Deserialize;
use tokio::task::JoinSet;

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

/// Privilege on `/sdn/zones/localnetwork/{bridge}` for every bridge named in `bridges`.
pub const BRIDGE_PRIVILEGES: &[&str] = &["SDN.Use"];

/// What to check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthRequest {
    /// Only these nodes; `None` = every node `/nodes` lists.
    pub node_names: Option<Vec<String>>,
    /// Template names or VMIDs.
    pub templates: Vec<String>,
    pub iso_storage: String,
    pub bridges: Vec<String>,
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
    pub findings: Vec<Finding>,
}

impl NodeReport {
    /// The node's reason codes, sorted, each once.
    pub fn reasons(&self) -> Vec<Reason> {
        let set: BTreeSet<Reason> = self.findings.iter().map(|f| f.reason).collect();
        set.into_iter().collect()
    }

    fn unknown(name: &str, findings: Vec<Finding>) -> NodeReport {
        NodeReport {
            name: name.to_owned(),
            online: false,
            version: String::new(),
            iso_storage_ok: false,
            iso_storage_free_bytes: None,
            templates_ok: false,
            privileges_ok: false,
            bridges_ok: false,
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
    },
}

/// What one node's calls returned (`None` = not asked, e.g. the node is offline).
#[derive(Debug, Default)]
pub struct NodeFacts {
    pub listed: Option<NodeSummary>,
    pub status: Option<pve::Result<NodeStatus>>,
    pub storages: Option<pve::Result<Vec<StorageInfo>>>,
    pub bridges: Option<pve::Result<Vec<String>>>,
}

/// Cluster-wide facts gathered before and beside the per-node calls.
#[derive(Debug)]
pub struct ClusterFacts {
    pub version: pve::Result<pve::version::Version>,
    pub permissions: pve::Result<Permissions>,
    /// Requested template (as written) → every copy found, in listing order (empty: none).
    pub templates: BTreeMap<String, Vec<TemplateFact>>,
}

/// Runs the whole check against the configured provider.
pub async fn run(configured: &Configured, request: &HealthRequest) -> HealthReport {
    let client = &configured.client;
    let want_listing = !request.templates.is_empty();
    let (version, nodes, permissions, listing) = tokio::join!(
        client.version(),
        client.nodes(),
        client.permissions(None),
        async {
            // Not the runtime's shared listing: that one retries, and a health check
            // reports what a single attempt sees.
            if want_listing {
                Some(client.cluster().vm_resources().await.map(Arc::new))
            } else {
                None
            }
        }
    );

    // An endpoint-wide failure means no other call can succeed: report it on every node.
    if let Err(error) = &version {
        let finding = Finding::from_error("The PVE API did not answer GET /version", error);
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
    let node_calls = gather_nodes(client, &targets, &listed, !request.bridges.is_empty());
    let template_calls = gather_templates(client, &request.templates, listing, &node_online);
    let (node_facts, templates) = tokio::join!(node_calls, template_calls);

    let facts = ClusterFacts {
        version,
        permissions,
        templates,
    };
    judge(request, &facts, targets, node_facts, report_findings)
}

/// Every target node's calls, all nodes at once: per node the status first, then the storages
/// and bridges together.
async fn gather_nodes(
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
                    let status = node.status().await;
                    let unreachable = status
                        .as_ref()
                        .is_err_and(|e| Reason::of_error(e) == Reason::NodeOffline);
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
async fn gather_templates(
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

/// The copy a clone onto `node` uses, as `proxmox_proxy_vm` picks it: the one on that node,
/// else the first.
fn copy_for<'a>(copies: &'a [TemplateFact], node: &str) -> Option<&'a TemplateFact> {
    copies
        .iter()
        .find(|c| matches!(c, TemplateFact::Found { node: home, .. } if home == node))
        .or_else(|| copies.first())
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

/// Judges every node from the gathered facts. Pure, so every rule is unit-tested.
pub fn judge(
    request: &HealthRequest,
    facts: &ClusterFacts,
    targets: Vec<String>,
    node_facts: Vec<NodeFacts>,
    mut cluster_findings: Vec<Finding>,
) -> HealthReport {
    let version = match &facts.version {
        Ok(v) => {
            if v.major().is_none_or(|m| m < MIN_PVE_MAJOR) {
                cluster_findings.push(Finding::new(
                    Reason::VersionUnsupported,
                    format!(
                        "The API endpoint runs PVE {}; the provider supports PVE {MIN_PVE_MAJOR} and newer.",
                        v.version
                    ),
                ));
            }
            v.version.clone()
        }
        Err(error) => {
            cluster_findings.push(Finding::from_error("Unable to read the PVE version", error));
            String::new()
        }
    };
    if targets.is_empty() && cluster_findings.is_empty() {
        cluster_findings.push(Finding::new(
            Reason::NodeNotFound,
            "The cluster lists no node the token may see.",
        ));
    }
    let nodes = targets
        .into_iter()
        .zip(node_facts)
        .map(|(name, node)| judge_node(request, facts, &version, &cluster_findings, name, node))
        .collect();
    HealthReport {
        version,
        cluster_findings,
        nodes,
    }
}

fn judge_node(
    request: &HealthRequest,
    facts: &ClusterFacts,
    cluster_version: &str,
    cluster_findings: &[Finding],
    name: String,
    node: NodeFacts,
) -> NodeReport {
    let mut findings: Vec<Finding> = cluster_findings.to_vec();
    let Some(listed) = &node.listed else {
        // Without a node listing (already reported) a node cannot be judged missing.
        if cluster_findings.is_empty() {
            findings.push(Finding::new(
                Reason::NodeNotFound,
                format!(
                    "Node {name} is not a member of the cluster (GET /nodes does not list it)."
                ),
            ));
        }
        return NodeReport::unknown(&name, findings);
    };
    if !listed.is_online() {
        findings.push(Finding::new(
            Reason::NodeOffline,
            format!("The cluster reports node {name} as {}.", listed.status),
        ));
        return NodeReport::unknown(&name, findings);
    }
    let mut online = true;
    // Records a failed call once; a 595/596 means PVE cannot reach the node.
    let note_call_failure = |what: String, error: &pve::Error, findings: &mut Vec<Finding>| {
        let finding = Finding::from_error(&what, error);
        let offline = finding.reason == Reason::NodeOffline;
        if !findings.contains(&finding) {
            findings.push(finding);
        }
        offline
    };

    // Version: the node's own pve-manager, else what the endpoint reported.
    let mut version = cluster_version.to_owned();
    match &node.status {
        Some(Ok(status)) => {
            if let Some(node_version) = status.pveversion.as_deref().and_then(manager_version) {
                version = node_version.to_owned();
                if major(node_version).is_none_or(|m| m < MIN_PVE_MAJOR) {
                    findings.push(Finding::new(
                        Reason::VersionUnsupported,
                        format!(
                            "Node {name} runs PVE {node_version}; the provider supports PVE {MIN_PVE_MAJOR} and newer."
                        ),
                    ));
                }
            }
        }
        Some(Err(error)) => {
            online &= !note_call_failure(
                format!("Unable to read the status of node {name}"),
                error,
                &mut findings,
            );
        }
        None => {}
    }

    if !online {
        return NodeReport {
            version,
            ..NodeReport::unknown(&name, findings)
        };
    }

    // ISO storage.
    let mut iso_storage_ok = false;
    let mut iso_storage_free_bytes = None;
    let storages: &[StorageInfo] = match &node.storages {
        Some(Ok(list)) => list,
        Some(Err(error)) => {
            note_call_failure(
                format!("Unable to list the storages of node {name}"),
                error,
                &mut findings,
            );
            &[]
        }
        None => &[],
    };
    if let Some(Ok(_)) = &node.storages {
        let iso = &request.iso_storage;
        match storages.iter().find(|s| &s.storage == iso) {
            None => findings.push(Finding::new(
                Reason::StorageNotFound,
                format!(
                    "Storage {iso} does not exist on node {name}, or the token lacks Datastore.Audit on /storage/{iso}."
                ),
            )),
            Some(s) if !s.enabled || !s.active => findings.push(Finding::new(
                Reason::StorageInactive,
                format!(
                    "Storage {iso} is not active on node {name} (enabled: {}, active: {}); enable it for this node or choose another `iso_storage`.",
                    s.enabled, s.active
                ),
            )),
            Some(s) if !s.accepts("iso") => findings.push(Finding::new(
                Reason::StorageNoIsoContent,
                format!(
                    "Storage {iso} on node {name} does not accept ISO images (content: {}); add `iso` to its content types.",
                    s.content
                ),
            )),
            Some(s) => {
                iso_storage_free_bytes = s.avail;
                if s.avail.is_some_and(|free| free < MIN_ISO_FREE_BYTES) {
                    findings.push(Finding::new(
                        Reason::StorageFull,
                        format!(
                            "Storage {iso} on node {name} has only {} bytes free.",
                            s.avail.unwrap_or(0)
                        ),
                    ));
                } else {
                    iso_storage_ok = true;
                }
            }
        }
    }

    // Templates: the copy on this node, else the first copy, which must be on an online
    // node with every disk on a shared storage active here (PVE then clones with `target`).
    let storages_known = matches!(&node.storages, Some(Ok(_)));
    let mut templates_ok = true;
    for wanted in &request.templates {
        let copies = facts.templates.get(wanted).map_or(&[][..], Vec::as_slice);
        let finding = match copy_for(copies, &name).unwrap_or(&TemplateFact::Missing) {
            TemplateFact::Missing => Some(Finding::new(
                Reason::TemplateNotFound,
                format!("Template {wanted} does not exist, or the token lacks VM.Audit on it."),
            )),
            TemplateFact::Unknown(finding) => Some(finding.clone()),
            TemplateFact::Found {
                node_online: false,
                node: home,
                vmid,
                ..
            } => Some(Finding::new(
                Reason::TemplateNotFound,
                format!(
                    "Template {wanted} (VMID {vmid}) is on node {home}, which is offline or unreachable."
                ),
            )),
            TemplateFact::Found {
                is_template: false,
                vmid,
                ..
            } => Some(Finding::new(
                Reason::NotATemplate,
                format!(
                    "VM {wanted} (VMID {vmid}) is not a template; convert it with `qm template {vmid}`."
                ),
            )),
            TemplateFact::Found { node: home, .. } if *home == name => None,
            TemplateFact::Found {
                node: home,
                vmid,
                disk_storages,
                ..
            } => {
                let unusable: Vec<&String> = disk_storages
                    .iter()
                    .filter(|id| {
                        !storages
                            .iter()
                            .any(|s| &s.storage == *id && s.shared && s.enabled && s.active)
                    })
                    .collect();
                if !storages_known {
                    // The storage listing failed; that failure is already reported.
                    templates_ok = false;
                    None
                } else if unusable.is_empty() {
                    None
                } else {
                    Some(Finding::new(
                        Reason::TemplateNotShared,
                        format!(
                            "Template {wanted} (VMID {vmid}) lives on node {home} and its disks on {} are not on a shared storage active on node {name}, so it cannot be cloned here.",
                            unusable
                                .iter()
                                .map(|s| s.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ))
                }
            }
        };
        if let Some(finding) = finding {
            templates_ok = false;
            if !findings.contains(&finding) {
                findings.push(finding);
            }
        }
    }

    // Bridges.
    let mut bridges_ok = true;
    match &node.bridges {
        Some(Ok(present)) => {
            for bridge in &request.bridges {
                if !present.contains(bridge) {
                    bridges_ok = false;
                    findings.push(Finding::new(
                        Reason::BridgeNotFound,
                        format!(
                            "Bridge {bridge} does not exist on node {name} (it has: {}).",
                            present.join(", ")
                        ),
                    ));
                }
            }
        }
        Some(Err(error)) => {
            bridges_ok = false;
            note_call_failure(
                format!("Unable to list the network of node {name}"),
                error,
                &mut findings,
            );
        }
        None => {}
    }

    // Privileges.
    let privileges_ok = match &facts.permissions {
        Ok(perms) => {
            let missing = missing_privileges(request, facts, &name, perms);
            for (path, privilege) in &missing {
                findings.push(Finding::new(
                    Reason::PermissionMissing,
                    format!("The token lacks {privilege} on {path}."),
                ));
            }
            missing.is_empty()
        }
        Err(error) => {
            note_call_failure(
                "Unable to read the token's permissions".to_owned(),
                error,
                &mut findings,
            );
            false
        }
    };

    NodeReport {
        name,
        online,
        version,
        iso_storage_ok,
        iso_storage_free_bytes,
        templates_ok,
        privileges_ok,
        bridges_ok,
        findings,
    }
}

/// `(ACL path, privilege)` pairs the provider needs for VMs on `node` and the token lacks.
pub fn missing_privileges(
    request: &HealthRequest,
    facts: &ClusterFacts,
    node: &str,
    perms: &Permissions,
) -> Vec<(String, &'static str)> {
    let mut needed: Vec<(String, &'static str)> = Vec::new();
    let mut need = |path: String, privileges: &[&'static str]| {
        for privilege in privileges {
            needed.push((path.clone(), privilege));
        }
    };
    need("/vms".to_owned(), VM_PRIVILEGES);
    need(format!("/nodes/{node}"), NODE_PRIVILEGES);
    need(
        format!("/storage/{}", request.iso_storage),
        ISO_STORAGE_PRIVILEGES,
    );
    let mut disk_storages: BTreeSet<String> = BTreeSet::new();
    if let Some(storage) = &request.clone_storage {
        disk_storages.insert(storage.clone());
    }
    for fact in facts.templates.values().flatten() {
        if let TemplateFact::Found {
            vmid,
            disk_storages: storages,
            ..
        } = fact
        {
            need(format!("/vms/{vmid}"), TEMPLATE_PRIVILEGES);
            if request.clone_storage.is_none() {
                disk_storages.extend(storages.iter().cloned());
            }
        }
    }
    if facts.templates.is_empty() {
        need("/vms".to_owned(), TEMPLATE_PRIVILEGES);
    }
    for storage in disk_storages {
        need(format!("/storage/{storage}"), DISK_STORAGE_PRIVILEGES);
    }
    for bridge in &request.bridges {
        need(
            format!("/sdn/zones/localnetwork/{bridge}"),
            BRIDGE_PRIVILEGES,
        );
    }
    let mut seen = BTreeSet::new();
    needed
        .into_iter()
        .filter(|(path, privilege)| !has_privilege(perms, path, privilege))
        .filter(|pair| seen.insert(pair.clone()))
        .collect()
}

/// `pve-manager/9.2.11/5a1c0e6b` → `9.2.11`.
fn manager_version(pveversion: &str) -> Option<&str> {
    pveversion.split('/').nth(1).filter(|v| !v.is_empty())
}

fn major(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(name: &str, status: &str) -> NodeSummary {
        serde_json::from_value(serde_json::json!({"node": name, "status": status})).unwrap()
    }

    fn storage(id: &str, content: &str, shared: bool, active: bool, avail: u64) -> StorageInfo {
        serde_json::from_value(serde_json::json!({
            "storage": id, "type": "dir", "content": content, "enabled": active as u8,
            "active": active as u8, "shared": shared as u8, "avail": avail,
        }))
        .unwrap()
    }

    fn status(version: &str) -> NodeStatus {
        serde_json::from_value(
            serde_json::json!({"pveversion": format!("pve-manager/{version}/abc")}),
        )
        .unwrap()
    }

    fn all_privileges() -> Permissions {
        let mut privs = BTreeMap::new();
        for p in VM_PRIVILEGES
            .iter()
            .chain(TEMPLATE_PRIVILEGES)
            .chain(ISO_STORAGE_PRIVILEGES)
            .chain(DISK_STORAGE_PRIVILEGES)
            .chain(NODE_PRIVILEGES)
            .chain(BRIDGE_PRIVILEGES)
        {
            privs.insert((*p).to_owned(), true);
        }
        BTreeMap::from([("/".to_owned(), privs)])
    }

    fn request() -> HealthRequest {
        HealthRequest {
            node_names: None,
            templates: vec!["debian".into()],
            iso_storage: "seeds".into(),
            bridges: vec![],
            clone_storage: None,
        }
    }

    fn template_on(node: &str, storages: &[&str]) -> TemplateFact {
        TemplateFact::Found {
            vmid: 9000,
            node: node.into(),
            is_template: true,
            node_online: true,
            disk_storages: storages.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn facts(template: TemplateFact) -> ClusterFacts {
        ClusterFacts {
            version: Ok(pve::version::Version {
                version: "9.2.11".into(),
                release: "9.2".into(),
                repoid: String::new(),
            }),
            permissions: Ok(all_privileges()),
            templates: BTreeMap::from([("debian".to_owned(), vec![template])]),
        }
    }

    fn healthy_node(name: &str) -> NodeFacts {
        NodeFacts {
            listed: Some(summary(name, "online")),
            status: Some(Ok(status("9.2.11"))),
            storages: Some(Ok(vec![
                storage("seeds", "iso,vztmpl", false, true, 10 << 30),
                storage("vmdata", "images", true, true, 10 << 30),
                storage("local-lvm", "images", false, true, 10 << 30),
            ])),
            bridges: None,
        }
    }

    fn judge_one(template: TemplateFact, node: NodeFacts) -> NodeReport {
        let name = node
            .listed
            .as_ref()
            .map_or("pve9".to_owned(), |l| l.node.clone());
        let report = judge(&request(), &facts(template), vec![name], vec![node], vec![]);
        report.nodes.into_iter().next().unwrap()
    }

    #[test]
    fn a_healthy_node_has_no_findings() {
        let node = judge_one(template_on("pve1", &["vmdata"]), healthy_node("pve1"));
        assert_eq!(node.findings, vec![]);
        assert!(node.online && node.iso_storage_ok && node.templates_ok && node.privileges_ok);
        assert_eq!(node.version, "9.2.11");
        assert_eq!(node.iso_storage_free_bytes, Some(10 << 30));
    }

    #[test]
    fn a_template_elsewhere_counts_only_on_shared_storage() {
        let shared = judge_one(template_on("pve1", &["vmdata"]), healthy_node("pve2"));
        assert!(shared.templates_ok, "{:?}", shared.findings);
        let local = judge_one(template_on("pve1", &["local-lvm"]), healthy_node("pve2"));
        assert_eq!(local.reasons(), vec![Reason::TemplateNotShared]);
        let here = judge_one(template_on("pve2", &["local-lvm"]), healthy_node("pve2"));
        assert!(here.templates_ok);
    }

    #[test]
    fn template_problems_have_their_codes() {
        let missing = judge_one(TemplateFact::Missing, healthy_node("pve1"));
        assert_eq!(missing.reasons(), vec![Reason::TemplateNotFound]);
        let plain_vm = TemplateFact::Found {
            vmid: 100,
            node: "pve1".into(),
            is_template: false,
            node_online: true,
            disk_storages: vec![],
        };
        let not_template = judge_one(plain_vm, healthy_node("pve1"));
        assert_eq!(not_template.reasons(), vec![Reason::NotATemplate]);
        assert!(!not_template.templates_ok);
    }

    #[test]
    fn storage_problems_have_their_codes() {
        let with_storages = |list: Vec<StorageInfo>| NodeFacts {
            storages: Some(Ok(list)),
            ..healthy_node("pve1")
        };
        let template = || template_on("pve1", &["vmdata"]);
        let cases = [
            (vec![], Reason::StorageNotFound),
            (
                vec![storage("seeds", "iso", false, false, 0)],
                Reason::StorageInactive,
            ),
            (
                vec![storage("seeds", "images", false, true, 1 << 30)],
                Reason::StorageNoIsoContent,
            ),
            (
                vec![storage("seeds", "iso", false, true, 1000)],
                Reason::StorageFull,
            ),
        ];
        for (list, reason) in cases {
            let node = judge_one(template(), with_storages(list));
            assert!(!node.iso_storage_ok);
            assert!(
                node.reasons().contains(&reason),
                "{reason}: {:?}",
                node.findings
            );
        }
    }

    #[test]
    fn offline_and_unknown_nodes_are_reported_without_calls() {
        let offline = judge_one(
            template_on("pve1", &["vmdata"]),
            NodeFacts {
                listed: Some(summary("pve2", "offline")),
                ..NodeFacts::default()
            },
        );
        assert_eq!(offline.reasons(), vec![Reason::NodeOffline]);
        assert!(!offline.online);
        let unknown = judge_one(template_on("pve1", &["vmdata"]), NodeFacts::default());
        assert_eq!(unknown.reasons(), vec![Reason::NodeNotFound]);
    }

    #[test]
    fn old_versions_are_unsupported() {
        let node = judge_one(
            template_on("pve1", &["vmdata"]),
            NodeFacts {
                status: Some(Ok(status("8.4.1"))),
                ..healthy_node("pve1")
            },
        );
        assert_eq!(node.reasons(), vec![Reason::VersionUnsupported]);
        assert_eq!(node.version, "8.4.1");
    }

    #[test]
    fn missing_privileges_name_path_and_privilege() {
        let mut perms = all_privileges();
        perms
            .get_mut("/")
            .unwrap()
            .remove("Datastore.AllocateTemplate");
        let facts = ClusterFacts {
            permissions: Ok(perms),
            ..facts(template_on("pve1", &["vmdata"]))
        };
        let missing = missing_privileges(
            &request(),
            &facts,
            "pve1",
            facts.permissions.as_ref().unwrap(),
        );
        assert_eq!(
            missing,
            vec![("/storage/seeds".to_owned(), "Datastore.AllocateTemplate")]
        );
    }

    #[test]
    fn template_references_match_vmid_then_every_template_of_the_name() {
        let rows: Vec<ClusterVm> = serde_json::from_value(serde_json::json!([
            {"id": "qemu/100", "vmid": 100, "node": "pve1", "type": "qemu", "name": "debian", "template": 0},
            {"id": "qemu/9000", "vmid": 9000, "node": "pve1", "type": "qemu", "name": "debian", "template": 1},
            {"id": "qemu/9001", "vmid": 9001, "node": "pve2", "type": "qemu", "name": "debian", "template": 1},
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
    fn each_node_uses_its_own_copy_of_a_template_else_the_first() {
        let copies = [
            template_on("pve1", &["local-lvm"]),
            TemplateFact::Found {
                vmid: 9001,
                node: "pve2".into(),
                is_template: true,
                node_online: true,
                disk_storages: vec!["local-lvm".into()],
            },
        ];
        let vmid_for = |node: &str| match copy_for(&copies, node) {
            Some(TemplateFact::Found { vmid, .. }) => *vmid,
            other => panic!("{other:?}"),
        };
        assert_eq!(vmid_for("pve1"), 9000);
        assert_eq!(vmid_for("pve2"), 9001);
        assert_eq!(vmid_for("pve3"), 9000);
        assert!(copy_for(&[], "pve1").is_none());

        let facts = ClusterFacts {
            templates: BTreeMap::from([("debian".to_owned(), copies.to_vec())]),
            ..facts(TemplateFact::Missing)
        };
        let report = judge(
            &request(),
            &facts,
            vec!["pve1".into(), "pve2".into(), "pve3".into()],
            vec![
                healthy_node("pve1"),
                healthy_node("pve2"),
                healthy_node("pve3"),
            ],
            vec![],
        );
        let reasons: Vec<Vec<Reason>> = report.nodes.iter().map(NodeReport::reasons).collect();
        assert_eq!(reasons, [vec![], vec![], vec![Reason::TemplateNotShared]]);
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
