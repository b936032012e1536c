//! Fidelity to PVE's own code where the provider's requests go: each test reproduces one
//! behaviour read in PVE 9's Perl source, and its doc comment names the file and function
//! (repository: `src/...` path: `function`). The numbers are those of issue 14.

use std::collections::BTreeMap;

use crate::common::{self, GOOD_USER_DATA, Harness, seed, start};
use pvesim::SimConfig;
use pvesim::config::{DEFAULT_PRIVILEGES, Faults};
use pvesim::testing::fast_config;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The default token's privileges on `/` without `missing`, plus `extra` ACLs.
fn privileges(missing: &[&str], extra: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    let mut acl = BTreeMap::from([(
        "/".to_string(),
        DEFAULT_PRIVILEGES
            .iter()
            .filter(|p| !missing.contains(p))
            .map(|p| p.to_string())
            .collect::<Vec<_>>(),
    )]);
    for (path, privs) in extra {
        acl.insert(
            path.to_string(),
            privs.iter().map(|p| p.to_string()).collect(),
        );
    }
    acl
}

fn config_with(acl: BTreeMap<String, Vec<String>>) -> SimConfig {
    let mut config = fast_config();
    config.privileges = acl;
    config
}

/// A stopped VM 300 on pve1 with one disk on `vmdata`, present from the start (so tests
/// whose token may not clone still have a VM).
fn with_vm_300(mut config: SimConfig) -> SimConfig {
    config.vms.push(pvesim::VmSeed {
        vmid: 300,
        node: "pve1".into(),
        running: false,
        config: BTreeMap::from([
            ("name".to_string(), "plain".to_string()),
            ("boot".to_string(), "order=scsi0".to_string()),
            (
                "scsi0".to_string(),
                "vmdata:300/vm-300-disk-0.qcow2,size=4G".to_string(),
            ),
            (
                "net0".to_string(),
                "virtio=BC:24:11:00:03:00,bridge=vmbr0".to_string(),
            ),
        ]),
    });
    config
}

async fn upload_seed(h: &Harness, name: &str) -> usize {
    let bytes = seed("fidelity", GOOD_USER_DATA);
    let len = bytes.len();
    let upid = h.upload("pve1", "proxy-seeds", name, bytes).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    len
}

async fn config_of(h: &Harness, vmid: u32) -> Value {
    h.get(&format!("/nodes/pve1/qemu/{vmid}/config"))
        .await
        .data()
}

/// Item 1. qemu-server `src/PVE/API2/Qemu.pm`: `$update_vm_api` → `create_disks`, which
/// activates every existing volume it is given (pve-storage `src/PVE/Storage/Plugin.pm`:
/// `activate_volume`, "volume '<volid>' does not exist"). The check runs under the config
/// lock: inside the `qmconfig` worker for POST (a task error), inline for PUT (HTTP 500);
/// nothing is written.
#[tokio::test]
async fn config_write_fails_on_a_volume_missing_on_the_node() {
    let h = start(with_vm_300(fast_config())).await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/300/config",
            &[("ide2", "proxy-seeds:iso/absent.iso,media=cdrom")],
        )
        .await
        .data();
    assert_eq!(
        h.wait_task(upid.as_str().unwrap()).await,
        "volume 'proxy-seeds:iso/absent.iso' does not exist"
    );
    let put = h
        .put(
            "/nodes/pve1/qemu/300/config",
            &[("ide2", "proxy-seeds:iso/absent.iso,media=cdrom")],
        )
        .await;
    assert_eq!(put.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        put.message(),
        "volume 'proxy-seeds:iso/absent.iso' does not exist\n"
    );
    assert!(config_of(&h, 300).await.get("ide2").is_none());

    // The ISO on another node's local storage does not count either.
    let bytes = seed("elsewhere", GOOD_USER_DATA);
    let upid = h
        .upload("pve2", "proxy-seeds", "elsewhere.iso", bytes)
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    let put = h
        .put(
            "/nodes/pve1/qemu/300/config",
            &[("ide2", "proxy-seeds:iso/elsewhere.iso,media=cdrom")],
        )
        .await;
    assert_eq!(
        put.message(),
        "volume 'proxy-seeds:iso/elsewhere.iso' does not exist\n"
    );
    h.sim.shutdown().await;
}

/// Item 2. pve-manager `PVE/API2/Cluster.pm`: `resources` deletes a VM row's `pool`
/// unless the caller has `Pool.Audit` on `/pool/<pool>`, and lists `type: pool` rows only
/// for pools it may audit.
#[tokio::test]
async fn cluster_resources_show_the_pool_only_with_pool_audit() {
    for (acl, visible) in [
        (privileges(&[], &[]), true),
        (privileges(&["Pool.Audit"], &[]), false),
    ] {
        let h = start(config_with(acl)).await;
        let upid = h
            .post(
                "/nodes/pve1/qemu/9000/clone",
                &[("newid", "150"), ("full", "1"), ("pool", "proxies")],
            )
            .await
            .data();
        assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
        let rows = h.get("/cluster/resources?type=vm").await.data();
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["vmid"] == 150)
            .cloned()
            .unwrap();
        assert_eq!(row.get("pool").is_some(), visible, "{row}");
        if visible {
            assert_eq!(row["pool"], "proxies");
        }
        let all = h.get("/cluster/resources").await.data();
        let pool_rows = all
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["type"] == "pool")
            .count();
        assert_eq!(pool_rows, usize::from(visible));
        h.sim.shutdown().await;
    }
}

