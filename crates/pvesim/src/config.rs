//! The simulator's configuration: the initial world, the token and its privileges, task
//! timings and faults. Deserialised from the `--config` JSON file; `Default` is the default
//! world described in the README.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::cost::profile::{CostProfile, ServiceTimes, StorageCost};
use crate::guest_profile::GuestProfile;

/// Everything that shapes a simulated cluster. Every field has a default, so a config file
/// only names what it changes.
#[derive(Clone, Deserialize)]
#[serde(from = "SimConfigFile")]
pub struct SimConfig {
    /// What `GET /version` reports.
    pub version: VersionInfo,
    pub nodes: Vec<NodeConfig>,
    pub storages: Vec<StorageConfig>,
    pub vms: Vec<VmSeed>,
    pub pools: Vec<PoolConfig>,
    /// The accepted API token id (`USER@REALM!TOKENID`).
    pub token_id: String,
    /// The token secret; `None` = a fresh random UUID per start.
    pub token_secret: Option<String>,
    /// ACL path -> privileges the token holds there (propagating to sub-paths).
    pub privileges: BTreeMap<String, Vec<String>>,
    pub timings: Timings,
    pub faults: Faults,
    /// datacenter.cfg `mac_prefix`.
    pub mac_prefix: String,
    /// datacenter.cfg `next-id`: lower (inclusive) and upper (exclusive) bounds.
    pub next_id_lower: u32,
    pub next_id_upper: u32,
    /// datacenter.cfg `crs: ha-rebalance-on-start=1`: the HA manager chooses the node a
    /// service starts on whenever it goes from stopped to started (README "HA").
    pub ha_rebalance_on_start: bool,
    /// What requests, locks and clones cost, as on a real node; `None` (the default) = every
    /// request is served at once.
    pub cost_profile: Option<CostProfile>,
    /// VMID -> the image its disk holds (README "Guest profiles"; a clone inherits it);
    /// a VM not named here holds the default profile. The config file writes it as
    /// `vms[].guest_profile`.
    pub guest_profiles: BTreeMap<u32, GuestProfile>,
}

/// The config file's shape: [`SimConfig`] with each VM's `guest_profile` beside it.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct SimConfigFile {
    version: VersionInfo,
    nodes: Vec<NodeConfig>,
    storages: Vec<StorageConfig>,
    vms: Vec<VmSeedFile>,
    pools: Vec<PoolConfig>,
    token_id: String,
    token_secret: Option<String>,
    privileges: BTreeMap<String, Vec<String>>,
    timings: Timings,
    faults: Faults,
    mac_prefix: String,
    next_id_lower: u32,
    next_id_upper: u32,
    ha_rebalance_on_start: bool,
    cost_profile: Option<CostProfile>,
}

/// A `vms[]` entry of the config file.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct VmSeedFile {
    vmid: u32,
    node: String,
    running: bool,
    config: BTreeMap<String, String>,
    guest_profile: Option<GuestProfile>,
}

impl Default for VmSeedFile {
    fn default() -> Self {
        let VmSeed {
            vmid,
            node,
            running,
            config,
        } = VmSeed::default();
        VmSeedFile {
            vmid,
            node,
            running,
            config,
            guest_profile: None,
        }
    }
}

impl Default for SimConfigFile {
    fn default() -> Self {
        let defaults = SimConfig::default();
        let vms = defaults.vms.into_iter().map(|vm| VmSeedFile {
            guest_profile: defaults.guest_profiles.get(&vm.vmid).copied(),
            vmid: vm.vmid,
            node: vm.node,
            running: vm.running,
            config: vm.config,
        });
        SimConfigFile {
            version: defaults.version,
            nodes: defaults.nodes,
            storages: defaults.storages,
            vms: vms.collect(),
            pools: defaults.pools,
            token_id: defaults.token_id,
            token_secret: defaults.token_secret,
            privileges: defaults.privileges,
            timings: defaults.timings,
            faults: defaults.faults,
            mac_prefix: defaults.mac_prefix,
            next_id_lower: defaults.next_id_lower,
            next_id_upper: defaults.next_id_upper,
            ha_rebalance_on_start: defaults.ha_rebalance_on_start,
            cost_profile: defaults.cost_profile,
        }
    }
}

