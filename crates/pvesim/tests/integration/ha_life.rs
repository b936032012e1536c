//! The HA stack: resources (pve-ha-manager `src/PVE/API2/HA/Resources.pm`,
//! `src/PVE/HA/Config.pm`), status (`src/PVE/API2/HA/Status.pm`, `src/PVE/HA/Tools.pm`
//! `get_verbose_service_state`), the CRM and LRM (`src/PVE/HA/Manager.pm`,
//! `src/PVE/HA/LRM.pm`, `src/PVE/HA/Resources/PVEVM.pm`), and what qemu-server
//! `src/PVE/API2/Qemu.pm` does for an HA-managed VM (`vm_start`, `vm_stop`, `vm_shutdown`,
//! `migrate_vm`, `destroy_vm`'s `$early_checks`).

use crate::cluster_life::{run_task, task_log};
use crate::common::{Harness, start};
use pvesim::testing::fast_config;
use reqwest::StatusCode;
use serde_json::{Value, json};

pub async fn add_resource(h: &Harness, form: &[(&str, &str)]) {
    let answer = h.post("/cluster/ha/resources", form).await;
    assert_eq!(answer.data(), Value::Null);
}

/// The `service:<sid>` row of `/cluster/ha/status/current`.
pub async fn service_row(h: &Harness, sid: &str) -> Value {
    let rows = h.get("/cluster/ha/status/current").await.data();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["sid"] == sid)
        .cloned()
        .unwrap_or(Value::Null)
}

pub async fn poll_service(h: &Harness, sid: &str, state: &str) -> Value {
    let sid = sid.to_string();
    let state = state.to_string();
    let answer = h
        .poll_until("/cluster/ha/status/current", |a| {
            a.json()["data"]
                .as_array()
                .is_some_and(|rows| rows.iter().any(|r| r["sid"] == sid && r["state"] == state))
        })
        .await;
    let rows = answer.data();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["sid"] == sid)
        .unwrap()
        .clone()
}

pub async fn poll_vm(h: &Harness, node: &str, vmid: u32, status: &str) -> Value {
    let path = format!("/nodes/{node}/qemu/{vmid}/status/current");
    let answer = h
        .poll_until(&path, |a| {
            a.status == StatusCode::OK && a.json()["data"]["status"] == status
        })
        .await;
    answer.data()
}

/// `Resources.pm`: `create`, `index`, `read` (a bare VMID is `parse_sid`'s shortcut),
/// `update` (digest, `delete`), `delete`, and their refusals.
#[tokio::test]
async fn ha_resources_are_created_read_updated_and_deleted() {
    let h = start(fast_config()).await;
    add_resource(
        &h,
        &[
            ("sid", "vm:101"),
            ("max_restart", "2"),
            ("comment", "gitlab"),
        ],
    )
    .await;
    let list = h.get("/cluster/ha/resources").await.data();
    let row = &list[0];
    assert_eq!(
        (row["sid"].clone(), row["type"].clone()),
        (json!("vm:101"), json!("vm"))
    );
    assert_eq!(
        (row["max_restart"].clone(), row["comment"].clone()),
        (json!(2), json!("gitlab"))
    );
    assert!(
        row.get("state").is_none(),
        "unset options are not shown: {row}"
    );
    let digest = row["digest"].as_str().unwrap().to_string();
    assert_eq!(
        h.get("/cluster/ha/resources/101").await.data()["sid"],
        "vm:101"
    );

    let dup = h.post("/cluster/ha/resources", &[("sid", "vm:101")]).await;
    assert_eq!(
        dup.message(),
        "create resource failed: resource ID 'vm:101' already defined\n"
    );
    let missing = h.post("/cluster/ha/resources", &[("sid", "vm:555")]).await;
    assert_eq!(
        missing.message(),
        "resource 'vm:555' does not exist in cluster\n"
    );
    let group = h
        .post(
            "/cluster/ha/resources",
            &[("sid", "vm:100"), ("group", "g1")],
        )
        .await;
    assert_eq!(
        group.message(),
        "invalid parameter 'group': ha groups have been migrated to rules\n"
    );
    let bad = h.post("/cluster/ha/resources", &[("sid", "vm-100")]).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        bad.json()["errors"]["sid"],
        "invalid format - value does not look like a valid ha resource id\n"
    );

    let path = "/cluster/ha/resources/vm:101";
    let stale = h
        .put(path, &[("state", "stopped"), ("digest", "0000")])
        .await;
    assert!(
        stale.message().contains("detected modified configuration"),
        "{}",
        stale.body
    );
    h.put(
        path,
        &[
            ("state", "stopped"),
            ("delete", "max_restart"),
            ("digest", &digest),
        ],
    )
    .await
    .data();
    let row = h.get(path).await.data();
    assert_eq!(row["state"], "stopped");
    assert!(row.get("max_restart").is_none(), "{row}");
    assert_ne!(row["digest"], json!(digest));

    assert_eq!(h.delete(path).await.data(), Value::Null);
    assert_eq!(h.get("/cluster/ha/resources").await.data(), json!([]));
    let again = h.delete(path).await;
    assert_eq!(
        again.message(),
        "cannot delete service 'vm:101', not HA managed!\n"
    );
    h.sim.shutdown().await;
}

