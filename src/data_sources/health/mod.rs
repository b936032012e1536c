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
    Attribute, AttributePath, Block, Context, DataSource, DataSourceResponse, Diagnostics, Nesting,
    Schema, Type, Value,
};

pub use reason::{Finding, Reason};
pub use report::{HealthReport, HealthRequest, NodeReport};

use crate::context::{DEFAULT_SEED_STORAGE, Shared};
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
    ]
    .join("\n")
}

pub fn schema() -> Schema {
    let reasons_doc = Reason::documentation();
    let node = vec![
        Attribute::new("name", Type::String).computed().description("Node name."),
        Attribute::new("online", Type::Bool)
            .computed()
            .description("The cluster lists the node online and PVE could reach it."),
        Attribute::new("version", Type::String).computed().description(
            "The node's pve-manager version (e.g. `9.2.11`); the endpoint's version when the node \
            status is unreadable; empty when unknown.",
        ),
        Attribute::new("iso_storage_ok", Type::Bool).computed().description(
            "The ISO storage exists on the node, is enabled and active, accepts `iso` content and \
            has at least 1 MiB free.",
        ),
        Attribute::new("iso_storage_free_bytes", Type::Number)
            .computed()
            .description("Free bytes PVE reports for the ISO storage on this node; null when \
                unknown."),
        Attribute::new("templates_ok", Type::Bool).computed().description(
            "Every entry of `templates` can be cloned onto this node (true when `templates` is \
            empty).",
        ),
        Attribute::new("privileges_ok", Type::Bool)
            .computed()
            .description("The token holds every privilege the provider needs for VMs on this node \
                (see the data source description)."),
        Attribute::new("bridges_ok", Type::Bool)
            .computed()
            .description("Every entry of `bridges`, and every bridge a NIC of the `templates` \
                names (a clone keeps them), exists on the node (true when both are empty)."),
        Attribute::new("memory_total_bytes", Type::Number)
            .computed()
            .description("The node's memory, bytes; null when unknown (e.g. without `Sys.Audit`)."),
        Attribute::new("memory_promised_bytes", Type::Number).computed().description(
            "Memory configured for the VMs on the node (running or not; templates not counted), \
            bytes; null when the cluster's VM listing could not be read. Placement counts it \
            against `memory_total_bytes`; PVE itself allows more (overcommit), so applies running \
            at the same time from different states can together promise more than the node has: \
            compare the two to see it.",
        ),
        Attribute::new("eligible", Type::Bool).computed().description(
            "Whether `proxmox_proxy_vm` with `node` unset may place a VM here, for the given \
            `templates`, `iso_storage` (the seed storage) and `bridges`: online, `iso_storage_ok`, \
            `templates_ok` and `bridges_ok`, the same checks placement makes (the VM's memory is \
            checked when it is placed). When false, `reasons` say why.",
        ),
        Attribute::new("reasons", Type::list(Type::String)).computed().description(format!(
            "Stable reason codes, sorted alphabetically, each once; empty when the node is \
            healthy. The codes:\n\n{reasons_doc}"
        )),
        Attribute::new("messages", Type::list(Type::String))
            .computed()
            .description("Human-readable explanations, one per finding, in the order found. Not \
                stable: match on `reasons` instead."),
    ];
    Schema::new(
        Block::new()
            .description(format!(
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
            ))
            .attribute(
                Attribute::new("node_names", Type::list(Type::String))
                    .optional()
                    .description(
                        "Nodes to check. Defaults to every node `GET /nodes` lists. (The results \
                        are in `nodes`.)",
                    ),
            )
            .attribute(Attribute::new("templates", Type::list(Type::String)).optional().description(
                "Templates that must be clonable onto every checked node: names or VMIDs \
                (`\"9000\"`).",
            ))
            .attribute(
                Attribute::new("iso_storage", Type::String)
                    .optional()
                    .computed()
                    .description(format!(
                        "Storage that receives the NoCloud seed ISOs. Defaults to the provider's \
                        `seed_storage` (`{DEFAULT_SEED_STORAGE}` unless set)."
                    )),
            )
            .attribute(Attribute::new("bridges", Type::list(Type::String)).optional().description(
                "Bridges (e.g. `vmbr0`) that must exist on every checked node (`GET \
                /nodes/{node}/network`).",
            ))
            .attribute(Attribute::new("pools", Type::list(Type::String)).optional().description(
                "Resource pools the proxy VMs go into (their `pool`): the token must hold \
                `Pool.Audit` on each, or PVE leaves the pool out of its listings and an imported \
                or refreshed VM seems to be in no pool. PVE applies a pool's ACLs to its member \
                VMs, so a VM privilege held on every one of these pools counts as held on `/vms`.",
            ))
            .attribute(Attribute::new("healthy", Type::Bool).computed().description(
                "True when at least one node was checked and no node and no cluster-wide check \
                reported a reason.",
            ))
            .attribute(Attribute::new("version", Type::String).computed().description(
                "The PVE version of the API endpoint (`GET /version`), e.g. `9.2.11`; empty when \
                unreachable.",
            ))
            .attribute(Attribute::new("reasons", Type::list(Type::String)).computed().description(
                "Every reason code of the cluster and all nodes, sorted alphabetically, each once; \
                empty when healthy. The codes are listed under `nodes.reasons`.",
            ))
            .attribute(Attribute::new("messages", Type::list(Type::String)).computed().description(
                "Every explanation: cluster-wide ones first, then node ones prefixed with the node \
                name.",
            ))
            .attribute(Attribute::nested("nodes", Nesting::List, node).computed().description(
                "One result per checked node, in the order of `node_names` (or of `GET /nodes`).",
            )),
    )
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
        node_names: list("node_names"),
        templates: list("templates").unwrap_or_default(),
        iso_storage: config
            .get_attr("iso_storage")
            .as_str()
            .unwrap_or(seed_storage)
            .to_owned(),
        bridges: list("bridges").unwrap_or_default(),
        pools: list("pools").unwrap_or_default(),
        clone_storage: clone_storage.map(str::to_owned),
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
        ("name", Value::from(node.name.clone())),
        ("online", Value::from(node.online)),
        ("version", Value::from(node.version.clone())),
        ("iso_storage_ok", Value::from(node.iso_storage_ok)),
        (
            "iso_storage_free_bytes",
            node.iso_storage_free_bytes
                .and_then(|b| i64::try_from(b).ok())
                .map_or(Value::Null, Value::from),
        ),
        ("templates_ok", Value::from(node.templates_ok)),
        ("privileges_ok", Value::from(node.privileges_ok)),
        ("bridges_ok", Value::from(node.bridges_ok)),
        (
            "memory_total_bytes",
            node.memory_total_bytes
                .and_then(|b| i64::try_from(b).ok())
                .map_or(Value::Null, Value::from),
        ),
        (
            "memory_promised_bytes",
            node.memory_promised_bytes
                .and_then(|b| i64::try_from(b).ok())
                .map_or(Value::Null, Value::from),
        ),
        (
            "eligible",
            Value::from(node.online && node.iso_storage_ok && node.templates_ok && node.bridges_ok),
        ),
        ("reasons", codes(&node.reasons())),
        (
            "messages",
            strings(node.findings.iter().map(|f| f.message.clone())),
        ),
    ])
}

