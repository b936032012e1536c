//! Conformance suite: each test pins one behaviour of PVE 9 from `shared/pve/facts.md`
//! (section named in the test's doc comment), driven over HTTPS by a plain client.

use crate::common::{GOOD_USER_DATA, encode, faults, seed, start};
use pvesim::testing::fast_config;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// facts §13 version, §1 envelope.
#[tokio::test]
async fn version_is_enveloped_in_data() {
    let h = start(fast_config()).await;
    let answer = h.get("/version").await;
    let data = answer.data();
    assert!(data["version"].as_str().unwrap().starts_with("9.2"));
    assert_eq!(data["release"], "9.2");
    assert!(data["repoid"].is_string());
    h.sim.shutdown().await;
}

/// facts §2 / §3: no credentials -> 401 "No ticket", bad token -> 401 "Authentication
/// failed!", both with an empty body.
#[tokio::test]
async fn token_auth_failures_have_pve_texts_and_no_body() {
    let h = start(fast_config()).await;
    let none = h.client.get(h.url("/version")).send().await.unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(none.text().await.unwrap(), "");
    let (id, _) = h.sim.token().rsplit_once('=').unwrap();
    let wrong = h
        .client
        .get(h.url("/version"))
        .header("Authorization", format!("PVEAPIToken={id}=not-the-secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.text().await.unwrap(), "");
    // The space form of the header is accepted too.
    let spaced = h
        .client
        .get(h.url("/version"))
        .header("Authorization", format!("PVEAPIToken {}", h.sim.token()))
        .send()
        .await
        .unwrap();
    assert_eq!(spaced.status(), StatusCode::OK);
    h.sim.shutdown().await;
}

/// facts §2: unknown path -> 501 "Method 'GET /foo' not implemented".
#[tokio::test]
async fn unknown_path_is_501() {
    let h = start(fast_config()).await;
    let answer = h.get("/nodes/pve1/lxc").await;
    assert_eq!(answer.status.as_u16(), 501);
    assert_eq!(
        answer.message(),
        "Method 'GET /nodes/pve1/lxc' not implemented"
    );
    h.sim.shutdown().await;
}

/// facts §2: schema violations -> 400 with `errors` map and PVE's message.
#[tokio::test]
async fn unknown_parameter_is_pve_400_body() {
    let h = start(fast_config()).await;
    let answer = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "200"), ("colour", "red")],
        )
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    let body = answer.json();
    assert_eq!(body["data"], json!(null));
    assert_eq!(body["message"], "Parameter verification failed.\n");
    assert_eq!(
        body["errors"]["colour"],
        "property is not defined in schema and the schema does not allow additional properties"
    );
    h.sim.shutdown().await;
}

/// facts §1 typing quirks + §13 nextid: a string; `?vmid=` of a used id -> 400.
#[tokio::test]
async fn nextid_is_a_string_and_checks_a_given_vmid() {
    let h = start(fast_config()).await;
    assert_eq!(h.get("/cluster/nextid").await.data(), json!("103"));
    let used = h.get("/cluster/nextid?vmid=100").await;
    assert_eq!(used.status, StatusCode::BAD_REQUEST);
    assert_eq!(used.json()["errors"]["vmid"], "VM 100 already exists");
    h.sim.shutdown().await;
}

/// facts §4 + §5: clone returns a `qmclone` UPID carrying the source VMID; meanwhile the
/// new VM is locked `clone` and named "VM <newid>"; afterwards it has the given name, no
/// lock, no template flag and a fresh MAC with PVE's prefix.
#[tokio::test]
async fn clone_is_a_task_with_lock_and_fresh_mac() {
    let mut config = fast_config();
    config.timings.task_ms.insert("qmclone".into(), 300);
    let h = start(config).await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[
                ("newid", "150"),
                ("name", "edge-0"),
                ("full", "1"),
                ("description", "ours"),
            ],
        )
        .await
        .data();
    let upid = upid.as_str().unwrap().to_string();
    let parts: Vec<&str> = upid.split(':').collect();
    assert_eq!(parts[0], "UPID");
    assert_eq!(parts[1], "pve1");
    assert_eq!(parts[5], "qmclone");
    assert_eq!(parts[6], "9000");
    assert_eq!(parts[7], h.sim.token().split_once('=').unwrap().0);
    assert!(upid.ends_with(':'));

    // The worker writes the temporary config shortly after the answer (see pve_fidelity.rs).
    let during = h
        .poll_until("/nodes/pve1/qemu/150/status/current", |a| {
            a.status == StatusCode::OK
        })
        .await
        .data();
    assert_eq!(during["lock"], "clone");
    assert_eq!(during["name"], "VM 150");
    assert_eq!(during["status"], "stopped");

    assert_eq!(h.wait_task(&upid).await, "OK");
    let config = h.get("/nodes/pve1/qemu/150/config").await.data();
    assert_eq!(config["name"], "edge-0");
    assert_eq!(config["description"], "ours");
    assert!(config.get("lock").is_none());
    assert!(config.get("template").is_none());
    let net0 = config["net0"].as_str().unwrap();
    let template_net0 = h.get("/nodes/pve1/qemu/9000/config").await.data()["net0"].clone();
    assert!(net0.starts_with("virtio=BC:24:11:"), "{net0}");
    assert_ne!(json!(net0), template_net0);
    assert!(
        config["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("vmdata:150/vm-150-disk-0.qcow2,")
    );
    h.sim.shutdown().await;
}

/// facts §5: newid already on this node -> sync 500 "config file already exists"; newid on
/// another node -> task error from pmxcfs.
#[tokio::test]
async fn clone_collisions() {
    let h = start(fast_config()).await;
    let here = h
        .post("/nodes/pve1/qemu/9000/clone", &[("newid", "100")])
        .await;
    assert_eq!(here.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        here.message(),
        "unable to create VM 100: config file already exists\n"
    );
    let elsewhere = h
        .post("/nodes/pve1/qemu/9000/clone", &[("newid", "101")])
        .await
        .data();
    let exit = h.wait_task(elsewhere.as_str().unwrap()).await;
    assert_eq!(
        exit,
        "close (rename) atomic file '/etc/pve/nodes/pve1/qemu-server/101.conf' failed: File exists"
    );
    h.sim.shutdown().await;
}

/// facts §5: `target` needs shared storage; the clone then lives on the target node.
#[tokio::test]
async fn clone_to_target_node_with_shared_storage() {
    let h = start(fast_config()).await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[
                ("newid", "160"),
                ("name", "far"),
                ("full", "1"),
                ("target", "pve3"),
            ],
        )
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    assert_eq!(
        h.get("/nodes/pve3/qemu/160/config").await.data()["name"],
        "far"
    );
    let wrong_node = h.get("/nodes/pve1/qemu/160/config").await;
    assert_eq!(wrong_node.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        wrong_node.message(),
        "Configuration file 'nodes/pve1/qemu-server/160.conf' does not exist\n"
    );
    let local = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[
                ("newid", "161"),
                ("full", "1"),
                ("target", "pve2"),
                ("storage", "local"),
            ],
        )
        .await;
    assert_eq!(
        local.message(),
        "can't clone to non-shared storage 'local'\n"
    );
    let no_images = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "161"), ("full", "1"), ("storage", "proxy-seeds")],
        )
        .await;
    assert_eq!(
        no_images.status,
        StatusCode::BAD_REQUEST,
        "{}",
        no_images.body
    );
    h.sim.shutdown().await;
}

