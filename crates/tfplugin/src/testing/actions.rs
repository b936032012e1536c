//! Actions as Terraform 1.14+ drives them (`terraform apply -invoke`, `action_trigger`).

use super::Violation;
use super::checks::{diagnostics, encode};
use super::client::{Client, grpc};
use crate::diag::Diagnostics;
use crate::proto::tfplugin6 as pb;
use crate::value::Type;
use crate::value::Value;

/// What an invocation reported.
#[derive(Clone, Debug)]
pub struct Invoked {
    /// The progress messages, in order.
    pub progress: Vec<String>,
    /// The diagnostics of its completion.
    pub diagnostics: Diagnostics,
}

const INVOKE: &str = "internal/plugin6/grpc_provider.go InvokeAction";

impl Client {
    /// `ValidateActionConfig` (values may be unknown).
    pub async fn validate_action_config(
        &mut self,
        type_name: &str,
        config: &Value,
    ) -> Result<Diagnostics, Violation> {
        let check = "internal/plugin6/grpc_provider.go ValidateActionConfig";
        let ty = self.action_type(type_name, check).await?;
        let request = pb::validate_action_config::Request {
            type_name: type_name.to_owned(),
            config: encode(config, &ty, "action configuration"),
        };
        let answer = grpc(self.grpc.validate_action_config(request).await, check)?;
        Ok(diagnostics(&answer.diagnostics))
    }

    /// `PlanAction`. A deferral is refused unless the client allowed deferrals, and then only
    /// for an unknown provider configuration (`PlanAction` in
    /// `internal/plugin6/grpc_provider.go` at v1.16.0-rc2).
    pub async fn plan_action(
        &mut self,
        type_name: &str,
        config: &Value,
    ) -> Result<Diagnostics, Violation> {
        let check = "internal/plugin6/grpc_provider.go PlanAction";
        let ty = self.action_type(type_name, check).await?;
        let request = pb::plan_action::Request {
            action_type: type_name.to_owned(),
            config: encode(config, &ty, "action configuration"),
            client_capabilities: Some(self.capabilities),
        };
        let answer = grpc(self.grpc.plan_action(request).await, check)?;
        if let Some(deferred) = answer.deferred {
            let reason = pb::deferred::Reason::ProviderConfigUnknown as i32;
            if !self.capabilities.deferral_allowed || deferred.reason != reason {
                return Err(Violation::new(check, "an invalid deferral"));
            }
        }
        Ok(diagnostics(&answer.diagnostics))
    }

    /// `InvokeAction` on a wholly known configuration. Every event must be a progress message or
    /// the completion (`InvokeAction` in `internal/plugin6/grpc_provider.go` panics on any
    /// other); the stream is progress messages, then exactly one completion, then its end:
    /// Terraform reports the action complete on the completion
    /// (`nodeActionTriggerApplyInstance.Execute` in
    /// `internal/terraform/node_action_trigger_instance_apply.go`).
    pub async fn invoke_action(
        &mut self,
        type_name: &str,
        config: &Value,
    ) -> Result<Invoked, Violation> {
        assert!(
            config.is_wholly_known(),
            "Terraform invokes only known configurations"
        );
        let ty = self.action_type(type_name, INVOKE).await?;
        let request = pb::invoke_action::Request {
            action_type: type_name.to_owned(),
            config: encode(config, &ty, "action configuration"),
            client_capabilities: Some(self.capabilities),
        };
        let mut stream = grpc(self.grpc.invoke_action(request).await, INVOKE)?;
        let mut progress = Vec::new();
        let mut completed: Option<Diagnostics> = None;
        while let Some(event) = stream
            .message()
            .await
            .map_err(|status| Violation::new(INVOKE, format!("the stream failed: {status}")))?
        {
            use pb::invoke_action::event::Type as Event;
            if completed.is_some() {
                return Err(Violation::new(INVOKE, "an event after the completion"));
            }
            match event.r#type {
                Some(Event::Progress(p)) => progress.push(p.message),
                Some(Event::Completed(c)) => completed = Some(diagnostics(&c.diagnostics)),
                None => {
                    return Err(Violation::new(
                        INVOKE,
                        "an event that is neither progress nor completion",
                    ));
                }
            }
        }
        let diagnostics = completed
            .ok_or_else(|| Violation::new(INVOKE, "the stream ended without a completion"))?;
        Ok(Invoked {
            progress,
            diagnostics,
        })
    }

    async fn action_type(
        &mut self,
        type_name: &str,
        check: &'static str,
    ) -> Result<Type, Violation> {
        let schemas = self.schemas().await?;
        schemas
            .actions
            .get(type_name)
            .cloned()
            .ok_or_else(|| Violation::new(check, format!("unknown action {type_name:?}")))
    }
}
