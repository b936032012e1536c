//! The parameter rules of `/cluster/ha/...`: resources, rules, groups and status
//! (pve-ha-manager `src/PVE/API2/HA/Resources.pm`, `Rules.pm`, `Groups.pm`, `Status.pm`).
//! HA rules are a section config with isolated properties (`HA/Env/PVE2.pm`
//! `PVE::HA::Rules->init(property_isolation => 1)`): PVE's dump flattens its `oneOf` with
//! `instance-types`; the variants' own rules (`in_variant`, `variant_required`) follow
//! pve-common 9.2's `SectionConfig.pm` `make_isolated_base_schema`.

use super::super::ParamType::{Boolean, Integer, String as Str};
use super::super::{EndpointRules, ParamRule};
use super::{ep, p};

const HA_SID: ParamRule = p("sid", Str).fmt("pve-ha-resource-or-vm-id");
const HA_STATES: &[&str] = &["started", "stopped", "enabled", "disabled", "ignored"];
/// The options of an HA resource (pve-ha-manager `HA/Resources.pm` `$defaultData`).
const HA_OPTIONS: &[ParamRule] = &[
    p("comment", Str).opt().max_len(4096),
    p("failback", Boolean).opt().default("1"),
    p("group", Str).opt().fmt("pve-configid"),
    p("max_relocate", Integer).opt().min(0.0).default("1"),
    p("max_restart", Integer).opt().min(0.0).default("1"),
    p("state", Str).opt().one_of(HA_STATES).default("started"),
];

const RULE_TYPES: &[&str] = &["node-affinity", "resource-affinity"];
const NODE_AFFINITY: &[&str] = &["node-affinity"];
const RESOURCE_AFFINITY: &[&str] = &["resource-affinity"];
const RULE_ID: ParamRule = p("rule", Str).fmt("pve-configid");
const DELETE: ParamRule = p("delete", Str)
    .opt()
    .fmt("pve-configid-list")
    .max_len(4096);
const DIGEST: ParamRule = p("digest", Str).opt().max_len(64);

impl ParamRule {
    const fn instance(mut self, types: &'static [&'static str]) -> Self {
        self.instance_types = Some(types);
        self.optional = true;
        self
    }
    const fn variant(mut self) -> Self {
        self.in_variant = true;
        self
    }
    const fn variant_required(mut self) -> Self {
        self.variant_required = true;
        self
    }
}

/// `PVE::HA::Rules->createSchema()`, or its `updateSchema()` (every option optional, plus
/// `delete` and `digest`).
fn rule_params(update: bool) -> Vec<ParamRule> {
    let mut affinity = p("affinity", Str)
        .one_of(&["positive", "negative"])
        .instance(RESOURCE_AFFINITY);
    let mut nodes = p("nodes", Str)
        .fmt("pve-ha-node-list")
        .instance(NODE_AFFINITY);
    let mut resources = p("resources", Str).fmt("pve-ha-resource-id-list").variant();
    if update {
        resources = resources.opt();
    } else {
        affinity = affinity.variant_required();
        nodes = nodes.variant_required();
    }
    let mut params = vec![
        affinity,
        p("comment", Str).opt().max_len(4096).variant(),
        p("disable", Boolean).opt().variant(),
        nodes,
        resources,
        RULE_ID,
        p("strict", Boolean).default("0").instance(NODE_AFFINITY),
        p("type", Str).one_of(RULE_TYPES),
    ];
    if update {
        params.extend([DELETE, DIGEST]);
    }
    params
}

/// `API2/HA/Groups.pm`: every endpoint is still declared, and each refuses once the groups
/// have been migrated to rules.
fn group_endpoints() -> Vec<EndpointRules> {
    let group = p("group", Str).fmt("pve-configid");
    let options = [
        p("comment", Str).opt().max_len(4096),
        p("nofailback", Boolean).opt().default("0"),
        p("restricted", Boolean).opt().default("0"),
    ];
    let nodes = p("nodes", Str).fmt("pve-ha-node-list");
    vec![
        ep("GET", "/cluster/ha/groups", &[]),
        ep(
            "POST",
            "/cluster/ha/groups",
            &[
                &options,
                &[group, nodes, p("type", Str).opt().one_of(&["group"])],
            ],
        ),
        ep("GET", "/cluster/ha/groups/{group}", &[&[group]]),
        ep(
            "PUT",
            "/cluster/ha/groups/{group}",
            &[&options, &[group, nodes.opt(), DELETE, DIGEST]],
        ),
        ep("DELETE", "/cluster/ha/groups/{group}", &[&[group]]),
    ]
}

/// `API2/HA/Rules.pm`.
fn rule_endpoints() -> Vec<EndpointRules> {
    let filter = [
        p("resource", Str).opt(),
        p("type", Str).opt().one_of(RULE_TYPES),
    ];
    vec![
        ep("GET", "/cluster/ha/rules", &[&filter]),
        ep("POST", "/cluster/ha/rules", &[&rule_params(false)]),
        ep("GET", "/cluster/ha/rules/{rule}", &[&[RULE_ID]]),
        ep("PUT", "/cluster/ha/rules/{rule}", &[&rule_params(true)]),
        ep("DELETE", "/cluster/ha/rules/{rule}", &[&[RULE_ID]]),
    ]
}

/// HA resources, rules, groups and status.
pub(super) fn ha_endpoints() -> Vec<EndpointRules> {
    let kind = p("type", Str).opt().one_of(&["ct", "vm"]);
    let target = p("node", Str).fmt("pve-node");
    let mut endpoints = vec![
        ep("GET", "/cluster/ha", &[]),
        ep("GET", "/cluster/ha/status", &[]),
        ep("GET", "/cluster/ha/resources", &[&[kind]]),
        ep(
            "POST",
            "/cluster/ha/resources",
            &[HA_OPTIONS, &[HA_SID, kind]],
        ),
        ep("GET", "/cluster/ha/resources/{sid}", &[&[HA_SID]]),
        ep(
            "PUT",
            "/cluster/ha/resources/{sid}",
            &[HA_OPTIONS, &[HA_SID, DELETE, DIGEST]],
        ),
        ep(
            "DELETE",
            "/cluster/ha/resources/{sid}",
            &[&[HA_SID, p("purge", Boolean).opt().default("1")]],
        ),
        ep(
            "POST",
            "/cluster/ha/resources/{sid}/migrate",
            &[&[HA_SID, target]],
        ),
        ep(
            "POST",
            "/cluster/ha/resources/{sid}/relocate",
            &[&[HA_SID, target]],
        ),
        ep("GET", "/cluster/ha/status/current", &[]),
    ];
    endpoints.extend(rule_endpoints());
    endpoints.extend(group_endpoints());
    endpoints
}