/// facts §6: POST config is a `qmconfig` task, PUT is synchronous (`null`); a net0 without
/// MAC gets a new one, with MAC keeps it; config typing (§1): cores number, memory string.
#[tokio::test]
async fn config_post_put_and_net_mac() {
    let h = start(fast_config()).await;
    h.clone_template(170, "cfg").await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/170/config",
            &[("cores", "2"), ("memory", "2048"), ("agent", "1")],
        )
        .await
        .data();
    assert!(upid.as_str().unwrap().contains(":qmconfig:170:"));
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    let config = h.get("/nodes/pve1/qemu/170/config").await.data();
    assert_eq!(config["cores"], json!(2));
    assert_eq!(config["memory"], json!("2048"));
    assert_eq!(config["agent"], json!("1"));

    let mac = config["net0"]
        .as_str()
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .to_string();
    let keep = format!("{mac},bridge=vmbr0,tag=20");
    let put = h
        .put("/nodes/pve1/qemu/170/config", &[("net0", &keep)])
        .await;
    assert_eq!(put.data(), json!(null));
    let kept = h.get("/nodes/pve1/qemu/170/config").await.data();
    assert_eq!(kept["net0"], json!(keep));

    h.put(
        "/nodes/pve1/qemu/170/config",
        &[("net0", "virtio,bridge=vmbr0")],
    )
    .await
    .data();
    let fresh = h.get("/nodes/pve1/qemu/170/config").await.data();
    let fresh_mac = fresh["net0"].as_str().unwrap();
    assert!(fresh_mac.starts_with("virtio=BC:24:11:"));
    assert!(!fresh_mac.starts_with(&mac));
    h.sim.shutdown().await;
}

/// facts §6: an ISO on ide2 needs `media=cdrom`; digest mismatch is refused; tags are
/// normalised (§7); `delete` removes keys.
#[tokio::test]
async fn config_checks_cdrom_digest_tags_delete() {
    let h = start(fast_config()).await;
    h.clone_template(171, "chk").await;
    let no_media = h
        .put(
            "/nodes/pve1/qemu/171/config",
            &[("ide2", "proxy-seeds:iso/x.iso")],
        )
        .await;
    assert_eq!(no_media.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        no_media.json()["errors"]["ide2"],
        "explicit 'media=cdrom' is required for iso images"
    );
    let stale = h
        .put(
            "/nodes/pve1/qemu/171/config",
            &[
                ("cores", "3"),
                ("digest", "0000000000000000000000000000000000000000"),
            ],
        )
        .await;
    assert_eq!(stale.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        stale.message(),
        "checksum mismatch (file change by other user?)\n"
    );
    h.put("/nodes/pve1/qemu/171/config", &[("tags", "Proxy,b a")])
        .await
        .data();
    assert_eq!(
        h.get("/nodes/pve1/qemu/171/config").await.data()["tags"],
        "a;b;proxy"
    );
    h.put("/nodes/pve1/qemu/171/config", &[("delete", "tags")])
        .await
        .data();
    assert!(
        h.get("/nodes/pve1/qemu/171/config")
            .await
            .data()
            .get("tags")
            .is_none()
    );
    let nothing = h.put("/nodes/pve1/qemu/171/config", &[]).await;
    assert_eq!(nothing.message(), "no options specified\n");
    h.sim.shutdown().await;
}

/// qemu-server Qemu.pm, update_vm_api: the POST's `qmconfig` worker checks the digest again
/// under the config lock, so of two writes sent with the same digest only the first lands
/// and the second's task fails with the checksum text.
#[tokio::test]
async fn a_config_post_rechecks_its_digest_in_the_worker() {
    let mut config = fast_config();
    // Long enough that both POSTs pass the pre-fork check before the first worker writes.
    config.timings.task_ms.insert("qmconfig".into(), 300);
    let h = start(config).await;
    h.clone_template(172, "race").await;
    let digest = h.get("/nodes/pve1/qemu/172/config").await.data()["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = h
        .post(
            "/nodes/pve1/qemu/172/config",
            &[("cores", "2"), ("digest", &digest)],
        )
        .await
        .data();
    let second = h
        .post(
            "/nodes/pve1/qemu/172/config",
            &[("cores", "3"), ("digest", &digest)],
        )
        .await
        .data();
    assert_eq!(h.wait_task(first.as_str().unwrap()).await, "OK");
    assert_eq!(
        h.wait_task(second.as_str().unwrap()).await,
        "checksum mismatch (file change by other user?)"
    );
    assert_eq!(
        h.get("/nodes/pve1/qemu/172/config").await.data()["cores"],
        2
    );
    h.sim.shutdown().await;
}

/// facts §6: on a running VM, cores stay pending while name applies at once.
#[tokio::test]
async fn running_vm_keeps_cpu_changes_pending() {
    let h = start(fast_config()).await;
    h.put(
        "/nodes/pve1/qemu/100/config",
        &[("cores", "8"), ("name", "dns-renamed")],
    )
    .await
    .data();
    let current = h.get("/nodes/pve1/qemu/100/config?current=1").await.data();
    assert_eq!(current["cores"], json!(2));
    assert_eq!(current["name"], "dns-renamed");
    let effective = h.get("/nodes/pve1/qemu/100/config").await.data();
    assert_eq!(effective["cores"], json!(8));
    let pending = h.get("/nodes/pve1/qemu/100/pending").await.data();
    let cores = pending
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "cores")
        .unwrap();
    assert_eq!(cores["pending"], json!(8));
    assert_eq!(cores["value"], json!(2));
    h.sim.shutdown().await;
}