/// Item 3. qemu-server `src/PVE/API2/Qemu.pm`: `clone_vm`'s permission schema is
/// `VM.Clone` on `/vms/{vmid}` and (`VM.Allocate` on `/vms/{newid}` **or** on
/// `/pool/{pool}`); a failed 'or' names nothing (pve-access-control
/// `src/PVE/RPCEnvironment.pm`: `exec_api2_perm_check`).
#[tokio::test]
async fn clone_into_a_pool_needs_vm_allocate_on_the_vmid_or_the_pool() {
    let acl = privileges(&["VM.Allocate"], &[("/pool/proxies", &["VM.Allocate"])]);
    let h = start(config_with(acl)).await;
    let refused = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "150"), ("full", "1")],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.message(), "Permission check failed\n");
    let upid = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "150"), ("full", "1"), ("pool", "proxies")],
        )
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    h.sim.shutdown().await;

    // VM.Allocate on the VMID alone is enough too, pool or not.
    let acl = privileges(&["VM.Allocate"], &[("/vms/151", &["VM.Allocate"])]);
    let h = start(config_with(acl)).await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "151"), ("full", "1"), ("pool", "proxies")],
        )
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    h.sim.shutdown().await;
}

/// Item 4. qemu-server `src/PVE/API2/Qemu.pm`: `clone_vm`'s `$load_and_check`, before the
/// fork, calls `$check_storage_access_clone` (`Datastore.AllocateSpace` on each source
/// disk's storage, or on `storage` when given) and `check_bridge_access`
/// (`src/PVE/QemuServer.pm`; pve-guest-common `src/PVE/GuestHelpers.pm`:
/// `check_vnet_access`, `SDN.Use` on `/sdn/zones/localnetwork/<bridge>`). Refused clones
/// start no task and leave no VM.
#[tokio::test]
async fn clone_prechecks_storage_space_and_bridges() {
    type Acl<'a> = &'a [(&'a str, &'a [&'a str])];
    let cases: [(&[&str], Acl, &str); 2] = [
        (
            &["Datastore.AllocateSpace"],
            &[("/storage/local-lvm", &["Datastore.AllocateSpace"])],
            "Permission check failed (/storage/vmdata, Datastore.AllocateSpace)\n",
        ),
        (
            &["SDN.Use"],
            &[],
            "Permission check failed (/sdn/zones/localnetwork/vmbr0, SDN.Use)\n",
        ),
    ];
    for (missing, extra, message) in cases {
        let h = start(config_with(privileges(missing, extra))).await;
        let refused = h
            .post(
                "/nodes/pve1/qemu/9000/clone",
                &[("newid", "150"), ("full", "1")],
            )
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
        assert_eq!(refused.message(), message);
        let tasks = h.get("/nodes/pve1/tasks").await.data();
        assert_eq!(tasks.as_array().unwrap().len(), 0, "{tasks}");
        let state = h.admin.state().await;
        assert!(
            !state.vms.iter().any(|v| v.vmid == 150),
            "a refused clone left VM 150"
        );
        h.sim.shutdown().await;
    }

    // With `storage`, the space is allocated there: that storage's privilege is the one.
    let acl = privileges(
        &["Datastore.AllocateSpace"],
        &[("/storage/local-lvm", &["Datastore.AllocateSpace"])],
    );
    let h = start(config_with(acl)).await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "150"), ("full", "1"), ("storage", "local-lvm")],
        )
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    h.sim.shutdown().await;
}

/// Item 5a. qemu-server `src/PVE/API2/Qemu.pm`: `$update_vm_api`'s `$check_drive_perms`
/// asks `VM.Config.CDROM` (not `VM.Config.Disk`) for a cdrom drive, in the update itself
/// (a task error for POST, HTTP 403 for PUT); before that, `$check_storage_access` →
/// pve-storage `src/PVE/Storage.pm`: `check_volume_access` asks `Datastore.AllocateSpace`
/// or `Datastore.Audit` on the ISO's storage (unless `Datastore.Allocate`).
#[tokio::test]
async fn a_cdrom_needs_vm_config_cdrom_and_access_to_the_iso_storage() {
    let ide2 = ("ide2", "proxy-seeds:iso/seed.iso,media=cdrom");

    let h = start(with_vm_300(config_with(privileges(
        &["VM.Config.CDROM"],
        &[],
    ))))
    .await;
    upload_seed(&h, "seed.iso").await;
    let put = h.put("/nodes/pve1/qemu/300/config", &[ide2]).await;
    assert_eq!(put.status, StatusCode::FORBIDDEN);
    assert_eq!(
        put.message(),
        "Permission check failed (/vms/300, VM.Config.CDROM)\n"
    );
    let upid = h.post("/nodes/pve1/qemu/300/config", &[ide2]).await.data();
    assert_eq!(
        h.wait_task(upid.as_str().unwrap()).await,
        "Permission check failed (/vms/300, VM.Config.CDROM)"
    );
    h.sim.shutdown().await;

    // VM.Config.CDROM without VM.Config.Disk is enough for a cdrom.
    let h = start(with_vm_300(config_with(privileges(
        &["VM.Config.Disk"],
        &[],
    ))))
    .await;
    upload_seed(&h, "seed.iso").await;
    h.put("/nodes/pve1/qemu/300/config", &[ide2]).await.data();
    h.sim.shutdown().await;

    // Upload rights on the ISO storage are not read rights.
    let acl = privileges(
        &[
            "Datastore.Allocate",
            "Datastore.AllocateSpace",
            "Datastore.Audit",
        ],
        &[],
    );
    let h = start(with_vm_300(config_with(acl))).await;
    upload_seed(&h, "seed.iso").await;
    let put = h.put("/nodes/pve1/qemu/300/config", &[ide2]).await;
    assert_eq!(put.status, StatusCode::FORBIDDEN);
    assert_eq!(
        put.message(),
        "Permission check failed (/storage/proxy-seeds, Datastore.AllocateSpace|Datastore.Audit)\n"
    );
    h.sim.shutdown().await;
}

