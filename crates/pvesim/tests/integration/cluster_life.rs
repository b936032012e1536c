//! A cluster's days: migration (qemu-server `src/PVE/API2/Qemu.pm` `migrate_vm`,
//! `migrate_vm_precondition`; `src/PVE/QemuMigrate.pm` `prepare`, `scan_local_volumes`;
//! pve-guest-common `src/PVE/AbstractMigrate.pm` `migrate`) and node events through the
//! admin API (pve-manager `PVE/API2/Nodes.pm` `startall`, `get_start_stop_list`). Each test
//! names the function whose behaviour it pins.

use crate::common::{GOOD_USER_DATA, Harness, encode, faults, seed, start};
use pvesim::testing::fast_config;
use reqwest::StatusCode;
use serde_json::json;

/// A task's log lines.
pub async fn task_log(h: &Harness, upid: &str) -> Vec<String> {
    let node = upid.split(':').nth(1).unwrap();
    let path = format!("/nodes/{node}/tasks/{}/log?limit=1000", encode(upid));
    h.get(&path)
        .await
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["t"].as_str().unwrap().to_string())
        .collect()
}

/// Starts a task with `POST path`, waits for it; its UPID and exit status.
pub async fn run_task(h: &Harness, path: &str, form: &[(&str, &str)]) -> (String, String) {
    let answer = h.post(path, form).await;
    let upid = answer.data().as_str().expect("a UPID").to_string();
    let exit = h.wait_task(&upid).await;
    (upid, exit)
}

fn vm_state(state: &pvesim::inspect::SimState, vmid: u32) -> pvesim::inspect::VmState {
    state
        .vms
        .iter()
        .find(|vm| vm.vmid == vmid)
        .expect("the VM")
        .clone()
}

/// `migrate_vm`: "can't migrate running VM without --online", a parameter error for the
/// local node, `check_node_exists`, and root-only `force`.
#[tokio::test]
async fn migrate_refuses_before_any_task() {
    let h = start(fast_config()).await;
    let path = "/nodes/pve2/qemu/101/migrate";
    let running = h.post(path, &[("target", "pve3")]).await;
    assert_eq!(running.status.as_u16(), 500);
    assert_eq!(
        running.message(),
        "can't migrate running VM without --online\n"
    );
    let local = h.post(path, &[("target", "pve2"), ("online", "1")]).await;
    assert_eq!(local.status, StatusCode::BAD_REQUEST);
    assert_eq!(local.json()["errors"]["target"], "target is local node.");
    let unknown = h.post(path, &[("target", "pve9"), ("online", "1")]).await;
    assert_eq!(unknown.message(), "no such cluster node 'pve9'\n");
    let force = h
        .post(path, &[("target", "pve3"), ("online", "1"), ("force", "1")])
        .await;
    assert_eq!(force.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        force.json()["errors"]["force"],
        "Only root may use this option."
    );
    h.sim.shutdown().await;
}

/// `migrate_vm`: `PVE::QemuConfig->check_lock` before the worker.
#[tokio::test]
async fn migrate_refuses_a_locked_vm() {
    let mut config = fast_config();
    config.faults = faults(json!({"held_locks": [{"vmid": 101, "lock": "backup", "seconds": 60}]}));
    let h = start(config).await;
    let answer = h
        .post(
            "/nodes/pve2/qemu/101/migrate",
            &[("target", "pve3"), ("online", "1")],
        )
        .await;
    assert_eq!(answer.message(), "VM is locked (backup)\n");
    let precondition = h.get("/nodes/pve2/qemu/101/migrate").await;
    assert_eq!(precondition.message(), "VM is locked (backup)\n");
    h.sim.shutdown().await;
}

