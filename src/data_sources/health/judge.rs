//! Judging the gathered facts: pure (plain values in, findings out, no I/O), so every rule
//! is unit-tested with hand-made facts.

use crate::fitness::{self, Content, StorageProblem};
use std::collections::BTreeSet;

use pve::access::{Permissions, has_privilege};
use pve::storage::StorageInfo;

use super::facts::{ClusterSnapshot, NodeFacts, TemplateFact};
use super::reason::{Finding, Reason};
use super::report::{HealthReport, HealthRequest, NodeReport};
use super::requirements;
use super::requirements::{
    BRIDGE_PRIVILEGES, DISK_STORAGE_PRIVILEGES, ISO_STORAGE_PRIVILEGES, MIN_ISO_FREE_BYTES,
    MIN_PVE_MAJOR, NODE_PRIVILEGES, POOL_PRIVILEGES, TEMPLATE_PRIVILEGES, VM_PRIVILEGES,
};

/// The copy a clone onto `node` uses, as `proxmox_proxy_vm` picks it: the one on that node,
/// else the first.
fn copy_for<'a>(copies: &'a [TemplateFact], node: &str) -> Option<&'a TemplateFact> {
    copies
        .iter()
        .find(|c| matches!(c, TemplateFact::Found { node: home, .. } if home == node))
        .or_else(|| copies.first())
}

/// Judges every node from the gathered facts. Pure, so every rule is unit-tested.
pub fn judge(
    request: &HealthRequest,
    facts: &ClusterSnapshot,
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
                        "The API endpoint runs PVE {}; the provider supports PVE {MIN_PVE_MAJOR} \
                        and newer.",
                        v.version
                    ),
                ));
            }
            v.version.clone()
        }
        Err(finding) => {
            cluster_findings.push(finding.clone());
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

/// One node's report: membership, version, ISO storage, templates, bridges, privileges, in
/// that order; a node that is missing, offline or unreachable is judged no further.
fn judge_node(
    request: &HealthRequest,
    facts: &ClusterSnapshot,
    cluster_version: &str,
    cluster_findings: &[Finding],
    name: String,
    node: NodeFacts,
) -> NodeReport {
    let mut findings: Vec<Finding> = cluster_findings.to_vec();
    if !is_online_member(&name, &node, cluster_findings, &mut findings) {
        return NodeReport::unknown(&name, findings);
    }
    let (version, online) = judge_version(&name, &node, cluster_version, &mut findings);
    if !online {
        return NodeReport {
            version,
            ..NodeReport::unknown(&name, findings)
        };
    }
    // Gathered for every node that answered its status call (else it was judged offline).
    let Some(listed_storages) = &node.storages else {
        return NodeReport::unknown(&name, findings);
    };
    // Each check records its own findings; it passed when it found nothing (#44: one fact,
    // one record: the `_ok` attributes are derived from the findings).
    let mut own = Vec::new();
    let iso_storage_free_bytes = match listed_storages {
        Ok(list) => judge_iso_storage(&request.iso_storage, &name, list, &mut own),
        Err(listing_failed) => {
            own.push(listing_failed.clone());
            None
        }
    };
    let iso_storage_ok = passed(own, &mut findings);
    let mut own = Vec::new();
    judge_templates(request, facts, &name, listed_storages, &mut own);
    let templates_ok = passed(own, &mut findings);
    let mut own = Vec::new();
    judge_bridges(request, facts, &name, &node.bridges, &mut own);
    let bridges_ok = passed(own, &mut findings);
    let mut own = Vec::new();
    judge_privileges(request, facts, &name, &mut own);
    let privileges_ok = passed(own, &mut findings);
    NodeReport {
        name,
        online,
        version,
        iso_storage_ok,
        iso_storage_free_bytes,
        templates_ok,
        privileges_ok,
        bridges_ok,
        // Filled in from the listings by `check::run`: the judge sees no memory.
        memory_total_bytes: None,
        memory_promised_bytes: None,
        findings,
    }
}

/// Records a failed call once; true when it says PVE cannot reach the node (595/596).
fn note_call_failure(finding: &Finding, findings: &mut Vec<Finding>) -> bool {
    let finding = finding.clone();
    let offline = finding.reason == Reason::NodeOffline;
    if !findings.contains(&finding) {
        findings.push(finding);
    }
    offline
}

/// Records one check's findings on the node, each once; the check passed when it found
/// nothing.
fn passed(own: Vec<Finding>, findings: &mut Vec<Finding>) -> bool {
    let passed = own.is_empty();
    for finding in own {
        if !findings.contains(&finding) {
            findings.push(finding);
        }
    }
    passed
}

/// Whether the cluster lists the node as online; else why not is in `findings`.
fn is_online_member(
    name: &str,
    node: &NodeFacts,
    cluster_findings: &[Finding],
    findings: &mut Vec<Finding>,
) -> bool {
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
        return false;
    };
    if !listed.is_online() {
        findings.push(Finding::new(
            Reason::NodeOffline,
            format!("The cluster reports node {name} as {}.", listed.status),
        ));
        return false;
    }
    true
}

