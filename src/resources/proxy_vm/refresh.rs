//! Read of `proxmox_proxy_vm` (Terraform's refresh): the state's VM observed and turned into
//! state, or dropped when it is gone or another's, or kept as it was (with a warning saying
//! why) when it cannot be judged: its mark was edited away, or its node is unreachable.

use tfplugin::{Diagnostic, ReadRequest, ReadResponse, Value};

use super::apply::step_diagnostic;
use super::attr;
use super::lifecycle::{self, Expected, ExpectedToken};
use super::mark_restore::mark_to_restore;
use super::model::{self, Observed, Private, STATUS_GONE, UNREADABLE, fleet_of, vmid_of};
use crate::context::Configured;
use crate::ownership::Phase;

/// Whose state this is: its prior value, name and fleet.
struct Held<'a> {
    prior: &'a Value,
    name: &'a str,
    fleet: &'a str,
}

/// See the module doc.
pub(super) async fn refresh(configured: &Configured, request: ReadRequest) -> ReadResponse {
    let prior = request.current_state;
    let mut response = ReadResponse {
        private: request.private,
        ..Default::default()
    };
    let Some(vmid) = vmid_of(&prior) else {
        response.new_state = prior;
        return response;
    };
    let name = prior.get_attr(attr::NAME).as_str().map(str::to_owned);
    let fleet = fleet_of(&prior);
    let Ok(mut private) = Private::decode(&response.private) else {
        // The VM's identity is unknown: kept as it was, never dropped (a refresh that
        // dropped it would let the next apply make a second VM of the name).
        response.new_state = prior;
        response.diagnostics.warning(
            "Proxy VM not refreshed: unreadable private data",
            UNREADABLE,
        );
        return response;
    };
    let expected = Expected {
        name: name.as_deref(),
        fleet: &fleet,
        token: ExpectedToken::of_state(
            private.create_token.as_deref(),
            prior.get_attr(attr::SEED_HASH).as_str(),
        ),
    };
    match lifecycle::read(configured, vmid, expected).await {
        Ok(lifecycle::Found::Ours(observed)) => {
            let state = Held {
                prior: &prior,
                name: name.as_deref().unwrap_or_default(),
                fleet: &fleet,
            };
            ours(configured, &state, &observed, &mut private, &mut response).await;
        }
        // A clone in progress (an earlier create's) still exists: keep what we know.
        Ok(lifecycle::Found::Cloning) => response.new_state = prior,
        Ok(lifecycle::Found::Gone) => gone(&prior, vmid, None, &mut response),
        // Kept in state (so no second VM of the name is made), never written to, and
        // the user told how to hand it back.
        Ok(lifecycle::Found::MarkLost { vmid, node }) => {
            response.new_state = prior.clone();
            let name = name.as_deref().unwrap_or_default();
            let warning = mark_lost_warning(&prior, name, &fleet, vmid, &node);
            response.diagnostics.push(warning);
            configured.runtime.note_mark_lost_warned(vmid);
            private.mark_lost = true;
            response.private = private.encode();
        }
        Ok(lifecycle::Found::NotOurs { why, .. }) => gone(&prior, vmid, Some(why), &mut response),
        // The node behind the API cannot be reached (PVE's 595): the rest of the plan
        // (a destroy's refresh above all) goes on with what the state last knew.
        Err(lifecycle::StepError::Pve(error)) if error.node_unreachable() => {
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

/// The state's VM is no longer at its VMID (deleted, or another VM is there now, `why`):
/// dropped from state, so the plan proposes a create. Unless the state recorded a seed, which
/// nothing else would delete (a destroy killed after the VM went, a VM deleted by hand; fuzzer
/// seed 11162): the instance is kept with status `gone`, so the next apply replaces it (its
/// destroy half deletes the seed) and the next destroy deletes the seed.
fn gone(prior: &Value, vmid: u32, why: Option<String>, response: &mut ReadResponse) {
    let seed = prior
        .get_attr(attr::SEED_VOLUME)
        .as_str()
        .filter(|volume| !volume.is_empty());
    let Some(seed) = seed else {
        response.new_state = Value::Null;
        if let Some(why) = why {
            response.diagnostics.warning(
                "Proxy VM no longer this state's",
                format!("{why} and dropped from this state."),
            );
        }
        return;
    };
    let name = prior.get_attr(attr::NAME).as_str().unwrap_or("?");
    let what = match why {
        Some(why) => format!("{why}."),
        None => format!("VM {vmid} of `{name}` is gone from the cluster."),
    };
    let mut kept = prior.clone();
    kept.set_attr(attr::STATUS, Value::string(STATUS_GONE));
    response.new_state = kept;
    response.diagnostics.warning(
        "Proxy VM gone; its seed is left",
        format!(
            "{what} The state records its seed ISO {seed}, which PVE's delete of a VM keeps \
             and nothing else removes, so the instance stays in state \
             with status \"{STATUS_GONE}\": the next apply replaces it (deleting the seed first, \
             unless create_before_destroy makes the new VM first) and terraform destroy \
             deletes the seed."
        ),
    );
}

/// The state of this resource's own VM, as observed, with what PVE holds until a reboot.
async fn ours(
    configured: &Configured,
    state: &Held<'_>,
    observed: &Observed,
    private: &mut Private,
    response: &mut ReadResponse,
) {
    if let Some(token) = &private.create_token {
        // Terraform's state holds this create: no later create resumes it.
        configured.journal.confirm(state.fleet, state.name, token);
        configured
            .runtime
            .note_refreshed(state.fleet, state.name, token);
    }
    response.new_state = observed.to_state(state.prior);
    if observed
        .mark
        .as_ref()
        .is_some_and(|m| m.phase == Phase::Deleting)
    {
        // A destroy was interrupted after its first write: read in the power state it does
        // not show, so whatever `started` the configuration holds, the plan differs (in
        // `started`, or in the status that follows it) and its update marks it `done` again.
        // Read as stopped alone, a stopped VM configured stopped planned nothing.
        let powered = matches!(
            response.new_state.get_attr(attr::STATUS).as_str(),
            Some("running" | "paused")
        );
        response
            .new_state
            .set_attr(attr::STARTED, Value::Bool(!powered));
        response.diagnostics.warning(
            "Proxy VM marked by an interrupted destroy",
            format!(
                "VM {} on {} was being destroyed when that destroy stopped. Run destroy again to \
                 finish it, or apply to keep it: the apply marks it as this state's finished VM \
                 again, started or stopped as `started` says.",
                observed.vmid, observed.node
            ),
        );
    }
    if let Some(why) = observed.seed_drift(state.prior) {
        response.diagnostics.warning(
            "Proxy VM boots another seed",
            format!(
                "{why}: it may run another user-data than this configuration's. The \
                 plan replaces it."
            ),
        );
    }
    if let (None, Some(pool)) = (&observed.pool, state.prior.get_attr(attr::POOL).as_str()) {
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
    refresh_ha(configured, state.prior, observed, private, response).await;
    private.mark_lost = false;
    private.seed_ready = false;
    // A seed found to stay for good is not asked about again (#39): its refresh costs what
    // a detached VM's does.
    if private.seed_stays.is_none() {
        match seed_ready(configured, state.prior, observed).await {
            lifecycle::Readiness::Ready => private.seed_ready = true,
            lifecycle::Readiness::NotYet => {}
            lifecycle::Readiness::Stays(why) => private.seed_stays = Some(why),
        }
    }
    // A verdict is outstanding only while the seed waits on it.
    let seed_recorded = state
        .prior
        .get_attr(attr::SEED_VOLUME)
        .as_str()
        .is_some_and(|v| !v.is_empty());
    if private.seed_ready || private.seed_stays.is_some() || !seed_recorded {
        private.verdict_pending = false;
    }
    private.note_pending(observed);
    response.private = private.encode();
}

/// `ha` as PVE holds it, read only for a VM that is an HA resource or should be one (a VM
/// outside HA costs no request). An HA resource `ha` does not set is noted for the plan.
async fn refresh_ha(
    configured: &Configured,
    prior: &Value,
    observed: &Observed,
    private: &mut Private,
    response: &mut ReadResponse,
) {
    let configured_ha = !prior.get_attr(attr::HA).is_null();
    private.operator_ha = observed.ha_listed && !configured_ha;
    if !configured_ha {
        return;
    }
    match lifecycle::observe_resource(&configured.client, observed.vmid).await {
        Ok(resource) => {
            let ha = model::observed_ha(prior.get_attr(attr::HA), resource.as_ref());
            response.new_state.set_attr(attr::HA, ha);
        }
        Err(error) => response.diagnostics.warning(
            "Proxy VM's HA resource not refreshed",
            format!(
                "The HA resource of VM {} could not be read: {error}. Its last known settings \
                 are kept.",
                observed.vmid
            ),
        ),
    }
}

/// Whether the state's recorded seed may leave now (`seed_lifetime = "until_ready"`): its
/// `ide2` is empty already (a detach that did not finish), or the VM boots it and
/// cloud-init finished cleanly. The agent is asked only for such VMs, so a refresh of a
/// fleet whose seeds are gone costs no request.
async fn seed_ready(
    configured: &Configured,
    prior: &Value,
    observed: &Observed,
) -> lifecycle::Readiness {
    let not_yet = lifecycle::Readiness::NotYet;
    let Some(recorded) = prior
        .get_attr(attr::SEED_VOLUME)
        .as_str()
        .filter(|v| !v.is_empty())
    else {
        return not_yet;
    };
    let lifetime = prior.get_attr(attr::SEED_LIFETIME).as_str();
    if lifetime.unwrap_or("until_ready") != "until_ready" {
        return not_yet;
    }
    if observed.seed_detached {
        return lifecycle::Readiness::Ready;
    }
    if !(observed.running && observed.seed_volume.as_deref() == Some(recorded)) {
        return not_yet;
    }
    let at = (observed.node.as_str(), observed.vmid);
    let silence = prior
        .get_attr(attr::CLOUD_INIT_TIMEOUT)
        .as_str()
        .and_then(|text| crate::validate::duration(text).ok())
        .unwrap_or(super::model::DEFAULT_CLOUD_INIT_TIMEOUT);
    lifecycle::seed_readiness(configured, at, observed.uptime, silence).await
}

/// The warning for a VM of the state's name whose mark was edited away: kept in state (so no
/// second VM of the name is made), never written to, and the user told how to hand it back.
fn mark_lost_warning(prior: &Value, name: &str, fleet: &str, vmid: u32, node: &str) -> Diagnostic {
    let mark = mark_to_restore(prior, name, fleet);
    Diagnostic::warning(
        "Proxy VM lost its ownership mark",
        format!(
            "VM {vmid} on {node} is named `{name}` but its description no longer carries this \
             provider's ownership mark (it was edited). It stays in this state, but nothing will \
             be changed or destroyed on it until it is marked again, and no second VM of the name \
             is made.\n\nTo manage it again, put these lines back at the end of its description \
             (PVE web UI: VM {vmid} > Summary > Notes) and run plan again:\n\n{}\n\nIf it is not \
             this configuration's VM any more, remove it from this state: terraform state rm \
             'ADDRESS' (ADDRESS is this resource's address, e.g. proxmox_proxy_vm.edge[0]).",
            mark.render()
        ),
    )
}
