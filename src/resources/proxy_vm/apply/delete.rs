//! The delete's apply: the lifecycle's delete bounded by `timeouts.delete`, and the sweep of
//! this working directory's killed creates that a full destroy makes once.

use tfplugin::{ApplyRequest, ApplyResponse, Context};

use super::super::attr;
use super::super::lifecycle::{self, Expected, ExpectedToken};
use super::super::mark_restore::mark_to_restore;
use super::super::model::{self, Private, fleet_of, vmid_of};
use super::{bounded, step_diagnostic};
use crate::context::Configured;
use crate::invocation;

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

pub(in super::super) async fn delete(
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