/// The node's own pve-manager version, else what the endpoint reported, and whether the
/// node answered its status call.
fn judge_version(
    name: &str,
    node: &NodeFacts,
    cluster_version: &str,
    findings: &mut Vec<Finding>,
) -> (String, bool) {
    let mut version = cluster_version.to_owned();
    let mut online = true;
    match &node.status {
        Some(Ok(status)) => {
            if let Some(node_version) = status.pveversion.as_deref().and_then(manager_version) {
                version = node_version.to_owned();
                if major(node_version).is_none_or(|m| m < MIN_PVE_MAJOR) {
                    findings.push(Finding::new(
                        Reason::VersionUnsupported,
                        format!(
                            "Node {name} runs PVE {node_version}; the provider supports PVE \
                            {MIN_PVE_MAJOR} and newer."
                        ),
                    ));
                }
            }
        }
        Some(Err(error)) => {
            online &= !note_call_failure(error, findings);
        }
        None => {}
    }
    (version, online)
}

/// A storage's content types as listed.
fn content_of(storages: &[StorageInfo], id: &str) -> String {
    let found = storages.iter().find(|s| s.storage == id);
    found.map(|s| s.content.clone()).unwrap_or_default()
}

/// What keeps the ISO storage from taking a seed on this node, into `findings`; its free
/// bytes.
fn judge_iso_storage(
    iso: &str,
    name: &str,
    storages: &[StorageInfo],
    findings: &mut Vec<Finding>,
) -> Option<u64> {
    match fitness::storage(storages, iso, Content::Iso) {
        Err(StorageProblem::Missing) => findings.push(Finding::new(
            Reason::StorageNotFound,
            format!(
                "Storage {iso} does not exist on node {name}, or the token lacks Datastore.Audit \
                on /storage/{iso}."
            ),
        )),
        Err(StorageProblem::Inactive) => findings.push(Finding::new(
            Reason::StorageInactive,
            format!(
                "Storage {iso} is not active on node {name}; enable it for this node or choose \
                another `iso_storage`."
            ),
        )),
        Err(StorageProblem::LacksContent) => findings.push(Finding::new(
            Reason::StorageNoIsoContent,
            format!(
                "Storage {iso} on node {name} does not accept ISO images (content: {}); add `iso` \
                to its content types.",
                content_of(storages, iso)
            ),
        )),
        Ok(s) => {
            if s.avail.is_some_and(|free| free < MIN_ISO_FREE_BYTES) {
                findings.push(Finding::new(
                    Reason::StorageFull,
                    format!(
                        "Storage {iso} on node {name} has only {} bytes free.",
                        s.avail.unwrap_or(0)
                    ),
                ));
            }
            return s.avail;
        }
    }
    None
}