impl From<SimConfigFile> for SimConfig {
    fn from(file: SimConfigFile) -> SimConfig {
        let guest_profiles = file
            .vms
            .iter()
            .filter_map(|vm| Some((vm.vmid, vm.guest_profile?)))
            .collect();
        let vms = file.vms.into_iter().map(|vm| VmSeed {
            vmid: vm.vmid,
            node: vm.node,
            running: vm.running,
            config: vm.config,
        });
        SimConfig {
            version: file.version,
            nodes: file.nodes,
            storages: file.storages,
            vms: vms.collect(),
            pools: file.pools,
            token_id: file.token_id,
            token_secret: file.token_secret,
            privileges: file.privileges,
            timings: file.timings,
            faults: file.faults,
            mac_prefix: file.mac_prefix,
            next_id_lower: file.next_id_lower,
            next_id_upper: file.next_id_upper,
            ha_rebalance_on_start: file.ha_rebalance_on_start,
            guest_profiles,
            cost_profile: file.cost_profile,
        }
    }
}

impl std::fmt::Debug for SimConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token secret is a credential: never printed.
        f.debug_struct("SimConfig")
            .field("version", &self.version)
            .field("nodes", &self.nodes)
            .field("storages", &self.storages)
            .field("vms", &self.vms.len())
            .field("pools", &self.pools)
            .field("token_id", &self.token_id)
            .field(
                "token_secret",
                &self.token_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("privileges", &self.privileges)
            .field("timings", &self.timings)
            .field("faults", &self.faults)
            .field("ha_rebalance_on_start", &self.ha_rebalance_on_start)
            .field("guest_profiles", &self.guest_profiles)
            .field("cost_profile", &self.cost_profile)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct VersionInfo {
    pub version: String,
    pub release: String,
    pub repoid: String,
}

impl Default for VersionInfo {
    fn default() -> Self {
        VersionInfo {
            version: "9.2.11".into(),
            release: "9.2".into(),
            repoid: "5a1c0e6b0d2f1c7e".into(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    pub name: String,
    pub online: bool,
    pub cpus: u32,
    pub memory_bytes: u64,
    pub bridges: Vec<String>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            name: "pve1".into(),
            online: true,
            cpus: 16,
            memory_bytes: 64 << 30,
            bridges: vec!["vmbr0".into()],
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    pub id: String,
    /// Storage plugin type (`dir`, `nfs`, `rbd`, `lvmthin`, ...).
    #[serde(rename = "type")]
    pub plugin_type: String,
    /// Content types (`iso`, `images`, `vztmpl`, `import`, ...).
    pub content: Vec<String>,
    pub shared: bool,
    /// Nodes the storage is available on; `None` = all nodes.
    pub nodes: Option<Vec<String>>,
    pub enabled: bool,
    pub total_bytes: u64,
    /// Whether files can be uploaded (storages with a path, e.g. `dir`, `nfs`).
    pub has_path: bool,
}

impl StorageConfig {
    /// File-based plugins (a directory per VM holding `vm-N-disk-M.<format>` files) as
    /// opposed to block plugins (`lvm`, `lvmthin`, `zfspool`, `rbd`, ...) whose volumes are
    /// bare `vm-N-disk-M` names (pve-storage `Plugin.pm` `parse_volname` vs. the block
    /// plugins' own).
    pub fn is_file_based(&self) -> bool {
        matches!(
            self.plugin_type.as_str(),
            "dir" | "nfs" | "cifs" | "cephfs" | "glusterfs" | "btrfs"
        )
    }

    /// The mount point or directory PVE uses for a file-based storage.
    pub fn path(&self) -> String {
        if self.id == "local" && self.plugin_type == "dir" {
            "/var/lib/vz".to_string()
        } else {
            format!("/mnt/pve/{}", self.id)
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            id: "local".into(),
            plugin_type: "dir".into(),
            content: vec!["iso".into()],
            shared: false,
            nodes: None,
            enabled: true,
            total_bytes: 100 << 30,
            has_path: true,
        }
    }
}

/// A VM present at start. `config` holds raw config-file values (`"cores": "2"`,
/// `"scsi0": "vmdata:base-9000-disk-0,size=8G"`); disk volumes named in it are created.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VmSeed {
    pub vmid: u32,
    pub node: String,
    pub running: bool,
    pub config: BTreeMap<String, String>,
}

impl Default for VmSeed {
    fn default() -> Self {
        VmSeed {
            vmid: 100,
            node: "pve1".into(),
            running: false,
            config: BTreeMap::new(),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    pub poolid: String,
    pub comment: Option<String>,
}

/// Durations of simulated work, in milliseconds.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Timings {
    /// Task type (`qmclone`, `qmconfig`, `resize`, `qmstart`, ...) -> run time.
    pub task_ms: BTreeMap<String, u64>,
    /// Time from `qmstart` finishing until a correctly seeded guest agent answers.
    pub agent_boot_ms: u64,
    /// How long the agent check waits before "QEMU guest agent is not running" (PVE: 3000).
    pub agent_ping_timeout_ms: u64,
    /// Delay before a 401 (PVE: 3000).
    pub auth_fail_delay_ms: u64,
    /// Time after a VM appears until `/cluster/resources` shows its name and status
    /// (pvestatd's stats cycle).
    pub cluster_resources_lag_ms: u64,
    /// Time from a clone's UPID until its worker has written the new VM's temporary config
    /// (`lock: clone`): PVE answers before the fork, so the new VMID briefly does not exist.
    pub clone_config_ms: u64,
    /// Time from the agent's first answer until cloud-init's final stage has finished
    /// and written `/run/cloud-init/result.json`.
    pub cloud_init_ms: u64,
    /// The same for a guest of the `slow-provisioner` profile.
    pub slow_provisioner_ms: u64,
    /// Time from an HA request (a resource change, `hastart`/`hastop`/`hamigrate`, a node
    /// failure) until the HA manager acts on it (PVE's CRM and LRM rounds, ~10 s; a failed
    /// node is fenced after 60 s and more).
    pub ha_delay_ms: u64,
    /// How long a node rebooted through `POST /_sim/nodes/{node}/reboot` is offline.
    pub node_reboot_ms: u64,
    /// How long one second of a `startup` `up=` delay (and startall's default 3 s between
    /// two VMs) lasts.
    pub startup_second_ms: u64,
    /// How long one second of a shutdown's or reboot's `timeout` lasts: PVE waits that long
    /// for a guest that ignores the ACPI request (`acpi_ignored`) before it gives up.
    pub shutdown_second_ms: u64,
}

impl Timings {
    pub fn task(&self, task_type: &str) -> u64 {
        self.task_ms.get(task_type).copied().unwrap_or(20)
    }
}

impl Default for Timings {
    fn default() -> Self {
        let task_ms = [
            ("qmclone", 200),
            ("qmconfig", 20),
            ("resize", 20),
            ("qmstart", 50),
            ("qmstop", 20),
            ("qmshutdown", 50),
            ("qmreboot", 50),
            ("qmdestroy", 50),
            ("qmsuspend", 20),
            ("qmresume", 20),
            ("qmigrate", 300),
            ("hastart", 10),
            ("hastop", 10),
            ("hamigrate", 10),
            ("imgcopy", 20),
            ("imgdel", 10),
        ]
        .into_iter()
        .map(|(task_type, ms)| (task_type.to_string(), ms))
        .collect();
        Timings {
            task_ms,
            agent_boot_ms: 500,
            agent_ping_timeout_ms: 100,
            auth_fail_delay_ms: 0,
            cluster_resources_lag_ms: 300,
            clone_config_ms: 20,
            cloud_init_ms: 300,
            slow_provisioner_ms: 180_000,
            ha_delay_ms: 200,
            node_reboot_ms: 500,
            startup_second_ms: 100,
            shutdown_second_ms: 10,
        }
    }
}

/// Faults to inject; replaceable at runtime through `PUT /_sim/faults`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Extra delay before every PVE API request is handled.
    pub latency_ms: u64,
    pub http: Vec<HttpFault>,
    pub task_failures: Vec<TaskFailure>,
    pub held_locks: Vec<HeldLock>,
    /// Tasks whose workers, once their run time is over, wait while this lists them,
    /// before their effect and their end: a worker stuck on slow storage, caught between
    /// its prologue (a destroy's freed disks and `lock: destroyed`) and its end.
    pub stalled_tasks: Vec<StalledTask>,
    /// Every token request fails with 401 (the admin API keeps working).
    pub token_revoked: bool,
    /// Nodes that answer 595 (in addition to nodes configured `online: false`).
    pub offline_nodes: Vec<String>,
    /// cloud-init fails (or is degraded) at the first boot of an instance of the VMs
    /// whose name matches.
    pub cloud_init_errors: Vec<CloudInitErrors>,
    /// qemu-ga commands disabled in the guests of the VMs whose name matches (its
    /// `block-rpcs` / `allow-rpcs` configuration, as some distributions ship it).
    pub agent_blocked_commands: Vec<AgentBlockedCommands>,
    /// Regexes (unanchored) of VM names whose guests ignore ACPI power-button events (no
    /// systemd-logind or acpid): a shutdown or reboot PVE asks by ACPI (no agent answering)
    /// runs out its `timeout`.
    pub acpi_ignored: Vec<String>,
    /// The image of the VMs whose name matches, decided at a VM's first boot (README
    /// "Guest profiles").
    pub guest_profiles: Vec<GuestProfileChoice>,
}

/// A VM whose name matches `vm_name_regex` (unanchored) first boots as made from `profile`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GuestProfileChoice {
    pub vm_name_regex: String,
    pub profile: GuestProfile,
}

/// What cloud-init reports for a VM whose name matches `vm_name_regex` (unanchored).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CloudInitErrors {
    pub vm_name_regex: String,
    /// `modules-final` errors: `result.json` `v1.errors` (cloud-init status `error`).
    pub errors: Vec<String>,
    /// Warnings: `status.json` `recoverable_errors.WARNING` (cloud-init status `degraded`).
    pub recoverable_errors: Vec<String>,
}

/// qemu-ga commands (`guest-file-open`, `guest-file-read`, ...) disabled in the guest of a
/// VM whose name matches `vm_name_regex` (unanchored).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AgentBlockedCommands {
    pub vm_name_regex: String,
    pub commands: Vec<String>,
}

