//! `/nodes/{node}/tasks/{upid}`: status, log, and waiting for a task to end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde::Deserialize;
use tokio::sync::Notify;

use crate::client::{Body, Client, seg};
use crate::error::{Error, ErrorKind, Result, TaskFailure};
use crate::upid::Upid;
use crate::wire::{Form, de};

/// `GET /nodes/{node}/tasks/{upid}/status`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TaskStatus {
    /// `running` or `stopped`.
    pub status: String,
    /// Only when stopped: `OK`, `WARNINGS: n`, or the error text.
    #[serde(default)]
    pub exitstatus: Option<String>,
    /// Task type.
    #[serde(default, rename = "type")]
    pub task_type: Option<String>,
    /// Task object id.
    #[serde(default, deserialize_with = "de::opt_string")]
    pub id: Option<String>,
    /// Start time, Unix seconds.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub starttime: Option<u64>,
}

impl TaskStatus {
    /// Whether the task is still running.
    pub fn is_running(&self) -> bool {
        self.status == "running"
    }
}

/// One task log line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LogLine {
    /// 1-based line number.
    #[serde(deserialize_with = "de::int")]
    pub n: u64,
    /// The text.
    pub t: String,
}

/// How a successful task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskExit {
    /// `OK`.
    Ok,
    /// `WARNINGS: n`: done, with warnings worth showing (e.g. a disk that could not be freed).
    Warnings(u32),
}

/// A task that ended successfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOutcome {
    /// The task.
    pub upid: Upid,
    /// How it ended.
    pub exit: TaskExit,
    /// Warning lines from the log tail (`WARN: …`), when there were warnings.
    pub warnings: Vec<String>,
    /// Time from the start of waiting until the end was noticed.
    pub waited: Duration,
    /// Status requests made while waiting.
    pub polls: u32,
}

/// How [`Client::wait_for_task`] polls. The caller owns the deadline (wrap the call in
/// `tokio::time::timeout`).
///
/// The schedule learns: every wait records, per task type, when the task was seen running
/// last and when it was seen stopped, and later waits of that type poll once near the
/// learned run time instead of climbing a geometric ladder (see [`TaskTimes`]). A waiter
/// that knows nothing yet climbs the ladder, and wakes early when a task of its type started
/// beside it ends. `BENCH.md` has the figures.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskWait {
    /// Delay before the first status request of a task type nothing is known of yet: short
    /// tasks (a config write) end within tens of milliseconds.
    pub first_poll: Duration,
    /// While nothing is known, each later delay is the previous one times this factor…
    pub backoff: f64,
    /// …up to this ceiling.
    pub max_interval: Duration,
    /// How long a UPID may stay invisible ("no such task") after dispatch before that counts
    /// as an error: the task list on another node can lag behind the dispatch.
    pub unknown_grace: Duration,
    /// Log lines fetched into a failure (and scanned for warnings).
    pub log_tail_lines: u32,
    /// Poll near the run time learned from earlier tasks of the same type.
    pub learn: bool,
}

impl Default for TaskWait {
    fn default() -> Self {
        TaskWait {
            first_poll: Duration::from_millis(25),
            backoff: 4.0,
            max_interval: Duration::from_secs(2),
            unknown_grace: Duration::from_secs(10),
            log_tail_lines: 20,
            learn: true,
        }
    }
}

/// What one client has learned of how long things take, per kind (a task type such as
/// `qmclone`, or another wait such as a guest's first address): an estimate of the run time
/// from the brackets earlier waits saw, and a signal to wake waiters of that kind when one
/// ends (tasks sent together by parallel creates tend to end together).
#[derive(Debug, Default)]
pub struct TaskTimes {
    kinds: Mutex<HashMap<String, Learned>>,
}

#[derive(Debug, Default)]
struct Learned {
    estimate: Option<Duration>,
    ended: Arc<Notify>,
    /// Waits of this kind started so far: spreads their ladders (see [`Pacer::new`]).
    started: u64,
}

