//! `proxmox_proxy_vm`: plan, apply, read and import over the lifecycle functions.

mod apply;
mod attr;
mod checks;
mod generate;
mod ha_plan;
mod identity;
mod import;
mod kept_plan;
mod lifecycle;
mod list;
mod mark_restore;
mod model;
mod plan;
mod plan_checks;
mod plan_warnings;
mod refresh;
mod schema;
mod seed_life;
mod seed_plan;
mod upgrade;

use std::sync::Arc;

use tfplugin::{
    ApplyAction, ApplyRequest, ApplyResponse, Context, Diagnostics, GenerateConfigResponse,
    IdentitySchema, ImportResponse, PlanRequest, PlanResponse, ReadRequest, ReadResponse, Resource,
    Schema, Value,
};

use crate::context::{Configured, Shared};
use crate::invocation;
use apply::{create, delete, update};
use model::{Private, fleet_of};
use plan::{plan_change, refuse_duplicate_name};

pub use list::ProxyVmList;
pub use schema::TYPE_NAME;

/// Records in this working directory's journal whether the plan replaces the prior VM, so
/// that a `create_before_destroy` replacement may be made beside it (and only it).
///
/// Terraform plans a replacement in two calls: the first plans the instance itself, the
/// second (prior state null) plans the create half and carries the first call's private
/// data. The provider's own `RequiresReplace` shows in the first; a replacement Terraform
/// decides in its core (`-replace=ADDR`, a tainted instance) shows only as that second call,
/// so the second call is what records it.
///
/// A tainted instance is planned in one call, as a create with neither prior state nor
/// private data (Terraform's `plan` in node_resource_abstract_instance.go: "proceed below
/// like we're creating an entirely new object"); its refresh just before, in this process,
/// is the only sign of the VM it replaces, so that refresh's token is recorded. A second
/// instance of the name cannot take that path: the duplicate-name check refuses it.
fn note_replacement(configured: &Configured, request: &PlanRequest, response: &PlanResponse) {
    let journal = &configured.journal;
    let prior = &request.prior_state;
    let private = Private::decode_or_default(&request.prior_private);
    let Some(token) = private.create_token.or_else(|| {
        let planned = &response.planned_state;
        let name = planned.get_attr(attr::NAME).as_str()?;
        let refreshed = configured.runtime.refreshed_token(&fleet_of(planned), name);
        refreshed.filter(|_| prior.is_null() && request.prior_private.is_empty())
    }) else {
        return;
    };
    if prior.is_null() {
        // The create half of a replacement: its name and fleet are the planned VM's.
        let planned = &response.planned_state;
        if let Some(name) = planned.get_attr(attr::NAME).as_str() {
            journal.record_replacement(&fleet_of(planned), name, &token);
        }
        return;
    }
    let Some(name) = prior.get_attr(attr::NAME).as_str() else {
        return;
    };
    let fleet = fleet_of(prior);
    journal.confirm(&fleet, name, &token);
    if response.requires_replace.is_empty() && !response.planned_state.is_null() {
        journal.forget_replacement(&fleet, name, &token);
    } else if !response.requires_replace.is_empty() {
        journal.record_replacement(&fleet, name, &token);
    }
}

/// Every plan of a VM whose seed stays for its life on node-local storage says so (#39): it
/// cannot migrate, which the one create-time warning left behind.
async fn warn_staying_seed(
    configured: &Configured,
    request: &PlanRequest,
    response: &mut PlanResponse,
) {
    let kept = !request.prior_state.is_null() && response.requires_replace.is_empty();
    let private = Private::decode_or_default(&request.prior_private);
    if let (true, Some(why)) = (kept, private.seed_stays) {
        let prior = &request.prior_state;
        if let Some(warning) = seed_plan::staying_seed_warning(configured, prior, why).await {
            response.diagnostics.push(warning);
        }
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
                    plan_checks::check_create(configured, &response.planned_state, &request.config)
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
            warn_staying_seed(configured, &request, &mut response).await;
            configured.journal.report_to(&mut response.diagnostics);
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
        let mut response = match request.action() {
            ApplyAction::Create => create(ctx, &configured, &request).await,
            ApplyAction::Update => update(ctx, &configured, &request).await,
            ApplyAction::Delete => delete(ctx, &configured, &request).await,
        };
        // The cached listings serve reads until this process changes the cluster; an apply
        // may have (a data source read later in this run lists again).
        configured.runtime.forget_listing().await;
        configured.journal.report_to(&mut response.diagnostics);
        response
    }

    async fn read(&self, _ctx: &Context, request: ReadRequest) -> ReadResponse {
        match self.shared.get() {
            Ok(configured) => {
                let mut response = refresh::refresh(&configured, request).await;
                configured.journal.report_to(&mut response.diagnostics);
                response
            }
            Err(d) => {
                let mut response = ReadResponse {
                    new_state: request.current_state,
                    private: request.private,
                    ..Default::default()
                };
                response.diagnostics.push(d);
                response
            }
        }
    }

    async fn import(&self, _ctx: &Context, id: &str) -> ImportResponse {
        match self.shared.get() {
            Ok(configured) => import::import(&configured, id).await,
            Err(d) => {
                let mut response = ImportResponse::default();
                response.diagnostics.push(d);
                response
            }
        }
    }

    fn identity_schema(&self) -> Option<IdentitySchema> {
        Some(identity::schema())
    }

    /// Every answer's identity (read, plan, apply, import) is its state's: `vmid`, `name` and
    /// `fleet` never change while one VM lives, so it never changes for an object either.
    fn identity_of(&self, state: &Value) -> Value {
        identity::of_state(state)
    }

    async fn import_by_identity(&self, _ctx: &Context, identity: &Value) -> ImportResponse {
        match self.shared.get() {
            Ok(configured) => import::import_by_identity(&configured, identity).await,
            Err(d) => {
                let mut response = ImportResponse::default();
                response.diagnostics.push(d);
                response
            }
        }
    }

    fn generates_config(&self) -> bool {
        true
    }

    async fn generate_config(&self, _ctx: &Context, state: &Value) -> GenerateConfigResponse {
        let configured = self.shared.get().ok();
        generate::config_for(state, configured.as_deref())
    }
}
