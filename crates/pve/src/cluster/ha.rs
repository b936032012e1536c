//! `/cluster/ha/resources[/{sid}]` and `/cluster/ha/status/current` (pve-ha-manager
//! `src/PVE/API2/HA/Resources.pm` and `Status.pm`).
//!
//! Resources are configuration: adding, changing or deleting one returns at once, and the
//! HA manager (the CRM) acts on it later. Its view is `status/current`. Errors: an unknown
//! `sid` is "no such resource 'vm:N'" (get, and update through `PVE::HA::Config`) or
//! "cannot delete service 'vm:N', not HA managed!" (delete), all
//! [`crate::ErrorKind::NotFound`]; adding one twice is "resource ID 'vm:N' already
//! defined", [`crate::ErrorKind::AlreadyExists`]. Reading needs `Sys.Audit` on `/`, writing
//! `Sys.Console`.

use serde::Deserialize;

use super::Cluster;
use crate::client::seg;
use crate::error::Result;
use crate::wire::{Form, de};

/// The HA id of a VM, `vm:<vmid>` (PVE also takes the bare VMID on input).
pub fn vm_sid(vmid: u32) -> String {
    format!("vm:{vmid}")
}

/// The requested state of an HA resource (`state`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HaState {
    /// Keep it running (recover it elsewhere when its node fails). PVE's default.
    Started,
    /// Keep it stopped (still relocated when its node fails).
    Stopped,
    /// An alias PVE keeps for `started`.
    Enabled,
    /// Stopped and never relocated; the way out of `error`.
    Disabled,
    /// Left alone by the HA stack: API calls act directly.
    Ignored,
    /// A state this client does not know.
    #[serde(other)]
    Other,
}

impl HaState {
    /// PVE's word for it (`Other` has none and must not be sent).
    pub fn as_str(self) -> &'static str {
        match self {
            HaState::Started => "started",
            HaState::Stopped => "stopped",
            HaState::Enabled => "enabled",
            HaState::Disabled => "disabled",
            HaState::Ignored => "ignored",
            HaState::Other => "",
        }
    }
}

/// A row of `GET /cluster/ha/resources` and the answer of `GET …/resources/{sid}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct HaResource {
    /// `vm:100`.
    pub sid: String,
    /// `vm` or `ct`.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// Requested state; absent means PVE's default, `started`.
    #[serde(default)]
    pub state: Option<HaState>,
    /// HA group (before groups became rules in PVE 9).
    #[serde(default)]
    pub group: Option<String>,
    /// Free text.
    #[serde(default)]
    pub comment: Option<String>,
    /// Restart tries on the same node.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub max_restart: Option<u32>,
    /// Relocation tries to other nodes.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub max_relocate: Option<u32>,
    /// Move back to a preferred node when it returns.
    #[serde(default, deserialize_with = "de::opt_bool01")]
    pub failback: Option<bool>,
    /// Digest of the whole resources file, for conditional updates.
    #[serde(default)]
    pub digest: Option<String>,
}

impl HaResource {
    /// The requested state with PVE's default applied (`enabled` reads as `started`).
    pub fn requested_state(&self) -> HaState {
        match self.state {
            None | Some(HaState::Enabled) => HaState::Started,
            Some(state) => state,
        }
    }
}

/// Settings of an HA resource, for adding (`POST`) or changing (`PUT`) one; unset fields
/// are not sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HaResourceSettings {
    /// Requested state.
    pub state: Option<HaState>,
    /// Free text.
    pub comment: Option<String>,
    /// HA group (refused once groups were migrated to rules).
    pub group: Option<String>,
    /// Restart tries on the same node.
    pub max_restart: Option<u32>,
    /// Relocation tries to other nodes.
    pub max_relocate: Option<u32>,
    /// Move back to a preferred node when it returns.
    pub failback: Option<bool>,
}

impl HaResourceSettings {
    fn append_to(&self, mut form: Form) -> Form {
        if let Some(state) = self.state.filter(|s| *s != HaState::Other) {
            form = form.text("state", state.as_str());
        }
        form = form
            .opt_text("comment", self.comment.clone())
            .opt_text("group", self.group.clone());
        if let Some(n) = self.max_restart {
            form = form.int("max_restart", n);
        }
        if let Some(n) = self.max_relocate {
            form = form.int("max_relocate", n);
        }
        if let Some(failback) = self.failback {
            form = form.bool("failback", failback);
        }
        form
    }

    /// The form of `POST /cluster/ha/resources` for `sid`.
    pub fn add_form(&self, sid: &str) -> Form {
        self.append_to(Form::new().text("sid", sid))
    }

