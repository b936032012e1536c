//! `/nodes/{node}/qemu/{vmid}/…`: clone, config, pending, resize, power, destroy, agent.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::client::{Client, seg};
use crate::cluster::split_tags;
use crate::error::{Error, Result};
use crate::nodes::Node;
use crate::upid::Upid;
use crate::wire::{
    ByteSize, CdromDrive, DiskDrive, Form, NetConfig, ParseError, Startup, boot_disk_key, de,
};

pub(crate) mod agent_files;
mod migrate;

pub use agent_files::{FILE_WRITE_MAX_BYTES, FileContent};
pub use migrate::{
    BlockingHaResource, LocalDisk, MigratePreconditions, MigrateRequest, NodeRefusal,
};

/// Calls under `/nodes/{node}/qemu/{vmid}`.
#[derive(Debug, Clone, Copy)]
pub struct Qemu<'a> {
    client: &'a Client,
    node: &'a str,
    vmid: u32,
}

impl<'a> Node<'a> {
    /// Calls for one VM on this node.
    pub fn qemu(&self, vmid: u32) -> Qemu<'a> {
        Qemu {
            client: self.client,
            node: self.name,
            vmid,
        }
    }
}

impl Node<'_> {
    /// `GET /nodes/{node}/qemu`: the live status of every VM on the node in one call. With
    /// `full`, running VMs also carry `qmpstatus` (PVE asks QMP only then), which is what
    /// tells a paused VM from a running one.
    pub async fn qemu_list(self, full: bool) -> Result<Vec<VmStatus>> {
        let query = if full {
            Form::new().bool("full", true)
        } else {
            Form::new()
        };
        self.client
            .get(&format!("{}/qemu", self.path()), &query)
            .await
    }
}

/// `POST …/clone` parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneRequest {
    /// The new VMID.
    pub newid: u32,
    /// Name of the new VM.
    pub name: Option<String>,
    /// Description (written in the clone call, so a half-made VM is recognisable).
    pub description: Option<String>,
    /// Full clone (not linked).
    pub full: bool,
    /// Target node.
    pub target: Option<String>,
    /// Target storage for the disks (full clone only).
    pub storage: Option<String>,
    /// Pool to add the VM to.
    pub pool: Option<String>,
}

impl CloneRequest {
    /// A full clone onto `newid`.
    pub fn full(newid: u32) -> CloneRequest {
        CloneRequest {
            newid,
            name: None,
            description: None,
            full: true,
            target: None,
            storage: None,
            pool: None,
        }
    }

    /// The form PVE receives.
    pub fn to_form(&self) -> Form {
        Form::new()
            .int("newid", self.newid)
            .opt_text("name", self.name.clone())
            .opt_text("description", self.description.clone())
            .bool("full", self.full)
            .opt_text("target", self.target.clone())
            .opt_text("storage", self.storage.clone())
            .opt_text("pool", self.pool.clone())
    }
}

/// Changes for `POST`/`PUT …/config`, built with typed setters (`0`/`1` booleans, canonical
/// property strings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigUpdate {
    form: Form,
    delete: Vec<String>,
}

