//! The traits a provider implements, and what each call receives and returns.

use std::sync::Arc;

use tokio::sync::watch;

use crate::codec::json_value;
use crate::diag::{AttributePath, Diagnostic, Diagnostics};
use crate::plan;
use crate::schema::Schema;
use crate::value::Value;

/// Observes Terraform's `StopProvider` (Ctrl-C): long operations should poll
/// [`StopSignal::is_stopped`] or race their work against [`StopSignal::stopped`]
/// and return promptly with an error diagnostic.
#[derive(Clone, Debug)]
pub struct StopSignal {
    receiver: watch::Receiver<bool>,
    /// Keeps the channel open for signals that nothing will ever raise.
    _never_sender: Option<Arc<watch::Sender<bool>>>,
}

impl StopSignal {
    /// Whether Terraform asked to stop.
    pub fn is_stopped(&self) -> bool {
        *self.receiver.borrow()
    }

    /// Completes when Terraform asks to stop (never, if it does not).
    pub async fn stopped(&self) {
        let mut receiver = self.receiver.clone();
        if receiver.wait_for(|stopped| *stopped).await.is_err() {
            // The server replaced its sender after raising this signal, so the
            // last value was already seen; nothing can raise it any more.
            std::future::pending::<()>().await;
        }
    }

    /// A signal that is never raised (for tests and tools).
    pub fn never() -> StopSignal {
        let (sender, receiver) = watch::channel(false);
        StopSignal {
            receiver,
            _never_sender: Some(Arc::new(sender)),
        }
    }
}

/// Raises [`StopSignal`]s. Each `StopProvider` stops the calls in flight; calls
/// that start afterwards get a fresh signal, as Terraform's own SDK does.
#[derive(Debug)]
pub(crate) struct StopSource {
    current: std::sync::Mutex<watch::Sender<bool>>,
}

impl StopSource {
    pub(crate) fn new() -> StopSource {
        StopSource {
            current: std::sync::Mutex::new(watch::channel(false).0),
        }
    }

    pub(crate) fn signal(&self) -> StopSignal {
        let sender = self.current.lock().unwrap_or_else(|e| e.into_inner());
        StopSignal {
            receiver: sender.subscribe(),
            _never_sender: None,
        }
    }

    pub(crate) fn stop(&self) {
        let mut sender = self.current.lock().unwrap_or_else(|e| e.into_inner());
        sender.send_replace(true);
        *sender = watch::channel(false).0;
    }
}

/// What every call receives.
#[derive(Clone, Debug)]
pub struct Context {
    /// Raised when Terraform sends `StopProvider`.
    pub stop: StopSignal,
    /// The RPC being served, e.g. `PlanResourceChange` (for logs).
    pub rpc: &'static str,
    /// What is known about the CLI that sent the request.
    pub client: Client,
}

impl Context {
    /// A context for calling trait methods outside a server (tests, tools).
    pub fn detached(rpc: &'static str) -> Context {
        Context {
            stop: StopSignal::never(),
            rpc,
            client: Client::default(),
        }
    }
}

/// What the request's client announced it can do (`ClientCapabilities`).
///
/// Clients older than the protocol minor that added a capability never send it,
/// so absent means "not allowed": e.g. `write_only_attributes_allowed` arrives
/// from Terraform >= 1.11 and OpenTofu >= 1.11 only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCapabilities {
    /// The client accepts deferred responses.
    pub deferral_allowed: bool,
    /// The client keeps write-only attributes out of plans and state.
    pub write_only_attributes_allowed: bool,
}

/// Which CLI runs the provider, as far as the protocol (and the process tree) tells.
#[derive(Clone, Debug, Default)]
pub struct Client {
    /// This request's capabilities (all false when it carried none, and for
    /// RPCs that have no capabilities field, e.g. `ApplyResourceChange`).
    pub capabilities: ClientCapabilities,
    /// The CLI's version from `ConfigureProvider` (`terraform_version`; OpenTofu
    /// sends its own version there). `None` until the provider is configured:
    /// Terraform validates before it configures.
    pub version: Option<String>,
    /// `Terraform` or `OpenTofu` when the parent process is `terraform` or
    /// `tofu`; `None` otherwise (e.g. `--debug` reattach, tests).
    pub name: Option<&'static str>,
}

