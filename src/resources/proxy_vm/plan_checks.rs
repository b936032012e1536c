//! Plan-time checks against the cluster: what would make a create (or an update's changed
//! attributes) fail at apply is refused at plan, on the attribute at fault, naming what
//! exists instead. Only planned creates and changed attributes are checked, so a no-change
//! plan makes no request; facts are shared by every resource of one plan
//! (`crate::cluster_facts`). When the cluster cannot be reached the plan says so in a warning
//! and apply checks again; nothing here ever writes.

use crate::fitness::{self, Content, StorageProblem};
use pve::ErrorKind;
use tfplugin::{AttributePath, Diagnostic, Diagnostics, Severity, Value};

use super::attr;
use super::lifecycle::prechecks::{
    BridgeUse, Template, check_disk_size, choose_template, judge_template, with_networks,
};
use super::lifecycle::{StepError, placement, refusal_at_plan};
use super::model::{self, Desired};
use super::seed_plan;
use crate::context::Configured;
use crate::diagnostics::{connection_hint, with_hint};
use crate::invocation::Invocation;
use crate::ownership::{self, Ownership};

/// What the checks found, and what they could not check.
struct Findings {
    diagnostics: Diagnostics,
    /// Why a fact could not be had, once per plan call (a warning, not an error).
    unchecked: Vec<String>,
    /// The cluster could not be reached at all: further checks are pointless.
    unreachable: bool,
}

impl Findings {
    fn error(&mut self, attribute: &str, summary: &str, detail: String) {
        self.error_at(AttributePath::root().attr(attribute), summary, detail);
    }

    fn error_at(&mut self, path: AttributePath, summary: &str, detail: String) {
        self.diagnostics
            .push(Diagnostic::error(summary, detail).with_attribute(path));
    }

    /// Records why a fact is missing; errors the user must fix in the provider block (a
    /// certificate, a refused token) are errors, the rest warnings.
    fn missing(&mut self, what: &str, error: &pve::Error) {
        if self.unreachable {
            return;
        }
        match (error.connect_failure(), error.kind()) {
            (Some(pve::ConnectFailure::Certificate), _) => {
                self.unreachable = true;
                self.diagnostics.error(
                    "The PVE endpoint's certificate is not trusted",
                    format!("{error}\n\n{}", connection_hint(error).unwrap_or_default()),
                );
            }
            (Some(_), _) => {
                self.unreachable = true;
                self.unchecked.push(format!(
                    "the cluster could not be reached: {error}. {}",
                    connection_hint(error).unwrap_or_default()
                ));
            }
            (None, ErrorKind::Auth) if error.status() == Some(401) => {
                self.unreachable = true;
                self.diagnostics.error(
                    "PVE refused the API token",
                    with_hint(error.to_string(), error),
                );
            }
            _ => self.unchecked.push(format!("{what}: {error}")),
        }
    }
}

fn known<'a>(planned: &'a Value, name: &str) -> Option<&'a str> {
    planned.get_attr(name).as_str().filter(|s| !s.is_empty())
}