/// `vm_start` of an HA-managed VM is a `hastart` task that only sets the requested state;
/// the CRM and LRM start the VM later (`ha_delay_ms`). `status/current` reports `ha`.
#[tokio::test]
async fn ha_start_is_a_request_the_manager_carries_out() {
    let mut config = fast_config();
    // Long enough that the VM cannot have been started when the request task has ended.
    config.timings.ha_delay_ms = 60_000;
    let h = start(config).await;
    add_resource(&h, &[("sid", "vm:102"), ("state", "stopped")]).await;
    let (upid, exit) = run_task(&h, "/nodes/pve3/qemu/102/status/start", &[]).await;
    assert!(upid.contains(":hastart:102:"), "{upid}");
    assert_eq!(exit, "OK");
    assert!(
        task_log(&h, &upid)
            .await
            .contains(&"Requesting HA start for VM 102".to_string())
    );
    assert_eq!(
        h.get("/cluster/ha/resources/vm:102").await.data()["state"],
        "started"
    );
    let status = h.get("/nodes/pve3/qemu/102/status/current").await.data();
    assert_eq!(status["status"], "stopped", "only requested so far");
    assert_eq!(status["ha"]["managed"], 1);
    assert_eq!(service_row(&h, "vm:102").await["state"], "queued");

    let mut timings = h.admin.timings().await;
    timings.ha_delay_ms = 20;
    h.admin.set_timings(&timings).await;
    poll_vm(&h, "pve3", 102, "running").await;
    let row = poll_service(&h, "vm:102", "started").await;
    assert_eq!(
        (row["crm_state"].clone(), row["request_state"].clone()),
        (json!("started"), json!("started"))
    );
    assert_eq!(row["status"], "vm:102 (pve3, started)");
    let starts = h.get("/nodes/pve3/tasks?typefilter=qmstart").await.data();
    assert_eq!(
        starts[0]["user"], "root@pam",
        "the LRM starts it as root@pam"
    );
    h.sim.shutdown().await;
}

/// `vm_stop` and `vm_shutdown` of an HA-managed VM are `hastop` tasks (`crm-command stop`);
/// the CRM's `next_state_started` persists `state: stopped` and the LRM stops the VM
/// (`PVEVM::shutdown`: a `qmshutdown` with a timeout, a `qmstop` for timeout 0).
/// `overrule-shutdown` is refused for HA resources.
#[tokio::test]
async fn ha_stop_and_shutdown_are_requests() {
    let h = start(fast_config()).await;
    add_resource(&h, &[("sid", "vm:101")]).await;
    poll_service(&h, "vm:101", "started").await;
    let overrule = h
        .post(
            "/nodes/pve2/qemu/101/status/stop",
            &[("overrule-shutdown", "1")],
        )
        .await;
    assert_eq!(
        overrule.json()["errors"]["overrule-shutdown"],
        "Not applicable for HA resources."
    );

    let (upid, exit) = run_task(&h, "/nodes/pve2/qemu/101/status/shutdown", &[]).await;
    assert!(upid.contains(":hastop:101:"), "{upid}");
    assert_eq!(exit, "OK");
    poll_vm(&h, "pve2", 101, "stopped").await;
    let row = poll_service(&h, "vm:101", "stopped").await;
    assert_eq!(row["request_state"], "stopped");
    assert_eq!(
        h.get("/cluster/ha/resources/vm:101").await.data()["state"],
        "stopped"
    );
    let shutdowns = h
        .get("/nodes/pve2/tasks?typefilter=qmshutdown")
        .await
        .data();
    assert_eq!(shutdowns[0]["user"], "root@pam");

    let (_, exit) = run_task(&h, "/nodes/pve2/qemu/101/status/start", &[]).await;
    assert_eq!(exit, "OK");
    poll_vm(&h, "pve2", 101, "running").await;
    let (upid, _) = run_task(&h, "/nodes/pve2/qemu/101/status/stop", &[]).await;
    assert!(upid.contains(":hastop:101:"), "{upid}");
    poll_vm(&h, "pve2", 101, "stopped").await;
    let stops = h.get("/nodes/pve2/tasks?typefilter=qmstop").await.data();
    assert_eq!(stops[0]["user"], "root@pam", "a hard stop for timeout 0");
    h.sim.shutdown().await;
}

