//! The harness's client: a connection to one provider process, the schemas it announced, and
//! the capabilities it announces for Terraform.

use std::path::Path;
use std::sync::Arc;

use tonic::transport::Channel;

use super::Violation;
use super::checks::{decode, diagnostics, encode};
use super::process::PluginProcess;
use super::schemas::Schemas;
use crate::diag::Diagnostics;
use crate::proto::tfplugin6 as pb;
use crate::proto::tfplugin6::provider_client::ProviderClient;
use crate::value::Value;

/// A client that talks to a provider as Terraform 1.12 to 1.16 do.
#[derive(Debug)]
pub struct Client {
    pub(super) grpc: ProviderClient<Channel>,
    pub(super) capabilities: pb::ClientCapabilities,
    schemas: Option<Arc<Schemas>>,
    _process: Option<PluginProcess>,
}

impl Client {
    /// Starts a provider binary as Terraform does and connects to it. `env` is added to
    /// Terraform's plugin environment (e.g. a provider's own settings).
    pub async fn start(binary: impl AsRef<Path>, env: &[(&str, &str)]) -> std::io::Result<Client> {
        let process = PluginProcess::start(binary, env)?;
        let channel = process.channel().await.map_err(std::io::Error::other)?;
        let mut client = Client::connect(channel);
        client._process = Some(process);
        Ok(client)
    }

    /// A client over an existing channel (e.g. to a provider started with `--debug`).
    pub fn connect(channel: Channel) -> Client {
        Client {
            grpc: ProviderClient::new(channel)
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
            capabilities: terraform_capabilities(),
            schemas: None,
            _process: None,
        }
    }

    /// Announces other client capabilities from now on (the default is what Terraform 1.12
    /// to 1.16 send on plan: write-only attributes allowed, no deferrals).
    pub fn with_capabilities(mut self, capabilities: pb::ClientCapabilities) -> Client {
        self.capabilities = capabilities;
        self
    }

    /// The generated gRPC client, for requests the harness does not shape.
    pub fn raw(&mut self) -> &mut ProviderClient<Channel> {
        &mut self.grpc
    }

    /// `GetProviderSchema` then `GetResourceIdentitySchemas`, read and checked as Terraform
    /// does (`GetProviderSchema` in `internal/plugin6/grpc_provider.go`, which takes
    /// `Unimplemented` from the second as "no identities"; the schema rules of
    /// `ProviderSchema` in `internal/schemarepo/loadschemas/plugins.go`). Asked once.
    pub async fn schemas(&mut self) -> Result<Arc<Schemas>, Violation> {
        if let Some(schemas) = &self.schemas {
            return Ok(schemas.clone());
        }
        let check = "internal/plugin6/grpc_provider.go GetProviderSchema";
        let schema = self
            .grpc
            .get_provider_schema(pb::get_provider_schema::Request {})
            .await
            .map_err(|status| Violation::new(check, status.to_string()))?
            .into_inner();
        let identities = match self
            .grpc
            .get_resource_identity_schemas(pb::get_resource_identity_schemas::Request {})
            .await
        {
            Ok(answer) => answer.into_inner(),
            Err(status) if status.code() == tonic::Code::Unimplemented => Default::default(),
            Err(status) => return Err(Violation::new(check, status.to_string())),
        };
        let schemas = Arc::new(Schemas::from_answers(&schema, &identities)?);
        self.schemas = Some(schemas.clone());
        Ok(schemas)
    }

    /// `ConfigureProvider` with the given CLI version.
    pub async fn configure(
        &mut self,
        terraform_version: &str,
        config: &Value,
    ) -> Result<Diagnostics, Violation> {
        let schemas = self.schemas().await?;
        let request = pb::configure_provider::Request {
            terraform_version: terraform_version.to_owned(),
            config: encode(config, &schemas.provider, "provider configuration"),
            client_capabilities: Some(self.capabilities),
        };
        let answer = self.grpc.configure_provider(request).await;
        let answer = grpc(
            answer,
            "internal/plugin6/grpc_provider.go ConfigureProvider",
        )?;
        Ok(diagnostics(&answer.diagnostics))
    }

    /// `ValidateResourceConfig`.
    pub async fn validate_resource_config(
        &mut self,
        type_name: &str,
        config: &Value,
    ) -> Result<Diagnostics, Violation> {
        let check = "internal/plugin6/grpc_provider.go ValidateResourceConfig";
        let schemas = self.schemas().await?;
        let schema = schemas.resource(type_name, check)?;
        let request = pb::validate_resource_config::Request {
            type_name: type_name.to_owned(),
            config: encode(config, &schema.value_type, "configuration"),
            client_capabilities: Some(self.capabilities),
        };
        let answer = grpc(self.grpc.validate_resource_config(request).await, check)?;
        Ok(diagnostics(&answer.diagnostics))
    }

    /// `ReadDataSource`.
    pub async fn read_data_source(
        &mut self,
        type_name: &str,
        config: &Value,
    ) -> Result<(Value, Diagnostics), Violation> {
        let check = "internal/plugin6/grpc_provider.go ReadDataSource";
        let schemas = self.schemas().await?;
        let ty = schemas
            .data_sources
            .get(type_name)
            .ok_or_else(|| Violation::new(check, format!("unknown data source {type_name:?}")))?;
        let request = pb::read_data_source::Request {
            type_name: type_name.to_owned(),
            config: encode(config, ty, "configuration"),
            client_capabilities: Some(self.capabilities),
            ..Default::default()
        };
        let answer = grpc(self.grpc.read_data_source(request).await, check)?;
        let state = decode(answer.state.as_ref(), ty, check, "the state")?;
        Ok((state, diagnostics(&answer.diagnostics)))
    }
}

/// What Terraform 1.12 to 1.16 announce on plan, read, import and actions.
fn terraform_capabilities() -> pb::ClientCapabilities {
    pb::ClientCapabilities {
        deferral_allowed: false,
        write_only_attributes_allowed: true,
    }
}

/// A gRPC error is an error diagnostic in Terraform (`grpcErr` in
/// `internal/plugin6/grpc_provider.go`): for a provider, a failed call.
pub(super) fn grpc<T>(
    answer: Result<tonic::Response<T>, tonic::Status>,
    check: &'static str,
) -> Result<T, Violation> {
    answer
        .map(tonic::Response::into_inner)
        .map_err(|status| Violation::new(check, format!("the call failed: {status}")))
}