fn list(names: impl IntoIterator<Item = String>) -> String {
    let mut names: Vec<String> = names.into_iter().collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// The checks for a planned create (or the create half of a replacement, whose predecessor
/// the journal records: `note_replacement`).
pub async fn check_create(configured: &Configured, planned: &Value, config: &Value) -> Diagnostics {
    check_create_at(configured, planned, config, Stage::Plan).await
}

/// The plan's checks again, as the first thing a create does: only refusals, since a plan
/// that may have been a destroy's refresh reported them as warnings. An explicit `vmid` is
/// judged by the create itself, which also knows this working directory's own VMs.
pub async fn recheck_before_create(
    configured: &Configured,
    planned: &Value,
    config: &Value,
) -> Diagnostics {
    let mut checks = check_create_at(configured, planned, config, Stage::Apply).await;
    checks.0.retain(|d| d.severity == Severity::Error);
    checks
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Plan,
    Apply,
}

async fn check_create_at(
    configured: &Configured,
    planned: &Value,
    config: &Value,
    stage: Stage,
) -> Diagnostics {
    let mut findings = Findings {
        diagnostics: Diagnostics::new(),
        unchecked: Vec::new(),
        unreachable: false,
    };
    let node = known(planned, attr::NODE);

    // Node-bound checks need a good node.
    let node_ok = match node {
        Some(node) => check_node(configured, node, &mut findings).await,
        None => false,
    };
    let template = find_template(configured, planned, node, &mut findings).await;
    if !findings.unreachable {
        check_candidates(configured, planned, &mut findings).await;
    }
    if let Some(found) = &template {
        if let (Some(node), true) = (node, node_ok) {
            check_template_reachable(configured, found, node, &mut findings).await;
        }
        // Unset: some node must be eligible for placement (unknown at plan: apply decides).
        if config.get_attr(attr::NODE).is_null() && !findings.unreachable {
            check_placement(configured, planned, found, &mut findings).await;
        }
        let disk_gib = planned
            .get_attr(attr::DISK_GIB)
            .as_i64()
            .and_then(|n| u64::try_from(n).ok());
        let name = known(planned, attr::NAME).unwrap_or("this VM");
        if let Err(why) = check_disk_size(found, name, disk_gib) {
            findings.error(attr::DISK_GIB, "Disk smaller than the template's", why);
        }
    }

    if let (Some(node), true) = (node, node_ok) {
        for (attribute, content) in [(attr::SEED_STORAGE, "iso"), (attr::CLONE_STORAGE, "images")] {
            if let Some(storage) = known(planned, attribute) {
                // Not in the resource's configuration: it is the provider's default.
                let from_provider = config.get_attr(attribute).is_null();
                check_storage(
                    configured,
                    node,
                    storage,
                    attribute,
                    content,
                    from_provider,
                    &mut findings,
                )
                .await;
            }
        }
        if let Some(bridge) = known(planned, attr::BRIDGE) {
            check_bridge(configured, node, bridge, &mut findings).await;
        }
        check_networks(configured, node, planned, &mut findings).await;
        if stage == Stage::Plan
            && let Some(warning) = seed_plan::kept_seed_warning(configured, planned, node).await
        {
            findings.diagnostics.push(warning);
        }
        if let Some(found) = &template {
            let bridge = known(planned, attr::BRIDGE);
            let networks = model::networks::desired(planned);
            let uses = with_networks(found.bridges_used(bridge), networks.as_deref());
            check_template_bridges(configured, node, found, uses, &mut findings).await;
        }
    }
    if let Some(pool) = known(planned, attr::POOL)
        && !findings.unreachable
    {
        check_pool(configured, pool, &mut findings).await;
    }
    if stage == Stage::Plan && !findings.unreachable {
        check_name(configured, planned, config, &mut findings).await;
    }
    if let Some(vmid) = planned
        .get_attr(attr::VMID)
        .as_i64()
        .and_then(|n| u32::try_from(n).ok())
        && !findings.unreachable
        && stage == Stage::Plan
    {
        check_vmid(configured, planned, vmid, &mut findings).await;
    }
    finish(findings)
}

/// The checks for an update: only what it changes and the cluster can refuse.
pub async fn check_update(
    configured: &Configured,
    planned: &Value,
    changed: &[String],
) -> Diagnostics {
    let mut findings = Findings {
        diagnostics: Diagnostics::new(),
        unchecked: Vec::new(),
        unreachable: false,
    };
    let node = known(planned, attr::CURRENT_NODE).or_else(|| known(planned, attr::NODE));
    if changed.iter().any(|c| c == attr::BRIDGE)
        && let (Some(node), Some(bridge)) = (node, known(planned, attr::BRIDGE))
    {
        check_bridge(configured, node, bridge, &mut findings).await;
    }
    if changed.iter().any(|c| c == attr::NODE_CANDIDATES) {
        check_candidates(configured, planned, &mut findings).await;
    }
    if changed.iter().any(|c| c == attr::NETWORKS)
        && let Some(node) = node
    {
        check_networks(configured, node, planned, &mut findings).await;
    }
    finish(findings)
}

/// The checks' findings as a plan reports them. In an ordinary plan or apply a refusal
/// fails the plan before any write. When the plan may be the refresh that starts a destroy
/// (see `crate::invocation`), the same findings are warnings: the refused create may never
/// happen, and an error would block the destroy. Apply runs the checks again before it
/// writes anything, so a create that does go ahead is refused there, on the same attribute.
pub fn severity_for(checks: Diagnostics, invocation: Invocation) -> Diagnostics {
    if invocation == Invocation::PlanOrApply {
        return checks;
    }
    Diagnostics(
        checks
            .0
            .into_iter()
            .map(|mut diagnostic| {
                if diagnostic.severity == Severity::Error {
                    diagnostic.severity = Severity::Warning;
                    diagnostic.detail.push_str(PLAN_MAY_BE_A_DESTROY);
                }
                diagnostic
            })
            .collect(),
    )
}

const PLAN_MAY_BE_A_DESTROY: &str = "\n\nThis is a warning, not an error, because this plan may be \
                                     the refresh that starts a destroy, which must never be \
                                     blocked. An apply that creates or changes this VM checks \
                                     again and stops here before any write.";

fn finish(mut findings: Findings) -> Diagnostics {
    if !findings.unchecked.is_empty() {
        findings.diagnostics.warning(
            "Not checked against the cluster at plan",
            format!(
                "The plan could not check this VM's settings against the cluster: {}. Apply checks \
                 them again before it changes anything.",
                findings.unchecked.join("; ")
            ),
        );
    }
    findings.diagnostics
}

/// With `node` unset, at least one node must be eligible; otherwise every node's reason.
async fn check_placement(
    configured: &Configured,
    planned: &Value,
    template: &Template,
    findings: &mut Findings,
) {
    let listing = match configured
        .runtime
        .cluster_vms_once(&configured.client, false)
        .await
    {
        Ok(listing) => listing,
        Err(e) => return findings.missing("the cluster's VM listing", &e),
    };
    let desired = Desired::from_plan(
        planned,
        &Value::Null,
        &configured.seed_storage,
        &configured.fleet,
    );
    let views = match placement::gather(configured, &desired, &listing, template).await {
        Ok(views) => views,
        Err(e) => return findings.missing("the cluster's nodes", &e),
    };
    if views.is_empty() && desired.node_candidates.is_some() {
        // No candidate is in the cluster: `check_candidates` said so on the attribute.
        return;
    }
    let memory_mib = desired.memory_mib.unwrap_or(template.memory_mib);
    if let Err(rejected) = placement::judge(&views, memory_mib << 20) {
        // The candidates chose the nodes judged, when set; else the missing `node`.
        let attribute = if desired.node_candidates.is_some() {
            attr::NODE_CANDIDATES
        } else {
            attr::NODE
        };
        findings.error(
            attribute,
            "No node can run this VM",
            placement::no_node_message(&rejected, desired.node_candidates.as_deref()),
        );
    }
}

/// The node: a member of the cluster, and online. Whether it is.
async fn check_node(configured: &Configured, node: &str, findings: &mut Findings) -> bool {
    let (client, facts) = (&configured.client, &configured.facts);
    let mut node_ok = false;
    match facts.nodes(client).await {
        Ok(nodes) => match nodes.iter().find(|n| n.node == node) {
            None => findings.error(
                attr::NODE,
                "Node not in the cluster",
                format!(
                    "node `{node}` is not in the cluster (nodes: {}).",
                    list(nodes.iter().map(|n| n.node.clone()))
                ),
            ),
            Some(n) if !n.is_online() => findings.error(
                attr::NODE,
                "Node offline",
                format!(
                    "node `{node}` is {} in the cluster; a VM cannot be created there now (online \
                     nodes: {}).",
                    n.status,
                    list(
                        nodes
                            .iter()
                            .filter(|n| n.is_online())
                            .map(|n| n.node.clone())
                    )
                ),
            ),
            Some(_) => node_ok = true,
        },
        Err(e) => findings.missing("the cluster's nodes", &e),
    }
    node_ok
}

/// The template, from the listing every resource of this plan shares.
async fn find_template(
    configured: &Configured,
    planned: &Value,
    node: Option<&str>,
    findings: &mut Findings,
) -> Option<Template> {
    let (client, facts) = (&configured.client, &configured.facts);
    let mut template: Option<Template> = None;
    if let Some(wanted) = known(planned, attr::TEMPLATE)
        && !findings.unreachable
    {
        match configured.runtime.cluster_vms_once(client, false).await {
            Ok(listing) => match choose_template(&listing, wanted, node.unwrap_or_default()) {
                Err(why) => findings.error(attr::TEMPLATE, "Template not found", why),
                Ok(vm) => match facts.config(client, &vm.node, vm.vmid).await {
                    Ok(config) => match judge_template(vm, &config, wanted) {
                        Ok(found) => template = Some(found),
                        Err(why) => findings.error(attr::TEMPLATE, "Not a template", why),
                    },
                    Err(e) => findings.missing("the template's config", &e),
                },
            },
            Err(e) => findings.missing("the cluster's VM listing", &e),
        }
    }
    template
}

/// The pool exists (as far as the token may see).
async fn check_pool(configured: &Configured, pool: &str, findings: &mut Findings) {
    let (client, facts) = (&configured.client, &configured.facts);
    match facts.pools(client).await {
        Ok(pools) if !pools.iter().any(|p| p.poolid == pool) => {
            // PVE lists only the pools the token may audit: a hidden pool may exist.
            match facts.may_audit_pool(client, pool).await.as_deref() {
                Ok(true) => findings.error(
                    attr::POOL,
                    "Pool not found",
                    format!(
                        "pool `{pool}` does not exist (pools: {}). Create it in Datacenter → \
                         Permissions → Pools, or leave `pool` unset.",
                        list(pools.iter().map(|p| p.poolid.clone()))
                    ),
                ),
                Ok(false) => findings.unchecked.push(format!(
                    "pool `{pool}`: the token lacks Pool.Audit on /pool/{pool}, so PVE does not \
                     show it (grant it, see the PVE setup guide)"
                )),
                Err(e) => findings.missing("the token's privileges on the pool", e),
            }
        }
        Ok(_) => {}
        Err(e) => findings.missing("the cluster's pools", &e),
    }
}

/// Every name in `node_candidates` must be a node of the cluster: a typo would otherwise
/// quietly narrow placement (or leave it no node at all).
async fn check_candidates(configured: &Configured, planned: &Value, findings: &mut Findings) {
    let Some(candidates) = planned.get_attr(attr::NODE_CANDIDATES).as_elements() else {
        return;
    };
    let candidates: Vec<&str> = candidates.iter().filter_map(Value::as_str).collect();
    if candidates.is_empty() {
        return;
    }
    let nodes = match configured.facts.nodes(&configured.client).await {
        Ok(nodes) => nodes,
        Err(e) => return findings.missing("the cluster's nodes", &e),
    };
    let unknown: Vec<String> = candidates
        .iter()
        .filter(|name| !nodes.iter().any(|n| n.node == **name))
        .map(|name| format!("`{name}`"))
        .collect();
    if unknown.is_empty() {
        return;
    }
    let (what, verb) = if unknown.len() == 1 {
        ("node", "is")
    } else {
        ("nodes", "are")
    };
    findings.error(
        attr::NODE_CANDIDATES,
        "Node not in the cluster",
        format!(
            "node_candidates names {what} {} that {verb} not in the cluster (nodes: {}). Correct \
             the name, or remove it from node_candidates.",
            unknown.join(", "),
            list(nodes.iter().map(|n| n.node.clone()))
        ),
    );
}

/// A template on another node can be cloned onto `node` only when its disk is on storage
/// shared with it (PVE's clone with `target`).
async fn check_template_reachable(
    configured: &Configured,
    template: &Template,
    node: &str,
    findings: &mut Findings,
) {
    if template.node == node {
        return;
    }
    let Some(storage) = &template.disk_storage else {
        return;
    };
    match configured
        .facts
        .storages(&configured.client, &template.node)
        .await
    {
        Ok(storages) => {
            let shared = storages.iter().any(|s| s.storage == *storage && s.shared);
            if !shared {
                findings.error(
                    attr::TEMPLATE,
                    "Template not reachable from the node",
                    format!(
                        "the template (VM {} on node {}) has its disk on `{storage}`, which is not \
                         shared with node {node}: PVE can clone it only onto {}. Set node = \
                         \"{}\", keep a copy of the template on {node}, or move its disks to \
                         shared storage.",
                        template.vmid, template.node, template.node, template.node
                    ),
                );
            }
        }
        Err(e) => findings.missing("the template node's storages", &e),
    }
}

/// A storage must exist on the node, be enabled and active there, and take `content`.
async fn check_storage(
    configured: &Configured,
    node: &str,
    storage: &str,
    attribute: &str,
    content: &str,
    from_provider: bool,
    findings: &mut Findings,
) {
    if findings.unreachable {
        return;
    }
    let before = findings.diagnostics.0.len();
    check_storage_on(configured, node, storage, attribute, content, findings).await;
    if from_provider {
        // Terraform can point only at this resource's block; say where the value came from.
        for diagnostic in &mut findings.diagnostics.0[before..] {
            diagnostic.detail.push_str(&format!(
                " The value is the provider's `{attribute}` default: change it in the provider \
                 block, or set `{attribute}` on this resource."
            ));
        }
    }
}

async fn check_storage_on(
    configured: &Configured,
    node: &str,
    storage: &str,
    attribute: &str,
    content: &str,
    findings: &mut Findings,
) {
    let storages = match configured.facts.storages(&configured.client, node).await {
        Ok(storages) => storages,
        Err(e) => return findings.missing(&format!("the storages of node {node}"), &e),
    };
    let content = if content == "iso" {
        Content::Iso
    } else {
        Content::Images
    };
    let kind = content.kind();
    let fitting = || list(fitness::storages_taking(&storages, content));
    let content_types = || {
        let found = storages.iter().find(|s| s.storage == storage);
        found.map(|s| s.content.clone()).unwrap_or_default()
    };
    match fitness::storage(&storages, storage, content) {
        Err(StorageProblem::Missing) => findings.error(
            attribute,
            "Storage not found",
            format!(
                "storage `{storage}` does not exist on node {node} (storages there that take \
                 {kind}: {}).",
                fitting()
            ),
        ),
        Err(StorageProblem::Inactive) => findings.error(
            attribute,
            "Storage not active",
            format!(
                "storage `{storage}` is not active on node {node}. Enable it for this node \
                 (Datacenter → Storage → Nodes), or choose another (storages there that take \
                 {kind}: {}).",
                fitting()
            ),
        ),
        Err(StorageProblem::LacksContent) => findings.error(
            attribute,
            "Storage does not take this content",
            format!(
                "storage `{storage}` on node {node} does not take {kind} (`{}`; its content \
                 types: {}). Add `{}` to it in Datacenter → Storage, or choose another \
                 (storages there that do: {}).",
                content.pve(),
                content_types(),
                content.pve(),
                fitting()
            ),
        ),
        Ok(_) => {}
    }
}

/// The bridges of `wanted` a node with `bridges` lacks (the one rule, `fitness`).
fn missing_on<'a>(wanted: &'a [&'a str], bridges: &[pve::nodes::NetworkInterface]) -> Vec<&'a str> {
    let present: Vec<&str> = bridges.iter().map(|b| b.iface.as_str()).collect();
    fitness::missing_bridges(wanted, &present)
}

async fn check_bridge(configured: &Configured, node: &str, bridge: &str, findings: &mut Findings) {
    if findings.unreachable {
        return;
    }
    match configured.facts.bridges(&configured.client, node).await {
        Ok(bridges) if !missing_on(&[bridge], &bridges).is_empty() => findings.error(
            attr::BRIDGE,
            "Bridge not found",
            format!(
                "bridge `{bridge}` does not exist on node {node} (bridges there: {}).",
                list(bridges.iter().map(|b| b.iface.clone()))
            ),
        ),
        Ok(_) => {}
        Err(e) => findings.missing(&format!("the bridges of node {node}"), &e),
    }
}

/// Each `networks` element's bridge must exist on `node` (PVE refuses to start a VM whose
/// NIC names a bridge the node lacks): refused on the element's `bridge`.
async fn check_networks(
    configured: &Configured,
    node: &str,
    planned: &Value,
    findings: &mut Findings,
) {
    let Some(nics) = model::networks::desired(planned).filter(|nics| !nics.is_empty()) else {
        return;
    };
    if findings.unreachable {
        return;
    }
    let bridges = match configured.facts.bridges(&configured.client, node).await {
        Ok(bridges) => bridges,
        Err(e) => return findings.missing(&format!("the bridges of node {node}"), &e),
    };
    for (index, nic) in nics.iter().enumerate() {
        if missing_on(&[nic.bridge.as_str()], &bridges).is_empty() {
            continue;
        }
        findings.error_at(
            // The element: Terraform points at it (a path past it would find `bridge`).
            AttributePath::root()
                .attr(attr::NETWORKS)
                .index(index as i64),
            "Bridge not found",
            format!(
                "bridge `{}` of networks[{index}] (net{}) does not exist on node {node} \
                 (bridges there: {}). Use one of them, or create the bridge on the node.",
                nic.bridge,
                index + 1,
                list(bridges.iter().map(|b| b.iface.clone()))
            ),
        );
    }
}

/// The bridges the clone keeps from its template (net0's unless `bridge` is set) must exist
/// on `node`: PVE refuses to start a VM whose NIC names a bridge the node lacks. Pointed at
/// `node`, the attribute that chose where the template's bridges must be.
async fn check_template_bridges(
    configured: &Configured,
    node: &str,
    template: &Template,
    uses: Vec<BridgeUse>,
    findings: &mut Findings,
) {
    let kept: Vec<_> = uses
        .into_iter()
        .filter(|used| used.template_nic.is_some())
        .collect();
    if kept.is_empty() || findings.unreachable {
        return;
    }
    let bridges = match configured.facts.bridges(&configured.client, node).await {
        Ok(bridges) => bridges,
        Err(e) => return findings.missing(&format!("the bridges of node {node}"), &e),
    };
    let wanted: Vec<&str> = kept.iter().map(|used| used.bridge.as_str()).collect();
    let lacking = missing_on(&wanted, &bridges);
    let missing: Vec<String> = kept
        .iter()
        .filter(|used| lacking.contains(&used.bridge.as_str()))
        .map(|used| used.describe())
        .collect();
    if missing.is_empty() {
        return;
    }
    let hint = if kept
        .iter()
        .any(|used| used.template_nic.as_deref() == Some("net0"))
    {
        " Set `bridge` to one of them (it replaces net0's), choose another `node`,"
    } else {
        " Choose another `node`,"
    };
    findings.error(
        attr::NODE,
        "Bridge not on the node",
        format!(
            "node `{node}` has no bridge {}, which the VM keeps from its template (VM {} on {}); \
             PVE would refuse to start it there (bridges on {node}: {}).{hint} or add the bridge \
             to the node.",
            missing.join(", "),
            template.vmid,
            template.node,
            list(bridges.iter().map(|b| b.iface.clone()))
        ),
    );
}

/// How long the plan waits for a clone onto a VM of the name to end before it says it could
/// not judge that VM (the apply judges it again).
const NAME_CHECK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// A VM of the name anywhere in the cluster that the create would refuse (another state's
/// finished VM, or one being destroyed): the create's own decision (`lifecycle::slot`), so
/// plan and apply give one answer (#38, #44).
async fn check_name(
    configured: &Configured,
    planned: &Value,
    config: &Value,
    findings: &mut Findings,
) {
    if known(planned, attr::NAME).is_none() {
        return;
    }
    let client = &configured.client;
    let listing = match configured.runtime.cluster_vms_once(client, false).await {
        Ok(listing) => listing,
        Err(e) => return findings.missing("the cluster's VM listing", &e),
    };
    let desired = Desired::from_plan(planned, config, &configured.seed_storage, &configured.fleet);
    let deadline = tokio::time::Instant::now() + NAME_CHECK_PATIENCE;
    match refusal_at_plan(configured, &desired, &listing, deadline).await {
        Ok(None) => {}
        Ok(Some(refusal)) => {
            let summary = match refusal {
                StepError::BeingDestroyed { .. } => "Proxy VM being destroyed",
                _ => "Proxy VM already exists",
            };
            findings.error(attr::NAME, summary, refusal.to_string());
        }
        Err(StepError::Pve(e)) => findings.missing("a VM of the same name", &e),
        Err(e) => findings
            .unchecked
            .push(format!("a VM of the same name: {e}")),
    }
}

/// An explicit VMID must be free, or hold a VM of this very name (judged with the name's
/// other VMs by `check_name`).
async fn check_vmid(configured: &Configured, planned: &Value, vmid: u32, findings: &mut Findings) {
    let client = &configured.client;
    let listing = match configured.runtime.cluster_vms_once(client, false).await {
        Ok(listing) => listing,
        Err(e) => return findings.missing("the cluster's VM listing", &e),
    };
    let Some(entry) = listing.iter().find(|vm| vm.vmid == vmid) else {
        return;
    };
    if entry.template {
        return findings.error(
            attr::VMID,
            "VMID taken",
            format!(
                "VMID {vmid} is the template `{}` on {}. Choose another `vmid`, or leave it unset \
                 to derive one.",
                entry.name.as_deref().unwrap_or("?"),
                entry.node
            ),
        );
    }
    let config = match configured.facts.config(client, &entry.node, vmid).await {
        Ok(config) => config,
        Err(e) => return findings.missing(&format!("the config of VM {vmid}"), &e),
    };
    let name = known(planned, attr::NAME).unwrap_or_default();
    let fleet = planned
        .get_attr(attr::FLEET)
        .as_str()
        .unwrap_or(&configured.fleet);
    match ownership::classify(config.description().as_deref(), name, fleet) {
        Ownership::OursForThisName(_) => {}
        Ownership::OursForAnother(mark) => findings.error(
            attr::VMID,
            "VMID taken",
            format!(
                "VMID {vmid} is taken by the proxy VM {}; it is never modified. Choose another \
                 `vmid`, or leave it unset to derive one.",
                ownership::describe_owner(&mark)
            ),
        ),
        Ownership::Foreign => findings.error(
            attr::VMID,
            "VMID taken",
            format!(
                "VMID {vmid} is taken by `{}` on {}, a VM not managed by this provider; it is \
                 never modified. Choose another `vmid`, or leave it unset to derive one.",
                entry.name.as_deref().unwrap_or("?"),
                entry.node
            ),
        ),
    }
}
