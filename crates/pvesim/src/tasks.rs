//! Worker tasks: a UPID now, the work after the task type's configured run time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::shared::Shared;
use crate::world::{Task, World, unix_now};

/// The body of a task, run once its time has passed. It receives the injected failure (if
/// this task was picked by a `task_failures` fault) so it can clean up as PVE would, and
/// returns the log lines and `Err(message)` for `TASK ERROR: message`.
pub type TaskBody =
    Box<dyn FnOnce(&mut World, &mut TaskLog, Option<String>) -> Result<(), String> + Send>;

/// Work a task does as soon as it holds its locks (after a delay), before its run time: PVE
/// workers act at once, e.g. the clone worker writes the new VM's temporary config. An
/// error ends the task at that point; the body then never runs. The last argument is the
/// exit status a `task_failures` fault will give the task (at its end, in the body).
pub type TaskPrologue =
    Box<dyn FnOnce(&mut World, &mut TaskLog, Option<&str>) -> Result<(), String> + Send>;

/// Work that takes its own time after the prologue (the cost profile's disk work of a
/// clone), given the task's UPID; `Err(message)` ends the task there.
pub type TaskStage = Box<
    dyn FnOnce(Arc<Shared>, String) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>
        + Send,
>;

#[derive(Debug, Default)]
pub struct TaskLog {
    pub lines: Vec<String>,
    pub warnings: u32,
}

impl TaskLog {
    pub fn info(&mut self, line: impl Into<String>) {
        self.lines.push(line.into());
    }

    /// `log_warn`: counted in `WARNINGS: n`.
    pub fn warn(&mut self, line: impl AsRef<str>) {
        self.lines.push(format!("WARN: {}", line.as_ref()));
        self.warnings += 1;
    }
}

/// Formats a UPID exactly as PVE's `PVE::UPID::encode` does.
pub fn encode_upid(task: &Task) -> String {
    format!(
        "UPID:{}:{:08X}:{:08X}:{:08X}:{}:{}:{}:",
        task.node,
        task.pid,
        task.pstart,
        task.starttime,
        task.task_type,
        task.id,
        task.token_user()
    )
}

/// The fields of a UPID, or `None` when PVE's decode regex would not match.
pub fn decode_upid(upid: &str) -> Option<(String, String, String)> {
    let rest = upid.strip_prefix("UPID:")?;
    let parts: Vec<&str> = rest.split(':').collect();
    // node, pid, pstart, starttime, type, id, user, "" (trailing colon)
    if parts.len() != 8 || !parts[7].is_empty() {
        return None;
    }
    let node = parts[0];
    let node_ok = !node.is_empty()
        && node.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !node.starts_with('-')
        && !node.ends_with('-');
    let hex = |s: &str, min: usize, max: usize| {
        (min..=max).contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit())
    };
    let field_ok = |s: &str, allow_empty: bool| {
        (allow_empty || !s.is_empty()) && !s.chars().any(|c| c == '/' || c.is_whitespace())
    };
    if node_ok
        && hex(parts[1], 8, 8)
        && hex(parts[2], 8, 9)
        && hex(parts[3], 8, 8)
        && field_ok(parts[4], false)
        && field_ok(parts[5], true)
        && field_ok(parts[6], false)
    {
        Some((node.to_string(), parts[4].to_string(), parts[5].to_string()))
    } else {
        None
    }
}

/// Node-local config file locks (`/var/lock/qemu-server/lock-<vmid>.conf`) a task holds
/// while it runs, and how long it waits for them.
#[derive(Debug, Clone)]
pub struct TaskLocks {
    /// (vmid, exclusive)
    pub vms: Vec<(u32, bool)>,
    pub timeout: Duration,
}

impl TaskLocks {
    pub fn none() -> TaskLocks {
        TaskLocks {
            vms: Vec::new(),
            timeout: Duration::ZERO,
        }
    }

    /// `lock_config`: exclusive, 10 s.
    pub fn exclusive(vmid: u32) -> TaskLocks {
        TaskLocks {
            vms: vec![(vmid, true)],
            timeout: CONFIG_LOCK_TIMEOUT,
        }
    }
}

/// `lock_config`'s default wait.
pub const CONFIG_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

pub fn lock_timeout_message(vmid: u32) -> String {
    format!("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout")
}

/// Registers a running task without config locks and schedules its body.
pub fn start_task(
    shared: &Arc<Shared>,
    world: &mut World,
    node: &str,
    task_type: &str,
    id: &str,
    token_user: &str,
    body: TaskBody,
) -> String {
    start_locked_task(
        shared,
        world,
        node,
        task_type,
        id,
        token_user,
        TaskLocks::none(),
        body,
    )
}

/// Registers a running task and schedules it: wait for its config locks (failing with
/// PVE's lock timeout), run for the task type's time, apply the body, release. Returns
/// the UPID.
#[allow(clippy::too_many_arguments)]
pub fn start_locked_task(
    shared: &Arc<Shared>,
    world: &mut World,
    node: &str,
    task_type: &str,
    id: &str,
    token_user: &str,
    locks: TaskLocks,
    body: TaskBody,
) -> String {
    schedule(
        shared,
        world,
        node,
        task_type,
        id,
        token_user,
        locks,
        Steps::default(),
        body,
    )
}

