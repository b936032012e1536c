//! The gRPC services: tfplugin6.Provider over the [`Provider`] traits, plus
//! go-plugin's controller and stdio services and gRPC health.
//!
//! The RPCs of protocol 6.9 and 6.10 live in submodules: `identity` (identity schemas, the
//! identity carried by read, plan, apply and import, and its upgrade), `list` (list
//! resources), `actions`, `generate` (generated configuration) and `moves` (moves across
//! resource types).

mod actions;
mod generate;
mod identity;
mod list;
mod moves;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio::sync::watch;
use tonic::{Request, Response, Status};
use tracing::Instrument as _;

use crate::action::Action;
use crate::codec::{decode_dynamic_value, encode_dynamic_value};
use crate::context::{Client, ClientCapabilities, Context, StopSource};
use crate::diag::{Diagnostic, Diagnostics};
use crate::identity::IdentitySchema;
use crate::list::ListResource;
use crate::proto::health;
use crate::proto::plugin;
use crate::proto::tfplugin6 as pb;
use crate::provider::{
    ApplyRequest, DataSource, PlanRequest, Provider, ReadRequest, Resource, UpgradeRequest,
};
use crate::read_only;
use crate::schema::Schema;
use crate::value::{Type, Value};
use identity::{Known, identity_in, identity_out};

/// Everything derived from the provider once, on first use (not at start-up:
/// the handshake is on every Terraform command's critical path).
struct Registry {
    provider_schema: Schema,
    provider_type: Type,
    resources: BTreeMap<String, Entry<dyn Resource>>,
    /// The identity schemas of the resources that have one, by resource type.
    identities: BTreeMap<String, Identity>,
    data_sources: BTreeMap<String, Entry<dyn DataSource>>,
    list_resources: BTreeMap<String, Entry<dyn ListResource>>,
    actions: BTreeMap<String, Entry<dyn Action>>,
    /// Some resource writes its own configuration: Terraform then asks every resource.
    generates_config: bool,
    /// Some resource takes objects of other types (`MoveResourceState`).
    accepts_moves: bool,
}

struct Entry<T: ?Sized> {
    implementation: Arc<T>,
    schema: Schema,
    value_type: Type,
}

impl<T: ?Sized> Entry<T> {
    fn new(implementation: Arc<T>, schema: Schema) -> Entry<T> {
        Entry {
            value_type: schema.value_type(),
            schema,
            implementation,
        }
    }
}

struct Identity {
    schema: IdentitySchema,
    value_type: Type,
}

/// The tfplugin6.Provider service.
pub(crate) struct ProviderService {
    provider: Arc<dyn Provider>,
    registry: OnceLock<Registry>,
    stop: StopSource,
    next_request_id: AtomicU64,
    /// `terraform_version` of the first `ConfigureProvider`, for later calls.
    client_version: OnceLock<String>,
    /// The CLI's name from the parent process, looked up once on first use.
    client_name: OnceLock<Option<&'static str>>,
}

impl ProviderService {
    pub(crate) fn new(provider: Arc<dyn Provider>) -> ProviderService {
        ProviderService {
            provider,
            registry: OnceLock::new(),
            stop: StopSource::new(),
            next_request_id: AtomicU64::new(1),
            client_version: OnceLock::new(),
            client_name: OnceLock::new(),
        }
    }

    fn registry(&self) -> &Registry {
        self.registry.get_or_init(|| {
            let provider_schema = self.provider.schema();
            let resources: BTreeMap<String, Entry<dyn Resource>> = self
                .provider
                .resources()
                .into_iter()
                .map(|r| (r.type_name().to_owned(), Entry::new(r.clone(), r.schema())))
                .collect();
            let identities = resources
                .iter()
                .filter_map(|(name, entry)| {
                    let schema = entry.implementation.identity_schema()?;
                    let value_type = schema.value_type();
                    Some((name.clone(), Identity { schema, value_type }))
                })
                .collect();
            let generates_config = resources
                .values()
                .any(|entry| entry.implementation.generates_config());
            let accepts_moves = resources
                .values()
                .any(|entry| entry.implementation.accepts_moves());
            let data_sources = self.provider.data_sources().into_iter();
            let list_resources = self.provider.list_resources().into_iter();
            let actions = self.provider.actions().into_iter();
            Registry {
                provider_type: provider_schema.value_type(),
                provider_schema,
                resources,
                identities,
                data_sources: data_sources
                    .map(|d| (d.type_name().to_owned(), Entry::new(d.clone(), d.schema())))
                    .collect(),
                list_resources: list_resources
                    .map(|l| (l.type_name().to_owned(), Entry::new(l.clone(), l.schema())))
                    .collect(),
                actions: actions
                    .map(|a| (a.type_name().to_owned(), Entry::new(a.clone(), a.schema())))
                    .collect(),
                generates_config,
                accepts_moves,
            }
        })
    }

