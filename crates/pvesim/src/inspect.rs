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
}