/// qemu-server `src/PVE/QemuServer.pm` at 9.2.6 (e6352be6), `vmconfig_hotplug_pending` and
/// `vmconfig_update_net`: on a running VM a NIC's new bridge or VLAN tag applies at once
/// whatever `hotplug` says (the tap is re-plugged: "some changes can be done without
/// hotplug"); a new NIC, a new MAC or a NIC's delete is a device hot-plug, at once with the
/// default `hotplug` (`network,disk,usb`) and pending (`die "skip\n"`) without `network`.
#[tokio::test]
async fn nics_hotplug_as_qemu_server_does() {
    let h = start(fast_config()).await;
    let nic_keys = |answer: Value| -> Vec<String> {
        let mut keys: Vec<String> = answer
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("net"))
            .cloned()
            .collect();
        keys.sort();
        keys
    };
    let pending_keys = |pending: Value| -> Vec<String> {
        pending
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r.get("pending").is_some() || r.get("delete").is_some())
            .map(|r| r["key"].as_str().unwrap().to_owned())
            .collect()
    };
    // VM 100 runs with the default `hotplug`: a NIC comes and goes at once.
    let vm = "/nodes/pve1/qemu/100";
    h.put(
        &format!("{vm}/config"),
        &[("net1", "virtio,bridge=vmbr0,tag=20")],
    )
    .await
    .data();
    let current = h.get(&format!("{vm}/config?current=1")).await.data();
    assert_eq!(nic_keys(current.clone()), ["net0", "net1"], "{current}");
    h.put(&format!("{vm}/config"), &[("delete", "net1")])
        .await
        .data();
    let current = h.get(&format!("{vm}/config?current=1")).await.data();
    assert_eq!(nic_keys(current.clone()), ["net0"], "{current}");

    // VM 102 without `network` hotplug, started with a second NIC.
    let vm = "/nodes/pve3/qemu/102";
    let nic = "virtio=BC:24:11:00:00:02,bridge=vmbr0";
    h.put(
        &format!("{vm}/config"),
        &[("hotplug", "disk,usb"), ("net1", nic)],
    )
    .await
    .data();
    let upid = h.post(&format!("{vm}/status/start"), &[]).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    // A new VLAN: at once.
    let tagged = "virtio=BC:24:11:00:00:02,bridge=vmbr0,tag=30";
    h.put(&format!("{vm}/config"), &[("net1", tagged)])
        .await
        .data();
    let current = h.get(&format!("{vm}/config?current=1")).await.data();
    assert_eq!(current["net1"], tagged);
    assert!(pending_keys(h.get(&format!("{vm}/pending")).await.data()).is_empty());
    // A new MAC, a new NIC and a delete: pending until the next start.
    h.put(
        &format!("{vm}/config"),
        &[
            ("net1", "virtio=BC:24:11:00:00:03,bridge=vmbr0,tag=30"),
            ("net2", "virtio=BC:24:11:00:00:04,bridge=vmbr0"),
        ],
    )
    .await
    .data();
    let current = h.get(&format!("{vm}/config?current=1")).await.data();
    assert_eq!(current["net1"], tagged);
    assert_eq!(nic_keys(current.clone()), ["net0", "net1"], "{current}");
    let mut pending = pending_keys(h.get(&format!("{vm}/pending")).await.data());
    pending.sort();
    assert_eq!(pending, ["net1", "net2"]);
    h.put(&format!("{vm}/config"), &[("delete", "net0")])
        .await
        .data();
    let current = h.get(&format!("{vm}/config?current=1")).await.data();
    assert!(current.get("net0").is_some(), "deleted at once: {current}");
    h.sim.shutdown().await;
}

/// pve-guest-common `src/PVE/AbstractConfig.pm` `cleanup_pending`, which qemu-server's
/// `update_vm_api` calls after writing every new value to pending ("remove pending changes
/// when nothing changed"): a pending value equal to the current one is dropped
/// (`if (defined($conf->{$opt}) && ($pending->{$opt} eq $conf->{$opt}))`), so writing the
/// current value, or going back to it, leaves nothing pending.
#[tokio::test]
async fn a_pending_value_equal_to_the_current_one_is_dropped() {
    let h = start(fast_config()).await;
    let current = h.get("/nodes/pve1/qemu/100/config?current=1").await.data();
    let memory = current["memory"].as_str().unwrap().to_owned();
    let pending_keys = |pending: Value| -> Vec<String> {
        pending
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r.get("pending").is_some() || r.get("delete").is_some())
            .map(|r| r["key"].as_str().unwrap().to_owned())
            .collect()
    };
    // The current values, written to a running VM.
    h.put(
        "/nodes/pve1/qemu/100/config",
        &[("cores", "2"), ("memory", memory.as_str())],
    )
    .await
    .data();
    let pending = h.get("/nodes/pve1/qemu/100/pending").await.data();
    assert_eq!(
        pending_keys(pending.clone()),
        Vec::<String>::new(),
        "{pending}"
    );
    // A change, then back to the current value.
    h.put("/nodes/pve1/qemu/100/config", &[("cores", "8")])
        .await
        .data();
    let pending = h.get("/nodes/pve1/qemu/100/pending").await.data();
    assert_eq!(pending_keys(pending), vec!["cores".to_owned()]);
    h.put("/nodes/pve1/qemu/100/config", &[("cores", "2")])
        .await
        .data();
    let pending = h.get("/nodes/pve1/qemu/100/pending").await.data();
    assert_eq!(
        pending_keys(pending.clone()),
        Vec::<String>::new(),
        "{pending}"
    );
    h.sim.shutdown().await;
}

/// facts §10: resize is a `resize` task; growing works, shrinking fails inside the task.
#[tokio::test]
async fn resize_grows_and_refuses_to_shrink() {
    let h = start(fast_config()).await;
    h.clone_template(172, "rs").await;
    let grow = h
        .put(
            "/nodes/pve1/qemu/172/resize",
            &[("disk", "scsi0"), ("size", "20G")],
        )
        .await
        .data();
    assert!(grow.as_str().unwrap().contains(":resize:172:"));
    assert_eq!(h.wait_task(grow.as_str().unwrap()).await, "OK");
    let config = h.get("/nodes/pve1/qemu/172/config").await.data();
    assert!(config["scsi0"].as_str().unwrap().contains("size=20G"));
    let shrink = h
        .put(
            "/nodes/pve1/qemu/172/resize",
            &[("disk", "scsi0"), ("size", "10G")],
        )
        .await
        .data();
    assert_eq!(
        h.wait_task(shrink.as_str().unwrap()).await,
        "shrinking disks is not supported"
    );
    let relative = h
        .put(
            "/nodes/pve1/qemu/172/resize",
            &[("disk", "scsi0"), ("size", "+1G")],
        )
        .await
        .data();
    assert_eq!(h.wait_task(relative.as_str().unwrap()).await, "OK");
    let config = h.get("/nodes/pve1/qemu/172/config").await.data();
    assert!(config["scsi0"].as_str().unwrap().contains("size=21G"));
    h.sim.shutdown().await;
}

/// facts §8: start/stop tasks, status/current with qmpstatus; shutdown of a stopped VM is
/// a sync 500; starting a template fails in the task.
#[tokio::test]
async fn power_state_machine() {
    let h = start(fast_config()).await;
    h.clone_template(173, "pw").await;
    let not_running = h.post("/nodes/pve1/qemu/173/status/shutdown", &[]).await;
    assert_eq!(not_running.message(), "VM 173 not running\n");
    let start = h
        .post("/nodes/pve1/qemu/173/status/start", &[])
        .await
        .data();
    assert!(start.as_str().unwrap().contains(":qmstart:173:"));
    assert_eq!(h.wait_task(start.as_str().unwrap()).await, "OK");
    let status = h.get("/nodes/pve1/qemu/173/status/current").await.data();
    assert_eq!(status["status"], "running");
    assert_eq!(status["qmpstatus"], "running");
    let again = h
        .post("/nodes/pve1/qemu/173/status/start", &[])
        .await
        .data();
    assert_eq!(
        h.wait_task(again.as_str().unwrap()).await,
        "VM 173 already running"
    );
    let stop = h.post("/nodes/pve1/qemu/173/status/stop", &[]).await.data();
    assert_eq!(h.wait_task(stop.as_str().unwrap()).await, "OK");
    assert_eq!(
        h.get("/nodes/pve1/qemu/173/status/current").await.data()["qmpstatus"],
        "stopped"
    );
    let template = h
        .post("/nodes/pve1/qemu/9000/status/start", &[])
        .await
        .data();
    assert_eq!(
        h.wait_task(template.as_str().unwrap()).await,
        "you can't start a vm if it's a template"
    );
    h.sim.shutdown().await;
}