/// Item 5b. qemu-server `src/PVE/API2/Qemu.pm`: `resize_vm` checks
/// `Datastore.AllocateSpace` on the disk's storage inside its worker: the `resize` task
/// fails, the disk keeps its size.
#[tokio::test]
async fn resize_needs_allocate_space_in_the_task() {
    let h = start(with_vm_300(config_with(privileges(
        &["Datastore.AllocateSpace"],
        &[],
    ))))
    .await;
    let upid = h
        .put(
            "/nodes/pve1/qemu/300/resize",
            &[("disk", "scsi0"), ("size", "8G")],
        )
        .await
        .data();
    assert_eq!(
        h.wait_task(upid.as_str().unwrap()).await,
        "Permission check failed (/storage/vmdata, Datastore.AllocateSpace)"
    );
    assert_eq!(
        config_of(&h, 300).await["scsi0"],
        "vmdata:300/vm-300-disk-0.qcow2,size=4G"
    );
    h.sim.shutdown().await;
}

/// Writes `first` and a `GET /version` back to back (pipelined) and reads until the server
/// closes: returns the status lines received, in order.
async fn pipelined(h: &Harness, first: &[u8]) -> Vec<String> {
    let mut tls = common::raw_tls(&h.sim).await;
    let address = h.sim.endpoint().trim_start_matches("https://").to_string();
    let second = format!(
        "GET /api2/json/version HTTP/1.1\r\nHost: {address}\r\nAuthorization: {}\r\nConnection: \
            close\r\n\r\n",
        h.auth()
    );
    let mut both = first.to_vec();
    both.extend_from_slice(second.as_bytes());
    tls.write_all(&both).await.unwrap();
    let mut received = Vec::new();
    // Either answer ends with the server closing (`Connection: close`), so this ends.
    let _ = tls.read_to_end(&mut received).await;
    let text = String::from_utf8_lossy(&received);
    text.match_indices("HTTP/1.1 ")
        .map(|(at, _)| {
            text[at..]
                .split("\r\n")
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// Item 6. pve-http-server `src/PVE/APIServer/AnyEvent.pm`: `response` sets
/// `keep_alive = 0` for every status >= 400 and answers `Connection: close`;
/// `authenticate_and_handle_request` does the same for every upload. A request pipelined
/// behind such an answer is never read.
#[tokio::test]
async fn the_connection_closes_after_errors_and_uploads() {
    let h = start(fast_config()).await;
    let address = h.sim.endpoint().trim_start_matches("https://").to_string();
    let auth = h.auth();

    let ok = format!(
        "GET /api2/json/version HTTP/1.1\r\nHost: {address}\r\nAuthorization: {auth}\r\n\r\n"
    );
    let lines = pipelined(&h, ok.as_bytes()).await;
    assert_eq!(lines, ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK"]);

    let missing = format!(
        "GET /api2/json/nodes/pve1/qemu/4242/config HTTP/1.1\r\nHost: {address}\r\nAuthorization: \
            {auth}\r\n\r\n"
    );
    let lines = pipelined(&h, missing.as_bytes()).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("HTTP/1.1 500 "), "{lines:?}");

    let unauthenticated = format!("GET /api2/json/version HTTP/1.1\r\nHost: {address}\r\n\r\n");
    let lines = pipelined(&h, unauthenticated.as_bytes()).await;
    assert_eq!(lines, ["HTTP/1.1 401 No ticket"]);

    let file = seed("pipelined", GOOD_USER_DATA);
    let mut body = Vec::new();
    body.extend_from_slice(
        b"--XyZ\r\nContent-Disposition: form-data; \
        name=\"content\"\r\n\r\niso\r\n--XyZ\r\nContent-Disposition: form-data; name=\"filename\"; \
        filename=\"p.iso\"\r\nContent-Type: application/octet-stream\r\n\r\n",
    );
    body.extend_from_slice(&file);
    body.extend_from_slice(b"\r\n--XyZ--\r\n");
    let mut upload = format!(
        "POST /api2/json/nodes/pve1/storage/proxy-seeds/upload HTTP/1.1\r\n\
         Host: {address}\r\nAuthorization: {auth}\r\n\
         Content-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    upload.extend_from_slice(&body);
    let lines = pipelined(&h, &upload).await;
    assert_eq!(lines, ["HTTP/1.1 200 OK"], "the upload succeeds and closes");

    // A client that honours the header opens a new connection and carries on.
    let answer = h.get("/nodes/pve1/qemu/4242/config").await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    h.get("/version").await.data();
    h.sim.shutdown().await;
}

/// Items 7 and 8 (task log). qemu-server `src/PVE/API2/Qemu.pm`: `clone_vm` runs
/// `$load_and_check` and forks before anything is written; the worker, holding the locks,
/// prints `creating a clone of VM <vmid> with ID <newid>` and only then writes the
/// temporary config (`lock: clone`). So right after the UPID the new VMID does not exist:
/// not in its node's config directory, not in `/cluster/resources`, free for `nextid`.
#[tokio::test]
async fn clone_answers_before_the_new_vmid_exists() {
    let mut config = fast_config();
    // Wide enough that the checks below always run inside it.
    config.timings.clone_config_ms = 1500;
    // Long enough to see the temporary config before the full one replaces it.
    config.timings.task_ms.insert("qmclone".into(), 1000);
    let h = start(config).await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "150"), ("full", "1"), ("name", "early")],
        )
        .await
        .data();
    let upid = upid.as_str().unwrap().to_string();

    let missing = h.get("/nodes/pve1/qemu/150/config").await;
    assert_eq!(
        missing.message(),
        "Configuration file 'nodes/pve1/qemu-server/150.conf' does not exist\n"
    );
    let rows = h.get("/cluster/resources?type=vm").await.data();
    assert!(!rows.as_array().unwrap().iter().any(|r| r["vmid"] == 150));
    assert_eq!(h.get("/cluster/nextid?vmid=150").await.data(), 150);

    let temp = h
        .poll_until("/nodes/pve1/qemu/150/config", |a| {
            a.status == StatusCode::OK
        })
        .await
        .data();
    assert_eq!(temp["lock"], "clone");
    assert_eq!(h.wait_task(&upid).await, "OK");
    let log = h
        .get(&format!("/nodes/pve1/tasks/{}/log", common::encode(&upid)))
        .await
        .data();
    assert_eq!(log[0]["t"], "creating a clone of VM 9000 with ID 150");
    assert_eq!(config_of(&h, 150).await["name"], "early");
    h.sim.shutdown().await;
}

/// Item 7, second half: two clones racing for one VMID both get a UPID (the early check
/// only sees configs already written); the second worker, once it has the lock, finds the
/// first one's config and fails (qemu-server `src/PVE/API2/Qemu.pm`: `clone_vm`,
/// `$load_and_check` repeated in the worker: "unable to create VM <newid>: config file
/// already exists").
#[tokio::test]
async fn racing_clones_for_one_vmid_fail_in_the_second_task() {
    let mut config = fast_config();
    config.timings.clone_config_ms = 300;
    let h = start(config).await;
    let mut upids = Vec::new();
    for name in ["first", "second"] {
        let upid = h
            .post(
                "/nodes/pve1/qemu/9000/clone",
                &[("newid", "150"), ("full", "1"), ("name", name)],
            )
            .await
            .data();
        upids.push(upid.as_str().unwrap().to_string());
    }
    assert_eq!(h.wait_task(&upids[0]).await, "OK");
    assert_eq!(
        h.wait_task(&upids[1]).await,
        "unable to create VM 150: config file already exists"
    );
    assert_eq!(config_of(&h, 150).await["name"], "first");
    h.sim.shutdown().await;
}

/// Item 8. qemu-server `src/PVE/API2/Qemu.pm`: `create_disks` stores the volume's size in
/// the drive (`size=…`, printed by `print_drive` with its keys sorted), and `$updatefn`
/// appends a new cdrom to an explicit boot order (`print_bootorder`).
#[tokio::test]
async fn a_written_cdrom_carries_its_size_and_joins_the_boot_order() {
    let h = start(with_vm_300(fast_config())).await;
    let len = upload_seed(&h, "seed.iso").await;
    h.put(
        "/nodes/pve1/qemu/300/config",
        &[("ide2", "proxy-seeds:iso/seed.iso,media=cdrom")],
    )
    .await
    .data();
    let config = config_of(&h, 300).await;
    assert_eq!(len % 1024, 0, "an ISO is whole sectors");
    assert_eq!(
        config["ide2"],
        format!("proxy-seeds:iso/seed.iso,media=cdrom,size={}K", len / 1024)
    );
    assert_eq!(config["boot"], "order=scsi0;ide2");

    // Writing it again changes nothing.
    h.put(
        "/nodes/pve1/qemu/300/config",
        &[("ide2", "proxy-seeds:iso/seed.iso,media=cdrom")],
    )
    .await
    .data();
    assert_eq!(config_of(&h, 300).await["boot"], "order=scsi0;ide2");
    h.sim.shutdown().await;
}

/// Item 8 (names). pve-storage `src/PVE/Storage/Plugin.pm`: `parse_volname`,
/// `get_next_vm_diskname`, `clone_image` and `$vtype_subdirs`: on file-based storages (dir,
/// NFS) a disk is `VMID/vm-VMID-disk-N.<format>` and a linked clone
/// `BASEVMID/BASE/VMID/vm-VMID-disk-N.<format>`, ISOs live under `template/iso/`;
/// `src/PVE/Storage/LvmThinPlugin.pm`: LVM-thin names are bare `vm-VMID-disk-N`, a linked
/// clone's too (see `an_lvm_thin_linked_clone_has_a_bare_volume_name`).
#[tokio::test]
async fn volumes_are_named_the_way_each_storage_plugin_names_them() {
    let h = start(fast_config()).await;
    let cases = [
        ("150", vec![("full", "1")], "vmdata:150/vm-150-disk-0.qcow2"),
        (
            "151",
            vec![("full", "1"), ("storage", "local-lvm")],
            "local-lvm:vm-151-disk-0",
        ),
        (
            "152",
            vec![("full", "1"), ("storage", "local"), ("format", "raw")],
            "local:152/vm-152-disk-0.raw",
        ),
        (
            "153",
            vec![("full", "0")],
            "vmdata:9000/base-9000-disk-0.qcow2/153/vm-153-disk-0.qcow2",
        ),
    ];
    for (newid, extra, volid) in cases {
        let mut form = vec![("newid", newid)];
        form.extend(extra);
        let upid = h.post("/nodes/pve1/qemu/9000/clone", &form).await.data();
        assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
        let scsi0 = config_of(&h, newid.parse().unwrap()).await["scsi0"].clone();
        assert!(
            scsi0.as_str().unwrap().starts_with(&format!("{volid},")),
            "{newid}: {scsi0}"
        );
    }
    let local = h
        .get("/nodes/pve1/storage/local/content?vmid=152")
        .await
        .data();
    assert_eq!(local[0]["volid"], "local:152/vm-152-disk-0.raw");
    assert_eq!(local[0]["format"], "raw");
    assert_eq!(local[0]["vmid"], 152);

    upload_seed(&h, "seed.iso").await;
    let iso = h
        .get("/nodes/pve1/storage/proxy-seeds/content/iso/seed.iso")
        .await
        .data();
    assert_eq!(iso["path"], "/mnt/pve/proxy-seeds/template/iso/seed.iso");
    let disk = h
        .get(&format!(
            "/nodes/pve1/storage/local/content/{}",
            common::encode("local:152/vm-152-disk-0.raw")
        ))
        .await
        .data();
    assert_eq!(disk["path"], "/var/lib/vz/images/152/vm-152-disk-0.raw");

    // Destroy frees them whatever their shape.
    for vmid in ["150", "151", "152", "153"] {
        let upid = h
            .delete(&format!(
                "/nodes/pve1/qemu/{vmid}?purge=1&destroy-unreferenced-disks=1"
            ))
            .await
            .data();
        assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    }
    let state = h.admin.state().await;
    let left: Vec<_> = state
        .volumes
        .iter()
        .filter(|v| v.volid.contains("-15"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    h.sim.shutdown().await;
}

/// Item 9. pve-http-server `src/PVE/APIServer/AnyEvent.pm`: `file_upload_multipart` takes
/// the file part only when its `Content-Disposition: form-data; name="filename";
/// filename="…"` is the part's first header line (`assert_form_disposition` for the
/// type); otherwise the file phase is never reached and the body ends in "upload failed".
#[tokio::test]
async fn multipart_parts_must_open_with_their_content_disposition() {
    let h = start(fast_config()).await;
    let send = |part_headers: &'static str| {
        let mut body = Vec::new();
        body.extend_from_slice(
            b"--B0\r\nContent-Disposition: form-data; name=\"content\"\r\n\r\niso\r\n--B0\r\n",
        );
        body.extend_from_slice(part_headers.as_bytes());
        body.extend_from_slice(b"\r\n\r\nDATA\r\n--B0--\r\n");
        h.client
            .post(h.url("/nodes/pve1/storage/proxy-seeds/upload"))
            .header("Authorization", h.auth())
            .header("Content-Type", "multipart/form-data; boundary=B0")
            .body(body)
            .send()
    };
    for headers in [
        "Content-Type: application/octet-stream\r\nContent-Disposition: form-data; \
            name=\"filename\"; filename=\"a.iso\"",
        "content-disposition: form-data; name=\"filename\"; filename=\"a.iso\"",
        "Content-Disposition: form-data; filename=\"a.iso\"; name=\"filename\"",
    ] {
        let response = send(headers).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(response.text().await.unwrap(), "upload failed", "{headers}");
    }
    let response = send("Content-Disposition: attachment; name=\"filename\"; filename=\"a.iso\"")
        .await
        .unwrap();
    assert_eq!(
        response.text().await.unwrap(),
        "wrong Content-Disposition 'attachment' in multipart, expected 'form-data'"
    );
    let ok = send(
        "Content-Disposition: form-data; name=\"filename\"; filename=\"a.iso\"\r\nContent-Type: \
            application/octet-stream",
    )
    .await
    .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    h.sim.shutdown().await;
}

/// Item 7, as a client sees it when the answer to a clone is lost (fault `reset` with
/// `after_handling`): the connection drops without an answer, yet the clone runs, and its
/// VMID appears only once the worker has written the temporary config.
#[tokio::test]
async fn a_lost_clone_answer_still_clones_after_the_window() {
    let mut config = fast_config();
    config.timings.clone_config_ms = 500;
    config.faults.http.push(pvesim::HttpFault {
        method: Some("POST".into()),
        path_regex: "/clone$".into(),
        reset: true,
        after_handling: true,
        count: Some(1),
        ..pvesim::HttpFault::default()
    });
    let h = start(config).await;
    let lost = h
        .client
        .post(h.url("/nodes/pve1/qemu/9000/clone"))
        .header("Authorization", h.auth())
        .form(&[("newid", "150"), ("full", "1")])
        .send()
        .await;
    assert!(lost.is_err(), "the answer arrived: {lost:?}");
    let journal = h.admin.journal().await;
    let last = journal.last().unwrap().clone();
    assert_eq!(last.path, "/nodes/pve1/qemu/9000/clone");
    assert_eq!(last.status, 200, "{last:?}");
    h.poll_until("/nodes/pve1/qemu/150/status/current", |a| {
        a.status == StatusCode::OK && a.data().get("lock").is_none()
    })
    .await;
    h.sim.shutdown().await;
}

/// qemu-server `src/PVE/API2/Qemu.pm`: `$check_vm_modify_config_perm` sorts keys into its
/// option tables: `boot` is a disk option (`VM.Config.Disk`, not `VM.Config.Options`),
/// `agent` a general one, and a key in no table (`args`) is root's alone.
#[tokio::test]
async fn config_keys_need_the_privilege_of_their_pve_option_table() {
    let h = start(with_vm_300(config_with(privileges(
        &["VM.Config.Disk"],
        &[],
    ))))
    .await;
    let boot = h
        .put(
            "/nodes/pve1/qemu/300/config",
            &[("boot", "order=scsi0;net0")],
        )
        .await;
    assert_eq!(boot.status, StatusCode::FORBIDDEN);
    assert_eq!(
        boot.message(),
        "Permission check failed (/vms/300, VM.Config.Disk)\n"
    );
    h.put("/nodes/pve1/qemu/300/config", &[("agent", "1")])
        .await
        .data();
    let args = h
        .put("/nodes/pve1/qemu/300/config", &[("args", "-no-reboot")])
        .await;
    assert_eq!(args.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(args.message(), "only root can set 'args' config\n");
    h.sim.shutdown().await;
}

/// pve-access-control `src/PVE/RPCEnvironment.pm`: `$compile_acl_path` applies the roles a
/// user holds on `/pool/<pool>` to every member VM's `/vms/<vmid>` path.
#[tokio::test]
async fn a_pools_acls_reach_its_member_vms() {
    let acl = privileges(
        &["VM.Allocate", "VM.Config.Options"],
        &[
            ("/pool/proxies", &["VM.Allocate", "VM.Config.Options"]),
            ("/vms/151", &["VM.Allocate"]),
        ],
    );
    let h = start(config_with(acl)).await;
    for (newid, pool) in [("150", Some("proxies")), ("151", None)] {
        let mut form = vec![("newid", newid), ("full", "1")];
        form.extend(pool.map(|p| ("pool", p)));
        let upid = h.post("/nodes/pve1/qemu/9000/clone", &form).await.data();
        assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    }
    h.put("/nodes/pve1/qemu/150/config", &[("name", "member")])
        .await
        .data();
    let outsider = h
        .put("/nodes/pve1/qemu/151/config", &[("name", "outsider")])
        .await;
    assert_eq!(
        outsider.message(),
        "Permission check failed (/vms/151, VM.Config.Options)\n"
    );
    h.sim.shutdown().await;
}

/// pve-access-control `src/PVE/RPCEnvironment.pm`: `get_effective_permissions` (what
/// `GET /access/permissions` answers without `path`) lists the top-level paths, every ACL
/// path and every pool member VM, each with the privileges held there, inherited ones
/// included, and leaves out paths where nothing is held.
#[tokio::test]
async fn effective_permissions_list_inherited_and_pool_member_paths() {
    let grant = |path: &str, privs: &[&str]| {
        (
            path.to_string(),
            privs.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        )
    };
    let acl = BTreeMap::from([
        grant("/vms", &["VM.Audit", "VM.Allocate", "VM.Clone"]),
        grant("/pool/proxies", &["Pool.Audit"]),
        grant("/storage/vmdata", &["Datastore.AllocateSpace"]),
        grant("/sdn/zones/localnetwork/vmbr0", &["SDN.Use"]),
    ]);
    let h = start(config_with(acl)).await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "150"), ("full", "1"), ("pool", "proxies")],
        )
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    let perms = h.get("/access/permissions").await.data();
    let paths: Vec<&str> = perms
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        paths,
        [
            "/pool/proxies",
            "/sdn/zones/localnetwork/vmbr0",
            "/storage/vmdata",
            "/vms",
            "/vms/150"
        ],
        "{perms}"
    );
    // The member VM: what /vms passes down plus what the pool grants.
    assert_eq!(perms["/vms/150"]["VM.Audit"], 1, "{perms}");
    assert_eq!(perms["/vms/150"]["Pool.Audit"], 1, "{perms}");
    assert!(perms["/vms"].get("Pool.Audit").is_none(), "{perms}");
    h.sim.shutdown().await;
}