impl Client {
    /// The CLI for a user-facing sentence, e.g. `Terraform 1.9.8`, or
    /// `Terraform or OpenTofu 1.9.8` when only the version is known; `None`
    /// when nothing is.
    pub fn describe(&self) -> Option<String> {
        let version = self.version.as_deref().filter(|v| !v.is_empty());
        match (self.name, version) {
            (Some(name), Some(version)) => Some(format!("{name} {version}")),
            (Some(name), None) => Some(name.to_owned()),
            (None, Some(version)) => Some(format!("Terraform or OpenTofu {version}")),
            (None, None) => None,
        }
    }
}

/// A Terraform provider: its configuration block plus its resources and data sources.
#[tonic::async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The `provider "..." {}` block.
    fn schema(&self) -> Schema;

    /// Checks the provider block without side effects. Values may be unknown.
    async fn validate_config(&self, _ctx: &Context, _config: &Value) -> Diagnostics {
        Diagnostics::new()
    }

    /// Configures the provider (called once per process before resource calls
    /// that need it). `terraform_version` is the client's version string.
    async fn configure(
        &self,
        ctx: &Context,
        terraform_version: &str,
        config: &Value,
    ) -> Diagnostics;

    /// Managed resources. Called once; each is keyed by its [`Resource::type_name`].
    fn resources(&self) -> Vec<Arc<dyn Resource>>;

    /// Data sources. Called once; each is keyed by its [`DataSource::type_name`].
    fn data_sources(&self) -> Vec<Arc<dyn DataSource>> {
        Vec::new()
    }
}

/// `PlanResourceChange` input. `prior_state` is null on create; the server
/// answers destroy plans (`proposed_new_state` null) itself.
#[derive(Clone, Debug)]
pub struct PlanRequest {
    /// State before the change (null when creating).
    pub prior_state: Value,
    /// Terraform's merge of config and prior state.
    pub proposed_new_state: Value,
    /// The configuration as written (may contain unknowns).
    pub config: Value,
    /// Private bytes saved with the prior state.
    pub prior_private: Vec<u8>,
}

/// `PlanResourceChange` output.
#[derive(Clone, Debug, Default)]
pub struct PlanResponse {
    /// The planned new state; unknown where the value is only known after apply.
    pub planned_state: Value,
    /// Paths whose change forces replacement.
    pub requires_replace: Vec<AttributePath>,
    /// Private bytes handed to apply.
    pub planned_private: Vec<u8>,
    /// Problems found.
    pub diagnostics: Diagnostics,
}

/// `ApplyResourceChange` input: create when `prior_state` is null, delete
/// when `planned_state` is null, update otherwise.
#[derive(Clone, Debug)]
pub struct ApplyRequest {
    /// State before the change (null when creating).
    pub prior_state: Value,
    /// The plan (null when deleting).
    pub planned_state: Value,
    /// The configuration (null when deleting).
    pub config: Value,
    /// Private bytes from the plan.
    pub planned_private: Vec<u8>,
}

impl ApplyRequest {
    /// What kind of change this is.
    pub fn action(&self) -> ApplyAction {
        if self.prior_state.is_null() {
            ApplyAction::Create
        } else if self.planned_state.is_null() {
            ApplyAction::Delete
        } else {
            ApplyAction::Update
        }
    }
}

/// The kind of change an apply performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyAction {
    /// Prior state is null.
    Create,
    /// Both are non-null.
    Update,
    /// Planned state is null.
    Delete,
}

/// `ApplyResourceChange` output.
#[derive(Clone, Debug, Default)]
pub struct ApplyResponse {
    /// The new state: wholly known; null after a delete. With errors, a
    /// non-null state is still saved (a half-created object is not orphaned).
    pub new_state: Value,
    /// Private bytes saved with the state.
    pub private: Vec<u8>,
    /// Problems found.
    pub diagnostics: Diagnostics,
}

