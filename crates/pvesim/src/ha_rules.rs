//! HA rules (`ha/rules.cfg`), as pve-ha-manager 5.2.0 has them: the two rule types
//! (`src/PVE/HA/Rules/NodeAffinity.pm`, `src/PVE/HA/Rules/ResourceAffinity.pm`), the
//! feasibility checks every rule set must pass (`src/PVE/HA/Rules.pm` `check_feasibility`
//! and the checks each plugin registers, with their texts), and what the CRM compiles from
//! the feasible rules (`transform`, `compile`). Plain data and pure functions: the API
//! (`ha_rules_api`) and the scheduler (`ha_placement`) use them.

use std::collections::{BTreeMap, BTreeSet};

/// `node-affinity` or `resource-affinity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleType {
    NodeAffinity,
    ResourceAffinity,
}

impl RuleType {
    pub fn parse(text: &str) -> Option<RuleType> {
        match text {
            "node-affinity" => Some(RuleType::NodeAffinity),
            "resource-affinity" => Some(RuleType::ResourceAffinity),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RuleType::NodeAffinity => "node-affinity",
            RuleType::ResourceAffinity => "resource-affinity",
        }
    }

    /// The plugin's `options`: which keys a rule of this type takes, and whether each is
    /// optional.
    pub fn options(self) -> &'static [(&'static str, bool)] {
        match self {
            RuleType::NodeAffinity => &[
                ("resources", false),
                ("nodes", false),
                ("strict", true),
                ("disable", true),
                ("comment", true),
            ],
            RuleType::ResourceAffinity => &[
                ("resources", false),
                ("affinity", false),
                ("disable", true),
                ("comment", true),
            ],
        }
    }
}

/// One section of `rules.cfg`, decoded (`decode_value`): a key PVE stores only when set
/// is an `Option`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaRule {
    pub kind: RuleType,
    pub resources: BTreeSet<String>,
    /// node-affinity: node -> priority (`parse_node_priority`: none given is 0).
    pub nodes: Option<BTreeMap<String, u64>>,
    /// node-affinity: as given (`strict 0` is kept).
    pub strict: Option<bool>,
    /// resource-affinity: `positive` or `negative`.
    pub affinity: Option<String>,
    /// The create and update handlers drop a false `disable`, so it is set or absent.
    pub disable: bool,
    pub comment: Option<String>,
}

impl HaRule {
    pub fn new(kind: RuleType) -> HaRule {
        HaRule {
            kind,
            resources: BTreeSet::new(),
            nodes: None,
            strict: None,
            affinity: None,
            disable: false,
            comment: None,
        }
    }

    fn is_positive(&self) -> bool {
        self.kind == RuleType::ResourceAffinity && self.affinity.as_deref() == Some("positive")
    }

    fn is_negative(&self) -> bool {
        self.kind == RuleType::ResourceAffinity && self.affinity.as_deref() == Some("negative")
    }

    fn node_set(&self) -> BTreeSet<String> {
        self.nodes
            .as_ref()
            .map(|n| n.keys().cloned().collect())
            .unwrap_or_default()
    }
}

/// `encode_plugin_value` of `nodes`: sorted, `node:priority` when the priority is not 0.
pub fn encode_nodes(nodes: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = nodes
        .iter()
        .map(|(node, priority)| match priority {
            0 => node.clone(),
            n => format!("{node}:{n}"),
        })
        .collect();
    parts.join(",")
}

/// `decode_plugin_value` of `nodes` (entries that do not parse are dropped, as PVE's
/// `parse_node_priority($node, 1)` does; the schema refused them before).
pub fn decode_nodes(text: &str) -> BTreeMap<String, u64> {
    crate::schema::split_list(text)
        .into_iter()
        .filter_map(|entry| {
            let (node, priority) = match entry.split_once(':') {
                Some((node, digits)) => (node, digits.parse::<u64>().ok()?),
                None => (entry, 0),
            };
            Some((node.to_string(), priority))
        })
        .collect()
}

/// `decode_value` of `resources`: the ids that look like HA resource ids.
pub fn decode_resources(text: &str) -> BTreeSet<String> {
    crate::schema::split_list(text)
        .into_iter()
        .filter(|sid| {
            sid.split_once(':').is_some_and(|(kind, name)| {
                !kind.is_empty()
                    && kind.bytes().all(|b| b.is_ascii_lowercase())
                    && !name.is_empty()
                    && !name.chars().any(char::is_whitespace)
            })
        })
        .map(str::to_string)
        .collect()
}