impl ConfigUpdate {
    /// No changes yet.
    pub fn new() -> ConfigUpdate {
        ConfigUpdate::default()
    }
    /// Any key, as text.
    pub fn set(mut self, key: &str, value: impl Into<String>) -> Self {
        self.form.push(key, value);
        self
    }
    /// `cores`.
    pub fn cores(self, n: u32) -> Self {
        self.set("cores", n.to_string())
    }
    /// `sockets`.
    pub fn sockets(self, n: u32) -> Self {
        self.set("sockets", n.to_string())
    }
    /// `memory` in MiB.
    pub fn memory_mib(self, mib: u64) -> Self {
        self.set("memory", mib.to_string())
    }
    /// `name`.
    pub fn name(self, name: &str) -> Self {
        self.set("name", name)
    }
    /// `description`.
    pub fn description(self, text: &str) -> Self {
        self.set("description", text)
    }
    /// `agent` enabled flag.
    pub fn agent(self, enabled: bool) -> Self {
        self.set("agent", if enabled { "1" } else { "0" })
    }
    /// `onboot`.
    pub fn onboot(self, enabled: bool) -> Self {
        self.set("onboot", if enabled { "1" } else { "0" })
    }
    /// `startup` (`order=N,up=S,down=S`); an empty one removes the key (PVE has no empty
    /// value for it).
    pub fn startup(self, startup: &Startup) -> Self {
        if startup.is_empty() {
            self.delete("startup")
        } else {
            self.set("startup", startup.to_string())
        }
    }
    /// `tags`, `;`-joined.
    pub fn tags<S: AsRef<str>>(self, tags: &[S]) -> Self {
        let joined = tags.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(";");
        self.set("tags", joined)
    }
    /// `net<index>`.
    pub fn net(self, index: u8, net: &NetConfig) -> Self {
        self.set(&format!("net{index}"), net.to_string())
    }
    /// A cdrom drive, e.g. `ide2`.
    pub fn cdrom(self, key: &str, drive: &CdromDrive) -> Self {
        self.set(key, drive.to_string())
    }
    /// Keys to remove.
    pub fn delete(mut self, key: &str) -> Self {
        self.delete.push(key.to_owned());
        self
    }
    /// Only apply if the config still has this digest.
    pub fn digest(self, digest: &str) -> Self {
        self.set("digest", digest)
    }
    /// Whether nothing would be sent (PVE refuses that with "no options specified").
    pub fn is_empty(&self) -> bool {
        self.form.is_empty() && self.delete.is_empty()
    }
    /// The form PVE receives.
    pub fn to_form(&self) -> Form {
        let mut form = self.form.clone();
        if !self.delete.is_empty() {
            form.push("delete", self.delete.join(","));
        }
        form
    }
}

/// A VM config as `GET …/config` returns it (pending values applied), with typed accessors
/// for the keys we use. Every key stays available through [`VmConfig::raw`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct VmConfig {
    raw: BTreeMap<String, serde_json::Value>,
}

impl VmConfig {
    /// All keys.
    pub fn raw(&self) -> &BTreeMap<String, serde_json::Value> {
        &self.raw
    }
    /// A key as text (numbers rendered in decimal).
    pub fn get_str(&self, key: &str) -> Option<String> {
        match self.raw.get(key)? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Null => None,
            other => Some(other.to_string()),
        }
    }
    fn first_item_u64(&self, key: &str, default_key: &str) -> Option<u64> {
        let text = self.get_str(key)?;
        let first = text.split(',').next()?;
        let value = first
            .strip_prefix(default_key)
            .and_then(|r| r.strip_prefix('='))
            .unwrap_or(first);
        value.trim().parse().ok()
    }
    /// `name`.
    pub fn name(&self) -> Option<String> {
        self.get_str("name")
    }
    /// `description` (PVE strips trailing whitespace).
    pub fn description(&self) -> Option<String> {
        self.get_str("description")
    }
    /// `cores` (PVE's default is 1).
    pub fn cores(&self) -> u32 {
        self.first_item_u64("cores", "")
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(1)
    }
    /// `sockets` (default 1).
    pub fn sockets(&self) -> u32 {
        self.first_item_u64("sockets", "")
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(1)
    }
    /// `memory` in MiB: a property string since PVE 8.1 (`2048` or `current=2048`); default 512.
    pub fn memory_mib(&self) -> u64 {
        self.first_item_u64("memory", "current").unwrap_or(512)
    }
    /// Whether the guest agent is enabled (`agent: 1` or `agent: enabled=1,…`).
    pub fn agent_enabled(&self) -> bool {
        self.first_item_u64("agent", "enabled")
            .is_some_and(|v| v != 0)
    }
    /// Template flag.
    pub fn is_template(&self) -> bool {
        self.first_item_u64("template", "").is_some_and(|v| v != 0)
    }
    /// `onboot`: whether the node starts the VM when it boots (PVE's default is off).
    pub fn onboot(&self) -> bool {
        self.first_item_u64("onboot", "").is_some_and(|v| v != 0)
    }
    /// `startup`, parsed; `None` if absent (no order, no delays).
    pub fn startup(&self) -> Option<Result<Startup, ParseError>> {
        self.get_str("startup").map(|s| s.parse())
    }
    /// `protection`: PVE refuses to destroy the VM (and remove its disks) while set.
    pub fn protection(&self) -> bool {
        self.first_item_u64("protection", "")
            .is_some_and(|v| v != 0)
    }
    /// `lock`, when the VM is locked.
    pub fn lock(&self) -> Option<String> {
        self.get_str("lock")
    }
    /// The config is qemu-server's `lock: destroyed` placeholder: a destroy task freed the
    /// VM's disks and removes the config when its worker ends (`destroy_vm`).
    pub fn is_being_destroyed(&self) -> bool {
        self.lock().as_deref() == Some("destroyed")
    }
    /// `digest`, for optimistic concurrency on writes.
    pub fn digest(&self) -> Option<String> {
        self.get_str("digest")
    }
    /// Tags in stored order.
    pub fn tags(&self) -> Vec<String> {
        let raw = self.get_str("tags");
        split_tags(raw.as_deref())
            .into_iter()
            .map(str::to_owned)
            .collect()
    }
    /// `net<index>`, parsed.
    pub fn net(&self, index: u8) -> Option<Result<NetConfig, ParseError>> {
        self.get_str(&format!("net{index}")).map(|s| s.parse())
    }
    /// A cdrom drive (e.g. `ide2`), parsed; `None` if absent.
    pub fn cdrom(&self, key: &str) -> Option<Result<CdromDrive, ParseError>> {
        self.get_str(key).map(|s| s.parse())
    }
    /// The boot disk key and drive.
    pub fn boot_disk(&self) -> Option<(String, DiskDrive)> {
        let key = boot_disk_key(&self.raw)?;
        let drive = self.get_str(&key)?.parse().ok()?;
        Some((key, drive))
    }
}

