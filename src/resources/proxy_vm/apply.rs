//! Apply of `proxmox_proxy_vm`: create, update and delete over the lifecycle, bounded by
//! Terraform's timeouts and stop request, and turned into state and diagnostics.

use tfplugin::{ApplyRequest, ApplyResponse, Context, Diagnostic, Value, plan};

use super::attr;
use super::kept_plan;
use super::lifecycle::{self, Expected, ExpectedToken, ProgressCell, StepError};
use super::mark_restore::mark_to_restore;
use super::model::{self, Desired, Private, fleet_of, vmid_of};
use super::plan_checks;
use super::schema::{self, Planned};
use crate::context::Configured;
use crate::diagnostics;
use crate::invocation;
use crate::ownership;

pub(super) fn step_diagnostic(operation: &str, name: &str, error: &StepError) -> Diagnostic {
    match error {
        StepError::Pve(e) => diagnostics::pve_error(operation, name, e),
        other => diagnostics::vm_error(operation, name, other.to_string()),
    }
}

/// Races an operation against Terraform's stop request (Ctrl-C) and its timeout.
async fn bounded<T>(
    ctx: &Context,
    limit: std::time::Duration,
    what: &'static str,
    work: impl Future<Output = Result<T, StepError>>,
) -> Result<T, StepError> {
    tokio::select! {
        result = tokio::time::timeout(limit, work) => result.unwrap_or_else(|_| Err(
            StepError::TimedOut { what, secs: limit.as_secs() },
        )),
        () = ctx.stop.stopped() => Err(StepError::Interrupted { what }),
    }
}

/// What the detach after cloud-init's verdict may take on top of `cloud_init_timeout`.
const VERDICT_ALLOWANCE: std::time::Duration = std::time::Duration::from_secs(120);

