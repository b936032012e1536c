//! A seed's life in the guest and the agent's file access, each test naming the source it
//! follows: qemu-server `src/PVE/API2/Qemu/Agent.pm` (file-read, file-write) and
//! `src/PVE/QemuServer/Agent.pm` (`assert_agent_available`, `check_agent_error`),
//! `src/PVE/QemuServer.pm` (`vmconfig_hotplug_pending`, `vmconfig_update_disk`), qemu's
//! `qga/commands-posix.c`, `qapi/qmp-dispatch.c` and `qga/main.c`, and cloud-init's
//! `cloudinit/cmd/main.py` (`status_wrapper`, `main_init`), `cloudinit/stages.py`
//! (`_restore_from_checked_cache`) and `tools/ds-identify`.

use std::collections::BTreeMap;

use crate::common::{self, Answer, GOOD_USER_DATA, Harness, encode, joliet_iso, start};
use pvesim::config::DEFAULT_PRIVILEGES;
use pvesim::testing::fast_config;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const NOCLOUD: &str = "DataSourceNoCloud [seed=/dev/sr0]";
const RESULT: &str = "/run/cloud-init/result.json";
const STATUS: &str = "/run/cloud-init/status.json";
const OUTPUT_LOG: &str = "/var/log/cloud-init-output.log";

/// A NoCloud seed with its own instance-id, hostname, user-data and optional vendor-data.
fn seed(instance_id: &str, hostname: &str, user_data: &str, vendor: Option<&str>) -> Vec<u8> {
    let meta = format!("instance-id: {instance_id}\nlocal-hostname: {hostname}\n");
    let mut files = vec![
        ("meta-data", meta.as_bytes()),
        ("user-data", user_data.as_bytes()),
    ];
    if let Some(vendor) = vendor {
        files.push(("vendor-data", vendor.as_bytes()));
    }
    joliet_iso("cidata", &files)
}

async fn upload(h: &Harness, name: &str, bytes: Vec<u8>) {
    let upid = h.upload("pve1", "proxy-seeds", name, bytes).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
}

async fn power(h: &Harness, vmid: u32, action: &str) {
    let path = format!("/nodes/pve1/qemu/{vmid}/status/{action}");
    let upid = h.post(&path, &[]).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
}

/// Clones VM `vmid` named `name`, attaches the uploaded ISO `iso` with the agent on, starts
/// it and waits for the agent.
async fn boot_seeded(h: &Harness, vmid: u32, name: &str, iso: &str) {
    h.clone_template(vmid, name).await;
    let ide2 = format!("proxy-seeds:iso/{iso},media=cdrom");
    let path = format!("/nodes/pve1/qemu/{vmid}/config");
    h.put(&path, &[("agent", "1"), ("ide2", &ide2)])
        .await
        .data();
    power(h, vmid, "start").await;
    wait_agent(h, vmid).await;
}

async fn wait_agent(h: &Harness, vmid: u32) {
    let path = format!("/nodes/pve1/qemu/{vmid}/agent/get-host-name");
    h.poll_until(&path, |a| a.status == StatusCode::OK).await;
}

async fn read(h: &Harness, vmid: u32, file: &str, extra: &str) -> Answer {
    let file = encode(file);
    h.get(&format!(
        "/nodes/pve1/qemu/{vmid}/agent/file-read?file={file}{extra}"
    ))
    .await
}

async fn write(h: &Harness, vmid: u32, form: &[(&str, &str)]) -> Answer {
    h.post(&format!("/nodes/pve1/qemu/{vmid}/agent/file-write"), form)
        .await
}

/// Polls file-read of `file` until it answers 200 (deadline 10 s); the file's content.
async fn read_when_there(h: &Harness, vmid: u32, file: &str) -> String {
    let path = format!(
        "/nodes/pve1/qemu/{vmid}/agent/file-read?file={}",
        encode(file)
    );
    let answer = h.poll_until(&path, |a| a.status == StatusCode::OK).await;
    answer.data()["content"].as_str().unwrap().to_string()
}

fn missing(file: &str) -> String {
    format!("Agent error: failed to open file '{file}' (mode: 'r'): No such file or directory\n")
}

async fn host_name(h: &Harness, vmid: u32) -> Value {
    let path = format!("/nodes/pve1/qemu/{vmid}/agent/get-host-name");
    h.get(&path).await.data()["result"]["host-name"].clone()
}

