//! The lifecycle's one retry policy and its waits for PVE tasks: every call that may be
//! repeated runs under [`patient`], and every task is waited for through [`wait`] or
//! [`run_task`], bounded by the operation's deadline.

use std::future::Future;

use pve::{Client, RetryPolicy};
use tokio::time::Instant;

use super::error::{Step, unworkable};

/// Retries for calls that are safe to repeat: transient faults a few times, and a lock (a
/// backup, another task on the same VM or template) waited out until the operation's
/// deadline, since PVE releases it by itself.
pub(crate) fn patient(deadline: Instant) -> RetryPolicy {
    RetryPolicy {
        max_attempts: 8,
        ..RetryPolicy::default()
    }
    .with_locked_until(deadline)
}

/// Waits for a task PVE started until it ends or `deadline` passes (the task then goes on
/// in PVE; the next apply finds what it did).
pub(crate) async fn wait(
    client: &Client,
    upid: &pve::Upid,
    deadline: Instant,
) -> Step<pve::TaskOutcome> {
    match tokio::time::timeout_at(deadline, client.wait_for_task(upid)).await {
        Ok(outcome) => Ok(outcome?),
        Err(_) => unworkable(format!(
            "PVE task {upid} was still running when the operation's timeout ran out; the next \
            apply finds what it did"
        )),
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
