//! Observing one VM on a known node: its config as PVE holds it (with what waits for a
//! reboot), its power state and one guest-agent attempt, without waiting.
//!
//! A refresh costs at most two requests per VM (`GET …/pending` for config and pending
//! changes, and the agent's interfaces only for a running VM with the agent enabled) plus one
//! cluster listing and one power listing per node, shared by all reads of the process.

use pve::qemu::{GuestInterface, VmStatus};
use pve::{Client, ErrorKind};

use super::super::model::{Observed, RunningValues, networks};
use super::error::Step;
use super::operation;
use crate::ownership::{self, Mark};

/// What drift detection needs of one VM on a known node: its config as PVE holds it (with
/// what waits for a reboot, from one `GET …/pending`), status, and one agent attempt without
/// waiting. `None` when the VM is not there.
pub async fn observe(
    client: &Client,
    node: &str,
    vmid: u32,
    pool: Option<String>,
) -> Step<Option<Observed>> {
    observe_with(client, node, vmid, pool, None).await
}

/// [`observe`], with the agent's interfaces when the caller already has them.
pub async fn observe_with(
    client: &Client,
    node: &str,
    vmid: u32,
    pool: Option<String>,
    reported: Option<Vec<GuestInterface>>,
) -> Step<Option<Observed>> {
    observe_known(client, node, vmid, pool, None, reported).await
}

/// [`observe_with`], with the power state when the caller already read it live (a node's
/// listing); otherwise it is asked of the VM.
pub(super) async fn observe_known(
    client: &Client,
    node: &str,
    vmid: u32,
    pool: Option<String>,
    status: Option<VmStatus>,
    reported: Option<Vec<GuestInterface>>,
) -> Step<Option<Observed>> {
    let qemu = client.node(node).qemu(vmid);
    // The power state, when the caller has none, is asked beside the config, not after it.
    let asked_status = async {
        match status {
            Some(status) => Ok(status),
            None => operation::read(|| qemu.status()).await,
        }
    };
    let (view, status) = tokio::join!(operation::read(|| qemu.pending_view()), asked_status);
    let view = match view {
        Ok(view) => view,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let config = &view.effective;
    let status = match status {
        Ok(status) => status,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let net = config.net(0).and_then(Result::ok);
    let mac = net.as_ref().and_then(|n| n.mac.clone());
    let (mut ipv4, mut ipv6) = (Vec::new(), Vec::new());
    if status.is_running() && config.agent_enabled() {
        // One attempt: an agent that is not up yet is not an error for a refresh.
        let interfaces = match reported {
            Some(interfaces) => Ok(interfaces),
            None => qemu.agent().network_get_interfaces().await,
        };
        if let Ok(interfaces) = interfaces {
            (ipv4, ipv6) = addresses(interfaces, mac.as_deref());
        }
    }
    let disk = config.boot_disk();
    let status_text = match status.qmpstatus.as_deref() {
        Some("paused") => "paused".to_owned(),
        _ => status.status.clone(),
    };
    // `ide2: none,media=cdrom`: the seed was detached (`seed_lifetime = "until_ready"`).
    let seed_drive = config.cdrom("ide2").and_then(Result::ok);
    Ok(Some(Observed {
        vmid,
        node: node.to_owned(),
        name: config.name().unwrap_or_default(),
        mark: config.description().as_deref().and_then(Mark::parse),
        cores: config.cores(),
        memory_mib: config.memory_mib(),
        disk_gib: disk
            .as_ref()
            .and_then(|(_, d)| d.size)
            .map(|s| s.gib_ceil()),
        disk_storage: disk
            .as_ref()
            .and_then(|(_, d)| d.storage().map(str::to_owned)),
        bridge: net.as_ref().and_then(|n| n.bridge.clone()),
        vlan_tag: net.as_ref().and_then(|n| n.tag),
        mac,
        tags: ownership::user_tags(&config.tags().join(";")),
        seed_volume: seed_drive
            .as_ref()
            .filter(|d| !d.is_none())
            .map(|d| d.volume.clone()),
        seed_detached: seed_drive.as_ref().is_some_and(|d| d.is_none()),
        status: status_text,
        running: status.is_running(),
        uptime: status.uptime,
        pool,
        ipv4,
        ipv6,
        pending_keys: view.pending_keys.clone(),
        running_with: RunningValues::of(&view.current),
        onboot: config.onboot(),
        being_destroyed: config.is_being_destroyed(),
        startup: config.startup().and_then(Result::ok),
        ha_listed: false,
        networks: networks::seen(config),
    }))
}

/// The usable IPv4 and IPv6 addresses the agent reported, those of the interface with
/// net0's MAC first (so the primary address is on it), loopback left out.
fn addresses(mut interfaces: Vec<GuestInterface>, mac: Option<&str>) -> (Vec<String>, Vec<String>) {
    interfaces.sort_by_key(|i| {
        let same = i
            .hardware_address
            .as_deref()
            .zip(mac)
            .is_some_and(|(a, b)| a.eq_ignore_ascii_case(b));
        !same
    });
    let (mut ipv4, mut ipv6) = (Vec::new(), Vec::new());
    for interface in interfaces.iter().filter(|i| i.name != "lo") {
        for ip in &interface.ip_addresses {
            if ip.is_usable_ipv4() {
                ipv4.push(ip.address.clone());
            } else if ip.kind == "ipv6" && ip.address != "::1" {
                ipv6.push(ip.address.clone());
            }
        }
    }
    (ipv4, ipv6)
}

impl RunningValues {
    fn of(config: &pve::qemu::VmConfig) -> RunningValues {
        let net = config.net(0).and_then(Result::ok);
        RunningValues {
            cores: config.cores(),
            memory_mib: config.memory_mib(),
            bridge: net.as_ref().and_then(|n| n.bridge.clone()),
            vlan_tag: net.as_ref().and_then(|n| n.tag),
            networks: networks::seen(config),
        }
    }
}
