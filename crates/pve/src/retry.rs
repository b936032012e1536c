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
//! [`ErrorKind::Locked`] when the policy says so, until the policy's lock deadline. Nothing
//! else is: an error PVE explained (auth, not found, invalid, …) returns at once, with no
//! pause. Every retry is logged with its reason.
//!
//! Above single calls, a lock that ends a *task* (`VM is locked (backup)`, checked again
//! inside PVE's worker) is waited out by [`wait_out_locks`]. [`Client::run_task`] is that
//! loop for a task that may be sent again.
//!
//! Every pause of all of them (and of the task wait's status reads) follows one schedule,
//! [`Backoff`]: doubling steps, each pause drawn from the upper half of its step, so callers
//! that failed together (parallel creates meeting one lock or one outage) do not all come
//! back at the same instant, and no pause that would reach the caller's deadline.
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
    /// No pause of this policy, for a lock or anything else, reaches this instant.
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

    /// This policy's schedule: `base_delay` doubling to `max_delay`, jittered, and, when
    /// the policy has a lock deadline, no pause past it.
    pub fn backoff(&self) -> Backoff {
        match self.locked_until {
            Some(until) => Backoff::new(self.base_delay, self.max_delay, until),
            None => Backoff::unbounded(self.base_delay, self.max_delay),
        }
    }

    /// After attempt `attempt` failed with `error`: logs and sleeps the next pause of
    /// `backoff` and returns the next attempt's number, or returns `None` at once when the
    /// policy gives up (an error it does not retry, attempts or deadline used up).
    async fn pause_after(&self, backoff: &mut Backoff, error: &Error, attempt: u32) -> Option<u32> {
        if !self.retries(error) {
            return None;
        }
        let next = attempt + 1;
        // A lock is waited out until the deadline, however many attempts that takes.
        let until_deadline = error.kind() == ErrorKind::Locked && self.locked_until.is_some();
        if !until_deadline && next > self.max_attempts.max(1) {
            return None;
        }
        let delay = backoff.next_delay()?;
        log_retry(error, next, delay);
        tokio::time::sleep(delay).await;
        Some(next)
    }

    /// A pause before attempt `next` (2, 3, …) on this policy's schedule: drawn from the
    /// upper half of `base_delay` doubled `next - 2` times (at most `max_delay`).
    pub fn delay_before(&self, next: u32) -> Duration {
        jittered(step_at(
            self.base_delay,
            self.max_delay,
            next.saturating_sub(2),
        ))
    }
}