/// A row of `GET …/pending`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PendingItem {
    /// Config key.
    pub key: String,
    /// Current value.
    #[serde(default, deserialize_with = "de::opt_string")]
    pub value: Option<String>,
    /// Pending value (differs from the current one until a reboot applies it).
    #[serde(default, deserialize_with = "de::opt_string")]
    pub pending: Option<String>,
    /// 1 or 2 when the key is pending deletion.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub delete: Option<u8>,
}

impl PendingItem {
    /// Whether this key has a change waiting for a reboot.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some() || self.delete.unwrap_or(0) > 0
    }
}

/// What one `GET …/pending` tells: the config as `GET …/config` shows it (pending values
/// applied), the config the VM runs with now (`current=1`), and the keys with a change
/// waiting for the next boot. One request instead of two for a reader that needs both.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingView {
    pub effective: VmConfig,
    pub current: VmConfig,
    pub pending_keys: Vec<String>,
}

impl PendingView {
    pub fn from_items(items: Vec<PendingItem>) -> PendingView {
        let mut effective = BTreeMap::new();
        let mut current = BTreeMap::new();
        let mut pending_keys = Vec::new();
        for item in items {
            if item.is_pending() {
                pending_keys.push(item.key.clone());
            }
            if let Some(value) = &item.value {
                current.insert(item.key.clone(), serde_json::Value::String(value.clone()));
            }
            let deleted = item.delete.unwrap_or(0) > 0;
            if let Some(value) = item.pending.as_ref().or(item.value.as_ref())
                && !deleted
            {
                effective.insert(item.key, serde_json::Value::String(value.clone()));
            }
        }
        PendingView {
            effective: VmConfig { raw: effective },
            current: VmConfig { raw: current },
            pending_keys,
        }
    }
}

/// `GET …/status/current`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VmStatus {
    /// VMID.
    #[serde(deserialize_with = "de::int")]
    pub vmid: u32,
    /// `running` or `stopped`.
    pub status: String,
    /// QMP status, e.g. `running`, `paused`.
    #[serde(default)]
    pub qmpstatus: Option<String>,
    /// Name (PVE falls back to `VM <vmid>`).
    #[serde(default)]
    pub name: Option<String>,
    /// Lock, if set.
    #[serde(default)]
    pub lock: Option<String>,
    /// Raw tag string.
    #[serde(default)]
    pub tags: Option<String>,
    /// Template flag.
    #[serde(default, deserialize_with = "de::bool01")]
    pub template: bool,
    /// Agent enabled in config.
    #[serde(default, deserialize_with = "de::bool01")]
    pub agent: bool,
    /// Seconds up.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub uptime: Option<u64>,
    /// CPUs.
    #[serde(default, deserialize_with = "de::opt_float")]
    pub cpus: Option<f64>,
    /// Memory, bytes.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub maxmem: Option<u64>,
    /// Boot disk size, bytes.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub maxdisk: Option<u64>,
    /// HA membership (`status/current` only; `GET /nodes/{node}/qemu` rows lack it).
    #[serde(default)]
    pub ha: Option<VmHaStatus>,
}

