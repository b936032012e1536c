//! Guest profiles (README "Guest profiles"): what each image's cloud-init writes, what its
//! qemu-ga refuses and in which words, and what its disk carries, each test naming the
//! source line it follows. Sources: canonical/cloud-init at the tags named
//! (`cloudinit/cmd/main.py` `status_wrapper` and `main_init`, `cloudinit/cmd/status.py`,
//! `cloudinit/stages.py`, `tools/ds-identify`, `systemd/cloud-init-generator.tmpl`); qemu
//! (`qapi/qmp-dispatch.c` `qmp_dispatch`, `qga/main.c`, `qga/commands-posix.c`
//! `safe_open_or_create`); proxmox/qemu-server 9.2.6 (`src/PVE/QemuServer/Agent.pm`
//! `check_agent_error`, `src/PVE/QMPClient.pm` `cmd`).

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{self, Answer, GOOD_USER_DATA, Harness, encode, joliet_iso, start};
use pvesim::testing::fast_config;
use pvesim::{GuestProfile, SimConfig};

const STATUS: &str = "/run/cloud-init/status.json";
const RESULT: &str = "/run/cloud-init/result.json";
const DATA_STATUS: &str = "/var/lib/cloud/data/status.json";
const OUTPUT_LOG: &str = "/var/log/cloud-init-output.log";
/// A user-data that installs nothing: the agent only runs where the image ships it.
const PLAIN_USER_DATA: &str = "#cloud-config\npackage_update: false\n";

fn seed(instance_id: &str, hostname: &str, user_data: &str) -> Vec<u8> {
    let meta = format!("instance-id: {instance_id}\nlocal-hostname: {hostname}\n");
    joliet_iso(
        "cidata",
        &[
            ("meta-data", meta.as_bytes()),
            ("user-data", user_data.as_bytes()),
        ],
    )
}

/// A simulator whose VMs named `<profile>-<word>` first boot as that profile.
async fn start_with_profiles(mut config: SimConfig) -> Harness {
    let choices: Vec<Value> = GuestProfile::ALL
        .iter()
        .map(|p| json!({"vm_name_regex": format!("^{}-[^-]+$", p.name()), "profile": p}))
        .collect();
    config.timings.cloud_init_ms = 20;
    config.faults = common::faults(json!({ "guest_profiles": choices }));
    start(config).await
}

async fn power(h: &Harness, vmid: u32, action: &str) {
    let path = format!("/nodes/pve1/qemu/{vmid}/status/{action}");
    let upid = h.post(&path, &[]).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
}

/// Clones the template as `name`, attaches a seed of its own (the agent on) and starts it.
async fn boot(h: &Harness, vmid: u32, name: &str, user_data: &str) {
    let iso = format!("{name}.iso");
    let bytes = seed(&format!("iid-{name}"), name, user_data);
    let upid = h.upload("pve1", "proxy-seeds", &iso, bytes).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    h.clone_template(vmid, name).await;
    let ide2 = format!("proxy-seeds:iso/{iso},media=cdrom");
    let path = format!("/nodes/pve1/qemu/{vmid}/config");
    h.put(&path, &[("agent", "1"), ("ide2", &ide2)])
        .await
        .data();
    power(h, vmid, "start").await;
}

async fn wait_agent(h: &Harness, vmid: u32) {
    let path = format!("/nodes/pve1/qemu/{vmid}/agent/get-host-name");
    h.poll_until(&path, |a| a.status == StatusCode::OK).await;
}

async fn read(h: &Harness, vmid: u32, file: &str) -> Answer {
    let file = encode(file);
    h.get(&format!(
        "/nodes/pve1/qemu/{vmid}/agent/file-read?file={file}"
    ))
    .await
}

async fn read_when_there(h: &Harness, vmid: u32, file: &str) -> String {
    let path = format!(
        "/nodes/pve1/qemu/{vmid}/agent/file-read?file={}",
        encode(file)
    );
    let answer = h.poll_until(&path, |a| a.status == StatusCode::OK).await;
    answer.data()["content"].as_str().unwrap().to_string()
}

/// status.json once `modules-final` finished.
async fn final_status(h: &Harness, vmid: u32) -> Value {
    let _ = read_when_there(h, vmid, RESULT).await;
    serde_json::from_str(&read_when_there(h, vmid, STATUS).await).unwrap()
}

async fn command(h: &Harness, vmid: u32, name: &str) -> Value {
    h.get(&format!("/nodes/pve1/qemu/{vmid}/agent/{name}"))
        .await
        .data()["result"]
        .clone()
}

fn missing(file: &str) -> String {
    format!("Agent error: failed to open file '{file}' (mode: 'r'): No such file or directory\n")
}