/// The rules file: its sections in file order (`order` is the position, from 1).
#[derive(Debug, Clone, Default)]
pub struct RulesConfig {
    pub rules: Vec<(String, HaRule)>,
    /// Bumped on every write (the file's digest).
    pub generation: u64,
}

impl RulesConfig {
    pub fn get(&self, id: &str) -> Option<&HaRule> {
        self.rules.iter().find(|(rid, _)| rid == id).map(|(_, r)| r)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut HaRule> {
        self.rules
            .iter_mut()
            .find(|(rid, _)| rid == id)
            .map(|(_, r)| r)
    }

    /// The digest of `rules.cfg`: 40 hex characters that change with every write.
    pub fn digest(&self) -> String {
        format!("{:040x}", 0x7a1e_0000_u64 + self.generation)
    }

    /// `order` of a rule: its position in the file, from 1.
    pub fn order(&self, id: &str) -> Option<usize> {
        self.rules
            .iter()
            .position(|(rid, _)| rid == id)
            .map(|i| i + 1)
    }

    /// `create_rule`: `get_next_ordinal` gives the smallest order plus one (2 once the
    /// file has a rule), and `write_config` sorts by order; of the places PVE's unordered
    /// sort may give a tie, the new rule goes after the rule already there.
    pub fn insert(&mut self, id: String, rule: HaRule) {
        let at = self.rules.len().min(2);
        self.rules.insert(at, (id, rule));
        self.generation += 1;
    }

    pub fn remove(&mut self, id: &str) {
        self.rules.retain(|(rid, _)| rid != id);
        self.generation += 1;
    }

    /// `delete_service_from_config` with `purge`: the resource leaves every rule, and a
    /// rule left without resources is deleted.
    pub fn purge_resource(&mut self, sid: &str) {
        if self
            .rules
            .iter()
            .all(|(_, rule)| !rule.resources.contains(sid))
        {
            return;
        }
        for (_, rule) in &mut self.rules {
            rule.resources.remove(sid);
        }
        self.rules.retain(|(_, rule)| !rule.resources.is_empty());
        self.generation += 1;
    }
}

/// The errors of infeasible rules: rule id -> messages, all about `resources` (every check
/// PVE registers blames that property), in the order the checks ran.
pub type RuleErrors = BTreeMap<String, Vec<String>>;

fn blame(errors: &mut RuleErrors, id: &str, message: &str) {
    errors
        .entry(id.to_string())
        .or_default()
        .push(message.to_string());
}

/// Enabled rules only, as every plugin's `get_plugin_check_arguments` takes them.
fn enabled<'a>(
    rules: &'a [(String, HaRule)],
    keep: impl Fn(&HaRule) -> bool + 'a,
) -> impl Iterator<Item = (&'a str, &'a HaRule)> + 'a {
    rules
        .iter()
        .filter(move |(_, r)| !r.disable && keep(r))
        .map(|(id, r)| (id.as_str(), r))
}

fn disjoint(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    a.intersection(b).next().is_none()
}

/// `Rules/Helpers.pm` `find_disjoint_rules_resource_sets`: rules sorted by their lowest
/// resource id (ties by rule id), each joined to the first set it overlaps.
fn disjoint_sets<'a>(rules: &[(&'a str, &'a HaRule)]) -> Vec<(Vec<&'a str>, BTreeSet<String>)> {
    let mut sorted: Vec<(&str, &HaRule)> = rules.to_vec();
    sorted.sort_by(|(a_id, a), (b_id, b)| {
        (a.resources.iter().next(), a_id).cmp(&(b.resources.iter().next(), b_id))
    });
    let mut sets: Vec<(Vec<&str>, BTreeSet<String>)> = Vec::new();
    for (id, rule) in sorted {
        match sets
            .iter_mut()
            .find(|(_, set)| !disjoint(set, &rule.resources))
        {
            Some((ids, set)) => {
                ids.push(id);
                set.extend(rule.resources.iter().cloned());
            }
            None => sets.push((vec![id], rule.resources.clone())),
        }
    }
    sets
}

