//! The create's apply: the lifecycle's create bounded by `timeouts.create` (and cloud-init's
//! own bound), its result or its failure turned into state, private data and diagnostics.

use tfplugin::{ApplyRequest, ApplyResponse, Context, Value};

use super::super::attr;
use super::super::kept_plan;
use super::super::lifecycle::{self, ProgressCell, StepError};
use super::super::model::{self, Desired, Private};
use super::super::plan_checks;
use super::{bounded, step_diagnostic};
use crate::context::Configured;
use crate::ownership;

/// What the detach after cloud-init's verdict may take on top of `cloud_init_timeout`.
const VERDICT_ALLOWANCE: std::time::Duration = std::time::Duration::from_secs(120);

pub(in super::super) async fn create(
    ctx: &Context,
    configured: &Configured,
    request: &ApplyRequest,
) -> ApplyResponse {
    let mut desired = Desired::from_plan(
        &request.planned_state,
        &request.config,
        &configured.seed_storage,
        &configured.fleet,
    );
    // The plan's cluster checks may have been warnings (a plan that may start a destroy
    // never fails on them) and the cluster may have changed since: check before any write.
    let refused =
        plan_checks::recheck_before_create(configured, &request.planned_state, &request.config)
            .await;
    if refused.has_errors() {
        return ApplyResponse {
            diagnostics: refused,
            ..Default::default()
        };
    }
    desired.create_token = ownership::new_create_token();
    // Before the first write: if Terraform never stores this create, the next apply in this
    // working directory resumes it instead of refusing it as another state's VM.
    let journal = &configured.journal;
    journal.record_create(&desired.fleet, &desired.name, &desired.create_token);
    let private = Private {
        create_token: Some(desired.create_token.clone()),
        ..Private::default()
    };
    let progress = ProgressCell::default();
    // cloud-init's verdict has a bound of its own beyond `timeouts.create` (#39).
    let limit = match desired.wait_for {
        model::WaitFor::CloudInit => {
            desired.timeouts.create + desired.cloud_init_timeout + VERDICT_ALLOWANCE
        }
        _ => desired.timeouts.create,
    };
    let work = lifecycle::create(configured, &desired, &progress);
    let outcome = bounded(ctx, limit, "create", work).await;
    match outcome {
        Ok(created) => record_created(
            configured,
            &desired,
            private,
            &request.planned_state,
            created,
            &progress,
        ),
        Err(error) => {
            record_failed(
                configured,
                &desired,
                private,
                &request.planned_state,
                error,
                &progress,
            )
            .await
        }
    }
}

/// A finished create's state and private data, with its warnings.
fn record_created(
    configured: &Configured,
    desired: &Desired,
    mut private: Private,
    planned: &Value,
    created: lifecycle::Created,
    progress: &ProgressCell,
) -> ApplyResponse {
    let mut response = ApplyResponse {
        new_state: created.observed.to_state(planned),
        ..Default::default()
    };
    // A seed still on its storage stays recorded (a detach that did not finish: `ide2` may
    // be empty already), so the next plan or destroy deletes it.
    keep_undeleted_seed(&mut response.new_state, &created, progress.get());
    for warning in &created.warnings {
        response
            .diagnostics
            .warning(format!("Proxy VM {}", desired.name), warning);
    }
    let vmid = created.observed.vmid;
    if let Some(changed) = kept_plan::keep_plan(planned, &mut response.new_state, vmid) {
        response.diagnostics.push(changed);
    }
    let used = created
        .observed
        .mark
        .as_ref()
        .and_then(|m| m.create_token.clone());
    keep_resumed_token(configured, desired, &mut private, used);
    private.verdict_pending = created.verdict_pending;
    private.seed_stays = created.seed_stays;
    hand_over(configured, desired, &private);
    response.private = private.encode();
    response
}