/// `ReadResource` input.
#[derive(Clone, Debug)]
pub struct ReadRequest {
    /// The state Terraform holds.
    pub current_state: Value,
    /// Private bytes saved with it.
    pub private: Vec<u8>,
}

/// `ReadResource` output.
#[derive(Clone, Debug, Default)]
pub struct ReadResponse {
    /// The refreshed state, or null when the object is gone.
    pub new_state: Value,
    /// Private bytes to keep.
    pub private: Vec<u8>,
    /// Problems found.
    pub diagnostics: Diagnostics,
}

/// One object produced by an import.
#[derive(Clone, Debug)]
pub struct ImportedResource {
    /// Its resource type name.
    pub type_name: String,
    /// Its state (Terraform calls read on it next).
    pub state: Value,
    /// Its private bytes.
    pub private: Vec<u8>,
}

/// `ImportResourceState` output.
#[derive(Clone, Debug, Default)]
pub struct ImportResponse {
    /// The imported objects.
    pub imported: Vec<ImportedResource>,
    /// Problems found.
    pub diagnostics: Diagnostics,
}

/// `UpgradeResourceState` input.
#[derive(Clone)]
pub struct UpgradeRequest {
    /// Schema version the state was written with.
    pub version: i64,
    /// The stored state as JSON, in that version's shape.
    pub raw_state_json: Vec<u8>,
}

impl std::fmt::Debug for UpgradeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Stored state may hold secrets: show its size only.
        f.debug_struct("UpgradeRequest")
            .field("version", &self.version)
            .field("raw_state_json_len", &self.raw_state_json.len())
            .finish()
    }
}

/// `UpgradeResourceState` output.
#[derive(Clone, Debug, Default)]
pub struct UpgradeResponse {
    /// The state in the current schema, wholly known.
    pub upgraded_state: Value,
    /// Problems found.
    pub diagnostics: Diagnostics,
}

/// A managed resource type.
#[tonic::async_trait]
pub trait Resource: Send + Sync + 'static {
    /// Full type name, e.g. `example_thing`.
    fn type_name(&self) -> &str;

    /// Its schema.
    fn schema(&self) -> Schema;

    /// Checks configuration without side effects. Values may be unknown.
    async fn validate(&self, _ctx: &Context, _config: &Value) -> Diagnostics {
        Diagnostics::new()
    }

    /// Plans a create or update. The default keeps Terraform's proposal and
    /// marks computed attributes unknown on create (see [`plan::plan_computed`]).
    async fn plan(&self, _ctx: &Context, request: PlanRequest) -> PlanResponse {
        PlanResponse {
            planned_state: plan::plan_computed(
                &self.schema().block,
                &request.prior_state,
                &request.proposed_new_state,
            ),
            planned_private: request.prior_private,
            ..PlanResponse::default()
        }
    }

    /// Creates, updates or deletes (see [`ApplyRequest::action`]).
    async fn apply(&self, ctx: &Context, request: ApplyRequest) -> ApplyResponse;

    /// Refreshes the state from the real object.
    async fn read(&self, ctx: &Context, request: ReadRequest) -> ReadResponse;

    /// Imports an existing object by id. The default refuses.
    async fn import(&self, _ctx: &Context, id: &str) -> ImportResponse {
        ImportResponse {
            imported: Vec::new(),
            diagnostics: Diagnostic::error(
                "Import not supported",
                format!(
                    "The resource type {} cannot import existing objects (id {id:?}).",
                    self.type_name()
                ),
            )
            .into(),
        }
    }

    /// Upgrades stored state to the current schema. The default decodes the
    /// stored JSON with the current schema (attributes no longer in it are
    /// dropped), which suits schemas that only gained attributes.
    async fn upgrade_state(&self, _ctx: &Context, request: UpgradeRequest) -> UpgradeResponse {
        upgrade_with_current_schema(&self.schema(), &request)
    }
}