/// cloud-init 22.4.2 (Debian 12's `22.4.2-1+deb12u3`), `cmd/main.py` `status_wrapper`:
/// `modes = ("init", "init-local", "modules-init", "modules-config", "modules-final")`,
/// `nullstatus = {"errors": [], "start": None, "finished": None}` (no unit runs
/// `modules --mode=init`, so it stays null) and `v1[mode]["start"] = time.time()`: Unix
/// seconds, no `recoverable_errors`. 23.4's `status_wrapper` dropped `modules-init` and
/// added `recoverable_errors`; 24.2 writes `float(util.uptime())`. `cmd/status.py` of
/// 22.4.2 has no degraded state (`return 1 if details.status == UXAppStatus.ERROR else
/// 0`), so a warning leaves it `done`. Debian's `version.py` keeps `__VERSION__ =
/// "22.4.2"` (the .deb read), which `welcome_format` prints.
#[tokio::test]
async fn debian_12_writes_cloud_init_22_4_2s_files() {
    let h = start_with_profiles(fast_config()).await;
    let mut with_warning = h.admin.faults().await;
    with_warning.cloud_init_errors = vec![pvesim::CloudInitErrors {
        vm_name_regex: "^debian-12-".into(),
        recoverable_errors: vec!["Could not set hostname".into()],
        ..Default::default()
    }];
    h.admin.set_faults(&with_warning).await;
    boot(&h, 200, "debian-12-a", GOOD_USER_DATA).await;
    wait_agent(&h, 200).await;

    let status = final_status(&h, 200).await;
    let v1 = &status["v1"];
    let stages: Vec<&str> = v1.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        stages,
        [
            "datasource",
            "init",
            "init-local",
            "modules-config",
            "modules-final",
            "modules-init",
            "stage"
        ]
    );
    assert_eq!(
        v1["modules-init"],
        json!({"errors": [], "finished": null, "start": null})
    );
    assert!(
        v1["modules-final"].get("recoverable_errors").is_none(),
        "{v1}"
    );
    let start = v1["init-local"]["start"].as_f64().unwrap();
    assert!(start > 1.7e9, "time.time(), not an uptime: {start}");
    assert!(v1["modules-final"]["finished"].as_f64().unwrap() >= start);
    let log = read_when_there(&h, 200, OUTPUT_LOG).await;
    assert!(
        log.starts_with("Cloud-init v. 22.4.2 running 'init-local' at "),
        "{log}"
    );
    assert!(log.contains("[WARNING]: Could not set hostname\n"), "{log}");
    let guest = h.admin.guest(200).await.unwrap();
    assert_eq!(guest.profile, "debian-12");
    assert_eq!(guest.cloud_init.as_deref(), Some("done"));
    // Debian 12's qemu-ga (1:7.2+dfsg-7+deb12u15) answers guest-info with 7.2.18.
    assert_eq!(command(&h, 200, "info").await["version"], "7.2.18");
    assert_eq!(
        command(&h, 200, "get-osinfo").await["version-id"],
        json!("12")
    );
    h.sim.shutdown().await;
}

/// Ubuntu 24.04's cloud-init is Ubuntu's SRU of 26.1 (tag `ubuntu/26.1-0ubuntu1_24.04.1`,
/// whose `debian/rules` writes the package version into `version.py`); its
/// `status_wrapper` is 25.1.4's: the stages `init-local`, `init`, `modules-config`,
/// `modules-final`, each with `recoverable_errors` (`nullstatus`), `start`/`finished`
/// from `float(util.uptime())`. Debian 13 runs 25.1.4 in the same layout.
#[tokio::test]
async fn ubuntu_24_04_and_debian_13_write_uptimes_and_recoverable_errors() {
    let h = start_with_profiles(fast_config()).await;
    boot(&h, 201, "ubuntu-24.04-a", GOOD_USER_DATA).await;
    boot(&h, 202, "debian-13-a", GOOD_USER_DATA).await;
    wait_agent(&h, 201).await;
    wait_agent(&h, 202).await;

    for (vmid, version) in [(201, "26.1-0ubuntu1~24.04.1"), (202, "25.1.4")] {
        let status = final_status(&h, vmid).await;
        let v1 = status["v1"].as_object().unwrap();
        assert!(!v1.contains_key("modules-init"), "{status}");
        for stage in ["init-local", "init", "modules-config", "modules-final"] {
            assert_eq!(v1[stage]["recoverable_errors"], json!({}), "{stage}");
            let start = v1[stage]["start"].as_f64().unwrap();
            assert!(start < 1e6, "util.uptime(), not Unix seconds: {start}");
        }
        let log = read_when_there(&h, vmid, OUTPUT_LOG).await;
        let line = format!("Cloud-init v. {version} running 'init-local' at ");
        assert!(log.starts_with(&line), "{log}");
    }
    assert_eq!(command(&h, 201, "get-osinfo").await["id"], json!("ubuntu"));
    h.sim.shutdown().await;
}

