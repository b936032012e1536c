//! `/cluster/ha/resources[/{sid}]`, `/cluster/ha/rules[/{rule}]` and
//! `/cluster/ha/status/current` (pve-ha-manager `src/PVE/API2/HA/Resources.pm`,
//! `Rules.pm` and `Status.pm`).
//!
//! Resources are configuration: adding, changing or deleting one returns at once, and the
//! HA manager (the CRM) acts on it later. Its view is `status/current`. Errors: an unknown
//! `sid` is "no such resource 'vm:N'" (get, and update through `PVE::HA::Config`) or
//! "cannot delete service 'vm:N', not HA managed!" (delete), all
//! [`crate::ErrorKind::NotFound`]; adding one twice is "resource ID 'vm:N' already
//! defined", [`crate::ErrorKind::AlreadyExists`]. Reading needs `Sys.Audit` on `/`, writing
//! `Sys.Console`.
//!
//! Rules (PVE 9) place resources: `node-affinity` (on which nodes, by priority; `strict`
//! restricts them to those) and `resource-affinity` (`positive`: kept together;
//! `negative`: kept apart). PVE refuses a rule that makes the rule set infeasible; its
//! texts: "create ha rule failed: HA rule 'x' already defined"
//! ([`crate::ErrorKind::AlreadyExists`]), "update HA rules failed: HA rule 'x' does not
//! exist" ([`crate::ErrorKind::NotFound`]), a stale digest
//! ([`crate::ErrorKind::Conflict`]), and "… 400 Rule 'x' is invalid." or "cannot use
//! unmanaged resource(s) …" ([`crate::ErrorKind::Permanent`]).

use std::collections::BTreeMap;

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

/// The HA manager's state of a service: `crm_state` of `status/current`, and `ha.state` of a
/// VM's `status/current` (pve-ha-manager 5.2.0 `HA/Manager.pm` `$valid_service_states`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrmState {
    /// Running where the rules want it.
    Started,
    /// To be started (`request_start`, and `request_start_balance`: placed first).
    RequestStart,
    /// Stopped (also what `disabled` is in the CRM).
    Stopped,
    /// A stop was requested and is being carried out.
    RequestStop,
    /// An online migration is running.
    Migrate,
    /// A stop, move and start is running.
    Relocate,
    /// Its node failed; waiting for the fence.
    Fence,
    /// Fenced; waiting for a node to recover it on.
    Recovery,
    /// Its node is rebooting or shutting down.
    Freeze,
    /// Failed beyond its restart and relocate tries; only `state=disabled` gets it out.
    Error,
    /// A state this client does not know.
    Other,
}

impl CrmState {
    /// PVE's word for it.
    pub fn parse(text: &str) -> CrmState {
        match text {
            "started" => CrmState::Started,
            "request_start" | "request_start_balance" => CrmState::RequestStart,
            "stopped" => CrmState::Stopped,
            "request_stop" => CrmState::RequestStop,
            "migrate" => CrmState::Migrate,
            "relocate" => CrmState::Relocate,
            "fence" => CrmState::Fence,
            "recovery" => CrmState::Recovery,
            "freeze" => CrmState::Freeze,
            "error" => CrmState::Error,
            _ => CrmState::Other,
        }
    }

    /// Whether the HA manager is moving the service to another node (the VM's config moves
    /// with it once the move ends; `request_start_balance` may move a stopped one first).
    pub fn is_moving(self) -> bool {
        matches!(
            self,
            CrmState::Migrate | CrmState::Relocate | CrmState::RequestStart
        )
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

/// The type of an HA rule (`type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HaRuleType {
    /// `node-affinity`: the nodes its resources run on.
    NodeAffinity,
    /// `resource-affinity`: resources kept together or apart.
    ResourceAffinity,
    /// A type this client does not know.
    #[serde(other)]
    Other,
}

impl HaRuleType {
    /// PVE's word for it (`Other` has none and must not be sent).
    pub fn as_str(self) -> &'static str {
        match self {
            HaRuleType::NodeAffinity => "node-affinity",
            HaRuleType::ResourceAffinity => "resource-affinity",
            HaRuleType::Other => "",
        }
    }
}

/// A resource-affinity rule's `affinity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HaAffinity {
    /// Keep the resources on one node.
    Positive,
    /// Keep the resources on different nodes.
    Negative,
    /// An affinity this client does not know.
    #[serde(other)]
    Other,
}

impl HaAffinity {
    /// PVE's word for it (`Other` has none and must not be sent).
    pub fn as_str(self) -> &'static str {
        match self {
            HaAffinity::Positive => "positive",
            HaAffinity::Negative => "negative",
            HaAffinity::Other => "",
        }
    }
}

