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
        StepError::CloudInitFailed(text) => {
            let then = after_failed_boot(operation);
            diagnostics::vm_error(operation, name, format!("{text} {then}").trim_end())
        }
        other => diagnostics::vm_error(operation, name, other.to_string()),
    }
}

/// What becomes of a VM whose first boot failed (cloud-init's errors, or a seed it never
/// booted): Terraform taints a failed create, never a failed update.
fn after_failed_boot(operation: &str) -> &'static str {
    match operation {
        "create" => "It is tainted: the next apply replaces it.",
        "update" => {
            "It stays in the state as it is (a failed update taints nothing), and no later \
             apply asks again: `terraform apply -replace=<its address>` makes it anew once the \
             cause is fixed."
        }
        _ => "",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_first_boot_is_called_tainted_only_after_a_create() {
        let failed = StepError::CloudInitFailed("VM 100 did not boot its seed.".into());
        let create = step_diagnostic("create", "edge-0", &failed);
        assert!(
            create
                .detail
                .ends_with("It is tainted: the next apply replaces it.")
        );
        let update = step_diagnostic("update", "edge-0", &failed);
        assert!(!update.detail.contains("tainted:"), "{}", update.detail);
        assert!(update.detail.contains("-replace=<its address>"));
        let read = step_diagnostic("read", "edge-0", &failed);
        assert_eq!(read.detail, "VM 100 did not boot its seed.");
    }
}