/// A resumed create keeps the token of the run that made the VM (`used`, when it is another
/// than this create's): the VM's mark carries it, and the state must name it.
fn keep_resumed_token(
    configured: &Configured,
    desired: &Desired,
    private: &mut Private,
    used: Option<String>,
) {
    if let Some(used) = used
        && used != desired.create_token
    {
        let journal = &configured.journal;
        journal.forget(&desired.fleet, &desired.name, &desired.create_token);
        private.create_token = Some(used);
    }
}

/// Just before the create answers Terraform with its VM: from here on Terraform may store
/// it, so a full destroy no longer counts it as a killed create's (`remove_killed_creates`).
fn hand_over(configured: &Configured, desired: &Desired, private: &Private) {
    if let Some(token) = &private.create_token {
        let journal = &configured.journal;
        journal.record_handed_over(&desired.fleet, &desired.name, token);
    }
}

/// A failed create: what it made stays in state (Terraform taints it), so the next apply
/// replaces it and a destroy removes the VM and its seed; a VM another create took over or
/// finished is theirs, and nothing of it belongs here.
async fn record_failed(
    configured: &Configured,
    desired: &Desired,
    mut private: Private,
    planned: &Value,
    error: StepError,
    progress: &ProgressCell,
) -> ApplyResponse {
    let mut response = ApplyResponse::default();
    response
        .diagnostics
        .push(step_diagnostic("create", &desired.name, &error));
    if matches!(error, StepError::CloudInitFailed(_)) {
        // The first boot failed: the VM keeps its seed for debugging (#39).
        private.seed_stays = Some(model::SeedStays::FirstBootFailed);
    }
    let journal = &configured.journal;
    if error.is_not_ours() {
        journal.forget(&desired.fleet, &desired.name, &desired.create_token);
        return response;
    }
    let made = progress.get();
    let Some((vmid, node)) = made.vm else {
        // Nothing was made: no VM of this token can need resuming.
        journal.forget(&desired.fleet, &desired.name, &desired.create_token);
        return response;
    };
    keep_resumed_token(
        configured,
        desired,
        &mut private,
        made.resumed_token.clone(),
    );
    let seed = made.seed_volume.as_deref();
    response.new_state = partial_state(configured, planned, vmid, &node, seed).await;
    hand_over(configured, desired, &private);
    response.private = private.encode();
    response
}

fn keep_undeleted_seed(state: &mut Value, created: &lifecycle::Created, made: lifecycle::Progress) {
    let recorded = state
        .get_attr(attr::SEED_VOLUME)
        .as_str()
        .unwrap_or_default();
    if created.seed_deleted || !recorded.is_empty() {
        return;
    }
    if let Some(volume) = made.seed_volume {
        state.set_attr(attr::SEED_VOLUME, Value::string(volume));
    }
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
    let pool = planned.get_attr(attr::POOL).as_str().map(str::to_owned);
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
            state.set_attr(attr::ID, Value::string(vmid.to_string()));
            state.set_attr(attr::VMID, Value::number(i64::from(vmid)));
            state.set_attr(attr::CURRENT_NODE, Value::string(node));
            state
        }
    };
    // The configuration's identity, not a half-made VM's (a clone has no name yet).
    for name in [
        attr::NAME,
        attr::NODE,
        attr::TEMPLATE,
        attr::SEED_STORAGE,
        attr::FLEET,
    ] {
        let wanted = planned.get_attr(name);
        if wanted.is_wholly_known() && !wanted.is_null() {
            state.set_attr(name, wanted.clone());
        }
    }
    // A placed VM's node is known only from what the create recorded.
    if state.get_attr(attr::NODE).is_null() {
        state.set_attr(attr::NODE, Value::string(node));
    }
    // The seed may be uploaded but not attached yet: destroy must still find it.
    if let Some(volume) = seed_volume
        && state
            .get_attr(attr::SEED_VOLUME)
            .as_str()
            .is_none_or(str::is_empty)
    {
        state.set_attr(attr::SEED_VOLUME, Value::string(volume));
    }
    state
}
