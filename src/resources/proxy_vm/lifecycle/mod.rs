//! The lifecycle of a proxy VM as plain async functions over `pve::Client` and `nocloud`.
//!
//! Every step is a PVE task that is waited on, and every step is idempotent, so a create
//! interrupted anywhere resumes on the next apply: it adopts the VM it left (recognised by
//! the ownership mark written in the clone call), re-uploads the seed, rewrites the config,
//! grows only if still smaller, starts only if stopped. It never clones a duplicate and never
//! changes a VM without our mark.
//!
//! One module per job: `prechecks` (what must hold before anything is cloned), `slot` (find,
//! allocate or adopt the VMID), `steps` (the single steps create and update share), `create`,
//! `read`, `update` and `delete`. This module holds only what they all use: the error types,
//! the retry policy and the task wait.

mod create;
mod delete;
mod prechecks;
mod read;
mod slot;
mod steps;
mod update;

use pve::{Client, RetryPolicy};

pub use create::create;
pub use delete::delete;
pub use read::{Found, observe, observe_with, read};
pub use slot::locate_own;
pub use update::update;

/// Why a lifecycle step failed, with what the user needs to find the VM again.
#[derive(Debug)]
pub struct Failure {
    /// The VM exists (at least partly) and belongs in state, tainted.
    pub made: Option<(u32, String)>,
    pub error: StepError,
}

#[derive(Debug)]
pub enum StepError {
    Pve(Box<pve::Error>),
    Plain(String),
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Pve(e) => write!(f, "{e}"),
            StepError::Plain(text) => f.write_str(text),
        }
    }
}

impl From<pve::Error> for StepError {
    fn from(e: pve::Error) -> Self {
        StepError::Pve(Box::new(e))
    }
}

pub(crate) type Step<T> = Result<T, StepError>;

pub(crate) fn plain<T>(text: impl Into<String>) -> Step<T> {
    Err(StepError::Plain(text.into()))
}

/// Retries for calls that are safe to repeat, lock timeouts included: another task on the
/// same VM (our own parallel clones, a backup) usually finishes within seconds.
pub(crate) fn patient() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 8,
        ..RetryPolicy::default()
    }
    .with_locked()
}

pub(crate) async fn wait(client: &Client, upid: &pve::Upid) -> Step<pve::TaskOutcome> {
    Ok(client.wait_for_task(upid).await?)
}
