//! A tiny provider that stores what it is given: the runnable example of the
//! `tfplugin` API, and the plugin binary this crate's tests and benchmark
//! start (`tfplugin-echo`). Besides a resource and a data source it has what
//! protocol 6.9 and 6.10 add: `echo_item` has an identity (and writes its own
//! generated configuration), a list resource lists made-up items, and the
//! action `echo_countdown` reports progress.
//!
//! Try it with Terraform: `cargo run -p tfplugin --bin tfplugin-echo -- --debug`,
//! then export the printed `TF_REATTACH_PROVIDERS` and run `terraform plan` on
//! a configuration using `example/echo`.

use std::process::ExitCode;
use std::sync::Arc;

use tfplugin::{
    Action, ActionProgress, ApplyAction, ApplyRequest, ApplyResponse, Attribute, Block, Context,
    DataSource, DataSourceResponse, Diagnostic, Diagnostics, GenerateConfigResponse,
    IdentityAttribute, IdentitySchema, ImportResponse, ImportedResource, ListItem, ListRequest,
    ListResource, ListResults, PlanRequest, PlanResponse, Provider, ReadRequest, ReadResponse,
    Resource, Schema, ServeOptions, Type, UpgradeIdentityRequest, UpgradeIdentityResponse,
    ValidateListRequest, Value, config_from_state, plan, upgrade_identity_with_current_schema,
};

struct Echo;

#[tfplugin::async_trait]
impl Provider for Echo {
    fn schema(&self) -> Schema {
        Schema::new(
            Block::new().attribute(
                Attribute::new("prefix", Type::String)
                    .optional()
                    .description("Prepended to every item's `id`."),
            ),
        )
    }

    async fn validate_config(&self, _ctx: &Context, config: &Value) -> Diagnostics {
        let mut diagnostics = Diagnostics::new();
        if config.get_attr("prefix").as_str() == Some("") {
            diagnostics.attribute_error("prefix", "Empty prefix", "Leave `prefix` unset instead.");
        }
        diagnostics
    }

    async fn configure(&self, _ctx: &Context, version: &str, _config: &Value) -> Diagnostics {
        tracing::info!(terraform_version = version, "echo provider configured");
        Diagnostics::new()
    }

    fn resources(&self) -> Vec<Arc<dyn Resource>> {
        vec![Arc::new(Item)]
    }

    fn data_sources(&self) -> Vec<Arc<dyn DataSource>> {
        vec![Arc::new(Length)]
    }

    fn list_resources(&self) -> Vec<Arc<dyn ListResource>> {
        vec![Arc::new(ItemList)]
    }

    fn actions(&self) -> Vec<Arc<dyn Action>> {
        vec![Arc::new(Countdown)]
    }
}

/// `echo_item`: stores `value`; `id` is derived from `name`, which forces
/// replacement. With `wait_for_stop = true`, apply blocks until Terraform
/// sends StopProvider (to exercise cancellation). Its identity is its `name`
/// in the namespace `default` (version 1; version 0 stored `item_name`).
struct Item;

/// The only namespace echo items live in.
const NAMESPACE: &str = "default";

fn item_state(name: &str) -> Value {
    Value::object([
        ("name", Value::from(name)),
        ("id", Value::from(format!("item-{name}"))),
    ])
}

#[tfplugin::async_trait]
impl Resource for Item {
    fn type_name(&self) -> &str {
        "echo_item"
    }

    fn schema(&self) -> Schema {
        Schema::new(
            Block::new()
                .description("Stores a value.")
                .attribute(Attribute::new("name", Type::String).required())
                .attribute(Attribute::new("value", Type::String).optional().sensitive())
                .attribute(
                    Attribute::new("secret", Type::String)
                        .optional()
                        .write_only()
                        .description("Used at apply, never stored."),
                )
                .attribute(Attribute::new("wait_for_stop", Type::Bool).optional())
                .attribute(Attribute::new("id", Type::String).computed()),
        )
    }

    fn identity_schema(&self) -> Option<IdentitySchema> {
        Some(
            IdentitySchema::new()
                .with_version(1)
                .attribute(IdentityAttribute::required("name", Type::String))
                .attribute(
                    IdentityAttribute::optional("namespace", Type::String)
                        .description("Always `default`."),
                ),
        )
    }

    fn identity_of(&self, state: &Value) -> Value {
        // Unknown while a create plan has no name yet.
        Value::object([
            ("name", state.get_attr("name").clone()),
            ("namespace", Value::from(NAMESPACE)),
        ])
    }