/// Issue 24. pve-storage `src/PVE/Storage/LvmThinPlugin.pm`: `clone_image` snapshots the
/// base LV into `find_free_diskname`'s name and returns that bare name (`return $name;`), so
/// an LVM-thin linked clone's disk is `storage:vm-VMID-disk-N`, with no `BASE/` prefix (unlike
/// `ZFSPoolPlugin.pm` and `RBDPlugin.pm`, whose `clone_image` returns `$basename/$name`).
#[tokio::test]
async fn an_lvm_thin_linked_clone_has_a_bare_volume_name() {
    let mut config = fast_config();
    let template = config.vms.iter_mut().find(|vm| vm.vmid == 9000).unwrap();
    template.config.insert(
        "scsi0".into(),
        "local-lvm:base-9000-disk-0,iothread=1,size=4G".into(),
    );
    let h = start(config).await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "153"), ("full", "0")],
        )
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    let scsi0 = config_of(&h, 153).await["scsi0"].clone();
    assert!(
        scsi0
            .as_str()
            .unwrap()
            .starts_with("local-lvm:vm-153-disk-0,"),
        "{scsi0}"
    );
    let listed = h
        .get("/nodes/pve1/storage/local-lvm/content?vmid=153")
        .await
        .data();
    assert_eq!(listed[0]["volid"], "local-lvm:vm-153-disk-0");
    h.sim.shutdown().await;
}

