//! HA service states and what the API answers in each: pve-ha-manager 5.2.0
//! `src/PVE/API2/HA/Resources.pm` `check_service_state` (the `error` refusal, also run by
//! `src/PVE/CLI/ha_manager.pm` `stop`), `src/PVE/HA/Manager.pm` (`next_state_*`),
//! `src/PVE/HA/LRM.pm` (`exec_resource_agent`, `handle_service_exitcode`),
//! `src/PVE/HA/Config.pm` `delete_service_from_config`, and qemu-server 9.2.6
//! `src/PVE/API2/Qemu.pm` (`create_vm` with `ha-managed`, `vm_start`, `vm_stop`,
//! `vm_shutdown`, `migrate_vm`, `destroy_vm`).

use crate::cluster_life::{run_task, task_log};
use crate::common::{Harness, faults, start};
use crate::ha_life::{add_resource, poll_service, poll_vm, service_row};
use pvesim::testing::fast_config;
use reqwest::StatusCode;
use serde_json::{Value, json};

const IN_ERROR: &str = "service 'vm:201' in error state, must be disabled and fixed first";

async fn clone_on(h: &Harness, vmid: u32, node: &str) {
    let newid = vmid.to_string();
    let form = [
        ("newid", newid.as_str()),
        ("name", "replica"),
        ("full", "1"),
        ("target", node),
    ];
    let upid = h.post("/nodes/pve1/qemu/9000/clone", &form).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
}

async fn log_has(h: &Harness, line: &str) -> bool {
    h.admin.ha_log().await.iter().any(|l| l == line)
}

/// A request task (`hastart`, `hastop`, `hamigrate`) that `check_service_state` refuses:
/// the command fails with exit code 255 and its message is in the task log.
async fn refused_request(h: &Harness, path: &str, form: &[(&str, &str)], command: &str) {
    let (upid, exit) = run_task(h, path, form).await;
    assert_eq!(exit, format!("command '{command}' failed: exit code 255"));
    let log = task_log(h, &upid).await;
    assert!(log.contains(&IN_ERROR.to_string()), "{log:?}");
}

/// A running VM whose service is in `error` (the LRM leaves it running, `exec_resource_agent`
/// "error always succeeds"): every request through HA is refused until the resource is
/// `disabled`, a config write is not HA's business, and the destroy refuses the running VM;
/// `disabled` clears the error, the LRM stops the VM, and a destroy with `purge` removes
/// the resource and its rules.
#[tokio::test]
async fn a_service_in_error_takes_nothing_but_disabled() {
    let h = start(fast_config()).await;
    clone_on(&h, 201, "pve1").await;
    add_resource(&h, &[("sid", "vm:201")]).await;
    poll_vm(&h, "pve1", 201, "running").await;
    poll_service(&h, "vm:201", "started").await;
    let pin = [
        ("rule", "pin"),
        ("type", "node-affinity"),
        ("resources", "vm:201"),
        ("nodes", "pve1"),
    ];
    h.post("/cluster/ha/rules", &pin).await.data();
    let forced = h.admin.ha_service_error("vm:201").await;
    assert_eq!(
        (forced.state.as_str(), forced.node.as_str()),
        ("error", "pve1")
    );
    let row = poll_service(&h, "vm:201", "error").await;
    assert_eq!(row["crm_state"], "error");

    let vm = "/nodes/pve1/qemu/201";
    refused_request(
        &h,
        &format!("{vm}/status/stop"),
        &[],
        "ha-manager crm-command stop vm:201 0",
    )
    .await;
    refused_request(
        &h,
        &format!("{vm}/status/shutdown"),
        &[],
        "ha-manager crm-command stop vm:201 60",
    )
    .await;
    refused_request(
        &h,
        &format!("{vm}/status/start"),
        &[],
        "ha-manager set vm:201 --state started",
    )
    .await;
    let migrate = [("target", "pve2"), ("online", "1")];
    refused_request(
        &h,
        &format!("{vm}/migrate"),
        &migrate,
        "ha-manager migrate vm:201 pve2",
    )
    .await;
    let api = h
        .post("/cluster/ha/resources/vm:201/migrate", &[("node", "pve2")])
        .await;
    assert_eq!(api.message(), format!("{IN_ERROR}\n"));
    let resource = "/cluster/ha/resources/vm:201";
    let stop = h.put(resource, &[("state", "stopped")]).await;
    assert_eq!(stop.message(), format!("{IN_ERROR}\n"));
    let comment = h.put(resource, &[("comment", "x")]).await;
    assert_eq!(comment.message(), format!("{IN_ERROR}\n"));
    h.put(
        &format!("{vm}/config"),
        &[("description", "still writable")],
    )
    .await
    .data();
    let destroy = h.delete(&format!("{vm}?purge=1")).await;
    assert_eq!(destroy.message(), "VM 201 is running - destroy failed\n");
    assert_eq!(
        h.get(&format!("{vm}/status/current")).await.data()["status"],
        "running"
    );

    h.put(resource, &[("state", "disabled")]).await.data();
    poll_vm(&h, "pve1", 201, "stopped").await;
    poll_service(&h, "vm:201", "disabled").await;
    let upid = h.delete(&format!("{vm}?purge=1")).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    assert_eq!(h.get("/cluster/ha/resources").await.data(), json!([]));
    assert_eq!(h.get("/cluster/ha/rules").await.data(), json!([]));
    h.sim.shutdown().await;
}