/// facts §11: the agent errors in PVE's order; with a valid seed the agent reports the MAC,
/// a pooled IPv4 and a link-local IPv6, and the seed's hostname.
#[tokio::test]
async fn guest_agent_answers_only_with_a_valid_seed() {
    let h = start(fast_config()).await;
    h.clone_template(174, "edge-4").await;
    let agent = "/nodes/pve1/qemu/174/agent/network-get-interfaces";
    assert_eq!(
        h.get(agent).await.message(),
        "No QEMU guest agent configured\n"
    );

    let upload = h
        .upload(
            "pve1",
            "proxy-seeds",
            "seed-174.iso",
            seed("edge-4", GOOD_USER_DATA),
        )
        .await
        .data();
    assert_eq!(h.wait_task(upload.as_str().unwrap()).await, "OK");
    h.put(
        "/nodes/pve1/qemu/174/config",
        &[
            ("agent", "1"),
            ("ide2", "proxy-seeds:iso/seed-174.iso,media=cdrom"),
        ],
    )
    .await
    .data();
    assert_eq!(h.get(agent).await.message(), "VM 174 is not running\n");
    let start = h
        .post("/nodes/pve1/qemu/174/status/start", &[])
        .await
        .data();
    assert_eq!(h.wait_task(start.as_str().unwrap()).await, "OK");
    let answer = h.poll_until(agent, |a| a.status == StatusCode::OK).await;
    let interfaces = answer.data()["result"].clone();
    let mac = h.get("/nodes/pve1/qemu/174/config").await.data()["net0"]
        .as_str()
        .unwrap()
        .split([',', '='])
        .nth(1)
        .unwrap()
        .to_lowercase();
    let nic = interfaces
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["hardware-address"] == json!(mac))
        .expect("NIC with the VM's MAC");
    let addresses = nic["ip-addresses"].as_array().unwrap();
    assert!(
        addresses.iter().any(|a| a["ip-address-type"] == "ipv4"
            && a["ip-address"].as_str().unwrap().starts_with("10."))
    );
    assert!(addresses.iter().any(|a| a["ip-address-type"] == "ipv6"
        && a["ip-address"].as_str().unwrap().starts_with("fe80::")));
    let host = h
        .get("/nodes/pve1/qemu/174/agent/get-host-name")
        .await
        .data();
    assert_eq!(host["result"]["host-name"], "edge-4");
    h.sim.shutdown().await;
}

/// facts §11: a seed that does not install and start qemu-guest-agent (or is not labelled
/// cidata) leaves the agent silent: "QEMU guest agent is not running".
#[tokio::test]
async fn guest_agent_stays_silent_without_a_proper_seed() {
    let h = start(fast_config()).await;
    h.clone_template(175, "quiet").await;
    let no_agent = seed("quiet", "#cloud-config\npackages:\n  - nginx\n");
    let up = h
        .upload("pve1", "proxy-seeds", "quiet.iso", no_agent)
        .await
        .data();
    assert_eq!(h.wait_task(up.as_str().unwrap()).await, "OK");
    h.put(
        "/nodes/pve1/qemu/175/config",
        &[
            ("agent", "1"),
            ("ide2", "proxy-seeds:iso/quiet.iso,media=cdrom"),
        ],
    )
    .await
    .data();
    let start = h
        .post("/nodes/pve1/qemu/175/status/start", &[])
        .await
        .data();
    assert_eq!(h.wait_task(start.as_str().unwrap()).await, "OK");
    // Wait until the boot delay has surely passed (the VM's uptime ticks), then check.
    h.poll_until("/nodes/pve1/qemu/175/status/current", |a| {
        a.data()["uptime"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    let answer = h.get("/nodes/pve1/qemu/175/agent/ping").await;
    assert_eq!(
        answer.status,
        StatusCode::NOT_IMPLEMENTED,
        "ping is POST only"
    );
    let ping = h.post("/nodes/pve1/qemu/175/agent/ping", &[]).await;
    assert_eq!(ping.message(), "QEMU guest agent is not running\n");
    h.sim.shutdown().await;
}

/// facts §12: upload (multipart, `.iso` name, overwrite), content list, delete is an
/// idempotent `imgdel` task; the admin API returns the uploaded bytes.
#[tokio::test]
async fn storage_upload_list_overwrite_delete() {
    let h = start(fast_config()).await;
    let bad = h
        .upload("pve2", "proxy-seeds", "seed.txt", b"x".to_vec())
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.json()["errors"]["filename"], "wrong file extension");

    for content in [b"first".to_vec(), b"second!".to_vec()] {
        let upid = h
            .upload("pve2", "proxy-seeds", "s.iso", content)
            .await
            .data();
        assert!(upid.as_str().unwrap().contains(":imgcopy::"));
        assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    }
    let list = h
        .get("/nodes/pve2/storage/proxy-seeds/content?content=iso")
        .await
        .data();
    let volume = list
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["volid"] == "proxy-seeds:iso/s.iso")
        .unwrap();
    assert_eq!(volume["size"], json!(7));
    assert_eq!(volume["format"], "iso");
    // Local storage: not visible from another node.
    let other = h
        .get("/nodes/pve1/storage/proxy-seeds/content")
        .await
        .data();
    assert!(
        other
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["volid"] != "proxy-seeds:iso/s.iso")
    );

    let bytes = h
        .client
        .get(format!(
            "{}/_sim/volume/pve2/proxy-seeds/iso/s.iso",
            h.sim.endpoint()
        ))
        .header("Authorization", h.auth())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&bytes[..], b"second!");

    for _ in 0..2 {
        let del = h
            .delete(&format!(
                "/nodes/pve2/storage/proxy-seeds/content/{}",
                encode("proxy-seeds:iso/s.iso")
            ))
            .await
            .data();
        assert!(del.as_str().unwrap().contains(":imgdel:proxy-seeds:"));
        assert_eq!(h.wait_task(del.as_str().unwrap()).await, "OK");
    }
    let status = h.get("/nodes/pve2/storage/nope/status").await;
    assert_eq!(status.status, StatusCode::BAD_REQUEST);
    assert_eq!(status.json()["errors"]["storage"], "No such storage.");
    h.sim.shutdown().await;
}