/// cloud-init `cmd/main.py` `status_wrapper`: `init-local` deletes result.json, and only
/// the end of `modules-final` writes it, `{"v1": {"datasource", "errors"}}` in
/// `atomic_helper.json_dumps`' layout; status.json shows the stage meanwhile. The agent
/// answers during `modules-final`, `cloud_init_ms` before the end. Agent.pm `file-read`
/// answers `{content, bytes-read}`; a missing file is qemu-ga's `guest-file-open` error
/// (`qga/commands-posix.c` `safe_open_or_create`) as `check_agent_error` dies with it.
#[tokio::test]
async fn result_json_appears_cloud_init_ms_after_the_agent_answers() {
    let mut config = fast_config();
    config.timings.cloud_init_ms = 600_000;
    let h = start(config).await;
    upload(&h, "a.iso", seed("iid-a", "edge-a", GOOD_USER_DATA, None)).await;
    boot_seeded(&h, 180, "edge-a", "a.iso").await;

    let early = read(&h, 180, RESULT, "").await;
    assert_eq!(early.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(early.message(), missing(RESULT));
    let status: Value = serde_json::from_str(&read_when_there(&h, 180, STATUS).await).unwrap();
    assert_eq!(status["v1"]["stage"], "modules-final");
    assert_eq!(status["v1"]["datasource"], NOCLOUD);
    assert_eq!(status["v1"]["modules-final"]["finished"], Value::Null);
    assert!(status["v1"]["init-local"]["finished"].is_f64());
    let guest = h.admin.guest(180).await.unwrap();
    assert_eq!(guest.cloud_init.as_deref(), Some("running"));

    // A reboot of the same instance with a short final stage: result.json comes back.
    h.admin.set_cloud_init_ms(20).await;
    power(&h, 180, "stop").await;
    assert_eq!(h.admin.guest(180).await.unwrap().cloud_init, None);
    power(&h, 180, "start").await;
    wait_agent(&h, 180).await;
    let path = format!(
        "/nodes/pve1/qemu/180/agent/file-read?file={}",
        encode(RESULT)
    );
    let answer = h.poll_until(&path, |a| a.status == StatusCode::OK).await;
    let expected =
        format!("{{\n \"v1\": {{\n  \"datasource\": \"{NOCLOUD}\",\n  \"errors\": []\n }}\n}}\n");
    assert_eq!(
        answer.data(),
        json!({"content": expected, "bytes-read": expected.len()})
    );
    let status: Value = serde_json::from_str(&read_when_there(&h, 180, STATUS).await).unwrap();
    assert_eq!(status["v1"]["stage"], Value::Null);
    assert!(status["v1"]["modules-final"]["finished"].is_f64());
    let log = read_when_there(&h, 180, OUTPUT_LOG).await;
    assert!(log.contains("running 'modules:final' at "), "{log}");
    assert!(
        log.contains(&format!("Datasource {NOCLOUD}.  Up ")),
        "{log}"
    );
    assert_eq!(
        h.admin.guest(180).await.unwrap().cloud_init.as_deref(),
        Some("done")
    );
    h.sim.shutdown().await;
}

/// Agent.pm `file-read` (`count`, `offset` by `guest-file-seek`, `decode`, `truncated`
/// when the read did not reach the end) and `file-write` (`encode`, mode `wb`; with
/// `encode=0` the content goes to qemu-ga as base64, which `util/base64.c`
/// `qbase64_decode` checks; qemu-ga creates no directories).
#[tokio::test]
async fn file_read_and_write_follow_agent_pm() {
    let h = start(fast_config()).await;
    upload(&h, "b.iso", seed("iid-b", "edge-b", GOOD_USER_DATA, None)).await;
    boot_seeded(&h, 181, "edge-b", "b.iso").await;

    let wrote = write(
        &h,
        181,
        &[("file", "/tmp/hello"), ("content", "hello world")],
    )
    .await;
    assert_eq!(wrote.json(), json!({"data": null}));
    let whole = read(&h, 181, "/tmp/hello", "").await.data();
    assert_eq!(whole, json!({"content": "hello world", "bytes-read": 11}));
    let head = read(&h, 181, "/tmp/hello", "&count=5").await.data();
    assert_eq!(
        head,
        json!({"content": "hello", "bytes-read": 5, "truncated": 1})
    );
    let tail = read(&h, 181, "/tmp/hello", "&offset=6").await.data();
    assert_eq!(tail, json!({"content": "world", "bytes-read": 5}));
    let raw = read(&h, 181, "/tmp/hello", "&decode=0").await.data();
    assert_eq!(raw["content"], "aGVsbG8gd29ybGQ=");

    let encoded = write(
        &h,
        181,
        &[("file", "/root/hi"), ("content", "aGk="), ("encode", "0")],
    )
    .await;
    assert_eq!(encoded.status, StatusCode::OK);
    assert_eq!(read(&h, 181, "/root/hi", "").await.data()["content"], "hi");
    let bad = write(
        &h,
        181,
        &[
            ("file", "/root/hi"),
            ("content", "not base64!"),
            ("encode", "0"),
        ],
    )
    .await;
    assert_eq!(
        bad.message(),
        "Agent error: Base64 data contains invalid characters\n"
    );
    // Opened with `wb` before the write failed: the file is empty now.
    assert_eq!(read(&h, 181, "/root/hi", "").await.data()["content"], "");
    let no_dir = write(&h, 181, &[("file", "/nowhere/x"), ("content", "x")]).await;
    assert_eq!(
        no_dir.message(),
        "Agent error: failed to open file '/nowhere/x' (mode: 'wb'): No such file or directory\n"
    );
    assert_eq!(
        read(&h, 181, "/nowhere/x", "").await.message(),
        missing("/nowhere/x")
    );
    let guest = h.admin.guest(181).await.unwrap();
    assert_eq!(guest.files, ["/root/hi", "/tmp/hello"]);
    h.sim.shutdown().await;
}

/// Agent.pm: `file-read` needs `VM.GuestAgent.FileRead` or `VM.GuestAgent.Unrestricted`,
/// `file-write` `VM.GuestAgent.FileWrite` or `VM.GuestAgent.Unrestricted` (any of them,
/// on `/vms/{vmid}`), checked before the config is loaded.
#[tokio::test]
async fn file_access_needs_pves_privileges() {
    let file_privileges = [
        "VM.GuestAgent.FileRead",
        "VM.GuestAgent.FileWrite",
        "VM.GuestAgent.Unrestricted",
    ];
    let mut config = fast_config();
    let root: Vec<String> = DEFAULT_PRIVILEGES
        .iter()
        .filter(|p| !file_privileges.contains(p))
        .map(|p| p.to_string())
        .collect();
    config.privileges = BTreeMap::from([
        ("/".to_string(), root),
        (
            "/vms/183".to_string(),
            vec!["VM.GuestAgent.FileRead".into()],
        ),
    ]);
    let h = start(config).await;
    let denied = read(&h, 182, RESULT, "").await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
    assert_eq!(
        denied.message(),
        "Permission check failed (/vms/182, VM.GuestAgent.FileRead|VM.GuestAgent.Unrestricted)\n"
    );
    let allowed = read(&h, 183, RESULT, "").await;
    assert_eq!(
        allowed.message(),
        "Configuration file 'nodes/pve1/qemu-server/183.conf' does not exist\n"
    );
    let no_write = write(&h, 183, &[("file", "/tmp/x"), ("content", "x")]).await;
    assert_eq!(no_write.status, StatusCode::FORBIDDEN);
    assert_eq!(
        no_write.message(),
        "Permission check failed (/vms/183, VM.GuestAgent.FileWrite|VM.GuestAgent.Unrestricted)\n"
    );
    h.sim.shutdown().await;
}

/// QemuServer/Agent.pm `agent_cmd` → `assert_agent_available`: no `agent` key, VM not
/// running, agent silent (`qga_check_running`), in that order, after `load_config`.
#[tokio::test]
async fn file_read_reports_an_unavailable_agent_as_pve_does() {
    let h = start(fast_config()).await;
    h.clone_template(184, "plain").await;
    let no_agent = read(&h, 184, RESULT, "").await;
    assert_eq!(no_agent.message(), "No QEMU guest agent configured\n");
    h.put("/nodes/pve1/qemu/184/config", &[("agent", "1")])
        .await
        .data();
    assert_eq!(
        read(&h, 184, RESULT, "").await.message(),
        "VM 184 is not running\n"
    );
    power(&h, 184, "start").await;
    // No seed ever installed an agent: it stays silent however long it runs.
    h.poll_until("/nodes/pve1/qemu/184/status/current", |a| {
        a.data()["uptime"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    let silent = read(&h, 184, RESULT, "").await;
    assert_eq!(silent.message(), "QEMU guest agent is not running\n");
    let index = h.get("/nodes/pve1/qemu/184/agent").await.data();
    let names: Vec<&str> = index
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"file-read") && names.contains(&"file-write"));
    assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted: {names:?}");
    h.sim.shutdown().await;
}

/// qemu `qapi/qmp-dispatch.c` `qmp_dispatch` refuses a command qemu-ga's block/allow list
/// disabled ("Command %s has been disabled%s%s", the reason from `qga/main.c`
/// `ga_apply_command_filters_iter`); Agent.pm's `check_agent_error` makes it
/// `Agent error: ...`, while the generic commands return qemu-ga's error as their result.
#[tokio::test]
async fn a_blocklisting_agent_refuses_file_reads() {
    let mut config = fast_config();
    config.faults = common::faults(json!({"agent_blocked_commands": [
        {"vm_name_regex": "^locked-", "commands": ["guest-file-open", "guest-get-osinfo"]}
    ]}));
    let h = start(config).await;
    upload(&h, "c.iso", seed("iid-c", "locked-c", GOOD_USER_DATA, None)).await;
    boot_seeded(&h, 185, "locked-c", "c.iso").await;
    upload(&h, "d.iso", seed("iid-d", "open-d", GOOD_USER_DATA, None)).await;
    boot_seeded(&h, 186, "open-d", "d.iso").await;

    let refused = read(&h, 185, OUTPUT_LOG, "").await;
    assert_eq!(refused.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        refused.message(),
        "Agent error: Command guest-file-open has been disabled: the command is not allowed\n"
    );
    let write_refused = write(&h, 185, &[("file", "/tmp/x"), ("content", "x")]).await;
    assert_eq!(write_refused.message(), refused.message());
    let osinfo = h.get("/nodes/pve1/qemu/185/agent/get-osinfo").await.data();
    assert_eq!(osinfo["result"]["error"]["class"], "CommandNotFound");
    let info = h.get("/nodes/pve1/qemu/185/agent/info").await.data();
    let open = info["result"]["supported_commands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "guest-file-open")
        .cloned()
        .unwrap();
    assert_eq!(open["enabled"], false);
    assert!(
        read_when_there(&h, 186, OUTPUT_LOG)
            .await
            .contains("Cloud-init v. ")
    );
    h.sim.shutdown().await;
}

/// cloud-init `cmd/main.py` `status_wrapper`: `modules-final` errors go to result.json's
/// `v1.errors`; recoverable errors (WARNING log records) only to status.json's
/// `recoverable_errors`, which `cmd/status.py` reports as `degraded`. Errors come from the
/// per-instance stage, so a reboot of the same instance ends without them.
#[tokio::test]
async fn cloud_init_errors_on_demand() {
    let failure = "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 \
        attempted commands'))";
    let mut config = fast_config();
    config.timings.cloud_init_ms = 20;
    config.faults = common::faults(json!({"cloud_init_errors": [
        {"vm_name_regex": "^broken-", "errors": [failure]},
        {"vm_name_regex": "^shaky-", "recoverable_errors": ["Could not set hostname"]},
    ]}));
    let h = start(config).await;
    upload(&h, "e.iso", seed("iid-e", "broken-e", GOOD_USER_DATA, None)).await;
    boot_seeded(&h, 187, "broken-e", "e.iso").await;
    upload(&h, "f.iso", seed("iid-f", "shaky-f", GOOD_USER_DATA, None)).await;
    boot_seeded(&h, 188, "shaky-f", "f.iso").await;

    let result: Value = serde_json::from_str(&read_when_there(&h, 187, RESULT).await).unwrap();
    assert_eq!(
        result,
        json!({"v1": {"datasource": NOCLOUD, "errors": [failure]}})
    );
    // `status_wrapper` writes status.json (the stage's `errors`, `finished`) just before
    // result.json, whose `v1.errors` joins every stage's: one read of status.json tells both.
    let status: Value = serde_json::from_str(&read_when_there(&h, 187, STATUS).await).unwrap();
    assert_eq!(status["v1"]["modules-final"]["errors"], json!([failure]));
    assert!(status["v1"]["modules-final"]["finished"].is_f64());
    assert_eq!(status["v1"]["stage"], Value::Null);
    let log = read_when_there(&h, 187, OUTPUT_LOG).await;
    assert!(log.contains(&format!("[WARNING]: {failure}\n")), "{log}");
    assert_eq!(
        h.admin.guest(187).await.unwrap().cloud_init.as_deref(),
        Some("error")
    );

    let result: Value = serde_json::from_str(&read_when_there(&h, 188, RESULT).await).unwrap();
    assert_eq!(result["v1"]["errors"], json!([]));
    let status: Value = serde_json::from_str(&read_when_there(&h, 188, STATUS).await).unwrap();
    assert_eq!(
        status["v1"]["modules-final"]["recoverable_errors"],
        json!({"WARNING": ["Could not set hostname"]})
    );
    assert_eq!(
        h.admin.guest(188).await.unwrap().cloud_init.as_deref(),
        Some("degraded")
    );

    power(&h, 187, "stop").await;
    power(&h, 187, "start").await;
    wait_agent(&h, 187).await;
    let again: Value = serde_json::from_str(&read_when_there(&h, 187, RESULT).await).unwrap();
    assert_eq!(again["v1"]["errors"], json!([]));
    // The output log keeps the first boot's lines.
    assert!(read_when_there(&h, 187, OUTPUT_LOG).await.contains(failure));
    h.sim.shutdown().await;
}

/// cloud-init `stages.py` `_restore_from_checked_cache` (NoCloud's `check_instance_id`
/// reads no cdrom, so the seed is read again) and `main.py` `main_init`: per-instance
/// modules (the agent's install, the hostname) run only for a new instance-id, so a seed
/// changed under the same instance-id does nothing; a new instance-id is a new instance,
/// and what the first one installed stays installed.
#[tokio::test]
async fn a_seed_counts_only_at_the_first_boot_of_its_instance_id() {
    let h = start(fast_config()).await;
    let first = seed("iid-g", "first", GOOD_USER_DATA, None);
    let sha256: String = Sha256::digest(&first)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    upload(&h, "g.iso", first).await;
    boot_seeded(&h, 189, "edge-g", "g.iso").await;
    let guest = h.admin.guest(189).await.unwrap();
    let seed_g = guest.first_seed.clone().expect("a first seed");
    assert_eq!(
        (
            seed_g.volid.as_str(),
            seed_g.instance_id.as_str(),
            seed_g.node.as_str()
        ),
        ("proxy-seeds:iso/g.iso", "iid-g", "pve1")
    );
    assert_eq!(seed_g.sha256, sha256);
    assert!(guest.agent_installed);
    assert_eq!(host_name(&h, 189).await, "first");

    let quiet = "#cloud-config\nhostname: changed\n";
    upload(&h, "g2.iso", seed("iid-g", "changed", quiet, None)).await;
    power(&h, 189, "stop").await;
    let path = "/nodes/pve1/qemu/189/config";
    h.put(path, &[("ide2", "proxy-seeds:iso/g2.iso,media=cdrom")])
        .await
        .data();
    power(&h, 189, "start").await;
    wait_agent(&h, 189).await;
    assert_eq!(host_name(&h, 189).await, "first");
    assert_eq!(h.admin.guest(189).await.unwrap().seed_boots.len(), 1);

    upload(&h, "h.iso", seed("iid-h", "second", quiet, None)).await;
    power(&h, 189, "stop").await;
    h.put(path, &[("ide2", "proxy-seeds:iso/h.iso,media=cdrom")])
        .await
        .data();
    power(&h, 189, "start").await;
    wait_agent(&h, 189).await;
    assert_eq!(host_name(&h, 189).await, "second");
    let guest = h.admin.guest(189).await.unwrap();
    assert_eq!(guest.first_seed, Some(seed_g));
    assert_eq!(guest.seed_boots.len(), 2);
    assert_eq!(guest.instance_id.as_deref(), Some("iid-h"));
    assert_eq!(h.admin.first_seeds().await.len(), 1);
    let iid = read(&h, 189, "/var/lib/cloud/data/instance-id", "")
        .await
        .data();
    assert_eq!(iid["content"], "iid-h\n");
    h.sim.shutdown().await;
}

/// QemuServer.pm `vmconfig_hotplug_pending` → `vmconfig_update_disk`: a cdrom's medium
/// changes at once on a running VM (`change_medium`), `none` included; deleting an ide
/// drive or adding a new one waits for the next start. An ISO a config still names can be
/// deleted (pve-storage `API2/Storage/Content.pm` `delete` checks no VM).
#[tokio::test]
async fn cdrom_media_changes_apply_at_once_on_a_running_vm() {
    let h = start(fast_config()).await;
    upload(&h, "i.iso", seed("iid-i", "edge-i", GOOD_USER_DATA, None)).await;
    boot_seeded(&h, 190, "edge-i", "i.iso").await;
    let path = "/nodes/pve1/qemu/190/config";
    h.put(path, &[("ide2", "none,media=cdrom")]).await.data();
    let config = h.get(path).await.data();
    assert_eq!(config["ide2"], "none,media=cdrom");
    let pending = h.get("/nodes/pve1/qemu/190/pending").await.data();
    let ide2 = pending
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "ide2")
        .cloned()
        .unwrap();
    assert!(ide2.get("pending").is_none(), "{ide2}");

    let new_drive = ("ide3", "proxy-seeds:iso/i.iso,media=cdrom");
    h.put(path, &[new_drive]).await.data();
    h.put(path, &[("delete", "ide2")]).await.data();
    let current = h.get(&format!("{path}?current=1")).await.data();
    assert!(current.get("ide3").is_none());
    assert_eq!(current["ide2"], "none,media=cdrom");
    let pending = h.get("/nodes/pve1/qemu/190/pending").await.data();
    let row = |key: &str| {
        pending
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .cloned()
            .unwrap()
    };
    let ide3 = row("ide3")["pending"].as_str().unwrap().to_string();
    assert!(
        ide3.starts_with("proxy-seeds:iso/i.iso,media=cdrom"),
        "{ide3}"
    );
    assert_eq!(row("ide2")["delete"], 1);

    let upid = h
        .delete("/nodes/pve1/storage/proxy-seeds/content/proxy-seeds:iso/i.iso")
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    assert!(
        h.admin
            .state()
            .await
            .volumes
            .iter()
            .all(|v| v.volid != "proxy-seeds:iso/i.iso")
    );
    h.sim.shutdown().await;
}

/// `tools/ds-identify`: with no seed and no `manual-clean` marker no datasource is found
/// and the default policy (`notfound=disabled`) keeps cloud-init from running: no
/// result.json that boot. With `manual_cache_clean: true` (`main.py` `main_init`:
/// `existing = "trust"`) cloud-init runs from its cache with or without a seed, and a new
/// seed is not looked at. Either way the agent the instance installed keeps answering.
#[tokio::test]
async fn later_boots_without_a_seed_keep_the_agent_and_no_new_instance() {
    let mut config = fast_config();
    config.timings.cloud_init_ms = 5;
    let h = start(config).await;
    let vendor = "#cloud-config\nmanual_cache_clean: true\n";
    upload(&h, "j.iso", seed("iid-j", "plain-j", GOOD_USER_DATA, None)).await;
    boot_seeded(&h, 191, "plain-j", "j.iso").await;
    upload(
        &h,
        "k.iso",
        seed("iid-k", "trust-k", GOOD_USER_DATA, Some(vendor)),
    )
    .await;
    boot_seeded(&h, 192, "trust-k", "k.iso").await;
    for vmid in [191, 192] {
        read_when_there(&h, vmid, RESULT).await;
        let path = format!("/nodes/pve1/qemu/{vmid}/config");
        h.put(&path, &[("ide2", "none,media=cdrom")]).await.data();
        power(&h, vmid, "stop").await;
        power(&h, vmid, "start").await;
        wait_agent(&h, vmid).await;
    }
    assert!(!h.admin.guest(191).await.unwrap().manual_cache_clean);
    assert_eq!(read(&h, 191, RESULT, "").await.message(), missing(RESULT));
    assert_eq!(read(&h, 191, STATUS, "").await.message(), missing(STATUS));
    assert_eq!(host_name(&h, 191).await, "plain-j");

    let trusted = h.admin.guest(192).await.unwrap();
    assert!(trusted.manual_cache_clean);
    let result: Value = serde_json::from_str(&read_when_there(&h, 192, RESULT).await).unwrap();
    assert_eq!(result, json!({"v1": {"datasource": NOCLOUD, "errors": []}}));
    upload(&h, "k2.iso", seed("iid-k2", "other", GOOD_USER_DATA, None)).await;
    power(&h, 192, "stop").await;
    let path = "/nodes/pve1/qemu/192/config";
    h.put(path, &[("ide2", "proxy-seeds:iso/k2.iso,media=cdrom")])
        .await
        .data();
    power(&h, 192, "start").await;
    wait_agent(&h, 192).await;
    let guest = h.admin.guest(192).await.unwrap();
    assert_eq!(guest.seed_boots.len(), 1);
    assert_eq!(guest.instance_id.as_deref(), Some("iid-k"));
    assert_eq!(host_name(&h, 192).await, "trust-k");
    h.sim.shutdown().await;
}