/// `ha` of `GET …/status/current` (pve-ha-manager `PVE::HA::Config::get_service_status`):
/// `{"managed":0}`, or `{"managed":1,"state":"started"}` for a VM under HA, whose power
/// actions are then requests the HA manager carries out later. A resource with the
/// requested state `ignored` reads as not managed, as PVE then acts directly.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct VmHaStatus {
    /// Whether the HA stack manages the VM.
    #[serde(default, deserialize_with = "de::bool01")]
    pub managed: bool,
    /// The HA manager's state of the service (`started`, `stopped`, `request_stop`,
    /// `migrate`, `relocate`, `fence`, `recovery`, `freeze`, `error`, …); absent until the
    /// manager has seen the resource.
    #[serde(default)]
    pub state: Option<String>,
}

impl VmStatus {
    /// Whether the VM is an HA resource (start, stop and shutdown are then requests).
    pub fn is_ha_managed(&self) -> bool {
        self.ha.as_ref().is_some_and(|ha| ha.managed)
    }
    /// Whether a QEMU process exists (a paused VM counts as running).
    pub fn is_running(&self) -> bool {
        self.status == "running"
    }
}

/// `DELETE …/qemu/{vmid}` options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DestroyOptions {
    /// Remove from backup/replication jobs and HA.
    pub purge: bool,
    /// Also free disks named for this VMID that the config does not reference.
    pub destroy_unreferenced_disks: bool,
}

/// An interface reported by the guest agent.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GuestInterface {
    /// e.g. `eth0`, `lo`.
    pub name: String,
    /// MAC.
    #[serde(default, rename = "hardware-address")]
    pub hardware_address: Option<String>,
    /// Addresses.
    #[serde(default, rename = "ip-addresses")]
    pub ip_addresses: Vec<GuestIp>,
}

/// An address reported by the guest agent.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GuestIp {
    /// The address.
    #[serde(rename = "ip-address")]
    pub address: String,
    /// `ipv4` or `ipv6`.
    #[serde(rename = "ip-address-type")]
    pub kind: String,
    /// Prefix length.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub prefix: Option<u8>,
}

impl GuestIp {
    /// A global IPv4 address: not loopback, not link-local.
    pub fn is_usable_ipv4(&self) -> bool {
        self.kind == "ipv4"
            && self
                .address
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|a| !a.is_loopback() && !a.is_link_local() && !a.is_unspecified())
    }
}

#[derive(Deserialize)]
struct AgentResult<T> {
    result: T,
}

/// Calls under `…/qemu/{vmid}/agent`.
#[derive(Debug, Clone, Copy)]
pub struct Agent<'a> {
    vm: Qemu<'a>,
}

impl Agent<'_> {
    /// `POST …/agent/ping`.
    pub async fn ping(self) -> Result<()> {
        let _: AgentResult<serde_json::Value> = self
            .vm
            .client
            .post(&self.vm.path("agent/ping"), &Form::new())
            .await?;
        Ok(())
    }

    /// `GET …/agent/network-get-interfaces`.
    pub async fn network_get_interfaces(self) -> Result<Vec<GuestInterface>> {
        let r: AgentResult<Vec<GuestInterface>> = self
            .vm
            .client
            .get(&self.vm.path("agent/network-get-interfaces"), &Form::new())
            .await?;
        Ok(r.result)
    }

    /// `GET …/agent/get-host-name`.
    pub async fn get_host_name(self) -> Result<String> {
        #[derive(Deserialize)]
        struct HostName {
            #[serde(rename = "host-name")]
            host_name: String,
        }
        let r: AgentResult<HostName> = self
            .vm
            .client
            .get(&self.vm.path("agent/get-host-name"), &Form::new())
            .await?;
        Ok(r.result.host_name)
    }
}

fn expect_upid(op: &str, path: &str, upid: Option<Upid>) -> Result<Upid> {
    upid.ok_or_else(|| Error::decode(op, path, "expected a task id, got null".to_owned()))
}

