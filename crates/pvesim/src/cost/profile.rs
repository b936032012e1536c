//! The cost profile as a config file names it (`cost_profile`): how many workers serve the
//! API, how long each kind of request keeps one busy, when pveproxy closes a connection,
//! and what an allocation and a copy cost on each kind of storage. Numbers taken from PVE's
//! source say so; the others are estimates (see the README's "Cost profile").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a request, a lock and a clone cost on a real node. Every field has a default, so
/// `"cost_profile": {}` is PVE's defaults with estimated service times.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CostProfile {
    /// The node the client's endpoint is (its pveproxy takes every connection); `None` = the
    /// world's first node.
    pub entry_node: Option<String>,
    /// pveproxy's worker processes per node: 3 (pve-manager `PVE/Service/pveproxy.pm`
    /// `max_workers`; `MAX_WORKERS` in `/etc/default/pveproxy` overrides it).
    pub pveproxy_workers: usize,
    /// pvedaemon's worker processes per node: 3 (`PVE/Service/pvedaemon.pm` `max_workers`).
    pub pvedaemon_workers: usize,
    /// pveproxy closes a connection this long without a read or a write: 5000 (pve-http-server
    /// `APIServer/AnyEvent.pm` `new`: `timeout` 5 s, which pveproxy does not set).
    pub keep_alive_idle_ms: u64,
    /// Requests one connection serves; the last answer says `Connection: close`: 100
    /// (`pveproxy.pm` `keep_alive => 100`, counted down in `push_request_header`).
    pub keep_alive_requests: u32,
    /// How long a request keeps the worker that runs it busy, by kind (estimates).
    pub service_ms: ServiceTimes,
    /// Per-route service time (`"GET /cluster/resources"`: the method, a space and the
    /// route's template), instead of its kind's.
    pub route_ms: BTreeMap<String, u64>,
    /// Allocation and copy costs by storage id or plugin type (the id wins); a kind named
    /// nowhere costs [`StorageCost::for_plugin`].
    pub storage: BTreeMap<String, StorageCost>,
}

impl Default for CostProfile {
    fn default() -> Self {
        CostProfile {
            entry_node: None,
            pveproxy_workers: 3,
            pvedaemon_workers: 3,
            keep_alive_idle_ms: 5000,
            keep_alive_requests: 100,
            service_ms: ServiceTimes::default(),
            route_ms: BTreeMap::new(),
            storage: BTreeMap::new(),
        }
    }
}

impl CostProfile {
    /// The costs of one storage: by its id, else by its plugin type, else the estimate.
    pub fn storage_cost(&self, id: &str, plugin_type: &str) -> StorageCost {
        self.storage
            .get(id)
            .or_else(|| self.storage.get(plugin_type))
            .cloned()
            .unwrap_or_else(|| StorageCost::for_plugin(plugin_type))
    }
}

/// Milliseconds a worker is busy with one request (all estimates; `scripts/pve-profile.sh`
/// measures `read` on a real node).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServiceTimes {
    /// A `GET`.
    pub read: u64,
    /// A `POST`/`PUT`/`DELETE` answered without a task (a synchronous config write).
    pub write: u64,
    /// A request answered with a UPID: the checks before the fork and the fork.
    pub task_start: u64,
    /// One pveproxy hop that forwards a request (to pvedaemon or to another node's pveproxy).
    pub proxy: u64,
    /// Per MiB of an upload, on the pveproxy worker that reads the body.
    pub upload_per_mib: u64,
}

impl Default for ServiceTimes {
    fn default() -> Self {
        ServiceTimes {
            read: 15,
            write: 60,
            task_start: 150,
            proxy: 3,
            upload_per_mib: 5,
        }
    }
}

/// What a clone's disk work costs on one storage (estimates).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StorageCost {
    /// `vdisk_alloc` of a full clone's volume, under the storage lock.
    pub alloc_ms: u64,
    /// `vdisk_clone` of a linked clone (`clone_image`), under the storage lock.
    pub linked_clone_ms: u64,
    /// A full clone's copy (`qemu-img convert`), after the lock, per disk size.
    pub copy_mib_per_s: u64,
}

impl Default for StorageCost {
    fn default() -> Self {
        StorageCost::for_plugin("")
    }
}

impl StorageCost {
    /// The estimate for a plugin type: local files are cheap to create and fast to fill,
    /// LVM commits metadata on every `lvcreate`, NFS pays a network round trip per
    /// operation and copies at about 1 GbE's rate.
    pub fn for_plugin(plugin_type: &str) -> StorageCost {
        let (alloc_ms, linked_clone_ms, copy_mib_per_s) = match plugin_type {
            "dir" | "btrfs" => (60, 60, 400),
            "nfs" | "cifs" | "glusterfs" | "cephfs" => (150, 150, 110),
            "lvmthin" | "lvm" => (400, 400, 500),
            "zfspool" => (200, 150, 500),
            "rbd" => (300, 300, 300),
            _ => (200, 200, 200),
        };
        StorageCost {
            alloc_ms,
            linked_clone_ms,
            copy_mib_per_s,
        }
    }
}
