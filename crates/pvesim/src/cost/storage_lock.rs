//! The storage lock every allocation runs under (pve-storage `Plugin.pm`
//! `cluster_lock_storage`, around `vdisk_alloc` and `vdisk_clone` in `Storage.pm`): for a
//! local storage a flock on the node, `/var/lock/pve-manager/pve-storage-<id>`, taken
//! through pve-common `Tools.pm` `lock_file_full`; for a shared storage pmxcfs' cluster lock
//! `storage-<id>` (pve-cluster `Cluster.pm` `cfs_lock_storage`). Storage.pm passes no
//! timeout, so both wait their default 10 s.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::pool::millis;
use crate::inspect::StorageLockStats;

/// `lock_file_full` and `$cfs_lock`: `$timeout = 10 if !$timeout`.
pub const STORAGE_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct State {
    held_since: Option<Instant>,
    /// flock only: blocked `flock` calls, woken in turn.
    waiters: VecDeque<(Instant, oneshot::Sender<()>)>,
    allocations: u64,
    held: Duration,
    waits: u64,
    wait: Duration,
    max_wait: Duration,
    timeouts: u64,
}

/// One storage's lock: per node for a local storage, cluster-wide for a shared one.
#[derive(Debug)]
pub struct StorageLock {
    storage: String,
    /// `None`: the cluster lock of a shared storage.
    node: Option<String>,
    state: Mutex<State>,
}

/// The lock, held; dropping it unlocks.
#[derive(Debug)]
pub struct Held {
    lock: Arc<StorageLock>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.lock.release();
    }
}

impl StorageLock {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What PVE names the lock: the flock's file or the cfs lock's id.
    pub fn name(&self) -> String {
        match self.node {
            Some(_) => format!("/var/lock/pve-manager/pve-storage-{}", self.storage),
            None => format!("storage-{}", self.storage),
        }
    }

    /// Takes the lock within `timeout`, passing each line PVE prints while it waits to
    /// `log`; else the text PVE dies with.
    pub async fn acquire(
        self: &Arc<Self>,
        timeout: Duration,
        log: &(dyn Fn(String) + Sync),
    ) -> Result<Held, String> {
        match self.node {
            Some(_) => self.acquire_flock(timeout, log).await,
            None => self.acquire_cfs(timeout, log).await,
        }
    }

    /// `lock_file_full`: a non-blocking `flock` first, then (after "trying to acquire
    /// lock...") a blocking one under `alarm($timeout)`; the alarm dies "got timeout".
    async fn acquire_flock(
        self: &Arc<Self>,
        timeout: Duration,
        log: &(dyn Fn(String) + Sync),
    ) -> Result<Held, String> {
        let since = Instant::now();
        let receiver = {
            let mut state = self.state();
            if state.held_since.is_none() {
                return Ok(self.take(&mut state, Duration::ZERO));
            }
            let (sender, receiver) = oneshot::channel();
            state.waiters.push_back((since, sender));
            receiver
        };
        log("trying to acquire lock...".into());
        let mut blocked = Blocked {
            lock: Arc::clone(self),
            woken: Some(receiver),
        };
        let woken = match blocked.woken.as_mut() {
            Some(receiver) => {
                tokio::select! {
                    // Woken at the very instant of the alarm: the lock wins, as a flock
                    // that returned before the signal.
                    biased;
                    woken = receiver => woken.is_ok(),
                    () = tokio::time::sleep_until(since + timeout) => false,
                }
            }
            None => false,
        };
        if woken {
            blocked.woken = None;
            log(" OK".into());
            return Ok(Held {
                lock: Arc::clone(self),
            });
        }
        drop(blocked);
        self.state().timeouts += 1;
        Err(format!("can't lock file '{}' - got timeout", self.name()))
    }

    /// `$cfs_lock`: `mkdir` of the lock directory, retried after sleeping a tenth of the
    /// seconds left (at most 1 s), until the next sleep would reach the timeout; "trying to
    /// acquire cfs lock" at most once a second.
    async fn acquire_cfs(
        self: &Arc<Self>,
        timeout: Duration,
        log: &(dyn Fn(String) + Sync),
    ) -> Result<Held, String> {
        let since = Instant::now();
        let timeout_sec = timeout.as_secs().max(1);
        let mut slept_usec: u64 = 0;
        loop {
            {
                let mut state = self.state();
                if state.held_since.is_none() {
                    // Taken at the first `mkdir` (`$cfs_lock`: `last if $got_lock` before any
                    // `usleep`): no wait, however long this call took.
                    let waited = if slept_usec == 0 {
                        Duration::ZERO
                    } else {
                        since.elapsed()
                    };
                    return Ok(self.take(&mut state, waited));
                }
            }
            let slept_sec = slept_usec / 1_000_000;
            let remaining_sec = timeout_sec.saturating_sub(slept_sec).max(1);
            let sleep_usec = remaining_sec.min(10) * 100_000;
            let next_slept_sec = (slept_usec + sleep_usec) / 1_000_000;
            if next_slept_sec >= timeout_sec {
                self.state().timeouts += 1;
                return Err(format!(
                    "cfs-lock '{}' error: got lock request timeout",
                    self.name()
                ));
            }
            if next_slept_sec > slept_sec {
                log(format!("trying to acquire cfs lock '{}' ...", self.name()));
            }
            tokio::time::sleep(Duration::from_micros(sleep_usec)).await;
            slept_usec += sleep_usec;
        }
    }