impl<'a> Qemu<'a> {
    /// The VMID.
    pub fn vmid(&self) -> u32 {
        self.vmid
    }
    /// The node.
    pub fn node(&self) -> &'a str {
        self.node
    }

    fn path(&self, leaf: &str) -> String {
        let base = format!("/nodes/{}/qemu/{}", seg(self.node), self.vmid);
        if leaf.is_empty() {
            base
        } else {
            format!("{base}/{leaf}")
        }
    }

    /// `POST …/clone`: a `qmclone` task. Not idempotent: wrap retries in
    /// [`crate::retry::retry_with_check`].
    pub async fn clone_to(self, request: &CloneRequest) -> Result<Upid> {
        self.client
            .post(&self.path("clone"), &request.to_form())
            .await
    }

    /// `GET …/config` (pending values applied).
    pub async fn config(self) -> Result<VmConfig> {
        self.client.get(&self.path("config"), &Form::new()).await
    }

    /// `GET …/config?current=1` (active values only).
    pub async fn config_current(self) -> Result<VmConfig> {
        self.client
            .get(&self.path("config"), &Form::new().bool("current", true))
            .await
    }

    /// `POST …/config`: a `qmconfig` task (the lock wait happens inside it).
    pub async fn update_config_async(self, update: &ConfigUpdate) -> Result<Upid> {
        let path = self.path("config");
        let upid: Option<Upid> = self.client.post(&path, &update.to_form()).await?;
        expect_upid("POST", &path, upid)
    }

    /// [`Qemu::update_config_async`] with `background_delay`: PVE's worker waits up to
    /// [`ANSWER_WAIT_S`](crate::tasks::ANSWER_WAIT_S) for the `qmconfig` task and answers `null`
    /// when it ended OK, so a short write costs no status poll (qemu-server `API2/Qemu.pm`
    /// `update_vm_async`; a task that failed meanwhile is a 500 "failed to update VM N: …").
    /// `Some` is the task, still running.
    pub async fn update_config_answered(self, update: &ConfigUpdate) -> Result<Option<Upid>> {
        let form = update
            .to_form()
            .int("background_delay", crate::tasks::ANSWER_WAIT_S);
        self.client.post(&self.path("config"), &form).await
    }

    /// `PUT …/config`: synchronous; a lock timeout is an HTTP error.
    pub async fn update_config(self, update: &ConfigUpdate) -> Result<()> {
        let _: serde_json::Value = self
            .client
            .put(&self.path("config"), &update.to_form())
            .await?;
        Ok(())
    }

    /// `GET …/pending`.
    pub async fn pending(self) -> Result<Vec<PendingItem>> {
        self.client.get(&self.path("pending"), &Form::new()).await
    }

    /// `GET …/pending`, as both configs it describes.
    pub async fn pending_view(self) -> Result<PendingView> {
        Ok(PendingView::from_items(self.pending().await?))
    }

    /// `PUT …/resize` to an absolute size: a `resize` task (equal size = OK, smaller = error).
    pub async fn resize(self, disk: &str, size: ByteSize) -> Result<Upid> {
        let path = self.path("resize");
        let form = Form::new()
            .text("disk", disk)
            .text("size", size.to_string());
        let upid: Option<Upid> = self.client.put(&path, &form).await?;
        expect_upid("PUT", &path, upid)
    }

    /// [`Qemu::resize`], refused by PVE when the config's digest is no longer `digest`: the
    /// resize happens only if nobody changed the VM since it was read.
    pub async fn resize_if_unchanged(
        self,
        disk: &str,
        size: ByteSize,
        digest: &str,
    ) -> Result<Upid> {
        let path = self.path("resize");
        let form = Form::new()
            .text("disk", disk)
            .text("size", size.to_string())
            .text("digest", digest);
        let upid: Option<Upid> = self.client.put(&path, &form).await?;
        expect_upid("PUT", &path, upid)
    }

    /// `GET …/status/current`.
    pub async fn status(self) -> Result<VmStatus> {
        self.client
            .get(&self.path("status/current"), &Form::new())
            .await
    }

    /// `POST …/status/start`: a `qmstart` task.
    pub async fn start(self) -> Result<Upid> {
        self.client
            .post(&self.path("status/start"), &Form::new())
            .await
    }

    /// `POST …/status/reboot`: a `qmreboot` task that shuts the VM down and starts it again,
    /// applying pending changes. One task, so PVE finishes it even if the caller goes away.
    pub async fn reboot(self, timeout_s: Option<u32>) -> Result<Upid> {
        let mut form = Form::new();
        if let Some(t) = timeout_s {
            form = form.int("timeout", t);
        }
        self.client.post(&self.path("status/reboot"), &form).await
    }

    /// `POST …/status/stop` (hard stop): a `qmstop` task; stopping a stopped VM is OK.
    pub async fn stop(self) -> Result<Upid> {
        self.client
            .post(&self.path("status/stop"), &Form::new())
            .await
    }

    /// `POST …/status/shutdown` (ACPI/agent), `force_stop` after `timeout_s`.
    pub async fn shutdown(self, timeout_s: Option<u32>, force_stop: bool) -> Result<Upid> {
        let mut form = Form::new().bool("forceStop", force_stop);
        if let Some(t) = timeout_s {
            form = form.int("timeout", t);
        }
        self.client.post(&self.path("status/shutdown"), &form).await
    }

    /// `DELETE …/qemu/{vmid}` with options in the query string: a `qmdestroy` task.
    pub async fn destroy(self, options: DestroyOptions) -> Result<Upid> {
        let mut query = Form::new();
        if options.purge {
            query = query.bool("purge", true);
        }
        if options.destroy_unreferenced_disks {
            query = query.bool("destroy-unreferenced-disks", true);
        }
        self.client.delete(&self.path(""), &query).await
    }

    /// Guest agent calls.
    pub fn agent(&self) -> Agent<'a> {
        Agent { vm: *self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_listing_yields_both_configs_and_the_waiting_keys() {
        let items: Vec<PendingItem> = serde_json::from_value(serde_json::json!([
            {"key": "cores", "value": 1, "pending": 2},
            {"key": "memory", "value": "1024"},
            {"key": "onboot", "value": "1", "delete": 1},
            {"key": "tags", "pending": "proxyvm"}
        ]))
        .unwrap();
        let view = PendingView::from_items(items);
        assert_eq!(view.effective.cores(), 2);
        assert_eq!(view.current.cores(), 1);
        assert_eq!(view.effective.memory_mib(), 1024);
        assert_eq!(view.effective.get_str("onboot"), None);
        assert_eq!(view.current.get_str("onboot").as_deref(), Some("1"));
        assert_eq!(view.effective.get_str("tags").as_deref(), Some("proxyvm"));
        assert_eq!(view.pending_keys, ["cores", "onboot", "tags"]);
    }
    use serde_json::json;

    /// What qemu-server's `destroy_vm` leaves until its worker ends, and a VM only locked.
    #[test]
    fn a_destroyed_placeholder_is_told_from_other_locks() {
        let config =
            |value: serde_json::Value| -> VmConfig { serde_json::from_value(value).unwrap() };
        assert!(config(json!({"lock": "destroyed", "digest": "ab"})).is_being_destroyed());
        assert!(!config(json!({"lock": "backup", "name": "edge-0"})).is_being_destroyed());
        assert!(!config(json!({"name": "edge-0"})).is_being_destroyed());
    }

    #[test]
    fn config_accessors_on_real_shapes() {
        let cfg: VmConfig = serde_json::from_value(json!({
            "cores": 2, "sockets": 1, "memory": "2048", "agent": "1", "name": "edge-0",
            "tags": "a;b;proxy", "digest": "3f2a", "boot": "order=scsi0;ide2;net0",
            "scsi0": "vmdata:vm-100-disk-0,iothread=1,size=20G",
            "ide2": "proxy-seeds:iso/edge-0.iso,media=cdrom",
            "net0": "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=4",
            "description": "managed-by=terraform"
        }))
        .unwrap();
        assert_eq!(cfg.cores(), 2);
        assert_eq!(cfg.memory_mib(), 2048);
        assert!(cfg.agent_enabled());
        assert!(!cfg.is_template());
        assert_eq!(cfg.tags(), vec!["a", "b", "proxy"]);
        let (key, disk) = cfg.boot_disk().unwrap();
        assert_eq!(key, "scsi0");
        assert_eq!(disk.size, Some(ByteSize::gib(20)));
        assert_eq!(cfg.net(0).unwrap().unwrap().tag, Some(4));
        assert_eq!(
            cfg.cdrom("ide2").unwrap().unwrap().iso_file(),
            Some("edge-0.iso")
        );
        let cfg: VmConfig = serde_json::from_value(json!({
            "memory": "current=4096", "agent": "enabled=1,fstrim_cloned_disks=1", "template": 1
        }))
        .unwrap();
        assert_eq!(cfg.memory_mib(), 4096);
        assert!(cfg.agent_enabled());
        assert!(cfg.is_template());
        assert_eq!(cfg.cores(), 1);
    }

    #[test]
    fn config_update_form() {
        let net: NetConfig = "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0".parse().unwrap();
        let u = ConfigUpdate::new()
            .cores(2)
            .memory_mib(2048)
            .agent(true)
            .cdrom("ide2", &CdromDrive::iso("proxy-seeds", "edge-0.iso"))
            .net(0, &net)
            .tags(&["proxy", "edge"])
            .delete("serial0")
            .delete("unused0");
        let form = u.to_form();
        assert_eq!(form.get("agent"), Some("1"));
        assert_eq!(
            form.get("ide2"),
            Some("proxy-seeds:iso/edge-0.iso,media=cdrom")
        );
        assert_eq!(form.get("tags"), Some("proxy;edge"));
        assert_eq!(form.get("delete"), Some("serial0,unused0"));
        assert!(ConfigUpdate::new().is_empty());
    }

    #[test]
    fn boot_behaviour_and_protection_read_and_write() {
        let cfg: VmConfig = serde_json::from_value(json!({
            "onboot": 1, "startup": "order=2,up=30", "protection": "1",
            "ide2": "none,media=cdrom"
        }))
        .unwrap();
        assert!(cfg.onboot());
        assert!(cfg.protection());
        let startup = cfg.startup().unwrap().unwrap();
        assert_eq!(
            (startup.order, startup.up, startup.down),
            (Some(2), Some(30), None)
        );
        assert!(cfg.cdrom("ide2").unwrap().unwrap().is_none());
        // PVE's defaults when the keys are absent: off, no order, unprotected.
        let bare: VmConfig = serde_json::from_value(json!({"onboot": 0})).unwrap();
        assert!(!bare.onboot() && !bare.protection());
        assert!(bare.startup().is_none());
        let form = ConfigUpdate::new()
            .onboot(true)
            .startup(&Startup {
                order: Some(1),
                up: None,
                down: Some(60),
            })
            .cdrom("ide2", &CdromDrive::none())
            .to_form();
        assert_eq!(
            form.encode(),
            "onboot=1&startup=order%3D1%2Cdown%3D60&ide2=none%2Cmedia%3Dcdrom"
        );
        let cleared = ConfigUpdate::new().startup(&Startup::default()).to_form();
        assert_eq!(cleared.encode(), "delete=startup");
    }

    #[test]
    fn ha_membership_from_status_current() {
        let managed: VmStatus = serde_json::from_value(json!({
            "vmid": 100, "status": "running", "ha": {"managed": 1, "state": "started"}
        }))
        .unwrap();
        assert!(managed.is_ha_managed());
        assert_eq!(
            managed.ha.as_ref().unwrap().state.as_deref(),
            Some("started")
        );
        let plain: VmStatus =
            serde_json::from_value(json!({"vmid": 101, "status": "stopped", "ha": {"managed": 0}}))
                .unwrap();
        assert!(!plain.is_ha_managed());
        // `GET /nodes/{node}/qemu` rows have no `ha`.
        let row: VmStatus =
            serde_json::from_value(json!({"vmid": "102", "status": "running"})).unwrap();
        assert!(!row.is_ha_managed() && row.ha.is_none());
    }

    #[test]
    fn clone_form_has_zero_one_full() {
        let mut r = CloneRequest::full(101);
        r.name = Some("edge-0".into());
        let f = r.to_form();
        assert_eq!(f.encode(), "newid=101&name=edge-0&full=1");
    }

    #[test]
    fn agent_interfaces_decode() {
        let r: AgentResult<Vec<GuestInterface>> = serde_json::from_value(json!({"result": [
            {"name": "lo", "hardware-address": "00:00:00:00:00:00",
             "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}]},
            {"name": "eth0", "hardware-address": "bc:24:11:aa:bb:cc",
             "ip-addresses": [{"ip-address": "10.0.0.5", "ip-address-type": "ipv4", "prefix": 24},
                              {"ip-address": "fe80::1", "ip-address-type": "ipv6", "prefix": 64}],
             "statistics": {"rx-bytes": 1}}
        ]}))
        .unwrap();
        let usable: Vec<_> = r
            .result
            .iter()
            .flat_map(|i| &i.ip_addresses)
            .filter(|ip| ip.is_usable_ipv4())
            .map(|ip| ip.address.as_str())
            .collect();
        assert_eq!(usable, vec!["10.0.0.5"]);
    }
}