    /// The form of `PUT /cluster/ha/resources/{sid}`: these settings, the keys to remove,
    /// and the digest the resources file must still have.
    pub fn update_form(&self, delete: &[&str], digest: Option<&str>) -> Form {
        let mut form = self.append_to(Form::new());
        if !delete.is_empty() {
            form = form.text("delete", delete.join(","));
        }
        form.opt_text("digest", digest)
    }
}

/// An entry of `GET /cluster/ha/status/current`: the quorum, the CRM master, fencing, an
/// LRM per node, and a service per resource (`type` tells which; fields by type).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct HaStatusEntry {
    /// `quorum`, `master`, `fencing`, `lrm:<node>`, `service:<sid>`.
    pub id: String,
    /// `quorum`, `master`, `lrm`, `service`, `fencing`.
    #[serde(rename = "type")]
    pub entry_type: String,
    /// The node the entry is about (for a service: where it is now).
    #[serde(default)]
    pub node: Option<String>,
    /// A human summary (for a service `vm:100 (pve1, started)`).
    #[serde(default)]
    pub status: Option<String>,
    /// Service: its id.
    #[serde(default)]
    pub sid: Option<String>,
    /// Service: the CRM's state (`started`, `request_stop`, `migrate`, `relocate`,
    /// `fence`, `recovery`, `freeze`, `error`, …); absent until the CRM has seen it.
    #[serde(default)]
    pub crm_state: Option<String>,
    /// Service: the verbose state shown to users.
    #[serde(default)]
    pub state: Option<String>,
    /// Service: the requested state from the resource's config.
    #[serde(default)]
    pub request_state: Option<String>,
    /// Quorum: whether this node's cluster part is quorate.
    #[serde(default, deserialize_with = "de::opt_bool01")]
    pub quorate: Option<bool>,
    /// Master and LRM: when the status was written (Unix seconds).
    #[serde(default, deserialize_with = "de::opt_int")]
    pub timestamp: Option<u64>,
}

impl HaStatusEntry {
    /// Whether this is the service entry of `sid`.
    pub fn is_service(&self, sid: &str) -> bool {
        self.entry_type == "service" && self.sid.as_deref() == Some(sid)
    }
}

/// Calls under `/cluster/ha`.
#[derive(Debug, Clone, Copy)]
pub struct Ha<'a> {
    cluster: Cluster<'a>,
}

impl<'a> Cluster<'a> {
    /// Calls under `/cluster/ha`.
    pub fn ha(self) -> Ha<'a> {
        Ha { cluster: self }
    }
}

impl Ha<'_> {
    /// `GET /cluster/ha/resources[?type=vm]`: every HA resource (of VMs only with
    /// `vms_only`).
    pub async fn resources(self, vms_only: bool) -> Result<Vec<HaResource>> {
        let query = if vms_only {
            Form::new().text("type", "vm")
        } else {
            Form::new()
        };
        self.cluster
            .client
            .get("/cluster/ha/resources", &query)
            .await
    }

    /// `GET /cluster/ha/resources/{sid}`.
    pub async fn resource(self, sid: &str) -> Result<HaResource> {
        self.cluster
            .client
            .get(&resource_path(sid), &Form::new())
            .await
    }

    /// `POST /cluster/ha/resources`: puts `sid` under HA. Not idempotent (a second add is
    /// `AlreadyExists`, which after an unknown outcome means the first one took).
    pub async fn add_resource(self, sid: &str, settings: &HaResourceSettings) -> Result<()> {
        let _: serde_json::Value = self
            .cluster
            .client
            .post("/cluster/ha/resources", &settings.add_form(sid))
            .await?;
        Ok(())
    }

    /// `PUT /cluster/ha/resources/{sid}`; with `digest`, only if the resources file is
    /// unchanged since it was read (else [`crate::ErrorKind::Conflict`]). PVE refuses a
    /// change of a service in `error` state unless it sets `disabled`.
    pub async fn update_resource(
        self,
        sid: &str,
        settings: &HaResourceSettings,
        delete: &[&str],
        digest: Option<&str>,
    ) -> Result<()> {
        let form = settings.update_form(delete, digest);
        let _: serde_json::Value = self.cluster.client.put(&resource_path(sid), &form).await?;
        Ok(())
    }

    /// `DELETE /cluster/ha/resources/{sid}`: takes `sid` out of HA (the VM itself stays as
    /// it is). PVE's `purge` (default on) also removes it from HA rules. A resource already
    /// gone is `NotFound`.
    pub async fn delete_resource(self, sid: &str) -> Result<()> {
        let _: serde_json::Value = self
            .cluster
            .client
            .delete(&resource_path(sid), &Form::new())
            .await?;
        Ok(())
    }

    /// `GET /cluster/ha/status/current`: the HA manager's view.
    pub async fn status_current(self) -> Result<Vec<HaStatusEntry>> {
        self.cluster
            .client
            .get("/cluster/ha/status/current", &Form::new())
            .await
    }
}