/// A stopped VM whose service is in `error`: `destroy_vm` checks only the HA resource
/// (`purge`) and the running state, so with `purge=1` it is destroyed and leaves HA.
#[tokio::test]
async fn a_stopped_vm_in_error_is_destroyed_with_purge() {
    let h = start(fast_config()).await;
    add_resource(&h, &[("sid", "vm:102"), ("state", "stopped")]).await;
    poll_service(&h, "vm:102", "stopped").await;
    h.admin.ha_service_error("vm:102").await;
    poll_service(&h, "vm:102", "error").await;
    let refused = h.delete("/nodes/pve3/qemu/102").await;
    assert_eq!(
        refused.message(),
        "unable to remove VM 102 - used in HA resources and purge parameter not set.\n"
    );
    let upid = h.delete("/nodes/pve3/qemu/102?purge=1").await.data();
    let upid = upid.as_str().unwrap().to_string();
    assert_eq!(h.wait_task(&upid).await, "OK");
    let log = task_log(&h, &upid).await;
    assert!(
        log.contains(&"NOTE: removed VM 102 from HA resource configuration.".to_string()),
        "{log:?}"
    );
    assert_eq!(h.get("/cluster/ha/resources").await.data(), json!([]));
    let gone = h.get("/cluster/ha/status/current").await.data();
    assert!(
        gone.as_array()
            .unwrap()
            .iter()
            .all(|r| r["sid"] != "vm:102"),
        "{gone}"
    );
    h.sim.shutdown().await;
}

/// `error` as a failure reaches it: the LRM's shutdown fails (`exec_resource_agent`:
/// still running), and `next_state_request_stop` puts the service in `error`; the VM is
/// still running.
#[tokio::test]
async fn a_failed_stop_puts_the_service_in_error() {
    let h = start(fast_config()).await;
    clone_on(&h, 201, "pve1").await;
    add_resource(&h, &[("sid", "vm:201")]).await;
    poll_vm(&h, "pve1", 201, "running").await;
    poll_service(&h, "vm:201", "started").await;
    h.admin
        .set_faults(&faults(json!({"task_failures": [
            {"task_type": "qmshutdown", "nth": 1, "exitstatus": "shutdown failed"}
        ]})))
        .await;
    let (_, exit) = run_task(&h, "/nodes/pve1/qemu/201/status/shutdown", &[]).await;
    assert_eq!(exit, "OK", "the request itself");
    poll_service(&h, "vm:201", "error").await;
    assert!(log_has(&h, "service 'vm:201' stop failed (exit code 1)").await);
    assert_eq!(
        h.get("/nodes/pve1/qemu/201/status/current").await.data()["status"],
        "running"
    );
    h.sim.shutdown().await;
}