/// facts §9: destroy refuses a running VM; with purge it frees the VM's disks but never
/// the ISO it had attached.
#[tokio::test]
async fn destroy_frees_disks_not_isos() {
    let h = start(fast_config()).await;
    let running = h.delete("/nodes/pve1/qemu/100?purge=1").await;
    assert_eq!(running.message(), "VM 100 is running - destroy failed\n");
    h.clone_template(176, "gone").await;
    let up = h
        .upload(
            "pve1",
            "proxy-seeds",
            "gone.iso",
            seed("gone", GOOD_USER_DATA),
        )
        .await
        .data();
    h.wait_task(up.as_str().unwrap()).await;
    h.put(
        "/nodes/pve1/qemu/176/config",
        &[("ide2", "proxy-seeds:iso/gone.iso,media=cdrom")],
    )
    .await
    .data();
    let upid = h
        .delete("/nodes/pve1/qemu/176?purge=1&destroy-unreferenced-disks=1")
        .await
        .data();
    assert!(upid.as_str().unwrap().contains(":qmdestroy:176:"));
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    let state = h.admin.state().await;
    assert!(state.vms.iter().all(|v| v.vmid != 176));
    let volumes = &state.volumes;
    assert!(volumes.iter().all(|v| v.volid != "vmdata:vm-176-disk-0"));
    assert!(
        volumes
            .iter()
            .any(|v| v.volid == "proxy-seeds:iso/gone.iso")
    );
    h.sim.shutdown().await;
}

/// facts §4: task status/log shapes; unparsable and unknown UPIDs are 400s.
#[tokio::test]
async fn task_status_and_log() {
    let h = start(fast_config()).await;
    let upid = h.post("/nodes/pve1/qemu/100/status/stop", &[]).await.data();
    let upid = upid.as_str().unwrap();
    h.wait_task(upid).await;
    let status = h
        .get(&format!("/nodes/pve1/tasks/{}/status", encode(upid)))
        .await
        .data();
    assert_eq!(status["type"], "qmstop");
    assert_eq!(status["id"], "100");
    assert_eq!(status["user"], "terraform@pve");
    assert_eq!(status["tokenid"], "provider");
    assert!(status["pid"].is_u64());
    let log = h
        .get(&format!("/nodes/pve1/tasks/{}/log", encode(upid)))
        .await
        .json();
    assert_eq!(
        log["data"].as_array().unwrap().last().unwrap()["t"],
        "TASK OK"
    );
    assert_eq!(log["total"], json!(log["data"].as_array().unwrap().len()));
    let garbage = h.get("/nodes/pve1/tasks/UPID%3Ajunk/status").await;
    assert_eq!(
        garbage.json()["errors"]["upid"],
        "unable to parse worker upid"
    );
    let other_node = h
        .get(&format!("/nodes/pve2/tasks/{}/status", encode(upid)))
        .await;
    assert_eq!(other_node.status, StatusCode::BAD_REQUEST);
    h.sim.shutdown().await;
}

/// facts §13: `/cluster/resources` shows a fresh VM with status "unknown" and no name
/// until the stats cycle has seen it; lock and tags come straight from the config.
#[tokio::test]
async fn cluster_resources_lag_for_fresh_clones() {
    let mut config = fast_config();
    config.timings.cluster_resources_lag_ms = 400;
    let h = start(config).await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "177"), ("name", "lag"), ("full", "1")],
        )
        .await
        .data();
    // Listed as soon as the worker has written the temporary config.
    let rows = h
        .poll_until("/cluster/resources?type=vm", |a| {
            a.data()
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["vmid"] == 177)
        })
        .await
        .data();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["vmid"] == 177)
        .unwrap()
        .clone();
    assert_eq!(row["status"], "unknown");
    assert!(row.get("name").is_none());
    assert_eq!(row["id"], "qemu/177");
    h.wait_task(upid.as_str().unwrap()).await;
    h.poll_until("/cluster/resources?type=vm", |a| {
        a.data()
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["vmid"] == 177 && r["name"] == "lag" && r["status"] == "stopped")
    })
    .await;
    h.sim.shutdown().await;
}

/// facts §2: a token lacking a privilege gets "Permission check failed (<path>, <priv>)".
#[tokio::test]
async fn missing_privilege_is_403_naming_path_and_privilege() {
    let mut config = fast_config();
    config
        .privileges
        .insert("/".into(), vec!["VM.Audit".into(), "Sys.Audit".into()]);
    let h = start(config).await;
    let answer = h.post("/nodes/pve1/qemu/100/status/stop", &[]).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(
        answer.message(),
        "Permission check failed (/vms/100, VM.PowerMgmt)\n"
    );
    let perms = h.get("/access/permissions").await.data();
    assert_eq!(perms["/"]["VM.Audit"], json!(1));
    h.sim.shutdown().await;
}

/// facts §2 (595) + fault injection: offline node, 5xx count, connection reset, task
/// failure, held lock, revoked token.
#[tokio::test]
async fn faults_are_injected_and_cleared() {
    let h = start(fast_config()).await;
    h.admin
        .set_faults(&faults(json!({
            "http": [
                {"method": "GET", "path_regex": "^/cluster/resources", "status": 503, "count": 1},
                {"path_regex": "^/nodes/pve1/qemu/102", "reset": true}
            ],
            "task_failures": [{"task_type": "qmstop", "nth": 1, "exitstatus": "stuck"}],
            "held_locks": [{"vmid": 101, "lock": "backup", "seconds": 60}],
            "offline_nodes": ["pve3"]
        })))
        .await;
    assert_eq!(h.get("/cluster/resources").await.status.as_u16(), 503);
    assert_eq!(h.get("/cluster/resources").await.status, StatusCode::OK);
    let reset = h
        .client
        .get(h.url("/nodes/pve1/qemu/102/config"))
        .header("Authorization", h.auth())
        .send()
        .await;
    assert!(reset.is_err(), "connection should be dropped");
    let offline = h.get("/nodes/pve3/qemu").await;
    assert_eq!(offline.status.as_u16(), 595);
    assert_eq!(offline.body, "");
    let stop = h.post("/nodes/pve1/qemu/100/status/stop", &[]).await.data();
    assert_eq!(h.wait_task(stop.as_str().unwrap()).await, "stuck");
    let locked = h
        .put("/nodes/pve2/qemu/101/config", &[("cores", "4")])
        .await;
    assert_eq!(locked.message(), "VM is locked (backup)\n");

    h.admin
        .set_faults(&faults(json!({"token_revoked": true})))
        .await;
    assert_eq!(h.get("/version").await.status, StatusCode::UNAUTHORIZED);
    h.admin.clear_faults().await;
    assert_eq!(h.get("/version").await.status, StatusCode::OK);
    let journal = h.admin.journal().await;
    assert!(journal.iter().any(|e| e.status == 595));
    h.sim.shutdown().await;
}

/// facts §13: nodes, node status and storage listing shapes.
#[tokio::test]
async fn nodes_and_storage_listing() {
    let h = start(fast_config()).await;
    let nodes = h.get("/nodes").await.data();
    assert_eq!(nodes.as_array().unwrap().len(), 3);
    assert!(
        nodes
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["status"] == "online")
    );
    let status = h.get("/nodes/pve2/status").await.data();
    assert!(
        status["pveversion"]
            .as_str()
            .unwrap()
            .starts_with("pve-manager/9.2")
    );
    let storages = h.get("/nodes/pve1/storage?content=iso").await.data();
    let seeds = storages
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["storage"] == "proxy-seeds")
        .unwrap();
    assert_eq!(seeds["active"], json!(1));
    assert_eq!(seeds["content"], "iso");
    assert!(
        storages
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["storage"] != "vmdata")
    );
    let network = h.get("/nodes/pve1/network").await.data();
    assert_eq!(network[0]["iface"], "vmbr0");
    h.sim.shutdown().await;
}