/// The default state upgrade: decode the stored JSON with the current schema.
pub fn upgrade_with_current_schema(schema: &Schema, request: &UpgradeRequest) -> UpgradeResponse {
    let mut response = UpgradeResponse::default();
    if request.version > schema.version {
        response.diagnostics.error(
            "State is from a newer provider",
            format!(
                "The stored state has schema version {}, but this provider only knows \
                 versions up to {}. Upgrade the provider.",
                request.version, schema.version
            ),
        );
        return response;
    }
    let parsed = serde_json::from_slice::<serde_json::Value>(&request.raw_state_json)
        .map_err(|e| e.to_string())
        .and_then(|json| json_value(&json, &schema.value_type()).map_err(|e| e.to_string()));
    match parsed {
        Ok(state) => response.upgraded_state = state,
        Err(error) => response
            .diagnostics
            .error("Stored state cannot be read", error),
    }
    response
}

/// One step of a state upgrade: rewrites the stored JSON object of schema
/// version N into the shape of version N + 1. An `Err` says what is wrong
/// without quoting values (stored state may hold secrets).
pub type StateUpgrade = fn(&mut serde_json::Map<String, serde_json::Value>) -> Result<(), String>;

/// Carries stored state of any earlier schema version forward: `steps[n]`
/// turns version `n` into `n + 1`, so a schema at version V passes V steps.
/// The steps run in order from the stored version, then the result is decoded
/// with the current schema (attributes no longer in it are dropped, missing
/// ones are null). State from a newer schema is refused.
pub fn upgrade_state_json(
    schema: &Schema,
    request: &UpgradeRequest,
    steps: &[StateUpgrade],
) -> UpgradeResponse {
    let mut response = UpgradeResponse::default();
    if usize::try_from(schema.version).ok() != Some(steps.len()) {
        response.diagnostics.error(
            "Provider cannot upgrade state",
            format!(
                "The schema is at version {} but {} upgrade steps are defined. \
                 This is a bug in the provider.",
                schema.version,
                steps.len()
            ),
        );
        return response;
    }
    let Ok(from) = usize::try_from(request.version) else {
        response.diagnostics.error(
            "Stored state cannot be read",
            format!("The stored schema version {} is negative.", request.version),
        );
        return response;
    };
    if from > steps.len() {
        return upgrade_with_current_schema(schema, request);
    }
    let mut object = match serde_json::from_slice::<serde_json::Value>(&request.raw_state_json) {
        Ok(serde_json::Value::Object(object)) => object,
        Ok(_) => {
            response.diagnostics.error(
                "Stored state cannot be read",
                "The stored state is not a JSON object.",
            );
            return response;
        }
        Err(error) => {
            response.diagnostics.error(
                "Stored state cannot be read",
                format!("invalid JSON: {error}"),
            );
            return response;
        }
    };
    for (version, step) in steps.iter().enumerate().skip(from) {
        if let Err(why) = step(&mut object) {
            response.diagnostics.error(
                "Stored state cannot be upgraded",
                format!(
                    "Upgrading the state from schema version {version} to {}: {why}",
                    version + 1
                ),
            );
            return response;
        }
    }
    match json_value(&serde_json::Value::Object(object), &schema.value_type()) {
        Ok(state) => response.upgraded_state = state,
        Err(error) => response
            .diagnostics
            .error("Stored state cannot be read", error.to_string()),
    }
    response
}

/// `ReadDataSource` output.
#[derive(Clone, Debug, Default)]
pub struct DataSourceResponse {
    /// The state: the config plus computed values, wholly known.
    pub state: Value,
    /// Problems found.
    pub diagnostics: Diagnostics,
}

