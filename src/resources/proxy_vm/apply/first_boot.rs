//! The first boot's seed in an update: the cloud-init verdict a create left outstanding,
//! and the seed detach a refresh found due or that verdict allows.

use tfplugin::{ApplyResponse, Context, Diagnostic, Value};

use super::super::attr;
use super::super::lifecycle::{self, StepError};
use super::super::model::{self, Desired, Private};
use super::{UpdatedVm, bounded, expected_of, step_diagnostic};
use crate::context::Configured;

/// The detach the plan shows, made before anything else in the update: `false` when it
/// failed, and the update with it (`response` says why, and records a seed the guest never
/// booted as a failed first boot).
pub(super) async fn detach_shown(
    ctx: &Context,
    configured: &Configured,
    vm: UpdatedVm<'_>,
    desired: &Desired,
    planned: &Value,
    response: &mut ApplyResponse,
) -> bool {
    let Some(volume) = seed_to_detach(vm.prior, planned) else {
        return true;
    };
    let instance_id = seed_instance_id(vm, desired);
    match detach_planned(ctx, configured, vm, desired, volume, instance_id.as_deref()).await {
        Ok(()) => true,
        Err(Undetached::Later(refused)) => {
            response.diagnostics.push(refused);
            false
        }
        Err(Undetached::NotItsSeed(error)) => {
            let mut private = vm.private.clone();
            record_verdict(Err(error), desired, &mut private, response);
            false
        }
    }
}

/// Why the detach the plan shows did not happen.
#[derive(Debug)]
enum Undetached {
    /// The detach failed, or the guest keeps the seed: an error, and the next apply tries
    /// again.
    Later(Diagnostic),
    /// The guest did not boot this seed (its template's cloud-init cache ran instead): a
    /// failed first boot, recorded as one ([`record_verdict`]).
    NotItsSeed(StepError),
}

/// After this apply's first boot of the VM (the plan left `seed_volume` unknown), the seed
/// a clean cloud-init frees: a warning if it stays (the next plan shows its detach). That
/// verdict looked at the guest's instance already.
pub(super) async fn detach_after_boot(
    ctx: &Context,
    configured: &Configured,
    vm: UpdatedVm<'_>,
    desired: &Desired,
    planned: &Value,
    cloud_init_clean: bool,
) -> Option<Diagnostic> {
    let volume = seed_to_detach_after_boot(vm.prior, planned, cloud_init_clean)?;
    match detach_planned(ctx, configured, vm, desired, volume, None).await {
        Ok(()) => None,
        Err(Undetached::Later(kept)) => Some(Diagnostic::warning(kept.summary, kept.detail)),
        Err(Undetached::NotItsSeed(error)) => {
            Some(step_diagnostic("update", &desired.name, &error))
        }
    }
}

/// The detach the plan shows (a refresh found cloud-init finished after a create that did
/// not wait, or a detach an earlier apply left unfinished): done now, or why not. With
/// `instance_id`, the guest must show that it booted that seed first.
async fn detach_planned(
    ctx: &Context,
    configured: &Configured,
    vm: UpdatedVm<'_>,
    desired: &Desired,
    volume: &str,
    instance_id: Option<&str>,
) -> Result<(), Undetached> {
    let limit = desired.timeouts.update;
    let deadline = tokio::time::Instant::now() + limit;
    let seed_node = vm.prior.get_attr(attr::NODE).as_str().unwrap_or(vm.node);
    let work = lifecycle::detach(
        configured,
        (vm.node, vm.vmid),
        expected_of(&vm),
        (seed_node, volume),
        instance_id,
        deadline,
    );
    let refused = match bounded(ctx, limit, "update", work).await {
        Ok(lifecycle::Detach::Done) => return Ok(()),
        Ok(lifecycle::Detach::Kept { why, .. }) => why,
        Err(error @ StepError::CloudInitFailed(_)) => return Err(Undetached::NotItsSeed(error)),
        Err(error) => error.to_string(),
    };
    Err(Undetached::Later(Diagnostic::error(
        format!("Seed of proxy VM {} not detached", desired.name),
        format!("{refused} The seed stays recorded; the next apply tries again."),
    )))
}

/// The instance-id of the seed the create built for this VM, from the configuration's
/// write-only inputs and the identity the create gave it (the node it was made on).
/// `None` for an imported VM: its seed was written from inputs this configuration may not
/// hold.
fn seed_instance_id(vm: UpdatedVm<'_>, desired: &Desired) -> Option<String> {
    (!vm.private.imported).then(|| built_instance_id(vm, desired))
}

/// The instance-id of the seed built from `desired` with the identity the create gave the
/// VM (the node it was made on).
fn built_instance_id(vm: UpdatedVm<'_>, desired: &Desired) -> String {
    let seed_node = vm.prior.get_attr(attr::NODE).as_str().unwrap_or(vm.node);
    desired.seed(seed_node, vm.vmid).files().1
}

/// What the first boot's verdict an update read means for the private data and the
/// response: whether cloud-init finished cleanly, or `None` when it failed the update
/// (a failed first boot keeps its seed for debugging, whatever later boots say, #39).
pub(super) fn record_verdict(
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
                private.seed_ready = false;
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
pub(super) async fn first_boot_verdict(
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
    let instance_id = built_instance_id(vm, desired);
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