/// What keeps a template from being cloned onto this node, into `findings`: the copy on
/// this node, else the first copy, which must be on an online node with every disk on a
/// shared storage active here (PVE then clones with `target`). `storages`: the node's
/// listing, or the finding its failure became.
fn judge_templates(
    request: &HealthRequest,
    facts: &ClusterSnapshot,
    name: &str,
    storages: &Result<Vec<StorageInfo>, Finding>,
    findings: &mut Vec<Finding>,
) {
    let listed = storages.as_ref().ok().map(Vec::as_slice);
    for wanted in &request.templates {
        let copies = facts.templates.get(wanted).map_or(&[][..], Vec::as_slice);
        let copy = copy_for(copies, name).unwrap_or(&TemplateFact::Missing);
        let finding = match template_finding(wanted, copy, name, listed) {
            Ok(finding) => finding,
            // The storage listing failed: that failure is why the copy cannot be judged.
            Err(StoragesUnknown) => storages.as_ref().err().cloned(),
        };
        if let Some(finding) = finding
            && !findings.contains(&finding)
        {
            findings.push(finding);
        }
    }
}

/// A template copy on another node whose disks could not be judged: the node's storages
/// could not be listed.
struct StoragesUnknown;

/// What stops `copy` of template `wanted` from being cloned onto node `name`, if anything.
fn template_finding(
    wanted: &str,
    copy: &TemplateFact,
    name: &str,
    storages: Option<&[StorageInfo]>,
) -> Result<Option<Finding>, StoragesUnknown> {
    let finding = match copy {
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
                "Template {wanted} (VMID {vmid}) is on node {home}, which is offline or \
                unreachable."
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
        TemplateFact::Found { node: home, .. } if home == name => None,
        TemplateFact::Found {
            node: home,
            vmid,
            disk_storages,
            ..
        } => {
            let Some(storages) = storages else {
                return Err(StoragesUnknown);
            };
            let unusable = fitness::disks_not_shared(disk_storages, storages);
            (!unusable.is_empty()).then(|| {
                Finding::new(
                    Reason::TemplateNotShared,
                    format!(
                        "Template {wanted} (VMID {vmid}) lives on node {home} and its disks on {} \
                        are not on a shared storage active on node {name}, so it cannot be cloned \
                        here.",
                        unusable.join(", ")
                    ),
                )
            })
        }
    };
    Ok(finding)
}

/// Every bridge asked for and every bridge the templates' NICs name that the node lacks,
/// into `findings`.
fn judge_bridges(
    request: &HealthRequest,
    facts: &ClusterSnapshot,
    name: &str,
    bridges: &Option<Result<Vec<String>, Finding>>,
    findings: &mut Vec<Finding>,
) {
    let present = match bridges {
        Some(Ok(present)) => present,
        Some(Err(error)) => {
            note_call_failure(error, findings);
            return;
        }
        None => return,
    };
    for bridge in fitness::missing_bridges(&request.bridges, present) {
        findings.push(Finding::new(
            Reason::BridgeNotFound,
            format!(
                "Bridge {bridge} does not exist on node {name} (it has: {}).",
                present.join(", ")
            ),
        ));
    }
    // A clone keeps its template's NICs, and PVE refuses to start a VM whose NIC names a
    // bridge the node lacks: placement leaves such a node out, so does this.
    for wanted in &request.templates {
        let copies = facts.templates.get(wanted).map_or(&[][..], Vec::as_slice);
        let Some(TemplateFact::Found {
            vmid,
            is_template: true,
            networks,
            ..
        }) = copy_for(copies, name)
        else {
            continue;
        };
        let used: Vec<&str> = networks.iter().map(|(bridge, _)| bridge.as_str()).collect();
        for bridge in fitness::missing_bridges(&used, present) {
            let finding = Finding::new(
                Reason::BridgeNotFound,
                format!(
                    "Template {wanted} (VMID {vmid}) has a NIC on bridge {bridge}, which node \
                    {name} lacks (it has: {}); a clone keeps the template's NICs, and PVE refuses \
                    to start a VM on a missing bridge.",
                    present.join(", ")
                ),
            );
            if !findings.contains(&finding) {
                findings.push(finding);
            }
        }
    }
}