pub(super) async fn create(
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

pub(super) async fn update(
    ctx: &Context,
    configured: &Configured,
    request: &ApplyRequest,
) -> ApplyResponse {
    let prior = &request.prior_state;
    let planned = &request.planned_state;
    let desired = Desired {
        ha_before: !prior.get_attr(attr::HA).is_null(),
        ..Desired::from_plan(
            planned,
            &request.config,
            &configured.seed_storage,
            &fleet_of(prior),
        )
    };
    let mut response = ApplyResponse {
        new_state: prior.clone(),
        private: request.planned_private.clone(),
        ..Default::default()
    };
    let (private, vmid) = match update_inputs(request) {
        Ok(inputs) => inputs,
        Err(detail) => {
            response
                .diagnostics
                .error("Unable to update proxy VM", detail);
            return response;
        }
    };
    let node = match node_now(configured, prior, vmid).await {
        Ok(node) => node,
        Err(error) => {
            let diagnostic = step_diagnostic("update", &desired.name, &error);
            response.diagnostics.push(diagnostic);
            return response;
        }
    };
    let vm = UpdatedVm {
        node: &node,
        vmid,
        prior,
        private: &private,
    };
    // The detach the plan shows goes first, while the VM is as the refresh saw it (running,
    // its guest able to show its marker): a stop in this same apply would hide the guest
    // (fuzzer seed 10066).
    if let Some(volume) = seed_to_detach(prior, planned)
        && let Err(refused) = detach_planned(ctx, configured, vm, &desired, volume).await
    {
        response.diagnostics.push(refused);
        return response;
    }
    let changed = plan::changed_attributes(prior, planned);
    let mut interfaces = None;
    if touches_vm(&desired, &private, &changed) {
        match write_changes(ctx, configured, vm, &desired, &changed).await {
            Ok(updated) => {
                if let Some(warning) = pending_warning(vmid, &updated.pending, &changed) {
                    response.diagnostics.push(warning);
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
    let mut private = private.clone();
    let verdict = first_boot_verdict(ctx, configured, vm, &desired, planned).await;
    let verdict = record_verdict(verdict, &desired, &mut private, &mut response);
    let vm = UpdatedVm {
        private: &private,
        ..vm
    };
    if let Some(clean) = verdict
        && let Some(kept) = detach_after_boot(ctx, configured, vm, &desired, planned, clean).await
    {
        response.diagnostics.push(kept);
    }
    let observed = lifecycle::observe_with(
        &configured.client,
        vm.node,
        vmid,
        desired.pool.clone(),
        interfaces,
    )
    .await;
    match verdict {
        Some(_) => record_updated(observed, vm, &desired, planned, &mut response),
        // The update started the VM before its first boot failed: the state says it runs.
        None => record_failed_update(observed, vm, planned, &mut response),
    }
    response
}

/// The private data and the VMID an update starts from, or why it cannot start.
fn update_inputs(request: &ApplyRequest) -> Result<(Private, u32), &'static str> {
    let private = Private::decode(&request.planned_private).map_err(|_| model::UNREADABLE)?;
    let vmid = vmid_of(&request.prior_state).ok_or("the state has no VMID")?;
    Ok((private, vmid))
}

/// Where the state's VM is now: moved since the state was read (`-refresh=false`, a
/// migration during the plan) or where the state last saw it.
async fn node_now(configured: &Configured, prior: &Value, vmid: u32) -> Result<String, StepError> {
    let node = prior
        .get_attr(attr::CURRENT_NODE)
        .as_str()
        .or_else(|| prior.get_attr(attr::NODE).as_str())
        .unwrap_or_default();
    lifecycle::node_now(configured, vmid, node).await
}

/// After this apply's first boot of the VM (the plan left `seed_volume` unknown), the seed
/// a clean cloud-init frees: a warning if it stays (the next plan shows its detach).
async fn detach_after_boot(
    ctx: &Context,
    configured: &Configured,
    vm: UpdatedVm<'_>,
    desired: &Desired,
    planned: &Value,
    cloud_init_clean: bool,
) -> Option<Diagnostic> {
    let volume = seed_to_detach_after_boot(vm.prior, planned, cloud_init_clean)?;
    let kept = detach_planned(ctx, configured, vm, desired, volume)
        .await
        .err()?;
    Some(Diagnostic::warning(kept.summary, kept.detail))
}

/// The detach the plan shows (a refresh found cloud-init finished after a create that did
/// not wait): done now, or an error that keeps the seed recorded for the next apply.
async fn detach_planned(
    ctx: &Context,
    configured: &Configured,
    vm: UpdatedVm<'_>,
    desired: &Desired,
    volume: &str,
) -> Result<(), Diagnostic> {
    let limit = desired.timeouts.update;
    let deadline = tokio::time::Instant::now() + limit;
    let seed_node = vm.prior.get_attr(attr::NODE).as_str().unwrap_or(vm.node);
    let work = lifecycle::detach(
        configured,
        vm.node,
        vm.vmid,
        expected_of(&vm),
        seed_node,
        volume,
        deadline,
    );
    let refused = match bounded(ctx, limit, "update", work).await {
        Ok(lifecycle::Detach::Done) => return Ok(()),
        Ok(lifecycle::Detach::Kept { why, .. }) => why,
        Err(error) => error.to_string(),
    };
    Err(Diagnostic::error(
        format!("Seed of proxy VM {} not detached", desired.name),
        format!("{refused} The seed stays recorded; the next apply tries again."),
    ))
}

/// What the first boot's verdict an update read means for the private data and the
/// response: whether cloud-init finished cleanly, or `None` when it failed the update
/// (a failed first boot keeps its seed for debugging, whatever later boots say, #39).
fn record_verdict(
    verdict: Result<Option<(lifecycle::Judged, lifecycle::SeedOutcome)>, StepError>,
    desired: &Desired,
    private: &mut Private,
    response: &mut ApplyResponse,
) -> Option<bool> {
    match verdict {
        Ok(None) => Some(false),
        Ok(Some((judged, outcome))) => {
            for warning in outcome.warnings {
                response
                    .diagnostics
                    .warning(format!("Proxy VM {}", desired.name), warning);
            }
            private.verdict_pending = outcome.verdict_pending;
            private.seed_stays = private.seed_stays.or(outcome.stays);
            Some(judged == lifecycle::Judged::Clean)
        }
        Err(error) => {
            if matches!(error, StepError::CloudInitFailed(_)) {
                private.verdict_pending = false;
                private.seed_stays = Some(model::SeedStays::FirstBootFailed);
                response.private = private.encode();
            }
            response
                .diagnostics
                .push(step_diagnostic("update", &desired.name, &error));
            None
        }
    }
}

/// The first boot's cloud-init verdict, when the create could not read it (`verdict_pending`)
/// and the VM is meant to run: waited for now, within `cloud_init_timeout`. `None`: nothing
/// to wait for (later boots never wait for a verdict, #39).
async fn first_boot_verdict(
    ctx: &Context,
    configured: &Configured,
    vm: UpdatedVm<'_>,
    desired: &Desired,
    planned: &Value,
) -> Result<Option<(lifecycle::Judged, lifecycle::SeedOutcome)>, StepError> {
    // The plan left the seed open for it (`plan.rs` `awaits_first_verdict`).
    let open = matches!(planned.get_attr(attr::SEED_VOLUME), Value::Unknown);
    if !(vm.private.verdict_pending && open && desired.started) {
        return Ok(None);
    }
    // The seed's instance-id, from the identity the create built it with.
    let seed_node = vm.prior.get_attr(attr::NODE).as_str().unwrap_or(vm.node);
    let (_, instance_id) = desired.seed(seed_node, vm.vmid).files();
    let first_boot = lifecycle::FirstBoot {
        timeout: desired.cloud_init_timeout,
        instance_id: &instance_id,
        replaces_beside: false,
    };
    let limit = desired.timeouts.update + desired.cloud_init_timeout;
    let deadline = tokio::time::Instant::now() + desired.timeouts.update;
    let work = lifecycle::first_verdict(
        configured,
        (vm.node, vm.vmid),
        &desired.template,
        expected_of(&vm),
        first_boot,
        deadline,
    );
    bounded(ctx, limit, "update", work).await.map(Some)
}

/// The seed the plan detaches: recorded before, dropped by the plan.
fn seed_to_detach<'a>(prior: &'a Value, planned: &Value) -> Option<&'a str> {
    let recorded = prior
        .get_attr(attr::SEED_VOLUME)
        .as_str()
        .filter(|v| !v.is_empty())?;
    (planned.get_attr(attr::SEED_VOLUME).as_str() == Some("")).then_some(recorded)
}

/// The seed that may leave after this apply's first boot of the VM (the plan left
/// `seed_volume` unknown for it): only when that boot's cloud-init finished cleanly.
fn seed_to_detach_after_boot<'a>(
    prior: &'a Value,
    planned: &Value,
    cloud_init_clean: bool,
) -> Option<&'a str> {
    let recorded = prior
        .get_attr(attr::SEED_VOLUME)
        .as_str()
        .filter(|v| !v.is_empty())?;
    let open = matches!(planned.get_attr(attr::SEED_VOLUME), Value::Unknown);
    (open && cloud_init_clean).then_some(recorded)
}