/// A row of `GET /cluster/ha/rules` (and of `GET …/rules/{rule}`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct HaRule {
    /// The rule's id.
    pub rule: String,
    /// Its type.
    #[serde(rename = "type")]
    pub rule_type: HaRuleType,
    /// The resources, comma-separated and sorted (`vm:100,vm:101`).
    #[serde(default)]
    pub resources: String,
    /// node-affinity: `node[:priority]`, comma-separated, sorted.
    #[serde(default)]
    pub nodes: Option<String>,
    /// node-affinity: restricted to its nodes (absent: not set, PVE's default off).
    #[serde(default, deserialize_with = "de::opt_bool01")]
    pub strict: Option<bool>,
    /// resource-affinity: together or apart.
    #[serde(default)]
    pub affinity: Option<HaAffinity>,
    /// Present and true when the rule is disabled.
    #[serde(default, deserialize_with = "de::opt_bool01")]
    pub disable: Option<bool>,
    /// Free text.
    #[serde(default)]
    pub comment: Option<String>,
    /// Digest of the whole rules file, for conditional updates.
    #[serde(default)]
    pub digest: Option<String>,
    /// Position in the rules file, from 1.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub order: Option<u32>,
    /// Why the rule set is infeasible with this rule (the HA manager ignores it then), by
    /// property.
    #[serde(default)]
    pub errors: Option<BTreeMap<String, Vec<String>>>,
}

impl HaRule {
    /// The resource ids (`vm:100`).
    pub fn resource_ids(&self) -> Vec<&str> {
        self.resources
            .split(',')
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// node-affinity: each node with its priority (0 when none is written).
    pub fn node_priorities(&self) -> Vec<(&str, u32)> {
        let nodes = self.nodes.as_deref().unwrap_or_default();
        nodes
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|entry| match entry.split_once(':') {
                Some((node, priority)) => (node, priority.parse().unwrap_or(0)),
                None => (entry, 0),
            })
            .collect()
    }
}

/// Options of an HA rule, for creating (`POST`) or changing (`PUT`) one; unset fields are
/// not sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HaRuleSettings {
    /// Resource ids (`vm:100`); required to create.
    pub resources: Option<Vec<String>>,
    /// node-affinity: nodes with an optional priority (higher is preferred); required to
    /// create one.
    pub nodes: Option<Vec<(String, Option<u32>)>>,
    /// node-affinity: restrict the resources to these nodes.
    pub strict: Option<bool>,
    /// resource-affinity: required to create one.
    pub affinity: Option<HaAffinity>,
    /// Disable the rule (PVE ignores `false`: enable with `delete = ["disable"]`).
    pub disable: Option<bool>,
    /// Free text.
    pub comment: Option<String>,
}

impl HaRuleSettings {
    fn append_to(&self, mut form: Form) -> Form {
        if let Some(resources) = &self.resources {
            form = form.text("resources", resources.join(","));
        }
        if let Some(nodes) = &self.nodes {
            let entries: Vec<String> = nodes
                .iter()
                .map(|(node, priority)| match priority {
                    Some(p) => format!("{node}:{p}"),
                    None => node.clone(),
                })
                .collect();
            form = form.text("nodes", entries.join(","));
        }
        if let Some(strict) = self.strict {
            form = form.bool("strict", strict);
        }
        if let Some(affinity) = self.affinity.filter(|a| *a != HaAffinity::Other) {
            form = form.text("affinity", affinity.as_str());
        }
        if let Some(disable) = self.disable {
            form = form.bool("disable", disable);
        }
        form.opt_text("comment", self.comment.clone())
    }

    /// The form of `POST /cluster/ha/rules`.
    pub fn create_form(&self, rule: &str, rule_type: HaRuleType) -> Form {
        let form = Form::new()
            .text("rule", rule)
            .text("type", rule_type.as_str());
        self.append_to(form)
    }