/// Issue 24. pve-http-server `src/PVE/APIServer/AnyEvent.pm`: `file_upload_multipart` takes
/// line ends as `$newline_re = qr/\015?\012/` (a bare LF does), and finds a form field's
/// `Content-Disposition` after other part headers
/// (`s/^${delim_re}.*?Content-Disposition: (.*?); name="$name"(.*?${delim_re})/$2/s`). Only
/// the file part must open with it (see
/// `multipart_parts_must_open_with_their_content_disposition`).
#[tokio::test]
async fn multipart_takes_bare_lf_and_field_headers_before_the_disposition() {
    let h = start(fast_config()).await;
    let bodies: [(&str, &[u8]); 3] = [
        (
            "bare LF",
            b"--B1\nContent-Disposition: form-data; \
                name=\"content\"\n\niso\n--B1\nContent-Disposition: form-data; name=\"filename\"; \
                filename=\"lf.iso\"\nContent-Type: application/octet-stream\n\nDATA\n--B1--\n",
        ),
        (
            "a header before the field's disposition",
            b"--B1\r\nContent-Type: text/plain\r\nContent-Disposition: form-data; \
                name=\"content\"\r\n\r\niso\r\n--B1\r\nContent-Disposition: form-data; \
                name=\"filename\"; filename=\"ct.iso\"\r\n\r\nDATA\r\n--B1--\r\n",
        ),
        (
            "both",
            b"--B1\nContent-Type: text/plain\nContent-Disposition: form-data; \
                name=\"content\"\n\niso\n--B1\nContent-Disposition: form-data; name=\"filename\"; \
                filename=\"both.iso\"\n\nDATA\n--B1--\n",
        ),
    ];
    for (label, body) in bodies {
        let response = h
            .client
            .post(h.url("/nodes/pve1/storage/proxy-seeds/upload"))
            .header("Authorization", h.auth())
            .header("Content-Type", "multipart/form-data; boundary=B1")
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_eq!(status, StatusCode::OK, "{label}: {text}");
        let upid: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            h.wait_task(upid["data"].as_str().unwrap()).await,
            "OK",
            "{label}"
        );
    }
    let listed = h
        .get("/nodes/pve1/storage/proxy-seeds/content?content=iso")
        .await
        .data();
    for name in ["lf.iso", "ct.iso", "both.iso"] {
        let volume = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["volid"] == format!("proxy-seeds:iso/{name}"))
            .unwrap_or_else(|| panic!("{name} missing: {listed}"));
        assert_eq!(volume["size"], 4, "{name}: the file's bytes, no line end");
    }
    h.sim.shutdown().await;
}

