//! The traits a provider implements, and what each call receives and returns.

use std::sync::Arc;

use crate::action::Action;
use crate::codec::json_value;
use crate::context::Context;
use crate::diag::{AttributePath, Diagnostic, Diagnostics};
use crate::generate::{GenerateConfigResponse, config_from_state};
use crate::identity::{
    IdentitySchema, UpgradeIdentityRequest, UpgradeIdentityResponse,
    upgrade_identity_with_current_schema,
};
use crate::list::ListResource;
use crate::moves::{MoveRequest, MoveResponse};
use crate::plan;
use crate::schema::Schema;
use crate::value::Value;

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

    /// List resources (Terraform 1.14+). Called once; each is keyed by its
    /// [`ListResource::type_name`], which names a resource with an identity schema.
    fn list_resources(&self) -> Vec<Arc<dyn ListResource>> {
        Vec::new()
    }

    /// Actions (Terraform 1.14+). Called once; each is keyed by its [`Action::type_name`].
    fn actions(&self) -> Vec<Arc<dyn Action>> {
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
    /// The identity the object will have. `None`: [`Resource::identity_of`] the planned
    /// state. Unknown values are allowed on create and replace only.
    pub planned_identity: Option<Value>,
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
    /// The identity the plan gave (null when it gave none, and from clients before 6.9).
    pub planned_identity: Value,
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
    /// The object's identity, wholly known. `None`: [`Resource::identity_of`] the new state.
    pub new_identity: Option<Value>,
}

/// `ReadResource` input.
#[derive(Clone, Debug)]
pub struct ReadRequest {
    /// The state Terraform holds.
    pub current_state: Value,
    /// Private bytes saved with it.
    pub private: Vec<u8>,
    /// The identity Terraform holds (null when it holds none, and from clients before 6.9).
    pub current_identity: Value,
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
    /// The object's identity, wholly known. `None`: [`Resource::identity_of`] the new state.
    pub new_identity: Option<Value>,
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

    /// The identity schema (Terraform 1.12+). `None`, the default, means no identity: the
    /// server then sends no identity at all and answers as it did before protocol 6.9.
    fn identity_schema(&self) -> Option<IdentitySchema> {
        None
    }

    /// The identity of the object a (non-null) state describes, or null when it cannot be
    /// told. Answers that leave their identity `None` (read, plan, apply, and every imported
    /// object) carry this. The default is null.
    fn identity_of(&self, _state: &Value) -> Value {
        Value::Null
    }

    /// Imports an existing object by identity (`import { identity = {...} }`, Terraform
    /// 1.12+): attributes optional for import may be null. Every imported object must have an
    /// identity ([`Resource::identity_of`] its state). The default refuses.
    async fn import_by_identity(&self, _ctx: &Context, _identity: &Value) -> ImportResponse {
        ImportResponse {
            imported: Vec::new(),
            diagnostics: Diagnostic::error(
                "Import by identity not supported",
                format!(
                    "The resource type {} cannot import existing objects by identity.",
                    self.type_name()
                ),
            )
            .into(),
        }
    }

    /// Upgrades a stored identity of an older identity schema version. The default decodes the
    /// stored JSON with the current identity schema.
    async fn upgrade_identity(
        &self,
        _ctx: &Context,
        request: UpgradeIdentityRequest,
    ) -> UpgradeIdentityResponse {
        match self.identity_schema() {
            Some(schema) => upgrade_identity_with_current_schema(&schema, &request),
            None => UpgradeIdentityResponse {
                diagnostics: Diagnostic::error(
                    "Resource has no identity",
                    format!(
                        "The resource type {} has no identity schema.",
                        self.type_name()
                    ),
                )
                .into(),
                ..UpgradeIdentityResponse::default()
            },
        }
    }

    /// Whether this resource takes objects of other resource types (`moved` blocks across
    /// types, [`Resource::move_state`]). When any resource of the provider does, the provider
    /// announces the capability.
    fn accepts_moves(&self) -> bool {
        false
    }

    /// Turns an object of another resource type into one of this type. The default refuses.
    async fn move_state(&self, _ctx: &Context, request: MoveRequest) -> MoveResponse {
        MoveResponse {
            diagnostics: Diagnostic::error(
                "Move not supported",
                format!(
                    "The resource type {} cannot take objects of {}.",
                    self.type_name(),
                    request.source_type_name
                ),
            )
            .into(),
            ..MoveResponse::default()
        }
    }

    /// Whether this resource writes its own configuration for `-generate-config-out`
    /// ([`Resource::generate_config`]). When any resource of the provider does, the provider
    /// announces the capability and Terraform asks every resource.
    fn generates_config(&self) -> bool {
        false
    }

    /// The configuration for an object of this `state` (which may be null), of this
    /// resource's type and wholly known. The default is [`config_from_state`], Terraform's own
    /// filter.
    async fn generate_config(&self, _ctx: &Context, state: &Value) -> GenerateConfigResponse {
        GenerateConfigResponse {
            config: config_from_state(&self.schema().block, state),
            diagnostics: Diagnostics::new(),
        }
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
}
