//! `proxmox_proxy_vm`: plan, apply, read and import over the lifecycle functions.

mod lifecycle;
mod model;
mod schema;
mod upgrade;

use std::sync::Arc;

use tfplugin::{
    ApplyAction, ApplyRequest, ApplyResponse, AttributePath, Context, Diagnostic, Diagnostics,
    ImportResponse, ImportedResource, PlanRequest, PlanResponse, ReadRequest, ReadResponse,
    Resource, Schema, Value, plan,
};

use crate::diagnostics;
use crate::provider::{Configured, Shared};
use lifecycle::{Failure, StepError};
use model::{Desired, seed_hash};

pub use schema::TYPE_NAME;

#[derive(Debug)]
pub struct ProxyVm {
    shared: Arc<Shared>,
}

impl ProxyVm {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

fn step_diagnostic(operation: &str, name: &str, error: &StepError) -> Diagnostic {
    match error {
        StepError::Pve(e) => diagnostics::pve_error(operation, name, e),
        StepError::Plain(text) => diagnostics::vm_error(operation, name, text.clone()),
    }
}

/// Races an operation against Terraform's stop request (Ctrl-C) and its timeout.
async fn bounded<T>(
    ctx: &Context,
    limit: std::time::Duration,
    what: &str,
    work: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    tokio::select! {
        result = tokio::time::timeout(limit, work) => result.unwrap_or_else(|_| Err(Failure {
            made: None,
            error: StepError::Plain(format!("{what} did not finish within its timeout ({}s); raise `timeouts`, or run apply again to resume", limit.as_secs())),
        })),
        () = ctx.stop.stopped() => Err(Failure {
            made: None,
            error: StepError::Plain(format!("{what} was interrupted by Terraform; the next apply resumes where it stopped")),
        }),
    }
}

fn vmid_of(state: &Value) -> Option<u32> {
    state
        .get_attr("vmid")
        .as_i64()
        .and_then(|v| u32::try_from(v).ok())
}

#[tfplugin::async_trait]
impl Resource for ProxyVm {
    fn type_name(&self) -> &str {
        TYPE_NAME
    }

    fn schema(&self) -> Schema {
        schema::schema()
    }

    async fn validate(&self, ctx: &Context, config: &Value) -> Diagnostics {
        let mut diagnostics = model::validate_config(config);
        diagnostics.extend(model::refuse_write_only_without_support(
            config,
            &ctx.client,
        ));
        diagnostics
    }

    async fn plan(&self, ctx: &Context, request: PlanRequest) -> PlanResponse {
        let refused = model::refuse_write_only_without_support(&request.config, &ctx.client);
        if refused.has_errors() {
            // No planned state at all: the values must not reach a plan file.
            return PlanResponse {
                diagnostics: refused,
                ..PlanResponse::default()
            };
        }
        let configured = self.shared.get().ok();
        plan_change(&self.schema(), configured.as_deref(), request)
    }

    async fn upgrade_state(
        &self,
        _ctx: &Context,
        request: tfplugin::UpgradeRequest,
    ) -> tfplugin::UpgradeResponse {
        upgrade::upgrade(&request)
    }

    async fn apply(&self, ctx: &Context, request: ApplyRequest) -> ApplyResponse {
        let configured = match self.shared.get() {
            Ok(c) => c,
            Err(d) => {
                return ApplyResponse {
                    new_state: request.prior_state,
                    diagnostics: d.into(),
                    ..Default::default()
                };
            }
        };
        match request.action() {
            ApplyAction::Create => create(ctx, &configured, &request).await,
            ApplyAction::Update => update(ctx, &configured, &request).await,
            ApplyAction::Delete => delete(ctx, &configured, &request).await,
        }
    }

    async fn read(&self, _ctx: &Context, request: ReadRequest) -> ReadResponse {
        let prior = request.current_state;
        let mut response = ReadResponse {
            private: request.private,
            ..Default::default()
        };
        let configured = match self.shared.get() {
            Ok(c) => c,
            Err(d) => {
                response.new_state = prior;
                response.diagnostics.push(d);
                return response;
            }
        };
        let Some(vmid) = vmid_of(&prior) else {
            response.new_state = prior;
            return response;
        };
        let name = prior.get_attr("name").as_str().map(str::to_owned);
        match lifecycle::read(&configured, vmid, name.as_deref()).await {
            Ok(lifecycle::Found::Ours(observed)) => response.new_state = observed.to_state(&prior),
            // A clone in progress (an earlier create's) still exists: keep what we know.
            Ok(lifecycle::Found::Cloning) => response.new_state = prior,
            // Gone: Terraform drops it from state and the plan proposes a create.
            Ok(lifecycle::Found::Gone) => response.new_state = Value::Null,
            Err(error) => {
                response.new_state = prior;
                response.diagnostics.push(step_diagnostic(
                    "read",
                    name.as_deref().unwrap_or("?"),
                    &error,
                ));
            }
        }
        response
    }