/// RHEL 9.4 on ships qemu-ga enabled with `/etc/sysconfig/qemu-ga`'s
/// `FILTER_RPC_ARGS="--allow-rpcs=…"` leaving out guest-file-* and guest-exec
/// (autotest/tp-qemu#3887: allow-rpcs from qemu-guest-agent 8.1.0-5). qga/main.c (8.x)
/// `ga_disable_not_allowed` disables them with `qmp_disable_command(&ga_commands, name,
/// "the command is not allowed")`, and `qapi/qmp-dispatch.c` answers `"Command %s has been
/// disabled%s%s"` (class CommandNotFound); Agent.pm `check_agent_error` dies `"Agent
/// error: $result->{error}->{desc}\n"`, as QMPClient's `cmd` hands qemu-ga's error back
/// as the result (qemu-server 1928c201, "return error from guest-agent"). The agent runs
/// without the seed installing it. The profile a fault chose stays the VM's.
#[tokio::test]
async fn rhel_9_ships_an_agent_whose_allow_list_refuses_file_commands() {
    let h = start_with_profiles(fast_config()).await;
    boot(&h, 203, "rhel-9-a", PLAIN_USER_DATA).await;
    wait_agent(&h, 203).await;

    let refused = read(&h, 203, STATUS).await;
    assert_eq!(refused.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        refused.message(),
        "Agent error: Command guest-file-open has been disabled: the command is not allowed\n"
    );
    let path = "/nodes/pve1/qemu/203/agent/file-write";
    let write = h.post(path, &[("file", "/tmp/x"), ("content", "x")]).await;
    assert_eq!(write.message(), refused.message());
    let info = command(&h, 203, "info").await;
    assert_eq!(info["version"], "8.2.0");
    let enabled = |name: &str| {
        info["supported_commands"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["enabled"].clone())
    };
    assert_eq!(enabled("guest-file-read"), Some(json!(false)));
    assert_eq!(enabled("guest-network-get-interfaces"), Some(json!(true)));
    assert_eq!(
        command(&h, 203, "get-host-name").await["host-name"],
        "rhel-9-a"
    );
    assert_eq!(command(&h, 203, "get-osinfo").await["id"], "rhel");
    let guest = h.admin.guest(203).await.unwrap();
    assert!(guest.agent_installed);

    h.admin.clear_faults().await;
    power(&h, 203, "stop").await;
    power(&h, 203, "start").await;
    wait_agent(&h, 203).await;
    assert_eq!(read(&h, 203, STATUS).await.message(), refused.message());
    assert_eq!(h.admin.guest(203).await.unwrap().profile, "rhel-9");
    h.sim.shutdown().await;
}

/// The three wordings of a disabled command. Before QEMU 6.0 `qmp_dispatch` said `"The
/// command %s has been disabled for this instance"` (replaced by `"Command %s has been
/// disabled%s%s"` with the `disable_reason` patch, 2021). From 6.0 to 9.0 a block-list
/// entry is disabled with no reason (`qmp_disable_command(&ga_commands, l->data, NULL)`):
/// Debian 12's qemu-ga 7.2.18, run with `-b guest-file-open`, answers `{"class":
/// "CommandNotFound", "desc": "Command guest-file-open has been disabled"}`. QEMU 9.1's
/// `ga_apply_command_filters_iter` gives both lists "the command is not allowed"
/// (Debian 13's 10.0).
#[tokio::test]
async fn each_qemu_ga_release_words_a_disabled_command_its_own_way() {
    let h = start_with_profiles(fast_config()).await;
    let mut faults = h.admin.faults().await;
    faults.agent_blocked_commands = vec![pvesim::AgentBlockedCommands {
        vm_name_regex: "^debian-1[23]-".into(),
        commands: vec!["guest-file-open".into()],
    }];
    h.admin.set_faults(&faults).await;
    boot(&h, 204, "old-qemu-agent-a", PLAIN_USER_DATA).await;
    boot(&h, 205, "debian-12-b", GOOD_USER_DATA).await;
    boot(&h, 206, "debian-13-b", GOOD_USER_DATA).await;
    let expected = [
        (
            204,
            "The command guest-file-open has been disabled for this instance",
        ),
        (205, "Command guest-file-open has been disabled"),
        (
            206,
            "Command guest-file-open has been disabled: the command is not allowed",
        ),
    ];
    for (vmid, desc) in expected {
        wait_agent(&h, vmid).await;
        let answer = read(&h, vmid, OUTPUT_LOG).await;
        assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(answer.message(), format!("Agent error: {desc}\n"));
    }
    h.sim.shutdown().await;
}