/// Whose VM an update of `vm` must find.
fn expected_of<'a>(vm: &UpdatedVm<'a>) -> Expected<'a> {
    Expected {
        name: vm.prior.get_attr(attr::NAME).as_str(),
        fleet: vm.prior.get_attr(attr::FLEET).as_str().unwrap_or_default(),
        token: ExpectedToken::of_state(
            vm.private.create_token.as_deref(),
            vm.prior.get_attr(attr::SEED_HASH).as_str(),
        ),
    }
}

/// The VM an update changes: where it is, and its state and private data before.
#[derive(Clone, Copy, Debug)]
struct UpdatedVm<'a> {
    node: &'a str,
    vmid: u32,
    prior: &'a Value,
    private: &'a Private,
}

/// Whether the update has work on the VM: an attribute written in place or the power state
/// changed, or a change
/// PVE holds until the next boot is applied by the reboot this apply allows, even when no
/// attribute changes with it (reboot_if_needed set after a pending change): the state then
/// shows the running values, and without the reboot the result would differ from the plan
/// (#26).
fn touches_vm(desired: &Desired, private: &Private, changed: &[String]) -> bool {
    let reboot_for_pending = desired.reboot_if_needed
        && desired.started
        && (!private.pending.is_empty() || changed.iter().any(|c| c == attr::REBOOT_IF_NEEDED));
    let in_place = schema::written_in_place();
    // A planned power state is written too: a VM an interrupted destroy marked reads in the
    // power state it does not show, and its plan may change only `status`.
    reboot_for_pending
        || changed
            .iter()
            .any(|name| name == attr::STATUS || in_place.contains(&name.as_str()))
}