/// `migrate_vm` of an HA-managed VM is a `hamigrate` task; the CRM moves the service and
/// the LRM runs the real migration (`PVEVM::migrate`: online, with local disks, forced).
#[tokio::test]
async fn ha_migrate_is_a_request_the_lrm_carries_out() {
    let h = start(fast_config()).await;
    add_resource(&h, &[("sid", "vm:101")]).await;
    poll_service(&h, "vm:101", "started").await;
    let form = [("target", "pve3"), ("online", "1")];
    let (upid, exit) = run_task(&h, "/nodes/pve2/qemu/101/migrate", &form).await;
    assert!(upid.contains(":hamigrate:101:"), "{upid}");
    assert_eq!(exit, "OK");
    let log = task_log(&h, &upid).await;
    assert!(log.contains(&"Requesting HA migration for VM 101 to node pve3".to_string()));
    poll_vm(&h, "pve3", 101, "running").await;
    let row = poll_service(&h, "vm:101", "started").await;
    assert_eq!(row["node"], "pve3");
    // pve-manager `API2/Cluster.pm` `resources`: `hastate`, the CRM's state.
    let resources = h.get("/cluster/resources?type=vm").await.data();
    let vm = resources
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["vmid"] == 101)
        .unwrap()
        .clone();
    assert_eq!(
        (vm["node"].clone(), vm["hastate"].clone()),
        (json!("pve3"), json!("started"))
    );
    let migrations = h.get("/nodes/pve2/tasks?typefilter=qmigrate").await.data();
    assert_eq!(migrations[0]["user"], "root@pam");
    assert_eq!(migrations[0]["status"], "OK");
    h.sim.shutdown().await;
}

/// `destroy_vm`'s `$early_checks` in order: `check_protection`, an HA resource without
/// `purge`, a running VM; with `purge` the VM leaves the HA resources.
#[tokio::test]
async fn destroy_checks_protection_ha_and_running() {
    let h = start(fast_config()).await;
    h.put("/nodes/pve3/qemu/102/config", &[("protection", "1")])
        .await
        .data();
    let protected = h.delete("/nodes/pve3/qemu/102").await;
    assert_eq!(
        protected.message(),
        "can't remove VM 102 - protection mode enabled\n"
    );
    h.put("/nodes/pve3/qemu/102/config", &[("delete", "protection")])
        .await
        .data();
    add_resource(&h, &[("sid", "vm:102"), ("state", "stopped")]).await;
    let ha = h.delete("/nodes/pve3/qemu/102").await;
    assert_eq!(
        ha.message(),
        "unable to remove VM 102 - used in HA resources and purge parameter not set.\n"
    );
    let running = h.delete("/nodes/pve2/qemu/101?purge=1").await;
    assert_eq!(running.message(), "VM 101 is running - destroy failed\n");

    let answer = h
        .delete("/nodes/pve3/qemu/102?purge=1&destroy-unreferenced-disks=1")
        .await;
    let upid = answer.data().as_str().unwrap().to_string();
    assert_eq!(h.wait_task(&upid).await, "OK");
    let log = task_log(&h, &upid).await;
    assert!(log.contains(&"purging VM 102 from related configurations..".to_string()));
    assert!(log.contains(&"NOTE: removed VM 102 from HA resource configuration.".to_string()));
    assert_eq!(h.get("/cluster/ha/resources").await.data(), json!([]));
    h.sim.shutdown().await;
}