    async fn upgrade_identity(
        &self,
        _ctx: &Context,
        mut request: UpgradeIdentityRequest,
    ) -> UpgradeIdentityResponse {
        let v0 = serde_json::from_slice::<serde_json::Value>(&request.raw_identity_json);
        if let (0, Ok(v0)) = (request.version, v0) {
            let v1 = serde_json::json!({ "name": v0["item_name"], "namespace": NAMESPACE });
            request.raw_identity_json = v1.to_string().into_bytes();
        }
        upgrade_identity_with_current_schema(&self.identity_schema().unwrap(), &request)
    }

    async fn import_by_identity(&self, _ctx: &Context, identity: &Value) -> ImportResponse {
        let namespace = identity.get_attr("namespace").as_str().unwrap_or(NAMESPACE);
        let name = identity.get_attr("name").as_str().unwrap_or_default();
        if namespace != NAMESPACE {
            return ImportResponse {
                imported: Vec::new(),
                diagnostics: Diagnostic::error(
                    "Unknown namespace",
                    format!("Echo items live in the namespace {NAMESPACE:?} only."),
                )
                .into(),
            };
        }
        ImportResponse {
            imported: vec![ImportedResource {
                type_name: "echo_item".to_owned(),
                state: item_state(name),
                private: Vec::new(),
            }],
            diagnostics: Diagnostics::new(),
        }
    }

    fn generates_config(&self) -> bool {
        true
    }

    async fn generate_config(&self, _ctx: &Context, state: &Value) -> GenerateConfigResponse {
        let mut config = config_from_state(&self.schema().block, state);
        // `wait_for_stop = false` is what leaving it out means: not worth writing.
        if config.get_attr("wait_for_stop").as_bool() == Some(false) {
            config.set_attr("wait_for_stop", Value::Null);
        }
        GenerateConfigResponse {
            config,
            diagnostics: Diagnostics::new(),
        }
    }

    async fn validate(&self, ctx: &Context, config: &Value) -> Diagnostics {
        refuse_secret_without_write_only(ctx, config)
    }

    async fn plan(&self, ctx: &Context, request: PlanRequest) -> PlanResponse {
        // Checked again here: a client may plan without validating first.
        let refused = refuse_secret_without_write_only(ctx, &request.config);
        if refused.has_errors() {
            return PlanResponse {
                diagnostics: refused,
                ..PlanResponse::default()
            };
        }
        let mut planned_state = plan::plan_computed(
            &self.schema().block,
            &request.prior_state,
            &request.proposed_new_state,
        );
        // Write-only values are never planned.
        planned_state.set_attr("secret", Value::Null);
        PlanResponse {
            planned_state,
            requires_replace: plan::requires_replace(
                &request.prior_state,
                &request.proposed_new_state,
                &["name"],
            ),
            planned_private: request.prior_private,
            ..PlanResponse::default()
        }
    }

    async fn apply(&self, ctx: &Context, request: ApplyRequest) -> ApplyResponse {
        if request.action() == ApplyAction::Delete {
            return ApplyResponse::default();
        }
        if request.planned_state.get_attr("wait_for_stop").as_bool() == Some(true) {
            ctx.stop.stopped().await;
            return ApplyResponse {
                diagnostics: Diagnostic::error("Stopped", "Terraform asked the provider to stop.")
                    .into(),
                ..ApplyResponse::default()
            };
        }
        let mut new_state = request.planned_state;
        let name = new_state
            .get_attr("name")
            .as_str()
            .unwrap_or_default()
            .to_owned();
        new_state.set_attr("id", Value::from(format!("item-{name}")));
        ApplyResponse {
            new_state,
            private: b"{\"v\":1}".to_vec(),
            ..ApplyResponse::default()
        }
    }

    async fn read(&self, _ctx: &Context, request: ReadRequest) -> ReadResponse {
        ReadResponse {
            new_state: request.current_state,
            private: request.private,
            ..ReadResponse::default()
        }
    }

    async fn import(&self, _ctx: &Context, id: &str) -> ImportResponse {
        let Some(name) = id.strip_prefix("item-") else {
            return ImportResponse {
                imported: Vec::new(),
                diagnostics: Diagnostic::error("Invalid id", "Expected `item-<name>`.").into(),
            };
        };
        ImportResponse {
            imported: vec![ImportedResource {
                type_name: "echo_item".to_owned(),
                state: item_state(name),
                private: Vec::new(),
            }],
            diagnostics: Diagnostics::new(),
        }
    }
}

/// A client that does not keep write-only attributes out of plans and state
/// (Terraform and OpenTofu before 1.11) must not be given `secret`.
fn refuse_secret_without_write_only(ctx: &Context, config: &Value) -> Diagnostics {
    let mut diagnostics = Diagnostics::new();
    if !config.get_attr("secret").is_null()
        && !ctx.client.capabilities.write_only_attributes_allowed
    {
        let cli = ctx
            .client
            .describe()
            .unwrap_or_else(|| "This client".to_owned());
        diagnostics.attribute_error(
            "secret",
            "Write-only attribute not supported",
            format!(
                "{cli} does not support write-only attributes; \
                 `secret` needs Terraform or OpenTofu 1.11 or later."
            ),
        );
    }
    diagnostics
}

