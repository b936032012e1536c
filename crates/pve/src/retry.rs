//! The one retry helper, in two shapes:
//!
//! - [`retry_idempotent`] for calls that may be repeated freely (every GET, PUT config with
//!   the same values, uploads that overwrite, deletes that tolerate absence);
//! - [`retry_with_check`] for calls that must not happen twice (clone, start, …): when the
//!   outcome of an attempt is unknown, the caller's state check runs before anything is
//!   re-sent, and its answer wins.
//!
//! Only [`ErrorKind::Transient`] is retried, plus [`ErrorKind::Locked`] when the policy says so.

use std::future::Future;
use std::time::Duration;

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
}

impl Default for RetryPolicy {
    /// 5 attempts, 200 ms doubling to 5 s, full jitter; `Locked` not retried.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
            retry_locked: false,
        }
    }
}

impl RetryPolicy {
    /// The same policy retrying `Locked` as well.
    pub fn with_locked(mut self) -> Self {
        self.retry_locked = true;
        self
    }

    /// Whether an error of this kind is worth another attempt under this policy.
    pub fn retries(&self, error: &Error) -> bool {
        match error.kind() {
            ErrorKind::Transient => true,
            ErrorKind::Locked => self.retry_locked,
            _ => false,
        }
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
        match ATTEMPT.scope(attempt, op()).await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < policy.max_attempts.max(1) && policy.retries(&e) => {
                attempt += 1;
                tokio::time::sleep(policy.delay_before(attempt)).await;
            }
            Err(e) => return Err(e),
        }
    }
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
        match ATTEMPT.scope(attempt, op()).await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < policy.max_attempts.max(1) && policy.retries(&e) => {
                attempt += 1;
                tokio::time::sleep(policy.delay_before(attempt)).await;
                if e.outcome_unknown() {
                    // The state check is itself a read: retry it like one.
                    if let Some(v) = retry_idempotent(policy, &mut check).await? {
                        return Ok(v);
                    }
                }
            }
            Err(e) => return Err(e),
        }
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