/// `migrate_vm` runs `QemuMigrate` in a `qmigrate` worker: phase 1 sets `lock: migrate`,
/// `phase3_cleanup` moves the config (`move_config_to_node`); an online migration resumes
/// the VM on the target, so it never stops.
#[tokio::test]
async fn online_migration_locks_then_moves_a_running_vm() {
    let h = start(fast_config()).await;
    h.admin.set_task_ms("qmigrate", 400).await;
    let answer = h
        .post(
            "/nodes/pve2/qemu/101/migrate",
            &[("target", "pve3"), ("online", "1")],
        )
        .await;
    let upid = answer.data().as_str().unwrap().to_string();
    assert!(upid.contains(":qmigrate:101:"), "{upid}");
    let locked = h
        .poll_until("/nodes/pve2/qemu/101/status/current", |a| {
            a.json()["data"]["lock"] == "migrate"
        })
        .await;
    assert_eq!(locked.data()["status"], "running");
    assert_eq!(h.wait_task(&upid).await, "OK");
    let moved = h.get("/nodes/pve3/qemu/101/status/current").await.data();
    assert_eq!(moved["status"], "running");
    assert!(moved.get("lock").is_none(), "{moved}");
    let gone = h.get("/nodes/pve2/qemu/101/config").await;
    assert_eq!(
        gone.message(),
        "Configuration file 'nodes/pve2/qemu-server/101.conf' does not exist\n"
    );
    let log = task_log(&h, &upid).await;
    assert!(
        log.iter()
            .any(|l| l.ends_with("starting migration of VM 101 to node 'pve3' (192.0.2.13)")),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("migration finished successfully")),
        "{log:?}"
    );
    h.sim.shutdown().await;
}

/// `sync_offline_local_volumes`: an offline migration copies local disks to the target
/// (no `with-local-disks` needed when the VM is stopped).
#[tokio::test]
async fn offline_migration_copies_local_disks() {
    let h = start(fast_config()).await;
    let (upid, exit) = run_task(&h, "/nodes/pve3/qemu/102/migrate", &[("target", "pve1")]).await;
    assert_eq!(exit, "OK");
    let log = task_log(&h, &upid).await;
    assert!(
        log.iter()
            .any(|l| l.ends_with("found local disk 'local:102/vm-102-disk-0.raw' (attached)")),
        "{log:?}"
    );
    assert!(
        log.iter().any(|l| l.ends_with(
            "volume 'local:102/vm-102-disk-0.raw' is 'local:102/vm-102-disk-0.raw' on the target"
        )),
        "{log:?}"
    );
    let state = h.admin.state().await;
    assert_eq!(vm_state(&state, 102).node, "pve1");
    let volume = state
        .volumes
        .iter()
        .find(|v| v.volid == "local:102/vm-102-disk-0.raw")
        .unwrap();
    assert_eq!(volume.node, "pve1");
    h.sim.shutdown().await;
}

/// `scan_local_volumes`: a running VM's attached local disk needs `with-local-disks`; the
/// refusal is a task failure ("migration aborted") and `phase1_cleanup` clears the lock.
/// With the option the disk moves (to `targetstorage` when given).
#[tokio::test]
async fn live_migration_of_local_disks_needs_with_local_disks() {
    let h = start(fast_config()).await;
    let path = "/nodes/pve1/qemu/100/migrate";
    let (upid, exit) = run_task(&h, path, &[("target", "pve2"), ("online", "1")]).await;
    assert_eq!(exit, "migration aborted");
    let log = task_log(&h, &upid).await;
    let refusal = "can't migrate local disk 'local-lvm:vm-100-disk-0': can't live migrate \
                   attached local disks without with-local-disks option";
    assert!(log.iter().any(|l| l.ends_with(refusal)), "{log:?}");
    assert!(
        log.iter().any(|l| l.ends_with(
            "ERROR: Problem found while scanning volumes - can't migrate VM - check log"
        )),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("ERROR: migration aborted (duration 00:00:0")),
        "{log:?}"
    );
    let state = h.admin.state().await;
    assert_eq!(vm_state(&state, 100).node, "pve1");
    assert_eq!(vm_state(&state, 100).lock, None);

    let form = [
        ("target", "pve2"),
        ("online", "1"),
        ("with-local-disks", "1"),
        ("targetstorage", "local"),
    ];
    let (_, exit) = run_task(&h, path, &form).await;
    assert_eq!(exit, "OK");
    let state = h.admin.state().await;
    let vm = vm_state(&state, 100);
    assert_eq!((vm.node.as_str(), vm.status.as_str()), ("pve2", "running"));
    let disk = vm.config["scsi0"].clone();
    assert!(disk.starts_with("local:100/vm-100-disk-0.raw,"), "{disk}");
    assert!(
        state
            .volumes
            .iter()
            .any(|v| v.volid == "local:100/vm-100-disk-0.raw" && v.node == "pve2")
    );
    assert!(
        !state
            .volumes
            .iter()
            .any(|v| v.volid == "local-lvm:vm-100-disk-0")
    );
    h.sim.shutdown().await;
}

