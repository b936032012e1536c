//! Identity on the wire (protocol 6.9): the identity schemas, the identity read, plan, apply
//! and import answer with, the identity a request carries, and `UpgradeResourceIdentity`.
//!
//! A resource without an identity schema never gets or sends an identity, so its answers are
//! those of a 6.8 server. For the others, what Terraform checks on every identity a provider
//! returns is checked here first and reported as an error diagnostic: it is wholly known
//! (except in a create or replace plan) and of the identity schema's type
//! (`internal/terraform/node_resource_abstract_instance.go` `validateIdentityKnown` and
//! `validateIdentity`, `internal/terraform/upgrade_resource_state.go`
//! `upgradeResourceIdentity`, Terraform v1.14.9).

use tonic::{Request, Response};

use super::{Identity, ProviderService, RpcResult, decode, encode};
use crate::diag::{Diagnostic, Diagnostics};
use crate::identity::UpgradeIdentityRequest;
use crate::proto::tfplugin6 as pb;
use crate::provider::Resource;
use crate::value::Value;

/// Whether an identity may hold unknown values.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Known {
    /// Read, apply, import, upgrade: Terraform refuses unknowns.
    Wholly,
    /// A plan: Terraform allows unknowns when the plan creates or replaces.
    MayBeUnknown,
}

/// The identity an answer carries: `explicit` when the resource gave one, else the identity of
/// `state`; none for a resource without identity schema or a null state.
pub(super) fn identity_out(
    resource: &dyn Resource,
    identity: Option<&Identity>,
    explicit: Option<Value>,
    state: &Value,
    known: Known,
    diagnostics: &mut Diagnostics,
) -> Option<pb::ResourceIdentityData> {
    let Some(identity) = identity else {
        if explicit.is_some_and(|value| !value.is_null()) {
            diagnostics.push(invalid(format!(
                "The resource type {} returned an identity but declares no identity schema.",
                resource.type_name()
            )));
        }
        return None;
    };
    let value = match explicit {
        Some(value) => value,
        None if state.is_null() => Value::Null,
        None => resource.identity_of(state),
    };
    if value.is_null() {
        return None;
    }
    if known == Known::Wholly && !value.is_wholly_known() {
        diagnostics.push(invalid(format!(
            "The identity of this {} object has unknown values.",
            resource.type_name()
        )));
        return None;
    }
    let encoded = encode(&value, &identity.value_type, "identity", diagnostics)?;
    Some(pb::ResourceIdentityData {
        identity_data: Some(encoded),
    })
}

/// The identity a request carries, null when it carries none.
pub(super) fn identity_in(
    type_name: &str,
    identity: Option<&Identity>,
    data: Option<&pb::ResourceIdentityData>,
    what: &str,
) -> Result<Value, Diagnostics> {
    let Some(value) = data.and_then(|data| data.identity_data.as_ref()) else {
        return Ok(Value::Null);
    };
    let Some(identity) = identity else {
        return Err(Diagnostic::error(
            format!("Invalid {what} received from Terraform"),
            format!("The resource type {type_name} has no identity schema."),
        )
        .into());
    };
    decode(Some(value), &identity.value_type, what)
}

fn invalid(detail: String) -> Diagnostic {
    Diagnostic::error(
        "Provider produced invalid identity",
        format!("{detail} This is a bug in the provider."),
    )
}

impl ProviderService {
    pub(super) fn identity_schemas(
        &self,
    ) -> RpcResult<pb::get_resource_identity_schemas::Response> {
        let registry = self.registry();
        let mut response = pb::get_resource_identity_schemas::Response::default();
        let mut diagnostics = Diagnostics::new();
        for (name, identity) in &registry.identities {
            if let Some(problem) = identity.schema.problem() {
                diagnostics.error(
                    "Invalid identity schema",
                    format!(
                        "The identity schema of {name} is invalid: {problem}. This is a bug in \
                         the provider."
                    ),
                );
            }
            response
                .identity_schemas
                .insert(name.clone(), identity.schema.to_proto());
        }
        response.diagnostics = diagnostics.to_proto();
        Ok(Response::new(response))
    }

    pub(super) async fn upgrade_identity(
        &self,
        request: Request<pb::upgrade_resource_identity::Request>,
    ) -> RpcResult<pb::upgrade_resource_identity::Response> {
        let request = request.into_inner();
        let rpc = "UpgradeResourceIdentity";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.resource(&request.type_name)?;
            let Some(identity) = self.registry().identities.get(&request.type_name) else {
                return Err(Diagnostic::error(
                    "Resource has no identity",
                    format!(
                        "The resource type {} has no identity schema.",
                        request.type_name
                    ),
                )
                .into());
            };
            let upgrade = UpgradeIdentityRequest {
                version: request.version,
                raw_identity_json: request.raw_identity.unwrap_or_default().json,
            };
            let ctx = self.context(rpc, None);
            let upgraded = entry.implementation.upgrade_identity(&ctx, upgrade).await;
            let mut diagnostics = upgraded.diagnostics;
            let mut response = pb::upgrade_resource_identity::Response::default();
            if !diagnostics.has_errors() && upgraded.upgraded_identity.is_null() {
                diagnostics.push(invalid("The upgraded identity is null.".to_owned()));
            } else if !diagnostics.has_errors() {
                response.upgraded_identity = identity_out(
                    entry.implementation.as_ref(),
                    Some(identity),
                    Some(upgraded.upgraded_identity),
                    &Value::Null,
                    Known::Wholly,
                    &mut diagnostics,
                );
            }
            Ok((response, diagnostics))
        })
        .await
    }
}
