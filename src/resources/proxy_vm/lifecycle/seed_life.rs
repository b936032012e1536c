//! The seed's life after the address: cloud-init's verdict ([`super::cloud_init`]) and,
//! with `seed_lifetime = "until_ready"`, the detach ([`super::detach`]); for create, for an
//! update that detaches a seed a refresh found ready, and for that refresh's one look.

use tokio::time::Instant;

use super::super::model::{Desired, SeedLifetime, WaitFor};
use super::cloud_init::{GuestFile, RESULT_JSON, Verdict, read_guest_file, wait_for_cloud_init};
use super::detach::detach_seed;
use super::error::Step;
use super::expected::Expected;
use super::operation::Operation;
use super::owned::OwnedVm;
use crate::context::Configured;

pub use super::detach::Detach;

/// What the seed's life after the address came to.
#[derive(Debug, Default)]
pub struct SeedOutcome {
    /// For the apply's warnings.
    pub warnings: Vec<String>,
    /// The seed was detached and its ISO deleted: the state records none.
    pub deleted: bool,
}

/// Cloud-init's verdict when the create waits for it (`wait_for = "cloud-init"`, started,
/// and the agent reported an address), then the detach when `seed_lifetime` says so. A
/// verdict with errors stops the create; a detach that could not finish is a warning (the
/// state keeps the seed, and the next plan shows its detach again).
pub(super) async fn after_ready(
    vm: &OwnedVm<'_>,
    desired: &Desired,
    seed_node: &str,
    seed_volume: &str,
    addressed: bool,
) -> Step<SeedOutcome> {
    let mut outcome = SeedOutcome::default();
    if !addressed || desired.wait_for != WaitFor::CloudInit {
        return Ok(outcome);
    }
    if !judge(vm, &mut outcome.warnings).await? {
        return Ok(outcome);
    }
    if desired.seed_lifetime != SeedLifetime::UntilReady {
        return Ok(outcome);
    }
    match detach_seed(vm, seed_node, seed_volume).await {
        Ok(Detach::Done) => outcome.deleted = true,
        Ok(Detach::Kept(why)) => outcome.warnings.push(why),
        Err(e) if e.is_not_ours() => return Err(e),
        Err(e) => outcome.warnings.push(format!(
            "the seed of VM {} could not be detached yet ({e}); it stays in the state, and the \
             next plan shows its detach",
            vm.vmid()
        )),
    }
    Ok(outcome)
}

/// Waits for cloud-init's verdict: true when it finished cleanly (recoverable errors are
/// warnings), false when the guest cannot be asked (a warning). Errors stop the operation.
pub(super) async fn judge(vm: &OwnedVm<'_>, warnings: &mut Vec<String>) -> Step<bool> {
    match wait_for_cloud_init(vm.client(), vm.node(), vm.vmid(), vm.deadline()).await? {
        Verdict::Unknown(why) => {
            warnings.push(format!(
                "{why} VM {} counts as ready at its address, and its seed stays attached.",
                vm.vmid()
            ));
            Ok(false)
        }
        Verdict::Clean { recoverable } => {
            if !recoverable.is_empty() {
                warnings.push(format!(
                    "cloud-init in VM {} finished, degraded (recoverable errors):\n  {}",
                    vm.vmid(),
                    recoverable.join("\n  ")
                ));
            }
            Ok(true)
        }
    }
}

/// The detach an update applies when the plan dropped `seed_volume` (a refresh found
/// cloud-init finished, or a detach that an earlier apply left unfinished).
#[allow(clippy::too_many_arguments)]
pub async fn detach(
    configured: &Configured,
    node: &str,
    vmid: u32,
    expected: Expected<'_>,
    seed_node: &str,
    seed_volume: &str,
    deadline: Instant,
) -> Step<Detach> {
    let vm = OwnedVm::new(
        Operation::new(&configured.client, deadline),
        node,
        vmid,
        expected,
    );
    detach_seed(&vm, seed_node, seed_volume).await
}

/// A refresh's look at a VM whose seed is still attached and whose lifetime is
/// `until_ready`: whether the apply may detach it now, i.e. cloud-init finished this boot
/// without errors and the guest holds the `manual-clean` marker. At most two agent reads;
/// any failure (stopped, no agent, no privilege) is "not yet".
pub async fn seed_ready_to_detach(configured: &Configured, node: &str, vmid: u32) -> bool {
    let client = &configured.client;
    let finished = match read_guest_file(client, node, vmid, RESULT_JSON).await {
        Ok(GuestFile::Read(bytes)) => serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|json| json.pointer("/v1/errors").cloned())
            .and_then(|errors| errors.as_array().map(Vec::is_empty))
            .unwrap_or(false),
        _ => false,
    };
    finished
        && matches!(
            read_guest_file(client, node, vmid, nocloud::render::MANUAL_CLEAN_MARKER).await,
            Ok(GuestFile::Read(_))
        )
}