/// `Rules.pm` `check_feasibility` with the checks in PVE's order: node affinity's, resource
/// affinity's, then the global ones. `nodes` are the nodes the CRM knows.
pub fn check_feasibility(rules: &[(String, HaRule)], nodes: &[String]) -> RuleErrors {
    let mut errors = RuleErrors::new();
    let node_affinity: Vec<_> = enabled(rules, |r| r.kind == RuleType::NodeAffinity).collect();
    let resource_affinity: Vec<_> =
        enabled(rules, |r| r.kind == RuleType::ResourceAffinity).collect();
    let positive: Vec<_> = enabled(rules, HaRule::is_positive).collect();
    let negative: Vec<_> = enabled(rules, HaRule::is_negative).collect();
    check_single_resource_reference(&node_affinity, &mut errors);
    check_resources_count(&resource_affinity, &mut errors);
    check_negative_resources_count(&negative, nodes.len(), &mut errors);
    check_inter_resource_affinity(&positive, &negative, &mut errors);
    check_single_priority(&resource_affinity, &node_affinity, &mut errors);
    check_single_node_affinity_per_positive(&positive, &node_affinity, &mut errors);
    check_negative_node_affinity_consistency(&negative, &node_affinity, &mut errors);
    errors
}

/// `NodeAffinity.pm` `check_single_resource_reference`.
fn check_single_resource_reference(rules: &[(&str, &HaRule)], errors: &mut RuleErrors) {
    let mut by_sid: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, rule) in rules {
        for sid in &rule.resources {
            by_sid.entry(sid).or_default().push(id);
        }
    }
    let mut conflicts: Vec<(&str, &str)> = by_sid
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .flat_map(|(sid, ids)| ids.iter().map(move |id| (*id, *sid)))
        .collect();
    conflicts.sort();
    for (id, sid) in conflicts {
        let message = format!("resource '{sid}' is already used in another node affinity rule");
        blame(errors, id, &message);
    }
}

/// `ResourceAffinity.pm` `check_resource_affinity_resources_count`.
fn check_resources_count(rules: &[(&str, &HaRule)], errors: &mut RuleErrors) {
    for (id, rule) in rules {
        if rule.resources.len() < 2 {
            blame(
                errors,
                id,
                "rule is ineffective as there are less than two resources",
            );
        }
    }
}

/// `ResourceAffinity.pm` `check_negative_resource_affinity_resources_count`.
fn check_negative_resources_count(
    rules: &[(&str, &HaRule)],
    nodes: usize,
    errors: &mut RuleErrors,
) {
    for (id, rule) in rules {
        if rule.resources.len() > nodes {
            blame(
                errors,
                id,
                "rule defines more resources than available nodes",
            );
        }
    }
}

/// `ResourceAffinity.pm` `check_inter_resource_affinity_rules_consistency`.
fn check_inter_resource_affinity(
    positive: &[(&str, &HaRule)],
    negative: &[(&str, &HaRule)],
    errors: &mut RuleErrors,
) {
    let mut conflicts: Vec<(&str, &str)> = Vec::new();
    for (ids, set) in disjoint_sets(positive) {
        for (negative_id, rule) in negative {
            if set.intersection(&rule.resources).count() < 2 {
                continue;
            }
            conflicts.push(("negative", negative_id));
            conflicts.extend(ids.iter().map(|id| ("positive", *id)));
        }
    }
    conflicts.sort();
    for (kind, id) in conflicts {
        let other = if kind == "positive" {
            "negative"
        } else {
            "positive"
        };
        let message =
            format!("rule shares two or more resources with a {other} resource affinity rule");
        blame(errors, id, &message);
    }
}

fn has_multiple_priorities(rule: &HaRule) -> bool {
    let priorities: BTreeSet<u64> = rule
        .nodes
        .as_ref()
        .map(|n| n.values().copied().collect())
        .unwrap_or_default();
    priorities.len() > 1
}

/// `Rules.pm` `check_single_priority_node_affinity_in_resource_affinity_rules`.
fn check_single_priority(
    resource_affinity: &[(&str, &HaRule)],
    node_affinity: &[(&str, &HaRule)],
    errors: &mut RuleErrors,
) {
    let mut conflicts: Vec<(&str, &str)> = Vec::new();
    for (id, rule) in resource_affinity {
        let paired: Vec<&(&str, &HaRule)> = node_affinity
            .iter()
            .filter(|(_, na)| !disjoint(&rule.resources, &na.resources))
            .collect();
        if paired.iter().any(|(_, na)| has_multiple_priorities(na)) {
            conflicts.push(("resource-affinity", id));
            conflicts.extend(paired.iter().map(|(na_id, _)| ("node-affinity", *na_id)));
        }
    }
    conflicts.sort();
    for (kind, id) in conflicts {
        let message = if kind == "node-affinity" {
            "resources are in a resource affinity rule and cannot be in a node affinity rule \
             with multiple priorities"
        } else {
            "resources are in node affinity rules with multiple priorities"
        };
        blame(errors, id, message);
    }
}