impl TaskTimes {
    /// The learned run time of `kind`, if any wait of that kind ended yet.
    pub fn estimate(&self, kind: &str) -> Option<Duration> {
        self.lock().get(kind).and_then(|l| l.estimate)
    }

    /// The number of this wait among the waits of its kind.
    fn next_waiter(&self, kind: &str) -> u64 {
        let mut kinds = self.lock();
        let learned = kinds.entry(kind.to_owned()).or_default();
        learned.started += 1;
        learned.started - 1
    }

    fn signal(&self, kind: &str) -> Arc<Notify> {
        self.lock()
            .entry(kind.to_owned())
            .or_default()
            .ended
            .clone()
    }

    /// Records a wait that saw `kind` still running at `running_at` (if it looked before the
    /// end) and ended at `ended_at`, and wakes the other waiters of that kind.
    pub fn record(&self, kind: &str, running_at: Option<Duration>, ended_at: Duration) {
        let signal = {
            let mut kinds = self.lock();
            let learned = kinds.entry(kind.to_owned()).or_default();
            learned.estimate = Some(match (learned.estimate, running_at) {
                (None, None) => ended_at,
                // Ended by the first look near the estimate: the estimate may be too long
                // now, so probe a little shorter next time (once per round: parallel waiters
                // that all ended at their first look shorten it once, not once each).
                (Some(old), None) => old.min(ended_at.mul_f64(0.98)),
                // Seen running, then stopped a short step later: the next one of its kind is
                // looked at late in that step, to end at its first look most of the time.
                (_, Some(lo)) if ended_at - lo <= ended_at / 8 => ended_at - (ended_at - lo) / 4,
                // A wide bracket (a ladder's rung, a look made when another wait ended) that
                // agrees with the estimate leaves it; waits woken together by the first end
                // of a wave thereby raise it only while one of them saw its task still running
                // later than the estimate.
                (Some(old), Some(lo)) if old > lo && old <= ended_at => old,
                (_, Some(lo)) => (lo + ended_at) / 2,
            });
            learned.ended.clone()
        };
        signal.notify_waiters();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Learned>> {
        self.kinds.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// When to look next while waiting for one thing of a kind, following [`TaskWait`] and
/// what [`TaskTimes`] learned.
#[derive(Debug)]
pub struct Pacer<'a> {
    times: &'a TaskTimes,
    kind: String,
    opts: TaskWait,
    // tokio's clock, so tests can run a wait on paused time.
    started: tokio::time::Instant,
    step: Duration,
    running_at: Option<Duration>,
    looks: u32,
    past_estimate: bool,
}

impl<'a> Pacer<'a> {
    /// Starts pacing a wait for `kind`, from now.
    pub fn new(times: &'a TaskTimes, kind: &str, opts: &TaskWait) -> Pacer<'a> {
        // Waiters started together spread their looks evenly over one rung of the ladder
        // (in log scale, by the golden ratio's sequence), so together they notice the first
        // end soon after it and wake the others (see `TaskTimes`). The first waits at
        // `first_poll`.
        let rung = opts.backoff.clamp(1.0, 4.0);
        let phase = (times.next_waiter(kind) as f64 * 0.618_033_988_7).fract();
        let spread = rung.powf(phase);
        Pacer {
            times,
            kind: kind.to_owned(),
            opts: opts.clone(),
            started: tokio::time::Instant::now(),
            step: opts.first_poll.mul_f64(spread),
            running_at: None,
            looks: 0,
            past_estimate: false,
        }
    }

    /// How long this wait has run.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Looks made so far.
    pub fn looks(&self) -> u32 {
        self.looks
    }

    /// Sleeps until the next look: near the learned run time when there is one, else the next
    /// step of the ladder; earlier when another wait of this kind ends meanwhile.
    pub async fn pause(&mut self) {
        let signal = self.times.signal(&self.kind);
        loop {
            let notified = signal.notified();
            let wake = self.next_look();
            if wake <= tokio::time::Instant::now() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(wake) => break,
                () = notified => {
                    // Another wait of this kind ended. Ours, started about as long ago, may
                    // have ended too: look now if the new estimate says so.
                    if let Some(estimate) = self.learned()
                        && self.elapsed() >= estimate.mul_f64(0.8)
                    {
                        break;
                    }
                }
            }
        }
        self.looks += 1;
    }

    fn learned(&self) -> Option<Duration> {
        if self.opts.learn {
            self.times.estimate(&self.kind)
        } else {
            None
        }
    }

    fn next_look(&mut self) -> tokio::time::Instant {
        let last = self.running_at.map_or(self.started, |at| self.started + at);
        if let Some(estimate) = self.learned() {
            let expected = self.started + estimate;
            // Not there yet: one look at the expected end.
            if expected > last + self.opts.first_poll / 2 {
                return expected;
            }
            // Past it: short steps from a tenth of the estimate, growing.
            if !self.past_estimate {
                self.past_estimate = true;
                self.step = (estimate / 10).max(self.opts.first_poll / 2);
            }
        }
        last + self.step
    }

    /// The thing was seen not finished yet at this look.
    pub fn still_running(&mut self) {
        self.running_at = Some(self.elapsed());
        // Past a learned estimate the end is near: grow gently.
        let factor = if self.learned().is_some() {
            1.5
        } else {
            self.opts.backoff.max(1.0)
        };
        self.step = self
            .step
            .mul_f64(factor)
            .min(self.opts.max_interval)
            .max(self.opts.first_poll);
    }

    /// The thing was seen finished at this look: teaches the client's [`TaskTimes`].
    pub fn finished(&self) {
        self.times
            .record(&self.kind, self.running_at, self.elapsed());
    }
}

/// Parses `WARNINGS: n`.
pub fn parse_warnings(exitstatus: &str) -> Option<u32> {
    exitstatus.strip_prefix("WARNINGS: ")?.parse().ok()
}

fn task_path(upid: &Upid, leaf: &str) -> String {
    format!(
        "/nodes/{}/tasks/{}/{leaf}",
        seg(upid.node()),
        seg(upid.as_str())
    )
}

impl Client {
    /// Status of a task, asked of the node that runs it.
    pub async fn task_status(&self, upid: &Upid) -> Result<TaskStatus> {
        self.get(&task_path(upid, "status"), &Form::new()).await
    }

    /// Log lines `start..start+limit` (0-based start) and the total line count.
    pub async fn task_log(
        &self,
        upid: &Upid,
        start: u64,
        limit: u64,
    ) -> Result<(Vec<LogLine>, u64)> {
        let query = Form::new().int("start", start).int("limit", limit);
        let env = self
            .call_envelope::<Vec<LogLine>>(Method::GET, &task_path(upid, "log"), &query, Body::None)
            .await?;
        let total = env.total.unwrap_or(env.data.len() as u64);
        Ok((env.data, total))
    }

    /// The last `lines` log lines (two requests: PVE has no "from the end" parameter).
    pub async fn task_log_tail(&self, upid: &Upid, lines: u32) -> Result<Vec<String>> {
        let (_, total) = self.task_log(upid, 0, 1).await?;
        let start = total.saturating_sub(u64::from(lines));
        let (tail, _) = self.task_log(upid, start, u64::from(lines)).await?;
        Ok(tail.into_iter().map(|l| self.scrub(&l.t)).collect())
    }

    /// Waits until the task stops, polling its node with the client's [`TaskWait`].
    /// Success with warnings is `Ok`; failure is an [`Error`] whose kind is classified from
    /// the exit status and which carries the log tail ([`Error::task_failure`]).
    pub async fn wait_for_task(&self, upid: &Upid) -> Result<TaskOutcome> {
        let opts = self.config().task_wait.clone();
        self.wait_for_task_with(upid, &opts).await
    }

    /// [`Client::wait_for_task`] with explicit polling options.
    pub async fn wait_for_task_with(&self, upid: &Upid, opts: &TaskWait) -> Result<TaskOutcome> {
        let started = Instant::now();
        let mut pacer = Pacer::new(self.task_times(), upid.task_type(), opts);
        let mut transient_in_a_row = 0u32;
        loop {
            pacer.pause().await;
            let polls = pacer.looks();
            let status = match self.task_status(upid).await {
                Ok(s) => {
                    transient_in_a_row = 0;
                    s
                }
                Err(e)
                    if e.kind() == ErrorKind::NotFound
                        && started.elapsed() < opts.unknown_grace =>
                {
                    pacer.still_running();
                    continue;
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return Err(Error::task_vanished(upid, e));
                }
                // A blip while polling says nothing about the task; the caller's deadline
                // bounds how long we keep trying. Persistent trouble still surfaces.
                Err(e)
                    if (e.kind() == ErrorKind::Transient || e.is_unexplained_server_error())
                        && transient_in_a_row < 20 =>
                {
                    tracing::debug!(reason = %e.message(), "task status unavailable; polling on");
                    transient_in_a_row += 1;
                    pacer.still_running();
                    continue;
                }
                Err(e) => return Err(e),
            };
            if status.is_running() {
                pacer.still_running();
                continue;
            }
            pacer.finished();
            let exitstatus = status
                .exitstatus
                .unwrap_or_else(|| "unexpected status".to_owned());
            let waited = started.elapsed();
            if exitstatus == "OK" || parse_warnings(&exitstatus).is_some() {
                let (exit, warnings) = match parse_warnings(&exitstatus) {
                    Some(n) => {
                        let tail = self
                            .task_log_tail(upid, opts.log_tail_lines)
                            .await
                            .unwrap_or_default();
                        let warns = tail.into_iter().filter(|l| l.starts_with("WARN")).collect();
                        (TaskExit::Warnings(n), warns)
                    }
                    None => (TaskExit::Ok, Vec::new()),
                };
                tracing::info!(
                    task_type = upid.task_type(),
                    node = upid.node(),
                    id = upid.id(),
                    outcome = %exitstatus,
                    duration_ms = waited.as_millis() as u64,
                    polls,
                    "PVE task finished"
                );
                return Ok(TaskOutcome {
                    upid: upid.clone(),
                    exit,
                    warnings,
                    waited,
                    polls,
                });
            }
            let exitstatus = self.scrub(&exitstatus);
            tracing::info!(
                task_type = upid.task_type(),
                node = upid.node(),
                id = upid.id(),
                outcome = "failed",
                duration_ms = waited.as_millis() as u64,
                "PVE task finished"
            );
            let log_tail = self
                .task_log_tail(upid, opts.log_tail_lines)
                .await
                .unwrap_or_default();
            return Err(Error::task(TaskFailure {
                upid: upid.clone(),
                exitstatus,
                log_tail,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_all(times: &TaskTimes, rounds: &[(Option<u64>, u64)]) -> Duration {
        for (lo, hi) in rounds {
            times.record(
                "qmclone",
                lo.map(Duration::from_millis),
                Duration::from_millis(*hi),
            );
        }
        times.estimate("qmclone").unwrap()
    }

    #[test]
    fn the_estimate_follows_what_was_seen_and_shortens_once_per_round() {
        let times = TaskTimes::default();
        assert_eq!(times.estimate("qmclone"), None);
        // Seen running at 1.5 s, stopped at 2.5 s: it ended around 2 s.
        assert_eq!(
            record_all(&times, &[(Some(1500), 2500)]),
            Duration::from_millis(2000)
        );
        // Ten parallel waits all stopped at their first look, at 2 s: shorten once, by 2 %.
        let rounds = vec![(None, 2000); 10];
        assert_eq!(record_all(&times, &rounds), Duration::from_millis(1960));
        // Seen running at 1.96 s and stopped at 2.08 s: look at 2.05 s next time.
        assert_eq!(
            record_all(&times, &[(Some(1960), 2080)]),
            Duration::from_millis(2050)
        );
        // Running at 1 s, stopped at 3 s (woken by another wait): agrees, nothing learned.
        assert_eq!(
            record_all(&times, &[(Some(1000), 3000)]),
            Duration::from_millis(2050)
        );
        // Running at 2.5 s, stopped at 3 s: later than thought, somewhere in between.
        assert_eq!(
            record_all(&times, &[(Some(2500), 3000)]),
            Duration::from_millis(2750)
        );
        // Nothing known, a ladder's rung from 0.8 s to 2.4 s: its middle.
        let fresh = TaskTimes::default();
        fresh.record(
            "qmclone",
            Some(Duration::from_millis(800)),
            Duration::from_millis(2400),
        );
        assert_eq!(fresh.estimate("qmclone"), Some(Duration::from_millis(1600)));
        assert_eq!(times.estimate("qmconfig"), None, "kinds are apart");
    }

    #[tokio::test(start_paused = true)]
    async fn a_learned_wait_looks_once_at_the_expected_end() {
        let times = TaskTimes::default();
        let opts = TaskWait::default();
        // Nothing known: the first look comes within tens of milliseconds.
        let mut pacer = Pacer::new(&times, "qmstart", &opts);
        pacer.pause().await;
        let first = pacer.elapsed();
        assert!(first <= Duration::from_millis(60), "{first:?}");
        pacer.still_running();
        pacer.pause().await;
        assert!(pacer.elapsed() >= first * 3, "the ladder climbs");
        pacer.finished();
        assert!(times.estimate("qmstart").is_some());
        // Known: one look, at the learned end.
        times.record(
            "qmclone",
            Some(Duration::from_millis(1900)),
            Duration::from_millis(2100),
        );
        let learned = times.estimate("qmclone").unwrap();
        let mut pacer = Pacer::new(&times, "qmclone", &opts);
        pacer.pause().await;
        assert_eq!(pacer.elapsed(), learned);
        assert_eq!(pacer.looks(), 1);
        // Not over yet: the next look follows shortly, not a ladder's step later.
        pacer.still_running();
        pacer.pause().await;
        assert!(pacer.elapsed() - learned <= learned / 8);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_wakes_when_a_task_started_beside_it_ends() {
        let times = Arc::new(TaskTimes::default());
        let opts = TaskWait::default();
        let mut pacer = Pacer::new(&times, "qmclone", &opts);
        // Climb the ladder well past 1 s without any estimate.
        while pacer.elapsed() < Duration::from_millis(1000) {
            pacer.pause().await;
            pacer.still_running();
        }
        let seen = pacer.elapsed();
        let beside = times.clone();
        let peer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            beside.record("qmclone", Some(Duration::from_millis(900)), seen);
        });
        pacer.pause().await;
        peer.await.unwrap();
        assert!(
            pacer.elapsed() <= seen + Duration::from_millis(60),
            "woke at {:?}, peer ended at {:?}",
            pacer.elapsed(),
            seen + Duration::from_millis(50)
        );
    }

    #[test]
    fn warnings_parse() {
        assert_eq!(parse_warnings("WARNINGS: 2"), Some(2));
        assert_eq!(parse_warnings("OK"), None);
        assert_eq!(parse_warnings("WARNINGS: x"), None);
        assert_eq!(parse_warnings("VM is locked (clone)"), None);
    }

    #[test]
    fn status_decodes_pve_shape() {
        let s: TaskStatus = serde_json::from_str(
            r#"{"upid":"UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:terraform@pve!prov:","node":"pve1","pid":879578,"pstart":69077588,"starttime":1699371549,"type":"qmclone","id":"9000","user":"terraform@pve","tokenid":"prov","status":"stopped","exitstatus":"WARNINGS: 1"}"#,
        )
        .unwrap();
        assert!(!s.is_running());
        assert_eq!(s.exitstatus.as_deref(), Some("WARNINGS: 1"));
        assert_eq!(s.task_type.as_deref(), Some("qmclone"));
    }
}