/// Fail matching requests with a status code or a dropped connection.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HttpFault {
    /// HTTP method to match; `None` = any.
    pub method: Option<String>,
    /// Regex matched (unanchored) against the path after `/api2/json`.
    pub path_regex: String,
    /// Status to answer (e.g. 500, 503, 596); ignored when `reset`.
    pub status: Option<u16>,
    /// Drop the connection without a response.
    pub reset: bool,
    /// With `reset`: handle the request first, then drop the connection, so the answer is
    /// lost although the request took effect (the client cannot tell which happened).
    pub after_handling: bool,
    /// Fire at most this many times; `None` = unlimited.
    pub count: Option<u64>,
    /// Probability of firing for a matching request.
    pub rate: f64,
}

impl Default for HttpFault {
    fn default() -> Self {
        HttpFault {
            method: None,
            path_regex: String::new(),
            status: Some(500),
            reset: false,
            after_handling: false,
            count: None,
            rate: 1.0,
        }
    }
}

/// Make the `nth` task (1-based, counted from when the fault was installed) of a type fail.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TaskFailure {
    pub task_type: String,
    pub nth: u64,
    pub exitstatus: String,
}

impl Default for TaskFailure {
    fn default() -> Self {
        TaskFailure {
            task_type: "qmstart".into(),
            nth: 1,
            exitstatus: "injected failure".into(),
        }
    }
}