/// qemu-ga `qga/commands-posix.c` `safe_open_or_create`: a failed `open()` is
/// `error_setg_errno(errp, errno, "failed to open file '%s' (mode: '%s')", path, mode)`,
/// so EACCES reads "…: Permission denied" (qemu-ga 7.2.18 run as an unprivileged user
/// answers exactly that for an unreadable file). On RHEL the confined qemu-ga may not read
/// other domains' files unless `virt_qemu_ga_read_nonsecurity_files` is on (tp-qemu's
/// qemu_guest_agent.cfg toggles it): cloud-init's files are refused, others are read.
#[tokio::test]
async fn rhel_9_selinux_refuses_reads_of_cloud_inits_files() {
    let h = start_with_profiles(fast_config()).await;
    boot(&h, 207, "rhel-9-selinux-a", PLAIN_USER_DATA).await;
    wait_agent(&h, 207).await;
    for file in [STATUS, DATA_STATUS, OUTPUT_LOG] {
        let answer = read(&h, 207, file).await;
        assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            answer.message(),
            format!("Agent error: failed to open file '{file}' (mode: 'r'): Permission denied\n")
        );
    }
    assert_eq!(
        read_when_there(&h, 207, "/etc/hostname").await,
        "rhel-9-selinux-a\n"
    );
    h.sim.shutdown().await;
}

/// Debian and Ubuntu cloud images ship no qemu-guest-agent (the seed must install it); the
/// `no-agent` image never gets one, whatever the seed says: PVE's `qga_check_running`
/// ping fails for good (Agent.pm `assert_agent_available`: "QEMU guest agent is not
/// running"), while cloud-init itself runs to its end.
#[tokio::test]
async fn no_agent_never_answers_whatever_the_seed_says() {
    let h = start_with_profiles(fast_config()).await;
    boot(&h, 208, "no-agent-a", GOOD_USER_DATA).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while h.admin.guest(208).await.unwrap().cloud_init.as_deref() != Some("done") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "cloud-init never ended"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let answer = h.get("/nodes/pve1/qemu/208/agent/get-host-name").await;
    assert_eq!(answer.message(), "QEMU guest agent is not running\n");
    let guest = h.admin.guest(208).await.unwrap();
    assert!(!guest.agent_installed);
    assert_eq!(guest.seed_boots.len(), 1);
    h.sim.shutdown().await;
}

/// The `hardened` image touches `/etc/cloud/cloud-init.disabled` once its first boot's
/// final stage ended. At the next boot `tools/ds-identify` (25.1.4) `_main` returns 2 at
/// once (`is_disabled`: "disabled by marker file /etc/cloud/cloud-init.disabled") and
/// `cloud-init-generator` writes `/run/cloud-init/disabled`, so no stage runs: nothing
/// deletes or rewrites `/var/lib/cloud/data/status.json` (`status_wrapper` only deletes
/// it in `init-local`), while the `/run/cloud-init/status.json` link went with the tmpfs.
/// A new seed changes nothing: ds-identify stops before looking for a datasource.
#[tokio::test]
async fn hardened_later_boots_write_no_status() {
    let h = start_with_profiles(fast_config()).await;
    boot(&h, 209, "hardened-a", GOOD_USER_DATA).await;
    wait_agent(&h, 209).await;
    let first = final_status(&h, 209).await;
    let marker = read_when_there(&h, 209, "/etc/cloud/cloud-init.disabled").await;
    assert_eq!(marker, "");
    let log = read_when_there(&h, 209, OUTPUT_LOG).await;

    power(&h, 209, "stop").await;
    let other = seed("iid-hardened-b", "hardened-b", GOOD_USER_DATA);
    let upid = h.upload("pve1", "proxy-seeds", "b.iso", other).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    let path = "/nodes/pve1/qemu/209/config";
    h.put(path, &[("ide2", "proxy-seeds:iso/b.iso,media=cdrom")])
        .await
        .data();
    power(&h, 209, "start").await;
    wait_agent(&h, 209).await;

    assert_eq!(read(&h, 209, STATUS).await.message(), missing(STATUS));
    assert_eq!(read(&h, 209, RESULT).await.message(), missing(RESULT));
    let on_disk: Value =
        serde_json::from_str(&read_when_there(&h, 209, DATA_STATUS).await).unwrap();
    assert_eq!(on_disk, first);
    assert_eq!(
        read_when_there(&h, 209, "/run/cloud-init/disabled").await,
        ""
    );
    assert_eq!(read_when_there(&h, 209, OUTPUT_LOG).await, log);
    let guest = h.admin.guest(209).await.unwrap();
    assert_eq!(guest.cloud_init, None);
    assert!(guest.cloud_init_disabled);
    assert_eq!(guest.instance_id.as_deref(), Some("iid-hardened-a"));
    h.sim.shutdown().await;
}

