//! How many pieces of work one process lets wait on one PVE lock at once, learned from the
//! lock's refusals ([`LockPacer`]).
//!
//! PVE serialises a storage's allocations under one lock (pve-storage `Plugin.pm`
//! `cluster_lock_storage`) and gives up on a waiter after 10 s (pve-common `Tools.pm`
//! `lock_file_full` for a local storage's flock, pve-cluster `Cluster.pm` `$cfs_lock` for a
//! shared storage's pmxcfs lock): a fleet that sends more clones to one storage than it
//! allocates in 10 s gets the rest refused ("can't lock file … - got timeout", "cfs-lock
//! 'storage-…' error: got lock request timeout"). How many fit depends on the storage and
//! on what else runs, so it is learned: nothing is held back until a refusal, which shows how
//! many PVE served while the refused one waited (what ended well meanwhile and what is still
//! in flight, less each of those refused later in the same overload); from then on at most
//! one fewer than that are in flight, and the window opens by one after each window's worth
//! of work that went through.
//!
//! The pacer knows nothing of HTTP or tasks: a caller names the locks its work may wait on
//! ([`LockPacer::storage`], [`LockPacer::config`]), holds a [`Pass`] while the work runs
//! and says how it ended.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::LockRefusal;

/// See the module doc. One per process; every clone goes through it.
#[derive(Debug, Default)]
pub struct LockPacer {
    gates: Mutex<HashMap<String, Gate>>,
    /// Signalled whenever work leaves a gate or a window opens.
    changed: Notify,
}

/// One lock's learned window and the work in flight on it.
#[derive(Debug, Default)]
struct Gate {
    /// `None` until the first refusal: nothing held back.
    window: Option<usize>,
    /// The work in flight, by pass id: when it was let in and in which round.
    flights: HashMap<u64, Flight>,
    /// Bumped at each cut; work let in before it belongs to the overload that caused it.
    round: u64,
    /// When work of this gate ended well, oldest first, as far back as the oldest flight.
    ended_well: VecDeque<Instant>,
    /// Work of the current round that ended well since the window last changed.
    through: usize,
    refusals: u64,
}

#[derive(Debug, Clone, Copy)]
struct Flight {
    started: Instant,
    round: u64,
}

/// What a [`LockPacer`] knows of one lock, for logs and benchmarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateState {
    /// The learned window, `None` while nothing was refused.
    pub window: Option<usize>,
    /// Work in flight now.
    pub in_flight: usize,
    /// Refusals met in all.
    pub refusals: u64,
}

/// Work let in through a [`LockPacer`]'s gates; say how it ended with [`Pass::succeeded`] or
/// [`Pass::refused`]. Dropped without either (it failed otherwise, or was abandoned), it
/// leaves its gates and teaches nothing.
#[derive(Debug)]
pub struct Pass<'a> {
    pacer: &'a LockPacer,
    id: u64,
    keys: Vec<String>,
}

impl LockPacer {
    /// The gate of a storage's allocation lock (every node's, taken together: a shared
    /// storage has one, and a local one is met on the node a template lives on).
    pub fn storage(storage: &str) -> String {
        format!("storage/{storage}")
    }

    /// The gate of a VM's config lock (a template's, which its clones take).
    pub fn config(vmid: u32) -> String {
        format!("config/{vmid}")
    }

    /// The gate a refusal names, when it is one this pacer paces (a storage's or a config's
    /// lock; a VM's own `lock` and other pmxcfs locks are waited out, not paced).
    pub fn gate_of(refusal: &LockRefusal) -> Option<String> {
        match refusal {
            LockRefusal::Storage { storage, .. } => Some(Self::storage(storage)),
            LockRefusal::Config { vmid } => Some(Self::config(*vmid)),
            LockRefusal::Cluster { .. } | LockRefusal::Vm { .. } => None,
        }
    }