/// The tasks of `task_type` (of the one guest `vmid` when given) that stall.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StalledTask {
    pub task_type: String,
    pub vmid: Option<u32>,
}

/// Set the config `lock` of a VM for a while (as a backup job would).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HeldLock {
    pub vmid: u32,
    pub lock: String,
    pub seconds: f64,
}

impl Default for HeldLock {
    fn default() -> Self {
        HeldLock {
            vmid: 100,
            lock: "backup".into(),
            seconds: 5.0,
        }
    }
}

/// Privileges the default token holds on `/`: everything the provider uses, and what an
/// operator's migration and HA calls need.
pub const DEFAULT_PRIVILEGES: &[&str] = &[
    "Datastore.Allocate",
    "Datastore.AllocateSpace",
    "Datastore.AllocateTemplate",
    "Datastore.Audit",
    "Pool.Audit",
    "SDN.Use",
    "Sys.Audit",
    // HA resources (`/cluster/ha/resources`) are written with Sys.Console on `/`.
    "Sys.Console",
    "Sys.Modify",
    "VM.Allocate",
    "VM.Audit",
    "VM.Clone",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Cloudinit",
    "VM.Config.Disk",
    "VM.Config.HWType",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileRead",
    "VM.GuestAgent.FileWrite",
    "VM.GuestAgent.Unrestricted",
    "VM.Migrate",
    "VM.PowerMgmt",
];

