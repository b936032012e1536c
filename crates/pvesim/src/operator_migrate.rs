//! An operator's migration through the admin API (`POST /_sim/vms/{vmid}/migrate`, body
//! `{"target": "pve2"}`): what `qm migrate` runs (the API's `migrate_vm` as `root@pam`,
//! `online` for a running VM), answered once its `qmigrate` task ended. Not PVE behaviour
//! but a test facility beside the hold ([`crate::hold`]): admin requests are never held,
//! so a test moves a VM at a chosen request of a client's run while that client waits.
//! Refused (409) are what would not be this one migration: an HA-managed VM (the HA
//! manager moves it: `POST /_sim/ha/rebalance`), a VM with a task running (PVE's
//! `qmigrate` would wait for the config's flock), and whatever `migrate_vm` refuses, in
//! PVE's words.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::call::Call;
use crate::http::{HttpResponse, json_response, plain_error};
use crate::shared::Shared;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MigrateRequest {
    target: String,
}

/// `vms/{vmid}/migrate` after `/_sim/`, with the request's body.
pub async fn handle(shared: &Arc<Shared>, path: &str, body: &[u8]) -> HttpResponse {
    let vmid = path
        .strip_prefix("vms/")
        .and_then(|rest| rest.strip_suffix("/migrate"))
        .and_then(|vmid| vmid.parse::<u32>().ok());
    let Some(vmid) = vmid else {
        return plain_error(404, "expected POST /_sim/vms/{vmid}/migrate");
    };
    let request: MigrateRequest = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(err) => return plain_error(400, &format!("invalid migrate request: {err}")),
    };
    let upid = match start(shared, vmid, &request.target) {
        Ok(upid) => upid,
        Err((status, reason)) => return plain_error(status, &reason),
    };
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let world = shared.lock();
        let exitstatus = match world.tasks.get(&upid).map(|t| t.exitstatus.clone()) {
            Some(None) => continue,
            Some(Some(exit)) => exit,
            None => "task vanished".to_owned(),
        };
        let node = world.vms.get(&vmid).map(|vm| vm.node.clone());
        let answer = json!({ "upid": upid, "exitstatus": exitstatus, "node": node });
        return json_response(200, None, &answer);
    }
}

/// Starts the `qmigrate` task; its UPID, or the refusal's status and reason.
fn start(shared: &Arc<Shared>, vmid: u32, target: &str) -> Result<String, (u16, String)> {
    let mut world = shared.lock();
    let Some(vm) = world.vms.get(&vmid) else {
        return Err((404, format!("no VM {vmid}")));
    };
    if world.ha.is_managed(vmid) {
        return Err((
            409,
            format!("VM {vmid} is HA-managed: the HA manager moves it (/_sim/ha/rebalance)"),
        ));
    }
    let id = vmid.to_string();
    if world
        .tasks
        .values()
        .any(|task| task.exitstatus.is_none() && task.id == id)
    {
        return Err((409, format!("a task of VM {vmid} is running")));
    }
    let path = BTreeMap::from([
        ("node".to_owned(), vm.node.clone()),
        ("vmid".to_owned(), id),
    ]);
    let mut params = Map::new();
    params.insert("target".into(), Value::from(target));
    params.insert("online".into(), Value::from(vm.running));
    let call = Call::internal("/nodes/{node}/qemu/{vmid}/migrate", &path, &params);
    match crate::migrate::migrate_vm(shared, &mut world, &call) {
        Ok(reply) => Ok(reply.data.as_str().unwrap_or_default().to_owned()),
        Err(error) => Err((409, error.message.trim_end().to_owned())),
    }
}
