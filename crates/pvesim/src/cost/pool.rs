//! A daemon's worker processes (pveproxy's or pvedaemon's on one node): a request waits
//! until a worker is free and keeps it busy while it is served. Waiters are served first come
//! first served; a request bound to one worker (its connection was accepted by that worker)
//! waits for that worker only.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::inspect::{PoolStats, WorkerStats};

/// Which worker a request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Whichever is free first (a new connection, accepted by an idle worker).
    Any,
    /// This one (the worker that accepted the request's connection).
    Worker(usize),
}

#[derive(Debug, Default)]
struct Slot {
    busy_since: Option<Instant>,
    busy: Duration,
    requests: u64,
}

#[derive(Debug)]
struct Waiter {
    want: Want,
    since: Instant,
    handed: oneshot::Sender<usize>,
}

#[derive(Debug, Default)]
struct State {
    slots: Vec<Slot>,
    waiters: VecDeque<Waiter>,
    waits: u64,
    wait: Duration,
    max_wait: Duration,
    max_queue: usize,
}

/// The workers of one daemon on one node.
#[derive(Debug)]
pub struct WorkerPool {
    node: String,
    daemon: &'static str,
    state: Mutex<State>,
}

/// A busy worker; dropping it frees the worker for the next waiter.
#[derive(Debug)]
pub struct Busy {
    pool: Arc<WorkerPool>,
    pub worker: usize,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.pool.release(self.worker);
    }
}

/// A waiter's receiver; dropped before the worker reached it (the client went away), it
/// passes on a worker handed to it meanwhile.
struct Waiting {
    pool: Arc<WorkerPool>,
    handed: Option<oneshot::Receiver<usize>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut handed) = self.handed.take() else {
            return;
        };
        handed.close();
        match handed.try_recv() {
            Ok(worker) => self.pool.release(worker),
            Err(_) => self.pool.state().waiters.retain(|w| !w.handed.is_closed()),
        }
    }
}

impl WorkerPool {
    pub fn new(node: &str, daemon: &'static str, workers: usize) -> Arc<WorkerPool> {
        let state = State {
            slots: (0..workers.max(1)).map(|_| Slot::default()).collect(),
            ..State::default()
        };
        Arc::new(WorkerPool {
            node: node.to_string(),
            daemon,
            state: Mutex::new(state),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a worker `want` allows and marks it busy.
    pub async fn acquire(self: &Arc<Self>, want: Want) -> Busy {
        let handed = {
            let mut state = self.state();
            let free = (0..state.slots.len()).find(|&worker| {
                state.slots[worker].busy_since.is_none() && want_allows(want, worker)
            });
            if let Some(worker) = free {
                state.slots[worker].busy_since = Some(Instant::now());
                return self.busy(worker);
            }
            let (sender, receiver) = oneshot::channel();
            state.waiters.push_back(Waiter {
                want,
                since: Instant::now(),
                handed: sender,
            });
            state.max_queue = state.max_queue.max(state.waiters.len());
            receiver
        };
        let mut waiting = Waiting {
            pool: Arc::clone(self),
            handed: Some(handed),
        };
        let received = match waiting.handed.as_mut() {
            Some(handed) => handed.await,
            None => return std::future::pending().await,
        };
        match received {
            Ok(worker) => {
                // Handed over: the worker is this request's now, not the waiter's.
                waiting.handed = None;
                self.busy(worker)
            }
            // Only a dropped pool drops a sender unanswered.
            Err(_) => std::future::pending().await,
        }
    }

    fn busy(self: &Arc<Self>, worker: usize) -> Busy {
        Busy {
            pool: Arc::clone(self),
            worker,
        }
    }

    /// The worker's request is done: account for it and hand the worker to the first
    /// waiter it may serve.
    fn release(&self, worker: usize) {
        let now = Instant::now();
        let mut state = self.state();
        let slot = &mut state.slots[worker];
        if let Some(since) = slot.busy_since.take() {
            slot.busy += now - since;
            slot.requests += 1;
        }
        while let Some(index) = state
            .waiters
            .iter()
            .position(|w| want_allows(w.want, worker))
        {
            let Some(waiter) = state.waiters.remove(index) else {
                break;
            };
            if waiter.handed.send(worker).is_ok() {
                let waited = now - waiter.since;
                state.waits += 1;
                state.wait += waited;
                state.max_wait = state.max_wait.max(waited);
                state.slots[worker].busy_since = Some(now);
                return;
            }
        }
    }

    pub fn stats(&self) -> PoolStats {
        let now = Instant::now();
        let state = self.state();
        PoolStats {
            node: self.node.clone(),
            daemon: self.daemon.to_string(),
            workers: state
                .slots
                .iter()
                .map(|slot| {
                    let running = slot.busy_since.map(|since| now - since).unwrap_or_default();
                    WorkerStats {
                        busy: slot.busy_since.is_some(),
                        busy_ms: millis(slot.busy + running),
                        requests: slot.requests,
                    }
                })
                .collect(),
            queued: state.waiters.len(),
            max_queue: state.max_queue,
            waits: state.waits,
            wait_ms: millis(state.wait),
            max_wait_ms: millis(state.max_wait),
        }
    }

    /// Forgets what was counted (busy workers stay busy, waiters keep waiting).
    pub fn reset(&self) {
        let now = Instant::now();
        let mut state = self.state();
        for slot in &mut state.slots {
            slot.busy = Duration::ZERO;
            slot.requests = 0;
            if let Some(since) = slot.busy_since.as_mut() {
                *since = now;
            }
        }
        state.waits = 0;
        state.wait = Duration::ZERO;
        state.max_wait = Duration::ZERO;
        state.max_queue = state.waiters.len();
    }
}

fn want_allows(want: Want, worker: usize) -> bool {
    match want {
        Want::Any => true,
        Want::Worker(bound) => bound == worker,
    }
}

pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
