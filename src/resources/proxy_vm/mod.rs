//! `proxmox_proxy_vm`: plan, apply, read and import over the lifecycle functions.

mod lifecycle;
mod model;
mod plan_checks;
mod schema;
mod upgrade;

use std::sync::Arc;

use tfplugin::{
    ApplyAction, ApplyRequest, ApplyResponse, AttributePath, Context, Diagnostic, Diagnostics,
    ImportResponse, ImportedResource, PlanRequest, PlanResponse, ReadRequest, ReadResponse,
    Resource, Schema, Value, plan,
};

use crate::context::{Configured, Shared};
use crate::diagnostics;
use crate::ownership;
use lifecycle::{Expected, ProgressCell, StepError};
use model::{Desired, Private, seed_hash};

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
        StepError::Plain(text) | StepError::TakenOver(text) => {
            diagnostics::vm_error(operation, name, text.clone())
        }
    }
}

/// Races an operation against Terraform's stop request (Ctrl-C) and its timeout.
async fn bounded<T>(
    ctx: &Context,
    limit: std::time::Duration,
    what: &str,
    work: impl Future<Output = Result<T, StepError>>,
) -> Result<T, StepError> {
    tokio::select! {
        result = tokio::time::timeout(limit, work) => result.unwrap_or_else(|_| Err(
            StepError::Plain(format!("{what} did not finish within its timeout ({}s); raise `timeouts`, or run apply again to resume", limit.as_secs())),
        )),
        () = ctx.stop.stopped() => Err(
            StepError::Plain(format!("{what} was interrupted by Terraform; the next apply resumes where it stopped")),
        ),
    }
}

/// The fleet a state's VM belongs to: states from before fleets existed have none, which is
/// the default fleet.
fn fleet_of(state: &Value) -> String {
    state
        .get_attr("fleet")
        .as_str()
        .unwrap_or_default()
        .to_owned()
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
        let mut response = plan_change(&self.schema(), configured.as_deref(), request.clone());
        if let Some(configured) = configured.as_deref() {
            refuse_duplicate_name(configured, &request, &mut response);
            if !response.diagnostics.has_errors() && !response.planned_state.is_null() {
                let checks = if request.prior_state.is_null() {
                    plan_checks::check_create(configured, &response.planned_state, &request.config)
                        .await
                } else {
                    let changed =
                        plan::changed_attributes(&request.prior_state, &response.planned_state);
                    if changed.is_empty() || !response.requires_replace.is_empty() {
                        // No change needs no request; a replacement's create half is
                        // planned (and checked) separately.
                        Diagnostics::new()
                    } else {
                        plan_checks::check_update(configured, &response.planned_state, &changed)
                            .await
                    }
                };
                response.diagnostics.extend(checks);
            }
        }
        response
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
        let fleet = fleet_of(&prior);
        let mut private = Private::decode(&response.private);
        let expected = Expected {
            name: name.as_deref(),
            fleet: &fleet,
            create_token: private.create_token.as_deref(),
        };
        match lifecycle::read(&configured, vmid, expected).await {
            Ok(lifecycle::Found::Ours(observed)) => {
                response.new_state = observed.to_state(&prior);
                if let (None, Some(pool)) = (&observed.pool, prior.get_attr("pool").as_str()) {
                    // PVE lists a VM's pool only to a token with Pool.Audit on it: a VM
                    // missing from its pool is drift only when the token could have seen it.
                    if let Ok(true) = configured
                        .facts
                        .may_audit_pool(&configured.client, pool)
                        .await
                        .as_deref()
                    {
                        response.new_state.set_attr("pool", Value::Null);
                    }
                }
                private.pending = observed
                    .pending_attributes()
                    .into_iter()
                    .map(str::to_owned)
                    .collect();
                response.private = private.encode();
            }
            // A clone in progress (an earlier create's) still exists: keep what we know.
            Ok(lifecycle::Found::Cloning) => response.new_state = prior,
            // Gone: Terraform drops it from state and the plan proposes a create.
            Ok(lifecycle::Found::Gone) => response.new_state = Value::Null,
            Ok(lifecycle::Found::NotOurs { why, .. }) => {
                response.new_state = Value::Null;
                response
                    .diagnostics
                    .warning("Proxy VM no longer this state's", why);
            }
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
        let any_fleet = Expected {
            name: None,
            fleet: &configured.fleet,
            create_token: None,
        };
        match lifecycle::read(&configured, vmid, any_fleet).await {
            Ok(lifecycle::Found::Ours(observed)) => {
                let phase = observed.mark.as_ref().map(|m| m.phase);
                if phase == Some(ownership::Phase::Creating) {
                    response.diagnostics.error(
                        "Cannot import proxy VM",
                        format!("VM {vmid} is a create still in progress (or interrupted) of `{}`. Run the apply that creates it (it resumes the create), or destroy it; import it once it is finished.", observed.name),
                    );
                    return response;
                }
                let mut seed = Value::object([("vmid", Value::number(i64::from(vmid)))]);
                if let Some(node) = node {
                    seed.set_attr("node", Value::string(node));
                }
                let state = observed.to_state(&seed);
                let private = Private {
                    create_token: observed.mark.as_ref().and_then(|m| m.create_token.clone()),
                    pending: Vec::new(),
                };
                response.imported.push(ImportedResource { type_name: TYPE_NAME.into(), state, private: private.encode() });
            }
            Ok(lifecycle::Found::NotOurs { mark: Some(mark), .. }) if mark.fleet != configured.fleet => response.diagnostics.error(
                "Cannot import proxy VM from another fleet",
                format!("VM {vmid} (`{}`) belongs to fleet `{}`, and this provider manages fleet `{}`. Import it with a provider whose `fleet` is `{}`, or leave it to the configuration that owns it.", mark.owner, mark.fleet, configured.fleet, mark.fleet),
            ),
            Ok(_) => response.diagnostics.error(
                "Cannot import proxy VM",
                format!("No VM {vmid} carrying this provider's ownership mark was found. Only VMs made by proxmox_proxy_vm can be imported; other VMs are never modified."),
            ),
            Err(error) => response.diagnostics.push(step_diagnostic("import", &format!("{vmid}"), &error)),
        }
        response
    }
}