    /// The context of one call; `capabilities` is the request's own field
    /// (`None` for RPCs without one, or when an older client left it out).
    fn context(&self, rpc: &'static str, capabilities: Option<&pb::ClientCapabilities>) -> Context {
        let capabilities = capabilities.map_or_else(ClientCapabilities::default, |announced| {
            tracing::debug!(
                tf_client_capability_deferral_allowed = announced.deferral_allowed,
                tf_client_capability_write_only_attributes_allowed =
                    announced.write_only_attributes_allowed,
                "Announced client capabilities"
            );
            ClientCapabilities {
                deferral_allowed: announced.deferral_allowed,
                write_only_attributes_allowed: announced.write_only_attributes_allowed,
            }
        });
        Context {
            stop: self.stop.signal(),
            rpc,
            client: Client {
                capabilities,
                version: self.client_version.get().cloned(),
                name: *self.client_name.get_or_init(parent_cli_name),
            },
        }
    }

    fn span(&self, rpc: &'static str, type_name: &str) -> tracing::Span {
        let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        // ERROR level so the span is recorded whenever any event is: spans
        // print nothing themselves, they only add their fields to events.
        tracing::error_span!(
            "rpc",
            tf_rpc = rpc,
            tf_req_id = request_id,
            tf_resource_type = type_name
        )
    }

    fn resource(&self, type_name: &str) -> Result<&Entry<dyn Resource>, Diagnostics> {
        self.registry().resources.get(type_name).ok_or_else(|| {
            Diagnostic::error(
                "Unknown resource type",
                format!("This provider has no resource type {type_name:?}."),
            )
            .into()
        })
    }

    fn identity(&self, type_name: &str) -> Option<&Identity> {
        self.registry().identities.get(type_name)
    }

    fn data_source(&self, type_name: &str) -> Result<&Entry<dyn DataSource>, Diagnostics> {
        self.registry().data_sources.get(type_name).ok_or_else(|| {
            Diagnostic::error(
                "Unknown data source type",
                format!("This provider has no data source type {type_name:?}."),
            )
            .into()
        })
    }
}

/// Terraform and OpenTofu start providers as their direct children, so the
/// parent's command name tells which CLI this is (`terraform_version` carries
/// only a number, and both CLIs share version numbers).
fn parent_cli_name() -> Option<&'static str> {
    let comm = std::fs::read_to_string(format!(
        "/proc/{}/comm",
        std::os::unix::process::parent_id()
    ))
    .ok()?;
    match comm.trim_end() {
        "terraform" => Some("Terraform"),
        "tofu" => Some("OpenTofu"),
        _ => None,
    }
}

fn capabilities(registry: &Registry) -> pb::ServerCapabilities {
    pb::ServerCapabilities {
        plan_destroy: true,
        get_provider_schema_optional: true,
        move_resource_state: registry.accepts_moves,
        generate_resource_config: registry.generates_config,
    }
}

fn decode(value: Option<&pb::DynamicValue>, ty: &Type, what: &str) -> Result<Value, Diagnostics> {
    match value {
        None => Ok(Value::Null),
        Some(value) => decode_dynamic_value(value, ty).map_err(|error| {
            Diagnostic::error(
                format!("Invalid {what} received from Terraform"),
                error.to_string(),
            )
            .into()
        }),
    }
}

/// Encodes a value we return; a failure is a bug in the provider and becomes
/// an error diagnostic instead of a panic.
fn encode(
    value: &Value,
    ty: &Type,
    what: &str,
    diagnostics: &mut Diagnostics,
) -> Option<pb::DynamicValue> {
    match encode_dynamic_value(value, ty) {
        Ok(encoded) => Some(encoded),
        Err(error) => {
            diagnostics.error(
                format!("Provider produced an invalid {what}"),
                format!(
                    "The {what} does not match the schema: {error}. This is a bug in the provider."
                ),
            );
            None
        }
    }
}

