//! The one retry helper, in two shapes:
//!
//! - [`retry_idempotent`] for calls that may be repeated freely (every GET, PUT config with
//!   the same values, uploads that overwrite, deletes that tolerate absence);
//! - [`retry_with_check`] for calls that must not happen twice (clone, start, …): when the
//!   outcome of an attempt is unknown, the caller's state check runs before anything is
//!   re-sent, and its answer wins.
//!
//! Retried: [`ErrorKind::Transient`], a 5xx whose text says nothing more
//! ([`Error::is_unexplained_server_error`]: for a write, only after the check), and
//! [`ErrorKind::Locked`] when the policy says so, until the policy's lock deadline. Every retry
//! is logged with its reason.
//!
//! Above single calls, a lock that ends a *task* (`VM is locked (backup)`, checked again
//! inside PVE's worker) is waited out by [`wait_out_locks`] on a [`Backoff`]: the one
//! deadline-bound pause schedule for lock waits and polls. [`Client::run_task`] is that loop
//! for a task that may be sent again.
//!
//! [`Client::run_task`]: crate::Client::run_task

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};

tokio::task_local! {
    static ATTEMPT: u32;
}

/// The attempt number of the call being made (1 outside a retry helper), for the debug line.
pub(crate) fn current_attempt() -> u32 {
    ATTEMPT.try_with(|a| *a).unwrap_or(1)
}

/// How often and how patiently to retry.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts including the first (at least 1).
    pub max_attempts: u32,
    /// Delay before the second attempt; doubles each time up to `max_delay`.
    pub base_delay: Duration,
    /// Ceiling of a single delay.
    pub max_delay: Duration,
    /// Also retry `Locked` (e.g. a config-file lock timeout while another task finishes).
    pub retry_locked: bool,
    /// With `retry_locked`: keep waiting out a lock until this instant, however many attempts
    /// that takes (a backup may hold a VM for minutes). `None`: `max_attempts` bounds it.
    pub locked_until: Option<tokio::time::Instant>,
}

impl Default for RetryPolicy {
    /// 5 attempts, 200 ms doubling to 5 s, equal jitter; `Locked` not retried.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
            retry_locked: false,
            locked_until: None,
        }
    }
}

impl RetryPolicy {
    /// The same policy retrying `Locked` as well.
    pub fn with_locked(mut self) -> Self {
        self.retry_locked = true;
        self
    }

    /// The same policy waiting out locks until `deadline`.
    pub fn with_locked_until(mut self, deadline: tokio::time::Instant) -> Self {
        self.retry_locked = true;
        self.locked_until = Some(deadline);
        self
    }

    /// Whether an error of this kind is worth another attempt under this policy.
    pub fn retries(&self, error: &Error) -> bool {
        match error.kind() {
            ErrorKind::Transient => true,
            ErrorKind::Locked => self.retry_locked,
            _ => error.is_unexplained_server_error(),
        }
    }

    /// Whether attempt `next` may be made after `error`, given the delay before it.
    fn allows(&self, error: &Error, next: u32, delay: Duration) -> bool {
        if !self.retries(error) {
            return false;
        }
        match (error.kind(), self.locked_until) {
            (ErrorKind::Locked, Some(until)) => ends_before(delay, until),
            _ => next <= self.max_attempts.max(1),
        }
    }

    /// After attempt `attempt` failed with `error`: logs and sleeps the pause before the next
    /// attempt and returns its number, or returns `None` at once when the policy gives up.
    async fn pause_after(&self, error: &Error, attempt: u32) -> Option<u32> {
        let next = attempt + 1;
        let delay = self.delay_before(next);
        if !self.allows(error, next, delay) {
            return None;
        }
        log_retry(error, next, delay);
        tokio::time::sleep(delay).await;
        Some(next)
    }