/// A data source type.
#[tonic::async_trait]
pub trait DataSource: Send + Sync + 'static {
    /// Full type name, e.g. `example_health`.
    fn type_name(&self) -> &str;

    /// Its schema.
    fn schema(&self) -> Schema;

    /// Checks configuration without side effects. Values may be unknown.
    async fn validate(&self, _ctx: &Context, _config: &Value) -> Diagnostics {
        Diagnostics::new()
    }

    /// Reads the data.
    async fn read(&self, ctx: &Context, config: &Value) -> DataSourceResponse;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Attribute, Block};
    use crate::value::Type;

    /// Version 2 of a schema whose version 1 added `size` and version 2 renamed `label` to `name`.
    fn schema_v2() -> Schema {
        Schema::new(
            Block::new()
                .attribute(Attribute::new("name", Type::String).required())
                .attribute(Attribute::new("size", Type::Number).computed()),
        )
        .with_version(2)
    }

    fn add_size(state: &mut serde_json::Map<String, serde_json::Value>) -> Result<(), String> {
        state.entry("size").or_insert(serde_json::json!(1));
        Ok(())
    }

    fn rename_label(state: &mut serde_json::Map<String, serde_json::Value>) -> Result<(), String> {
        let label = state.remove("label").ok_or("`label` is missing")?;
        state.insert("name".into(), label);
        Ok(())
    }

    const STEPS: &[StateUpgrade] = &[add_size, rename_label];

    fn upgrade(version: i64, json: &str) -> UpgradeResponse {
        let request = UpgradeRequest {
            version,
            raw_state_json: json.as_bytes().to_vec(),
        };
        upgrade_state_json(&schema_v2(), &request, STEPS)
    }

    #[test]
    fn every_earlier_version_is_carried_forward_step_by_step() {
        let from_v0 = upgrade(0, r#"{"label":"a"}"#);
        assert!(from_v0.diagnostics.is_empty(), "{:?}", from_v0.diagnostics);
        assert_eq!(from_v0.upgraded_state.get_attr("name").as_str(), Some("a"));
        assert_eq!(from_v0.upgraded_state.get_attr("size").as_i64(), Some(1));

        // From version 1 only the rename runs: the stored size stays.
        let from_v1 = upgrade(1, r#"{"label":"b","size":7}"#);
        assert_eq!(from_v1.upgraded_state.get_attr("name").as_str(), Some("b"));
        assert_eq!(from_v1.upgraded_state.get_attr("size").as_i64(), Some(7));

        // The current version runs no step; attributes no longer in the schema are dropped.
        let current = upgrade(2, r#"{"name":"c","size":3,"label":"old"}"#);
        assert!(current.diagnostics.is_empty(), "{:?}", current.diagnostics);
        assert_eq!(current.upgraded_state.get_attr("name").as_str(), Some("c"));
        assert!(current.upgraded_state.get_attr("label").is_null());
    }

    #[test]
    fn a_failing_step_newer_state_and_bad_json_are_errors_that_quote_no_value() {
        let failed = upgrade(1, r#"{"name":"secret-value"}"#);
        assert!(failed.diagnostics.has_errors());
        let detail = &failed.diagnostics.iter().next().unwrap().detail;
        assert!(detail.contains("from schema version 1 to 2"), "{detail}");
        assert!(!detail.contains("secret-value"));

        assert!(upgrade(3, r#"{"name":"a"}"#).diagnostics.has_errors());
        assert!(upgrade(-1, r#"{"name":"a"}"#).diagnostics.has_errors());
        assert!(upgrade(0, r#"["a"]"#).diagnostics.has_errors());
        assert!(upgrade(0, "{").diagnostics.has_errors());
    }

    #[test]
    fn steps_must_match_the_schema_version() {
        let request = UpgradeRequest {
            version: 0,
            raw_state_json: br#"{"label":"a"}"#.to_vec(),
        };
        let response = upgrade_state_json(&schema_v2(), &request, &STEPS[..1]);
        assert!(response.diagnostics.has_errors());
    }

    #[test]
    fn the_client_is_described_by_what_is_known() {
        let mut client = Client::default();
        assert_eq!(client.describe(), None);
        client.version = Some("1.9.8".into());
        assert_eq!(
            client.describe().as_deref(),
            Some("Terraform or OpenTofu 1.9.8")
        );
        client.name = Some("OpenTofu");
        assert_eq!(client.describe().as_deref(), Some("OpenTofu 1.9.8"));
        client.version = None;
        assert_eq!(client.describe().as_deref(), Some("OpenTofu"));
    }
}