    async fn import(&self, _ctx: &Context, id: &str) -> ImportResponse {
        let mut response = ImportResponse::default();
        let configured = match self.shared.get() {
            Ok(c) => c,
            Err(d) => {
                response.diagnostics.push(d);
                return response;
            }
        };
        let (node, vmid_text) = match id.split_once('/') {
            Some((node, vmid)) => (Some(node.to_owned()), vmid),
            None => (None, id),
        };
        let Ok(vmid) = vmid_text.trim().parse::<u32>() else {
            response.diagnostics.error(
                "Invalid import ID",
                format!("`{id}` is not a VMID or NODE/VMID, e.g. `100123` or `pve1/100123`."),
            );
            return response;
        };
        match lifecycle::read(&configured, vmid, None).await {
            Ok(lifecycle::Found::Ours(observed)) => {
                let mut seed = Value::object([("vmid", Value::number(i64::from(vmid)))]);
                if let Some(node) = node {
                    seed.set_attr("node", Value::string(node));
                }
                let state = observed.to_state(&seed);
                response.imported.push(ImportedResource { type_name: TYPE_NAME.into(), state, private: Vec::new() });
            }
            Ok(_) => response.diagnostics.error(
                "Cannot import proxy VM",
                format!("No VM {vmid} carrying this provider's ownership mark was found. Only VMs made by proxmox_proxy_vm can be imported; other VMs are never modified."),
            ),
            Err(error) => response.diagnostics.push(step_diagnostic("import", &format!("{vmid}"), &error)),
        }
        response
    }
}

/// Plan rules: defaults for unset attributes, unknown for what only apply can know, the seed
/// hash from the write-only inputs, and replacement where PVE cannot change the VM in place.
fn plan_change(
    schema: &Schema,
    configured: Option<&Configured>,
    request: PlanRequest,
) -> PlanResponse {
    let PlanRequest {
        prior_state: prior,
        proposed_new_state: proposed,
        config,
        prior_private,
    } = request;
    let mut response = PlanResponse {
        planned_private: prior_private,
        ..Default::default()
    };
    if proposed.is_null() {
        response.planned_state = Value::Null;
        return response;
    }
    let creating = prior.is_null();
    let mut planned = plan::plan_computed(&schema.block, &prior, &proposed);
    let default = |planned: &mut Value, name: &str, value: Value| {
        if config.get_attr(name).is_null() {
            planned.set_attr(name, value);
        }
    };
    default(&mut planned, "started", Value::Bool(true));
    default(&mut planned, "wait_for_address", Value::Bool(true));
    default(&mut planned, "reboot_if_needed", Value::Bool(false));
    if creating && let Some(configured) = configured {
        {
            default(
                &mut planned,
                "seed_storage",
                Value::string(&configured.seed_storage),
            );
            if let Some(storage) = &configured.clone_storage {
                default(&mut planned, "clone_storage", Value::string(storage));
            }
        }
    }
    planned.set_attr("user_data", Value::Null);
    planned.set_attr("network_config", Value::Null);
    let (user_data, network_config) = (
        config.get_attr("user_data"),
        config.get_attr("network_config"),
    );
    planned.set_attr(
        "seed_hash",
        if user_data.is_known() && network_config.is_known() {
            Value::string(seed_hash(user_data.as_str(), network_config.as_str()))
        } else {
            Value::Unknown
        },
    );
    // The power state follows `started` when it changes; otherwise the VM keeps what it
    // shows (a paused VM stays `paused`, and planning `running` would never come true).
    let started = planned.get_attr("started").as_bool();
    if creating
        || !prior
            .get_attr("started")
            .same_as(planned.get_attr("started"))
    {
        planned.set_attr(
            "status",
            match started {
                Some(true) => Value::string("running"),
                Some(false) => Value::string("stopped"),
                None => Value::Unknown,
            },
        );
    }
    if creating {
        if !planned.get_attr("started").as_bool().unwrap_or(true) {
            // A stopped VM reports no addresses.
            planned.set_attr("ipv4_address", Value::string(""));
            planned.set_attr("ipv4_addresses", Value::List(Vec::new()));
            planned.set_attr("ipv6_addresses", Value::List(Vec::new()));
        }
        response.planned_state = planned;
        return response;
    }
    // Update.
    for name in ["seed_storage", "clone_storage"] {
        if config.get_attr(name).is_null() {
            planned.set_attr(name, prior.get_attr(name).clone());
        }
    }
    response.requires_replace = plan::requires_replace(&prior, &planned, schema::REPLACE_ON_CHANGE);
    if let (Some(new), Some(old)) = (
        planned.get_attr("disk_gib").as_i64(),
        prior.get_attr("disk_gib").as_i64(),
    ) && new < old
    {
        response
            .requires_replace
            .push(AttributePath::root().attr("disk_gib"));
        response.diagnostics.push(
            Diagnostic::warning(
                "disk_gib shrinks: the VM will be replaced",
                format!("disk_gib = {new} is smaller than the current {old} GiB. PVE cannot shrink disks, so the plan replaces the VM. Keep disk_gib at {old} or more to keep it."),
            )
            .with_attribute(AttributePath::root().attr("disk_gib")),
        );
    }
    let in_place = [
        "cores", "memory", "disk_gib", "bridge", "vlan_tag", "tags", "started",
    ];
    let changed = plan::changed_attributes(&prior, &planned);
    if changed.iter().any(|name| in_place.contains(&name.as_str())) {
        for name in ["ipv4_address", "ipv4_addresses", "ipv6_addresses"] {
            planned.set_attr(name, Value::Unknown);
        }
    }
    response.planned_state = planned;
    response
}

async fn create(ctx: &Context, configured: &Configured, request: &ApplyRequest) -> ApplyResponse {
    let desired = Desired::from_plan(
        &request.planned_state,
        &request.config,
        &configured.seed_storage,
    );
    let outcome = bounded(
        ctx,
        desired.timeouts.create,
        "create",
        lifecycle::create(configured, &desired),
    )
    .await;
    let mut response = ApplyResponse::default();
    match outcome {
        Ok(observed) => response.new_state = observed.to_state(&request.planned_state),
        Err(failure) => {
            response
                .diagnostics
                .push(step_diagnostic("create", &desired.name, &failure.error));
            // A VM that exists stays in state (Terraform taints it), so the next apply replaces
            // it and a destroy removes it: nothing leaks.
            let made = match failure.made {
                Some(made) => Some(made),
                // A timeout or interrupt loses the step's own record: look for the VM we made.
                None => lifecycle::locate_own(configured, &desired).await,
            };
            if let Some((vmid, node)) = made {
                response.new_state =
                    partial_state(configured, &request.planned_state, vmid, &node).await;
            }
        }
    }
    response
}

/// The state of a half-made VM: what can be read of it, every unknown made concrete.
async fn partial_state(configured: &Configured, planned: &Value, vmid: u32, node: &str) -> Value {
    let pool = planned.get_attr("pool").as_str().map(str::to_owned);
    if let Ok(Some(observed)) = lifecycle::observe(&configured.client, node, vmid, pool).await {
        return observed.to_state(planned);
    }
    let mut state = planned.clone();
    if let Some(entries) = planned.as_entries() {
        for (name, value) in entries {
            if !value.is_known() {
                state.set_attr(name.clone(), Value::Null);
            }
        }
    }
    state.set_attr("id", Value::string(vmid.to_string()));
    state.set_attr("vmid", Value::number(i64::from(vmid)));
    state.set_attr("current_node", Value::string(node));
    state
}

async fn update(ctx: &Context, configured: &Configured, request: &ApplyRequest) -> ApplyResponse {
    let prior = &request.prior_state;
    let planned = &request.planned_state;
    let desired = Desired::from_plan(planned, &request.config, &configured.seed_storage);
    let mut response = ApplyResponse {
        new_state: prior.clone(),
        ..Default::default()
    };
    let Some(vmid) = vmid_of(prior) else {
        response
            .diagnostics
            .error("Unable to update proxy VM", "the state has no VMID");
        return response;
    };
    let node = prior
        .get_attr("current_node")
        .as_str()
        .or_else(|| prior.get_attr("node").as_str())
        .unwrap_or_default()
        .to_owned();
    let vm_touching = [
        "cores", "memory", "disk_gib", "bridge", "vlan_tag", "tags", "started",
    ];
    let changed = plan::changed_attributes(prior, planned);
    let mut interfaces = None;
    if changed
        .iter()
        .any(|name| vm_touching.contains(&name.as_str()))
    {
        let disk_changed = changed.iter().any(|n| n == "disk_gib");
        let deadline = tokio::time::Instant::now() + desired.timeouts.update;
        let work = async {
            lifecycle::update(configured, &node, vmid, &desired, disk_changed, deadline)
                .await
                .map_err(|error| Failure { made: None, error })
        };
        match bounded(ctx, desired.timeouts.update, "update", work).await {
            Ok(updated) => {
                if let Some(warning) = updated.pending_warning {
                    response
                        .diagnostics
                        .warning("Changes pending until reboot", warning);
                }
                interfaces = updated.interfaces;
            }
            Err(failure) => {
                response
                    .diagnostics
                    .push(step_diagnostic("update", &desired.name, &failure.error));
                return response;
            }
        }
    }
    match lifecycle::observe_with(
        &configured.client,
        &node,
        vmid,
        desired.pool.clone(),
        interfaces,
    )
    .await
    {
        Ok(Some(observed)) => response.new_state = observed.to_state(planned),
        Ok(None) => response.diagnostics.push(diagnostics::vm_error(
            "update",
            &desired.name,
            format!("VM {vmid} disappeared during the update"),
        )),
        Err(error) => response
            .diagnostics
            .push(step_diagnostic("update", &desired.name, &error)),
    }
    response
}

async fn delete(ctx: &Context, configured: &Configured, request: &ApplyRequest) -> ApplyResponse {
    let prior = &request.prior_state;
    let name = prior
        .get_attr("name")
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut response = ApplyResponse::default();
    let Some(vmid) = vmid_of(prior) else {
        return response;
    };
    let seed_volume = prior
        .get_attr("seed_volume")
        .as_str()
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    let seed_node = prior
        .get_attr("node")
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let limit = model::Timeouts::from_value(prior.get_attr("timeouts")).delete;
    let work = async {
        lifecycle::delete(
            configured,
            vmid,
            &name,
            seed_volume.as_deref().map(|v| (seed_node.as_str(), v)),
        )
        .await
        .map_err(|error| Failure { made: None, error })
    };
    match bounded(ctx, limit, "delete", work).await {
        Ok(Some(note)) => response
            .diagnostics
            .warning("Proxy VM already replaced", note),
        Ok(None) => {}
        Err(failure) => {
            response.new_state = prior.clone();
            response
                .diagnostics
                .push(step_diagnostic("delete", &name, &failure.error));
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(prior: Value, proposed: Value, config: Value) -> PlanRequest {
        PlanRequest {
            prior_state: prior,
            proposed_new_state: proposed,
            config,
            prior_private: Vec::new(),
        }
    }

    fn config() -> Value {
        Value::object([
            ("name", Value::string("edge-0")),
            ("node", Value::string("pve1")),
            ("template", Value::string("debian-13-proxy")),
            ("disk_gib", Value::number(10)),
            ("user_data", Value::string("#cloud-config\n")),
        ])
    }

    #[test]
    fn create_plans_defaults_and_never_holds_write_only_values() {
        let mut proposed = config();
        proposed.set_attr("user_data", Value::Null);
        let plan = plan_change(
            &schema::schema(),
            None,
            request(Value::Null, proposed, config()),
        );
        let planned = plan.planned_state;
        assert_eq!(planned.get_attr("started"), &Value::Bool(true));
        assert_eq!(planned.get_attr("status"), &Value::string("running"));
        assert!(planned.get_attr("user_data").is_null());
        assert_eq!(
            planned.get_attr("seed_hash"),
            &Value::string(seed_hash(Some("#cloud-config\n"), None))
        );
        assert!(
            !planned.get_attr("vmid").is_known(),
            "a derived VMID is known only after apply"
        );
        assert!(plan.requires_replace.is_empty());
    }

    #[test]
    fn shrinking_the_disk_replaces_and_says_why_while_a_paused_vm_stays_paused() {
        let mut prior = config();
        prior.set_attr("user_data", Value::Null);
        prior.set_attr("disk_gib", Value::number(20));
        prior.set_attr("started", Value::Bool(true));
        prior.set_attr("status", Value::string("paused"));
        prior.set_attr(
            "seed_hash",
            Value::string(seed_hash(Some("#cloud-config\n"), None)),
        );
        let mut proposed = prior.clone();
        proposed.set_attr("disk_gib", Value::number(10));
        let plan = plan_change(&schema::schema(), None, request(prior, proposed, config()));
        assert!(
            plan.requires_replace
                .iter()
                .any(|p| *p == AttributePath::root().attr("disk_gib"))
        );
        assert!(
            plan.diagnostics
                .iter()
                .any(|d| d.summary.contains("disk_gib shrinks"))
        );
        assert_eq!(
            plan.planned_state.get_attr("status"),
            &Value::string("paused")
        );
    }

    #[test]
    fn a_new_seed_content_replaces_the_vm() {
        let mut prior = config();
        prior.set_attr("user_data", Value::Null);
        prior.set_attr(
            "seed_hash",
            Value::string(seed_hash(Some("#cloud-config\n"), None)),
        );
        let proposed = prior.clone();
        let mut changed = config();
        changed.set_attr(
            "user_data",
            Value::string("#cloud-config\npackages: [nginx]\n"),
        );
        let plan = plan_change(&schema::schema(), None, request(prior, proposed, changed));
        assert!(
            plan.requires_replace
                .iter()
                .any(|p| *p == AttributePath::root().attr("seed_hash"))
        );
    }
}