/// The lifecycle's update as this state's owner, bounded by the update timeout: the config
/// keys it left pending, and the interfaces the agent reported if it (re)started the VM.
async fn write_changes(
    ctx: &Context,
    configured: &Configured,
    vm: UpdatedVm<'_>,
    desired: &Desired,
    changed: &[String],
) -> Result<lifecycle::Updated, StepError> {
    let disk_changed = changed.iter().any(|n| n == attr::DISK_GIB);
    let deadline = tokio::time::Instant::now() + desired.timeouts.update;
    let fleet = fleet_of(vm.prior);
    let expected = Expected {
        name: vm.prior.get_attr(attr::NAME).as_str(),
        fleet: &fleet,
        token: ExpectedToken::of_state(
            vm.private.create_token.as_deref(),
            vm.prior.get_attr(attr::SEED_HASH).as_str(),
        ),
    };
    let work = lifecycle::update(
        configured,
        vm.node,
        vm.vmid,
        expected,
        desired,
        disk_changed,
        deadline,
    );
    bounded(ctx, desired.timeouts.update, "update", work).await
}

/// The state and private data of the VM as read after the update.
fn record_updated(
    observed: Result<Option<model::Observed>, StepError>,
    vm: UpdatedVm<'_>,
    desired: &Desired,
    planned: &Value,
    response: &mut ApplyResponse,
) {
    match observed {
        Ok(Some(observed)) => {
            response.new_state = observed.to_state(planned);
            keep_planned_addresses(planned, &mut response.new_state);
            let kept = kept_plan::keep_plan(planned, &mut response.new_state, vm.vmid);
            response.diagnostics.extend(kept);
            let mut private = vm.private.clone();
            private.note_pending(&observed);
            response.private = private.encode();
        }
        Ok(None) => response.diagnostics.push(diagnostics::vm_error(
            "update",
            &desired.name,
            format!("VM {} disappeared during the update", vm.vmid),
        )),
        Err(error) => response
            .diagnostics
            .push(step_diagnostic("update", &desired.name, &error)),
    }
}

/// The state and private data of a VM an update changed before it failed: what PVE shows,
/// nothing of the plan kept (Terraform holds a failed apply's state to no plan). The prior
/// state stays when the VM cannot be read.
fn record_failed_update(
    observed: Result<Option<model::Observed>, StepError>,
    vm: UpdatedVm<'_>,
    planned: &Value,
    response: &mut ApplyResponse,
) {
    if let Ok(Some(observed)) = observed {
        response.new_state = observed.to_state(planned);
        let mut private = vm.private.clone();
        private.note_pending(&observed);
        response.private = private.encode();
    }
}