/// Two resource instances with the same name in one fleet would fight over one VM: the
/// second one planned in this provider process is refused, pointing at `name`. A planned
/// create counts once per call; an existing VM counts once however often it is planned.
fn refuse_duplicate_name(
    configured: &Configured,
    request: &PlanRequest,
    response: &mut PlanResponse,
) {
    let planned = &response.planned_state;
    let Some(name) = planned.get_attr("name").as_str() else {
        return;
    };
    let replacing = !response.requires_replace.is_empty();
    let instance = match vmid_of(&request.prior_state) {
        // The first half of a replacement: Terraform plans its create separately.
        Some(_) if replacing => return,
        Some(vmid) => format!("vmid {vmid}"),
        None => String::new(),
    };
    let fleet = planned
        .get_attr("fleet")
        .as_str()
        .map_or_else(|| configured.fleet.clone(), str::to_owned);
    if !configured
        .runtime
        .note_planned_name(&fleet, name, &instance)
    {
        let in_fleet = if fleet.is_empty() {
            String::new()
        } else {
            format!(" in fleet `{fleet}`")
        };
        response.diagnostics.attribute_error(
            AttributePath::root().attr("name"),
            "Duplicate proxy VM name",
            format!("Another proxmox_proxy_vm in this configuration is also named `{name}`{in_fleet}. Each name may be used once per fleet, since the name identifies the VM on the cluster: give each resource (and each count/for_each instance) its own name."),
        );
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
    let pending = Private::decode(&prior_private).pending;
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
    if creating {
        planned.set_attr(
            "fleet",
            configured.map_or(Value::Unknown, |c| Value::string(&c.fleet)),
        );
    }
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
    if !pending.is_empty() && planned.get_attr("reboot_if_needed").as_bool() != Some(true) {
        let first = pending[0].split('/').next().unwrap_or("cores");
        response.diagnostics.push(
            Diagnostic::warning(
                "Changes pending until reboot",
                format!(
                    "PVE holds changes to {} of this VM until its next boot. Reboot it, or set reboot_if_needed = true to let the provider do it at the next apply.",
                    pending.join(", ")
                ),
            )
            .with_attribute(AttributePath::root().attr(first)),
        );
    }
    // Only a change that can move the guest's address makes it unknown: the network, the
    // power state, or a reboot to apply cores/memory.
    let changed = plan::changed_attributes(&prior, &planned);
    let reboots = planned.get_attr("reboot_if_needed").as_bool() == Some(true)
        && changed.iter().any(|c| c == "cores" || c == "memory");
    if reboots
        || changed
            .iter()
            .any(|name| ["bridge", "vlan_tag", "started"].contains(&name.as_str()))
    {
        for name in ["ipv4_address", "ipv4_addresses", "ipv6_addresses"] {
            planned.set_attr(name, Value::Unknown);
        }
    }
    response.planned_state = planned;
    response
}

async fn create(ctx: &Context, configured: &Configured, request: &ApplyRequest) -> ApplyResponse {
    let mut desired = Desired::from_plan(
        &request.planned_state,
        &request.config,
        &configured.seed_storage,
        &configured.fleet,
    );
    desired.create_token = ownership::new_create_token();
    let private = Private {
        create_token: Some(desired.create_token.clone()),
        pending: Vec::new(),
    };
    let progress = ProgressCell::default();
    let outcome = bounded(
        ctx,
        desired.timeouts.create,
        "create",
        lifecycle::create(configured, &desired, &progress),
    )
    .await;
    let mut response = ApplyResponse::default();
    match outcome {
        Ok(observed) => {
            response.new_state = observed.to_state(&request.planned_state);
            response.private = private.encode();
        }
        Err(error) => {
            response
                .diagnostics
                .push(step_diagnostic("create", &desired.name, &error));
            // A VM another create took over is theirs: nothing of it belongs here.
            if matches!(error, StepError::TakenOver(_)) {
                return response;
            }
            // Whatever was made stays in state (Terraform taints it), so the next apply
            // replaces it and a destroy removes the VM and its seed: nothing leaks.
            let made = progress.get();
            if let Some((vmid, node)) = made.vm {
                response.new_state = partial_state(
                    configured,
                    &request.planned_state,
                    vmid,
                    &node,
                    made.seed_volume.as_deref(),
                )
                .await;
                response.private = private.encode();
            }
        }
    }
    response
}

/// The state of a half-made VM: every attribute the configuration gave, what can be read of
/// the VM, and what the create recorded (VMID, node, seed volume), every unknown made
/// concrete.
async fn partial_state(
    configured: &Configured,
    planned: &Value,
    vmid: u32,
    node: &str,
    seed_volume: Option<&str>,
) -> Value {
    let pool = planned.get_attr("pool").as_str().map(str::to_owned);
    let mut state = match lifecycle::observe(&configured.client, node, vmid, pool).await {
        Ok(Some(observed)) => observed.to_state(planned),
        _ => {
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
    };
    // The configuration's identity, not a half-made VM's (a clone has no name yet).
    for name in ["name", "node", "template", "seed_storage", "fleet"] {
        let wanted = planned.get_attr(name);
        if wanted.is_wholly_known() && !wanted.is_null() {
            state.set_attr(name, wanted.clone());
        }
    }
    // A placed VM's node is known only from what the create recorded.
    if state.get_attr("node").is_null() {
        state.set_attr("node", Value::string(node));
    }
    // The seed may be uploaded but not attached yet: destroy must still find it.
    if let Some(volume) = seed_volume
        && state
            .get_attr("seed_volume")
            .as_str()
            .is_none_or(str::is_empty)
    {
        state.set_attr("seed_volume", Value::string(volume));
    }
    state
}

async fn update(ctx: &Context, configured: &Configured, request: &ApplyRequest) -> ApplyResponse {
    let prior = &request.prior_state;
    let planned = &request.planned_state;
    let desired = Desired::from_plan(
        planned,
        &request.config,
        &configured.seed_storage,
        &fleet_of(prior),
    );
    let mut private = Private::decode(&request.planned_private);
    let mut response = ApplyResponse {
        new_state: prior.clone(),
        private: private.encode(),
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
        let work = lifecycle::update(configured, &node, vmid, &desired, disk_changed, deadline);
        match bounded(ctx, desired.timeouts.update, "update", work).await {
            Ok(updated) => {
                // Warn about what this apply left pending, not again on applies that do not
                // touch it (plans keep naming it until a reboot).
                let touched: Vec<&String> = updated
                    .pending
                    .iter()
                    .filter(|key| match key.as_str() {
                        "cores" | "memory" => changed.iter().any(|c| c == *key),
                        "net0" => changed.iter().any(|c| c == "bridge" || c == "vlan_tag"),
                        _ => false,
                    })
                    .collect();
                if !touched.is_empty() {
                    response.diagnostics.warning(
                        "Changes pending until reboot",
                        format!(
                            "PVE applies these changes to VM {vmid} at its next boot: {}. Reboot it, or set reboot_if_needed = true to let the provider do it.",
                            touched.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
                        ),
                    );
                }
                interfaces = updated.interfaces;
            }
            Err(error) => {
                response
                    .diagnostics
                    .push(step_diagnostic("update", &desired.name, &error));
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
        Ok(Some(observed)) => {
            response.new_state = observed.to_state(planned);
            // The plan kept the addresses (nothing here could move them): an agent that
            // missed this one query must not make the result differ from the plan.
            for name in ["ipv4_address", "ipv4_addresses", "ipv6_addresses"] {
                let kept = planned.get_attr(name);
                if kept.is_wholly_known() && response.new_state.get_attr(name) != kept {
                    response.new_state.set_attr(name, kept.clone());
                }
            }
            private.pending = observed
                .pending_attributes()
                .into_iter()
                .map(str::to_owned)
                .collect();
            response.private = private.encode();
        }
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
    let fleet = fleet_of(prior);
    let private = Private::decode(&request.planned_private);
    let expected = Expected {
        name: Some(&name),
        fleet: &fleet,
        create_token: private.create_token.as_deref(),
    };
    let deadline = tokio::time::Instant::now() + limit;
    let work = lifecycle::delete(
        configured,
        vmid,
        expected,
        seed_volume.as_deref().map(|v| (seed_node.as_str(), v)),
        deadline,
    );
    match bounded(ctx, limit, "delete", work).await {
        Ok(Some(note)) => response
            .diagnostics
            .warning("Proxy VM not this state's", note),
        Ok(None) => {}
        Err(error) => {
            response.new_state = prior.clone();
            response.private = request.planned_private.clone();
            response
                .diagnostics
                .push(step_diagnostic("delete", &name, &error));
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

    /// The state of a VM created from [`config`]: write-only values gone, the seed hashed.
    fn created() -> Value {
        let mut state = config();
        state.set_attr("user_data", Value::Null);
        state.set_attr(
            "seed_hash",
            Value::string(seed_hash(Some("#cloud-config\n"), None)),
        );
        state
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
    fn addresses_stay_known_unless_the_change_can_move_them() {
        let mut prior = created();
        prior.set_attr("cores", Value::number(1));
        prior.set_attr("bridge", Value::string("vmbr0"));
        prior.set_attr("reboot_if_needed", Value::Bool(false));
        prior.set_attr("started", Value::Bool(true));
        prior.set_attr("wait_for_address", Value::Bool(true));
        prior.set_attr("ipv4_address", Value::string("10.0.0.10"));
        let planned = |change: &dyn Fn(&mut Value)| {
            let mut proposed = prior.clone();
            change(&mut proposed);
            let mut config = config();
            change(&mut config);
            plan_change(
                &schema::schema(),
                None,
                request(prior.clone(), proposed, config),
            )
            .planned_state
            .get_attr("ipv4_address")
            .clone()
        };
        assert_eq!(
            planned(&|v| {
                v.set_attr("cores", Value::number(2));
            }),
            Value::string("10.0.0.10"),
            "cores pending until a reboot cannot move the address"
        );
        assert_eq!(
            planned(&|v| {
                v.set_attr("bridge", Value::string("vmbr1"));
            }),
            Value::Unknown
        );
        assert_eq!(
            planned(&|v| {
                v.set_attr("cores", Value::number(2));
                v.set_attr("reboot_if_needed", Value::Bool(true));
            }),
            Value::Unknown,
            "a reboot may"
        );
    }

    #[test]
    fn a_new_seed_content_replaces_the_vm() {
        let prior = created();
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