/// facts §5 locks: a stopped template is locked shared, so parallel clones both succeed;
/// a running source is locked exclusively, so a second clone waiting more than 1 s fails
/// with PVE's lock timeout.
#[tokio::test]
async fn clone_locks_shared_for_templates_exclusive_for_running_sources() {
    let mut config = fast_config();
    config.timings.task_ms.insert("qmclone".into(), 1500);
    let h = start(config).await;
    let a = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "180"), ("full", "1")],
        )
        .await
        .data();
    let b = h
        .post(
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", "181"), ("full", "1")],
        )
        .await
        .data();
    let c = h
        .post("/nodes/pve1/qemu/100/clone", &[("newid", "182")])
        .await
        .data();
    let d = h
        .post("/nodes/pve1/qemu/100/clone", &[("newid", "183")])
        .await
        .data();
    assert_eq!(h.wait_task(a.as_str().unwrap()).await, "OK");
    assert_eq!(h.wait_task(b.as_str().unwrap()).await, "OK");
    assert_eq!(h.wait_task(c.as_str().unwrap()).await, "OK");
    assert_eq!(
        h.wait_task(d.as_str().unwrap()).await,
        "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"
    );
    h.sim.shutdown().await;
}

/// facts §8: a paused VM is `running`/`paused`; shutdown refuses it; resume brings it back.
#[tokio::test]
async fn paused_vm_refuses_shutdown() {
    let h = start(fast_config()).await;
    let suspend = h
        .post("/nodes/pve1/qemu/100/status/suspend", &[])
        .await
        .data();
    assert_eq!(h.wait_task(suspend.as_str().unwrap()).await, "OK");
    let status = h.get("/nodes/pve1/qemu/100/status/current").await.data();
    assert_eq!(status["status"], "running");
    assert_eq!(status["qmpstatus"], "paused");
    let shutdown = h.post("/nodes/pve1/qemu/100/status/shutdown", &[]).await;
    assert_eq!(shutdown.message(), "VM is paused - cannot shutdown\n");
    let resume = h
        .post("/nodes/pve1/qemu/100/status/resume", &[])
        .await
        .data();
    assert_eq!(h.wait_task(resume.as_str().unwrap()).await, "OK");
    assert_eq!(
        h.get("/nodes/pve1/qemu/100/status/current").await.data()["qmpstatus"],
        "running"
    );
    h.sim.shutdown().await;
}

