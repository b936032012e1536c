//! A Terraform/OpenTofu plugin-protocol-6 server for providers written in Rust.
//!
//! It knows nothing about any particular cloud: a provider implements the
//! [`Provider`], [`Resource`] and [`DataSource`] traits over [`Value`]s
//! described by [`Schema`]s, and `main` calls [`serve`].
//!
//! It serves protocol 6.10 (see `proto/tfplugin6.proto`); what minors 6.9 and
//! 6.10 added is optional, and a provider that uses none of it answers exactly
//! as a 6.8 server does:
//! - resource identity (Terraform 1.12+): [`Resource::identity_schema`],
//!   [`Resource::identity_of`] (the identity every read, plan, apply, import
//!   and move answers with unless the response names one),
//!   [`Resource::import_by_identity`] and [`Resource::upgrade_identity`];
//! - list resources (`terraform query`, Terraform 1.14+): [`ListResource`],
//!   registered with [`Provider::list_resources`], pushes what it finds into
//!   [`ListResults`];
//! - generated configuration (`-generate-config-out`): [`Resource::generate_config`]
//!   with [`Resource::generates_config`];
//! - actions (Terraform 1.14+): [`Action`], registered with [`Provider::actions`],
//!   reports progress through [`ActionProgress`];
//! - moves across resource types: [`Resource::move_state`] with
//!   [`Resource::accepts_moves`].
//!
//! Where Terraform's client refuses an answer (an identity with unknown values,
//! a list result without identity, an invocation without one final completion),
//! the server turns the provider's mistake into an error diagnostic instead.
//! The `testing` feature adds `tfplugin::testing`: a client that drives a provider
//! binary as Terraform 1.12 to 1.16 do and checks every answer as Terraform does.
//!
//! What [`serve`] does (as HashiCorp's go-plugin does for Go providers):
//! - without `TF_PLUGIN_MAGIC_COOKIE` it prints that the binary is a plugin
//!   run by Terraform/OpenTofu and exits 1;
//! - listens on a unix socket in a private (0700) temp directory (loopback
//!   TCP with `TCP_NODELAY` as a fallback) and prints exactly one handshake
//!   line `1|6|unix|<path>|grpc|<cert>` on stdout; nothing else ever goes to
//!   stdout;
//! - with `PLUGIN_CLIENT_CERT` (AutoMTLS) serves TLS with a fresh
//!   certificate and requires the client to present exactly the certificate
//!   Terraform gave us; plaintext otherwise;
//! - serves `tfplugin6.Provider` (every RPC it does not implement answers
//!   `Unimplemented`), go-plugin's `GRPCController` (Shutdown exits in
//!   milliseconds, at most 0.5 s), `GRPCStdio` and gRPC health (`plugin` is
//!   SERVING);
//! - `StopProvider` raises the [`StopSignal`] in every in-flight call's
//!   [`Context`]; SIGINT is ignored;
//! - every call's [`Context`] says what its [`Client`] can do (the request's
//!   `client_capabilities`, e.g. write-only attributes from Terraform and
//!   OpenTofu 1.11) and, once `ConfigureProvider` has run, its version;
//! - `--debug` serves without the cookie, in plaintext, prints the
//!   `TF_REATTACH_PROVIDERS` value and runs until interrupted;
//! - logs from `tracing` go to stderr as hclog JSON lines at the level
//!   Terraform asks for (`TF_LOG_PROVIDER_<NAME>`, `TF_LOG_PROVIDER`, `TF_LOG`).
//!
//! # Example
//!
//! A provider with one resource whose `id` is computed:
//!
//! ```no_run
//! use std::sync::Arc;
//! use tfplugin::*;
//!
//! struct Example;
//!
//! #[tfplugin::async_trait]
//! impl Provider for Example {
//!     fn schema(&self) -> Schema {
//!         Schema::new(Block::new().attribute(
//!             Attribute::new("greeting", Type::String).optional().description("Said on create."),
//!         ))
//!     }
//!     async fn configure(&self, _ctx: &Context, _version: &str, _config: &Value) -> Diagnostics {
//!         Diagnostics::new()
//!     }
//!     fn resources(&self) -> Vec<Arc<dyn Resource>> {
//!         vec![Arc::new(Thing)]
//!     }
//! }
//!
//! struct Thing;
//!
//! #[tfplugin::async_trait]
//! impl Resource for Thing {
//!     fn type_name(&self) -> &str { "example_thing" }
//!     fn schema(&self) -> Schema {
//!         Schema::new(Block::new()
//!             .attribute(Attribute::new("name", Type::String).required())
//!             .attribute(Attribute::new("id", Type::String).computed()))
//!     }
//!     async fn plan(&self, _ctx: &Context, req: PlanRequest) -> PlanResponse {
//!         PlanResponse {
//!             // Unknown `id` on create, prior `id` on update.
//!             planned_state: plan::plan_computed(
//!                 &self.schema().block,
//!                 &req.prior_state,
//!                 &req.proposed_new_state,
//!             ),
//!             // Renaming replaces the object.
//!             requires_replace: plan::requires_replace(
//!                 &req.prior_state,
//!                 &req.proposed_new_state,
//!                 &["name"],
//!             ),
//!             ..PlanResponse::default()
//!         }
//!     }
//!     async fn apply(&self, _ctx: &Context, req: ApplyRequest) -> ApplyResponse {
//!         let mut new_state = req.planned_state.clone();
//!         if req.action() == ApplyAction::Create {
//!             let id = format!("thing-{}", new_state.get_attr("name").as_str().unwrap_or(""));
//!             new_state.set_attr("id", Value::from(id));
//!         }
//!         ApplyResponse { new_state, ..ApplyResponse::default() }
//!     }
//!     async fn read(&self, _ctx: &Context, req: ReadRequest) -> ReadResponse {
//!         ReadResponse {
//!             new_state: req.current_state,
//!             private: req.private,
//!             ..ReadResponse::default()
//!         }
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     serve(Arc::new(Example), ServeOptions::new("registry.terraform.io/example/example"))
//! }
//! ```
//!
//! A complete runnable example lives in `examples/echo.rs` (built as the
//! `tfplugin-echo` binary used by this crate's tests).