/// Every privilege the provider needs for VMs on this node that the token lacks, into
/// `findings`.
fn judge_privileges(
    request: &HealthRequest,
    facts: &ClusterSnapshot,
    name: &str,
    findings: &mut Vec<Finding>,
) {
    match &facts.permissions {
        Ok(perms) => {
            let missing = missing_privileges(request, facts, name, perms);
            for (path, privilege) in &missing {
                let hint = requirements::privilege_hint(privilege).unwrap_or_default();
                findings.push(Finding::new(
                    Reason::PermissionMissing,
                    format!("The token lacks {privilege} on {path}.{hint}"),
                ));
            }
        }
        Err(error) => {
            note_call_failure(error, findings);
        }
    }
}

/// `(ACL path, privilege)` pairs the provider needs for VMs on `node` and the token lacks.
pub fn missing_privileges(
    request: &HealthRequest,
    facts: &ClusterSnapshot,
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
    let mut networks: BTreeSet<(String, Option<u16>)> = request
        .bridges
        .iter()
        .map(|bridge| (bridge.clone(), None))
        .collect();
    for fact in facts.templates.values().flatten() {
        if let TemplateFact::Found {
            vmid,
            disk_storages: storages,
            networks: nics,
            ..
        } = fact
        {
            need(format!("/vms/{vmid}"), TEMPLATE_PRIVILEGES);
            if request.clone_storage.is_none() {
                disk_storages.extend(storages.iter().cloned());
            }
            networks.extend(nics.iter().cloned());
        }
    }
    if facts.templates.is_empty() {
        need("/vms".to_owned(), TEMPLATE_PRIVILEGES);
    }
    for storage in disk_storages {
        need(format!("/storage/{storage}"), DISK_STORAGE_PRIVILEGES);
    }
    for (bridge, tag) in networks {
        let path = match tag {
            Some(tag) => format!("/sdn/zones/localnetwork/{bridge}/{tag}"),
            None => format!("/sdn/zones/localnetwork/{bridge}"),
        };
        need(path, BRIDGE_PRIVILEGES);
    }
    for pool in &request.pools {
        need(format!("/pool/{pool}"), POOL_PRIVILEGES);
    }
    if request.ha {
        need("/".to_owned(), super::requirements::HA_PRIVILEGES);
    }
    // PVE applies a pool's ACLs to its member VMs: when every VM goes into one of `pools`,
    // a VM privilege held on each of them is as good as one on `/vms`.
    let held_by_pools = |privilege: &str| {
        !request.pools.is_empty()
            && request
                .pools
                .iter()
                .all(|pool| has_privilege(perms, &format!("/pool/{pool}"), privilege))
    };
    let held = |path: &str, privilege: &str| {
        has_privilege(perms, path, privilege)
            || requirements::COVERED_BY
                .iter()
                .any(|(p, by)| *p == privilege && has_privilege(perms, path, by))
    };
    let mut seen = BTreeSet::new();
    needed
        .into_iter()
        .filter(|(path, privilege)| !held(path, privilege))
        .filter(|(path, privilege)| {
            !(path == "/vms" && VM_PRIVILEGES.contains(privilege) && held_by_pools(privilege))
        })
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
    use std::collections::BTreeMap;

    use pve::nodes::{NodeStatus, NodeSummary};

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
            .chain(POOL_PRIVILEGES)
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
            pools: vec![],
            clone_storage: None,
            ha: false,
        }
    }

    fn template_on(node: &str, storages: &[&str]) -> TemplateFact {
        TemplateFact::Found {
            vmid: 9000,
            node: node.into(),
            is_template: true,
            node_online: true,
            disk_storages: storages.iter().map(|s| s.to_string()).collect(),
            networks: vec![("vmbr0".into(), None)],
        }
    }

    fn facts(template: TemplateFact) -> ClusterSnapshot {
        ClusterSnapshot {
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

    /// #44: each `_ok` is derived from its check's findings: a failed storage listing is
    /// one finding on the node, and both checks that needed the listing (the ISO storage,
    /// and a template on another node whose disks must be on a shared storage here) fail
    /// by it; the checks that did not need it pass.
    #[test]
    fn a_failed_listing_is_one_finding_failing_each_check_that_needed_it() {
        let failed = Finding::new(Reason::ApiError, "Unable to list the storages of node pve9");
        let node = NodeFacts {
            storages: Some(Err(failed.clone())),
            ..healthy_node("pve9")
        };
        let report = judge_one(template_on("pve1", &["vmdata"]), node);
        assert_eq!(report.findings, vec![failed]);
        assert!(!report.iso_storage_ok && !report.templates_ok);
        assert!(report.bridges_ok && report.privileges_ok);
        let here = judge_one(template_on("pve9", &["local-lvm"]), healthy_node("pve9"));
        assert!(here.findings.is_empty());
        assert!(here.iso_storage_ok && here.templates_ok && here.bridges_ok && here.privileges_ok);
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
    fn a_node_lacking_the_templates_bridge_is_not_eligible() {
        let with_bridges = |names: &[&str]| NodeFacts {
            bridges: Some(Ok(names.iter().map(|b| b.to_string()).collect())),
            ..healthy_node("pve2")
        };
        let lacking = judge_one(template_on("pve1", &["vmdata"]), with_bridges(&["vmbr1"]));
        assert_eq!(lacking.reasons(), vec![Reason::BridgeNotFound]);
        assert!(!lacking.bridges_ok && lacking.templates_ok);
        assert!(
            lacking.findings[0].message.contains("bridge vmbr0"),
            "{:?}",
            lacking.findings
        );
        let having = judge_one(template_on("pve1", &["vmdata"]), with_bridges(&["vmbr0"]));
        assert!(having.bridges_ok && having.findings.is_empty());
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
            networks: vec![],
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

    /// Cloud-init's verdict needs VM.GuestAgent.FileRead, or VM.GuestAgent.Unrestricted
    /// which covers it (qemu-server `API2/Qemu/Agent.pm`).
    #[test]
    fn file_read_is_needed_unless_unrestricted_covers_it() {
        let missing_for = |perms: Permissions| {
            let facts = ClusterSnapshot {
                permissions: Ok(perms),
                ..facts(template_on("pve1", &["vmdata"]))
            };
            missing_privileges(
                &request(),
                &facts,
                "pve1",
                facts.permissions.as_ref().unwrap(),
            )
        };
        let mut perms = all_privileges();
        perms.get_mut("/").unwrap().remove("VM.GuestAgent.FileRead");
        assert_eq!(
            missing_for(perms.clone()),
            vec![("/vms".to_owned(), "VM.GuestAgent.FileRead")]
        );
        let hint = requirements::privilege_hint("VM.GuestAgent.FileRead").unwrap();
        assert!(hint.contains("pveum role modify"), "{hint}");
        perms
            .get_mut("/")
            .unwrap()
            .insert("VM.GuestAgent.Unrestricted".to_owned(), true);
        assert_eq!(missing_for(perms), vec![]);
    }

    #[test]
    fn missing_privileges_name_path_and_privilege() {
        let mut perms = all_privileges();
        perms
            .get_mut("/")
            .unwrap()
            .remove("Datastore.AllocateTemplate");
        let facts = ClusterSnapshot {
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

    /// Every privilege PVE checks on the provider's calls is asked for where PVE checks
    /// it, and a missing one is named with its path.
    #[test]
    fn each_privilege_pve_checks_is_named_when_missing() {
        let template = TemplateFact::Found {
            vmid: 9000,
            node: "pve1".into(),
            is_template: true,
            node_online: true,
            disk_storages: vec!["vmdata".into()],
            networks: vec![("vmbr0".into(), None), ("vmbr1".into(), Some(20))],
        };
        let request = HealthRequest {
            pools: vec!["proxies".into()],
            ..request()
        };
        let cases = [
            ("VM.Config.CDROM", "/vms"),
            ("Datastore.AllocateSpace", "/storage/vmdata"),
            ("SDN.Use", "/sdn/zones/localnetwork/vmbr0"),
            ("Pool.Audit", "/pool/proxies"),
        ];
        for (privilege, path) in cases {
            let mut grants = all_privileges();
            grants.get_mut("/").unwrap().remove(privilege);
            let facts = ClusterSnapshot {
                permissions: Ok(grants),
                ..facts(template.clone())
            };
            let missing = missing_privileges(
                &request,
                &facts,
                "pve1",
                facts.permissions.as_ref().unwrap(),
            );
            assert!(
                missing.contains(&(path.to_owned(), privilege)),
                "{privilege}: {missing:?}"
            );
            let report = judge(
                &request,
                &facts,
                vec!["pve1".into()],
                vec![healthy_node("pve1")],
                vec![],
            );
            let node = &report.nodes[0];
            assert!(!node.privileges_ok);
            assert_eq!(node.reasons(), vec![Reason::PermissionMissing]);
            assert!(
                node.findings
                    .iter()
                    .any(|f| f.message == format!("The token lacks {privilege} on {path}.")),
                "{:?}",
                node.findings
            );
        }

        // A VLAN-tagged NIC needs SDN.Use on the VLAN's path; the bridge's own propagates.
        let mut grants = all_privileges();
        grants.get_mut("/").unwrap().remove("SDN.Use");
        grants.insert(
            "/sdn/zones/localnetwork/vmbr0".to_owned(),
            BTreeMap::from([("SDN.Use".to_owned(), true)]),
        );
        let facts = ClusterSnapshot {
            permissions: Ok(grants),
            ..facts(template)
        };
        let missing = missing_privileges(
            &request,
            &facts,
            "pve1",
            facts.permissions.as_ref().unwrap(),
        );
        assert_eq!(
            missing,
            vec![("/sdn/zones/localnetwork/vmbr1/20".to_owned(), "SDN.Use")]
        );
    }

    #[test]
    fn vm_privileges_may_come_from_the_pools_the_vms_go_into() {
        let mut grants = all_privileges();
        grants.get_mut("/").unwrap().remove("VM.Config.Memory");
        grants.insert(
            "/pool/proxies".to_owned(),
            BTreeMap::from([("VM.Config.Memory".to_owned(), true)]),
        );
        let facts = ClusterSnapshot {
            permissions: Ok(grants),
            ..facts(template_on("pve1", &["vmdata"]))
        };
        let perms = facts.permissions.as_ref().unwrap();
        let pooled = HealthRequest {
            pools: vec!["proxies".into()],
            ..request()
        };
        assert_eq!(missing_privileges(&pooled, &facts, "pve1", perms), vec![]);
        assert_eq!(
            missing_privileges(&request(), &facts, "pve1", perms),
            vec![("/vms".to_owned(), "VM.Config.Memory")]
        );
        let two_pools = HealthRequest {
            pools: vec!["proxies".into(), "other".into()],
            ..request()
        };
        assert!(
            missing_privileges(&two_pools, &facts, "pve1", perms)
                .contains(&("/vms".to_owned(), "VM.Config.Memory"))
        );
    }

    #[test]
    fn ha_needs_sys_console_on_the_root() {
        let mut grants = all_privileges();
        let facts = ClusterSnapshot {
            permissions: Ok(grants.clone()),
            ..facts(template_on("pve1", &["vmdata"]))
        };
        let ha = HealthRequest {
            ha: true,
            ..request()
        };
        let perms = facts.permissions.as_ref().unwrap();
        assert_eq!(
            missing_privileges(&ha, &facts, "pve1", perms),
            vec![("/".to_owned(), "Sys.Console")]
        );
        grants
            .get_mut("/")
            .unwrap()
            .insert("Sys.Console".to_owned(), true);
        assert_eq!(missing_privileges(&ha, &facts, "pve1", &grants), vec![]);
        assert_eq!(
            missing_privileges(&request(), &facts, "pve1", perms),
            vec![]
        );
        assert!(requirements::privilege_hint("Sys.Console").is_some_and(|h| h.contains("pveum")));
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
                networks: vec![],
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

        let facts = ClusterSnapshot {
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
}
