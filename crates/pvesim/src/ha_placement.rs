//! Where an HA service may and should run: pve-ha-manager 5.2.0's `select_service_node`
//! (`src/PVE/HA/Manager.pm`) with the node affinity (`Rules/NodeAffinity.pm`
//! `get_node_affinity`) and resource affinity (`Rules/ResourceAffinity.pm`
//! `get_resource_affinity`, `apply_*_resource_affinity`) of the compiled rules, scored by
//! the basic scheduler (`Usage/Basic.pm`: services per node, running non-HA guests
//! included), and which services block or follow a move (`Config.pm`
//! `get_resource_motion_info`). Reads the world; changes nothing.

use std::collections::{BTreeMap, BTreeSet};

use crate::ha_rules::Compiled;
use crate::ha_state::Service;
use crate::world::World;

/// `select_service_node`'s `$node_preference`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preference {
    /// `none`: stay on the current node as long as the rules allow it.
    Stay,
    /// `best-score`: the best-scored allowed node (recovery).
    BestScore,
    /// `try-next`: the next node the service has not failed on (start failures).
    TryNext,
}

/// The nodes the CRM counts as online (`list_online_nodes`): up and not rebooting or failed.
pub fn online_nodes(world: &World) -> BTreeSet<String> {
    world
        .nodes
        .iter()
        .filter(|n| world.node_online(&n.name) && !world.ha.nodes_down.contains_key(&n.name))
        .map(|n| n.name.clone())
        .collect()
}

/// Every cluster node (the CRM's `list_nodes`).
pub fn cluster_nodes(world: &World) -> Vec<String> {
    world.nodes.iter().map(|n| n.name.clone()).collect()
}

/// The rules as the CRM compiled them this round.
pub fn compiled_rules(world: &World) -> Compiled {
    crate::ha_rules::compile(&world.ha.rules.rules, &cluster_nodes(world)).0
}

/// `Usage.pm` `get_used_service_nodes`: the nodes a service puts load on (current, target).
pub fn used_nodes(
    online: &BTreeSet<String>,
    service: &Service,
) -> (Option<String>, Option<String>) {
    let state = service.state.as_str();
    if matches!(state, "stopped" | "request_start") {
        return (None, None);
    }
    let current = matches!(
        state,
        "started"
            | "request_stop"
            | "fence"
            | "freeze"
            | "error"
            | "recovery"
            | "migrate"
            | "relocate"
    )
    .then(|| service.node.clone())
    .filter(|node| online.contains(node));
    let target = matches!(state, "migrate" | "relocate" | "request_start_balance")
        .then(|| service.target.clone())
        .flatten()
        .filter(|node| online.contains(node));
    (current, target)
}

/// `Usage/Basic.pm` `score_nodes_to_start_service`: how many guests use each online node,
/// HA services by their state and running guests outside HA (`get_basic_service_stats`).
pub fn node_scores(world: &World, online: &BTreeSet<String>) -> BTreeMap<String, usize> {
    let mut scores: BTreeMap<String, usize> = online.iter().map(|n| (n.clone(), 0)).collect();
    for service in world.ha.services.values() {
        let (current, target) = used_nodes(online, service);
        for node in current.into_iter().chain(target) {
            *scores.entry(node).or_default() += 1;
        }
    }
    let outside_ha = world
        .vms
        .values()
        .filter(|vm| vm.running && !world.ha.services.contains_key(&format!("vm:{}", vm.vmid)));
    for vm in outside_ha {
        if let Some(score) = scores.get_mut(&vm.node) {
            *score += 1;
        }
    }
    scores
}

/// `get_node_affinity`: (allowed, preferred) online nodes; preferred is the highest
/// priority class.
fn node_affinity(
    compiled: &Compiled,
    sid: &str,
    online: &BTreeSet<String>,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let Some(nodes) = compiled.node_affinity.get(sid) else {
        return (online.clone(), online.clone());
    };
    let allowed: BTreeSet<String> = nodes
        .keys()
        .filter(|n| online.contains(*n))
        .cloned()
        .collect();
    let best = allowed.iter().map(|n| nodes[n]).max();
    let preferred = allowed
        .iter()
        .filter(|n| Some(nodes[*n]) == best)
        .cloned()
        .collect();
    (allowed, preferred)
}