    /// Marks the lock held by a caller that waited `waited` for it.
    fn take(self: &Arc<Self>, state: &mut State, waited: Duration) -> Held {
        state.held_since = Some(Instant::now());
        note_wait(state, waited);
        Held {
            lock: Arc::clone(self),
        }
    }

    /// Unlocks after an allocation and wakes the next blocked flock.
    fn release(&self) {
        let now = Instant::now();
        let mut state = self.state();
        if let Some(since) = state.held_since.take() {
            state.held += now - since;
            state.allocations += 1;
        }
        hand_on(&mut state, now);
    }

    /// A blocked flock was woken but gave up before it took the lock: no allocation; the
    /// next one is woken.
    fn release_unused(&self) {
        let mut state = self.state();
        state.held_since = None;
        hand_on(&mut state, Instant::now());
    }

    pub fn stats(&self) -> StorageLockStats {
        let state = self.state();
        StorageLockStats {
            storage: self.storage.clone(),
            node: self.node.clone(),
            lock: self.name(),
            held: state.held_since.is_some(),
            allocations: state.allocations,
            held_ms: millis(state.held),
            waits: state.waits,
            wait_ms: millis(state.wait),
            max_wait_ms: millis(state.max_wait),
            timeouts: state.timeouts,
        }
    }

    fn reset(&self) {
        let mut state = self.state();
        let held = state.held_since.map(|_| Instant::now());
        let waiters = std::mem::take(&mut state.waiters);
        *state = State {
            held_since: held,
            waiters,
            ..State::default()
        };
    }
}

/// The lock passes to the first blocked flock still waiting, if any.
fn hand_on(state: &mut State, now: Instant) {
    while let Some((waiting_since, waiter)) = state.waiters.pop_front() {
        if waiter.send(()).is_ok() {
            state.held_since = Some(now);
            note_wait(state, now - waiting_since);
            return;
        }
    }
}

fn note_wait(state: &mut State, waited: Duration) {
    if waited.is_zero() {
        return;
    }
    state.waits += 1;
    state.wait += waited;
    state.max_wait = state.max_wait.max(waited);
}

/// A blocked flock; given up (timeout, or the task went away), it passes on a lock handed
/// to it meanwhile.
struct Blocked {
    lock: Arc<StorageLock>,
    woken: Option<oneshot::Receiver<()>>,
}

impl Drop for Blocked {
    fn drop(&mut self) {
        let Some(mut woken) = self.woken.take() else {
            return;
        };
        woken.close();
        if woken.try_recv().is_ok() {
            self.lock.release_unused();
        } else {
            self.lock.state().waiters.retain(|(_, w)| !w.is_closed());
        }
    }
}

/// A storage and, for a local one, the node: which lock an allocation takes.
type LockKey = (String, Option<String>);

/// Every storage lock taken so far.
#[derive(Debug, Default)]
pub struct StorageLocks {
    locks: Mutex<BTreeMap<LockKey, Arc<StorageLock>>>,
}

impl StorageLocks {
    fn locks(&self) -> MutexGuard<'_, BTreeMap<LockKey, Arc<StorageLock>>> {
        self.locks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock an allocation on `storage` from `node` takes.
    pub fn lock(&self, storage: &str, shared: bool, node: &str) -> Arc<StorageLock> {
        let node = (!shared).then(|| node.to_string());
        let key = (storage.to_string(), node.clone());
        Arc::clone(self.locks().entry(key).or_insert_with(|| {
            Arc::new(StorageLock {
                storage: storage.to_string(),
                node,
                state: Mutex::new(State::default()),
            })
        }))
    }

    pub fn stats(&self) -> Vec<StorageLockStats> {
        self.locks().values().map(|lock| lock.stats()).collect()
    }

    pub fn reset(&self) {
        self.locks().values().for_each(|lock| lock.reset());
    }
}