/// `Rules.pm` `check_single_node_affinity_per_positive_resource_affinity_rule`.
fn check_single_node_affinity_per_positive(
    positive: &[(&str, &HaRule)],
    node_affinity: &[(&str, &HaRule)],
    errors: &mut RuleErrors,
) {
    let mut conflicts: Vec<(&str, &str)> = Vec::new();
    for (ids, set) in disjoint_sets(positive) {
        let paired: Vec<&str> = node_affinity
            .iter()
            .filter(|(_, na)| !disjoint(&set, &na.resources))
            .map(|(id, _)| *id)
            .collect();
        if paired.len() > 1 {
            conflicts.extend(ids.iter().map(|id| ("positive", *id)));
            conflicts.extend(paired.iter().map(|id| ("node-affinity", *id)));
        }
    }
    conflicts.sort();
    for (kind, id) in conflicts {
        let message = if kind == "positive" {
            "resources are in multiple node affinity rules"
        } else {
            "at least one resource is in a positive resource affinity rule and there are other \
             resources in at least one other node affinity rule already"
        };
        blame(errors, id, message);
    }
}

/// `Rules.pm` `check_negative_resource_affinity_node_affinity_consistency`.
fn check_negative_node_affinity_consistency(
    negative: &[(&str, &HaRule)],
    node_affinity: &[(&str, &HaRule)],
    errors: &mut RuleErrors,
) {
    let mut conflicts: Vec<(&str, &str)> = Vec::new();
    for (id, rule) in negative {
        let mut allowed: BTreeSet<String> = BTreeSet::new();
        let mut located: BTreeSet<String> = BTreeSet::new();
        let mut paired = Vec::new();
        for (na_id, na) in node_affinity {
            let common: Vec<&String> = rule.resources.intersection(&na.resources).collect();
            if common.is_empty() {
                continue;
            }
            located.extend(common.into_iter().cloned());
            allowed.extend(na.node_set());
            paired.push(*na_id);
        }
        if allowed.len() < located.len() {
            conflicts.push(("negative", id));
            conflicts.extend(paired.into_iter().map(|na_id| ("node-affinity", na_id)));
        }
    }
    conflicts.sort();
    for (kind, id) in conflicts {
        let message = if kind == "negative" {
            "two or more resources are restricted to less nodes than available to the resources"
        } else {
            "at least one resource is in a negative resource affinity rule and this rule would \
             restrict these to less nodes than available to the resources"
        };
        blame(errors, id, message);
    }
}

/// What the scheduler uses (`Rules.pm` `compile`): node affinity per resource and the
/// resources each one must be kept with or apart from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compiled {
    /// sid -> node -> priority; a non-strict rule adds every other node at -1.
    pub node_affinity: BTreeMap<String, BTreeMap<String, i64>>,
    pub positive: BTreeMap<String, BTreeSet<String>>,
    pub negative: BTreeMap<String, BTreeSet<String>>,
}

impl Compiled {
    /// `get_affinitive_resources`: (together, separate).
    pub fn affinitive(&self, sid: &str) -> (BTreeSet<String>, BTreeSet<String>) {
        let get = |map: &BTreeMap<String, BTreeSet<String>>| map.get(sid).cloned();
        (
            get(&self.positive).unwrap_or_default(),
            get(&self.negative).unwrap_or_default(),
        )
    }
}

/// `Rules.pm` `transform` then `compile`, as the CRM does each time the rules change:
/// infeasible rules are dropped (one message each, as the CRM logs them), connected
/// positive rules merged, implied negative rules and node affinities added.
pub fn compile(rules: &[(String, HaRule)], nodes: &[String]) -> (Compiled, Vec<String>) {
    let errors = check_feasibility(rules, nodes);
    let messages = errors
        .iter()
        .flat_map(|(id, list)| {
            list.iter()
                .map(move |m| format!("Drop rule '{id}', because {m}."))
        })
        .collect();
    let mut kept: Vec<(String, HaRule)> = rules
        .iter()
        .filter(|(id, rule)| !errors.contains_key(id) && !rule.disable)
        .cloned()
        .collect();
    merge_connected_positive(&mut kept);
    add_implicit_negative(&mut kept);
    add_implicit_node_affinity(&mut kept);
    (compile_kept(&kept, nodes), messages)
}