/// The LRM's restart policy (`handle_service_exitcode`): a failed start is tried again on
/// the same node `max_restart` times (default 1) before the CRM hears of it; with
/// `max_restart=0` the CRM relocates at once (`next_state_started`, `try-next`), to the
/// best-scored other node (pve3, where nothing runs).
#[tokio::test]
async fn failed_starts_are_retried_then_relocated() {
    let h = start(fast_config()).await;
    clone_on(&h, 201, "pve1").await;
    clone_on(&h, 202, "pve1").await;
    let fail_first_start = faults(json!({"task_failures": [
        {"task_type": "qmstart", "nth": 1, "exitstatus": "start failed: boom"}
    ]}));
    h.admin.set_faults(&fail_first_start).await;
    add_resource(&h, &[("sid", "vm:201")]).await;
    poll_vm(&h, "pve1", 201, "running").await;
    assert!(log_has(&h, "restart policy: retry number 1 for service 'vm:201'").await);

    h.admin.set_faults(&fail_first_start).await;
    add_resource(&h, &[("sid", "vm:202"), ("max_restart", "0")]).await;
    poll_vm(&h, "pve3", 202, "running").await;
    let lines = [
        "unable to start service vm:202 on local node after 0 retries",
        "starting service vm:202 on node 'pve1' failed, relocating service.",
        "relocation policy successful for 'vm:202' on node 'pve3', failed nodes: pve1",
    ];
    for line in lines {
        assert!(log_has(&h, line).await, "{line}");
    }
    h.sim.shutdown().await;
}

/// `ignored`: the HA stack leaves the VM alone (`vm_is_ha_managed` is false), so a start
/// is the VM's own `qmstart`; `disabled` still takes a start request (`hastart` sets
/// `started`).
#[tokio::test]
async fn ignored_and_disabled_resources_answer_start_requests() {
    let h = start(fast_config()).await;
    add_resource(&h, &[("sid", "vm:102"), ("state", "ignored")]).await;
    let (upid, exit) = run_task(&h, "/nodes/pve3/qemu/102/status/start", &[]).await;
    assert!(upid.contains(":qmstart:102:"), "{upid}");
    assert_eq!(exit, "OK");
    assert_eq!(service_row(&h, "vm:102").await["state"], "ignored");
    let current = h.get("/nodes/pve3/qemu/102/status/current").await.data();
    assert_eq!(current["ha"], json!({"managed": 0}));

    h.put("/cluster/ha/resources/vm:102", &[("state", "disabled")])
        .await
        .data();
    poll_vm(&h, "pve3", 102, "stopped").await;
    poll_service(&h, "vm:102", "disabled").await;
    let (upid, exit) = run_task(&h, "/nodes/pve3/qemu/102/status/start", &[]).await;
    assert!(upid.contains(":hastart:102:"), "{upid}");
    assert_eq!(exit, "OK");
    poll_vm(&h, "pve3", 102, "running").await;
    poll_service(&h, "vm:102", "started").await;
    h.sim.shutdown().await;
}

/// `request_stop` lasts while the LRM's shutdown runs, and a start asked for meanwhile
/// wins afterwards (`stopped` then `request_start`); a rebooting node's services are in
/// `freeze` until it is back.
#[tokio::test]
async fn request_stop_and_freeze_are_passing_states() {
    let mut config = fast_config();
    config.timings.task_ms.insert("qmshutdown".into(), 1500);
    config.timings.node_reboot_ms = 1500;
    let h = start(config).await;
    add_resource(&h, &[("sid", "vm:101")]).await;
    poll_service(&h, "vm:101", "started").await;
    let (_, exit) = run_task(&h, "/nodes/pve2/qemu/101/status/shutdown", &[]).await;
    assert_eq!(exit, "OK");
    let row = poll_service(&h, "vm:101", "request_stop").await;
    assert_eq!(row["request_state"], "stopped");
    let (_, exit) = run_task(&h, "/nodes/pve2/qemu/101/status/start", &[]).await;
    assert_eq!(exit, "OK", "a start is taken in request_stop");
    // The LRM's shutdown ran to its end, then the CRM started the VM again.
    h.poll_until("/nodes/pve2/tasks?typefilter=qmshutdown", |a| {
        a.json()["data"][0]["status"] == "OK"
    })
    .await;
    poll_vm(&h, "pve2", 101, "running").await;
    poll_service(&h, "vm:101", "started").await;

    h.admin.reboot_node("pve2").await;
    let frozen = poll_service(&h, "vm:101", "freeze").await;
    assert_eq!(frozen["crm_state"], "freeze");
    let away = h.get("/nodes/pve2/qemu/101/status/current").await;
    assert_eq!(away.status.as_u16(), 595);
    poll_vm(&h, "pve2", 101, "running").await;
    poll_service(&h, "vm:101", "started").await;
    h.sim.shutdown().await;
}

