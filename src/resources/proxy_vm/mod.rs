//! `proxmox_proxy_vm`: plan, apply, read and import over the lifecycle functions.

mod apply;
mod attr;
mod checks;
mod lifecycle;
mod model;
mod plan;
mod plan_checks;
mod schema;
mod upgrade;

use std::sync::Arc;

use tfplugin::{
    ApplyAction, ApplyRequest, ApplyResponse, Context, Diagnostics, ImportResponse,
    ImportedResource, PlanRequest, PlanResponse, ReadRequest, ReadResponse, Resource, Schema,
    Value,
};

use crate::context::{Configured, Shared};
use crate::invocation;
use crate::ownership;
use apply::{create, delete, step_diagnostic, update};
use lifecycle::{Expected, ExpectedToken};
use model::{Private, fleet_of, vmid_of};
use plan::{plan_change, refuse_duplicate_name};

pub use schema::TYPE_NAME;

/// Records in this working directory's journal whether the plan replaces the prior VM, so
/// that a `create_before_destroy` replacement may be made beside it (and only it).
fn note_replacement(configured: &Configured, request: &PlanRequest, response: &PlanResponse) {
    let Some(token) = Private::decode(&request.prior_private).create_token else {
        return;
    };
    let prior = &request.prior_state;
    let Some(name) = prior.get_attr(attr::NAME).as_str() else {
        return;
    };
    let fleet = fleet_of(prior);
    let journal = &configured.journal;
    journal.confirmed(&fleet, name, &token);
    if response.requires_replace.is_empty() && !response.planned_state.is_null() {
        journal.not_replaced(&fleet, name, &token);
    } else if !response.requires_replace.is_empty() {
        journal.replacing(&fleet, name, &token);
    }
}

#[derive(Debug)]
pub struct ProxyVm {
    shared: Arc<Shared>,
}