/// `merge_connected_positive_resource_affinity_rules`.
fn merge_connected_positive(rules: &mut Vec<(String, HaRule)>) {
    let positive: Vec<(&str, &HaRule)> = enabled(rules, HaRule::is_positive).collect();
    let merges: Vec<(Vec<String>, BTreeSet<String>)> = disjoint_sets(&positive)
        .into_iter()
        .filter(|(ids, _)| ids.len() > 1)
        .map(|(ids, set)| (ids.iter().map(|s| s.to_string()).collect(), set))
        .collect();
    for (ids, set) in merges {
        let at = rules
            .iter()
            .position(|(id, _)| *id == ids[0])
            .unwrap_or(rules.len());
        let mut merged = HaRule::new(RuleType::ResourceAffinity);
        merged.affinity = Some("positive".into());
        merged.resources = set;
        rules.insert(at, (format!("_merged-{}", ids.join("-")), merged));
        rules.retain(|(id, _)| !ids.contains(id));
    }
}

/// `create_implicit_negative_resource_affinity_rules`: a resource kept with another is
/// also kept apart from what that one is kept apart from.
fn add_implicit_negative(rules: &mut Vec<(String, HaRule)>) {
    let mut added = Vec::new();
    for (positive_id, positive) in enabled(rules, HaRule::is_positive) {
        let mut separated_from: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (_, negative) in enabled(rules, HaRule::is_negative) {
            for sid in positive.resources.intersection(&negative.resources) {
                for csid in negative.resources.iter().filter(|c| *c != sid) {
                    separated_from.entry(csid).or_default().insert(sid);
                }
            }
        }
        for (csid, already) in &separated_from {
            for sid in positive
                .resources
                .iter()
                .filter(|s| !already.contains(s.as_str()))
            {
                let mut rule = HaRule::new(RuleType::ResourceAffinity);
                rule.affinity = Some("negative".into());
                rule.resources = BTreeSet::from([sid.clone(), csid.to_string()]);
                added.push((
                    format!("_implicit-negative-{positive_id}-{sid}-{csid}"),
                    rule,
                ));
            }
        }
    }
    rules.extend(added);
}

/// `create_implicit_positive_resource_affinity_node_affinity_rules`: the resources kept
/// together join the node affinity rule one of them is in.
fn add_implicit_node_affinity(rules: &mut [(String, HaRule)]) {
    let positive_sets: Vec<BTreeSet<String>> = enabled(rules, HaRule::is_positive)
        .map(|(_, r)| r.resources.clone())
        .collect();
    for set in positive_sets {
        let target = rules.iter_mut().find(|(_, r)| {
            !r.disable && r.kind == RuleType::NodeAffinity && !disjoint(&r.resources, &set)
        });
        if let Some((_, rule)) = target {
            rule.resources.extend(set.iter().cloned());
        }
    }
}