/// `scan_local_volumes`: a CD-ROM whose ISO is on a node-local storage is logged as
/// "can't migrate local disk 'VOLID': local cdrom image" and the task fails.
#[tokio::test]
async fn local_cdrom_image_fails_the_migration_task() {
    let h = start(fast_config()).await;
    h.clone_template(210, "seeded").await;
    let upload = h
        .upload(
            "pve1",
            "proxy-seeds",
            "seed-210.iso",
            seed("seeded", GOOD_USER_DATA),
        )
        .await;
    assert_eq!(h.wait_task(upload.data().as_str().unwrap()).await, "OK");
    h.put(
        "/nodes/pve1/qemu/210/config",
        &[("ide2", "proxy-seeds:iso/seed-210.iso,media=cdrom")],
    )
    .await
    .data();
    let (upid, exit) = run_task(&h, "/nodes/pve1/qemu/210/migrate", &[("target", "pve2")]).await;
    assert_eq!(exit, "migration aborted");
    let log = task_log(&h, &upid).await;
    let refusal = "can't migrate local disk 'proxy-seeds:iso/seed-210.iso': local cdrom image";
    assert!(log.iter().any(|l| l.ends_with(refusal)), "{log:?}");
    // A warning, not an error line.
    assert!(
        !log.iter()
            .any(|l| l.contains("ERROR: can't migrate local disk")),
        "{log:?}"
    );
    let state = h.admin.state().await;
    assert_eq!(vm_state(&state, 210).node, "pve1");
    assert_eq!(vm_state(&state, 210).lock, None);
    // With the seed detached the same migration goes through.
    h.put(
        "/nodes/pve1/qemu/210/config",
        &[("ide2", "none,media=cdrom")],
    )
    .await
    .data();
    let (_, exit) = run_task(&h, "/nodes/pve1/qemu/210/migrate", &[("target", "pve2")]).await;
    assert_eq!(exit, "OK");
    h.sim.shutdown().await;
}

/// `AbstractMigrate::migrate` tests the ssh connection in `prepare`: an offline target
/// fails the task, not the request.
#[tokio::test]
async fn offline_target_fails_the_task() {
    let h = start(fast_config()).await;
    h.admin.fail_node("pve3").await;
    let form = [("target", "pve3"), ("online", "1")];
    let (upid, exit) = run_task(&h, "/nodes/pve2/qemu/101/migrate", &form).await;
    assert_eq!(exit, "migration aborted");
    let log = task_log(&h, &upid).await;
    assert!(
        log.iter()
            .any(|l| l.ends_with("Can't connect to destination address using public key")),
        "{log:?}"
    );
    h.sim.shutdown().await;
}

/// `migrate_vm_precondition`: the shape of its answer, local disks with
/// `foreach_volid`'s attributes, and `check_local_storage_availability` (a storage
/// restricted to some nodes makes the others not allowed; every other node has an entry,
/// empty when allowed, since that function returns a hash for every node).
/// `check_storage_availability` refuses such a target in `migrate_vm`.
#[tokio::test]
async fn precondition_lists_nodes_disks_and_resources() {
    let mut config = fast_config();
    let vmdata = config
        .storages
        .iter_mut()
        .find(|s| s.id == "vmdata")
        .unwrap();
    vmdata.nodes = Some(vec!["pve1".into(), "pve2".into()]);
    let h = start(config).await;
    let local = h.get("/nodes/pve1/qemu/100/migrate").await.data();
    assert_eq!(local["running"], 1);
    assert_eq!(local["allowed_nodes"], json!(["pve2", "pve3"]));
    assert_eq!(local["not_allowed_nodes"], json!({"pve2": {}, "pve3": {}}));
    assert_eq!(local["local_resources"], json!([]));
    assert_eq!(local["has-dbus-vmstate"], 1);
    let disks = local["local_disks"].as_array().unwrap();
    assert_eq!(disks.len(), 1);
    assert_eq!(disks[0]["volid"], "local-lvm:vm-100-disk-0");
    assert_eq!(disks[0]["size"], json!(32u64 << 30));
    assert_eq!(
        (disks[0]["cdrom"].clone(), disks[0]["is_attached"].clone()),
        (json!(0), json!(1))
    );
    assert_eq!(disks[0]["drivename"], "scsi0");

    let shared = h
        .get("/nodes/pve2/qemu/101/migrate?target=pve1")
        .await
        .data();
    assert_eq!(shared["allowed_nodes"], json!(["pve1"]));
    assert_eq!(
        shared["not_allowed_nodes"]["pve3"]["unavailable_storages"],
        json!(["vmdata"])
    );
    assert_eq!(shared["local_disks"], json!([]));
    let refused = h
        .post(
            "/nodes/pve2/qemu/101/migrate",
            &[("target", "pve3"), ("online", "1")],
        )
        .await;
    assert_eq!(
        refused.message(),
        "storage 'vmdata' is not available on node 'pve3'\n"
    );
    h.sim.shutdown().await;
}