/// `/cluster/ha/status/current`: quorum, master, fencing and one `lrm` row per node, then
/// the services (`get_verbose_service_state`; the defaults `read_and_check_resources_config`
/// fills in).
#[tokio::test]
async fn ha_status_current_has_pve_rows() {
    let h = start(fast_config()).await;
    // pve-manager `API2/HAConfig.pm` and `Status.pm` `index`.
    let index = h.get("/cluster/ha").await.data();
    assert_eq!(index[1], json!({"id": "resources"}));
    assert_eq!(
        h.get("/cluster/ha/status").await.data()[0],
        json!({"name": "current"})
    );
    let idle = h.get("/cluster/ha/status/current").await.data();
    assert_eq!(
        idle[0],
        json!({"id": "quorum", "type": "quorum", "node": "pve1",
        "status": "OK", "quorate": 1})
    );
    add_resource(&h, &[("sid", "vm:101")]).await;
    let row = poll_service(&h, "vm:101", "started").await;
    assert_eq!(row["id"], "service:vm:101");
    assert_eq!(
        (row["max_restart"].clone(), row["max_relocate"].clone()),
        (json!(1), json!(1))
    );
    let rows = h.get("/cluster/ha/status/current").await.data();
    let types: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "quorum", "master", "fencing", "lrm", "lrm", "lrm", "service"
        ]
    );
    assert_eq!(rows[2]["armed-state"], "armed");
    assert!(
        rows[3]["status"]
            .as_str()
            .unwrap()
            .starts_with("pve1 (idle, watchdog standby, ")
    );
    assert!(
        rows[4]["status"]
            .as_str()
            .unwrap()
            .starts_with("pve2 (active, watchdog active, ")
    );
    h.sim.shutdown().await;
}

/// A failed node: the CRM fences it after the delay (`fence` in the status until the fence
/// took effect) and `next_state_recovery` moves the
/// service to the best online node (`select_service_node`), where the LRM starts it; the
/// VM's disk is on shared storage, so it starts. The basic scheduler counts running guests
/// outside HA too (pve-ha-manager 5.1.2, `Env/PVE2.pm` `get_basic_service_stats`): pve1 runs
/// `dns1`, pve3 runs nothing, so pve3 is the best node.
#[tokio::test]
async fn failed_node_ha_vm_is_recovered_where_its_storage_is() {
    let mut config = fast_config();
    // The fence lasts one delay: long enough for the poll below to see it.
    config.timings.ha_delay_ms = 1000;
    let h = start(config).await;
    add_resource(&h, &[("sid", "vm:101")]).await;
    poll_service(&h, "vm:101", "started").await;
    h.admin.fail_node("pve2").await;
    let fencing = poll_service(&h, "vm:101", "fence").await;
    assert_eq!(fencing["status"], "vm:101 (pve2, fence)");
    let rows = h.get("/cluster/ha/status/current").await.data();
    let lrm = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "lrm:pve2")
        .unwrap()
        .clone();
    assert!(
        lrm["status"]
            .as_str()
            .unwrap()
            .starts_with("pve2 (old timestamp - dead?")
    );
    let running = poll_vm(&h, "pve3", 101, "running").await;
    assert_eq!(running["ha"]["state"], "started");
    let row = poll_service(&h, "vm:101", "started").await;
    assert_eq!(row["node"], "pve3");
    h.sim.shutdown().await;
}

/// A failed node holding an HA VM on node-local storage: the recovery node cannot start it
/// (its volume is not there), the relocation fails too, and after `max_relocate` the
/// service is in `error` (`next_state_started`); requests are then refused
/// (`check_service_state`) until it is disabled.
#[tokio::test]
async fn failed_node_ha_vm_on_local_storage_ends_in_error() {
    let h = start(fast_config()).await;
    add_resource(&h, &[("sid", "vm:100")]).await;
    poll_service(&h, "vm:100", "started").await;
    h.admin.fail_node("pve1").await;
    let row = poll_service(&h, "vm:100", "error").await;
    assert_eq!(row["crm_state"], "error");
    let node = row["node"].as_str().unwrap().to_string();
    assert_ne!(node, "pve1");
    let (upid, exit) = run_task(&h, &format!("/nodes/{node}/qemu/100/status/start"), &[]).await;
    assert_eq!(
        exit,
        "command 'ha-manager set vm:100 --state started' failed: exit code 255"
    );
    let log = task_log(&h, &upid).await;
    assert!(
        log.contains(
            &"service 'vm:100' in error state, must be disabled and fixed first".to_string()
        ),
        "{log:?}"
    );
    h.put("/cluster/ha/resources/vm:100", &[("state", "disabled")])
        .await
        .data();
    poll_service(&h, "vm:100", "disabled").await;
    h.sim.shutdown().await;
}

/// A reboot freezes the node's HA services (the LRM's `conditional` shutdown policy); once
/// it is back, the LRM starts the `started` ones again (`exec_resource_agent`), `onboot`
/// or not, and startall leaves them to HA.
#[tokio::test]
async fn reboot_restarts_ha_vms_through_the_manager() {
    let h = start(fast_config()).await;
    add_resource(&h, &[("sid", "vm:101")]).await;
    poll_service(&h, "vm:101", "started").await;
    h.admin.reboot_node("pve2").await;
    assert_eq!(
        h.get("/nodes/pve2/qemu/101/status/current")
            .await
            .status
            .as_u16(),
        595
    );
    poll_vm(&h, "pve2", 101, "running").await;
    let starts = h.get("/nodes/pve2/tasks?typefilter=qmstart").await.data();
    assert_eq!(starts[0]["user"], "root@pam");
    h.sim.shutdown().await;
}