fn cfg(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Default for SimConfig {
    fn default() -> Self {
        let nodes = ["pve1", "pve2", "pve3"]
            .into_iter()
            .map(|name| NodeConfig {
                name: name.into(),
                ..NodeConfig::default()
            })
            .collect();
        let storages = default_storages();
        let vms = default_vms();
        SimConfig {
            version: VersionInfo::default(),
            nodes,
            storages,
            vms,
            pools: vec![PoolConfig {
                poolid: "proxies".into(),
                comment: Some("proxy VMs".into()),
            }],
            token_id: "terraform@pve!provider".into(),
            token_secret: None,
            privileges: BTreeMap::from([(
                "/".to_string(),
                DEFAULT_PRIVILEGES.iter().map(|p| p.to_string()).collect(),
            )]),
            timings: Timings::default(),
            faults: Faults::default(),
            mac_prefix: "BC:24:11".into(),
            next_id_lower: 100,
            next_id_upper: 1_000_000,
            ha_rebalance_on_start: false,
            guest_profiles: BTreeMap::new(),
            cost_profile: None,
        }
    }
}

fn default_storages() -> Vec<StorageConfig> {
    // One storage of each common kind, so volume names come in every shape PVE uses:
    // block (`local-lvm:vm-100-disk-0`) and file-based (`vmdata:101/vm-101-disk-0.qcow2`).
    vec![
        StorageConfig {
            id: "proxy-seeds".into(),
            plugin_type: "dir".into(),
            content: vec!["iso".into()],
            shared: false,
            total_bytes: 50 << 30,
            ..StorageConfig::default()
        },
        StorageConfig {
            id: "vmdata".into(),
            plugin_type: "nfs".into(),
            content: vec!["images".into(), "rootdir".into()],
            shared: true,
            total_bytes: 2 << 40,
            ..StorageConfig::default()
        },
        StorageConfig {
            id: "local".into(),
            plugin_type: "dir".into(),
            content: vec![
                "iso".into(),
                "vztmpl".into(),
                "backup".into(),
                "images".into(),
            ],
            shared: false,
            total_bytes: 100 << 30,
            ..StorageConfig::default()
        },
        StorageConfig {
            id: "local-lvm".into(),
            plugin_type: "lvmthin".into(),
            content: vec!["images".into(), "rootdir".into()],
            shared: false,
            total_bytes: 400 << 30,
            has_path: false,
            ..StorageConfig::default()
        },
    ]
}

/// The template the provider's examples clone.
fn default_template() -> VmSeed {
    VmSeed {
        vmid: 9000,
        node: "pve1".into(),
        running: false,
        config: cfg(&[
            ("name", "debian-13-proxy"),
            ("template", "1"),
            (
                "description",
                "Debian 13 cloud image, cloud-init ready (NoCloud seed on ide2)",
            ),
            ("cores", "1"),
            ("sockets", "1"),
            ("memory", "1024"),
            ("ostype", "l26"),
            ("scsihw", "virtio-scsi-single"),
            (
                "scsi0",
                "vmdata:9000/base-9000-disk-0.qcow2,iothread=1,size=4G",
            ),
            ("boot", "order=scsi0"),
            ("net0", "virtio=BC:24:11:9A:00:01,bridge=vmbr0,firewall=1"),
            ("serial0", "socket"),
            ("vga", "serial0"),
            ("smbios1", "uuid=6f1c2a9e-3c1b-4f7e-9a0d-2b9f0c1d9000"),
            ("vmgenid", "0b6f3f2e-8d8c-4a43-9d4f-5f3a1e2c9000"),
        ]),
    }
}

/// A template and three VMs that are not the provider's, one on each node.
fn default_vms() -> Vec<VmSeed> {
    vec![
        default_template(),
        foreign_vm(
            100,
            "pve1",
            "dns1",
            "local-lvm:vm-100-disk-0",
            true,
            Some("infra"),
        ),
        foreign_vm(
            101,
            "pve2",
            "gitlab",
            "vmdata:101/vm-101-disk-0.qcow2",
            true,
            None,
        ),
        foreign_vm(
            102,
            "pve3",
            "backup-old",
            "local:102/vm-102-disk-0.raw",
            false,
            Some("legacy;storage"),
        ),
    ]
}

/// A VM someone else made: the provider must leave it alone.
fn foreign_vm(
    vmid: u32,
    node: &str,
    name: &str,
    disk: &str,
    running: bool,
    tags: Option<&str>,
) -> VmSeed {
    let mut config = cfg(&[
        ("name", name),
        ("cores", "2"),
        ("sockets", "1"),
        ("memory", "4096"),
        ("ostype", "l26"),
        ("scsihw", "virtio-scsi-single"),
        ("boot", "order=scsi0"),
        ("agent", "1"),
    ]);
    config.insert("scsi0".into(), format!("{disk},iothread=1,size=32G"));
    config.insert(
        "net0".into(),
        format!(
            "virtio=BC:24:11:5E:{:02X}:{:02X},bridge=vmbr0",
            vmid / 256 % 256,
            vmid % 256
        ),
    );
    if let Some(tags) = tags {
        config.insert("tags".into(), tags.into());
    }
    VmSeed {
        vmid,
        node: node.into(),
        running,
        config,
    }
}