/// As [`start_locked_task`], with `prologue` run `delay` after the locks are held; the
/// task type's run time counts from then.
#[allow(clippy::too_many_arguments)]
pub fn start_task_with_prologue(
    shared: &Arc<Shared>,
    world: &mut World,
    node: &str,
    task_type: &str,
    id: &str,
    token_user: &str,
    locks: TaskLocks,
    prologue: (Duration, TaskPrologue),
    body: TaskBody,
) -> String {
    start_staged_task(
        shared, world, node, task_type, id, token_user, locks, prologue, None, body,
    )
}

/// As [`start_task_with_prologue`], with `stage` (if any) run after the prologue.
#[allow(clippy::too_many_arguments)]
pub fn start_staged_task(
    shared: &Arc<Shared>,
    world: &mut World,
    node: &str,
    task_type: &str,
    id: &str,
    token_user: &str,
    locks: TaskLocks,
    prologue: (Duration, TaskPrologue),
    stage: Option<TaskStage>,
    body: TaskBody,
) -> String {
    let steps = Steps {
        prologue: Some(prologue),
        stage,
    };
    schedule(
        shared, world, node, task_type, id, token_user, locks, steps, body,
    )
}

/// What a task does between taking its locks and its run time.
#[derive(Default)]
struct Steps {
    prologue: Option<(Duration, TaskPrologue)>,
    stage: Option<TaskStage>,
}

#[allow(clippy::too_many_arguments)]
fn schedule(
    shared: &Arc<Shared>,
    world: &mut World,
    node: &str,
    task_type: &str,
    id: &str,
    token_user: &str,
    locks: TaskLocks,
    steps: Steps,
    body: TaskBody,
) -> String {
    let upid = register_task(world, node, task_type, id, token_user);
    let injected = injected_failure(world, task_type);
    let run_time = Duration::from_millis(world.timings.task(task_type));
    let worker = Worker {
        shared: Arc::clone(shared),
        upid: upid.clone(),
        locks,
    };
    tokio::spawn(worker.run(steps, run_time, body, injected));
    upid
}

/// A new running task in the task list; returns its UPID.
fn register_task(
    world: &mut World,
    node: &str,
    task_type: &str,
    id: &str,
    token_user: &str,
) -> String {
    let (user, tokenid) = match token_user.split_once('!') {
        Some((user, token)) => (user.to_string(), Some(token.to_string())),
        None => (token_user.to_string(), None),
    };
    let pid = world.alloc_pid();
    let started_ms = world.elapsed_ms();
    let task = Task {
        upid: String::new(),
        node: node.to_string(),
        pid,
        pstart: (pid as u64 * 7919 % 0x0FFF_FFFF) as u32,
        starttime: unix_now(),
        task_type: task_type.to_string(),
        id: id.to_string(),
        user,
        tokenid,
        log: Vec::new(),
        exitstatus: None,
        endtime: None,
        started_ms,
        ended_ms: None,
    };
    let upid = encode_upid(&task);
    world.tasks.insert(
        upid.clone(),
        Task {
            upid: upid.clone(),
            ..task
        },
    );
    world.task_order.push(upid.clone());
    upid
}

/// The exit status a `task_failures` fault sets for this task: counted per task type from
/// when the faults were installed.
fn injected_failure(world: &mut World, task_type: &str) -> Option<String> {
    let count = world
        .task_counters
        .entry(task_type.to_string())
        .or_insert(0);
    *count += 1;
    let nth = *count;
    world
        .faults
        .task_failures
        .iter()
        .find(|f| f.task_type == task_type && f.nth == nth)
        .map(|f| f.exitstatus.clone())
}

/// The forked worker of one task.
struct Worker {
    shared: Arc<Shared>,
    upid: String,
    locks: TaskLocks,
}

impl Worker {
    async fn run(self, steps: Steps, run_time: Duration, body: TaskBody, injected: Option<String>) {
        if !self.acquire_flocks().await {
            return;
        }
        if let Some((delay, prologue)) = steps.prologue
            && !self
                .run_prologue(delay, prologue, injected.as_deref())
                .await
        {
            return;
        }
        if let Some(stage) = steps.stage
            && let Err(message) = stage(Arc::clone(&self.shared), self.upid.clone()).await
        {
            self.fail(message);
            return;
        }
        if !run_time.is_zero() {
            tokio::time::sleep(run_time).await;
        }
        self.wait_while_stalled().await;
        let mut world = self.shared.lock();
        finish_task(&mut world, &self.upid, body, injected);
        world.release_flocks(&self.locks.vms);
    }