/// The `slow-provisioner`'s final stage ends `slow_provisioner_ms` after the agent
/// answered: `status_wrapper` has written `"stage": "modules-final"` with no `finished`,
/// and result.json (written only after `modules-final`) is not there yet; another image in
/// the same world keeps `cloud_init_ms`.
#[tokio::test]
async fn a_slow_provisioner_answers_long_before_its_final_stage_ends() {
    let mut config = fast_config();
    config.timings.slow_provisioner_ms = 600_000;
    let h = start_with_profiles(config).await;
    boot(&h, 210, "slow-provisioner-a", GOOD_USER_DATA).await;
    boot(&h, 211, "debian-13-c", GOOD_USER_DATA).await;
    wait_agent(&h, 210).await;
    let _ = final_status(&h, 211).await;

    let status: Value = serde_json::from_str(&read_when_there(&h, 210, STATUS).await).unwrap();
    assert_eq!(status["v1"]["stage"], "modules-final");
    assert_eq!(status["v1"]["modules-final"]["finished"], Value::Null);
    assert_eq!(read(&h, 210, RESULT).await.message(), missing(RESULT));
    let guest = h.admin.guest(210).await.unwrap();
    assert_eq!(guest.cloud_init.as_deref(), Some("running"));
    h.sim.shutdown().await;
}

/// 25.1.4's `status_wrapper` merges the WARNING records its `LogExporter` collected into
/// the stage's `recoverable_errors`; `cmd/status.py` `handle_status_args` then returns 2
/// (`ConditionStatus.DEGRADED`). The warning is `cc_write_files.py` `write_files`' "No
/// path provided to write for entry %s in module %s". It comes from a per-instance
/// module, so a later boot of the same instance is clean.
#[tokio::test]
async fn a_degraded_image_reports_its_recoverable_error() {
    let h = start_with_profiles(fast_config()).await;
    boot(&h, 212, "degraded-a", GOOD_USER_DATA).await;
    wait_agent(&h, 212).await;
    let status = final_status(&h, 212).await;
    let warning = "No path provided to write for entry 1 in module write_files_deferred";
    assert_eq!(
        status["v1"]["modules-final"]["recoverable_errors"],
        json!({"WARNING": [warning]})
    );
    let result: Value = serde_json::from_str(&read_when_there(&h, 212, RESULT).await).unwrap();
    assert_eq!(result["v1"]["errors"], json!([]));
    assert_eq!(
        h.admin.guest(212).await.unwrap().cloud_init.as_deref(),
        Some("degraded")
    );
    power(&h, 212, "stop").await;
    power(&h, 212, "start").await;
    wait_agent(&h, 212).await;
    let again = final_status(&h, 212).await;
    assert_eq!(
        again["v1"]["modules-final"]["recoverable_errors"],
        json!({})
    );
    h.sim.shutdown().await;
}

/// An image made without `cloud-init clean` keeps `/var/lib/cloud/instance/manual-clean`
/// (`stages.py` `_write_to_cache`, when the build VM's config set `manual_cache_clean`) and
/// its cache. In a clone `tools/ds-identify` `manual_clean_and_existing` finds a datasource
/// without looking ("# manual_cache_clean."), `cmd/main.py` `main_init` sets `existing =
/// "trust"` from the marker and `_restore_from_checked_cache` returns the cached datasource
/// ("restored from cache"): the clone's own seed is never read, its instance-id and
/// hostname stay the build VM's. The template is the config file's `vms[].guest_profile`;
/// the clone copies its disk.
#[tokio::test]
async fn a_dirty_templates_clone_trusts_the_cache_and_ignores_its_seed() {
    let mut config: SimConfig = serde_json::from_value(json!({"vms": [{
        "vmid": 9000,
        "node": "pve1",
        "config": {
            "name": "dirty-13",
            "template": "1",
            "scsi0": "vmdata:9000/base-9000-disk-0.qcow2,size=4G",
            "net0": "virtio=BC:24:11:9A:00:01,bridge=vmbr0",
            "boot": "order=scsi0"
        },
        "guest_profile": "dirty-template"
    }]}))
    .unwrap();
    let fast = fast_config();
    config.timings = fast.timings;
    config.timings.cloud_init_ms = 20;
    assert_eq!(
        config.guest_profiles.get(&9000),
        Some(&GuestProfile::DirtyTemplate)
    );
    let h = start(config).await;
    assert_eq!(h.admin.guest(9000).await.unwrap().profile, "dirty-template");
    boot(&h, 213, "edge-dirty", GOOD_USER_DATA).await;
    wait_agent(&h, 213).await;

    let instance_id = read_when_there(&h, 213, "/var/lib/cloud/data/instance-id").await;
    assert_eq!(instance_id, "iid-image-build\n");
    let marker = read_when_there(&h, 213, "/var/lib/cloud/instance/manual-clean").await;
    assert_eq!(marker, "");
    assert_eq!(
        command(&h, 213, "get-host-name").await["host-name"],
        "image-build"
    );
    let guest = h.admin.guest(213).await.unwrap();
    assert_eq!(guest.first_seed, None);
    assert!(guest.seed_boots.is_empty());
    assert_eq!(guest.profile, "dirty-template");
    // cloud-init ran (per-boot stages) on the restored datasource.
    let status = final_status(&h, 213).await;
    assert_eq!(status["v1"]["modules-final"]["errors"], json!([]));
    h.sim.shutdown().await;
}