fn compile_kept(rules: &[(String, HaRule)], nodes: &[String]) -> Compiled {
    let mut compiled = Compiled::default();
    for (_, rule) in enabled(rules, |r| r.kind == RuleType::NodeAffinity) {
        let mut effective: BTreeMap<String, i64> = rule
            .nodes
            .iter()
            .flatten()
            .map(|(node, priority)| (node.clone(), i64::try_from(*priority).unwrap_or(i64::MAX)))
            .collect();
        if rule.strict != Some(true) {
            for node in nodes {
                effective.entry(node.clone()).or_insert(-1);
            }
        }
        for sid in &rule.resources {
            compiled
                .node_affinity
                .insert(sid.clone(), effective.clone());
        }
    }
    for (_, rule) in enabled(rules, |r| r.kind == RuleType::ResourceAffinity) {
        let map = if rule.is_positive() {
            &mut compiled.positive
        } else {
            &mut compiled.negative
        };
        for sid in &rule.resources {
            let others = rule.resources.iter().filter(|c| *c != sid).cloned();
            map.entry(sid.clone()).or_default().extend(others);
        }
    }
    compiled
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<String> {
        ["pve1", "pve2", "pve3"].map(String::from).to_vec()
    }

    fn rule(kind: RuleType, resources: &[&str]) -> HaRule {
        let mut rule = HaRule::new(kind);
        rule.resources = resources.iter().map(|s| s.to_string()).collect();
        rule
    }

    fn affinity(which: &str, resources: &[&str]) -> HaRule {
        let mut rule = rule(RuleType::ResourceAffinity, resources);
        rule.affinity = Some(which.into());
        rule
    }

    fn pinned(resources: &[&str], nodes: &str, strict: bool) -> HaRule {
        let mut rule = rule(RuleType::NodeAffinity, resources);
        rule.nodes = Some(decode_nodes(nodes));
        rule.strict = Some(strict);
        rule
    }

    #[test]
    fn nodes_round_trip_as_pve_encodes_them() {
        let nodes = decode_nodes("pve2:2,pve1, pve3:0");
        assert_eq!(nodes["pve2"], 2);
        assert_eq!(encode_nodes(&nodes), "pve1,pve2:2,pve3");
        assert_eq!(
            decode_resources("vm:100,bad,vm:101"),
            BTreeSet::from(["vm:100".to_string(), "vm:101".to_string()])
        );
    }

    #[test]
    fn each_check_blames_the_rules_with_pves_texts() {
        let rules = vec![
            ("a".to_string(), pinned(&["vm:100"], "pve1", true)),
            ("b".to_string(), pinned(&["vm:100"], "pve2", false)),
            ("lonely".to_string(), affinity("negative", &["vm:101"])),
            (
                "spread".to_string(),
                affinity("negative", &["vm:1", "vm:2", "vm:3", "vm:4"]),
            ),
        ];
        let errors = check_feasibility(&rules, &nodes());
        assert_eq!(
            errors["a"],
            ["resource 'vm:100' is already used in another node affinity rule"]
        );
        assert_eq!(
            errors["lonely"],
            ["rule is ineffective as there are less than two resources"]
        );
        assert_eq!(
            errors["spread"],
            ["rule defines more resources than available nodes"]
        );
        let mut disabled = rules.clone();
        disabled[1].1.disable = true;
        assert!(!check_feasibility(&disabled, &nodes()).contains_key("a"));
    }

    #[test]
    fn positive_and_negative_on_the_same_pair_conflict() {
        let rules = vec![
            ("keep".to_string(), affinity("positive", &["vm:1", "vm:2"])),
            ("apart".to_string(), affinity("negative", &["vm:1", "vm:2"])),
        ];
        let errors = check_feasibility(&rules, &nodes());
        assert_eq!(
            errors["keep"],
            ["rule shares two or more resources with a negative resource affinity rule"]
        );
        assert_eq!(
            errors["apart"],
            ["rule shares two or more resources with a positive resource affinity rule"]
        );
    }

    #[test]
    fn negative_rules_need_enough_allowed_nodes() {
        let rules = vec![
            ("pin".to_string(), pinned(&["vm:1", "vm:2"], "pve1", true)),
            ("apart".to_string(), affinity("negative", &["vm:1", "vm:2"])),
        ];
        let errors = check_feasibility(&rules, &nodes());
        assert_eq!(
            errors["apart"],
            [
                "two or more resources are restricted to less nodes than available to the \
              resources"
            ]
        );
        let (compiled, dropped) = compile(&rules, &nodes());
        assert_eq!(dropped.len(), 2, "{dropped:?}");
        assert!(compiled.negative.is_empty());
    }

    #[test]
    fn compile_adds_fallback_nodes_and_implied_rules() {
        let rules = vec![
            ("prefer".to_string(), pinned(&["vm:1"], "pve1:2", false)),
            ("keep".to_string(), affinity("positive", &["vm:1", "vm:2"])),
            ("apart".to_string(), affinity("negative", &["vm:2", "vm:3"])),
        ];
        let (compiled, dropped) = compile(&rules, &nodes());
        assert!(dropped.is_empty(), "{dropped:?}");
        let vm2 = &compiled.node_affinity["vm:2"];
        assert_eq!((vm2["pve1"], vm2["pve2"]), (2, -1));
        assert!(compiled.negative["vm:1"].contains("vm:3"), "{compiled:?}");
        assert!(compiled.positive["vm:2"].contains("vm:1"));
    }

    #[test]
    fn new_rules_take_order_two_and_purge_empties_rules() {
        let mut config = RulesConfig::default();
        for id in ["a", "b", "c", "d"] {
            config.insert(id.into(), affinity("negative", &["vm:1", "vm:2"]));
        }
        let ids: Vec<&str> = config.rules.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "d", "c"]);
        config.rules[0].1.resources = BTreeSet::from(["vm:1".to_string()]);
        config.purge_resource("vm:1");
        assert_eq!(config.rules.len(), 3);
        assert!(config.rules.iter().all(|(_, r)| r.resources.len() == 1));
    }
}
