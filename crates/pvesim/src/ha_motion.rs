//! Moving HA services on request: the CRM's reading of `ha/crm_commands`
//! (pve-ha-manager 5.2.0 `src/PVE/HA/Manager.pm` `update_crm_commands`), the resource
//! affinity checks a move must pass (`queue_resource_motion`: a negative partner on the
//! target refuses it, positive partners move along), and the rebalancer's pick of a
//! stationary bundle (`get_active_stationary_resource_bundles`,
//! `get_resource_migration_candidates`, `load_balance`).

use std::collections::BTreeSet;

use crate::ha_placement::{blocks, online_nodes};
use crate::ha_rules::Compiled;
use crate::world::World;

/// One line of `ha/crm_commands`, as `update_crm_commands` takes it.
pub fn crm_command(world: &mut World, compiled: &Compiled, text: &str) {
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        [verb @ ("migrate" | "relocate"), sid, node] => {
            let Some(service) = world.ha.services.get(*sid) else {
                world
                    .ha
                    .log(format!("crm command error - no such service: {text}"));
                return;
            };
            if !online_nodes(world).contains(*node) {
                world
                    .ha
                    .log(format!("crm command error - node not online: {text}"));
            } else if service.node == *node {
                world.ha.log(format!(
                    "ignore crm command - service already on target node: {text}"
                ));
            } else {
                queue_resource_motion(world, compiled, text, verb, sid, node);
            }
        }
        ["stop", sid, timeout] => match world.ha.services.get_mut(*sid) {
            Some(service) => {
                service.cmd = Some(vec!["stop".into(), timeout.to_string()]);
                world.ha.log(format!("got crm command: {text}"));
            }
            None => world
                .ha
                .log(format!("crm command error - no such service: {text}")),
        },
        _ => world.ha.log(format!("unable to parse crm command: {text}")),
    }
}

/// `queue_resource_motion`: refused (and logged) when a service to keep apart is on the
/// target; otherwise the command goes onto the service and onto each service it is kept
/// together with. Whether it was queued.
pub fn queue_resource_motion(
    world: &mut World,
    compiled: &Compiled,
    text: &str,
    verb: &str,
    sid: &str,
    target: &str,
) -> bool {
    let (together, separate) = compiled.affinitive(sid);
    let services = &world.ha.services;
    let blocker = separate
        .iter()
        .find(|csid| services.get(*csid).is_some_and(|s| blocks(s, target)));
    if let Some(csid) = blocker {
        let line = format!(
            "crm command '{text}' error - service '{csid}' on node '{target}' in negative \
             affinity with service '{sid}'"
        );
        world.ha.log(line);
        return false;
    }
    let command = vec![verb.to_string(), target.to_string()];
    let partners: Vec<String> = together
        .into_iter()
        .filter(|csid| {
            services
                .get(csid)
                .is_some_and(|s| s.node != target && s.target.as_deref() != Some(target))
        })
        .collect();
    world.ha.log(format!("got crm command: {text}"));
    for csid in partners {
        world.ha.log(format!(
            "crm command '{text}' - {verb} service '{csid}' to node '{target}' (service \
             '{csid}' in positive affinity with service '{sid}')"
        ));
        if let Some(service) = world.ha.services.get_mut(&csid) {
            service.cmd = Some(command.clone());
        }
    }
    if let Some(service) = world.ha.services.get_mut(sid) {
        service.cmd = Some(command);
    }
    true
}

/// `any_resource_motion_queued_or_running`.
fn motion_queued_or_running(world: &World) -> bool {
    world.ha.services.values().any(|s| {
        matches!(s.state.as_str(), "migrate" | "relocate")
            || s.cmd
                .as_ref()
                .is_some_and(|c| matches!(c[0].as_str(), "migrate" | "relocate"))
    })
}

/// `get_active_stationary_resource_bundles`: the started bundle `sid` belongs to, all on
/// one node and none of it moving, sorted (its first member leads it).
fn stationary_bundle(world: &World, compiled: &Compiled, sid: &str) -> Option<Vec<String>> {
    let services = &world.ha.services;
    let leader_of = |start: &str| -> Option<Vec<String>> {
        let first = services.get(start).filter(|s| s.state == "started")?;
        let mut members = vec![start.to_string()];
        let mut nodes = BTreeSet::from([first.node.clone()]);
        for csid in compiled.affinitive(start).0 {
            let Some(other) = services.get(&csid) else {
                continue;
            };
            if matches!(other.state.as_str(), "migrate" | "relocate") {
                return None;
            }
            if other.state == "started" {
                nodes.insert(other.node.clone());
                members.push(csid);
            }
        }
        members.sort();
        (nodes.len() == 1).then_some(members)
    };
    let bundle = leader_of(sid)?;
    // The bundle as its leader computes it, which is what the rebalancer moves.
    leader_of(&bundle[0])
}

/// The rebalancer moving `sid`'s bundle to `target` (`load_balance` with one chosen
/// migration, the imbalance figures left out): the bundle must be a migration candidate
/// with `target` among its nodes (`get_resource_migration_candidates`: the preferred
/// nodes of its leader's node affinity, minus those of services to keep apart, minus its
/// own). Returns the bundle, leader first.
pub fn rebalance(
    world: &mut World,
    compiled: &Compiled,
    sid: &str,
    target: &str,
) -> Result<Vec<String>, String> {
    if motion_queued_or_running(world) {
        return Err("a resource motion is queued or running; the CRM does not rebalance".into());
    }
    let bundle = stationary_bundle(world, compiled, sid).ok_or_else(|| {
        format!("'{sid}' is not in a started, stationary bundle of HA services on one node")
    })?;
    let leader = bundle[0].clone();
    let candidates = crate::ha_placement::rebalance_targets(world, compiled, &leader);
    if !candidates.contains(target) {
        let listed: Vec<String> = candidates.into_iter().collect();
        return Err(format!(
            "node '{target}' is not a rebalancing target of '{leader}' (targets: {})",
            listed.join(", ")
        ));
    }
    let kind = leader.split(':').next().unwrap_or_default();
    let verb = if kind == "vm" { "migrate" } else { "relocate" };
    let text = format!("{verb} {leader} {target}");
    world
        .ha
        .log(format!("auto rebalance - {verb} {leader} to {target}"));
    queue_resource_motion(world, compiled, &text, verb, &leader, target);
    Ok(bundle)
}