/// qemu-server 9.1.8 `create_vm`: `ha-managed` needs `Sys.Console` on `/` (as adding an HA
/// resource does, `Resources.pm` `create`); the task adds the resource ("Add as HA
/// resource", `stopped` unless `start`), and the autostart of an HA-managed VM is a
/// `hastart` task of its own.
#[tokio::test]
async fn create_with_ha_managed_adds_the_resource() {
    let mut config = fast_config();
    config
        .privileges
        .get_mut("/")
        .unwrap()
        .retain(|p| p != "Sys.Console");
    let h = start(config).await;
    let create = [("vmid", "300"), ("name", "ha"), ("ha-managed", "1")];
    let denied = h.post("/nodes/pve1/qemu", &create).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
    assert_eq!(
        denied.message(),
        "Permission check failed (/, Sys.Console)\n"
    );
    let resource = h.post("/cluster/ha/resources", &[("sid", "vm:100")]).await;
    assert_eq!(
        resource.message(),
        "Permission check failed (/, Sys.Console)\n"
    );
    h.sim.shutdown().await;

    let h = start(fast_config()).await;
    let upid = h.post("/nodes/pve1/qemu", &create).await.data();
    let upid = upid.as_str().unwrap().to_string();
    assert_eq!(h.wait_task(&upid).await, "OK");
    assert!(
        task_log(&h, &upid)
            .await
            .contains(&"Add as HA resource".to_string())
    );
    let added = h.get("/cluster/ha/resources/vm:300").await.data();
    assert_eq!(added["state"], "stopped");

    let started = [
        ("vmid", "301"),
        ("name", "ha-start"),
        ("ha-managed", "1"),
        ("start", "1"),
        ("scsi0", "vmdata:1"),
    ];
    let upid = h.post("/nodes/pve1/qemu", &started).await.data();
    let upid = upid.as_str().unwrap().to_string();
    assert_eq!(h.wait_task(&upid).await, "OK");
    let log = task_log(&h, &upid).await;
    assert!(log.contains(&"Execute autostart".to_string()), "{log:?}");
    assert_eq!(
        h.get("/cluster/ha/resources/vm:301").await.data()["state"],
        "started"
    );
    // `source=all`: the `hastart` task may still run (the default lists finished ones).
    let hastart = h
        .get("/nodes/pve1/tasks?typefilter=hastart&source=all")
        .await
        .data();
    assert_eq!(hastart[0]["id"], "301", "{hastart}");
    poll_vm(&h, "pve1", 301, "running").await;
    let lrm_start = h.get("/nodes/pve1/tasks?typefilter=qmstart").await.data();
    assert_eq!(lrm_start[0]["user"], "root@pam");
    assert_eq!(
        h.get("/nodes/pve1/qemu/301/config").await.data()["ha-managed"],
        Value::Null,
        "not a config key"
    );
    h.sim.shutdown().await;
}

/// `migrate` lasts while the LRM's migration runs (`next_state_migrate_relocate` waits for
/// its result): the status shows it, requests through HA are still taken (only `error`
/// refuses them), and a destroy refuses the running VM.
#[tokio::test]
async fn a_migrating_service_takes_requests_and_refuses_destroy() {
    let mut config = fast_config();
    config.timings.task_ms.insert("qmigrate".into(), 1500);
    let h = start(config).await;
    clone_on(&h, 201, "pve1").await;
    add_resource(&h, &[("sid", "vm:201")]).await;
    poll_vm(&h, "pve1", 201, "running").await;
    let form = [("target", "pve2"), ("online", "1")];
    let (_, exit) = run_task(&h, "/nodes/pve1/qemu/201/migrate", &form).await;
    assert_eq!(exit, "OK");
    let row = poll_service(&h, "vm:201", "migrate").await;
    assert_eq!(row["crm_state"], "migrate");
    let (upid, exit) = run_task(&h, "/nodes/pve1/qemu/201/status/start", &[]).await;
    assert!(upid.contains(":hastart:201:"), "{upid}");
    assert_eq!(exit, "OK");
    let destroy = h.delete("/nodes/pve1/qemu/201?purge=1").await;
    assert_eq!(destroy.message(), "VM 201 is running - destroy failed\n");
    poll_vm(&h, "pve2", 201, "running").await;
    poll_service(&h, "vm:201", "started").await;
    h.sim.shutdown().await;
}

