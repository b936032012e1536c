//! `GenerateResourceConfig` (protocol 6.10): the configuration `-generate-config-out` writes
//! for a state. Terraform decodes the answer with the resource's type and writes every value
//! into HCL (`internal/terraform/node_resource_plan_instance.go` `generateResourceConfig`,
//! `internal/genconfig/generate_config.go` at v1.14.9), so it must be wholly known.

use tonic::Request;

use super::{ProviderService, RpcResult, decode, encode_known};
use crate::proto::tfplugin6 as pb;

impl ProviderService {
    pub(super) async fn generate_config(
        &self,
        request: Request<pb::generate_resource_config::Request>,
    ) -> RpcResult<pb::generate_resource_config::Response> {
        let request = request.into_inner();
        let rpc = "GenerateResourceConfig";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.resource(&request.type_name)?;
            let ty = &entry.value_type;
            let state = decode(request.state.as_ref(), ty, "state")?;
            let ctx = self.context(rpc, None);
            let generated = entry.implementation.generate_config(&ctx, &state).await;
            let mut diagnostics = generated.diagnostics;
            let config = encode_known(
                &generated.config,
                ty,
                "Provider produced an invalid configuration",
                "The generated configuration",
                &mut diagnostics,
            );
            let response = pb::generate_resource_config::Response {
                config,
                ..Default::default()
            };
            Ok((response, diagnostics))
        })
        .await
    }
}