impl ProxyVm {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
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
            note_replacement(configured, &request, &response);
            refuse_duplicate_name(configured, &request, &mut response);
            if !response.diagnostics.has_errors() && !response.planned_state.is_null() {
                let checks = if request.prior_state.is_null() {
                    // A create half of a replacement carries the replaced VM's private data.
                    let private = Private::decode(&request.prior_private);
                    let replacing =
                        (private != Private::default()).then_some(private.create_token.as_deref());
                    plan_checks::check_create(
                        configured,
                        &response.planned_state,
                        &request.config,
                        replacing,
                    )
                    .await
                } else {
                    let changed = tfplugin::plan::changed_attributes(
                        &request.prior_state,
                        &response.planned_state,
                    );
                    if changed.is_empty() || !response.requires_replace.is_empty() {
                        // No change needs no request; a replacement's create half is
                        // planned (and checked) separately.
                        Diagnostics::new()
                    } else {
                        plan_checks::check_update(configured, &response.planned_state, &changed)
                            .await
                    }
                };
                response
                    .diagnostics
                    .extend(plan_checks::severity_for(checks, invocation::current()));
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
        let name = prior.get_attr(attr::NAME).as_str().map(str::to_owned);
        let fleet = fleet_of(&prior);
        let mut private = Private::decode(&response.private);
        let expected = Expected {
            name: name.as_deref(),
            fleet: &fleet,
            token: ExpectedToken::of_state(
                private.create_token.as_deref(),
                prior.get_attr(attr::SEED_HASH).as_str(),
            ),
        };
        match lifecycle::read(&configured, vmid, expected).await {
            Ok(lifecycle::Found::Ours(observed)) => {
                if let Some(token) = &private.create_token {
                    // Terraform's state holds this create: no later create resumes it.
                    configured.journal.confirmed(
                        &fleet,
                        name.as_deref().unwrap_or_default(),
                        token,
                    );
                }
                response.new_state = observed.to_state(&prior);
                if let Some(why) = observed.seed_drift(&prior) {
                    response.diagnostics.warning(
                        "Proxy VM boots another seed",
                        format!(
                            "{why}: it may run another user-data than this configuration's. The \
                             plan replaces it."
                        ),
                    );
                }
                if let (None, Some(pool)) = (&observed.pool, prior.get_attr(attr::POOL).as_str()) {
                    // PVE lists a VM's pool only to a token with Pool.Audit on it: a VM
                    // missing from its pool is drift only when the token could have seen it.
                    if let Ok(true) = configured
                        .facts
                        .may_audit_pool(&configured.client, pool)
                        .await
                        .as_deref()
                    {
                        response.new_state.set_attr(attr::POOL, Value::Null);
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
            // Kept in state (so no second VM of the name is made), never written to, and
            // the user told how to hand it back.
            Ok(lifecycle::Found::MarkLost { vmid, node }) => {
                response.new_state = prior.clone();
                let name = name.as_deref().unwrap_or_default();
                let mut mark = ownership::Mark::creating(
                    name,
                    &fleet,
                    "",
                    prior.get_attr(attr::TEMPLATE).as_str().unwrap_or_default(),
                )
                .with_phase(ownership::Phase::Done);
                // Restored without this state's create token (tokens stay out of messages):
                // the seed hash, keyed with the token, proves it is this state's VM.
                mark.create_token = None;
                if let Some(hash) = prior
                    .get_attr(attr::SEED_HASH)
                    .as_str()
                    .filter(|h| !h.is_empty())
                {
                    mark = mark.with_seed_hash(hash);
                }
                response.diagnostics.warning(
                    "Proxy VM lost its ownership mark",
                    format!(
                        "VM {vmid} on {node} is named `{name}` but its description no longer \
                         carries this provider's ownership mark (it was edited). It stays in this \
                         state, but nothing will be changed or destroyed on it until it is marked \
                         again, and no second VM of the name is made.\n\nTo manage it again, put \
                         these lines back at the end of its description (PVE web UI: VM {vmid} > \
                         Summary > Notes) and run plan again:\n\n{}\n\nIf it is not this \
                         configuration's VM any more, remove it from this state: terraform state \
                         rm 'ADDRESS' (ADDRESS is this resource's address, e.g. \
                         proxmox_proxy_vm.edge[0]).",
                        mark.render()
                    ),
                );
            }
            Ok(lifecycle::Found::NotOurs { why, .. }) => {
                response.new_state = Value::Null;
                response
                    .diagnostics
                    .warning("Proxy VM no longer this state's", why);
            }
            // The node behind the API cannot be reached (PVE's 595): the rest of the plan
            // (a destroy's refresh above all) goes on with what the state last knew.
            Err(lifecycle::StepError::Pve(error)) if error.status() == Some(595) => {
                response.new_state = prior;
                response.diagnostics.warning(
                    "Proxy VM not refreshed: its node is unreachable",
                    format!(
                        "{} (VM {vmid}) could not be read: {error}. Its last known state is kept; \
                         plans show its drift again once the node answers. Changing or destroying \
                         it needs the node back.",
                        name.as_deref().unwrap_or("?")
                    ),
                );
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
        // Import takes any name and any create of ours, but only in this provider's fleet.
        let any_vm_of_this_fleet = Expected {
            name: None,
            fleet: &configured.fleet,
            token: ExpectedToken::Any,
        };
        match lifecycle::read(&configured, vmid, any_vm_of_this_fleet).await {
            Ok(lifecycle::Found::Ours(observed)) => {
                let phase = observed.mark.as_ref().map(|m| m.phase);
                if phase == Some(ownership::Phase::Creating) {
                    response.diagnostics.error(
                        "Cannot import proxy VM",
                        format!(
                            "VM {vmid} is a create still in progress (or interrupted) of `{}`. Run \
                             the apply that creates it (it resumes the create), or destroy it; \
                             import it once it is finished.",
                            observed.name
                        ),
                    );
                    return response;
                }
                let mut seed = Value::object([("vmid", Value::number(i64::from(vmid)))]);
                if let Some(node) = node {
                    // A state must never say the VM is where it is not.
                    if node != observed.node {
                        response.diagnostics.error(
                            "Cannot import proxy VM",
                            format!(
                                "VM {vmid} is on node {actual}, not on {node}. Import it as \
                                 `{actual}/{vmid}` (or by its VMID alone, `{vmid}`).",
                                actual = observed.node
                            ),
                        );
                        return response;
                    }
                    seed.set_attr(attr::NODE, Value::string(node));
                }
                let state = observed.to_state(&seed);
                let private = Private {
                    create_token: observed.mark.as_ref().and_then(|m| m.create_token.clone()),
                    pending: Vec::new(),
                    imported: true,
                };
                response.imported.push(ImportedResource {
                    type_name: TYPE_NAME.into(),
                    state,
                    private: private.encode(),
                });
            }
            Ok(lifecycle::Found::NotOurs {
                mark: Some(mark), ..
            }) if mark.fleet != configured.fleet => response.diagnostics.error(
                "Cannot import proxy VM from another fleet",
                format!(
                    "VM {vmid} (`{}`) belongs to fleet `{}`, and this provider manages fleet `{}`. \
                     Import it with a provider whose `fleet` is `{}`, or leave it to the \
                     configuration that owns it.",
                    mark.owner, mark.fleet, configured.fleet, mark.fleet
                ),
            ),
            Ok(_) => response.diagnostics.error(
                "Cannot import proxy VM",
                format!(
                    "No VM {vmid} carrying this provider's ownership mark was found. Only VMs made \
                     by proxmox_proxy_vm can be imported; other VMs are never modified."
                ),
            ),
            Err(error) => {
                response
                    .diagnostics
                    .push(step_diagnostic("import", &format!("{vmid}"), &error))
            }
        }
        response
    }
}