/// Issue 24. qemu-server `src/PVE/API2/Qemu.pm`: `create_disks` allocates a drive given as
/// `<storage>:cloudinit` as `vm-<vmid>-cloudinit` (with `.qcow2` on storages with a path),
/// 4 MiB (`Cloudinit.pm` `CLOUDINIT_DISK_SIZE`), `media=cdrom`; a second one dies
/// "<key> - cloud-init drive is already attached at '<other>'" (`QemuConfig.pm`
/// `has_cloudinit`). Only the drive: its content is not built.
#[tokio::test]
async fn a_cloudinit_drive_is_allocated_as_pve_does() {
    let h = start(fast_config()).await;
    h.clone_template(189, "ci-lvm").await;
    h.put(
        "/nodes/pve1/qemu/189/config",
        &[("ide2", "local-lvm:cloudinit")],
    )
    .await
    .data();
    assert_eq!(
        config_of(&h, 189).await["ide2"],
        "local-lvm:vm-189-cloudinit,media=cdrom"
    );
    let listed = h
        .get("/nodes/pve1/storage/local-lvm/content?vmid=189")
        .await
        .data();
    let volume = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["volid"] == "local-lvm:vm-189-cloudinit")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(volume["size"], 4 << 20);
    let again = h
        .put(
            "/nodes/pve1/qemu/189/config",
            &[("ide0", "local-lvm:cloudinit")],
        )
        .await;
    assert_eq!(again.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        again.message(),
        "ide0 - cloud-init drive is already attached at 'ide2'\n"
    );
    // On a storage with a path: qcow2, in the VM's directory.
    h.clone_template(190, "ci-dir").await;
    h.put(
        "/nodes/pve1/qemu/190/config",
        &[("ide2", "local:cloudinit")],
    )
    .await
    .data();
    assert_eq!(
        config_of(&h, 190).await["ide2"],
        "local:190/vm-190-cloudinit.qcow2,media=cdrom"
    );
    // The VM starts with it, and a purge frees it.
    let upid = h
        .post("/nodes/pve1/qemu/189/status/start", &[])
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    let upid = h.post("/nodes/pve1/qemu/189/status/stop", &[]).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    let upid = h
        .delete("/nodes/pve1/qemu/189?purge=1&destroy-unreferenced-disks=1")
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    let state = h.admin.state().await;
    assert!(
        !state
            .volumes
            .iter()
            .any(|v| v.volid == "local-lvm:vm-189-cloudinit"),
        "{state:?}"
    );
    h.sim.shutdown().await;
}