    /// Waits for the VMs' config flocks; past the lock timeout the task fails as
    /// `lock_config` does. Whether it holds them.
    async fn acquire_flocks(&self) -> bool {
        let since = tokio::time::Instant::now();
        let deadline = since + self.locks.timeout;
        loop {
            let busy = self.shared.lock().try_flock_all(&self.locks.vms);
            let Some(busy) = busy else {
                if let Some(cost) = &self.shared.cost {
                    cost.config_lock_waited(tokio::time::Instant::now() - since);
                }
                return true;
            };
            if tokio::time::Instant::now() >= deadline {
                let message = lock_timeout_message(busy);
                if let Some(cost) = &self.shared.cost {
                    cost.config_lock_timed_out(busy, &message);
                }
                let mut world = self.shared.lock();
                finish_task(
                    &mut world,
                    &self.upid,
                    Box::new(move |_, _, _| Err(message)),
                    None,
                );
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits while the faults stall this task (`stalled_tasks`: its type, or its type and VM).
    async fn wait_while_stalled(&self) {
        loop {
            let stalled = {
                let world = self.shared.lock();
                world.tasks.get(&self.upid).is_some_and(|task| {
                    world.faults.stalled_tasks.iter().any(|stalled| {
                        stalled.task_type == task.task_type
                            && stalled.vmid.is_none_or(|vmid| vmid.to_string() == task.id)
                    })
                })
            };
            if !stalled {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Ends the task with `message` and releases its locks.
    fn fail(&self, message: String) {
        let mut world = self.shared.lock();
        finish_task(
            &mut world,
            &self.upid,
            Box::new(move |_, _, _| Err(message)),
            None,
        );
        world.release_flocks(&self.locks.vms);
    }

    /// Runs the prologue after its delay. Whether the task goes on: not when it was
    /// stopped meanwhile or the prologue failed (then its locks are released).
    async fn run_prologue(
        &self,
        delay: Duration,
        prologue: TaskPrologue,
        injected: Option<&str>,
    ) -> bool {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let mut world = self.shared.lock();
        // A task stopped through DELETE .../tasks/{upid} does nothing more.
        if world
            .tasks
            .get(&self.upid)
            .is_none_or(|t| t.exitstatus.is_some())
        {
            world.release_flocks(&self.locks.vms);
            return false;
        }
        let mut log = TaskLog::default();
        let outcome = prologue(&mut world, &mut log, injected);
        if let Some(task) = world.tasks.get_mut(&self.upid) {
            task.log.append(&mut log.lines);
        }
        if let Err(message) = outcome {
            finish_task(
                &mut world,
                &self.upid,
                Box::new(move |_, _, _| Err(message)),
                None,
            );
            world.release_flocks(&self.locks.vms);
            return false;
        }
        true
    }
}

fn finish_task(world: &mut World, upid: &str, body: TaskBody, injected: Option<String>) {
    // A task stopped through DELETE .../tasks/{upid} has already ended.
    if world.tasks.get(upid).is_none_or(|t| t.exitstatus.is_some()) {
        return;
    }
    let mut log = TaskLog::default();
    let outcome = body(world, &mut log, injected);
    let ended_ms = world.elapsed_ms();
    let Some(task) = world.tasks.get_mut(upid) else {
        return;
    };
    // PVE counts every `log_warn` of the worker: the prologue's too, already in the log.
    let earlier = task.log.iter().filter(|l| l.starts_with("WARN: ")).count();
    let warnings = log.warnings + u32::try_from(earlier).unwrap_or(u32::MAX);
    task.log.append(&mut log.lines);
    let exitstatus = match outcome {
        Ok(()) if warnings == 0 => {
            task.log.push("TASK OK".into());
            "OK".to_string()
        }
        Ok(()) => {
            task.log.push(format!("TASK WARNINGS: {warnings}"));
            format!("WARNINGS: {warnings}")
        }
        Err(message) => {
            // PVE: trailing newline removed, inner newlines become spaces.
            let message = message.trim_end_matches('\n').replace('\n', " ");
            task.log.push(format!("TASK ERROR: {message}"));
            message
        }
    };
    task.exitstatus = Some(exitstatus);
    task.endtime = Some(unix_now());
    task.ended_ms = Some(ended_ms);
}

/// Whether a task finished successfully (`OK` or `WARNINGS: n`).
pub fn exit_ok(exitstatus: &str) -> bool {
    exitstatus == "OK" || exitstatus.starts_with("WARNINGS: ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upid_round_trips_through_pve_format() {
        let task = Task {
            upid: String::new(),
            node: "pve1".into(),
            pid: 0x000D6BDA,
            pstart: 0x041E0A54,
            starttime: 0x654A5A1D,
            task_type: "qmclone".into(),
            id: "9000".into(),
            user: "terraform@pve".into(),
            tokenid: Some("prov".into()),
            log: vec![],
            exitstatus: None,
            endtime: None,
            started_ms: 0,
            ended_ms: None,
        };
        let upid = encode_upid(&task);
        assert_eq!(
            upid,
            "UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:terraform@pve!prov:"
        );
        assert_eq!(
            decode_upid(&upid),
            Some(("pve1".into(), "qmclone".into(), "9000".into()))
        );
        assert_eq!(decode_upid("UPID:pve1:nothex"), None);
        assert!(decode_upid("UPID:pve1:00000001:00000002:00000003:imgcopy::u@pve!t:").is_some());
    }
}
