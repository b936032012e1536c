//! `data "proxmox_health"`: one preflight answer to "will an apply work?", per node, with
//! stable reason codes a `precondition` or `check` block can assert on.
//!
//! Every health failure is data, not an error diagnostic: the read always returns a state.

pub mod check;
pub mod facts;
pub mod gather;
pub mod judge;
pub mod reason;
pub mod report;
pub mod requirements;

use std::sync::Arc;

use tfplugin::{
    AttributePath, Context, DataSource, DataSourceResponse, Diagnostics, Schema, Value,
};

pub use reason::{Finding, Reason};
pub use report::{HealthReport, HealthRequest, NodeReport};

use crate::context::{DEFAULT_SEED_STORAGE, Shared};
use crate::schema_table::{self, Kind, Mode, Spec};
use crate::validate;

pub const TYPE_NAME: &str = "proxmox_health";

#[derive(Debug)]
pub struct HealthDataSource {
    shared: Arc<Shared>,
}

impl HealthDataSource {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

fn privileges_doc() -> String {
    let line = |path: &str, privileges: &[&str], when: &str| {
        format!(
            "- `{path}`: {}{when}",
            privileges
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    [
        line("/vms", requirements::VM_PRIVILEGES, ""),
        line(
            "/vms/<template VMID>",
            requirements::TEMPLATE_PRIVILEGES,
            "",
        ),
        line(
            "/storage/<iso_storage>",
            requirements::ISO_STORAGE_PRIVILEGES,
            "",
        ),
        line(
            "/storage/<storage>",
            requirements::DISK_STORAGE_PRIVILEGES,
            " for the provider's `clone_storage`, else each storage of the templates' disks",
        ),
        line("/nodes/<node>", requirements::NODE_PRIVILEGES, ""),
        line(
            "/sdn/zones/localnetwork/<bridge>[/<vlan tag>]",
            requirements::BRIDGE_PRIVILEGES,
            " for each of `bridges` and each NIC of the templates (PVE checks them before it \
            clones)",
        ),
        line(
            "/pool/<pool>",
            requirements::POOL_PRIVILEGES,
            " for each of `pools` (without it PVE hides a VM's pool from listings)",
        ),
        line(
            "/",
            requirements::HA_PRIVILEGES,
            " with `ha` (HA resources)",
        ),
    ]
    .join("\n")
}

/// The attribute names, each written once.
mod attr {
    pub const NAME: &str = "name";
    pub const ONLINE: &str = "online";
    pub const VERSION: &str = "version";
    pub const ISO_STORAGE_OK: &str = "iso_storage_ok";
    pub const ISO_STORAGE_FREE_BYTES: &str = "iso_storage_free_bytes";
    pub const TEMPLATES_OK: &str = "templates_ok";
    pub const PRIVILEGES_OK: &str = "privileges_ok";
    pub const BRIDGES_OK: &str = "bridges_ok";
    pub const MEMORY_TOTAL_BYTES: &str = "memory_total_bytes";
    pub const MEMORY_PROMISED_BYTES: &str = "memory_promised_bytes";
    pub const ELIGIBLE: &str = "eligible";
    pub const REASONS: &str = "reasons";
    pub const MESSAGES: &str = "messages";
    pub const NODE_NAMES: &str = "node_names";
    pub const TEMPLATES: &str = "templates";
    pub const ISO_STORAGE: &str = "iso_storage";
    pub const BRIDGES: &str = "bridges";
    pub const POOLS: &str = "pools";
    pub const HA: &str = "ha";
    pub const HEALTHY: &str = "healthy";
    pub const NODES: &str = "nodes";
}

/// The attributes of each of `nodes`.
const NODE_ATTRIBUTES: &[Spec] = &[
    Spec::new(attr::NAME, Kind::String, Mode::Computed).description("Node name."),
    Spec::new(attr::ONLINE, Kind::Bool, Mode::Computed)
        .description("The cluster lists the node online and PVE could reach it."),
    Spec::new(attr::VERSION, Kind::String, Mode::Computed).description(
        "The node's pve-manager version (e.g. `9.2.11`); the endpoint's version when the node \
            status is unreadable; empty when unknown.",
    ),
    Spec::new(attr::ISO_STORAGE_OK, Kind::Bool, Mode::Computed).description(
        "The ISO storage exists on the node, is enabled and active, accepts `iso` content and \
            has at least 1 MiB free.",
    ),
    Spec::new(attr::ISO_STORAGE_FREE_BYTES, Kind::Number, Mode::Computed).description(
        "Free bytes PVE reports for the ISO storage on this node; null when \
                unknown.",
    ),
    Spec::new(attr::TEMPLATES_OK, Kind::Bool, Mode::Computed).description(
        "Every entry of `templates` can be cloned onto this node (true when `templates` is \
            empty).",
    ),
    Spec::new(attr::PRIVILEGES_OK, Kind::Bool, Mode::Computed).description(
        "The token holds every privilege the provider needs for VMs on this node \
                (see the data source description).",
    ),
    Spec::new(attr::BRIDGES_OK, Kind::Bool, Mode::Computed).description(
        "Every entry of `bridges`, and every bridge a NIC of the `templates` \
                names (a clone keeps them), exists on the node (true when both are empty).",
    ),
    Spec::new(attr::MEMORY_TOTAL_BYTES, Kind::Number, Mode::Computed)
        .description("The node's memory, bytes; null when unknown (e.g. without `Sys.Audit`)."),
    Spec::new(attr::MEMORY_PROMISED_BYTES, Kind::Number, Mode::Computed).description(
        "Memory configured for the VMs on the node (running or not; templates not counted), \
            bytes. Null when it is unknown, never 0: when the cluster's VM listing could not be \
            read, and when it lists a VM of the node without its memory, as PVE lists the VMs \
            of an offline node and a VM whose node has not reported it yet (about 10 s after a \
            clone). Placement counts it \
            against `memory_total_bytes`; PVE itself allows more (overcommit), so applies running \
            at the same time from different states can together promise more than the node has: \
            compare the two to see it.",
    ),
    Spec::new(attr::ELIGIBLE, Kind::Bool, Mode::Computed).description(
        "Whether `proxmox_proxy_vm` with `node` unset may place a VM here, for the given \
            `templates`, `iso_storage` (the seed storage) and `bridges`: online, `iso_storage_ok`, \
            `templates_ok` and `bridges_ok`, the same checks placement makes (the VM's memory is \
            checked when it is placed). When false, `reasons` say why.",
    ),
    Spec::new(attr::REASONS, Kind::StringList, Mode::Computed).built_description(|| {
        let reasons_doc = Reason::documentation();
        format!(
            "Stable reason codes, sorted alphabetically, each once; empty when the node is \
            healthy. The codes:\n\n{reasons_doc}"
        )
    }),
    Spec::new(attr::MESSAGES, Kind::StringList, Mode::Computed).description(
        "Human-readable explanations, one per finding, in the order found. Not \
                stable: match on `reasons` instead.",
    ),
];

/// The data source's attributes, in the order the schema lists them.
const ATTRIBUTES: &[Spec] = &[
    Spec::new(attr::NODE_NAMES, Kind::StringList, Mode::Optional).description(
        "Nodes to check. Defaults to every node `GET /nodes` lists. (The results \
                        are in `nodes`.)",
    ),
    Spec::new(attr::TEMPLATES, Kind::StringList, Mode::Optional).description(
        "Templates that must be clonable onto every checked node: names or VMIDs \
                (`\"9000\"`).",
    ),
    Spec::new(attr::ISO_STORAGE, Kind::String, Mode::OptionalComputed).built_description(|| {
        format!(
            "Storage that receives the NoCloud seed ISOs. Defaults to the provider's \
                        `seed_storage` (`{DEFAULT_SEED_STORAGE}` unless set)."
        )
    }),
    Spec::new(attr::BRIDGES, Kind::StringList, Mode::Optional).description(
        "Bridges (e.g. `vmbr0`) that must exist on every checked node (`GET \
                /nodes/{node}/network`): list every bridge the proxy VMs use, `bridge` and \
                each `networks` element's (a backend network's too), since PVE refuses to \
                start a VM whose NIC names a bridge its node lacks.",
    ),
    Spec::new(attr::POOLS, Kind::StringList, Mode::Optional).description(
        "Resource pools the proxy VMs go into (their `pool`): the token must hold \
                `Pool.Audit` on each, or PVE leaves the pool out of its listings and an imported \
                or refreshed VM seems to be in no pool. PVE applies a pool's ACLs to its member \
                VMs, so a VM privilege held on every one of these pools counts as held on `/vms`.",
    ),
    Spec::new(attr::HA, Kind::Bool, Mode::Optional).description(
        "Whether the proxy VMs use `ha`: the token must then hold `Sys.Console` on `/`, which \
                PVE checks on every change of an HA resource.",
    ),
    Spec::new(attr::HEALTHY, Kind::Bool, Mode::Computed).description(
        "True when at least one node was checked and no node and no cluster-wide check \
                reported a reason.",
    ),
    Spec::new(attr::VERSION, Kind::String, Mode::Computed).description(
        "The PVE version of the API endpoint (`GET /version`), e.g. `9.2.11`; empty when \
                unreachable.",
    ),
    Spec::new(attr::REASONS, Kind::StringList, Mode::Computed).description(
        "Every reason code of the cluster and all nodes, sorted alphabetically, each once; \
                empty when healthy. The codes are listed under `nodes.reasons`.",
    ),
    Spec::new(attr::MESSAGES, Kind::StringList, Mode::Computed).description(
        "Every explanation: cluster-wide ones first, then node ones prefixed with the node \
                name.",
    ),
    Spec::new(
        attr::NODES,
        Kind::ObjectList(NODE_ATTRIBUTES),
        Mode::Computed,
    )
    .description("One result per checked node, in the order of `node_names` (or of `GET /nodes`)."),
];

pub fn schema() -> Schema {
    let description = format!(
        "Checks that the cluster can run proxy VMs, node by node and concurrently: the API \
                answers with a trusted certificate and accepted token, PVE is version 9 or newer, \
                each node is online, the ISO storage is present, active, accepts `iso` and has \
                free space, each template exists and is a template, the bridges exist, and the \
                token holds the privileges the provider needs.\n\n\
Problems are reported as data (`healthy`, per-node `reasons`), never as errors, so a \
`precondition` can block an apply and a `check` block can warn.\n\n\
A template counts for a node when a template of that name (or VMID) lives on that node, or when \
the first one the cluster lists lives on another online node with every disk on a shared storage \
that is active on this node (PVE then clones across nodes). This is the copy `proxmox_proxy_vm` \
clones from.\n\n\
Each call is made once, without retries. Cluster-wide problems (certificate, credentials, \
unreachable endpoint) are reported on every node; if the node list itself is unavailable and \
`node_names` is not set, `nodes` is empty and the top-level `reasons` carry the code.\n\n\
Privileges checked (PVE 9 names, through `GET /access/permissions`; privileges granted only \
through a pool are not seen):\n\n{}\n\n\
Every reason code, with its meaning, is listed once, under `nodes.reasons`.",
        privileges_doc()
    );
    Schema::new(schema_table::block(description, ATTRIBUTES))
}

/// The request a configuration asks for. `None` when a value is not yet known.
fn request_from(config: &Value, seed_storage: &str, clone_storage: Option<&str>) -> HealthRequest {
    let list = |name: &str| -> Option<Vec<String>> {
        config
            .get_attr(name)
            .as_string_list()
            .map(|items| items.into_iter().map(str::to_owned).collect())
    };
    HealthRequest {
        node_names: list(attr::NODE_NAMES),
        templates: list(attr::TEMPLATES).unwrap_or_default(),
        iso_storage: config
            .get_attr(attr::ISO_STORAGE)
            .as_str()
            .unwrap_or(seed_storage)
            .to_owned(),
        bridges: list(attr::BRIDGES).unwrap_or_default(),
        pools: list(attr::POOLS).unwrap_or_default(),
        clone_storage: clone_storage.map(str::to_owned),
        ha: config.get_attr(attr::HA).as_bool().unwrap_or(false),
    }
}

fn strings(items: impl IntoIterator<Item = impl Into<String>>) -> Value {
    Value::List(items.into_iter().map(|s| Value::String(s.into())).collect())
}

fn codes(reasons: &[Reason]) -> Value {
    strings(reasons.iter().map(|r| r.code()))
}

fn node_value(node: &NodeReport) -> Value {
    Value::object([
        (attr::NAME, Value::from(node.name.clone())),
        (attr::ONLINE, Value::from(node.online)),
        (attr::VERSION, Value::from(node.version.clone())),
        (attr::ISO_STORAGE_OK, Value::from(node.iso_storage_ok)),
        (
            attr::ISO_STORAGE_FREE_BYTES,
            node.iso_storage_free_bytes
                .and_then(|b| i64::try_from(b).ok())
                .map_or(Value::Null, Value::from),
        ),
        (attr::TEMPLATES_OK, Value::from(node.templates_ok)),
        (attr::PRIVILEGES_OK, Value::from(node.privileges_ok)),
        (attr::BRIDGES_OK, Value::from(node.bridges_ok)),
        (
            attr::MEMORY_TOTAL_BYTES,
            node.memory_total_bytes
                .and_then(|b| i64::try_from(b).ok())
                .map_or(Value::Null, Value::from),
        ),
        (
            attr::MEMORY_PROMISED_BYTES,
            node.memory_promised_bytes
                .and_then(|b| i64::try_from(b).ok())
                .map_or(Value::Null, Value::from),
        ),
        (
            attr::ELIGIBLE,
            Value::from(node.online && node.iso_storage_ok && node.templates_ok && node.bridges_ok),
        ),
        (attr::REASONS, codes(&node.reasons())),
        (
            attr::MESSAGES,
            strings(node.findings.iter().map(|f| f.message.clone())),
        ),
    ])
}

/// The state: the configuration plus every computed value.
pub fn state_from(config: &Value, request: &HealthRequest, report: &HealthReport) -> Value {
    let mut state = config.clone();
    state.set_attr(attr::ISO_STORAGE, Value::from(request.iso_storage.clone()));
    state.set_attr(attr::HEALTHY, Value::from(report.healthy()));
    state.set_attr(attr::VERSION, Value::from(report.version.clone()));
    state.set_attr(attr::REASONS, codes(&report.reasons()));
    state.set_attr(attr::MESSAGES, strings(report.messages()));
    state.set_attr(
        attr::NODES,
        Value::List(report.nodes.iter().map(node_value).collect()),
    );
    state
}

fn check_names(
    diags: &mut Diagnostics,
    config: &Value,
    attribute: &str,
    rule: impl Fn(&str) -> Result<(), String>,
) {
    let Some(items) = config.get_attr(attribute).as_elements() else {
        return;
    };
    for (index, item) in items.iter().enumerate() {
        if let Some(text) = item.as_str()
            && let Err(why) = rule(text)
        {
            diags.attribute_error(
                AttributePath::root().attr(attribute).index(index as i64),
                "Invalid Attribute Value",
                format!("Attribute {attribute}[{index}] {why}, got: {text:?}"),
            );
        }
    }
}

fn non_empty_name(text: &str) -> Result<(), String> {
    if text.trim().is_empty() || text.trim() != text {
        Err("must be a non-empty name without surrounding spaces".to_owned())
    } else {
        Ok(())
    }
}

#[tfplugin::async_trait]
impl DataSource for HealthDataSource {
    fn type_name(&self) -> &str {
        TYPE_NAME
    }

    fn schema(&self) -> Schema {
        schema()
    }

    async fn validate(&self, _ctx: &Context, config: &Value) -> Diagnostics {
        let mut diags = Diagnostics::new();
        check_names(&mut diags, config, attr::NODE_NAMES, non_empty_name);
        if config
            .get_attr(attr::NODE_NAMES)
            .as_elements()
            .is_some_and(<[Value]>::is_empty)
        {
            diags.attribute_error(
                AttributePath::root().attr(attr::NODE_NAMES),
                "Invalid Attribute Value",
                "Attribute node_names must name at least one node; leave it out to check every \
                node",
            );
        }
        check_names(&mut diags, config, attr::TEMPLATES, non_empty_name);
        check_names(&mut diags, config, attr::BRIDGES, non_empty_name);
        check_names(&mut diags, config, attr::POOLS, non_empty_name);
        if let Some(storage) = config.get_attr(attr::ISO_STORAGE).as_str()
            && let Err(why) = validate::storage_id(storage)
        {
            diags.attribute_error(
                AttributePath::root().attr(attr::ISO_STORAGE),
                "Invalid Attribute Value",
                format!("Attribute iso_storage {why}"),
            );
        }
        diags
    }

    async fn read(&self, _ctx: &Context, config: &Value) -> DataSourceResponse {
        let (request, report) = match self.shared.get() {
            Ok(configured) => {
                let request = request_from(
                    config,
                    &configured.seed_storage,
                    configured.clone_storage.as_deref(),
                );
                let report = check::run(&configured, &request).await;
                (request, report)
            }
            Err(why) => {
                // Still a state: a `check` block should warn, not fail, on a broken provider.
                let request = request_from(config, DEFAULT_SEED_STORAGE, None);
                let finding = Finding::new(
                    Reason::ProviderNotConfigured,
                    format!("{}: {}", why.summary, why.detail),
                );
                let report = HealthReport::unusable(&request, finding);
                (request, report)
            }
        };
        tracing::debug!(
            healthy = report.healthy(),
            reasons = ?report.reasons().iter().map(|r| r.code()).collect::<Vec<_>>(),
            nodes = report.nodes.len(),
            "proxmox_health checked"
        );
        DataSourceResponse {
            state: state_from(config, &request, &report),
            diagnostics: Diagnostics::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attribute_name_has_a_spec() {
        let source = include_str!("mod.rs");
        let names = source.split("mod attr {").nth(1).unwrap();
        let mut named = schema_table::declared_names(names.split('}').next().unwrap());
        named.sort_unstable();
        let mut declared: Vec<&str> = ATTRIBUTES
            .iter()
            .chain(NODE_ATTRIBUTES)
            .map(|spec| spec.name)
            .collect();
        declared.sort_unstable();
        declared.dedup();
        assert_eq!(named, declared);
    }
}
