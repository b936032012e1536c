//! `ValidateActionConfig`, `PlanAction` and `InvokeAction` (protocol 6.10).
//!
//! An invocation's stream is progress events, then exactly one `Completed`, then its end;
//! failures before the action runs are a lone `Completed` with the error. Terraform's client
//! crashes on an event that is neither (`internal/plugin6/grpc_provider.go` `InvokeAction` at
//! v1.14.9), and runs only wholly known configurations
//! (`internal/terraform/node_action_trigger_instance_apply.go` `Execute`).

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tonic::codegen::BoxStream;
use tonic::{Request, Response};
use tracing::Instrument as _;

use super::{Entry, ProviderService, RpcResult, Served, decode, log_result};
use crate::action::{Action, ActionProgress};
use crate::diag::{Diagnostic, Diagnostics};
use crate::proto::tfplugin6 as pb;
use crate::value::Value;

/// Progress messages buffered ahead of a slow reader.
const BUFFERED_EVENTS: usize = 16;

fn completed(diagnostics: &Diagnostics) -> pb::invoke_action::Event {
    pb::invoke_action::Event {
        r#type: Some(pb::invoke_action::event::Type::Completed(
            pb::invoke_action::event::Completed {
                diagnostics: diagnostics.to_proto(),
            },
        )),
    }
}

impl ProviderService {
    fn action(&self, type_name: &str) -> Result<&Entry<dyn Action>, Diagnostics> {
        self.registry().actions.get(type_name).ok_or_else(|| {
            Diagnostic::error(
                "Unknown action type",
                format!("This provider has no action type {type_name:?}."),
            )
            .into()
        })
    }

    pub(super) async fn validate_action(
        &self,
        request: Request<pb::validate_action_config::Request>,
    ) -> RpcResult<pb::validate_action_config::Response> {
        let request = request.into_inner();
        let rpc = "ValidateActionConfig";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.action(&request.type_name)?;
            let config = decode(request.config.as_ref(), &entry.value_type, "configuration")?;
            let ctx = self.context(rpc, None);
            let diagnostics = entry.implementation.validate(&ctx, &config).await;
            Served::Ok((Default::default(), diagnostics))
        })
        .await
    }

    pub(super) async fn plan_action_rpc(
        &self,
        request: Request<pb::plan_action::Request>,
    ) -> RpcResult<pb::plan_action::Response> {
        let request = request.into_inner();
        let rpc = "PlanAction";
        self.serve_rpc(rpc, &request.action_type, async {
            let entry = self.action(&request.action_type)?;
            let config = decode(request.config.as_ref(), &entry.value_type, "configuration")?;
            let ctx = self.context(rpc, request.client_capabilities.as_ref());
            // Never deferred: this server does not build on deferrals.
            let diagnostics = entry.implementation.plan(&ctx, &config).await;
            Served::Ok((Default::default(), diagnostics))
        })
        .await
    }

    pub(super) async fn invoke(
        &self,
        request: Request<pb::invoke_action::Request>,
    ) -> RpcResult<BoxStream<pb::invoke_action::Event>> {
        let request = request.into_inner();
        let rpc = "InvokeAction";
        let span = self.span(rpc, &request.action_type);
        let started = Instant::now();
        let ready = self.action(&request.action_type).and_then(|entry| {
            let config = decode(request.config.as_ref(), &entry.value_type, "configuration")?;
            if !config.is_wholly_known() {
                return Err(Diagnostic::error(
                    "Invalid configuration received from Terraform",
                    "The action's configuration has unknown values; actions run only on \
                     known values.",
                )
                .into());
            }
            Ok((entry.implementation.clone(), config))
        });
        let (action, config): (Arc<dyn Action>, Value) = match ready {
            Ok(ready) => ready,
            Err(diagnostics) => {
                span.in_scope(|| log_result(started, &diagnostics));
                let event = completed(&diagnostics);
                return Ok(Response::new(Box::pin(tokio_stream::iter([Ok(event)]))));
            }
        };
        let ctx = self.context(rpc, request.client_capabilities.as_ref());
        let (sender, receiver) = mpsc::channel(BUFFERED_EVENTS);
        let invocation = async move {
            let progress = ActionProgress::new(sender.clone());
            let diagnostics = action.invoke(&ctx, &config, &progress).await;
            log_result(started, &diagnostics);
            let _ = sender.send(Ok(completed(&diagnostics))).await;
        };
        tokio::spawn(invocation.instrument(span));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
        )))
    }
}
