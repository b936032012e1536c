//! The update's apply: the planned seed detach, the in-place changes and the power state,
//! the first boot's verdict an earlier create left outstanding, and the state after them.

use tfplugin::{ApplyRequest, ApplyResponse, Context, Diagnostic, Value, plan};

use super::super::attr;
use super::super::kept_plan;
use super::super::lifecycle::{self, Expected, ExpectedToken, StepError};
use super::super::model::{self, Desired, Private, fleet_of, vmid_of};
use super::super::schema::{self, Planned};
use super::first_boot::{detach_after_boot, detach_shown, first_boot_verdict, record_verdict};
use super::{UpdatedVm, bounded, step_diagnostic};
use crate::context::Configured;
use crate::diagnostics;

pub(in super::super) async fn update(
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
    if !detach_shown(ctx, configured, vm, &desired, planned, &mut response).await {
        return response;
    }
    let changed = plan::changed_attributes(prior, planned);
    let mut interfaces = None;
    // Where the changes found the VM: it may have moved since the apply listed the cluster.
    let mut node_now = None;
    if touches_vm(&desired, &private, &changed) {
        match write_changes(ctx, configured, vm, &desired, &changed).await {
            Ok(updated) => {
                if let Some(warning) = pending_warning(vmid, &updated.pending, &changed) {
                    response.diagnostics.push(warning);
                }
                interfaces = updated.interfaces;
                node_now = Some(updated.node);
            }
            Err(error) => {
                response
                    .diagnostics
                    .push(step_diagnostic("update", &desired.name, &error));
                return response;
            }
        }
    }
    let node = node_now.unwrap_or_else(|| node.clone());
    let vm = UpdatedVm { node: &node, ..vm };
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
    let observed = lifecycle::observe_where_it_is(
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

/// Whether the update has work on the VM: an attribute written in place or the power state
/// changed, or a change PVE holds until the next boot is applied by the reboot this apply
/// allows, even when no attribute changes with it (reboot_if_needed set after a pending
/// change): the state then shows the running values, and without the reboot the result
/// would differ from the plan (#26).
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
