//! A protocol contract harness (feature `testing`): a gRPC client that starts a provider binary
//! the way Terraform does (go-plugin handshake, plaintext as with `TF_DISABLE_PLUGIN_TLS`) and
//! drives it the way Terraform 1.12 to 1.16 do, checking every answer as Terraform's client
//! would. An answer Terraform would refuse is a [`Violation`] naming the Terraform source file
//! and function the check comes from (tags v1.14.9 and, where 1.16 added checks,
//! v1.16.0-rc2); diagnostics the provider reports are returned as they are.
//!
//! ```no_run
//! # async fn example() {
//! use tfplugin::testing::Client;
//! use tfplugin::Value;
//!
//! let mut client = Client::start("target/debug/tfplugin-echo", &[]).await.unwrap();
//! let schemas = client.schemas().await.unwrap();
//! assert!(schemas.resources["echo_item"].identity.is_some());
//! let config = Value::object([("count", Value::from(3))]);
//! let listed = client.list_resource("echo_item", &config, true, 2).await.unwrap();
//! assert_eq!(listed.results.len(), 2);
//! # }
//! ```
//!
//! It knows nothing of any cloud: the caller configures the provider and chooses what to send.

mod actions;
mod checks;
mod client;
mod lists;
mod moves;
mod process;
mod resources;
mod schemas;

pub use actions::Invoked;
pub use client::Client;
pub use lists::{Listed, ListedObject};
pub use moves::{MoveChange, Moved};
pub use process::{PluginProcess, channel};
pub use resources::{Applied, ApplyChange, Imported, PlanChange, Planned, Read};
pub use schemas::{IdentityTypes, ListSchema, ResourceSchema, Schemas};

use std::fmt;

/// An answer Terraform's client or core would refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The Terraform source that makes the check: file and function.
    pub check: &'static str,
    /// What the provider sent, and why it is refused.
    pub detail: String,
}

impl Violation {
    pub(crate) fn new(check: &'static str, detail: impl Into<String>) -> Violation {
        Violation {
            check,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (Terraform: {})", self.detail, self.check)
    }
}

impl std::error::Error for Violation {}