/// The state: the configuration plus every computed value.
pub fn state_from(config: &Value, request: &HealthRequest, report: &HealthReport) -> Value {
    let mut state = config.clone();
    state.set_attr("iso_storage", Value::from(request.iso_storage.clone()));
    state.set_attr("healthy", Value::from(report.healthy()));
    state.set_attr("version", Value::from(report.version.clone()));
    state.set_attr("reasons", codes(&report.reasons()));
    state.set_attr("messages", strings(report.messages()));
    state.set_attr(
        "nodes",
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
        check_names(&mut diags, config, "node_names", non_empty_name);
        if config
            .get_attr("node_names")
            .as_elements()
            .is_some_and(<[Value]>::is_empty)
        {
            diags.attribute_error(
                AttributePath::root().attr("node_names"),
                "Invalid Attribute Value",
                "Attribute node_names must name at least one node; leave it out to check every \
                node",
            );
        }
        check_names(&mut diags, config, "templates", non_empty_name);
        check_names(&mut diags, config, "bridges", non_empty_name);
        check_names(&mut diags, config, "pools", non_empty_name);
        if let Some(storage) = config.get_attr("iso_storage").as_str()
            && let Err(why) = validate::storage_id(storage)
        {
            diags.attribute_error(
                AttributePath::root().attr("iso_storage"),
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