/// Encodes a state the provider returned, which must be wholly known: an unknown value in it
/// is a bug in the provider, reported as `summary` (the state is encoded all the same).
fn encode_known(
    state: &Value,
    ty: &Type,
    summary: &str,
    subject: &str,
    diagnostics: &mut Diagnostics,
) -> Option<pb::DynamicValue> {
    if !state.is_wholly_known() {
        diagnostics.error(
            summary,
            format!("{subject} contains unknown values. This is a bug in the provider."),
        );
    }
    encode(state, ty, "state", diagnostics)
}

fn log_result(started: Instant, diagnostics: &Diagnostics) {
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == crate::Severity::Error)
        .count();
    tracing::debug!(
        tf_req_duration_ms = started.elapsed().as_millis() as u64,
        diagnostic_error_count = errors,
        diagnostic_warning_count = diagnostics.0.len() - errors,
        "Served request"
    );
}

type RpcResult<T> = Result<Response<T>, Status>;

/// What an RPC's own part returns: the response (without its diagnostics) and the
/// diagnostics, or only diagnostics when it could not get as far as a response.
type Served<R> = Result<(R, Diagnostics), Diagnostics>;

/// A response that carries diagnostics: every RPC [`ProviderService::serve_rpc`] wraps.
trait Reply: Default {
    fn set_diagnostics(&mut self, diagnostics: Vec<pb::Diagnostic>);
}

macro_rules! replies {
    ($($rpc:ident),* $(,)?) => {
        $(impl Reply for pb::$rpc::Response {
            fn set_diagnostics(&mut self, diagnostics: Vec<pb::Diagnostic>) {
                self.diagnostics = diagnostics;
            }
        })*
    };
}

replies!(
    validate_provider_config,
    configure_provider,
    validate_resource_config,
    validate_data_resource_config,
    upgrade_resource_state,
    read_resource,
    plan_resource_change,
    apply_resource_change,
    import_resource_state,
    read_data_source,
    upgrade_resource_identity,
    generate_resource_config,
    validate_list_resource_config,
    validate_action_config,
    plan_action,
    move_resource_state,
);

impl ProviderService {
    /// The part every RPC shares: a span with the RPC's name, request id and type name, a
    /// timer, the closing debug line, and the diagnostics put into the response. `call` is
    /// the RPC's own part: it decodes, calls the provider, and encodes.
    async fn serve_rpc<R: Reply>(
        &self,
        rpc: &'static str,
        type_name: &str,
        call: impl Future<Output = Served<R>>,
    ) -> RpcResult<R> {
        let response = async {
            let started = Instant::now();
            let (mut response, diagnostics) = call.await.unwrap_or_else(|d| (R::default(), d));
            log_result(started, &diagnostics);
            response.set_diagnostics(diagnostics.to_proto());
            response
        }
        .instrument(self.span(rpc, type_name))
        .await;
        Ok(Response::new(response))
    }
}

#[tonic::async_trait]
impl pb::provider_server::Provider for ProviderService {
    async fn get_metadata(
        &self,
        _request: Request<pb::get_metadata::Request>,
    ) -> RpcResult<pb::get_metadata::Response> {
        let registry = self.registry();
        Ok(Response::new(pb::get_metadata::Response {
            server_capabilities: Some(capabilities(registry)),
            diagnostics: Vec::new(),
            data_sources: registry
                .data_sources
                .keys()
                .map(|name| pb::get_metadata::DataSourceMetadata {
                    type_name: name.clone(),
                })
                .collect(),
            resources: registry
                .resources
                .keys()
                .map(|name| pb::get_metadata::ResourceMetadata {
                    type_name: name.clone(),
                })
                .collect(),
            functions: Vec::new(),
            ephemeral_resources: Vec::new(),
            list_resources: registry
                .list_resources
                .keys()
                .map(|name| pb::get_metadata::ListResourceMetadata {
                    type_name: name.clone(),
                })
                .collect(),
            actions: registry
                .actions
                .keys()
                .map(|name| pb::get_metadata::ActionMetadata {
                    type_name: name.clone(),
                })
                .collect(),
        }))
    }

