//! `/cluster/resources`, `/cluster/nextid`, and `/cluster/ha` in [`ha`].

use serde::Deserialize;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::wire::{Form, de, value_as_u64};

pub mod ha;

/// A VM row of `GET /cluster/resources?type=vm`. Fields from pvestatd (name, template, max*)
/// are missing for a while after a clone; `lock` and `tags` come from the config directly.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ClusterVm {
    /// `qemu/<vmid>` or `lxc/<vmid>`.
    pub id: String,
    /// VMID.
    #[serde(deserialize_with = "de::int")]
    pub vmid: u32,
    /// Node the guest lives on now.
    pub node: String,
    /// `qemu` or `lxc`.
    #[serde(rename = "type")]
    pub guest_type: String,
    /// `running`, `stopped` or `unknown` (no stats yet).
    #[serde(default)]
    pub status: Option<String>,
    /// Name, when stats exist.
    #[serde(default)]
    pub name: Option<String>,
    /// Template flag, when stats exist.
    #[serde(default, deserialize_with = "de::bool01")]
    pub template: bool,
    /// Config lock (`clone`, `backup`, …).
    #[serde(default)]
    pub lock: Option<String>,
    /// Raw tag string (`a;b;proxy`).
    #[serde(default)]
    pub tags: Option<String>,
    /// Pool, if any.
    #[serde(default)]
    pub pool: Option<String>,
    /// Memory size, bytes.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub maxmem: Option<u64>,
    /// Boot disk size, bytes.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub maxdisk: Option<u64>,
    /// CPUs.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub maxcpu: Option<u64>,
    /// The HA state of a guest that is an HA resource (pve-manager `API2/Cluster.pm`
    /// `resources`: the CRM's state, else the resource's requested state when set); absent
    /// for a guest outside HA.
    #[serde(default)]
    pub hastate: Option<String>,
}

impl ClusterVm {
    /// Tags as a list (PVE stores them `;`-joined).
    pub fn tag_list(&self) -> Vec<&str> {
        split_tags(self.tags.as_deref())
    }
}

/// Splits a PVE tag string on `;`, `,` and spaces.
pub fn split_tags(tags: Option<&str>) -> Vec<&str> {
    tags.unwrap_or("")
        .split([';', ',', ' '])
        .filter(|t| !t.is_empty())
        .collect()
}

/// Calls under `/cluster`.
#[derive(Debug, Clone, Copy)]
pub struct Cluster<'a> {
    client: &'a Client,
}

impl Cluster<'_> {
    /// `GET /cluster/resources?type=vm`: every guest the token may see, in one call.
    pub async fn vm_resources(self) -> Result<Vec<ClusterVm>> {
        self.client
            .get("/cluster/resources", &Form::new().text("type", "vm"))
            .await
    }

    /// Where a guest lives now (it may have been migrated or moved by HA): its row of
    /// `/cluster/resources`, or `None` when no node has it.
    pub async fn locate_vm(self, vmid: u32) -> Result<Option<ClusterVm>> {
        Ok(self
            .vm_resources()
            .await?
            .into_iter()
            .find(|vm| vm.vmid == vmid))
    }

    /// `GET /cluster/nextid`: advisory only (racy). With `Some(vmid)`, checks that id:
    /// a taken id is an [`crate::ErrorKind::AlreadyExists`] error.
    pub async fn next_id(self, vmid: Option<u32>) -> Result<u32> {
        let query = match vmid {
            Some(v) => Form::new().int("vmid", v),
            None => Form::new(),
        };
        // PVE returns the id as a JSON string ("101").
        let value: serde_json::Value = self.client.get("/cluster/nextid", &query).await?;
        value_as_u64(&value)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                let shown = self.client.scrub(&value.to_string());
                Error::decode("GET", "/cluster/nextid", format!("not a VMID: {shown}"))
            })
    }
}

impl Client {
    /// Calls under `/cluster`.
    pub fn cluster(&self) -> Cluster<'_> {
        Cluster { client: self }
    }
}
