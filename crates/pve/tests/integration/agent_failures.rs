//! `Error::agent_failure` against pve-sim's guest profiles: each image's agent answers a
//! file read in its own words (qemu-server `Agent.pm` `check_agent_error` relays qemu-ga's
//! desc as "Agent error: <desc>"), and the client judges them all by kind.

use std::time::Duration;

use pve::qemu::{CloneRequest, ConfigUpdate};
use pve::storage::Upload;
use pve::wire::CdromDrive;
use pve::{AgentFailure, Client, ErrorKind};
use pvesim::testing::fast_config;
use serde_json::json;

use crate::common::{self, Env, agent_seed, poll_until};

const STATUS: &str = "/run/cloud-init/status.json";
const RESULT: &str = "/run/cloud-init/result.json";

/// A simulator whose VM named `<profile>-vm` first boots as that profile.
async fn start() -> Env {
    let mut config = fast_config();
    config.timings.cloud_init_ms = 20;
    config.timings.slow_provisioner_ms = 600_000;
    let choices: Vec<_> = pvesim::GuestProfile::ALL
        .iter()
        .map(|p| json!({"vm_name_regex": format!("^{}-vm$", p.name()), "profile": p}))
        .collect();
    config.faults = common::faults(json!({ "guest_profiles": choices }));
    common::start_with(config, |_| {}).await
}

/// Clones the template as `<profile>-vm` with a seed installing the agent, and starts it.
async fn boot(c: &Client, vmid: u32, profile: &str) {
    let node = c.node("pve1");
    let name = format!("{profile}-vm");
    let mut clone = CloneRequest::full(vmid);
    clone.name = Some(name.clone());
    let upid = node.qemu(9000).clone_to(&clone).await.unwrap();
    c.wait_for_task(&upid).await.unwrap();
    let iso = format!("{name}.iso");
    let upload = Upload::iso(&iso, agent_seed(&name));
    let upid = node.storage("proxy-seeds").upload(upload).await.unwrap();
    c.wait_for_task(&upid).await.unwrap();
    let update = ConfigUpdate::new()
        .agent(true)
        .cdrom("ide2", &CdromDrive::iso("proxy-seeds", &iso));
    node.qemu(vmid).update_config(&update).await.unwrap();
    let upid = node.qemu(vmid).start().await.unwrap();
    c.wait_for_task(&upid).await.unwrap();
}

/// How a read of `file` fails once the agent answers (`None`: it was read).
async fn read_failure(c: &Client, vmid: u32, file: &str) -> Option<AgentFailure> {
    let agent = c.node("pve1").qemu(vmid).agent();
    poll_until("the agent", Duration::from_secs(10), || async {
        match agent.get_host_name().await {
            Ok(_) => Some(()),
            Err(e) if e.agent_failure() == Some(AgentFailure::NotRunning) => None,
            Err(e) => panic!("agent: {e}"),
        }
    })
    .await;
    match agent.file_read(file).await {
        Ok(_) => None,
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Permanent, "{e}");
            Some(
                e.agent_failure()
                    .unwrap_or_else(|| panic!("not the agent's: {e}")),
            )
        }
    }
}

/// Per profile: a refusing agent is `Refused` in every wording (allow-list, pre-6.0
/// block-list, SELinux's EACCES), a file not written yet is `FileMissing`, a readable one
/// reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_profiles_refusals_are_judged_by_kind() {
    let env = start().await;
    let c = &env.client;
    let profiles = [
        (300, "rhel-9"),
        (301, "rhel-9-selinux"),
        (302, "old-qemu-agent"),
        (303, "slow-provisioner"),
        (304, "debian-12"),
        (305, "ubuntu-24.04"),
    ];
    for (vmid, profile) in profiles {
        boot(c, vmid, profile).await;
    }
    let reads = [
        (300, STATUS, Some(AgentFailure::Refused)),
        (301, STATUS, Some(AgentFailure::Refused)),
        (301, "/etc/hostname", None),
        (302, STATUS, Some(AgentFailure::Refused)),
        (303, RESULT, Some(AgentFailure::FileMissing)),
        (304, "/etc/hostname", None),
        (305, "/etc/hostname", None),
    ];
    for (vmid, file, expected) in reads {
        assert_eq!(read_failure(c, vmid, file).await, expected, "{vmid} {file}");
    }
    let old = c.node("pve1").qemu(302).agent().file_read(STATUS).await;
    assert_eq!(
        old.unwrap_err().agent_failure(),
        Some(AgentFailure::Refused)
    );
    let slow = c.node("pve1").qemu(303).agent().file_read(RESULT).await;
    assert_eq!(
        slow.unwrap_err().agent_failure(),
        Some(AgentFailure::FileMissing)
    );
    env.shutdown().await;
}

/// `no-agent`: the ping never answers (`NotRunning`, transient), a VM without the `agent`
/// key is `NotConfigured` (permanent), and a hardened guest's second boot has no
/// `status.json` at all (`FileMissing`, for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_agents_and_absent_files() {
    let env = start().await;
    let c = &env.client;
    boot(c, 310, "no-agent").await;
    let agent = c.node("pve1").qemu(310).agent();
    let silent = agent.file_read(STATUS).await.unwrap_err();
    assert_eq!(silent.agent_failure(), Some(AgentFailure::NotRunning));
    assert_eq!(silent.kind(), ErrorKind::Transient);
    // The template's clone has no `agent` key.
    let upid = c
        .node("pve1")
        .qemu(9000)
        .clone_to(&CloneRequest::full(312))
        .await;
    c.wait_for_task(&upid.unwrap()).await.unwrap();
    let unconfigured = c.node("pve1").qemu(312).agent().file_read(STATUS).await;
    let unconfigured = unconfigured.unwrap_err();
    assert_eq!(
        unconfigured.agent_failure(),
        Some(AgentFailure::NotConfigured)
    );
    assert_eq!(unconfigured.kind(), ErrorKind::Permanent);

    boot(c, 311, "hardened").await;
    poll_until(
        "the first boot's result",
        Duration::from_secs(10),
        || async { read_failure(c, 311, RESULT).await.is_none().then_some(()) },
    )
    .await;
    let vm = c.node("pve1").qemu(311);
    let upid = vm.stop().await.unwrap();
    c.wait_for_task(&upid).await.unwrap();
    let upid = vm.start().await.unwrap();
    c.wait_for_task(&upid).await.unwrap();
    assert_eq!(
        read_failure(c, 311, STATUS).await,
        Some(AgentFailure::FileMissing)
    );
    env.shutdown().await;
}