/// pve-manager `PVE/API2/Tasks.pm` `node_tasks`: without `Sys.Audit` on the node a caller
/// sees only its own tasks (`$check_task_user`: a token its own, matched on
/// `user@realm!token`), so not the qmstart the HA stack's LRM ran as `root@pam`; with it,
/// every task.
#[tokio::test]
async fn task_listing_without_sys_audit_holds_only_the_callers_tasks() {
    for audit in [false, true] {
        let missing: &[&str] = if audit { &[] } else { &["Sys.Audit"] };
        let h = start(config_with(privileges(missing, &[]))).await;
        let added = h
            .post(
                "/cluster/ha/resources",
                &[("sid", "vm:102"), ("state", "started")],
            )
            .await;
        assert_eq!(added.status, StatusCode::OK, "{}", added.body);
        h.poll_until("/nodes/pve3/qemu/102/status/current", |a| {
            a.data()["status"] == "running"
        })
        .await;
        let own = h
            .post("/nodes/pve3/qemu/102/config", &[("description", "mine")])
            .await
            .data();
        h.wait_task(own.as_str().unwrap()).await;
        let rows = h.get("/nodes/pve3/tasks?source=all").await.data();
        let listed: Vec<(String, String)> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["type"].as_str().unwrap().into(),
                    r["user"].as_str().unwrap().into(),
                )
            })
            .collect();
        let root_start = ("qmstart".to_string(), "root@pam".to_string());
        assert_eq!(
            listed.contains(&root_start),
            audit,
            "audit {audit}: {listed:?}"
        );
        assert!(
            listed.iter().any(|(kind, _)| kind == "qmconfig"),
            "audit {audit}: {listed:?}"
        );
        h.sim.shutdown().await;
    }
}