mod action;
mod codec;
mod context;
mod diag;
mod generate;
mod identity;
mod list;
pub mod logging;
mod moves;
pub mod plan;
mod provider;
pub mod read_only;
mod schema;
mod serve;
mod server;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;
mod value;

pub use action::{Action, ActionProgress};
pub use codec::{
    CodecError, UNKNOWN_MSGPACK, decode_dynamic_value, decode_json, decode_msgpack,
    encode_dynamic_value, encode_msgpack, json_value,
};
pub use context::{Client, ClientCapabilities, Context, StopSignal};
pub use diag::{AttributePath, Diagnostic, Diagnostics, PathStep, Severity};
pub use generate::{GenerateConfigResponse, config_from_state};
pub use identity::{
    IdentityAttribute, IdentitySchema, ImportRole, UpgradeIdentityRequest, UpgradeIdentityResponse,
    upgrade_identity_with_current_schema,
};
pub use list::{ListClosed, ListItem, ListRequest, ListResource, ListResults, ValidateListRequest};
pub use moves::{MoveRequest, MoveResponse};
pub use provider::{
    ApplyAction, ApplyRequest, ApplyResponse, DataSource, DataSourceResponse, ImportResponse,
    ImportedResource, PlanRequest, PlanResponse, Provider, ReadRequest, ReadResponse, Resource,
    StateUpgrade, UpgradeRequest, UpgradeResponse, upgrade_state_json, upgrade_with_current_schema,
};
pub use schema::{
    Attribute, AttributeKind, Block, BlockNesting, NestedAttributes, NestedBlock, Nesting, Schema,
};
pub use serve::{MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE, NOT_A_PROGRAM_MESSAGE, ServeOptions, serve};
pub use tls::TlsSetupError;
pub use value::{Number, Type, Value};

/// Re-exported so implementations can write `#[tfplugin::async_trait]`.
pub use tonic::async_trait;

/// Generated protocol messages and services (clients are used by tests and benchmarks).
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod proto {
    /// Terraform plugin protocol 6.
    pub mod tfplugin6 {
        tonic::include_proto!("tfplugin6");
    }
    /// go-plugin's side services.
    pub mod plugin {
        tonic::include_proto!("plugin");
    }
    /// gRPC health checking.
    pub mod health {
        tonic::include_proto!("grpc.health.v1");
    }
}