/// A clone's disk is a copy of its source's (qemu-server `clone_vm` copies every disk):
/// what an instance installed and cached is there at the clone's first boot, so without a
/// seed of its own the clone keeps the source's agent, hostname and instance-id, and
/// cloud-init does not run (ds-identify finds no datasource: `notfound=disabled`).
#[tokio::test]
async fn a_clone_boots_from_a_copy_of_its_sources_disk() {
    let h = start_with_profiles(fast_config()).await;
    boot(&h, 214, "debian-13-src", GOOD_USER_DATA).await;
    wait_agent(&h, 214).await;
    let _ = final_status(&h, 214).await;
    power(&h, 214, "stop").await;
    let upid = h
        .post(
            "/nodes/pve1/qemu/214/clone",
            &[("newid", "215"), ("name", "copy"), ("full", "1")],
        )
        .await
        .data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
    h.put("/nodes/pve1/qemu/215/config", &[("delete", "ide2")])
        .await
        .data();
    power(&h, 215, "start").await;
    wait_agent(&h, 215).await;

    assert_eq!(
        command(&h, 215, "get-host-name").await["host-name"],
        "debian-13-src"
    );
    let instance_id = read_when_there(&h, 215, "/var/lib/cloud/data/instance-id").await;
    assert_eq!(instance_id, "iid-debian-13-src\n");
    assert_eq!(read(&h, 215, STATUS).await.message(), missing(STATUS));
    let log = read_when_there(&h, 215, OUTPUT_LOG).await;
    assert!(log.contains("running 'modules:final'"), "{log}");
    let guest = h.admin.guest(215).await.unwrap();
    assert!(guest.seed_boots.is_empty());
    assert!(guest.agent_installed);
    h.sim.shutdown().await;
}

/// `GOOD_USER_DATA` with cloud-init's `power_state` in `mode`.
fn powering(mode: &str) -> String {
    format!("{GOOD_USER_DATA}power_state:\n  mode: {mode}\n  delay: now\n")
}

async fn vm_status(h: &Harness, vmid: u32) -> Value {
    h.get(&format!("/nodes/pve1/qemu/{vmid}/status/current"))
        .await
        .data()
}

/// canonical/cloud-init `config/cc_power_state_change.py`: the last module of
/// `cloud_final_modules` (`config/cloud.cfg.tmpl`), `PER_INSTANCE`. Its child waits until
/// the `modules-final` process has gone (`run_after_pid_gone`), so `result.json` is
/// written, then runs `shutdown -P now` (`Distro.shutdown_options_map`): QEMU exits and
/// PVE shows the VM stopped. A later boot of the same instance runs no per-instance
/// module, so it stays up.
#[tokio::test]
async fn power_state_poweroff_stops_the_vm_after_its_first_final_stage() {
    let h = start_with_profiles(fast_config()).await;
    boot(&h, 212, "debian-13-off", &powering("poweroff")).await;
    let path = "/nodes/pve1/qemu/212/status/current";
    h.poll_until(path, |a| a.data()["status"] == "stopped")
        .await;
    let guest = h.admin.guest(212).await.unwrap();
    assert_eq!(guest.cloud_init, None, "the run ended with the guest");
    power(&h, 212, "start").await;
    wait_agent(&h, 212).await;
    let _ = final_status(&h, 212).await;
    // The first boot finished its final stage before it powered off, the second too.
    let log = read_when_there(&h, 212, OUTPUT_LOG).await;
    assert_eq!(log.matches("finished at").count(), 2, "{log}");
    let guest = h.admin.guest(212).await.unwrap();
    assert_eq!(guest.seed_boots.len(), 1);
    assert_eq!(guest.cloud_init.as_deref(), Some("done"));
    assert_eq!(vm_status(&h, 212).await["status"], "running");
    h.sim.shutdown().await;
}

