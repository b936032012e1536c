//! `/nodes` and `/nodes/{node}/status`; the per-node handle that leads to `qemu` and `storage`.

use serde::Deserialize;

use crate::client::{Client, seg};
use crate::error::Result;
use crate::wire::{Form, de};

/// A row of `GET /nodes`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NodeSummary {
    /// Node name.
    pub node: String,
    /// `online`, `offline` or `unknown`.
    pub status: String,
    /// CPU load 0..1 (absent without Sys.Audit).
    #[serde(default, deserialize_with = "de::opt_float")]
    pub cpu: Option<f64>,
    /// Number of CPUs.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub maxcpu: Option<u64>,
    /// Memory in use, bytes.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub mem: Option<u64>,
    /// Memory total, bytes.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub maxmem: Option<u64>,
    /// Seconds up.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub uptime: Option<u64>,
}

impl NodeSummary {
    /// Whether PVE considers the node online.
    pub fn is_online(&self) -> bool {
        self.status == "online"
    }
}

/// `GET /nodes/{node}/status` (the fields we use; needs Sys.Audit).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NodeStatus {
    /// Seconds up.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub uptime: Option<u64>,
    /// `pve-manager/<ver>/<repoid>`.
    #[serde(default)]
    pub pveversion: Option<String>,
    /// Running kernel.
    #[serde(default)]
    pub kversion: Option<String>,
    /// CPU load 0..1.
    #[serde(default, deserialize_with = "de::opt_float")]
    pub cpu: Option<f64>,
}

/// A row of `GET /nodes/{node}/network`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NetworkInterface {
    /// Interface name, e.g. `vmbr0`.
    pub iface: String,
    /// `bridge`, `OVSBridge`, `eth`, `bond`, …
    #[serde(rename = "type")]
    pub iface_type: String,
    /// Whether it is up.
    #[serde(default, deserialize_with = "de::bool01")]
    pub active: bool,
    /// Whether it starts at boot.
    #[serde(default, deserialize_with = "de::bool01")]
    pub autostart: bool,
    /// Whether the bridge is VLAN-aware (needed for a `tag` on a NIC).
    #[serde(default, rename = "bridge_vlan_aware", deserialize_with = "de::bool01")]
    pub vlan_aware: bool,
}

/// Calls under `/nodes/{node}`.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    pub(crate) client: &'a Client,
    pub(crate) name: &'a str,
}

impl<'a> Node<'a> {
    /// The node name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    pub(crate) fn path(&self) -> String {
        format!("/nodes/{}", seg(self.name))
    }

    /// `GET /nodes/{node}/status`.
    pub async fn status(self) -> Result<NodeStatus> {
        self.client
            .get(&format!("{}/status", self.path()), &Form::new())
            .await
    }
}

/// A row of `GET /nodes/{node}/tasks`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TaskEntry {
    pub upid: String,
    /// The task type, e.g. `qmreboot`.
    #[serde(rename = "type")]
    pub task_type: String,
    /// Unix time the task started.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub starttime: Option<i64>,
    /// The exit status once it ended; `RUNNING` (or absent) while it runs.
    #[serde(default)]
    pub status: Option<String>,
    /// Unix time the task ended, in the archive's rows (PVE's task index keeps it).
    #[serde(default, deserialize_with = "de::opt_int")]
    pub endtime: Option<i64>,
}

impl Node<'_> {
    /// `GET /nodes/{node}/tasks?vmid=…&typefilter=…&source=all`: this node's tasks of one VM
    /// and type, running or ended, newest first. Tells whether a task whose answer was lost
    /// was started.
    pub async fn tasks_of_vm(self, vmid: u32, task_type: &str) -> Result<Vec<TaskEntry>> {
        let query = Form::new()
            .int("vmid", vmid)
            .text("typefilter", task_type)
            .text("source", "all");
        self.client
            .get(&format!("/nodes/{}/tasks", seg(self.name)), &query)
            .await
    }

    /// `GET /nodes/{node}/tasks?limit=…`: this node's latest ended tasks (PVE's archive,
    /// newest first), as far as this token may see them: its own, or all with `Sys.Audit`
    /// on the node.
    pub async fn ended_tasks(self, limit: u32) -> Result<Vec<TaskEntry>> {
        let query = Form::new().int("limit", limit);
        self.client
            .get(&format!("/nodes/{}/tasks", seg(self.name)), &query)
            .await
    }

    /// `GET /nodes/{node}/tasks?source=all&since=…&limit=…`: this node's tasks started at or
    /// after `since` (Unix seconds), running ones first (`status` `RUNNING`), then the ended
    /// ones with their exit status, newest end first, as far as this token may see them.
    pub async fn tasks_since(self, since: u64, limit: u32) -> Result<Vec<TaskEntry>> {
        let query = Form::new()
            .text("source", "all")
            .int("since", since)
            .int("limit", limit);
        self.client
            .get(&format!("/nodes/{}/tasks", seg(self.name)), &query)
            .await
    }

    /// `GET /nodes/{node}/network[?type=…]`, e.g. `Some("any_bridge")` for bridges and OVS
    /// bridges.
    pub async fn network(self, iface_type: Option<&str>) -> Result<Vec<NetworkInterface>> {
        let query = Form::new().opt_text("type", iface_type);
        self.client
            .get(&format!("{}/network", self.path()), &query)
            .await
    }
}

impl Client {
    /// `GET /nodes`.
    pub async fn nodes(&self) -> Result<Vec<NodeSummary>> {
        self.get("/nodes", &Form::new()).await
    }

    /// Calls under `/nodes/{name}`.
    pub fn node<'a>(&'a self, name: &'a str) -> Node<'a> {
        Node { client: self, name }
    }
}