fn resource_path(sid: &str) -> String {
    format!("/cluster/ha/resources/{}", seg(sid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resource_paths_and_forms() {
        assert_eq!(vm_sid(100), "vm:100");
        assert_eq!(
            resource_path("vm:100"),
            format!("/cluster/ha/resources/{}", seg("vm:100"))
        );
        let settings = HaResourceSettings {
            state: Some(HaState::Started),
            max_restart: Some(2),
            failback: Some(false),
            ..HaResourceSettings::default()
        };
        assert_eq!(
            settings.add_form("vm:100").encode(),
            "sid=vm%3A100&state=started&max_restart=2&failback=0"
        );
        assert_eq!(
            HaResourceSettings::default().add_form("vm:100").encode(),
            "sid=vm%3A100"
        );
        let stop = HaResourceSettings {
            state: Some(HaState::Stopped),
            ..HaResourceSettings::default()
        };
        assert_eq!(
            stop.update_form(&["comment", "group"], Some("d1")).encode(),
            "state=stopped&delete=comment%2Cgroup&digest=d1"
        );
        let other = HaResourceSettings {
            state: Some(HaState::Other),
            ..HaResourceSettings::default()
        };
        assert!(other.update_form(&[], None).is_empty());
    }

    #[test]
    fn resources_decode_pve_shapes() {
        // api_copy_config: the section's keys plus sid, type and the file's digest.
        let rows: Vec<HaResource> = serde_json::from_value(json!([
            {"sid": "vm:100", "type": "vm", "state": "started", "max_restart": 1,
             "max_relocate": 1, "failback": 1, "digest": "5e1f"},
            {"sid": "vm:101", "type": "vm", "digest": "5e1f", "comment": "edge"},
            {"sid": "ct:200", "type": "ct", "state": "enabled", "digest": "5e1f"},
            {"sid": "vm:102", "type": "vm", "state": "frozen-in-future", "digest": "5e1f"}
        ]))
        .unwrap();
        assert_eq!(rows[0].requested_state(), HaState::Started);
        assert_eq!(rows[0].failback, Some(true));
        assert_eq!(rows[1].requested_state(), HaState::Started);
        assert_eq!(rows[1].comment.as_deref(), Some("edge"));
        assert_eq!(rows[2].requested_state(), HaState::Started);
        assert_eq!(rows[3].state, Some(HaState::Other));
        assert_eq!(rows[0].digest.as_deref(), Some("5e1f"));
    }

    #[test]
    fn status_entries_decode_pve_shapes() {
        let entries: Vec<HaStatusEntry> = serde_json::from_value(json!([
            {"id": "quorum", "type": "quorum", "node": "pve1", "status": "OK", "quorate": 1},
            {"id": "master", "type": "master", "node": "pve1",
             "status": "pve1 (active, Wed Dec  2 01:00:00 2026)", "timestamp": 1795914000},
            {"id": "fencing", "type": "fencing", "node": "pve1",
             "status": "armed (CRM watchdog active)", "armed-state": "armed"},
            {"id": "lrm:pve2", "type": "lrm", "node": "pve2",
             "status": "pve2 (active, watchdog active, Wed Dec  2 01:00:00 2026)",
             "timestamp": 1795914000},
            {"id": "service:vm:100", "type": "service", "sid": "vm:100", "node": "pve2",
             "crm_state": "started", "state": "started", "status": "vm:100 (pve2, started)",
             "request_state": "started", "max_restart": 1},
            {"id": "service:vm:101", "type": "service", "sid": "vm:101", "node": "pve1",
             "state": "queued", "status": "vm:101 (pve1, queued)", "request_state": "stopped"}
        ]))
        .unwrap();
        assert_eq!(entries[0].quorate, Some(true));
        let service = entries.iter().find(|e| e.is_service("vm:100")).unwrap();
        assert_eq!(service.node.as_deref(), Some("pve2"));
        assert_eq!(service.crm_state.as_deref(), Some("started"));
        let queued = entries.iter().find(|e| e.is_service("vm:101")).unwrap();
        assert_eq!(queued.crm_state, None);
        assert_eq!(queued.request_state.as_deref(), Some("stopped"));
        assert!(!entries[3].is_service("vm:100"));
    }
}
