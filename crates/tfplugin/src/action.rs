//! Actions (protocol 6.10, Terraform 1.14+): operations a configuration invokes
//! (`action "type" "name" { config {...} }`, run by `terraform apply -invoke` or a resource's
//! `lifecycle { action_trigger {...} }`), not objects Terraform keeps in state.
//!
//! An invocation reports progress messages while it runs and ends with exactly one completion
//! carrying its diagnostics: [`ActionProgress`] sends the messages, and what
//! [`Action::invoke`] returns is the completion. Terraform's client stops (with a crash) on an
//! event that is neither (`internal/plugin6/grpc_provider.go` `InvokeAction` at v1.14.9), so
//! the server never sends one.

use tokio::sync::mpsc;
use tonic::Status;

use crate::context::Context;
use crate::diag::Diagnostics;
use crate::proto::tfplugin6 as pb;
use crate::schema::Schema;
use crate::value::Value;

pub(crate) type EventSender = mpsc::Sender<Result<pb::invoke_action::Event, Status>>;

/// Sends an invocation's progress messages (Terraform prints each as it arrives).
#[derive(Debug)]
pub struct ActionProgress {
    sender: EventSender,
}

impl ActionProgress {
    pub(crate) fn new(sender: EventSender) -> ActionProgress {
        ActionProgress { sender }
    }

    /// Sends one message; `false` when the client no longer listens.
    pub async fn report(&self, message: impl Into<String>) -> bool {
        let event = pb::invoke_action::Event {
            r#type: Some(pb::invoke_action::event::Type::Progress(
                pb::invoke_action::event::Progress {
                    message: message.into(),
                },
            )),
        };
        self.sender.send(Ok(event)).await.is_ok()
    }
}

/// An action type.
#[tonic::async_trait]
pub trait Action: Send + Sync + 'static {
    /// Full type name, e.g. `example_restart`.
    fn type_name(&self) -> &str;

    /// The schema of the action's `config` block.
    fn schema(&self) -> Schema;

    /// Checks the configuration without side effects. Values may be unknown. Diagnostic paths
    /// here, in [`Action::plan`] and [`Action::invoke`] are relative to the `config` block
    /// (Terraform 1.16 prefixes them with `config`; 1.14 and 1.15 do not).
    async fn validate(&self, _ctx: &Context, _config: &Value) -> Diagnostics {
        Diagnostics::new()
    }

    /// Checks, at plan time, that the invocation can run. Values may be unknown.
    async fn plan(&self, _ctx: &Context, _config: &Value) -> Diagnostics {
        Diagnostics::new()
    }

    /// Runs the action on a wholly known configuration, reporting progress on the way; the
    /// returned diagnostics complete the invocation.
    async fn invoke(&self, ctx: &Context, config: &Value, progress: &ActionProgress)
    -> Diagnostics;
}
