//! `GET` and `POST /nodes/{node}/qemu/{vmid}/migrate` (qemu-server `src/PVE/API2/Qemu.pm`,
//! `migrate_vm_precondition` and `migrate_vm`).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Qemu, expect_upid};
use crate::error::Result;
use crate::upid::Upid;
use crate::wire::{Form, de};

/// `POST …/migrate` parameters.
///
/// PVE's checks before the task starts (HTTP 500 unless noted): the target is the local
/// node (400 `target`), "VM is locked (…)", "can't migrate running VM without --online",
/// storages not available on the target. A running VM without `online` is refused; a
/// stopped one with `online` is migrated offline with a warning. An HA-managed VM is
/// migrated by the HA manager: the task is then an `hamigrate` request that ends at once.
/// A CD-ROM image on node-local storage fails the task itself (`QemuMigrate.pm`,
/// `scan_local_volumes`: "can't migrate local disk 'VOLID': local cdrom image").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateRequest {
    /// The node to move to.
    pub target: String,
    /// Live migration of a running VM.
    pub online: bool,
    /// Copy local disks along (storage migration).
    pub with_local_disks: bool,
    /// Storage mapping on the target: one storage id for all, `SRC:DST,…`, or `1` for
    /// "the same storage id".
    pub targetstorage: Option<String>,
}

impl MigrateRequest {
    /// Move to `target`: live when the VM runs, offline otherwise (PVE ignores `online`
    /// for a stopped VM).
    pub fn to(target: &str) -> MigrateRequest {
        MigrateRequest {
            target: target.to_owned(),
            online: true,
            with_local_disks: false,
            targetstorage: None,
        }
    }

    /// The form PVE receives; flags left off are not sent.
    pub fn to_form(&self) -> Form {
        let mut form = Form::new().text("target", self.target.clone());
        if self.online {
            form = form.bool("online", true);
        }
        if self.with_local_disks {
            form = form.bool("with-local-disks", true);
        }
        form.opt_text("targetstorage", self.targetstorage.clone())
    }
}

/// `GET …/migrate`: what PVE found before a migration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MigratePreconditions {
    /// Whether the VM runs (a migration then needs `online`).
    #[serde(deserialize_with = "de::bool01")]
    pub running: bool,
    /// Nodes the VM may move to (the VM's own node is never listed).
    #[serde(default)]
    pub allowed_nodes: Vec<String>,
    /// Per node, why not. PVE lists nodes without a reason here too (an empty entry):
    /// use [`MigratePreconditions::refusal`] or `allowed_nodes`.
    #[serde(default)]
    pub not_allowed_nodes: BTreeMap<String, NodeRefusal>,
    /// Volumes on storage that is not shared, CD-ROM images included (an empty drive,
    /// `none`, is not listed).
    #[serde(default)]
    pub local_disks: Vec<LocalDisk>,
    /// Local resources (PCI or USB passthrough, …) that block migration.
    #[serde(default)]
    pub local_resources: Vec<String>,
    /// HA resources that move with the VM (positive affinity), for an HA-managed VM.
    #[serde(default, rename = "dependent-ha-resources")]
    pub dependent_ha_resources: Vec<String>,
}

impl MigratePreconditions {
    /// Why the VM may not move to `node`, if PVE named a reason.
    pub fn refusal(&self, node: &str) -> Option<&NodeRefusal> {
        self.not_allowed_nodes.get(node).filter(|r| !r.is_empty())
    }

    /// The CD-ROM images on node-local storage: PVE's migration task fails on them ("can't
    /// migrate local disk 'VOLID': local cdrom image"), whatever `with-local-disks` says.
    pub fn local_cdroms(&self) -> impl Iterator<Item = &LocalDisk> {
        self.local_disks.iter().filter(|d| d.cdrom)
    }
}

/// One entry of `not_allowed_nodes`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct NodeRefusal {
    /// Storages of the VM's volumes that the node cannot reach (disabled, or restricted
    /// to other nodes).
    #[serde(default)]
    pub unavailable_storages: Vec<String>,
    /// Mapped resources (PCI, USB) with no mapping on the node.
    #[serde(default, rename = "unavailable-resources")]
    pub unavailable_resources: Vec<String>,
    /// HA resources whose rules keep the VM off the node.
    #[serde(default, rename = "blocking-ha-resources")]
    pub blocking_ha_resources: Vec<BlockingHaResource>,
}

impl NodeRefusal {
    /// Whether PVE named no reason.
    pub fn is_empty(&self) -> bool {
        self.unavailable_storages.is_empty()
            && self.unavailable_resources.is_empty()
            && self.blocking_ha_resources.is_empty()
    }
}