/// `get_resource_affinity`: the online nodes where services to keep together run (with
/// how many), and those where services to keep apart run or are moving to.
fn resource_affinity(
    world: &World,
    compiled: &Compiled,
    sid: &str,
    online: &BTreeSet<String>,
) -> (BTreeMap<String, usize>, BTreeSet<String>) {
    let (positive, negative) = compiled.affinitive(sid);
    let used = |csid: &String| {
        world
            .ha
            .services
            .get(csid)
            .map(|s| used_nodes(online, s))
            .unwrap_or((None, None))
    };
    let mut together: BTreeMap<String, usize> = BTreeMap::new();
    for csid in &positive {
        let (current, target) = used(csid);
        // Only the target counts while moving, so a moved partner is not pulled back
        // (fix #6801).
        if let Some(node) = target.or(current) {
            *together.entry(node).or_default() += 1;
        }
    }
    let mut separate = BTreeSet::new();
    for csid in &negative {
        let (current, target) = used(csid);
        separate.extend(current.into_iter().chain(target));
    }
    (together, separate)
}

/// `select_service_node`: the node `sid` should run on, or `None` when the rules leave no
/// online node.
pub fn select_node(
    world: &World,
    compiled: &Compiled,
    sid: &str,
    preference: Preference,
) -> Option<String> {
    let service = world.ha.services.get(sid)?;
    let failback = world.ha.resources.get(sid).is_none_or(|r| r.failback());
    let current = service.node.clone();
    let online = online_nodes(world);
    let (allowed, mut preferred) = node_affinity(compiled, sid, &online);
    if preferred.is_empty() {
        return None;
    }
    let (mut together, separate) = resource_affinity(world, compiled, sid, &online);
    let allowed_here = together.contains_key(&current) || !separate.contains(&current);
    if preference == Preference::Stay && !failback && allowed.contains(&current) && allowed_here {
        return Some(current);
    }
    if preference == Preference::TryNext {
        for node in &service.failed_nodes {
            preferred.remove(node);
        }
    }
    // `apply_negative_resource_affinity`, then `apply_positive_resource_affinity`: the
    // node with the most partners (ties by name).
    preferred.retain(|node| !separate.contains(node));
    together.retain(|node, _| preferred.contains(node));
    let majority = together
        .iter()
        .max_by(|(a, x), (b, y)| x.cmp(y).then(b.cmp(a)))
        .map(|(node, _)| node.clone());
    if let Some(majority) = majority {
        preferred.retain(|node| *node == majority);
    }
    if preference == Preference::Stay && preferred.contains(&current) {
        return Some(current);
    }
    let scores = node_scores(world, &online);
    let mut nodes: Vec<String> = preferred.into_iter().collect();
    nodes.sort_by_key(|n| (scores.get(n).copied().unwrap_or(0), n.clone()));
    let found = nodes.iter().position(|n| *n == current);
    match (preference, found) {
        (Preference::TryNext, Some(i)) if i + 1 < nodes.len() => Some(nodes[i + 1].clone()),
        _ => nodes.into_iter().next(),
    }
}

/// `get_resource_motion_info`: the services that move along with `sid` (positive
/// affinity) and, per online node, the services that block a move there (negative
/// affinity), each sorted.
pub fn motion_info(
    world: &World,
    compiled: &Compiled,
    sid: &str,
) -> (Vec<String>, BTreeMap<String, Vec<String>>) {
    let mut dependent = Vec::new();
    let mut blocking: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if !world.ha.is_managed_sid(sid) {
        return (dependent, blocking);
    }
    let (together, separate) = compiled.affinitive(sid);
    let services = &world.ha.services;
    dependent.extend(together.into_iter().filter(|c| services.contains_key(c)));
    for node in online_nodes(world) {
        for csid in &separate {
            if services.get(csid).is_some_and(|s| blocks(s, &node)) {
                blocking.entry(node.clone()).or_default().push(csid.clone());
            }
        }
    }
    (dependent, blocking)
}

/// Whether a service in negative affinity keeps others off `node`: it is there and not
/// moving away (`get_resource_motion_info`, `queue_resource_motion`).
pub fn blocks(service: &Service, node: &str) -> bool {
    service.node == node && service.target.as_deref().is_none_or(|t| t == node)
}

/// `get_resource_migration_candidates` for one bundle leader: the preferred nodes of its
/// node affinity, minus those of services to keep apart, minus its own node.
pub fn rebalance_targets(world: &World, compiled: &Compiled, leader: &str) -> BTreeSet<String> {
    let online = online_nodes(world);
    let (_, mut targets) = node_affinity(compiled, leader, &online);
    let (_, separate) = resource_affinity(world, compiled, leader, &online);
    targets.retain(|node| !separate.contains(node));
    if let Some(service) = world.ha.services.get(leader) {
        targets.remove(&service.node);
    }
    targets
}