/// `echo_length`: the length of `text`.
struct Length;

#[tfplugin::async_trait]
impl DataSource for Length {
    fn type_name(&self) -> &str {
        "echo_length"
    }

    fn schema(&self) -> Schema {
        Schema::new(
            Block::new()
                .attribute(Attribute::new("text", Type::String).required())
                .attribute(Attribute::new("length", Type::Number).computed()),
        )
    }

    async fn read(&self, _ctx: &Context, config: &Value) -> DataSourceResponse {
        let mut state = config.clone();
        let length = config.get_attr("text").as_str().map_or(0, str::len);
        state.set_attr("length", Value::from(length as i64));
        DataSourceResponse {
            state,
            diagnostics: Diagnostics::new(),
        }
    }
}

/// Lists `count` made-up items named `<prefix>-<n>` (`item-<n>` by default). The result at
/// `broken_at` has no identity, which the server reports as an error ending the list.
struct ItemList;

#[tfplugin::async_trait]
impl ListResource for ItemList {
    fn type_name(&self) -> &str {
        "echo_item"
    }

    fn schema(&self) -> Schema {
        Schema::new(
            Block::new()
                .attribute(Attribute::new("count", Type::Number).required())
                .attribute(Attribute::new("prefix", Type::String).optional())
                .attribute(Attribute::new("broken_at", Type::Number).optional()),
        )
    }

    async fn validate(&self, _ctx: &Context, request: ValidateListRequest) -> Diagnostics {
        let mut diagnostics = Diagnostics::new();
        if request
            .config
            .get_attr("count")
            .as_i64()
            .is_some_and(|n| n < 0)
        {
            diagnostics.attribute_error("count", "Negative count", "Count from zero up.");
        }
        diagnostics
    }

    async fn list(
        &self,
        _ctx: &Context,
        request: ListRequest,
        results: &mut ListResults,
    ) -> Diagnostics {
        let count = request.config.get_attr("count").as_i64().unwrap_or(0);
        let prefix = request.config.get_attr("prefix").as_str().unwrap_or("item");
        let broken_at = request.config.get_attr("broken_at").as_i64();
        for n in 0..count {
            let name = format!("{prefix}-{n}");
            let mut item = ListItem::new(Item.identity_of(&item_state(&name)), &name);
            if broken_at == Some(n) {
                item.identity = Value::Null;
            }
            if results.include_resource_object() {
                item = item.with_resource_object(item_state(&name));
            }
            if results.push(item).await.is_err() {
                break;
            }
        }
        let mut diagnostics = Diagnostics::new();
        if count > 3 {
            diagnostics.warning("Many items", format!("Listed up to {count} items."));
        }
        diagnostics
    }
}

/// `echo_countdown`: counts down from `from` to 1, one progress message each; with `fail`
/// the invocation completes with an error.
struct Countdown;

#[tfplugin::async_trait]
impl Action for Countdown {
    fn type_name(&self) -> &str {
        "echo_countdown"
    }

    fn schema(&self) -> Schema {
        Schema::new(
            Block::new()
                .attribute(Attribute::new("from", Type::Number).required())
                .attribute(Attribute::new("fail", Type::Bool).optional()),
        )
    }

    async fn validate(&self, _ctx: &Context, config: &Value) -> Diagnostics {
        let mut diagnostics = Diagnostics::new();
        if config.get_attr("from").as_i64().is_some_and(|n| n > 100) {
            diagnostics.attribute_error("from", "Too far", "Count down from 100 at most.");
        }
        diagnostics
    }

    async fn plan(&self, _ctx: &Context, config: &Value) -> Diagnostics {
        let mut diagnostics = Diagnostics::new();
        if config.get_attr("from").as_i64().is_some_and(|n| n < 1) {
            diagnostics.attribute_error("from", "Nothing to count", "Count down from 1 or more.");
        }
        diagnostics
    }

    async fn invoke(
        &self,
        _ctx: &Context,
        config: &Value,
        progress: &ActionProgress,
    ) -> Diagnostics {
        let from = config.get_attr("from").as_i64().unwrap_or(0);
        for n in (1..=from).rev() {
            if !progress.report(n.to_string()).await {
                break;
            }
        }
        let mut diagnostics = Diagnostics::new();
        if config.get_attr("fail").as_bool() == Some(true) {
            diagnostics.error("Countdown failed", "Asked to fail.");
        }
        diagnostics
    }
}

fn main() -> ExitCode {
    tfplugin::serve(
        Arc::new(Echo),
        ServeOptions::new("registry.terraform.io/example/echo"),
    )
}