/// An HA resource that blocks a migration target.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BlockingHaResource {
    /// e.g. `vm:101`.
    pub sid: String,
    /// e.g. `resource-affinity`.
    pub cause: String,
}

/// A volume of `local_disks` (qemu-server `foreach_volid` attributes; PVE sends more).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LocalDisk {
    /// The volume id, e.g. `local:iso/seed.iso`.
    pub volid: String,
    /// A CD-ROM image.
    #[serde(default, deserialize_with = "de::bool01")]
    pub cdrom: bool,
    /// An `unusedN` volume.
    #[serde(default, deserialize_with = "de::bool01")]
    pub is_unused: bool,
    /// Size in bytes, when known.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub size: Option<u64>,
}

impl<'a> Qemu<'a> {
    /// `GET …/migrate[?target=NODE]`: the preconditions (a read; safe to repeat). A locked
    /// VM is refused with "VM is locked (…)".
    pub async fn migrate_preconditions(self, target: Option<&str>) -> Result<MigratePreconditions> {
        let query = Form::new().opt_text("target", target);
        self.client.get(&self.path("migrate"), &query).await
    }

    /// `POST …/migrate`: a `qmigrate` task (or `hamigrate` for an HA-managed VM, which
    /// only asks the HA manager: wait for the VM's node to change, not for the task). Not
    /// idempotent while the task runs: after an unknown outcome, look where the VM is
    /// ([`crate::cluster::Cluster::locate_vm`]) before sending it again.
    pub async fn migrate(self, request: &MigrateRequest) -> Result<Upid> {
        let path = self.path("migrate");
        let upid: Option<Upid> = self.client.post(&path, &request.to_form()).await?;
        expect_upid("POST", &path, upid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn migrate_form_keys() {
        assert_eq!(
            MigrateRequest::to("pve2").to_form().encode(),
            "target=pve2&online=1"
        );
        let full = MigrateRequest {
            target: "pve3".into(),
            online: false,
            with_local_disks: true,
            targetstorage: Some("local-lvm".into()),
        };
        assert_eq!(
            full.to_form().encode(),
            "target=pve3&with-local-disks=1&targetstorage=local-lvm"
        );
    }

    #[test]
    fn preconditions_decode_pve_shapes() {
        // As migrate_vm_precondition builds it: every other node gets an entry in
        // not_allowed_nodes (empty when nothing blocks it), booleans as 0/1.
        let answer = json!({
            "running": 1,
            "allowed_nodes": ["pve2"],
            "not_allowed_nodes": {
                "pve2": {},
                "pve3": {
                    "unavailable_storages": ["local-zfs"],
                    "blocking-ha-resources": [{"sid": "vm:102", "cause": "resource-affinity"}]
                }
            },
            "local_disks": [
                {"volid": "local:iso/seed-edge-0-3f2a9c1b.iso", "cdrom": 1, "size": 374784,
                 "referenced_in_config": 1, "is_attached": 1, "drivename": "ide2"},
                {"volid": "local-lvm:vm-100-disk-0", "size": 21_474_836_480_u64, "is_attached": 1}
            ],
            "local_resources": [],
            "mapped-resources": [],
            "mapped-resource-info": {},
            "has-dbus-vmstate": 1
        });
        let p: MigratePreconditions = serde_json::from_value(answer).unwrap();
        assert!(p.running);
        assert_eq!(p.allowed_nodes, ["pve2"]);
        assert_eq!(p.refusal("pve2"), None);
        assert_eq!(p.refusal("pve9"), None);
        let refusal = p.refusal("pve3").unwrap();
        assert_eq!(refusal.unavailable_storages, ["local-zfs"]);
        assert_eq!(refusal.blocking_ha_resources[0].sid, "vm:102");
        let cdroms: Vec<_> = p.local_cdroms().map(|d| d.volid.as_str()).collect();
        assert_eq!(cdroms, ["local:iso/seed-edge-0-3f2a9c1b.iso"]);
        assert_eq!(p.local_disks[1].size, Some(21474836480));
        assert!(!p.local_disks[1].cdrom);
        // A stopped VM on a one-node cluster: the lists are empty or absent.
        let lone: MigratePreconditions = serde_json::from_value(json!({
            "running": 0, "allowed_nodes": [], "not_allowed_nodes": {},
            "local_disks": [], "local_resources": []
        }))
        .unwrap();
        assert!(!lone.running && lone.allowed_nodes.is_empty());
        assert!(lone.dependent_ha_resources.is_empty());
    }
}
