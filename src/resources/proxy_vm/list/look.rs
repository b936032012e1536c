//! Reading one VM a list found in the cluster listing: whose it is, from the ownership mark in
//! its config (one `GET …/config`), or, when the client asked for states, the whole VM as a
//! read observes it, turned into the state an import by VMID makes.
//!
//! It never writes, and decides nothing about what is listed (that is `filter`).

use std::sync::Arc;

use pve::cluster::ClusterVm;
use pve::{ErrorKind, RetryPolicy, retry_idempotent};
use tfplugin::Value;

use super::super::attr;
use super::super::lifecycle::{self, Expected, ExpectedToken, Found, StepError};
use super::super::model::Observed;
use crate::context::Configured;
use crate::ownership::{Mark, fleet_in_tags};

/// A VM carrying our mark.
#[derive(Debug, Clone)]
pub struct Seen {
    pub vmid: u32,
    /// Where it is now.
    pub node: String,
    /// Its name as PVE holds it (what a state of it holds).
    pub name: String,
    pub mark: Mark,
    /// Its state as an import by VMID makes it, when the client asked for states.
    pub state: Option<Value>,
}

/// Why a VM could not be read: it is left out, with a warning.
#[derive(Debug)]
pub struct Unread {
    pub vmid: u32,
    pub node: String,
    pub error: StepError,
}

/// Reads `vm`: `None` when it carries no mark of ours or is gone.
pub async fn look(
    configured: Arc<Configured>,
    vm: ClusterVm,
    whole: bool,
) -> Result<Option<Seen>, Unread> {
    let read = if whole {
        observe(&configured, &vm)
            .await
            .map(|found| found.and_then(from_observed))
    } else {
        mark_of(&configured, &vm).await
    };
    read.map_err(|error| Unread {
        vmid: vm.vmid,
        node: vm.node.clone(),
        error,
    })
}

/// The mark and name from the VM's config: what an identity needs.
async fn mark_of(configured: &Configured, vm: &ClusterVm) -> Result<Option<Seen>, StepError> {
    let qemu = configured.client.node(&vm.node).qemu(vm.vmid);
    let config = match retry_idempotent(&RetryPolicy::default(), || qemu.config()).await {
        Ok(config) => config,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(mark) = config.description().as_deref().and_then(Mark::parse) else {
        return Ok(None);
    };
    Ok(Some(Seen {
        vmid: vm.vmid,
        node: vm.node.clone(),
        name: config.name().unwrap_or_default(),
        mark,
        state: None,
    }))
}

/// The whole VM as a read of an import observes it. The read wants the mark's fleet, which the
/// fleet tag names unless someone edited one of them: then the mark's fleet is asked again.
async fn observe(configured: &Configured, vm: &ClusterVm) -> Result<Option<Observed>, StepError> {
    let mut fleet = fleet_in_tags(vm.tags.as_deref().unwrap_or("")).unwrap_or_default();
    for _ in 0..2 {
        let any_vm_of_the_fleet = Expected {
            name: None,
            fleet: &fleet,
            token: ExpectedToken::Any,
        };
        match lifecycle::read(configured, vm.vmid, any_vm_of_the_fleet).await? {
            Found::Ours(observed) => return Ok(Some(*observed)),
            Found::NotOurs {
                mark: Some(mark), ..
            } if mark.fleet != fleet => fleet = mark.fleet,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

fn from_observed(observed: Observed) -> Option<Seen> {
    let mark = observed.mark.clone()?;
    let seed = Value::object([(attr::VMID, Value::number(i64::from(observed.vmid)))]);
    Some(Seen {
        vmid: observed.vmid,
        node: observed.node.clone(),
        state: Some(observed.to_state(&seed)),
        name: observed.name,
        mark,
    })
}
