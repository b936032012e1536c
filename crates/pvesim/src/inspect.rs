//! The JSON shapes of the admin API under `/_sim/` (see the crate README): what
//! `GET /_sim/state` and `GET /_sim/journal` answer. The server writes these types and test
//! clients read them, so the two cannot drift apart. `/_sim/faults` and `/_sim/timings`
//! carry [`crate::Faults`] and [`crate::Timings`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `GET /_sim/state`: the simulated cluster as it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimState {
    pub nodes: Vec<NodeState>,
    pub vms: Vec<VmState>,
    pub volumes: Vec<VolumeState>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    pub name: String,
    /// Configured online and not made offline by a fault.
    pub online: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmState {
    pub node: String,
    pub vmid: u32,
    pub name: Option<String>,
    /// `running`, `paused` or `stopped`.
    pub status: String,
    /// The config's `lock` (`clone`, `backup`, …).
    pub lock: Option<String>,
    pub tags: Option<String>,
    pub template: bool,
    /// The config file's values, as PVE stores them.
    pub config: BTreeMap<String, String>,
    /// Changes written but not yet applied (hotplug or reboot pending).
    pub pending: BTreeMap<String, String>,
    /// Whether the guest agent answers.
    pub agent_ready: bool,
    /// What the guest keeps on its disk and what its cloud-init did this boot.
    #[serde(default)]
    pub guest: GuestState,
}

/// The simulated guest of one VM (see the README's "Guest and cloud-init").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GuestState {
    /// The seed of the guest's very first instance: `seed_boots[0]`.
    pub first_seed: Option<SeedBoot>,
    /// The first boot of every instance-id, oldest first: a seed counts only here, when
    /// cloud-init met its instance-id for the first time.
    pub seed_boots: Vec<SeedBoot>,
    /// The instance-id in cloud-init's cache (`/var/lib/cloud/data/instance-id`).
    pub instance_id: Option<String>,
    /// `qemu-guest-agent` is installed: the image ships it, or an instance's seed installed
    /// and started it; it stays installed.
    pub agent_installed: bool,
    /// The instance's cloud-config set `manual_cache_clean: true`: later boots trust the
    /// cache, with or without a seed.
    pub manual_cache_clean: bool,
    /// This boot's cloud-init: `null` (not running or did not run), `running`, `done`,
    /// `degraded` (recoverable errors) or `error`.
    pub cloud_init: Option<String>,
    /// Files written through the agent (`file-write`), by path.
    pub files: Vec<String>,
    /// The image the guest was made from (`debian-13`, `rhel-9`, …; README "Guest
    /// profiles").
    #[serde(default)]
    pub profile: String,
    /// `/etc/cloud/cloud-init.disabled` is on the disk: cloud-init runs at no later boot.
    #[serde(default)]
    pub cloud_init_disabled: bool,
}

/// A seed a guest booted as a new instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedBoot {
    /// The VM's node at that boot.
    pub node: String,
    /// The cdrom's volume (`storage:iso/name.iso`).
    pub volid: String,
    /// meta-data `instance-id` (NoCloud's default `nocloud` when it names none).
    pub instance_id: String,
    /// SHA-256 of the ISO's bytes, lower-case hex.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeState {
    /// The node it is on; for a shared storage, the node it was created from.
    pub node: String,
    pub storage: String,
    pub shared: bool,
    pub volid: String,
    pub size: u64,
    /// `images`, `iso`, …
    pub content: String,
}

/// One entry of `GET /_sim/journal`: a request the PVE API answered (or that a fault
/// answered), oldest first. Secret parameters read `<redacted>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub method: String,
    /// The path after `/api2/json`.
    pub path: String,
    pub params: Map<String, Value>,
    /// The answer's status; 0 when the connection was reset instead.
    pub status: u16,
    /// When the request arrived and when it was answered, in ms since the simulator
    /// started (the zero of [`TaskTiming`]'s times too).
    #[serde(default)]
    pub received_ms: u64,
    #[serde(default)]
    pub answered_ms: u64,
}