/// facts §1: JSON bodies are accepted (with JSON booleans), query parameters override the
/// body, and form booleans must be 0/1.
#[tokio::test]
async fn json_bodies_and_query_override() {
    let h = start(fast_config()).await;
    h.clone_template(184, "json").await;
    let response = h
        .client
        .put(h.url("/nodes/pve1/qemu/184/config?cores=4"))
        .header("Authorization", h.auth())
        .json(&json!({"cores": 2, "onboot": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let config = h.get("/nodes/pve1/qemu/184/config").await.data();
    assert_eq!(config["cores"], json!(4));
    assert_eq!(config["onboot"], json!(1));
    let form_true = h
        .put("/nodes/pve1/qemu/184/config", &[("onboot", "true")])
        .await;
    assert_eq!(form_true.status, StatusCode::BAD_REQUEST);
    h.sim.shutdown().await;
}

/// Journal (admin API): every request with its status, secrets redacted.
#[tokio::test]
async fn journal_records_requests_with_secrets_redacted() {
    let h = start(fast_config()).await;
    h.clone_template(185, "jr").await;
    h.put(
        "/nodes/pve1/qemu/185/config",
        &[("cipassword", "hunter2"), ("ciuser", "ops")],
    )
    .await;
    let journal = h.admin.journal().await;
    let text = serde_json::to_string(&journal).unwrap();
    assert!(!text.contains("hunter2"), "secret leaked into the journal");
    assert!(!text.contains(h.sim.token().split_once('=').unwrap().1));
    let entry = journal
        .iter()
        .find(|e| e.method == "PUT" && e.path == "/nodes/pve1/qemu/185/config")
        .unwrap();
    assert_eq!(entry.params["cipassword"], "<redacted>");
    assert_eq!(entry.params["ciuser"], "ops");
    assert_eq!(entry.status, 200);
    assert!(!format!("{:?}", h.sim).contains(h.sim.token()));
    h.sim.shutdown().await;
}

/// Journal and task times (admin API): a request's arrival and answer, a task's start and
/// end, on one clock, so a benchmark can tell how late a client saw a task end. A config
/// write PVE's worker waits for (`background_delay`) is answered after its task ended.
#[tokio::test]
async fn journal_and_tasks_carry_their_times() {
    let mut config = fast_config();
    config.timings.task_ms.insert("qmconfig".into(), 200);
    let h = start(config).await;
    h.clone_template(186, "times").await;
    let answer = h
        .post(
            "/nodes/pve1/qemu/186/config",
            &[("cores", "2"), ("background_delay", "5")],
        )
        .await;
    assert_eq!(answer.data(), json!(null));
    let journal = h.admin.journal().await;
    let post = journal
        .iter()
        .find(|e| e.method == "POST" && e.path == "/nodes/pve1/qemu/186/config")
        .unwrap();
    let tasks = h.admin.tasks().await;
    let task = tasks
        .iter()
        .find(|t| t.task_type == "qmconfig" && t.id == "186")
        .unwrap();
    let ended = task.ended_ms.expect("the task ended");
    assert_eq!(task.exitstatus.as_deref(), Some("OK"));
    assert!(ended >= task.started_ms + 200, "{task:?}");
    assert!(post.received_ms <= task.started_ms, "{post:?} {task:?}");
    assert!(ended <= post.answered_ms, "{post:?} {task:?}");
    assert!(
        journal
            .windows(2)
            .all(|w| w[0].answered_ms <= w[1].answered_ms),
        "the journal is in answer order"
    );
    h.sim.shutdown().await;
}

/// facts §8 (start): a volume attached by a config write but deleted since makes the start
/// task fail (QEMU opens every drive). The config write itself checks existence: see
/// `pve_fidelity.rs`.
#[tokio::test]
async fn start_fails_on_a_missing_seed_volume() {
    let h = start(fast_config()).await;
    h.clone_template(186, "noseed").await;
    let upid = h
        .upload(
            "pve1",
            "proxy-seeds",
            "gone.iso",
            seed("noseed", GOOD_USER_DATA),
        )
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    h.put(
        "/nodes/pve1/qemu/186/config",
        &[("ide2", "proxy-seeds:iso/gone.iso,media=cdrom")],
    )
    .await
    .data();
    let upid = h
        .delete("/nodes/pve1/storage/proxy-seeds/content/iso/gone.iso")
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    let upid = h
        .post("/nodes/pve1/qemu/186/status/start", &[])
        .await
        .data();
    assert_eq!(
        h.wait_task(upid.as_str().unwrap()).await,
        "volume 'proxy-seeds:iso/gone.iso' does not exist"
    );
    h.sim.shutdown().await;
}

/// Admin API: needs the token; faults and timings round-trip.
#[tokio::test]
async fn admin_api_requires_the_token_and_round_trips() {
    let h = start(fast_config()).await;
    let anonymous = h
        .client
        .get(format!("{}/_sim/state", h.sim.endpoint()))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let faults = faults(json!({"latency_ms": 3, "offline_nodes": ["pve2"]}));
    h.admin.set_faults(&faults).await;
    let back = h.admin.faults().await;
    assert_eq!(back.latency_ms, 3);
    assert_eq!(back.offline_nodes, ["pve2"]);
    let state = h.admin.state().await;
    let pve2 = state.nodes.iter().find(|n| n.name == "pve2").unwrap();
    assert!(!pve2.online);
    let mut timings = h.admin.timings().await;
    timings.task_ms.insert("qmstart".into(), 7);
    h.admin.set_timings(&timings).await;
    assert_eq!(h.admin.timings().await.task_ms["qmstart"], 7);
    h.sim.shutdown().await;
}

/// facts §4 table: POST config with `background_delay` answers `null` when the task
/// finished OK in time, and the task list shows the finished `qmconfig` task.
#[tokio::test]
async fn background_delay_waits_for_the_config_task() {
    let h = start(fast_config()).await;
    h.clone_template(187, "bg").await;
    let answer = h
        .post(
            "/nodes/pve1/qemu/187/config",
            &[("cores", "2"), ("background_delay", "5")],
        )
        .await;
    assert_eq!(answer.data(), json!(null));
    assert_eq!(
        h.get("/nodes/pve1/qemu/187/config").await.data()["cores"],
        json!(2)
    );
    let tasks = h
        .get("/nodes/pve1/tasks?vmid=187&typefilter=qmconfig")
        .await
        .data();
    assert_eq!(tasks[0]["status"], "OK");
    assert_eq!(tasks[0]["type"], "qmconfig");
    h.sim.shutdown().await;
}

/// pve-storage `API2/Storage/Content.pm` `delete`: with `delay` the worker waits for the
/// `imgdel` task and answers `null` when it ended OK; a task that failed within the delay is
/// the handler's `die "$status\n"`, a 500 carrying the task's exit status.
#[tokio::test]
async fn delete_with_delay_waits_for_the_imgdel_task() {
    let h = start(fast_config()).await;
    for name in ["kept.iso", "failing.iso"] {
        let upid = h
            .upload("pve1", "proxy-seeds", name, b"iso".to_vec())
            .await
            .data();
        assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    }
    let path = |name: &str| {
        format!("/nodes/pve1/storage/proxy-seeds/content/proxy-seeds:iso/{name}?delay=5")
    };
    assert_eq!(h.delete(&path("kept.iso")).await.data(), json!(null));
    let state = h.admin.state().await;
    assert!(state.volumes.iter().all(|v| !v.volid.ends_with("kept.iso")));
    h.admin
        .set_faults(&faults(json!({
            "task_failures": [{"task_type": "imgdel", "nth": 1, "exitstatus": "storage gone"}]
        })))
        .await;
    let failed = h.delete(&path("failing.iso")).await;
    assert_eq!(failed.status.as_u16(), 500);
    assert_eq!(failed.message(), "storage gone\n");
    h.sim.shutdown().await;
}

/// facts §8/§9: hibernation stops the VM with `lock: suspended` and a `vmstate`; destroy
/// accepts a hibernated VM (the `suspended` lock is exempt) and frees the state volume.
#[tokio::test]
async fn hibernated_vm_can_be_destroyed() {
    let h = start(fast_config()).await;
    h.clone_template(188, "hib").await;
    let start_upid = h
        .post("/nodes/pve1/qemu/188/status/start", &[])
        .await
        .data();
    h.wait_task(start_upid.as_str().unwrap()).await;
    let hibernate = h
        .post("/nodes/pve1/qemu/188/status/suspend", &[("todisk", "1")])
        .await
        .data();
    assert_eq!(h.wait_task(hibernate.as_str().unwrap()).await, "OK");
    let status = h.get("/nodes/pve1/qemu/188/status/current").await.data();
    assert_eq!(status["status"], "stopped");
    assert_eq!(status["lock"], "suspended");
    let destroy = h.delete("/nodes/pve1/qemu/188?purge=1").await.data();
    assert_eq!(h.wait_task(destroy.as_str().unwrap()).await, "OK");
    let state = h.admin.state().await;
    assert!(state.volumes.iter().all(|v| !v.volid.contains("vm-188-")));
    h.sim.shutdown().await;
}

/// The README's example config parses and starts (as `--config` would load it).
#[tokio::test]
async fn example_config_file_starts() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/config.json"))
            .unwrap();
    let config: pvesim::SimConfig = serde_json::from_str(&text).unwrap();
    assert_eq!(config.token_id, "ci@pve!sim");
    let mut config = config;
    config.faults = pvesim::Faults::default();
    config.timings.auth_fail_delay_ms = 0;
    let h = start(config).await;
    assert!(h.sim.token().starts_with("ci@pve!sim=7e0a6c1e"));
    let nodes = h.get("/nodes").await.data();
    assert_eq!(nodes.as_array().unwrap().len(), 2);
    let bogus: Result<pvesim::SimConfig, _> = serde_json::from_str(r#"{"nodez": []}"#);
    assert!(bogus.is_err(), "unknown fields are rejected");
    h.sim.shutdown().await;
}

/// pve-common `PVE/Network.pm` `read_bridge_mtu`, called for every virtio NIC by qemu-server
/// `print_netdev_full` while `vm_start` builds QEMU's command line: a NIC naming a bridge the
/// node does not have fails the `qmstart` task with "bridge '<bridge>' does not exist"
/// (`die "bridge '$bridge' does not exist\n" if !$mtu;`), and the VM stays stopped. The config
/// write itself does not check the bridge.
#[tokio::test]
async fn start_fails_on_a_nic_whose_bridge_the_node_lacks() {
    let h = start(fast_config()).await;
    h.clone_template(188, "nobridge").await;
    h.put(
        "/nodes/pve1/qemu/188/config",
        &[
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
            ("net1", "virtio=BC:24:11:00:00:02,bridge=vmbr9"),
        ],
    )
    .await
    .data();
    let upid = h
        .post("/nodes/pve1/qemu/188/status/start", &[])
        .await
        .data();
    assert_eq!(
        h.wait_task(upid.as_str().unwrap()).await,
        "bridge 'vmbr9' does not exist"
    );
    let status = h.get("/nodes/pve1/qemu/188/status/current").await.data();
    assert_eq!(status["status"], "stopped");
    // On its own bridge the same VM starts.
    h.put(
        "/nodes/pve1/qemu/188/config",
        &[("net1", "virtio=BC:24:11:00:00:02,bridge=vmbr0")],
    )
    .await
    .data();
    let upid = h
        .post("/nodes/pve1/qemu/188/status/start", &[])
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    h.sim.shutdown().await;
}

/// pve-manager `PVE/API2/Tasks.pm` `node_tasks`: `source=active` reads the active file,
/// whose tasks carry `RUNNING` (`$task->{status} = 'RUNNING' if !$task->{status}`); an ended
/// task is not there, as pve-common's `RESTEnvironment::active_workers` moves each task to
/// the index (`/var/log/pve/tasks/index`, `upid endtime status`) when it ends. `archive`
/// (the default) reads the index backwards, newest end first; `all` lists the active ones,
/// then the archived; `since`/`until` compare the start time (`$task->{starttime} < $since`).
#[tokio::test]
async fn task_listing_sources_and_start_bounds() {
    let mut config = fast_config();
    config.timings.task_ms.insert("qmstart".into(), 600_000);
    let h = start(config).await;
    h.clone_template(151, "ended-first").await;
    h.clone_template(152, "ended-last").await;
    let running = h
        .post("/nodes/pve1/qemu/151/status/start", &[])
        .await
        .data();
    let running = running.as_str().unwrap().to_owned();
    let list = |query: &'static str| {
        let h = &h;
        async move {
            let rows = h.get(&format!("/nodes/pve1/tasks?{query}")).await.data();
            rows.as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["type"].as_str().unwrap().to_owned(),
                        r["id"].as_str().unwrap().to_owned(),
                        r["status"].as_str().map(str::to_owned),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let run = (
        "qmstart".to_owned(),
        "151".to_owned(),
        Some("RUNNING".to_owned()),
    );
    let clone_of = |status: &str| {
        (
            "qmclone".to_owned(),
            "9000".to_owned(),
            Some(status.to_owned()),
        )
    };
    assert_eq!(list("source=active").await, std::slice::from_ref(&run));
    let all = list("source=all").await;
    assert_eq!(all, [run.clone(), clone_of("OK"), clone_of("OK")]);
    let archive = list("").await;
    assert_eq!(archive, [clone_of("OK"), clone_of("OK")]);

    let rows = h.get("/nodes/pve1/tasks?source=all").await.data();
    let started = rows[0]["starttime"].as_i64().unwrap();
    assert_eq!(rows[0]["upid"], running.as_str());
    assert!(rows[0].get("endtime").is_none());
    assert!(rows[1]["endtime"].as_i64().unwrap() >= rows[2]["endtime"].as_i64().unwrap());
    let bounded = h
        .get(&format!(
            "/nodes/pve1/tasks?source=all&since={}",
            started + 1
        ))
        .await
        .data();
    assert_eq!(bounded, json!([]), "every task started before `since`");
    let bounded = h
        .get(&format!(
            "/nodes/pve1/tasks?source=all&since={started}&until={started}"
        ))
        .await
        .data();
    assert_eq!(bounded[0]["upid"], running.as_str());

    // Stopped, it leaves the active file for the index.
    let stop = h
        .delete(&format!("/nodes/pve1/tasks/{}", encode(&running)))
        .await;
    assert_eq!(stop.status, StatusCode::OK);
    h.wait_task(&running).await;
    assert_eq!(list("source=active").await, []);
    assert_eq!(list("source=all").await[0].0, "qmstart");
    assert_ne!(list("source=all").await[0].2.as_deref(), Some("RUNNING"));
    h.sim.shutdown().await;
}

/// pve-manager `PVE/API2/Tasks.pm` `node_tasks`, `$filter_task`: `userfilter` is a
/// case-insensitive part of the task's user (`m/\Q$userfilter\E/i`); `statusfilter` keeps the
/// classes it names, of pve-common `Tools.pm` `upid_normalize_status_type` (`OK` is `ok`,
/// `WARNINGS: n` `warning`, a running task with no status yet `unknown`, anything else
/// `error`); `errors=1` keeps every class but `ok`, running tasks included; `total` counts
/// every match, `start`/`limit` page them. An archived task's user is split by
/// `$convert_token_task`, an active one's is not: `user@realm!token`, no `tokenid`.
#[tokio::test]
async fn task_listing_filters_by_user_and_status_class() {
    let mut config = fast_config();
    config.timings.task_ms.insert("qmstart".into(), 600_000);
    let h = start(config).await;
    h.clone_template(151, "cloned").await;
    h.admin
        .set_faults(&faults(json!({
            "task_failures": [{"task_type": "qmstop", "nth": 1, "exitstatus": "stuck"}]
        })))
        .await;
    let stop = h.post("/nodes/pve1/qemu/100/status/stop", &[]).await.data();
    assert_eq!(h.wait_task(stop.as_str().unwrap()).await, "stuck");
    h.post("/nodes/pve1/qemu/151/status/start", &[])
        .await
        .data();
    let listed = |query: &'static str| {
        let h = &h;
        async move {
            let answer = h
                .get(&format!("/nodes/pve1/tasks?source=all&{query}"))
                .await;
            let body: Value = serde_json::from_str(&answer.body).unwrap();
            let types = body["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["type"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>();
            (types, body["total"].as_u64().unwrap())
        }
    };
    let every = (vec!["qmstart".into(), "qmstop".into(), "qmclone".into()], 3);
    assert_eq!(listed("").await, every);
    assert_eq!(listed("statusfilter=ok").await, (vec!["qmclone".into()], 1));
    assert_eq!(
        listed("statusfilter=error").await,
        (vec!["qmstop".into()], 1)
    );
    assert_eq!(
        listed("statusfilter=unknown").await,
        (vec!["qmstart".into()], 1)
    );
    assert_eq!(
        listed("statusfilter=OK,error").await,
        (vec!["qmstop".into(), "qmclone".into()], 2)
    );
    // `errors` wins over `statusfilter`, and a running task is not `ok`.
    assert_eq!(
        listed("errors=1&statusfilter=ok").await,
        (vec!["qmstart".into(), "qmstop".into()], 2)
    );
    assert_eq!(listed("limit=1&start=1").await, (vec!["qmstop".into()], 3));

    let rows = h.get("/nodes/pve1/tasks?source=all").await.data();
    let user = rows[1]["user"].as_str().unwrap().to_owned();
    let token = rows[1]["tokenid"].as_str().unwrap().to_owned();
    assert!(
        !user.contains('!'),
        "an archived task's user is split: {user}"
    );
    assert_eq!(rows[0]["user"], format!("{user}!{token}"));
    assert!(rows[0].get("tokenid").is_none(), "{}", rows[0]);
    assert_eq!(listed("userfilter=nobody@pve").await, (vec![], 0));
    let upper = user.to_uppercase();
    let by_user = h
        .get(&format!(
            "/nodes/pve1/tasks?source=all&userfilter={}",
            encode(&upper)
        ))
        .await
        .data();
    assert_eq!(by_user.as_array().unwrap().len(), 3, "case-insensitive");
    // Only the active task's user still holds the token's name.
    let by_token = h
        .get(&format!(
            "/nodes/pve1/tasks?source=all&userfilter={}",
            encode(&format!("!{token}"))
        ))
        .await
        .data();
    assert_eq!(by_token.as_array().unwrap().len(), 1);
    assert_eq!(by_token[0]["type"], "qmstart");
    h.sim.shutdown().await;
}
