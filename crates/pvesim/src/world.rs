//! The simulated cluster: nodes, storages, volumes, VMs, pools, tasks and the request journal.
//! One `World` sits behind one mutex; handlers mutate it synchronously and tasks re-lock it
//! when their simulated run time has passed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::config::{Faults, PoolConfig, SimConfig, StorageConfig, Timings, VersionInfo};
use crate::inspect::JournalEntry;
use crate::schema::NIC_MODELS;

#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub online: bool,
    pub cpus: u32,
    pub memory_bytes: u64,
    pub bridges: Vec<String>,
}

/// Where a volume lives: shared storages have one namespace, local ones one per node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VolumeScope {
    pub storage: String,
    pub node: Option<String>,
}

#[derive(Clone)]
pub struct Volume {
    pub volid: String,
    pub size: u64,
    pub content: String,
    pub format: String,
    pub ctime: u64,
    /// Uploaded bytes (ISO images); disks carry no data.
    pub data: Option<bytes::Bytes>,
    /// The node the volume was created from (for the admin view of shared storages).
    pub origin_node: String,
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Uploaded seeds carry user-data: never print their bytes.
        f.debug_struct("Volume")
            .field("volid", &self.volid)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// What a booted guest's agent will report.
#[derive(Debug, Clone)]
pub struct AgentState {
    pub ready_at: Instant,
    pub hostname: String,
}

#[derive(Debug, Clone)]
pub struct Vm {
    pub vmid: u32,
    pub node: String,
    /// Raw config-file values; `description` is kept unencoded.
    pub config: BTreeMap<String, String>,
    pub pending: BTreeMap<String, String>,
    pub pending_delete: BTreeSet<String>,
    pub running: bool,
    pub paused: bool,
    pub started_at: Option<Instant>,
    /// When pvestatd first has stats for this VM (`/cluster/resources` lag).
    pub stats_from: Instant,
    pub agent: Option<AgentState>,
    /// The guest's disk and this boot's cloud-init (`cloud_init` decides it at boot).
    pub guest: crate::guest::Guest,
    pub pid: u32,
}

impl Vm {
    pub fn lock(&self) -> Option<&str> {
        self.config.get("lock").map(String::as_str)
    }

    pub fn is_template(&self) -> bool {
        self.config.get("template").is_some_and(|v| v == "1")
    }