/// `mode: reboot` runs `shutdown -r now` in the guest: QEMU keeps running (the same
/// process, so PVE's status stays `running` and no pending change is applied), the agent
/// goes with the old boot and answers again in the new one, whose cloud-init runs its
/// per-boot stages for the same instance (a second "running 'init-local'" in the log).
#[tokio::test]
async fn power_state_reboot_reboots_the_guest_in_place() {
    let h = start_with_profiles(fast_config()).await;
    boot(&h, 213, "debian-13-reboot", &powering("reboot")).await;
    let pid = vm_status(&h, 213).await["pid"].clone();
    let path = format!(
        "/nodes/pve1/qemu/213/agent/file-read?file={}",
        encode(OUTPUT_LOG)
    );
    let twice = |a: &Answer| {
        a.status == StatusCode::OK
            && a.data()["content"]
                .as_str()
                .is_some_and(|log| log.matches("running 'init-local'").count() == 2)
    };
    h.poll_until(&path, twice).await;
    let status = vm_status(&h, 213).await;
    assert_eq!(status["status"], "running");
    assert_eq!(status["pid"], pid, "the same QEMU process");
    let _ = final_status(&h, 213).await;
    let guest = h.admin.guest(213).await.unwrap();
    assert_eq!(guest.seed_boots.len(), 1);
    assert_eq!(vm_status(&h, 213).await["status"], "running");
    h.sim.shutdown().await;
}

/// `mode: halt` (`shutdown -H now`) stops the OS without powering off: QEMU runs on, so
/// PVE shows the VM `running`, but no agent answers any more.
#[tokio::test]
async fn power_state_halt_leaves_a_running_vm_without_an_agent() {
    let h = start_with_profiles(fast_config()).await;
    boot(&h, 214, "debian-13-halt", &powering("halt")).await;
    wait_agent(&h, 214).await;
    let path = "/nodes/pve1/qemu/214/agent/get-host-name";
    let gone = |a: &Answer| a.message().contains("QEMU guest agent is not running");
    h.poll_until(path, gone).await;
    assert_eq!(vm_status(&h, 214).await["status"], "running");
    let guest = h.admin.guest(214).await.unwrap();
    assert_eq!(guest.cloud_init, None);
    h.sim.shutdown().await;
}

/// canonical/cloud-init `config/cc_package_update_upgrade_install.py` `handle`: after an
/// upgrade with `package_reboot_if_required`, a `/var/run/reboot-required` (pve-sim: every
/// upgrade leaves one) makes it run `/sbin/reboot` at once. It is the first of
/// `cloud_final_modules`, so the first boot ends mid-stage with no `result.json`; the next
/// boot (the same instance: the cache is trusted) runs the per-instance modules the first
/// did not reach, whose outcome its `result.json` reports. QEMU stays up throughout.
#[tokio::test]
async fn an_upgrade_that_needs_a_reboot_finishes_the_instance_in_the_next_boot() {
    let h = start_with_profiles(fast_config()).await;
    let mut faults = h.admin.faults().await;
    let error = "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd)'))";
    faults.cloud_init_errors = vec![pvesim::CloudInitErrors {
        vm_name_regex: "^debian-13-upgrade$".into(),
        errors: vec![error.into()],
        ..Default::default()
    }];
    h.admin.set_faults(&faults).await;
    let user_data =
        format!("{GOOD_USER_DATA}package_upgrade: true\npackage_reboot_if_required: true\n");
    boot(&h, 215, "debian-13-upgrade", &user_data).await;
    let pid = vm_status(&h, 215).await["pid"].clone();
    let result: Value = serde_json::from_str(&read_when_there(&h, 215, RESULT).await).unwrap();
    assert_eq!(result["v1"]["errors"], json!([error]), "{result}");
    let log = read_when_there(&h, 215, OUTPUT_LOG).await;
    assert_eq!(log.matches("running 'init-local'").count(), 2, "{log}");
    assert_eq!(
        log.matches("finished at").count(),
        1,
        "the first boot never finished: {log}"
    );
    let status = vm_status(&h, 215).await;
    assert_eq!(
        (status["status"].clone(), status["pid"].clone()),
        (json!("running"), pid)
    );
    let guest = h.admin.guest(215).await.unwrap();
    assert_eq!(guest.seed_boots.len(), 1);
    assert_eq!(guest.cloud_init.as_deref(), Some("error"));
    h.sim.shutdown().await;
}