    async fn get_provider_schema(
        &self,
        _request: Request<pb::get_provider_schema::Request>,
    ) -> RpcResult<pb::get_provider_schema::Response> {
        let span = self.span("GetProviderSchema", "");
        let _entered = span.enter();
        let registry = self.registry();
        tracing::debug!(
            resources = registry.resources.len(),
            data_sources = registry.data_sources.len(),
            "Serving provider schema"
        );
        Ok(Response::new(pb::get_provider_schema::Response {
            provider: Some(registry.provider_schema.to_proto()),
            resource_schemas: registry
                .resources
                .iter()
                .map(|(name, entry)| (name.clone(), entry.schema.to_proto()))
                .collect(),
            data_source_schemas: registry
                .data_sources
                .iter()
                .map(|(name, entry)| (name.clone(), entry.schema.to_proto()))
                .collect(),
            list_resource_schemas: registry
                .list_resources
                .iter()
                .map(|(name, entry)| (name.clone(), entry.schema.to_proto()))
                .collect(),
            action_schemas: registry
                .actions
                .iter()
                .map(|(name, entry)| {
                    let schema = Some(entry.schema.to_proto());
                    (name.clone(), pb::ActionSchema { schema })
                })
                .collect(),
            server_capabilities: Some(capabilities(registry)),
            ..Default::default()
        }))
    }

    async fn validate_provider_config(
        &self,
        request: Request<pb::validate_provider_config::Request>,
    ) -> RpcResult<pb::validate_provider_config::Response> {
        let request = request.into_inner();
        let rpc = "ValidateProviderConfig";
        self.serve_rpc(rpc, "", async {
            let ty = &self.registry().provider_type;
            let config = decode(request.config.as_ref(), ty, "provider configuration")?;
            let ctx = self.context(rpc, None);
            let schema = &self.registry().provider_schema.block;
            let mut diagnostics = read_only::refuse_read_only(schema, &config);
            diagnostics.extend(self.provider.validate_config(&ctx, &config).await);
            Ok((Default::default(), diagnostics))
        })
        .await
    }

    async fn configure_provider(
        &self,
        request: Request<pb::configure_provider::Request>,
    ) -> RpcResult<pb::configure_provider::Response> {
        let request = request.into_inner();
        let rpc = "ConfigureProvider";
        self.serve_rpc(rpc, "", async {
            let ty = &self.registry().provider_type;
            let config = decode(request.config.as_ref(), ty, "provider configuration")?;
            // Later calls in this process learn the version from their context.
            let _ = self.client_version.set(request.terraform_version.clone());
            let ctx = self.context(rpc, request.client_capabilities.as_ref());
            tracing::debug!(
                tf_client = ctx.client.describe().unwrap_or_default(),
                "Configured by"
            );
            let diagnostics = self
                .provider
                .configure(&ctx, &request.terraform_version, &config)
                .await;
            Ok((Default::default(), diagnostics))
        })
        .await
    }

