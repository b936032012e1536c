//! One operation's context: the client, the deadline of the operation (a create, an update,
//! a delete, a read) and the lifecycle's one retry policy, so no call site chooses its own
//! (#44). Every call that may be repeated runs through [`Operation::retry`] (or, outside an
//! operation's deadline, [`read`]), every task is
//! waited for through [`Operation::wait`], [`Operation::run_task`] or
//! [`Operation::run_answered_task`], and every wait for a
//! lock through [`Operation::locks`], all bounded by the deadline.

use std::future::Future;

use pve::{Backoff, Client, RetryPolicy};
use tokio::time::Instant;

use super::error::{Step, unworkable};

/// See the module doc.
#[derive(Debug, Clone, Copy)]
pub(super) struct Operation<'a> {
    client: &'a Client,
    deadline: Instant,
}

impl<'a> Operation<'a> {
    pub(super) fn new(client: &'a Client, deadline: Instant) -> Self {
        Self { client, deadline }
    }

    pub(super) fn client(&self) -> &'a Client {
        self.client
    }

    pub(super) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The policy: transient faults a few times, and a lock (a backup, another task on the
    /// same VM or template) waited out until the deadline, since PVE releases it by itself.
    pub(super) fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 8,
            ..RetryPolicy::default()
        }
        .with_locked_until(self.deadline)
    }

    /// A call that is safe to repeat, under the policy.
    pub(super) async fn retry<T, F, Fut>(&self, call: F) -> pve::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = pve::Result<T>>,
    {
        pve::retry_idempotent(&self.policy(), call).await
    }

    /// One schedule for waiting out locks met by tasks, for the whole operation.
    pub(super) fn locks(&self) -> Backoff {
        Backoff::for_locks(self.deadline)
    }

    /// Waits for a task PVE started until it ends or the deadline passes (the task then
    /// goes on in PVE; the next apply finds what it did).
    pub(super) async fn wait(&self, upid: &pve::Upid) -> Step<pve::TaskOutcome> {
        match tokio::time::timeout_at(self.deadline, self.client.wait_for_task(upid)).await {
            Ok(outcome) => Ok(outcome?),
            Err(_) => unworkable(format!(
                "PVE task {upid} was still running when the operation's timeout ran out; the \
                 next apply finds what it did"
            )),
        }
    }

    /// [`Client::run_task`] under the policy: a task that may be repeated, sent again after a
    /// lock ended it, until the deadline.
    pub(super) async fn run_task<F, Fut>(&self, send: F) -> Step<pve::TaskOutcome>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = pve::Result<pve::Upid>>,
    {
        Ok(self
            .client
            .run_task(&self.policy(), self.deadline, send)
            .await?)
    }

    /// [`Client::run_answered_task`] under the policy: a short task PVE waits for before it
    /// answers (a seed's delete), sent again after a lock ended it, until the deadline.
    pub(super) async fn run_answered_task<F, Fut>(&self, send: F) -> Step<()>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = pve::Result<Option<pve::Upid>>>,
    {
        self.client
            .run_answered_task(&self.policy(), self.deadline, send)
            .await?;
        Ok(())
    }
}

/// A read made outside any operation's deadline (a refresh's look, a probe of the cluster):
/// transient faults retried a few times, a lock not waited for (a read does not meet one).
pub(super) async fn read<T, F, Fut>(call: F) -> pve::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = pve::Result<T>>,
{
    pve::retry_idempotent(&RetryPolicy::default(), call).await
}
