//! A tiny provider that stores what it is given: the runnable example of the
//! `tfplugin` API, and the plugin binary this crate's tests and benchmark
//! start (`tfplugin-echo`).
//!
//! Try it with Terraform: `cargo run -p tfplugin --bin tfplugin-echo -- --debug`,
//! then export the printed `TF_REATTACH_PROVIDERS` and run `terraform plan` on
//! a configuration using `example/echo`.

use std::process::ExitCode;
use std::sync::Arc;

use tfplugin::{
    ApplyAction, ApplyRequest, ApplyResponse, Attribute, Block, Context, DataSource,
    DataSourceResponse, Diagnostic, Diagnostics, ImportResponse, ImportedResource, PlanRequest,
    PlanResponse, Provider, ReadRequest, ReadResponse, Resource, Schema, ServeOptions, Type, Value,
    plan,
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
}

/// `echo_item`: stores `value`; `id` is derived from `name`, which forces
/// replacement. With `wait_for_stop = true`, apply blocks until Terraform
/// sends StopProvider (to exercise cancellation).
struct Item;

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
            diagnostics: Diagnostics::new(),
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
            diagnostics: Diagnostics::new(),
        }
    }

    async fn read(&self, _ctx: &Context, request: ReadRequest) -> ReadResponse {
        ReadResponse {
            new_state: request.current_state,
            private: request.private,
            diagnostics: Diagnostics::new(),
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
                state: Value::object([("name", Value::from(name)), ("id", Value::from(id))]),
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

fn main() -> ExitCode {
    tfplugin::serve(
        Arc::new(Echo),
        ServeOptions::new("registry.terraform.io/example/echo"),
    )
}