/// `Resources.pm` `migrate` and `relocate` queue CRM commands and answer the request
/// (`sid`, `requested-node`); the CRM migrates a running VM online and relocates by stopping
/// it, moving it and starting it again (`PVEVM::migrate` with `online` 0).
#[tokio::test]
async fn ha_resource_migrate_and_relocate_move_the_service() {
    let h = start(fast_config()).await;
    add_resource(&h, &[("sid", "vm:101")]).await;
    poll_service(&h, "vm:101", "started").await;
    let answer = h
        .post("/cluster/ha/resources/vm:101/migrate", &[("node", "pve3")])
        .await
        .data();
    assert_eq!(answer, json!({"sid": "vm:101", "requested-node": "pve3"}));
    poll_vm(&h, "pve3", 101, "running").await;
    let online = h.get("/nodes/pve2/tasks?typefilter=qmigrate").await.data();
    let log = task_log(&h, online[0]["upid"].as_str().unwrap()).await;
    assert!(
        log.iter()
            .any(|l| l.contains("migration finished successfully"))
    );

    h.post("/cluster/ha/resources/101/relocate", &[("node", "pve1")])
        .await
        .data();
    poll_vm(&h, "pve1", 101, "running").await;
    let row = poll_service(&h, "vm:101", "started").await;
    assert_eq!(row["node"], "pve1");
    let missing = h
        .post("/cluster/ha/resources/vm:100/migrate", &[("node", "pve3")])
        .await;
    assert_eq!(missing.message(), "resource 'vm:100' is not HA managed\n");
    h.sim.shutdown().await;
}

/// The LRM's migration is the real `migrate_vm`: when `scan_local_volumes` refuses (a
/// local CD-ROM image) the task fails and `next_state_migrate_relocate` leaves the service
/// started where it was.
#[tokio::test]
async fn ha_migration_refused_by_pve_leaves_the_vm_in_place() {
    let h = start(fast_config()).await;
    h.clone_template(230, "pinned").await;
    let upload = h
        .upload(
            "pve1",
            "proxy-seeds",
            "seed-230.iso",
            crate::common::seed("pinned", "x"),
        )
        .await;
    assert_eq!(h.wait_task(upload.data().as_str().unwrap()).await, "OK");
    let seed = [("ide2", "proxy-seeds:iso/seed-230.iso,media=cdrom")];
    h.put("/nodes/pve1/qemu/230/config", &seed).await.data();
    add_resource(&h, &[("sid", "vm:230")]).await;
    poll_vm(&h, "pve1", 230, "running").await;
    poll_service(&h, "vm:230", "started").await;
    let form = [("target", "pve2"), ("online", "1")];
    let (_, exit) = run_task(&h, "/nodes/pve1/qemu/230/migrate", &form).await;
    assert_eq!(exit, "OK", "the hamigrate request itself succeeds");
    let failed = h
        .poll_until("/nodes/pve1/tasks?typefilter=qmigrate&source=all", |a| {
            a.json()["data"][0]["status"] == "migration aborted"
        })
        .await
        .data();
    let log = task_log(&h, failed[0]["upid"].as_str().unwrap()).await;
    let refusal = "can't migrate local disk 'proxy-seeds:iso/seed-230.iso': local cdrom image";
    assert!(log.iter().any(|l| l.ends_with(refusal)), "{log:?}");
    let row = poll_service(&h, "vm:230", "started").await;
    assert_eq!(row["node"], "pve1");
    assert_eq!(
        h.get("/nodes/pve1/qemu/230/status/current").await.data()["status"],
        "running"
    );
    h.sim.shutdown().await;
}

/// `vm_suspend`: "Cannot suspend HA managed VM to disk".
#[tokio::test]
async fn ha_managed_vm_cannot_suspend_to_disk() {
    let h = start(fast_config()).await;
    add_resource(&h, &[("sid", "vm:101")]).await;
    let answer = h
        .post("/nodes/pve2/qemu/101/status/suspend", &[("todisk", "1")])
        .await;
    assert_eq!(answer.message(), "Cannot suspend HA managed VM to disk\n");
    h.sim.shutdown().await;
}
