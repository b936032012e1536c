//! The lifecycle of a proxy VM as plain async functions over `pve::Client` and `nocloud`.
//!
//! Every step is a PVE task that is waited on, and every step is idempotent, so a create
//! interrupted anywhere resumes on the next apply: it adopts the VM it left (recognised by
//! the ownership mark written in the clone call), re-uploads the seed, rewrites the config,
//! grows only if still smaller, starts only if stopped. It never clones a duplicate and never
//! changes a VM without our mark. Update and delete are as strict: they act through
//! `owned::OwnedVm`, which checks the mark and token before each write and sends every config
//! write conditional on the digest it read.
//!
//! One module per job: `prechecks` (what must hold before anything is cloned), `slot` (find,
//! allocate or adopt the VMID), `owned` (the handle every write goes through), `steps` (the
//! single steps create and update share), `create`, `read`, `update` and `delete`. This
//! module holds only what they all use: the error types, the retry policy and the task wait.
//! Every wait for a lock runs on `pve`'s one loop, [`pve::wait_out_locks`], bounded by the
//! operation's deadline.

mod create;
mod delete;
mod owned;
pub(crate) mod placement;
pub(crate) mod prechecks;
mod read;
mod slot;
mod steps;
mod update;

use std::future::Future;

use pve::{Client, RetryPolicy};
use tokio::time::Instant;

pub use create::create;
pub use delete::{RecordedSeed, delete};
pub use read::{Expected, ExpectedToken, Found, observe, observe_with, read};
pub use update::update;

/// How far a create got, kept outside it: when a create is cut short (timeout, Ctrl-C, a
/// failed step), the state still names the VM and the seed it made, so a refresh recognises
/// the VM and destroy removes both.
#[derive(Debug, Default, Clone)]
pub struct Progress {
    /// The VMID and node, recorded before the clone is sent (it may happen even if its
    /// answer never comes).
    pub vm: Option<(u32, String)>,
    /// The seed volume, recorded before the upload is sent.
    pub seed_volume: Option<String>,
}

/// Where a create records its [`Progress`].
#[derive(Debug, Default)]
pub struct ProgressCell(std::sync::Mutex<Progress>);

impl ProgressCell {
    pub fn get(&self) -> Progress {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn update(&self, change: impl FnOnce(&mut Progress)) {
        change(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// Why a lifecycle step stopped. Callers branch on the variant, never on the text: each
/// text is the user's message, complete with the VM and what to do.
#[derive(Debug)]
pub enum StepError {
    Pve(Box<pve::Error>),
    /// A finished VM of this name and fleet exists: it belongs to another state (or to one
    /// that was lost) and is never taken over. Nothing of it belongs in this state.
    AlreadyMade(String),
    /// Another create took this VM over (its token replaced ours, it finished the VM, or the
    /// mark is gone): the VM is not this attempt's, and nothing of it belongs in this state.
    TakenOver(String),
    /// The VM at the state's VMID is no longer this instance's (deleted and recreated by
    /// someone else, or its mark edited): nothing was written to it.
    NotOurs(String),
    /// No VMID of the name's candidates is free or resumable.
    NoFreeVmid(String),
    /// Anything else a caller does not branch on: a precondition, a timeout, a VM that
    /// cannot be configured as asked.
    Failed(String),
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Pve(e) => write!(f, "{e}"),
            StepError::AlreadyMade(text)
            | StepError::TakenOver(text)
            | StepError::NotOurs(text)
            | StepError::NoFreeVmid(text)
            | StepError::Failed(text) => f.write_str(text),
        }
    }
}

impl StepError {
    /// Whether the VM this step worked on is someone else's: a create that stops this way
    /// keeps nothing of the VM in its state.
    pub fn is_not_ours(&self) -> bool {
        matches!(
            self,
            StepError::AlreadyMade(_) | StepError::TakenOver(_) | StepError::NotOurs(_)
        )
    }
}

impl From<pve::Error> for StepError {
    fn from(e: pve::Error) -> Self {
        StepError::Pve(Box::new(e))
    }
}

pub(crate) type Step<T> = Result<T, StepError>;

pub(crate) fn failed<T>(text: impl Into<String>) -> Step<T> {
    Err(StepError::Failed(text.into()))
}

/// Retries for calls that are safe to repeat: transient faults a few times, and a lock (a
/// backup, another task on the same VM or template) waited out until the operation's
/// deadline, since PVE releases it by itself.
pub(crate) fn patient(deadline: tokio::time::Instant) -> RetryPolicy {
    RetryPolicy {
        max_attempts: 8,
        ..RetryPolicy::default()
    }
    .with_locked_until(deadline)
}

pub(crate) async fn wait(client: &Client, upid: &pve::Upid) -> Step<pve::TaskOutcome> {
    Ok(client.wait_for_task(upid).await?)
}

/// A step that stopped on a PVE lock is waited out like the lock itself
/// ([`pve::wait_out_locks`]).
impl pve::MaybeLocked for StepError {
    fn lock(&self) -> Option<&pve::Error> {
        match self {
            StepError::Pve(e) => e.lock(),
            _ => None,
        }
    }
}

/// [`Client::run_task`] under the lifecycle's policy: a task that may be repeated, sent again
/// after a lock ended it, until `deadline`.
pub(crate) async fn run_task<F, Fut>(
    client: &Client,
    deadline: Instant,
    send: F,
) -> Step<pve::TaskOutcome>
where
    F: Fn() -> Fut,
    Fut: Future<Output = pve::Result<pve::Upid>>,
{
    Ok(client.run_task(&patient(deadline), deadline, send).await?)
}
