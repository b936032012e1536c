//! `MoveResourceState`: a `moved` block across resource types hands a stored object to one of
//! ours. As Terraform's `applyCrossTypeMove` (`internal/refactoring/cross_provider_move.go` at
//! v1.14.9) refuses them, a moved state with unknown values or a write-only value and an
//! identity with unknown values are errors here.

use tonic::Request;

use super::identity::{Known, identity_out};
use super::{ProviderService, RpcResult, encode_known};
use crate::moves::MoveRequest;
use crate::proto::tfplugin6 as pb;

impl ProviderService {
    pub(super) async fn move_state(
        &self,
        request: Request<pb::move_resource_state::Request>,
    ) -> RpcResult<pb::move_resource_state::Response> {
        let request = request.into_inner();
        let rpc = "MoveResourceState";
        self.serve_rpc(rpc, &request.target_type_name, async {
            let entry = self.resource(&request.target_type_name)?;
            let source_identity = request.source_identity.unwrap_or_default();
            let move_request = MoveRequest {
                source_provider_address: request.source_provider_address,
                source_type_name: request.source_type_name,
                source_schema_version: request.source_schema_version,
                source_state_json: request.source_state.unwrap_or_default().json,
                source_private: request.source_private,
                source_identity_json: source_identity.json,
                source_identity_schema_version: request.source_identity_schema_version,
            };
            let ctx = self.context(rpc, None);
            let moved = entry.implementation.move_state(&ctx, move_request).await;
            let mut diagnostics = moved.diagnostics;
            let state = &moved.target_state;
            let mut written = entry
                .schema
                .block
                .attributes
                .iter()
                .filter(|a| a.write_only);
            if let Some(a) = written.find(|a| !state.get_attr(&a.name).is_null()) {
                diagnostics.error(
                    "Provider returned invalid value",
                    format!(
                        "The moved state has a value for the write-only attribute {:?}. This \
                         is a bug in the provider.",
                        a.name
                    ),
                );
            }
            let target_identity = identity_out(
                entry.implementation.as_ref(),
                self.identity(&request.target_type_name),
                moved.target_identity,
                &moved.target_state,
                Known::Wholly,
                &mut diagnostics,
            );
            let target_state = encode_known(
                &moved.target_state,
                &entry.value_type,
                "Provider returned invalid value",
                "The moved state",
                &mut diagnostics,
            );
            let response = pb::move_resource_state::Response {
                target_state,
                target_private: moved.target_private,
                target_identity,
                ..Default::default()
            };
            Ok((response, diagnostics))
        })
        .await
    }
}