    async fn validate_resource_config(
        &self,
        request: Request<pb::validate_resource_config::Request>,
    ) -> RpcResult<pb::validate_resource_config::Response> {
        let request = request.into_inner();
        let rpc = "ValidateResourceConfig";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.resource(&request.type_name)?;
            let config = decode(request.config.as_ref(), &entry.value_type, "configuration")?;
            let ctx = self.context(rpc, request.client_capabilities.as_ref());
            let mut diagnostics = read_only::refuse_read_only(&entry.schema.block, &config);
            diagnostics.extend(entry.implementation.validate(&ctx, &config).await);
            Ok((Default::default(), diagnostics))
        })
        .await
    }

    async fn validate_data_resource_config(
        &self,
        request: Request<pb::validate_data_resource_config::Request>,
    ) -> RpcResult<pb::validate_data_resource_config::Response> {
        let request = request.into_inner();
        let rpc = "ValidateDataResourceConfig";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.data_source(&request.type_name)?;
            let config = decode(request.config.as_ref(), &entry.value_type, "configuration")?;
            let ctx = self.context(rpc, None);
            let mut diagnostics = read_only::refuse_read_only(&entry.schema.block, &config);
            diagnostics.extend(entry.implementation.validate(&ctx, &config).await);
            Ok((Default::default(), diagnostics))
        })
        .await
    }

    async fn upgrade_resource_state(
        &self,
        request: Request<pb::upgrade_resource_state::Request>,
    ) -> RpcResult<pb::upgrade_resource_state::Response> {
        let request = request.into_inner();
        let rpc = "UpgradeResourceState";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.resource(&request.type_name)?;
            let mut response = pb::upgrade_resource_state::Response::default();
            let mut diagnostics = Diagnostics::new();
            let raw = request.raw_state.unwrap_or_default();
            if raw.json.is_empty() && !raw.flatmap.is_empty() {
                diagnostics.error(
                    "Unsupported state format",
                    "The stored state uses the pre-0.12 flatmap format, which this provider \
                     cannot read.",
                );
            } else if raw.json.is_empty() {
                let ty = &entry.value_type;
                response.upgraded_state =
                    encode(&Value::Null, ty, "upgraded state", &mut diagnostics);
            } else {
                let upgrade = UpgradeRequest {
                    version: request.version,
                    raw_state_json: raw.json,
                };
                let ctx = self.context(rpc, None);
                let upgraded = entry.implementation.upgrade_state(&ctx, upgrade).await;
                diagnostics = upgraded.diagnostics;
                if !upgraded.upgraded_state.is_wholly_known() {
                    diagnostics.error(
                        "Provider produced an invalid upgraded state",
                        "The upgraded state contains unknown values. This is a bug in the \
                         provider.",
                    );
                } else if !diagnostics.has_errors() {
                    response.upgraded_state = encode(
                        &upgraded.upgraded_state,
                        &entry.value_type,
                        "upgraded state",
                        &mut diagnostics,
                    );
                }
            }
            Ok((response, diagnostics))
        })
        .await
    }

    async fn get_resource_identity_schemas(
        &self,
        _request: Request<pb::get_resource_identity_schemas::Request>,
    ) -> RpcResult<pb::get_resource_identity_schemas::Response> {
        self.identity_schemas()
    }

    async fn upgrade_resource_identity(
        &self,
        request: Request<pb::upgrade_resource_identity::Request>,
    ) -> RpcResult<pb::upgrade_resource_identity::Response> {
        self.upgrade_identity(request).await
    }

    async fn read_resource(
        &self,
        request: Request<pb::read_resource::Request>,
    ) -> RpcResult<pb::read_resource::Response> {
        let request = request.into_inner();
        let rpc = "ReadResource";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.resource(&request.type_name)?;
            let identity = self.identity(&request.type_name);
            let ty = &entry.value_type;
            let current_state = decode(request.current_state.as_ref(), ty, "current state")?;
            let current = request.current_identity.as_ref();
            let current_identity =
                identity_in(&request.type_name, identity, current, "current identity")?;
            let read = ReadRequest {
                current_state,
                private: request.private,
                current_identity,
            };
            let ctx = self.context(rpc, request.client_capabilities.as_ref());
            let read = entry.implementation.read(&ctx, read).await;
            let mut diagnostics = read.diagnostics;
            let new_identity = identity_out(
                entry.implementation.as_ref(),
                identity,
                read.new_identity,
                &read.new_state,
                Known::Wholly,
                &mut diagnostics,
            );
            let response = pb::read_resource::Response {
                new_state: encode(&read.new_state, ty, "state", &mut diagnostics),
                private: read.private,
                new_identity,
                ..Default::default()
            };
            Ok((response, diagnostics))
        })
        .await
    }

    async fn plan_resource_change(
        &self,
        request: Request<pb::plan_resource_change::Request>,
    ) -> RpcResult<pb::plan_resource_change::Response> {
        let request = request.into_inner();
        let rpc = "PlanResourceChange";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.resource(&request.type_name)?;
            let identity = self.identity(&request.type_name);
            let ty = &entry.value_type;
            let prior_state = decode(request.prior_state.as_ref(), ty, "prior state")?;
            let proposed = request.proposed_new_state.as_ref();
            let proposed_new_state = decode(proposed, ty, "proposed new state")?;
            let config = decode(request.config.as_ref(), ty, "configuration")?;
            // Checked for its type only: plans see the identity of their prior state.
            let prior = request.prior_identity.as_ref();
            identity_in(&request.type_name, identity, prior, "prior identity")?;
            let mut response = pb::plan_resource_change::Response::default();
            if proposed_new_state.is_null() {
                // Destroy (we advertise plan_destroy): the plan is absence.
                let mut diagnostics = Diagnostics::new();
                response.planned_state = encode(&Value::Null, ty, "plan", &mut diagnostics);
                response.planned_private = request.prior_private;
                return Ok((response, diagnostics));
            }
            let plan = PlanRequest {
                prior_state,
                proposed_new_state,
                config,
                prior_private: request.prior_private,
            };
            let ctx = self.context(rpc, request.client_capabilities.as_ref());
            let plan = entry.implementation.plan(&ctx, plan).await;
            let mut diagnostics = plan.diagnostics;
            response.planned_identity = identity_out(
                entry.implementation.as_ref(),
                identity,
                plan.planned_identity,
                &plan.planned_state,
                Known::MayBeUnknown,
                &mut diagnostics,
            );
            response.planned_state = encode(&plan.planned_state, ty, "plan", &mut diagnostics);
            response.requires_replace = plan
                .requires_replace
                .iter()
                .map(crate::AttributePath::to_proto)
                .collect();
            response.planned_private = plan.planned_private;
            Ok((response, diagnostics))
        })
        .await
    }

    async fn apply_resource_change(
        &self,
        request: Request<pb::apply_resource_change::Request>,
    ) -> RpcResult<pb::apply_resource_change::Response> {
        let request = request.into_inner();
        let rpc = "ApplyResourceChange";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.resource(&request.type_name)?;
            let identity = self.identity(&request.type_name);
            let ty = &entry.value_type;
            let prior_state = decode(request.prior_state.as_ref(), ty, "prior state")?;
            let planned_state = decode(request.planned_state.as_ref(), ty, "planned state")?;
            let config = decode(request.config.as_ref(), ty, "configuration")?;
            let planned = request.planned_identity.as_ref();
            let planned_identity =
                identity_in(&request.type_name, identity, planned, "planned identity")?;
            let apply = ApplyRequest {
                prior_state,
                planned_state,
                config,
                planned_private: request.planned_private,
                planned_identity,
            };
            let applied = entry
                .implementation
                .apply(&self.context(rpc, None), apply)
                .await;
            let mut diagnostics = applied.diagnostics;
            let new_identity = identity_out(
                entry.implementation.as_ref(),
                identity,
                applied.new_identity,
                &applied.new_state,
                Known::Wholly,
                &mut diagnostics,
            );
            let new_state = encode_known(
                &applied.new_state,
                ty,
                "Provider returned invalid result object after apply",
                "The new state",
                &mut diagnostics,
            );
            let response = pb::apply_resource_change::Response {
                new_state,
                private: applied.private,
                new_identity,
                ..Default::default()
            };
            Ok((response, diagnostics))
        })
        .await
    }

    async fn import_resource_state(
        &self,
        request: Request<pb::import_resource_state::Request>,
    ) -> RpcResult<pb::import_resource_state::Response> {
        let request = request.into_inner();
        let rpc = "ImportResourceState";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.resource(&request.type_name)?;
            let identity = self.identity(&request.type_name);
            let by = request.identity.as_ref();
            let by_identity = identity_in(&request.type_name, identity, by, "import identity")?;
            let ctx = self.context(rpc, request.client_capabilities.as_ref());
            let resource = &entry.implementation;
            let imported = if by_identity.is_null() {
                resource.import(&ctx, &request.id).await
            } else {
                resource.import_by_identity(&ctx, &by_identity).await
            };
            let mut diagnostics = imported.diagnostics;
            let mut response = pb::import_resource_state::Response::default();
            for object in imported.imported {
                let target = match self.resource(&object.type_name) {
                    Ok(target) => target,
                    Err(d) => {
                        diagnostics.extend(d);
                        continue;
                    }
                };
                let ty = &target.value_type;
                let state = encode(&object.state, ty, "imported state", &mut diagnostics);
                let identity = identity_out(
                    target.implementation.as_ref(),
                    self.identity(&object.type_name),
                    None,
                    &object.state,
                    Known::Wholly,
                    &mut diagnostics,
                );
                if identity.is_none() && !by_identity.is_null() {
                    // Terraform refuses it: `importState` in node_resource_plan_instance.go.
                    diagnostics.error(
                        "Provider produced invalid identity",
                        "An import by identity returned an object without identity. This is a \
                         bug in the provider.",
                    );
                }
                response
                    .imported_resources
                    .push(pb::import_resource_state::ImportedResource {
                        type_name: object.type_name,
                        state,
                        private: object.private,
                        identity,
                    });
            }
            Ok((response, diagnostics))
        })
        .await
    }

    async fn move_resource_state(
        &self,
        request: Request<pb::move_resource_state::Request>,
    ) -> RpcResult<pb::move_resource_state::Response> {
        self.move_state(request).await
    }

    async fn generate_resource_config(
        &self,
        request: Request<pb::generate_resource_config::Request>,
    ) -> RpcResult<pb::generate_resource_config::Response> {
        self.generate_config(request).await
    }

    async fn list_resource(
        &self,
        request: Request<pb::list_resource::Request>,
    ) -> RpcResult<tonic::codegen::BoxStream<pb::list_resource::Event>> {
        self.list(request).await
    }

    async fn validate_list_resource_config(
        &self,
        request: Request<pb::validate_list_resource_config::Request>,
    ) -> RpcResult<pb::validate_list_resource_config::Response> {
        self.validate_list(request).await
    }

    async fn validate_action_config(
        &self,
        request: Request<pb::validate_action_config::Request>,
    ) -> RpcResult<pb::validate_action_config::Response> {
        self.validate_action(request).await
    }

    async fn plan_action(
        &self,
        request: Request<pb::plan_action::Request>,
    ) -> RpcResult<pb::plan_action::Response> {
        self.plan_action_rpc(request).await
    }

    async fn invoke_action(
        &self,
        request: Request<pb::invoke_action::Request>,
    ) -> RpcResult<tonic::codegen::BoxStream<pb::invoke_action::Event>> {
        self.invoke(request).await
    }

    async fn read_data_source(
        &self,
        request: Request<pb::read_data_source::Request>,
    ) -> RpcResult<pb::read_data_source::Response> {
        let request = request.into_inner();
        let rpc = "ReadDataSource";
        self.serve_rpc(rpc, &request.type_name, async {
            let entry = self.data_source(&request.type_name)?;
            let ty = &entry.value_type;
            let config = decode(request.config.as_ref(), ty, "configuration")?;
            let ctx = self.context(rpc, request.client_capabilities.as_ref());
            let read = entry.implementation.read(&ctx, &config).await;
            let mut diagnostics = read.diagnostics;
            let state = encode_known(
                &read.state,
                ty,
                "Provider produced an invalid data source state",
                "The state",
                &mut diagnostics,
            );
            let response = pb::read_data_source::Response {
                state,
                ..Default::default()
            };
            Ok((response, diagnostics))
        })
        .await
    }

    async fn stop_provider(
        &self,
        _request: Request<pb::stop_provider::Request>,
    ) -> RpcResult<pb::stop_provider::Response> {
        tracing::info!(tf_rpc = "StopProvider", "Stopping in-flight operations");
        self.stop.stop();
        Ok(Response::new(pb::stop_provider::Response {
            error: String::new(),
        }))
    }
}