/// `startall` after a reboot: `onboot` VMs start in `startup` order (then VMID), each
/// followed by its `up` delay; VMs without `onboot` stay stopped; the node answers 595
/// while it is down; the guest agent answers again after its boot time.
#[tokio::test]
async fn reboot_restarts_onboot_vms_in_startup_order() {
    let mut config = fast_config();
    config.timings.node_reboot_ms = 200;
    let h = start(config).await;
    h.clone_template(220, "first").await;
    h.clone_template(221, "never").await;
    let upload = h
        .upload(
            "pve1",
            "proxy-seeds",
            "seed-220.iso",
            seed("first", GOOD_USER_DATA),
        )
        .await;
    assert_eq!(h.wait_task(upload.data().as_str().unwrap()).await, "OK");
    let seeded = [
        ("onboot", "1"),
        ("startup", "order=1,up=2"),
        ("agent", "1"),
        ("ide2", "proxy-seeds:iso/seed-220.iso,media=cdrom"),
    ];
    h.put("/nodes/pve1/qemu/220/config", &seeded).await.data();
    h.put(
        "/nodes/pve1/qemu/100/config",
        &[("onboot", "1"), ("startup", "order=2")],
    )
    .await
    .data();
    for vmid in [220, 221] {
        let (_, exit) = run_task(&h, &format!("/nodes/pve1/qemu/{vmid}/status/start"), &[]).await;
        assert_eq!(exit, "OK");
    }
    h.poll_until("/nodes/pve1/qemu/220/agent/get-host-name", |a| {
        a.status == StatusCode::OK
    })
    .await;

    h.admin.reboot_node("pve1").await;
    let down = h.get("/nodes/pve1/qemu").await;
    assert_eq!(down.status.as_u16(), 595);
    let state = h.admin.state().await;
    assert!(
        !state
            .nodes
            .iter()
            .find(|n| n.name == "pve1")
            .unwrap()
            .online
    );
    assert!(
        state
            .vms
            .iter()
            .filter(|v| v.node == "pve1")
            .all(|v| v.status == "stopped")
    );

    for vmid in [100, 220] {
        let path = format!("/nodes/pve1/qemu/{vmid}/status/current");
        h.poll_until(&path, |a| {
            a.status == StatusCode::OK && a.json()["data"]["status"] == "running"
        })
        .await;
    }
    h.poll_until("/nodes/pve1/qemu/220/agent/get-host-name", |a| {
        a.status == StatusCode::OK
    })
    .await;
    let never = h.get("/nodes/pve1/qemu/221/status/current").await.data();
    assert_eq!(never["status"], "stopped");
    let starts = h
        .get("/nodes/pve1/tasks?typefilter=qmstart&limit=2")
        .await
        .data();
    let order: Vec<&str> = starts
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        ["100", "220"],
        "newest first: 220 (order=1) started before 100"
    );
    assert_eq!(starts[0]["user"], "root@pam");
    h.sim.shutdown().await;
}

/// A failed node is offline and its VMs stop; `recover` brings it back and its boot
/// (`startall`) starts the `onboot` VMs. Non-HA VMs stay on the failed node meanwhile.
#[tokio::test]
async fn failed_node_recovers_and_starts_onboot_vms() {
    let h = start(fast_config()).await;
    h.put("/nodes/pve2/qemu/101/config", &[("onboot", "1")])
        .await
        .data();
    h.admin.fail_node("pve2").await;
    assert_eq!(
        h.get("/nodes/pve2/qemu/101/status/current")
            .await
            .status
            .as_u16(),
        595
    );
    let nodes = h.get("/nodes").await.data();
    let pve2 = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "pve2")
        .unwrap()
        .clone();
    assert_eq!(pve2["status"], "offline");
    assert_eq!(vm_state(&h.admin.state().await, 101).status, "stopped");
    h.admin.recover_node("pve2").await;
    h.poll_until("/nodes/pve2/qemu/101/status/current", |a| {
        a.status == StatusCode::OK && a.json()["data"]["status"] == "running"
    })
    .await;
    h.sim.shutdown().await;
}