/// Warns about what this apply left pending, not again on applies that do not touch it
/// (plans keep naming it until a reboot).
fn pending_warning(vmid: u32, pending: &[String], changed: &[String]) -> Option<Diagnostic> {
    let touched: Vec<&str> = pending
        .iter()
        .filter(|key| {
            schema::pending_attributes(key)
                .into_iter()
                .any(|name| changed.iter().any(|c| c == name))
        })
        .map(String::as_str)
        .collect();
    if touched.is_empty() {
        return None;
    }
    Some(Diagnostic::warning(
        "Changes pending until reboot",
        format!(
            "PVE applies these changes to VM {vmid} at its next boot: {}. Reboot it, or set \
             reboot_if_needed = true to let the provider do it.",
            touched.join(", ")
        ),
    ))
}

/// The plan kept the addresses (nothing in the update could move them): an agent that
/// missed this one query must not make the result differ from the plan.
fn keep_planned_addresses(planned: &Value, state: &mut Value) {
    let addresses = schema::names_where(|spec| matches!(spec.planned, Planned::GuestAddress));
    for name in addresses {
        let kept = planned.get_attr(name);
        if kept.is_wholly_known() && state.get_attr(name) != kept {
            state.set_attr(name, kept.clone());
        }
    }
}

/// A full `terraform destroy` also removes what this working directory's killed creates
/// left and no resource resumes (`lifecycle::remove_killed_creates`), once per process.
async fn sweep_killed_creates(
    configured: &Configured,
    deadline: tokio::time::Instant,
    diagnostics: &mut tfplugin::Diagnostics,
) {
    if !invocation::full_destroy() || !configured.runtime.first_sweep_of_killed_creates() {
        return;
    }
    for note in lifecycle::remove_killed_creates(configured, deadline).await {
        diagnostics.warning("Proxy VM of a killed create removed", note);
    }
}

pub(super) async fn delete(
    ctx: &Context,
    configured: &Configured,
    request: &ApplyRequest,
) -> ApplyResponse {
    let prior = &request.prior_state;
    let name = prior
        .get_attr(attr::NAME)
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut response = ApplyResponse::default();
    let Some(vmid) = vmid_of(prior) else {
        return response;
    };
    let seed_volume = prior
        .get_attr(attr::SEED_VOLUME)
        .as_str()
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    let seed_node = prior
        .get_attr(attr::NODE)
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let limit = model::Timeouts::from_value(prior.get_attr(attr::TIMEOUTS)).delete;
    let fleet = fleet_of(prior);
    let Ok(private) = Private::decode(&request.planned_private) else {
        response.new_state = prior.clone();
        response.private = request.planned_private.clone();
        response
            .diagnostics
            .error("Unable to delete proxy VM", model::UNREADABLE);
        return response;
    };
    let expected = Expected {
        name: Some(&name),
        fleet: &fleet,
        token: ExpectedToken::of_state(
            private.create_token.as_deref(),
            prior.get_attr(attr::SEED_HASH).as_str(),
        ),
    };
    let deadline = tokio::time::Instant::now() + limit;
    sweep_killed_creates(configured, deadline, &mut response.diagnostics).await;
    let current_node = prior
        .get_attr(attr::CURRENT_NODE)
        .as_str()
        .unwrap_or(seed_node.as_str())
        .to_owned();
    let doomed = lifecycle::Doomed {
        vmid,
        node_hint: &current_node,
        expected,
        seed: seed_volume
            .as_deref()
            .map(|volume| lifecycle::RecordedSeed {
                node: &seed_node,
                volume,
            }),
        mark_to_restore: mark_to_restore(prior, &name, &fleet).render(),
        under_ha: !prior.get_attr(attr::HA).is_null(),
    };
    let work = lifecycle::delete(configured, doomed, deadline);
    let outcome = bounded(ctx, limit, "delete", work).await;
    if outcome.is_ok()
        && let Some(token) = &private.create_token
    {
        configured.journal.forget(&fleet, &name, token);
    }
    match outcome {
        // The refresh that found the VM gone said so already; another VM at its VMID now
        // (a create_before_destroy replacement's) is no news.
        Ok(Some(_)) if model::vm_is_gone(prior) => {}
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