    /// Waits until every gate in `keys` has room, then lets the work in. Cancel-safe; the
    /// caller bounds the wait by its deadline.
    pub async fn enter(&self, keys: &[String]) -> Pass<'_> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(id) = self.try_enter(keys) {
                return Pass {
                    pacer: self,
                    id,
                    keys: keys.to_vec(),
                };
            }
            changed.await;
        }
    }

    fn try_enter(&self, keys: &[String]) -> Option<u64> {
        let mut gates = self.lock();
        let full = keys.iter().any(|key| {
            gates
                .get(key)
                .and_then(|gate| gate.window.map(|w| gate.flights.len() >= w))
                .unwrap_or(false)
        });
        if full {
            return None;
        }
        let id = NEXT_PASS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let started = Instant::now();
        for key in keys {
            let gate = gates.entry(key.clone()).or_default();
            let round = gate.round;
            gate.flights.insert(id, Flight { started, round });
        }
        Some(id)
    }

    /// What this pacer knows of the gate `key`.
    pub fn state(&self, key: &str) -> GateState {
        let gates = self.lock();
        let gate = gates.get(key);
        GateState {
            window: gate.and_then(|g| g.window),
            in_flight: gate.map_or(0, |g| g.flights.len()),
            refusals: gate.map_or(0, |g| g.refusals),
        }
    }

    fn leave(&self, id: u64, keys: &[String], outcome: Outcome<'_>) {
        {
            let mut gates = self.lock();
            for key in keys {
                let Some(gate) = gates.get_mut(key) else {
                    continue;
                };
                let Some(flight) = gate.flights.remove(&id) else {
                    continue;
                };
                match outcome {
                    Outcome::Succeeded => gate.went_through(flight),
                    Outcome::Refused(refused) if refused == key => gate.refused(key, flight),
                    Outcome::Refused(_) | Outcome::Abandoned => {}
                }
                gate.forget_before_oldest_flight();
            }
        }
        self.changed.notify_waiters();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Gate>> {
        self.gates.lock().unwrap_or_else(|e| e.into_inner())
    }
}

static NEXT_PASS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[derive(Debug, Clone, Copy)]
enum Outcome<'k> {
    Succeeded,
    Refused(&'k str),
    Abandoned,
}

impl Gate {
    fn went_through(&mut self, flight: Flight) {
        self.ended_well.push_back(Instant::now());
        let Some(window) = self.window else {
            return;
        };
        if flight.round != self.round {
            return;
        }
        self.through += 1;
        // A window's worth went through without a refusal: try one more.
        if self.through >= window {
            self.window = Some(window + 1);
            self.through = 0;
        }
    }

    fn refused(&mut self, key: &str, flight: Flight) {
        self.refusals += 1;
        self.through = 0;
        if flight.round + 1 == self.round {
            // In flight at the last cut, which counted it as served: it was not.
            if let Some(window) = self.window {
                self.window = Some(window.saturating_sub(1).max(1));
            }
            return;
        }
        if flight.round != self.round {
            return;
        }
        // A new overload. What PVE served while this one waited: what ended well since it
        // was let in, and what is still in flight (work let in together reaches PVE's lock
        // in any order). Those of them refused later are taken off one by one (above).
        let served = self
            .ended_well
            .iter()
            .filter(|ended| **ended >= flight.started)
            .count()
            + self.flights.len();
        // One fewer than that: the last one served waited nearly the whole timeout.
        let estimate = served.saturating_sub(1).max(1);
        let window = match self.window {
            Some(old) => estimate.min(old.saturating_sub(1)).max(1),
            None => estimate,
        };
        tracing::info!(
            gate = key,
            window,
            served,
            in_flight = self.flights.len(),
            "PVE refused a lock wait: pacing this lock's work"
        );
        self.window = Some(window);
        self.round += 1;
    }

    fn forget_before_oldest_flight(&mut self) {
        let Some(oldest) = self.flights.values().map(|f| f.started).min() else {
            self.ended_well.clear();
            return;
        };
        while self.ended_well.front().is_some_and(|ended| *ended < oldest) {
            self.ended_well.pop_front();
        }
    }
}