    pub fn name(&self) -> String {
        self.config
            .get("name")
            .cloned()
            .unwrap_or_else(|| format!("VM {}", self.vmid))
    }
}

#[derive(Debug, Clone)]
pub struct Pool {
    pub comment: Option<String>,
    pub vms: BTreeSet<u32>,
}

#[derive(Debug, Clone)]
pub struct Task {
    pub upid: String,
    pub node: String,
    pub pid: u32,
    pub pstart: u32,
    pub starttime: u64,
    pub task_type: String,
    pub id: String,
    pub user: String,
    pub tokenid: Option<String>,
    pub log: Vec<String>,
    /// `None` while running.
    pub exitstatus: Option<String>,
    pub endtime: Option<u64>,
    /// When it started and ended, in ms since the simulator started (`GET /_sim/tasks`:
    /// what a benchmark measures a client's polling lag against).
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
}

impl Task {
    /// Who started it, as its UPID names them: `user@realm!token` for a token.
    pub fn token_user(&self) -> String {
        match &self.tokenid {
            Some(token) => format!("{}!{token}", self.user),
            None => self.user.clone(),
        }
    }
}

/// The addresses of one bridge/VLAN pair.
#[derive(Debug, Clone)]
pub struct Subnet {
    /// The second octet: `10.<index>.0.0/16`.
    pub index: u8,
    /// Lease slots: the MAC holding it (lower case); the slot number is the host offset.
    pub leases: Vec<Option<String>>,
}

impl Subnet {
    fn slot_of(&self, mac: &str) -> Option<usize> {
        self.leases
            .iter()
            .position(|held| held.as_deref().is_some_and(|m| m.eq_ignore_ascii_case(mac)))
    }
}

/// The prefix length of the addresses [`World::lease_ipv4`] hands out.
pub const LEASE_PREFIX: u8 = 16;

#[derive(Debug)]
pub struct World {
    pub version: VersionInfo,
    pub nodes: Vec<Node>,
    pub storages: Vec<StorageConfig>,
    pub volumes: BTreeMap<VolumeScope, BTreeMap<String, Volume>>,
    pub vms: BTreeMap<u32, Vm>,
    pub pools: BTreeMap<String, Pool>,
    pub tasks: HashMap<String, Task>,
    pub task_order: Vec<String>,
    pub journal: Vec<JournalEntry>,
    /// How many of the oldest journal entries were dropped to keep it bounded.
    pub journal_dropped: usize,
    pub faults: Faults,
    /// Hits per `faults.http` entry (for `count`).
    pub http_fault_hits: Vec<u64>,
    /// Tasks started per type since the faults were installed (for `task_failures`).
    pub task_counters: BTreeMap<String, u64>,
    pub timings: Timings,
    pub privileges: BTreeMap<String, Vec<String>>,
    pub mac_prefix: String,
    pub next_id_lower: u32,
    pub next_id_upper: u32,
    /// (bridge, vlan tag) -> its subnet and leases.
    pub ip_leases: BTreeMap<(String, u16), Subnet>,
    next_pid: u32,
    pub boot_time: u64,
    /// vmid -> (shared holders, exclusively held): the node-local config flocks.
    pub flocks: HashMap<u32, (u32, bool)>,
    /// The HA stack's configuration and the CRM's view.
    pub ha: crate::ha_state::HaState,
    /// When guests power off, halt or reboot by themselves (cloud-init `power_state`).
    pub guest_power: crate::guest_power::GuestPowerClock,
    /// When the simulator started: the zero of the journal's and the tasks' times.
    pub epoch: Instant,
}

/// Whole milliseconds from `since` to `until` (0 if `until` is earlier).
pub fn ms_between(since: Instant, until: Instant) -> u64 {
    u64::try_from(until.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX)
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl World {
    /// Milliseconds since the simulator started.
    pub fn elapsed_ms(&self) -> u64 {
        ms_between(self.epoch, Instant::now())
    }

    pub fn new(config: &SimConfig) -> World {
        let now = Instant::now();
        let mut world = World {
            version: config.version.clone(),
            nodes: config
                .nodes
                .iter()
                .map(|n| Node {
                    name: n.name.clone(),
                    online: n.online,
                    cpus: n.cpus,
                    memory_bytes: n.memory_bytes,
                    bridges: n.bridges.clone(),
                })
                .collect(),
            storages: config.storages.clone(),
            volumes: BTreeMap::new(),
            vms: BTreeMap::new(),
            pools: config
                .pools
                .iter()
                .map(|PoolConfig { poolid, comment }| {
                    (
                        poolid.clone(),
                        Pool {
                            comment: comment.clone(),
                            vms: BTreeSet::new(),
                        },
                    )
                })
                .collect(),
            tasks: HashMap::new(),
            task_order: Vec::new(),
            journal: Vec::new(),
            journal_dropped: 0,
            faults: Faults::default(),
            http_fault_hits: Vec::new(),
            task_counters: BTreeMap::new(),
            timings: config.timings.clone(),
            privileges: config.privileges.clone(),
            mac_prefix: config.mac_prefix.clone(),
            next_id_lower: config.next_id_lower,
            next_id_upper: config.next_id_upper,
            ip_leases: BTreeMap::new(),
            next_pid: 0x1000,
            boot_time: unix_now(),
            flocks: HashMap::new(),
            ha: crate::ha_state::HaState {
                rebalance_on_start: config.ha_rebalance_on_start,
                ..crate::ha_state::HaState::default()
            },
            guest_power: crate::guest_power::GuestPowerClock::default(),
            epoch: now,
        };
        world.set_faults(config.faults.clone());
        for seed in &config.vms {
            let mut vm = Vm {
                vmid: seed.vmid,
                node: seed.node.clone(),
                config: seed.config.clone(),
                pending: BTreeMap::new(),
                pending_delete: BTreeSet::new(),
                running: seed.running,
                paused: false,
                started_at: seed.running.then_some(now),
                stats_from: now,
                agent: None,
                guest: crate::guest::Guest::from_image(
                    config
                        .guest_profiles
                        .get(&seed.vmid)
                        .copied()
                        .unwrap_or_default(),
                ),
                pid: 0,
            };
            if seed.running {
                vm.pid = world.alloc_pid();
            }
            for (key, value) in &seed.config {
                if !is_drive_key(key) {
                    continue;
                }
                let drive = Drive::parse(value);
                if drive.is_cdrom() || drive.volid == "none" {
                    continue;
                }
                if let Some((storage, _)) = drive.volid.split_once(':') {
                    let scope = world.scope_for(storage, &seed.node);
                    let size = drive.size().unwrap_or(0);
                    let format = volume_format(&drive.volid);
                    world.put_volume(
                        scope,
                        &drive.volid,
                        size,
                        "images",
                        format,
                        None,
                        &seed.node,
                    );
                }
            }
            world.vms.insert(seed.vmid, vm);
        }
        world
    }

    /// Replace the faults; counters restart.
    pub fn set_faults(&mut self, faults: Faults) {
        self.http_fault_hits = vec![0; faults.http.len()];
        self.task_counters.clear();
        self.faults = faults;
    }

    pub fn alloc_pid(&mut self) -> u32 {
        self.next_pid += 1 + fastrand::u32(0..7);
        self.next_pid
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    pub fn node_online(&self, name: &str) -> bool {
        self.node(name).is_some_and(|n| n.online)
            && !self.faults.offline_nodes.iter().any(|n| n == name)
    }

    pub fn storage(&self, id: &str) -> Option<&StorageConfig> {
        self.storages.iter().find(|s| s.id == id)
    }

    pub fn storage_on_node(storage: &StorageConfig, node: &str) -> bool {
        storage
            .nodes
            .as_ref()
            .is_none_or(|nodes| nodes.iter().any(|n| n == node))
    }

    pub fn scope_for(&self, storage: &str, node: &str) -> VolumeScope {
        let shared = self.storage(storage).is_some_and(|s| s.shared);
        VolumeScope {
            storage: storage.to_string(),
            node: (!shared).then(|| node.to_string()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn put_volume(
        &mut self,
        scope: VolumeScope,
        volid: &str,
        size: u64,
        content: &str,
        format: &str,
        data: Option<bytes::Bytes>,
        origin_node: &str,
    ) {
        self.volumes.entry(scope).or_default().insert(
            volid.to_string(),
            Volume {
                volid: volid.to_string(),
                size,
                content: content.to_string(),
                format: format.to_string(),
                ctime: unix_now(),
                data,
                origin_node: origin_node.to_string(),
            },
        );
    }

    pub fn volume(&self, volid: &str, node: &str) -> Option<&Volume> {
        let (storage, _) = volid.split_once(':')?;
        self.volumes.get(&self.scope_for(storage, node))?.get(volid)
    }

    pub fn remove_volume(&mut self, volid: &str, node: &str) -> Option<Volume> {
        let (storage, _) = volid.split_once(':')?;
        let scope = self.scope_for(storage, node);
        self.volumes.get_mut(&scope)?.remove(volid)
    }

    pub fn volume_mut(&mut self, volid: &str, node: &str) -> Option<&mut Volume> {
        let (storage, _) = volid.split_once(':')?;
        let scope = self.scope_for(storage, node);
        self.volumes.get_mut(&scope)?.get_mut(volid)
    }

    pub fn used_bytes(&self, storage: &str, node: &str) -> u64 {
        self.volumes
            .get(&self.scope_for(storage, node))
            .map(|vols| vols.values().map(|v| v.size).sum())
            .unwrap_or(0)
    }

    /// A new disk volume for `vmid` on `storage`, named as that storage's plugin names it:
    /// `storage:vm-N-disk-M` on block storages, `storage:N/vm-N-disk-M.<format>` on
    /// file-based ones (format `raw` unless given). M is the lowest number no volume of the
    /// VM on that storage uses (pve-storage `Plugin.pm` `get_next_vm_diskname`).
    pub fn new_disk_volid(
        &self,
        storage: &str,
        node: &str,
        vmid: u32,
        format: Option<&str>,
        taken: &BTreeSet<String>,
    ) -> String {
        let file_based = self.storage(storage).is_some_and(|s| s.is_file_based());
        let n = self.next_disk_number(storage, node, vmid, taken);
        if file_based {
            let format = format.unwrap_or("raw");
            format!("{storage}:{vmid}/vm-{vmid}-disk-{n}.{format}")
        } else {
            format!("{storage}:vm-{vmid}-disk-{n}")
        }
    }

    /// A linked clone of `base` (a `base-…` volume) for `vmid`: `storage:BASEVMID/BASE/VMID/
    /// vm-VMID-disk-M.<format>` on file-based storages, a bare `storage:vm-VMID-disk-M` on
    /// LVM-thin, `storage:BASE/vm-VMID-disk-M` on the other block ones (ZFS, RBD): what each
    /// plugin's `clone_image` returns.
    pub fn linked_clone_volid(
        &self,
        base: &str,
        node: &str,
        vmid: u32,
        taken: &BTreeSet<String>,
    ) -> String {
        let (storage, base_name) = base.split_once(':').unwrap_or_default();
        let n = self.next_disk_number(storage, node, vmid, taken);
        if self.storage(storage).is_some_and(|s| s.is_file_based()) {
            let format = volume_format(base);
            format!("{storage}:{base_name}/{vmid}/vm-{vmid}-disk-{n}.{format}")
        } else if self
            .storage(storage)
            .is_some_and(|s| s.plugin_type == "lvmthin")
        {
            format!("{storage}:vm-{vmid}-disk-{n}")
        } else {
            format!("{storage}:{base_name}/vm-{vmid}-disk-{n}")
        }
    }

    fn next_disk_number(
        &self,
        storage: &str,
        node: &str,
        vmid: u32,
        taken: &BTreeSet<String>,
    ) -> u32 {
        let existing = self.volumes.get(&self.scope_for(storage, node));
        let used: BTreeSet<u32> = existing
            .into_iter()
            .flat_map(|vols| vols.keys())
            .chain(taken.iter())
            .filter_map(|volid| disk_number(volid, vmid))
            .collect();
        (0..).find(|n| !used.contains(n)).unwrap_or_default()
    }

    /// A random MAC with the datacenter prefix, unique among existing VMs.
    pub fn random_mac(&self) -> String {
        loop {
            let mac = format!(
                "{}:{:02X}:{:02X}:{:02X}",
                self.mac_prefix,
                fastrand::u8(..),
                fastrand::u8(..),
                fastrand::u8(..)
            );
            let used = self
                .vms
                .values()
                .any(|vm| vm.config.values().any(|v| v.contains(&mac)));
            if !used {
                return mac;
            }
        }
    }

    /// The IPv4 address for a MAC on a bridge/VLAN: one /16 per (bridge, tag) (`10.<n>.0.0`,
    /// n in order of first use), hosts from `.0.10` on. A lease whose MAC no longer belongs
    /// to any VM (destroyed, or given a new NIC) is handed out again, so any number of VMs
    /// made and destroyed over time get addresses. `None` once 65,525 live VMs share one
    /// bridge/VLAN, or past 256 bridge/VLAN pairs.
    pub fn lease_ipv4(&mut self, bridge: &str, tag: u16, mac: &str) -> Option<String> {
        let key = (bridge.to_string(), tag);
        let networks = self.ip_leases.len();
        if !self.ip_leases.contains_key(&key) && networks > usize::from(u8::MAX) {
            return None;
        }
        let live = if self
            .ip_leases
            .get(&key)
            .is_some_and(|net| net.slot_of(mac).is_some())
        {
            BTreeSet::new()
        } else {
            self.live_macs()
        };
        let subnet = self.ip_leases.entry(key).or_insert_with(|| Subnet {
            index: networks as u8,
            leases: Vec::new(),
        });
        let slot = match subnet.slot_of(mac) {
            Some(slot) => slot,
            None => {
                let free = subnet
                    .leases
                    .iter()
                    .position(|held| held.as_ref().is_none_or(|m| !live.contains(m)));
                let slot = free.unwrap_or(subnet.leases.len());
                if slot == subnet.leases.len() {
                    subnet.leases.push(None);
                }
                subnet.leases[slot] = Some(mac.to_ascii_lowercase());
                slot
            }
        };
        let host = 10 + slot;
        // 10.n.255.255 is the broadcast address.
        if host >= 0xFFFF {
            return None;
        }
        Some(format!("10.{}.{}.{}", subnet.index, host / 256, host % 256))
    }

    /// The MACs (lower case) of every VM's NICs.
    fn live_macs(&self) -> BTreeSet<String> {
        self.vms
            .values()
            .flat_map(|vm| vm.config.iter())
            .filter(|(key, _)| key.starts_with("net"))
            .filter_map(|(_, value)| {
                let model = value.split(',').next()?;
                let (_, mac) = model.split_once('=')?;
                Some(mac.to_ascii_lowercase())
            })
            .collect()
    }

    pub fn has_privilege(&self, path: &str, privilege: &str) -> bool {
        // A pool's ACLs reach its member VMs (pve-access-control `RPCEnvironment.pm`
        // `$compile_acl_path`, "roles inherited from pools").
        let member_of = path
            .strip_prefix("/vms/")
            .and_then(|vmid| vmid.parse::<u32>().ok())
            .and_then(|vmid| self.pools.iter().find(|(_, p)| p.vms.contains(&vmid)));
        if let Some((poolid, _)) = member_of
            && self.has_acl_privilege(&format!("/pool/{poolid}"), privilege)
        {
            return true;
        }
        self.has_acl_privilege(path, privilege)
    }

    fn has_acl_privilege(&self, path: &str, privilege: &str) -> bool {
        // ACLs propagate downwards: check the path and each of its parents.
        let mut candidate = path.to_string();
        loop {
            if self
                .privileges
                .get(&candidate)
                .is_some_and(|privs| privs.iter().any(|p| p == privilege))
            {
                return true;
            }
            if candidate == "/" {
                return false;
            }
            candidate = match candidate.rfind('/') {
                Some(0) | None => "/".to_string(),
                Some(i) => candidate[..i].to_string(),
            };
        }
    }

    /// Takes all the flocks or none; returns the first busy VMID.
    pub fn try_flock_all(&mut self, wanted: &[(u32, bool)]) -> Option<u32> {
        for (vmid, exclusive) in wanted {
            let (shared, held) = self.flocks.get(vmid).copied().unwrap_or((0, false));
            if held || (*exclusive && shared > 0) {
                return Some(*vmid);
            }
        }
        for (vmid, exclusive) in wanted {
            let entry = self.flocks.entry(*vmid).or_insert((0, false));
            if *exclusive {
                entry.1 = true;
            } else {
                entry.0 += 1;
            }
        }
        None
    }

    pub fn release_flocks(&mut self, held: &[(u32, bool)]) {
        for (vmid, exclusive) in held {
            if let Some(entry) = self.flocks.get_mut(vmid) {
                if *exclusive {
                    entry.1 = false;
                } else {
                    entry.0 = entry.0.saturating_sub(1);
                }
                if *entry == (0, false) {
                    self.flocks.remove(vmid);
                }
            }
        }
    }

    /// Whether someone holds the VM's flock (a synchronous writer would have to wait).
    pub fn flock_busy(&self, vmid: u32) -> bool {
        self.flocks
            .get(&vmid)
            .is_some_and(|(shared, held)| *held || *shared > 0)
    }

    pub fn find_task(&self, upid: &str) -> Option<&Task> {
        self.tasks.get(upid)
    }
}

/// The image format a volume name implies: file-based names carry it as their extension,
/// block volumes are raw.
pub fn volume_format(volid: &str) -> &'static str {
    if volid.ends_with(".qcow2") {
        "qcow2"
    } else if volid.ends_with(".vmdk") {
        "vmdk"
    } else {
        "raw"
    }
}

/// The file name of a volume: the last path component of its name (`vm-101-disk-0.qcow2`
/// for `vmdata:9000/base-9000-disk-0.qcow2/101/vm-101-disk-0.qcow2`).
pub fn volume_file_name(volid: &str) -> &str {
    let name = volid.split_once(':').map_or(volid, |x| x.1);
    name.rsplit('/').next().unwrap_or(name)
}

/// The VMID owning a disk volume (`vm-N-…`/`base-N-…` as its file name).
pub fn volume_owner(volid: &str) -> Option<u32> {
    let file = volume_file_name(volid);
    let rest = file
        .strip_prefix("vm-")
        .or_else(|| file.strip_prefix("base-"))?;
    rest.split('-').next()?.parse().ok()
}

/// `(vm|base)-VMID-disk-(\d+)` anywhere in the name, as `get_vm_disk_number` matches.
fn disk_number(volid: &str, vmid: u32) -> Option<u32> {
    let file = volume_file_name(volid);
    let rest = file
        .strip_prefix(&format!("vm-{vmid}-disk-"))
        .or_else(|| file.strip_prefix(&format!("base-{vmid}-disk-")))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Config keys that are drives.
pub fn is_drive_key(key: &str) -> bool {
    let prefixes: [(&str, u32); 7] = [
        ("ide", 4),
        ("sata", 6),
        ("scsi", 31),
        ("virtio", 16),
        ("efidisk", 1),
        ("tpmstate", 1),
        ("unused", 256),
    ];
    prefixes.iter().any(|(prefix, count)| {
        key.strip_prefix(prefix)
            .and_then(|n| n.parse::<u32>().ok().filter(|_| !n.starts_with('+')))
            .is_some_and(|n| n < *count)
    })
}

pub fn is_net_key(key: &str) -> bool {
    key.strip_prefix("net")
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| n < 32)
}

/// A parsed drive property string (`vmdata:vm-100-disk-0,size=8G,iothread=1`).
#[derive(Debug, Clone, Default)]
pub struct Drive {
    pub volid: String,
    pub options: Vec<(String, String)>,
}

impl Drive {
    pub fn parse(value: &str) -> Drive {
        let mut parts = value.split(',');
        let first = parts.next().unwrap_or_default();
        let mut volid = String::new();
        let mut options = Vec::new();
        if let Some(file) = first.strip_prefix("file=") {
            volid = file.to_string();
        } else if !first.contains('=') {
            volid = first.to_string();
        } else if let Some((k, v)) = first.split_once('=') {
            options.push((k.to_string(), v.to_string()));
        }
        for part in parts {
            match part.split_once('=') {
                Some(("file", v)) => volid = v.to_string(),
                Some((k, v)) => options.push((k.to_string(), v.to_string())),
                None => options.push((part.to_string(), String::new())),
            }
        }
        Drive { volid, options }
    }

    pub fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn set_option(&mut self, key: &str, value: String) {
        match self.options.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.options.push((key.to_string(), value)),
        }
    }

    pub fn is_cdrom(&self) -> bool {
        self.option("media") == Some("cdrom")
    }

    pub fn size(&self) -> Option<u64> {
        self.option("size").and_then(parse_size)
    }

    pub fn print(&self) -> String {
        let mut out = self.volid.clone();
        for (k, v) in &self.options {
            out.push(',');
            out.push_str(k);
            out.push('=');
            out.push_str(v);
        }
        out
    }
}

/// `8G`, `512M`, `1024` (bytes), `1.5G` -> bytes.
pub fn parse_size(text: &str) -> Option<u64> {
    let (number, unit) = match text.chars().last()? {
        'K' | 'k' => (&text[..text.len() - 1], 1u64 << 10),
        'M' | 'm' => (&text[..text.len() - 1], 1 << 20),
        'G' | 'g' => (&text[..text.len() - 1], 1 << 30),
        'T' | 't' => (&text[..text.len() - 1], 1 << 40),
        _ => (text, 1),
    };
    let value: f64 = number.parse().ok()?;
    if value < 0.0 {
        return None;
    }
    Some((value * unit as f64) as u64)
}

/// PVE's `format_size`: the largest unit that divides the size exactly.
pub fn format_size(bytes: u64) -> String {
    for (unit, factor) in [
        ("T", 1u64 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ] {
        if bytes >= factor && bytes.is_multiple_of(factor) {
            return format!("{}{unit}", bytes / factor);
        }
    }
    bytes.to_string()
}

/// A parsed `netX` value.
#[derive(Debug, Clone, Default)]
pub struct Net {
    pub model: String,
    pub mac: Option<String>,
    pub options: BTreeMap<String, String>,
}

impl Net {
    pub fn parse(value: &str) -> Net {
        let mut net = Net::default();
        for part in value.split(',') {
            let (key, val) = part.split_once('=').unwrap_or((part, ""));
            if NIC_MODELS.contains(&key) {
                net.model = key.to_string();
                if !val.is_empty() {
                    net.mac = Some(val.to_uppercase());
                }
            } else if key == "model" {
                net.model = val.to_string();
            } else if key == "macaddr" {
                net.mac = Some(val.to_uppercase());
            } else if !key.is_empty() {
                net.options.insert(key.to_string(), val.to_string());
            }
        }
        net
    }

    /// PVE's canonical order: `model=MAC`, then the other keys sorted.
    pub fn print(&self) -> String {
        let mut out = match &self.mac {
            Some(mac) => format!("{}={mac}", self.model),
            None => self.model.clone(),
        };
        for (k, v) in &self.options {
            out.push_str(&format!(",{k}={v}"));
        }
        out
    }

    pub fn bridge(&self) -> Option<&str> {
        self.options.get("bridge").map(String::as_str)
    }

    pub fn tag(&self) -> u16 {
        self.options
            .get("tag")
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
    }
}

/// Split on `[,; ]`, lower-case, de-duplicate, sort, join with `;` (PVE's stored form).
pub fn normalise_tags(text: &str) -> String {
    let tags: BTreeSet<String> = text
        .split([',', ';', ' ', '\0'])
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect();
    tags.into_iter().collect::<Vec<_>>().join(";")
}

/// A stand-in for PVE's SHA1 config digest: 40 hex characters derived from the config.
pub fn config_digest(
    config: &BTreeMap<String, String>,
    pending: &BTreeMap<String, String>,
) -> String {
    let mut hasher = Sha256::new();
    for (k, v) in config {
        hasher.update(k.as_bytes());
        hasher.update(b"\0");
        hasher.update(v.as_bytes());
        hasher.update(b"\n");
    }
    hasher.update(b"[PENDING]\n");
    for (k, v) in pending {
        hasher.update(k.as_bytes());
        hasher.update(b"\0");
        hasher.update(v.as_bytes());
    }
    let digest = hasher.finalize();
    digest[..20].iter().map(|b| format!("{b:02x}")).collect()
}

/// Config keys PVE parses as integers or booleans, so `GET config` emits them as JSON numbers.
pub const NUMERIC_CONFIG_KEYS: &[&str] = &[
    "acpi",
    "autostart",
    "balloon",
    "cores",
    "cpulimit",
    "cpuunits",
    "freeze",
    "kvm",
    "localtime",
    "migrate_downtime",
    "migrate_speed",
    "numa",
    "onboot",
    "protection",
    "reboot",
    "shares",
    "sockets",
    "tablet",
    "template",
    "vcpus",
    "keephugepages",
];

pub fn typed_config_value(key: &str, value: &str) -> Value {
    if NUMERIC_CONFIG_KEYS.contains(&key) {
        if let Ok(n) = value.parse::<i64>() {
            return json!(n);
        }
        if let Ok(f) = value.parse::<f64>() {
            return json!(f);
        }
    }
    json!(value)
}

/// Boot disk size: the first disk in `boot: order=` or the first non-cdrom drive.
pub fn boot_disk_size(config: &BTreeMap<String, String>) -> u64 {
    let from_order = config
        .get("boot")
        .and_then(|b| b.strip_prefix("order="))
        .and_then(|order| {
            order.split(';').find_map(|key| {
                config
                    .get(key)
                    .map(|v| Drive::parse(v))
                    .filter(|d| !d.is_cdrom())
                    .and_then(|d| d.size())
            })
        });
    from_order
        .or_else(|| {
            config.iter().find_map(|(k, v)| {
                (is_drive_key(k) && !k.starts_with("unused"))
                    .then(|| Drive::parse(v))
                    .filter(|d| !d.is_cdrom())
                    .and_then(|d| d.size())
            })
        })
        .unwrap_or(0)
}

/// `memory` is a property string since PVE 8.1 (`current` default key) - megabytes.
pub fn memory_mib(config: &BTreeMap<String, String>) -> u64 {
    config
        .get("memory")
        .and_then(|m| {
            m.split(',')
                .find_map(|part| match part.split_once('=') {
                    Some(("current", v)) => Some(v),
                    None => Some(part),
                    _ => None,
                })
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(512)
}

pub fn cpu_count(config: &BTreeMap<String, String>) -> u64 {
    let num = |k: &str, d: u64| config.get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
    config
        .get("vcpus")
        .and_then(|v| v.parse().ok())
        .unwrap_or(num("cores", 1) * num("sockets", 1))
}

/// Whether the `agent` property string enables the agent (`1`, `enabled=1`, ...).
pub fn agent_enabled(value: &str) -> bool {
    value.split(',').any(|part| match part.split_once('=') {
        Some(("enabled", v)) => v == "1",
        None => part == "1",
        _ => false,
    })
}

/// The `vmstatus` row for a VM (status/current and the qemu list share it).
pub fn vm_status_json(vm: &Vm, now: Instant, with_extras: bool) -> Value {
    let config = &vm.config;
    let maxmem = memory_mib(config) * 1024 * 1024;
    let mut row = serde_json::Map::new();
    row.insert("vmid".into(), json!(vm.vmid));
    row.insert(
        "status".into(),
        json!(if vm.running { "running" } else { "stopped" }),
    );
    let qmpstatus = match (vm.running, vm.paused) {
        (true, true) => "paused",
        (true, false) => "running",
        _ => "stopped",
    };
    row.insert("name".into(), json!(vm.name()));
    row.insert("cpus".into(), json!(cpu_count(config)));
    row.insert("maxmem".into(), json!(maxmem));
    row.insert("maxdisk".into(), json!(boot_disk_size(config)));
    row.insert("disk".into(), json!(0));
    let uptime = vm
        .started_at
        .filter(|_| vm.running)
        .map(|t| now.saturating_duration_since(t).as_secs())
        .unwrap_or(0);
    row.insert("uptime".into(), json!(uptime));
    row.insert("mem".into(), json!(if vm.running { maxmem / 4 } else { 0 }));
    row.insert("cpu".into(), json!(if vm.running { 0.01 } else { 0.0 }));
    for key in ["netin", "netout", "diskread", "diskwrite"] {
        row.insert(key.into(), json!(0));
    }
    if vm.running {
        row.insert("pid".into(), json!(vm.pid));
    }
    if let Some(lock) = vm.lock() {
        row.insert("lock".into(), json!(lock));
    }
    if let Some(tags) = config.get("tags") {
        row.insert("tags".into(), json!(tags));
    }
    if vm.is_template() {
        row.insert("template".into(), json!(1));
    }
    if with_extras {
        row.insert("qmpstatus".into(), json!(qmpstatus));
        row.insert("ha".into(), json!({"managed": 0}));
        if config.get("agent").is_some_and(|a| agent_enabled(a)) {
            row.insert("agent".into(), json!(1));
        }
        if vm.running {
            row.insert("running-machine".into(), json!("pc-i440fx-10.0+pve0"));
            row.insert("running-qemu".into(), json!("10.0.2"));
        }
    }
    Value::Object(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_nic(world: &mut World, vmid: u32, mac: &str) {
        let mut vm = world.vms[&9000].clone();
        vm.vmid = vmid;
        vm.config.remove("template");
        vm.config
            .insert("net0".into(), format!("virtio={mac},bridge=vmbr0"));
        world.vms.insert(vmid, vm);
    }

    #[test]
    fn addresses_outlast_a_slash_24_and_come_back_when_their_vm_goes() {
        let mut world = World::new(&SimConfig::default());
        let mut seen = BTreeSet::new();
        for n in 0..600u32 {
            let mac = format!("BC:24:11:00:{:02X}:{:02X}", n / 256, n % 256);
            with_nic(&mut world, 1000 + n, &mac);
            let ip = world.lease_ipv4("vmbr0", 0, &mac).expect("an address");
            // Asking again is the same lease.
            assert_eq!(world.lease_ipv4("vmbr0", 0, &mac).as_ref(), Some(&ip));
            assert!(seen.insert(ip), "address handed out twice");
        }
        assert!(seen.contains("10.0.0.10") && seen.contains("10.0.2.97"));
        let first = world.lease_ipv4("vmbr0", 0, "BC:24:11:00:00:00").unwrap();
        world.vms.remove(&1000);
        with_nic(&mut world, 2000, "BC:24:11:FF:00:00");
        assert_eq!(
            world.lease_ipv4("vmbr0", 0, "BC:24:11:FF:00:00"),
            Some(first),
            "the destroyed VM's address is handed out again"
        );
        // Another VLAN is another /16.
        assert_eq!(
            world
                .lease_ipv4("vmbr0", 20, "BC:24:11:FF:00:00")
                .as_deref(),
            Some("10.1.0.10")
        );
    }

    #[test]
    fn sizes_round_trip_in_pve_units() {
        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(format_size(20 << 30), "20G");
        assert_eq!(format_size(1536 << 20), "1536M");
        assert_eq!(format_size(1000), "1000");
    }

    #[test]
    fn net_prints_in_canonical_order() {
        let net = Net::parse("bridge=vmbr1,virtio=bc:24:11:aa:bb:cc,tag=20,firewall=1");
        assert_eq!(
            net.print(),
            "virtio=BC:24:11:AA:BB:CC,bridge=vmbr1,firewall=1,tag=20"
        );
        assert_eq!(net.tag(), 20);
        assert!(Net::parse("virtio,bridge=vmbr0").mac.is_none());
    }

    #[test]
    fn tags_are_normalised_like_pve() {
        assert_eq!(normalise_tags("Proxy,b a"), "a;b;proxy");
        assert_eq!(normalise_tags("x;x; y"), "x;y");
    }

    #[test]
    fn drive_keys() {
        assert!(is_drive_key("scsi0"));
        assert!(is_drive_key("ide2"));
        assert!(!is_drive_key("ide4"));
        assert!(!is_drive_key("net0"));
        assert!(is_net_key("net0"));
    }

    #[test]
    fn memory_property_string() {
        let mut cfg = BTreeMap::new();
        cfg.insert("memory".to_string(), "current=2048".to_string());
        assert_eq!(memory_mib(&cfg), 2048);
        cfg.insert("memory".to_string(), "4096".to_string());
        assert_eq!(memory_mib(&cfg), 4096);
    }

    #[test]
    fn acl_paths_propagate() {
        let mut world = World::new(&SimConfig::default());
        world.privileges = BTreeMap::from([("/vms".to_string(), vec!["VM.Audit".to_string()])]);
        assert!(world.has_privilege("/vms/100", "VM.Audit"));
        assert!(!world.has_privilege("/nodes/pve1", "VM.Audit"));
        assert!(!world.has_privilege("/vms/100", "VM.Allocate"));
    }
}