/// Runs a power command on VM `vmid` and returns the task's exit status and log lines.
async fn power_task(
    h: &Harness,
    vmid: u32,
    action: &str,
    form: &[(&str, &str)],
) -> (String, Vec<String>) {
    let path = format!("/nodes/pve1/qemu/{vmid}/status/{action}");
    let upid = h.post(&path, form).await.data();
    let upid = upid.as_str().unwrap();
    let exit = h.wait_task(upid).await;
    let log = h
        .get(&format!(
            "/nodes/pve1/tasks/{}/log?limit=1000",
            encode(upid)
        ))
        .await
        .data();
    let lines = log
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line["t"].as_str().unwrap().to_owned())
        .collect();
    (exit, lines)
}

/// qemu-server `_do_vm_stop` with `$shutdown` (`src/PVE/QemuServer.pm`, 9.2.6) asks the guest
/// agent (`guest-shutdown`) when the config enables it and `qga_check_running` answers, and
/// ACPI (`system_powerdown`) otherwise. A qemu-ga that refuses `guest-shutdown` fails the
/// command: `vm_reboot` passes no `$force`, so the reboot dies "VM quit/powerdown failed"
/// and the VM runs on, as a shutdown without `forceStop` does; with `forceStop` QEMU is
/// terminated after the warning "VM quit/powerdown failed - terminating now with SIGTERM".
/// With the agent off in the config, the same guest is asked by ACPI and heeds it; one that
/// ignores ACPI is waited for `timeout` seconds, then the reboot dies "VM quit/powerdown
/// failed - got timeout", and a forced shutdown warns "VM still running - terminating now
/// with SIGTERM" and stops it.
#[tokio::test]
async fn a_guest_refusing_or_ignoring_its_shutdown_fails_reboots_and_forced_shutdowns_terminate() {
    let h = start_with_profiles(fast_config()).await;
    let mut faults = h.admin.faults().await;
    faults.agent_blocked_commands = vec![pvesim::AgentBlockedCommands {
        vm_name_regex: "^debian-13-".into(),
        commands: vec!["guest-shutdown".into()],
    }];
    h.admin.set_faults(&faults).await;
    boot(&h, 216, "debian-13-halt", GOOD_USER_DATA).await;
    wait_agent(&h, 216).await;

    let refused = "VM quit/powerdown failed".to_string();
    assert_eq!(power_task(&h, 216, "reboot", &[]).await.0, refused);
    assert_eq!(vm_status(&h, 216).await["status"], "running");
    assert_eq!(power_task(&h, 216, "shutdown", &[]).await.0, refused);
    assert_eq!(vm_status(&h, 216).await["status"], "running");
    let (exit, log) = power_task(&h, 216, "shutdown", &[("forceStop", "1")]).await;
    assert_eq!(exit, "WARNINGS: 1");
    assert!(
        log.iter()
            .any(|l| l == "WARN: VM quit/powerdown failed - terminating now with SIGTERM"),
        "{log:?}"
    );
    assert_eq!(vm_status(&h, 216).await["status"], "stopped");

    // The agent off in the config: ACPI, which the guest heeds.
    h.put("/nodes/pve1/qemu/216/config", &[("agent", "0")])
        .await
        .data();
    power(&h, 216, "start").await;
    power(&h, 216, "reboot").await;
    assert_eq!(vm_status(&h, 216).await["status"], "running");
    power(&h, 216, "shutdown").await;
    assert_eq!(vm_status(&h, 216).await["status"], "stopped");

    // A guest that ignores ACPI (no logind, no acpid): the reboot waits out its timeout and
    // fails; a forced shutdown terminates QEMU once the timeout has passed.
    power(&h, 216, "start").await;
    let mut faults = h.admin.faults().await;
    faults.acpi_ignored = vec!["^debian-13-halt$".into()];
    h.admin.set_faults(&faults).await;
    let timeout = [("timeout", "2")];
    let (exit, _) = power_task(&h, 216, "reboot", &timeout).await;
    assert_eq!(exit, "VM quit/powerdown failed - got timeout");
    assert_eq!(vm_status(&h, 216).await["status"], "running");
    let forced = [("timeout", "2"), ("forceStop", "1")];
    let (exit, log) = power_task(&h, 216, "shutdown", &forced).await;
    assert_eq!(exit, "WARNINGS: 1");
    assert!(
        log.iter()
            .any(|l| l == "WARN: VM still running - terminating now with SIGTERM"),
        "{log:?}"
    );
    assert_eq!(vm_status(&h, 216).await["status"], "stopped");
    h.sim.shutdown().await;
}