/// One entry of `GET /_sim/tasks`: a task's type and times, oldest first, for a benchmark
/// to measure how late a client saw each task end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskTiming {
    pub upid: String,
    pub node: String,
    #[serde(rename = "type")]
    pub task_type: String,
    pub id: String,
    /// In ms since the simulator started.
    pub started_ms: u64,
    /// `None` while it runs.
    pub ended_ms: Option<u64>,
    pub exitstatus: Option<String>,
}

/// The answer of `POST /_sim/ha/rebalance`: the bundle the rebalancer moves (the services
/// kept together on one node, sorted; the first leads it) and where to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HaRebalance {
    /// The bundle's leader, the service the CRM's command names.
    pub sid: String,
    pub target: String,
    pub resources: Vec<String>,
}

/// The answer of `PUT /_sim/ha/services/{sid}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HaServiceState {
    pub sid: String,
    pub state: String,
    pub node: String,
}

/// `GET /_sim/costs`: what the cost profile's requests, locks and clones spent so far (since
/// the start or the last `POST /_sim/costs/reset`). Times are milliseconds of the
/// simulator's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostStats {
    /// Time since the simulator started.
    pub now_ms: u64,
    /// The node whose pveproxy takes every connection.
    pub entry_node: String,
    /// Every node's pveproxy and pvedaemon.
    pub pools: Vec<PoolStats>,
    pub connections: ConnectionStats,
    /// VM config flocks (`/var/lock/qemu-server/lock-<vmid>.conf`): clones, config writes,
    /// every task that locks a VM.
    pub config_locks: LockStats,
    /// Storage locks taken by allocations, one per storage (and node, for a local one).
    pub storage_locks: Vec<StorageLockStats>,
    /// Every lock that was not taken in time, oldest first.
    pub lock_timeouts: Vec<LockTimeout>,
}

/// One daemon's workers on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolStats {
    pub node: String,
    /// `pveproxy` or `pvedaemon`.
    pub daemon: String,
    pub workers: Vec<WorkerStats>,
    /// Requests waiting for a worker now.
    pub queued: usize,
    /// The longest queue seen.
    pub max_queue: usize,
    /// Requests that had to wait for a worker, and how long they waited in all.
    pub waits: u64,
    pub wait_ms: u64,
    pub max_wait_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// Serving a request now.
    pub busy: bool,
    /// Time spent serving requests (the one being served included).
    pub busy_ms: u64,
    /// Requests served to the end.
    pub requests: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionStats {
    /// Connections that carried a PVE API request (the admin API's are not counted).
    pub opened: u64,
    /// Closed by pveproxy after the idle timeout.
    pub idle_closed: u64,
    /// Ended because they reached pveproxy's requests per connection.
    pub request_limit_closed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockStats {
    /// Takes that had to wait, and how long they waited in all.
    pub waits: u64,
    pub wait_ms: u64,
    pub max_wait_ms: u64,
    /// Takes that gave up with PVE's timeout error.
    pub timeouts: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorageLockStats {
    pub storage: String,
    /// The node of a local storage's flock; `null` for a shared storage's cluster lock.
    pub node: Option<String>,
    /// The flock's file (`/var/lock/pve-manager/pve-storage-<id>`) or the cfs lock's id
    /// (`storage-<id>`).
    pub lock: String,
    /// Held now.
    pub held: bool,
    /// Allocations (and linked clones) made under the lock, and how long they held it.
    pub allocations: u64,
    pub held_ms: u64,
    /// Takes that found the lock held and waited (a flock's block, a cfs lock's sleeps),
    /// and how long.
    pub waits: u64,
    pub wait_ms: u64,
    pub max_wait_ms: u64,
    pub timeouts: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockTimeout {
    /// When it gave up (the simulator's clock).
    pub at_ms: u64,
    /// The lock file or cfs lock id.
    pub lock: String,
    /// PVE's error text.
    pub message: String,
}