/// Runs `op` until it succeeds, fails with an error the policy does not retry, or runs out of
/// attempts. Use only for calls that are safe to repeat.
pub async fn retry_idempotent<T, F, Fut>(policy: &RetryPolicy, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut backoff = policy.backoff();
    let mut attempt = 1;
    loop {
        let error = match ATTEMPT.scope(attempt, op()).await {
            Ok(v) => return Ok(v),
            Err(error) => error,
        };
        match policy.pause_after(&mut backoff, &error, attempt).await {
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
    let mut backoff = policy.backoff();
    let mut attempt = 1;
    loop {
        let error = match ATTEMPT.scope(attempt, op()).await {
            Ok(v) => return Ok(v),
            Err(error) => error,
        };
        let unknown = error.outcome_unknown() || error.is_unexplained_server_error();
        match policy.pause_after(&mut backoff, &error, attempt).await {
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

/// The one pause schedule of this crate, bounded by the caller's deadline: steps of
/// `first`, doubling up to `ceiling`; each pause is drawn at random from the upper half of
/// its step ("equal jitter": callers that started together spread out, and every one still
/// backs off); and no pause is made once one of a full step would reach the deadline. Lock
/// waits use [`Backoff::for_locks`]; polls for a state PVE reaches by itself (a clone's lock
/// gone, a destroyed VM gone) use [`Backoff::new`] with their own steps; a [`RetryPolicy`]
/// makes its own ([`RetryPolicy::backoff`]).
#[derive(Debug, Clone)]
pub struct Backoff {
    /// The step of the next pause, before jitter.
    step: Duration,
    ceiling: Duration,
    deadline: Instant,
}

impl Backoff {
    /// Pauses of about `first`, then twice the last step up to `ceiling`, until `deadline`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// let first = Duration::from_millis(100);
    /// let mut polls = pve::Backoff::new(first, Duration::from_secs(2), deadline);
    /// let mut pauses = 0;
    /// while polls.pause().await {
    ///     pauses += 1;
    /// }
    /// // No pause reaches past the deadline, and the schedule ends.
    /// assert!(pauses >= 1 && Instant::now() <= deadline);
    /// # }
    /// ```
    pub fn new(first: Duration, ceiling: Duration, deadline: Instant) -> Backoff {
        Backoff {
            step: first,
            ceiling,
            deadline,
        }
    }

    /// The same schedule with no deadline: whoever uses it bounds it otherwise (a
    /// [`RetryPolicy`] by its attempts).
    pub fn unbounded(first: Duration, ceiling: Duration) -> Backoff {
        // Far enough never to be reached, near enough not to overflow an `Instant`.
        let never = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        Backoff::new(first, ceiling, never)
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

    /// The next pause, or `None` when a full step would reach the deadline (the schedule
    /// does not advance then, and stays stopped).
    pub fn next_delay(&mut self) -> Option<Duration> {
        // Decided on the full step, not the drawn pause, so the answer does not depend on
        // the draw: once `None`, always `None`.
        if Instant::now() + self.step >= self.deadline {
            return None;
        }
        let delay = jittered(self.step);
        self.step = step_at(self.step, self.ceiling, 1);
        Some(delay)
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

/// `first` doubled `doublings` times, at most `ceiling`.
fn step_at(first: Duration, ceiling: Duration, doublings: u32) -> Duration {
    first.saturating_mul(1u32 << doublings.min(16)).min(ceiling)
}

/// A pause drawn at random from the upper half of `step`.
fn jittered(step: Duration) -> Duration {
    let half = step / 2;
    half + half.mul_f64(fastrand::f64())
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
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut backoff = Backoff::for_locks(deadline);
        let mut steps = Vec::new();
        loop {
            let step = backoff.step;
            let Some(delay) = backoff.next_delay() else {
                break;
            };
            assert!(delay >= step / 2 && delay <= step, "{delay:?} of {step:?}");
            steps.push(step.as_millis());
            tokio::time::sleep(delay).await;
        }
        // 200 ms doubling to 5 s; the first six steps take 5.6 to 11.2 s, and 5 s steps go
        // on while a full one still ends before the deadline: one to four more.
        assert_eq!(steps[..6], [200, 400, 800, 1600, 3200, 5000]);
        assert!(steps[6..].iter().all(|s| *s == 5000), "{steps:?}");
        assert!((7..=10).contains(&steps.len()), "{steps:?}");
        assert!(Instant::now() < deadline);
        assert!(
            Instant::now() + Duration::from_secs(5) >= deadline,
            "stopped no earlier"
        );
        assert!(!backoff.pause().await, "no pause past the deadline");
        assert_eq!(backoff.next_delay(), None, "stays stopped");
    }

    #[test]
    fn schedules_started_together_spread_out() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut first: Vec<Duration> = (0..50)
            .map(|_| Backoff::for_locks(deadline).next_delay().unwrap())
            .collect();
        assert!(
            first
                .iter()
                .all(|d| d.as_millis() >= 100 && d.as_millis() <= 200)
        );
        first.sort();
        first.dedup();
        // Fifty draws from 100 ms of nanoseconds: equal ones would be a broken source.
        assert!(first.len() >= 45, "{} distinct of 50", first.len());
        let spread = first[first.len() - 1] - first[0];
        assert!(spread >= Duration::from_millis(50), "{spread:?}");
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
        // Two waits of two pauses each: steps of 200, 400, then 800, 1600; the next is 3200.
        assert_eq!(backoff.step, Duration::from_millis(3200));
        let next = backoff.next_delay().unwrap();
        assert!(next >= Duration::from_millis(1600) && next <= Duration::from_millis(3200));
    }

    fn forbidden() -> Error {
        Error::http(
            "GET",
            "/nodes/pve1/qemu/100/config",
            403,
            true,
            "Permission check failed (/vms/100, VM.Audit)".into(),
            BTreeMap::new(),
        )
    }
    fn not_found() -> Error {
        Error::http("GET", "/x", 404, true, "no such VM".into(), BTreeMap::new())
    }
    fn invalid() -> Error {
        let errors = BTreeMap::from([("cores".to_owned(), "value must be >= 1".to_owned())]);
        Error::http(
            "PUT",
            "/x",
            400,
            true,
            "Parameter verification failed.".into(),
            errors,
        )
    }

    /// Auth, not found and invalid are PVE's clear answers: every helper returns them at
    /// once, with one call and no pause, whatever the policy.
    #[tokio::test(start_paused = true)]
    async fn auth_not_found_and_invalid_are_never_retried_or_waited_on() {
        let deadline = Instant::now() + Duration::from_secs(600);
        let patient = RetryPolicy::default().with_locked_until(deadline);
        let cases = [
            (forbidden(), ErrorKind::Auth),
            (not_found(), ErrorKind::NotFound),
            (invalid(), ErrorKind::Invalid),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind);
            let began = Instant::now();
            for policy in [RetryPolicy::default(), patient.clone()] {
                let calls = Cell::new(0);
                let err = retry_idempotent(&policy, || {
                    calls.set(calls.get() + 1);
                    let error = error.clone();
                    async move { Err::<(), _>(error) }
                })
                .await
                .unwrap_err();
                assert_eq!((err.kind(), calls.get()), (kind, 1));

                let (sends, checks) = (Cell::new(0), Cell::new(0));
                let err = retry_with_check(
                    &policy,
                    || {
                        sends.set(sends.get() + 1);
                        let error = error.clone();
                        async move { Err::<(), _>(error) }
                    },
                    || {
                        checks.set(checks.get() + 1);
                        async { Ok(Some(())) }
                    },
                )
                .await
                .unwrap_err();
                assert_eq!((err.kind(), sends.get(), checks.get()), (kind, 1, 0));
            }
            let calls = Cell::new(0);
            let err = wait_out_locks(&mut Backoff::for_locks(deadline), || {
                calls.set(calls.get() + 1);
                let error = error.clone();
                async move { Err::<(), _>(error) }
            })
            .await
            .unwrap_err();
            assert_eq!((err.kind(), calls.get()), (kind, 1));
            assert_eq!(Instant::now(), began, "{kind}: no pause at all");
        }
    }

    /// A lock met on the way, then a 403 (the token lost its privilege meanwhile): the wait
    /// ends at the 403, not at the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_at_the_first_error_that_is_not_transient() {
        let deadline = Instant::now() + Duration::from_secs(600);
        let policy = RetryPolicy::default().with_locked_until(deadline);
        let calls = Cell::new(0);
        let err = retry_idempotent(&policy, || {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move {
                match n {
                    1 => Err::<(), _>(locked()),
                    2 => Err(transient_known()),
                    _ => Err(forbidden()),
                }
            }
        })
        .await
        .unwrap_err();
        assert_eq!((err.kind(), calls.get()), (ErrorKind::Auth, 3));
        assert!(Instant::now() < deadline - Duration::from_secs(590));
    }

    /// Under a lock deadline, no pause of any kind reaches it: a transient error near the
    /// deadline is returned instead of slept on.
    #[tokio::test(start_paused = true)]
    async fn no_retry_pause_reaches_the_policys_deadline() {
        let deadline = Instant::now() + Duration::from_millis(150);
        let policy = RetryPolicy::default().with_locked_until(deadline);
        let calls = Cell::new(0);
        let err = retry_idempotent(&policy, || {
            calls.set(calls.get() + 1);
            async { Err::<(), _>(transient_known()) }
        })
        .await
        .unwrap_err();
        // The first step (200 ms) would already pass it.
        assert_eq!((err.kind(), calls.get()), (ErrorKind::Transient, 1));
        assert!(Instant::now() < deadline);
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