/// qemu-server 9.2.6 `src/PVE/QemuServer.pm` `destroy_vm`: the VM's own disks are freed
/// first, then the config is replaced by `{ lock => 'destroyed' }`; the API's `destroy_vm`
/// handler (`src/PVE/API2/Qemu.pm`) then purges the VM from HA, replication and backup jobs
/// and only at its end removes the config ("only now remove the zombie config, else we can
/// have reuse race"). While the disks are freed the config is as it was; then the VM is
/// there, stopped, its config only that lock, and the `qmdestroy` task still runs.
#[tokio::test]
async fn a_destroy_frees_the_disks_then_leaves_a_destroyed_lock_until_its_end() {
    let mut config = fast_config();
    // Half of it frees the disks, and the lock stays a whole run time: each phase is looked
    // at well within its span.
    config.timings.task_ms.insert("qmdestroy".into(), 20_000);
    let h = start(config).await;
    h.clone_template(191, "being-destroyed").await;
    let disk = config_of(&h, 191).await["scsi0"]
        .as_str()
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .to_owned();
    let upid = h
        .delete("/nodes/pve1/qemu/191?purge=1&destroy-unreferenced-disks=1")
        .await
        .data();
    let freeing = config_of(&h, 191).await;
    assert_eq!(freeing["name"], "being-destroyed", "{freeing}");
    let mut looks = 0;
    let locked = loop {
        let seen = config_of(&h, 191).await;
        if seen["lock"] == "destroyed" {
            break seen;
        }
        looks += 1;
        assert!(looks < 3000, "the lock never came: {seen}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let keys: Vec<&String> = locked.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["digest", "lock"], "{locked}");
    let status = h.get("/nodes/pve1/qemu/191/status/current").await.data();
    assert_eq!(status["status"], "stopped", "{status}");
    assert_eq!(status["lock"], "destroyed", "{status}");
    let state = h.admin.state().await;
    assert!(
        !state.volumes.iter().any(|v| v.volid == disk),
        "{disk} is freed before the lock: {state:?}"
    );
    let task = h
        .get(&format!(
            "/nodes/pve1/tasks/{}/status",
            upid.as_str().unwrap()
        ))
        .await
        .data();
    assert_eq!(task["status"], "running", "{task}");
    h.sim.shutdown().await;
}

/// The `stalled_tasks` fault (a test facility, not PVE's): a destroy's worker waits in its
/// `lock: destroyed` phase, with its disks freed, until the fault no longer names
/// `qmdestroy`; then it ends as a destroy does. Tests reach that phase by an event, not by
/// a run time.
#[tokio::test]
async fn a_stalled_destroy_stays_locked_destroyed_until_the_fault_is_lifted() {
    let h = start(fast_config()).await;
    h.clone_template(192, "stalled").await;
    h.clone_template(193, "not-stalled").await;
    let stalled: Faults =
        serde_json::from_value(json!({"stalled_tasks": [{"task_type": "qmdestroy", "vmid": 192}]}))
            .unwrap();
    h.admin.set_faults(&stalled).await;
    let upid = h
        .delete("/nodes/pve1/qemu/192?purge=1&destroy-unreferenced-disks=1")
        .await
        .data();
    let upid = upid.as_str().unwrap();
    let task_status = format!("/nodes/pve1/tasks/{upid}/status");
    let mut looks = 0;
    while config_of(&h, 192).await["lock"] != "destroyed" {
        looks += 1;
        assert!(looks < 3000, "the lock never came");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Another VM's destroy is not held, and 192's still stands well past its run time.
    let other = h.delete("/nodes/pve1/qemu/193?purge=1").await.data();
    let other_status = format!("/nodes/pve1/tasks/{}/status", other.as_str().unwrap());
    let mut looks = 0;
    while h.get(&other_status).await.data()["status"] != "stopped" {
        looks += 1;
        assert!(looks < 3000, "VM 193's destroy never ended");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(config_of(&h, 192).await["lock"], "destroyed");
    assert_eq!(h.get(&task_status).await.data()["status"], "running");

    h.admin.clear_faults().await;
    let mut looks = 0;
    let task = loop {
        let task = h.get(&task_status).await.data();
        if task["status"] == "stopped" {
            break task;
        }
        looks += 1;
        assert!(looks < 3000, "the destroy never ended: {task}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(task["exitstatus"], "OK", "{task}");
    assert!(!h.admin.state().await.vms.iter().any(|vm| vm.vmid == 192));
    h.sim.shutdown().await;
}