    /// Delay before attempt `next` (2, 3, …): "equal jitter" (half fixed, half random) so
    /// concurrent callers spread out but still back off.
    pub fn delay_before(&self, next: u32) -> Duration {
        let exp = next.saturating_sub(2).min(16);
        let full = self
            .base_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        let half = full / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

/// Runs `op` until it succeeds, fails with an error the policy does not retry, or runs out of
/// attempts. Use only for calls that are safe to repeat.
pub async fn retry_idempotent<T, F, Fut>(policy: &RetryPolicy, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut attempt = 1;
    loop {
        let error = match ATTEMPT.scope(attempt, op()).await {
            Ok(v) => return Ok(v),
            Err(error) => error,
        };
        match policy.pause_after(&error, attempt).await {
            Some(next) => attempt = next,
            None => return Err(error),
        }
    }
}

/// One line per retry, with what failed and why it is tried again.
fn log_retry(error: &Error, attempt: u32, delay: Duration) {
    let what = match error.kind() {
        ErrorKind::Locked => "waiting out a lock",
        ErrorKind::Transient => "transient failure",
        _ => "server error without explanation",
    };
    tracing::info!(
        method = error.method().unwrap_or_default(),
        path = error.path().unwrap_or_default(),
        attempt,
        delay_ms = delay.as_millis() as u64,
        reason = %error.message(),
        "retrying PVE call: {what}"
    );
}

/// For a call that must not take effect twice.
///
/// After a retryable failure whose outcome is unknown ([`Error::outcome_unknown`]: the
/// request may have reached PVE), `check` is asked first: `Ok(Some(v))` means the earlier
/// attempt did take effect and `v` is returned as the result; `Ok(None)` means it did not and
/// the call is sent again. A failure PVE answered clearly (e.g. 595 node unreachable) is
/// retried without asking.
pub async fn retry_with_check<T, F, Fut, C, CFut>(
    policy: &RetryPolicy,
    mut op: F,
    mut check: C,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
    C: FnMut() -> CFut,
    CFut: Future<Output = Result<Option<T>>>,
{
    let mut attempt = 1;
    loop {
        let error = match ATTEMPT.scope(attempt, op()).await {
            Ok(v) => return Ok(v),
            Err(error) => error,
        };
        let unknown = error.outcome_unknown() || error.is_unexplained_server_error();
        match policy.pause_after(&error, attempt).await {
            Some(next) => attempt = next,
            None => {
                // The last attempt may have taken effect too: the caller must hear that
                // instead of an error.
                if unknown && let Ok(Some(v)) = retry_idempotent(policy, &mut check).await {
                    tracing::info!(
                        path = error.path().unwrap_or_default(),
                        "the last attempt had taken effect"
                    );
                    return Ok(v);
                }
                return Err(error);
            }
        }
        if unknown {
            // The state check is itself a read: retry it like one.
            if let Some(v) = retry_idempotent(policy, &mut check).await? {
                tracing::info!(
                    path = error.path().unwrap_or_default(),
                    "the earlier attempt had taken effect; not sending it again"
                );
                return Ok(v);
            }
        }
    }
}

/// Whether a pause of `delay` from now ends before `deadline`: the one test every wait in
/// this crate makes before it sleeps.
fn ends_before(delay: Duration, deadline: Instant) -> bool {
    Instant::now() + delay < deadline
}

/// A pause schedule bounded by the caller's deadline: `first`, doubling up to `ceiling`, and
/// no further pause once one would reach the deadline. Lock waits use [`Backoff::for_locks`];
/// polls for a state PVE reaches by itself (a clone's lock gone, a destroyed VM gone) use
/// [`Backoff::new`] with their own steps.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    ceiling: Duration,
    deadline: Instant,
}

impl Backoff {
    /// Pauses of `first`, then twice the last one up to `ceiling`, until `deadline`.
    pub fn new(first: Duration, ceiling: Duration, deadline: Instant) -> Backoff {
        Backoff {
            next: first,
            ceiling,
            deadline,
        }
    }

    /// The schedule for waiting out a lock: 200 ms doubling to 5 s. PVE releases a lock by
    /// itself (a backup may hold one for minutes), so only the deadline ends the wait.
    pub fn for_locks(deadline: Instant) -> Backoff {
        Backoff::new(Duration::from_millis(200), Duration::from_secs(5), deadline)
    }

    /// The deadline the schedule stops at.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The next pause, or `None` when it would reach the deadline (the schedule does not
    /// advance then).
    pub fn next_delay(&mut self) -> Option<Duration> {
        let current = self.next;
        if !ends_before(current, self.deadline) {
            return None;
        }
        self.next = (current * 2).min(self.ceiling);
        Some(current)
    }

    /// Sleeps the next pause and returns `true`, or returns `false` at once when the
    /// deadline is too near for it.
    pub async fn pause(&mut self) -> bool {
        match self.next_delay() {
            Some(delay) => {
                tokio::time::sleep(delay).await;
                true
            }
            None => false,
        }
    }
}

/// An error that may be a PVE lock standing in the way, for [`wait_out_locks`]. Implemented
/// for [`Error`]; a caller's own error type that wraps one can implement it too.
pub trait MaybeLocked {
    /// The PVE error when this is a lock ([`ErrorKind::Locked`]), else `None`.
    fn lock(&self) -> Option<&Error>;
}

impl MaybeLocked for Error {
    fn lock(&self) -> Option<&Error> {
        (self.kind() == ErrorKind::Locked).then_some(self)
    }
}

/// Runs `attempt` until it ends in anything but a lock, pausing on `backoff` between
/// attempts; once the deadline is too near for another pause, the lock error is returned.
///
/// For work whose whole attempt must run again after a lock: a task that PVE's worker ended
/// because the VM was locked (`VM is locked (backup)`), or a write decided from a fresh read.
/// The attempt is where a caller checks state again before it sends anything. The schedule
/// is borrowed, so a caller that retries for another reason too (a refused digest, a VMID
/// taken meanwhile) keeps one schedule across its own loop. Single calls that met a lock are
/// better retried by [`retry_idempotent`] with [`RetryPolicy::with_locked_until`].
pub async fn wait_out_locks<T, E, F, Fut>(
    backoff: &mut Backoff,
    mut attempt: F,
) -> std::result::Result<T, E>
where
    E: MaybeLocked,
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
{
    loop {
        let error = match attempt().await {
            Err(error) if error.lock().is_some() => error,
            other => return other,
        };
        let Some(delay) = backoff.next_delay() else {
            return Err(error);
        };
        if let Some(lock) = error.lock() {
            tracing::info!(
                method = lock.method().unwrap_or_default(),
                path = lock.path().unwrap_or_default(),
                delay_ms = delay.as_millis() as u64,
                reason = %lock.message(),
                "waiting out a lock"
            );
        }
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::collections::BTreeMap;

    fn transient_unknown() -> Error {
        Error::transport("POST", "/x", false, true, "timed out".into())
    }
    fn transient_known() -> Error {
        Error::transport("POST", "/x", true, false, "refused".into())
    }
    fn locked() -> Error {
        Error::http(
            "PUT",
            "/x",
            500,
            true,
            "VM is locked (clone)".into(),
            BTreeMap::new(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn idempotent_retries_transient_until_success() {
        let calls = Cell::new(0);
        let seen_attempts = std::cell::RefCell::new(Vec::new());
        let out = retry_idempotent(&RetryPolicy::default(), || {
            calls.set(calls.get() + 1);
            let n = calls.get();
            let seen = &seen_attempts;
            // Read inside the future: that is where the client reads it.
            async move {
                seen.borrow_mut().push(current_attempt());
                if n < 3 { Err(transient_known()) } else { Ok(n) }
            }
        })
        .await
        .unwrap();
        assert_eq!(out, 3);
        assert_eq!(*seen_attempts.borrow(), vec![1, 2, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn idempotent_stops_at_max_attempts_and_on_permanent() {
        let calls = Cell::new(0);
        let err = retry_idempotent(&RetryPolicy::default(), || {
            calls.set(calls.get() + 1);
            async { Err::<(), _>(transient_known()) }
        })
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient);
        assert_eq!(calls.get(), 5);

        calls.set(0);
        let err = retry_idempotent(&RetryPolicy::default(), || {
            calls.set(calls.get() + 1);
            async { Err::<(), _>(locked()) }
        })
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Locked);
        assert_eq!(calls.get(), 1, "Locked is not retried unless asked");

        calls.set(0);
        let _ = retry_idempotent(&RetryPolicy::default().with_locked(), || {
            calls.set(calls.get() + 1);
            async { Err::<(), _>(locked()) }
        })
        .await;
        assert_eq!(calls.get(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn with_check_asks_before_resending_unknown_outcome() {
        let sends = Cell::new(0);
        let checks = Cell::new(0);
        let out = retry_with_check(
            &RetryPolicy::default(),
            || {
                sends.set(sends.get() + 1);
                async { Err::<&str, _>(transient_unknown()) }
            },
            || {
                checks.set(checks.get() + 1);
                async { Ok(Some("already done")) }
            },
        )
        .await
        .unwrap();
        assert_eq!(out, "already done");
        assert_eq!((sends.get(), checks.get()), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn with_check_asks_after_the_last_attempt_too() {
        let policy = RetryPolicy {
            max_attempts: 2,
            ..RetryPolicy::default()
        };
        let sends = Cell::new(0);
        let checks = Cell::new(0);
        let out = retry_with_check(
            &policy,
            || {
                sends.set(sends.get() + 1);
                async { Err::<&str, _>(transient_unknown()) }
            },
            || {
                checks.set(checks.get() + 1);
                let n = checks.get();
                async move { Ok((n == 2).then_some("the last send took effect")) }
            },
        )
        .await
        .unwrap();
        assert_eq!(out, "the last send took effect");
        assert_eq!((sends.get(), checks.get()), (2, 2));

        // When the check says it did not happen, the last error is returned.
        let out = retry_with_check(
            &policy,
            || async { Err::<&str, _>(transient_unknown()) },
            || async { Ok(None) },
        )
        .await;
        assert!(out.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn with_check_resends_when_check_says_not_applied_or_outcome_known() {
        let sends = Cell::new(0);
        let checks = Cell::new(0);
        let out = retry_with_check(
            &RetryPolicy::default(),
            || {
                sends.set(sends.get() + 1);
                let n = sends.get();
                async move {
                    match n {
                        1 => Err(transient_unknown()),
                        2 => Err(transient_known()),
                        _ => Ok("sent"),
                    }
                }
            },
            || {
                checks.set(checks.get() + 1);
                async { Ok(None) }
            },
        )
        .await
        .unwrap();
        assert_eq!(out, "sent");
        assert_eq!((sends.get(), checks.get()), (3, 1));
    }

    fn unexplained_500() -> Error {
        Error::http(
            "GET",
            "/x",
            500,
            true,
            "internal error".into(),
            BTreeMap::new(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn an_unexplained_500_is_retried_but_a_clear_refusal_is_not() {
        let calls = Cell::new(0);
        let out = retry_idempotent(&RetryPolicy::default(), || {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move { if n < 2 { Err(unexplained_500()) } else { Ok(n) } }
        })
        .await
        .unwrap();
        assert_eq!(out, 2);
        calls.set(0);
        let refused = Error::http(
            "POST",
            "/x",
            500,
            true,
            "unable to find configuration file for VM 7".into(),
            BTreeMap::new(),
        );
        let err = retry_idempotent(&RetryPolicy::default(), || {
            calls.set(calls.get() + 1);
            let refused = refused.clone();
            async move { Err::<(), _>(refused) }
        })
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(calls.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn with_check_asks_after_an_unexplained_500() {
        let (sends, checks) = (Cell::new(0), Cell::new(0));
        let out = retry_with_check(
            &RetryPolicy::default(),
            || {
                sends.set(sends.get() + 1);
                async { Err::<&str, _>(unexplained_500()) }
            },
            || {
                checks.set(checks.get() + 1);
                async { Ok(Some("it happened")) }
            },
        )
        .await
        .unwrap();
        assert_eq!(out, "it happened");
        assert_eq!((sends.get(), checks.get()), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_is_waited_out_until_the_deadline_not_the_attempt_count() {
        let start = tokio::time::Instant::now();
        let policy = RetryPolicy::default().with_locked_until(start + Duration::from_secs(60));
        let calls = Cell::new(0);
        // Held for 40 s: far more attempts than max_attempts, all within the deadline.
        let out = retry_idempotent(&policy, || {
            calls.set(calls.get() + 1);
            let held = tokio::time::Instant::now() < start + Duration::from_secs(40);
            async move { if held { Err(locked()) } else { Ok("free") } }
        })
        .await
        .unwrap();
        assert_eq!(out, "free");
        assert!(calls.get() > policy.max_attempts, "{} calls", calls.get());
        // Held past the deadline: gives up before it, with the lock error.
        let short = RetryPolicy::default()
            .with_locked_until(tokio::time::Instant::now() + Duration::from_secs(3));
        let began = tokio::time::Instant::now();
        let err = retry_idempotent(&short, || async { Err::<(), _>(locked()) })
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Locked);
        assert!(began.elapsed() <= Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_backoff_doubles_to_its_ceiling_and_stops_before_the_deadline() {
        let deadline = Instant::now() + Duration::from_secs(12);
        let mut backoff = Backoff::for_locks(deadline);
        let mut slept = Vec::new();
        while let Some(delay) = backoff.next_delay() {
            slept.push(delay.as_millis());
            tokio::time::sleep(delay).await;
        }
        // At 11.2 s, another 5 s would pass the deadline.
        assert_eq!(slept, [200, 400, 800, 1600, 3200, 5000]);
        assert!(!backoff.pause().await, "no pause past the deadline");
        assert!(Instant::now() < deadline);
        assert_eq!(backoff.next_delay(), None, "stays stopped");
    }

    #[tokio::test(start_paused = true)]
    async fn locks_are_waited_out_and_anything_else_returned_at_once() {
        let deadline = Instant::now() + Duration::from_secs(30);
        let calls = Cell::new(0);
        let out = wait_out_locks(&mut Backoff::for_locks(deadline), || {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move { if n < 4 { Err(locked()) } else { Ok(n) } }
        })
        .await
        .unwrap();
        assert_eq!(out, 4);
        calls.set(0);
        let err = wait_out_locks(&mut Backoff::for_locks(deadline), || {
            calls.set(calls.get() + 1);
            async { Err::<(), _>(transient_known()) }
        })
        .await
        .unwrap_err();
        assert_eq!((err.kind(), calls.get()), (ErrorKind::Transient, 1));
        // A lock held past the deadline: the lock error, before the deadline.
        let short = Instant::now() + Duration::from_secs(2);
        let err = wait_out_locks(&mut Backoff::for_locks(short), || async {
            Err::<(), _>(locked())
        })
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Locked);
        assert!(Instant::now() < short);
    }

    #[tokio::test(start_paused = true)]
    async fn a_borrowed_schedule_goes_on_where_the_last_wait_left_it() {
        let mut backoff = Backoff::for_locks(Instant::now() + Duration::from_secs(60));
        for _ in 0..2 {
            let calls = Cell::new(0);
            wait_out_locks(&mut backoff, || {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move { if n < 3 { Err(locked()) } else { Ok(()) } }
            })
            .await
            .unwrap();
        }
        // Two waits of two pauses each: 200, 400, then 800, 1600; the next is 3200.
        assert_eq!(backoff.next_delay(), Some(Duration::from_millis(3200)));
    }

    #[test]
    fn delays_grow_and_stay_under_ceiling() {
        let p = RetryPolicy::default();
        for next in 2..20 {
            let d = p.delay_before(next);
            let full = p
                .base_delay
                .saturating_mul(1 << (next - 2).min(16))
                .min(p.max_delay);
            assert!(d >= full / 2 && d <= full, "{next}: {d:?} vs {full:?}");
        }
    }
}
