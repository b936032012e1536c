//! `/nodes/{node}/tasks/{upid}`: status, log, and waiting for a task to end.

use std::future::Future;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde::Deserialize;

use crate::client::{Body, Client, seg};
use crate::error::{Error, ErrorKind, Result, TaskFailure};
pub use crate::pacing::{Pacer, TaskTimes, TaskWait};
use crate::retry::{Backoff, RetryPolicy, retry_idempotent, wait_out_locks};
use crate::task_board::{BoardSeat, TaskState};
use crate::upid::Upid;
use crate::wire::{Form, de};

/// How a task's status read is retried while the task is polled. A status PVE cannot give
/// right now says nothing about the task, so the wait goes on through about half a minute
/// of such trouble in a row (11 pauses of 200 ms doubling to 5 s: 18 to 36 s); the caller's
/// deadline may end it sooner.
const STATUS_READS: RetryPolicy = RetryPolicy {
    max_attempts: 12,
    base_delay: Duration::from_millis(200),
    max_delay: Duration::from_secs(5),
    retry_locked: false,
    locked_until: None,
};

/// How a node's task listing is retried before its waits go back to asking each task's
/// status (which has its own, longer, retries): the waits of the node wait for it.
const LISTING_READS: RetryPolicy = RetryPolicy {
    max_attempts: 3,
    base_delay: Duration::from_millis(200),
    max_delay: Duration::from_secs(1),
    retry_locked: false,
    locked_until: None,
};

/// Rows a node's task listing may hold: the tasks started since the oldest wait on the node,
/// on a busy node a few hundred; a task cut off is asked on its own.
const LISTING_LIMIT: u32 = 500;

/// How many of a node's latest ended tasks [`typical_run_times`] looks at: PVE lists 50 by
/// default; a create's waits are about a sixth of its tasks, so 100 rows hold a few of each
/// type after one earlier create of a handful of VMs.
const ARCHIVE_SAMPLES: u32 = 100;

/// Per task type in `rows`, the median run time of the tasks that ended OK, as PVE's archive
/// gives it: in whole seconds (`endtime - starttime`), so within half a second of the true
/// median. Types whose median is 0 are left out: such tasks end within the second they
/// start, which the ladder's first looks catch anyway.
pub fn typical_run_times(rows: &[crate::nodes::TaskEntry]) -> Vec<(String, Duration)> {
    let mut by_type: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
    for row in rows
        .iter()
        .filter(|row| row.status.as_deref() == Some("OK"))
    {
        if let (Some(start), Some(end)) = (row.starttime, row.endtime)
            && end >= start
        {
            by_type.entry(&row.task_type).or_default().push(end - start);
        }
    }
    by_type
        .into_iter()
        .filter_map(|(task_type, mut secs)| {
            secs.sort_unstable();
            let median = secs[secs.len() / 2];
            (median > 0).then(|| (task_type.to_owned(), Duration::from_secs(median as u64)))
        })
        .collect()
}

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

