//! Apply of `proxmox_proxy_vm`: create, update and delete over the lifecycle, bounded by
//! Terraform's timeouts and stop request, and turned into state and diagnostics.

mod create;
mod delete;
mod first_boot;
mod update;

use tfplugin::{Context, Diagnostic, Value};

use super::attr;
use super::lifecycle::{Expected, ExpectedToken, StepError};
use super::model::Private;
use crate::diagnostics;

pub(super) use create::create;
pub(super) use delete::delete;
pub(super) use update::update;

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

/// Whose VM an update of `vm` must find.
pub(super) fn expected_of<'a>(vm: &UpdatedVm<'a>) -> Expected<'a> {
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
pub(super) struct UpdatedVm<'a> {
    pub(super) node: &'a str,
    pub(super) vmid: u32,
    pub(super) prior: &'a Value,
    pub(super) private: &'a Private,
}
