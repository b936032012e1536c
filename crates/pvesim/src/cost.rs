//! The cost profile (opt-in by `cost_profile` in the config): what a request, a lock and a
//! clone cost on a real node, so that a benchmark against pve-sim meets the limits a real
//! node sets. Without a profile every request is served at once, as before.
//!
//! - Requests: pveproxy's and pvedaemon's worker pools per node ([`visit`], [`pool`]), a
//!   service time per kind of request, and the connection's keep-alive handling
//!   ([`connection`]).
//! - Locks: VM config flocks are counted here (the server and the tasks hold them); the
//!   storage lock of every allocation ([`storage_lock`]) is modelled here.
//! - Clones: each disk's allocation under the storage lock, then its copy ([`clone_disks`]).
//!
//! `GET /_sim/costs` reports what was spent ([`crate::inspect::CostStats`]).

pub mod clone_disks;
pub mod connection;
pub mod dispatch;
pub mod pool;
pub mod profile;
pub mod storage_lock;
pub mod visit;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::inspect::{CostStats, LockStats, LockTimeout};
use connection::{Connection, Counters};
use pool::{WorkerPool, millis};
use profile::CostProfile;
use storage_lock::StorageLocks;
use visit::Daemon;

/// VM config flocks (`/var/lock/qemu-server/lock-<vmid>.conf`): waits and timeouts.
#[derive(Debug, Default)]
struct ConfigLocks {
    waits: u64,
    wait: Duration,
    max_wait: Duration,
    timeouts: u64,
}

/// The running cost model of one simulator.
#[derive(Debug)]
pub struct CostModel {
    pub profile: CostProfile,
    /// The node whose pveproxy takes every connection.
    entry: String,
    started: Instant,
    pools: BTreeMap<(String, Daemon), Arc<WorkerPool>>,
    connections: Arc<Counters>,
    pub storage_locks: StorageLocks,
    config_locks: Mutex<ConfigLocks>,
    timeouts: Mutex<Vec<LockTimeout>>,
}

impl CostModel {
    /// The model of `profile` for a cluster of `nodes`.
    pub fn new(profile: CostProfile, nodes: &[&str]) -> CostModel {
        let entry = profile
            .entry_node
            .clone()
            .or_else(|| nodes.first().map(|n| n.to_string()))
            .unwrap_or_default();
        let mut pools = BTreeMap::new();
        for node in nodes {
            for (daemon, workers) in [
                (Daemon::Pveproxy, profile.pveproxy_workers),
                (Daemon::Pvedaemon, profile.pvedaemon_workers),
            ] {
                let pool = WorkerPool::new(node, daemon.name(), workers);
                pools.insert((node.to_string(), daemon), pool);
            }
        }
        CostModel {
            profile,
            entry,
            started: Instant::now(),
            pools,
            connections: Arc::default(),
            storage_locks: StorageLocks::default(),
            config_locks: Mutex::default(),
            timeouts: Mutex::default(),
        }
    }

    fn pool(&self, node: &str, daemon: Daemon) -> Option<&Arc<WorkerPool>> {
        self.pools.get(&(node.to_string(), daemon))
    }

    /// A new client connection, with pveproxy's keep-alive limits.
    pub fn connection(&self) -> Arc<Connection> {
        Connection::new(
            Duration::from_millis(self.profile.keep_alive_idle_ms),
            self.profile.keep_alive_requests,
            Arc::clone(&self.connections),
        )
    }

    /// A VM config flock was taken after waiting `waited`.
    pub fn config_lock_waited(&self, waited: Duration) {
        if waited.is_zero() {
            return;
        }
        let mut locks = lock(&self.config_locks);
        locks.waits += 1;
        locks.wait += waited;
        locks.max_wait = locks.max_wait.max(waited);
    }

    /// A VM config flock was not taken in time: PVE died with `message`.
    pub fn config_lock_timed_out(&self, vmid: u32, message: &str) {
        lock(&self.config_locks).timeouts += 1;
        let name = format!("/var/lock/qemu-server/lock-{vmid}.conf");
        self.lock_timed_out(&name, message);
    }

    /// A lock timeout PVE reports with `message`.
    pub fn lock_timed_out(&self, lock_name: &str, message: &str) {
        let at_ms = millis(Instant::now() - self.started);
        lock(&self.timeouts).push(LockTimeout {
            at_ms,
            lock: lock_name.to_string(),
            message: message.to_string(),
        });
    }

    pub fn stats(&self) -> CostStats {
        let config_locks = lock(&self.config_locks);
        CostStats {
            now_ms: millis(Instant::now() - self.started),
            entry_node: self.entry.clone(),
            pools: self.pools.values().map(|pool| pool.stats()).collect(),
            connections: self.connections.stats(),
            config_locks: LockStats {
                waits: config_locks.waits,
                wait_ms: millis(config_locks.wait),
                max_wait_ms: millis(config_locks.max_wait),
                timeouts: config_locks.timeouts,
            },
            storage_locks: self.storage_locks.stats(),
            lock_timeouts: lock(&self.timeouts).clone(),
        }
    }

    /// Starts counting afresh (what is busy or held stays so).
    pub fn reset(&self) {
        self.pools.values().for_each(|pool| pool.reset());
        self.connections.reset();
        self.storage_locks.reset();
        *lock(&self.config_locks) = ConfigLocks::default();
        lock(&self.timeouts).clear();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