/// How long PVE's worker is asked to wait for a short task before it answers
/// (`background_delay`, `delay`: 1 to 30 s). PVE compares whole seconds (`time() <
/// $end_time`), so 1 could mean no wait at all; 2 waits at least a second. A task still
/// running then is polled as any other.
pub const ANSWER_WAIT_S: u32 = 2;

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

    /// Sends a task that may be sent again (`send`, retried under `policy`) and waits for it.
    /// A task PVE's worker ended because a lock was held (`VM is locked (backup)`: the check
    /// runs again inside the worker) is sent again, pausing on [`Backoff::for_locks`], until
    /// `deadline`; then its lock error is returned. Polling has no deadline of its own: the
    /// caller bounds the whole call with `tokio::time::timeout` where it needs to.
    pub async fn run_task<F, Fut>(
        &self,
        policy: &RetryPolicy,
        deadline: tokio::time::Instant,
        send: F,
    ) -> Result<TaskOutcome>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Upid>>,
    {
        let send = &send;
        wait_out_locks(&mut Backoff::for_locks(deadline), || async move {
            let upid = retry_idempotent(policy, send).await?;
            self.wait_for_task(&upid).await
        })
        .await
    }

    /// [`Client::run_task`] for a task PVE's own worker waits for before it answers (the
    /// `*_answered` calls): `None` when PVE answered that it ended OK, else the outcome of
    /// the wait that follows. A lock the task met within the wait is PVE's 500 with the
    /// task's lock text, waited out as [`Client::run_task`] does.
    pub async fn run_answered_task<F, Fut>(
        &self,
        policy: &RetryPolicy,
        deadline: tokio::time::Instant,
        send: F,
    ) -> Result<Option<TaskOutcome>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Option<Upid>>>,
    {
        let send = &send;
        wait_out_locks(&mut Backoff::for_locks(deadline), || async move {
            match retry_idempotent(policy, send).await? {
                Some(upid) => self.wait_for_task(&upid).await.map(Some),
                None => Ok(None),
            }
        })
        .await
    }

    /// [`Client::wait_for_task`] with explicit polling options.
    pub async fn wait_for_task_with(&self, upid: &Upid, opts: &TaskWait) -> Result<TaskOutcome> {
        let started = Instant::now();
        let (exitstatus, polls) = self.poll_until_stopped(upid, opts, started).await?;
        self.task_ended(upid, opts, exitstatus, started.elapsed(), polls)
            .await
    }

    /// Polls the task's status on the pacer's schedule until it is stopped, and returns its
    /// exit status and the polls made. An invisible UPID is polled on for `unknown_grace`
    /// (the task list on another node lags behind the dispatch); a status read that fails
    /// transiently is retried on the one back-off schedule ([`STATUS_READS`]), and any other
    /// error ends the wait at once.
    async fn poll_until_stopped(
        &self,
        upid: &Upid,
        opts: &TaskWait,
        started: Instant,
    ) -> Result<(String, u32)> {
        if opts.learn {
            self.task_times()
                .seed_once(upid.node(), || self.archived_run_times(upid.node()))
                .await;
        }
        let mut seat = self.task_boards().join(upid.node(), upid.starttime());
        let mut pacer = Pacer::new(self.task_times(), upid.task_type(), opts);
        loop {
            pacer.looks_are_shared(seat.shared());
            let listing = tokio::select! {
                listing = seat.next_listing() => Some(listing),
                () = pacer.pause() => None,
            };
            // Another wait's look at the node's tasks answers ours too when it holds our task;
            // else our own look, through the listing or the task's status.
            let (state, seen_at) = match listing {
                Some(listing) => match listing.state(upid.as_str()) {
                    Some(state) => (state.clone(), listing.answered_at),
                    None => continue,
                },
                None => (
                    self.own_look(&mut seat, upid, opts, started).await?,
                    tokio::time::Instant::now(),
                ),
            };
            match state {
                TaskState::Running => pacer.still_running_at(seen_at),
                TaskState::Ended(exitstatus) => {
                    pacer.finished_at(seen_at);
                    return Ok((exitstatus, pacer.looks()));
                }
            }
        }
    }

    /// This wait's own look at its task: through the node's listing while it is shared,
    /// else the task's status. An invisible UPID counts as running for `unknown_grace`.
    async fn own_look(
        &self,
        seat: &mut BoardSeat,
        upid: &Upid,
        opts: &TaskWait,
        started: Instant,
    ) -> Result<TaskState> {
        if let Some(state) = self.look_on_board(seat, upid).await {
            return Ok(state);
        }
        match retry_idempotent(&STATUS_READS, || self.task_status(upid)).await {
            Ok(status) if status.is_running() => Ok(TaskState::Running),
            Ok(status) => Ok(TaskState::Ended(
                status
                    .exitstatus
                    .unwrap_or_else(|| "unexpected status".to_owned()),
            )),
            Err(e) if e.kind() == ErrorKind::NotFound && started.elapsed() < opts.unknown_grace => {
                Ok(TaskState::Running)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::task_vanished(upid, e)),
            Err(e) => Err(e),
        }
    }

    /// A look at `upid` through its node's task listing, while other waits share it
    /// ([`crate::task_board`]); `None` when the wait is alone on its node, the listing
    /// failed (then the node's waits ask their own status from now on), or the listing does
    /// not hold the task (one cut by the listing's limit): the task's own status answers.
    async fn look_on_board(&self, seat: &mut BoardSeat, upid: &Upid) -> Option<TaskState> {
        if !seat.shared() {
            return None;
        }
        let listing = seat
            .look(|since| async move {
                let node = self.node(upid.node());
                match retry_idempotent(&LISTING_READS, || node.tasks_since(since, LISTING_LIMIT))
                    .await
                {
                    Ok(rows) => Some(rows.into_iter().map(|row| (row.upid, row.status)).collect()),
                    Err(e) => {
                        let node = upid.node();
                        tracing::debug!(node, error = %e, "no task listing: asking each task");
                        None
                    }
                }
            })
            .await?;
        listing.state(upid.as_str()).cloned()
    }

    /// How long each type of task took lately on `node`, by its task archive
    /// ([`typical_run_times`]); nothing when the archive cannot be read (a token may see
    /// only its own tasks, or none), which leaves each wait to its ladder.
    async fn archived_run_times(&self, node: &str) -> Vec<(String, Duration)> {
        match self.node(node).ended_tasks(ARCHIVE_SAMPLES).await {
            Ok(rows) => typical_run_times(&rows),
            Err(e) => {
                tracing::debug!(node, error = %e, "no task archive");
                Vec::new()
            }
        }
    }

    /// What a stopped task's exit status means: success (with the warning lines of its log
    /// when it ended with warnings) or a failure carrying its log tail; one info line either
    /// way.
    async fn task_ended(
        &self,
        upid: &Upid,
        opts: &TaskWait,
        exitstatus: String,
        waited: Duration,
        polls: u32,
    ) -> Result<TaskOutcome> {
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
        Err(Error::task(TaskFailure {
            upid: upid.clone(),
            exitstatus,
            log_tail,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archived(
        task_type: &str,
        status: Option<&str>,
        starttime: i64,
        endtime: Option<i64>,
    ) -> crate::nodes::TaskEntry {
        crate::nodes::TaskEntry {
            upid: format!("UPID:pve1:{starttime}"),
            task_type: task_type.into(),
            starttime: Some(starttime),
            status: status.map(str::to_owned),
            endtime,
        }
    }

    #[test]
    fn the_typical_run_time_of_a_type_is_the_median_of_its_tasks_that_ended_ok() {
        let rows = [
            archived("qmclone", Some("OK"), 100, Some(103)),
            archived("qmstart", Some("OK"), 101, Some(102)),
            archived("qmclone", Some("OK"), 110, Some(114)),
            archived("qmclone", Some("OK"), 120, Some(123)),
            // Failed tasks, running ones and clock jumps say nothing of a normal run.
            archived(
                "qmclone",
                Some("clone failed: no space left"),
                130,
                Some(190),
            ),
            archived("qmclone", None, 140, None),
            archived("qmclone", Some("OK"), 150, Some(149)),
            // Tasks that end within the second they start: nothing to seed.
            archived("qmconfig", Some("OK"), 160, Some(160)),
            archived("qmconfig", Some("OK"), 161, Some(162)),
            archived("qmconfig", Some("OK"), 163, Some(163)),
        ];
        assert_eq!(
            typical_run_times(&rows),
            [
                ("qmclone".to_owned(), Duration::from_secs(3)),
                ("qmstart".to_owned(), Duration::from_secs(1)),
            ]
        );
        assert_eq!(typical_run_times(&rows[4..6]), []);
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
        let s: TaskStatus = serde_json::from_str(concat!(
            r#"{"upid":"#,
            r#""UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:terraform@pve!prov:","#,
            r#""node":"pve1","pid":879578,"pstart":69077588,"starttime":1699371549,"#,
            r#""type":"qmclone","id":"9000","user":"terraform@pve","tokenid":"prov","#,
            r#""status":"stopped","exitstatus":"WARNINGS: 1"}"#
        ))
        .unwrap();
        assert!(!s.is_running());
        assert_eq!(s.exitstatus.as_deref(), Some("WARNINGS: 1"));
        assert_eq!(s.task_type.as_deref(), Some("qmclone"));
    }
}