/// go-plugin's controller: `Shutdown` ends the process gracefully.
pub(crate) struct ControllerService {
    pub(crate) shutdown: watch::Sender<bool>,
}

#[tonic::async_trait]
impl plugin::grpc_controller_server::GrpcController for ControllerService {
    async fn shutdown(&self, _request: Request<plugin::Empty>) -> RpcResult<plugin::Empty> {
        tracing::debug!("Shutdown requested by the client");
        self.shutdown.send_replace(true);
        Ok(Response::new(plugin::Empty {}))
    }
}

/// go-plugin's stdio stream. Our output never goes through it (logs go to
/// stderr directly), so the stream ends at once; the client treats that as EOF.
pub(crate) struct StdioService;

#[tonic::async_trait]
impl plugin::grpc_stdio_server::GrpcStdio for StdioService {
    async fn stream_stdio(
        &self,
        _request: Request<()>,
    ) -> RpcResult<tonic::codegen::BoxStream<plugin::StdioData>> {
        Ok(Response::new(Box::pin(tokio_stream::empty())))
    }
}

/// gRPC health: the service `plugin` (and the whole server, `""`) is serving.
pub(crate) struct HealthService;

#[tonic::async_trait]
impl health::health_server::Health for HealthService {
    async fn check(
        &self,
        request: Request<health::HealthCheckRequest>,
    ) -> RpcResult<health::HealthCheckResponse> {
        let service = request.into_inner().service;
        if service.is_empty() || service == "plugin" {
            Ok(Response::new(health::HealthCheckResponse {
                status: health::health_check_response::ServingStatus::Serving as i32,
            }))
        } else {
            Err(Status::not_found(format!("unknown service {service:?}")))
        }
    }
}