impl Pass<'_> {
    /// The work ended well: it got past its locks.
    pub fn succeeded(mut self) {
        let keys = std::mem::take(&mut self.keys);
        self.pacer.leave(self.id, &keys, Outcome::Succeeded);
    }

    /// PVE refused the work a lock: the gate that lock names (if it is one of this pass's)
    /// learns from it; the others only see the work leave.
    pub fn refused(mut self, refusal: &LockRefusal) {
        let keys = std::mem::take(&mut self.keys);
        match LockPacer::gate_of(refusal) {
            Some(gate) => self.pacer.leave(self.id, &keys, Outcome::Refused(&gate)),
            None => self.pacer.leave(self.id, &keys, Outcome::Abandoned),
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if !self.keys.is_empty() {
            let keys = std::mem::take(&mut self.keys);
            self.pacer.leave(self.id, &keys, Outcome::Abandoned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn storage_refusal(storage: &str) -> LockRefusal {
        LockRefusal::Storage {
            storage: storage.into(),
            cluster: true,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_held_back_until_a_refusal() {
        let pacer = LockPacer::default();
        let keys = [LockPacer::storage("vmdata"), LockPacer::config(9000)];
        let mut passes = Vec::new();
        for _ in 0..50 {
            passes.push(pacer.enter(&keys).await);
        }
        assert_eq!(pacer.state(&keys[0]).in_flight, 50);
        assert_eq!(pacer.state(&keys[0]).window, None);
        for pass in passes {
            pass.succeeded();
        }
        assert_eq!(pacer.state(&keys[0]).in_flight, 0);
        assert_eq!(pacer.state(&keys[0]).window, None);
    }

    /// Twenty clones to a storage that allocates one every 2 s: PVE served six while the
    /// seventh waited its 10 s, so at most five are let in afterwards.
    #[tokio::test(start_paused = true)]
    async fn a_refusal_sets_the_window_to_what_pve_served_once_per_round() {
        let pacer = LockPacer::default();
        let keys = [LockPacer::storage("local-lvm")];
        let mut passes = VecDeque::new();
        for _ in 0..20 {
            passes.push_back(pacer.enter(&keys).await);
            tokio::time::advance(Duration::from_millis(50)).await;
        }
        // Five go through, one after another.
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(2)).await;
            passes.pop_front().unwrap().succeeded();
        }
        // The sixth holds the lock; the seventh gives up.
        let sixth = passes.pop_front().unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        passes
            .pop_front()
            .unwrap()
            .refused(&storage_refusal("local-lvm"));
        let state = pacer.state(&keys[0]);
        assert_eq!(
            state.window,
            Some(18),
            "5 ended well and 14 in flight, less one"
        );
        // The rest of that overload is refused too: each was counted as served, and is not.
        while let Some(pass) = passes.pop_front() {
            pass.refused(&storage_refusal("local-lvm"));
        }
        let state = pacer.state(&keys[0]);
        assert_eq!(
            (state.window, state.refusals),
            (Some(5), 14),
            "6 served, less one"
        );
        // With the sixth in flight, four more get in; the fifth waits for room.
        let mut again = Vec::new();
        for _ in 0..4 {
            again.push(pacer.enter(&keys).await);
        }
        let waiting = tokio::time::timeout(Duration::from_secs(60), pacer.enter(&keys)).await;
        assert!(waiting.is_err(), "a sixth is held back");
        let enter = pacer.enter(&keys);
        tokio::pin!(enter);
        assert!(futures_poll(&mut enter).is_none());
        sixth.succeeded();
        assert!(futures_poll(&mut enter).is_some(), "room once one left");
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_opens_after_a_window_went_through() {
        let pacer = LockPacer::default();
        let keys = [LockPacer::config(9000)];
        let first = pacer.enter(&keys).await;
        let second = pacer.enter(&keys).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        second.refused(&LockRefusal::Config { vmid: 9000 });
        assert_eq!(pacer.state(&keys[0]).window, Some(1));
        first.succeeded();
        // One went through in the new round: the window opens to 2.
        pacer.enter(&keys).await.succeeded();
        assert_eq!(pacer.state(&keys[0]).window, Some(2));
        // A refusal in a round of its own cuts below the window it opened to.
        let one = pacer.enter(&keys).await;
        let two = pacer.enter(&keys).await;
        two.refused(&LockRefusal::Config { vmid: 9000 });
        assert_eq!(pacer.state(&keys[0]).window, Some(1));
        one.succeeded();
        pacer.enter(&keys).await.succeeded();
        assert_eq!(pacer.state(&keys[0]).window, Some(2));
        // A refusal of another lock teaches this gate nothing; neither does an abandon.
        let pass = pacer.enter(&keys).await;
        pass.refused(&storage_refusal("vmdata"));
        drop(pacer.enter(&keys).await);
        assert_eq!(pacer.state(&keys[0]).window, Some(2));
        assert_eq!(pacer.state(&keys[0]).in_flight, 0);
        // A VM's own lock is waited out, never paced.
        assert_eq!(
            LockPacer::gate_of(&LockRefusal::Vm {
                holder: "backup".into()
            }),
            None
        );
    }

    /// Polls a future once.
    fn futures_poll<F: std::future::Future + Unpin>(future: &mut F) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(future).poll(&mut cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        }
    }
}