/// datacenter.cfg `crs: ha-rebalance-on-start=1`, as pve-ha-manager 5.2.0 runs it:
/// `Manager.pm` `next_state_request_start` sends a service going from stopped to started
/// to the node `select_service_node` scores best (`best-score`), as `request_start_balance`
/// with that target; `LRM.pm` `exec_resource_agent` relocates a stopped VM there (offline
/// `migrate_vm`) and answers `IGNORED` for one already running, which
/// `next_state_request_start_balance` starts where it is; a relocation that fails leaves it
/// to start where it is too. The package's own test `src/test/test-crs-static-rebalance2`
/// shows the same: services added started 0 move, services added started 1 stay.
#[tokio::test]
async fn rebalance_on_start_sends_a_stopped_service_to_the_best_scored_node() {
    let mut config = fast_config();
    config.ha_rebalance_on_start = true;
    let h = start(config).await;
    // The world runs guest 100 on pve1 and 101 on pve2: pve3 is the basic scheduler's best.
    h.clone_template(240, "balanced").await;
    add_resource(&h, &[("sid", "vm:240")]).await;
    poll_vm(&h, "pve3", 240, "running").await;
    let row = poll_service(&h, "vm:240", "started").await;
    assert_eq!(row["node"], "pve3");
    let selected = "service vm:240: re-balance selected new node pve3 for startup";
    assert!(log_has(&h, selected).await, "{:?}", h.admin.ha_log().await);
    let moves = h
        .get("/nodes/pve1/tasks?typefilter=qmigrate&source=all")
        .await
        .data();
    assert_eq!(moves[0]["id"], "240", "{moves}");
    assert_eq!(moves[0]["status"], "OK", "{moves}");

    // pve1 runs two guests now (100 and 242): 241, already running there, is sent away
    // and stays.
    h.clone_template(241, "running").await;
    h.clone_template(242, "busy").await;
    for vmid in [241, 242] {
        let path = format!("/nodes/pve1/qemu/{vmid}/status/start");
        assert_eq!(run_task(&h, &path, &[]).await.1, "OK");
    }
    add_resource(&h, &[("sid", "vm:241")]).await;
    let ignored = "service 'vm:241' - rebalance-on-start request ignored - service already running";
    let row = poll_service(&h, "vm:241", "started").await;
    assert_eq!(row["node"], "pve1");
    let log = h.admin.ha_log().await;
    assert!(
        log.iter()
            .any(|l| l == "ignoring rebalance-on-start for service vm:241 - already running"),
        "{log:?}"
    );
    assert!(log.iter().any(|l| l == ignored), "{log:?}");

    // A seed on node-local storage: PVE refuses the relocation, and it starts on pve1.
    h.clone_template(243, "seeded").await;
    let seed = crate::common::seed("seeded", "x");
    let upload = h.upload("pve1", "proxy-seeds", "seed-243.iso", seed).await;
    assert_eq!(h.wait_task(upload.data().as_str().unwrap()).await, "OK");
    let cdrom = [("ide2", "proxy-seeds:iso/seed-243.iso,media=cdrom")];
    h.put("/nodes/pve1/qemu/243/config", &cdrom).await.data();
    add_resource(&h, &[("sid", "vm:243")]).await;
    poll_vm(&h, "pve1", 243, "running").await;
    let row = poll_service(&h, "vm:243", "started").await;
    assert_eq!(row["node"], "pve1");
    let failed = "service 'vm:243' - migration failed (exit code 1)";
    assert!(log_has(&h, failed).await, "{:?}", h.admin.ha_log().await);
    h.sim.shutdown().await;
}