    /// The form of `PUT /cluster/ha/rules/{rule}`: PVE needs the rule's `type`, then these
    /// settings, the keys to remove and the digest the rules file must still have.
    pub fn update_form(
        &self,
        rule_type: HaRuleType,
        delete: &[&str],
        digest: Option<&str>,
    ) -> Form {
        let mut form = self.append_to(Form::new().text("type", rule_type.as_str()));
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

    /// `GET /cluster/ha/rules[?resource=sid]`: every rule in file order (those naming
    /// `resource` only).
    pub async fn rules(self, resource: Option<&str>) -> Result<Vec<HaRule>> {
        let query = Form::new().opt_text("resource", resource);
        self.cluster.client.get("/cluster/ha/rules", &query).await
    }

    /// The rule `id`, `None` when there is none (read from the listing, so a missing rule
    /// is no error).
    pub async fn rule(self, id: &str) -> Result<Option<HaRule>> {
        let rules = self.rules(None).await?;
        Ok(rules.into_iter().find(|r| r.rule == id))
    }

    /// `POST /cluster/ha/rules`. Not idempotent (a second create is `AlreadyExists`, which
    /// after an unknown outcome means the first one took).
    pub async fn create_rule(
        self,
        id: &str,
        rule_type: HaRuleType,
        settings: &HaRuleSettings,
    ) -> Result<()> {
        let form = settings.create_form(id, rule_type);
        let _: serde_json::Value = self.cluster.client.post("/cluster/ha/rules", &form).await?;
        Ok(())
    }

    /// `PUT /cluster/ha/rules/{rule}` (`rule_type` must be the rule's own); with `digest`,
    /// only if the rules file is unchanged since it was read (else
    /// [`crate::ErrorKind::Conflict`]).
    pub async fn update_rule(
        self,
        id: &str,
        rule_type: HaRuleType,
        settings: &HaRuleSettings,
        delete: &[&str],
        digest: Option<&str>,
    ) -> Result<()> {
        let form = settings.update_form(rule_type, delete, digest);
        let _: serde_json::Value = self.cluster.client.put(&rule_path(id), &form).await?;
        Ok(())
    }

    /// `DELETE /cluster/ha/rules/{rule}`; a rule already gone is no error (PVE answers the
    /// same).
    pub async fn delete_rule(self, id: &str) -> Result<()> {
        let _: serde_json::Value = self
            .cluster
            .client
            .delete(&rule_path(id), &Form::new())
            .await?;
        Ok(())
    }
}

fn resource_path(sid: &str) -> String {
    format!("/cluster/ha/resources/{}", seg(sid))
}

fn rule_path(id: &str) -> String {
    format!("/cluster/ha/rules/{}", seg(id))
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
    fn rules_decode_pve_shapes_and_forms_encode_them() {
        let rules: Vec<HaRule> = serde_json::from_value(json!([
            {"rule": "pin", "type": "node-affinity", "resources": "vm:100",
             "nodes": "pve1,pve2:2", "strict": 1, "digest": "d1", "order": 1},
            {"rule": "apart", "type": "resource-affinity", "resources": "vm:101,vm:102",
             "affinity": "negative", "disable": 1, "digest": "d1", "order": "2",
             "errors": {"resources": ["rule defines more resources than available nodes"]}},
            {"rule": "new", "type": "future-affinity", "digest": "d1"}
        ]))
        .unwrap();
        assert_eq!(rules[0].node_priorities(), [("pve1", 0), ("pve2", 2)]);
        assert_eq!(rules[0].strict, Some(true));
        assert_eq!(rules[1].resource_ids(), ["vm:101", "vm:102"]);
        assert_eq!(rules[1].affinity, Some(HaAffinity::Negative));
        assert_eq!(rules[1].order, Some(2));
        assert_eq!(rules[1].errors.as_ref().unwrap()["resources"].len(), 1);
        assert_eq!(rules[2].rule_type, HaRuleType::Other);
        assert!(rules[2].resource_ids().is_empty());

        let apart = HaRuleSettings {
            resources: Some(vec!["vm:101".into(), "vm:102".into()]),
            affinity: Some(HaAffinity::Negative),
            ..HaRuleSettings::default()
        };
        assert_eq!(
            apart
                .create_form("apart", HaRuleType::ResourceAffinity)
                .encode(),
            "rule=apart&type=resource-affinity&resources=vm%3A101%2Cvm%3A102&affinity=negative"
        );
        let pin = HaRuleSettings {
            nodes: Some(vec![("pve1".into(), None), ("pve2".into(), Some(2))]),
            strict: Some(true),
            ..HaRuleSettings::default()
        };
        assert_eq!(
            pin.update_form(HaRuleType::NodeAffinity, &["comment"], Some("d1"))
                .encode(),
            "type=node-affinity&nodes=pve1%2Cpve2%3A2&strict=1&delete=comment&digest=d1"
        );
        assert_eq!(
            rule_path("a b"),
            format!("/cluster/ha/rules/{}", seg("a b"))
        );
    }

    #[test]
    fn crm_states_parse_pve_words() {
        assert_eq!(CrmState::parse("error"), CrmState::Error);
        assert_eq!(
            CrmState::parse("request_start_balance"),
            CrmState::RequestStart
        );
        assert!(CrmState::parse("migrate").is_moving());
        assert!(!CrmState::parse("started").is_moving());
        assert_eq!(CrmState::parse("queued"), CrmState::Other);
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
