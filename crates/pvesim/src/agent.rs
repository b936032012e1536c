//! The QEMU guest agent as a booted guest would run it.
//!
//! A guest runs the agent once an instance's NoCloud seed (ISO9660 volume label `cidata`,
//! case-insensitive) had `user-data` or `vendor-data` that installs and starts
//! `qemu-guest-agent` (see [`installs_and_starts_agent`]; `cloud_init` decides at boot),
//! and it answers from `agent_boot_ms` after a start with `agent` enabled in the config.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::api::{load_vm, require, subdirs};
use crate::call::{ApiError, ApiResult, Call, Reply};
use crate::guest_profile::Filter;
use crate::schema::AGENT_COMMANDS;
use crate::world::{Net, Vm, World};

/// The command index lists the generic commands and the ones with parameters, sorted.
pub fn index(world: &World, call: &Call) -> ApiResult {
    load_vm(world, call.node(), call.vmid())?;
    let mut names: Vec<&str> = AGENT_COMMANDS.to_vec();
    names.extend([
        "exec",
        "exec-status",
        "file-read",
        "file-write",
        "set-user-password",
    ]);
    names.sort_unstable();
    Ok(Reply::data(subdirs("name", &names)))
}

/// qemu-server `QemuServer/Agent.pm` `assert_agent_available`, on a loaded config.
pub fn assert_agent_available(world: &World, vm: &Vm, call: &Call) -> Result<(), ApiError> {
    if !vm.config.contains_key("agent") {
        return Err(ApiError::die("No QEMU guest agent configured"));
    }
    if !vm.running {
        return Err(ApiError::die(format!("VM {} is not running", vm.vmid)));
    }
    let answers_at = pings_from(world, vm);
    if answers_at.is_some_and(|at| call.now >= at) {
        return Ok(());
    }
    let timeout = Duration::from_millis(world.timings.agent_ping_timeout_ms);
    let silent = ApiError::die("QEMU guest agent is not running").after(timeout);
    // QEMU reads the ping from the qga socket only once qemu-ga opened its port (qemu
    // `hw/char/virtio-serial-bus.c` `virtio_serial_guest_ready`), so an agent that starts
    // within the timeout answers it then.
    match answers_at.filter(|at| *at <= call.now + timeout) {
        Some(at) => Err(silent.pending_until(at)),
        None => Err(silent),
    }
}

/// From when the guest's agent answers `qga_check_running`'s ping: `None` for a paused VM,
/// a guest without an agent, or one whose qemu-ga blocks `guest-ping` (failing the ping like
/// a silent agent).
pub fn pings_from(world: &World, vm: &Vm) -> Option<Instant> {
    if vm.paused || blocked_command(world, vm, "guest-ping").is_some() {
        return None;
    }
    vm.agent.as_ref().map(|agent| agent.ready_at)
}

/// qemu-ga's answer to a command its allow/block list disabled (`qapi/qmp-dispatch.c`
/// `qmp_dispatch`, with the reason `qga/main.c` gives, worded as the guest's qemu-ga
/// release words it): the `agent_blocked_commands` fault's block-list first, then the
/// image's own configuration (`rhel-9`'s allow-list, `old-qemu-agent`'s block-list).
pub fn blocked_command(world: &World, vm: &Vm, command: &str) -> Option<String> {
    let name = vm
        .config
        .get("name")
        .map(String::as_str)
        .unwrap_or_default();
    let profile = vm.guest.profile;
    let fault = world
        .faults
        .agent_blocked_commands
        .iter()
        .filter(|f| regex::Regex::new(&f.vm_name_regex).is_ok_and(|re| re.is_match(name)))
        .any(|f| f.commands.iter().any(|c| c == command));
    let filter = match fault {
        true => Some(Filter::Block),
        false => profile.image_filter(command),
    };
    filter.map(|filter| profile.disabled_wording().desc(command, filter))
}

/// The rule for "this seed installs and starts qemu-guest-agent":
/// - `#cloud-config`: `packages` lists `qemu-guest-agent`, and a `runcmd` or `bootcmd`
///   entry mentions `qemu-guest-agent` together with `start` or `--now`;
/// - a script (`#!`): one line installs it (`install` and `qemu-guest-agent`) and one
///   starts it (`qemu-guest-agent` with `start` or `--now`).
///
/// A MIME multipart message (what `cloud-init devel make-mime` writes) counts when any of
/// its `text/cloud-config` or `text/x-shellscript` parts does.
pub fn installs_and_starts_agent(text: &str) -> bool {
    if let Some(parts) = mime_parts(text) {
        return parts
            .into_iter()
            .any(|(content_type, body)| match content_type.as_str() {
                "text/cloud-config" if body.starts_with("#cloud-config") => {
                    installs_and_starts_agent(&body)
                }
                "text/cloud-config" => installs_and_starts_agent(&format!("#cloud-config\n{body}")),
                "text/x-shellscript" | "multipart/mixed" => installs_and_starts_agent(&body),
                _ => false,
            });
    }
    single_part_installs_and_starts_agent(text)
}

/// The parts of a MIME multipart message as (content type, body); `None` if `text` is not one.
pub(crate) fn mime_parts(text: &str) -> Option<Vec<(String, String)>> {
    let (headers, body) = split_headers(text)?;
    let content_type = header(&headers, "content-type")?;
    if !content_type.to_ascii_lowercase().starts_with("multipart/") {
        return None;
    }
    let boundary = content_type
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))?
        .trim_matches('"')
        .to_string();
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    for chunk in body.split(delimiter.as_str()).skip(1) {
        if chunk.starts_with("--") {
            break;
        }
        let chunk = chunk.strip_prefix('\n').unwrap_or(chunk);
        let Some((part_headers, part_body)) = split_headers(chunk) else {
            continue;
        };
        let part_type = header(&part_headers, "content-type")
            .map(|t| {
                t.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            })
            .unwrap_or_else(|| "text/plain".into());
        let part_body = if part_type.starts_with("multipart/") {
            chunk.to_string()
        } else {
            part_body.to_string()
        };
        parts.push((part_type, part_body));
    }
    Some(parts)
}

/// Header lines up to the first empty line, and the rest.
fn split_headers(text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let end = text.find("\n\n")?;
    let mut headers = Vec::new();
    for line in text[..end].lines() {
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    Some((headers, &text[end + 2..]))
}

fn header(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

/// A user-data cloud-config with `vendor_data: {enabled: false}` (or a false `enabled`
/// in flow style): cloud-init then runs none of the vendor-data.
pub(crate) fn user_data_disables_vendor_data(user_data: &str) -> bool {
    if !user_data.starts_with("#cloud-config") {
        return false;
    }
    let falsy = |v: &str| {
        matches!(
            v.trim()
                .trim_matches(['"', '\'', '}', ' '])
                .to_ascii_lowercase()
                .as_str(),
            "false" | "no" | "off" | "0"
        )
    };
    top_level_sections(user_data)
        .iter()
        .filter(|(key, _)| key == "vendor_data")
        .any(|(_, body)| {
            body.iter().any(|line| {
                line.split(['{', ','])
                    .any(|item| item.trim().strip_prefix("enabled:").is_some_and(falsy))
            })
        })
}

fn single_part_installs_and_starts_agent(text: &str) -> bool {
    const AGENT: &str = "qemu-guest-agent";
    let starts =
        |line: &str| line.contains(AGENT) && (line.contains("start") || line.contains("--now"));
    if text.starts_with("#!") {
        let installs = text
            .lines()
            .any(|l| l.contains("install") && l.contains(AGENT));
        return installs && text.lines().any(starts);
    }
    if !text.starts_with("#cloud-config") {
        return false;
    }
    let sections = top_level_sections(text);
    let packages = sections
        .iter()
        .filter(|(key, _)| key == "packages")
        .any(|(_, body)| {
            body.iter().any(|line| {
                let item = line.trim().trim_start_matches('-').trim();
                item == AGENT
                    || item.trim_matches(['"', '\'']) == AGENT
                    || (item.starts_with('[')
                        && item
                            .trim_matches(['[', ']'])
                            .split(',')
                            .any(|p| p.trim().trim_matches(['"', '\'']) == AGENT))
            })
        });
    let started = sections
        .iter()
        .filter(|(key, _)| key == "runcmd" || key == "bootcmd")
        .any(|(_, body)| body.iter().any(|l| starts(l)));
    packages && started
}

/// The last top-level `key` of a cloud-config (or of the cloud-config parts of a MIME
/// multipart message) that `pick` makes something of, the later part and the later key
/// first, as cloud-init's merge lets a later value win. `pick` gets the key's lines.
pub(crate) fn cloud_config_value<T>(
    text: &str,
    key: &str,
    pick: impl Fn(Vec<String>) -> Option<T>,
) -> Option<T> {
    let parts: Vec<String> = match mime_parts(text) {
        Some(parts) => parts
            .into_iter()
            .filter(|(kind, _)| kind == "text/cloud-config")
            .map(|(_, body)| body)
            .collect(),
        None if text.starts_with("#cloud-config") => vec![text.to_string()],
        None => Vec::new(),
    };
    parts.iter().rev().find_map(|part| {
        top_level_sections(part)
            .into_iter()
            .rev()
            .find(|(k, _)| k == key)
            .and_then(|(_, body)| pick(body))
    })
}

/// `key:` at column 0 and the lines belonging to it (including an inline value).
pub(crate) fn top_level_sections(text: &str) -> Vec<(String, Vec<String>)> {
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let top = !line.starts_with([' ', '\t', '-']);
        if top && let Some((key, rest)) = line.split_once(':') {
            let mut body = Vec::new();
            if !rest.trim().is_empty() {
                body.push(rest.trim().to_string());
            }
            sections.push((key.trim().to_string(), body));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push(line.to_string());
        }
    }
    sections
}

/// meta-data `local-hostname` (YAML or JSON), else user-data `hostname`/`fqdn`.
pub(crate) fn hostname_from_seed(
    meta_data: Option<&str>,
    user_data: Option<&str>,
) -> Option<String> {
    let find = |text: &str, key: &str| {
        text.lines().find_map(|line| {
            let line = line.trim().trim_end_matches(',');
            let rest = line
                .strip_prefix(key)
                .or_else(|| line.strip_prefix(&format!("\"{key}\"")))?;
            let value = rest.trim_start().strip_prefix(':')?.trim();
            let value = value.trim_matches(['"', '\'']);
            (!value.is_empty()).then(|| value.to_string())
        })
    };
    if let Some(meta) = meta_data {
        if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(meta)
            && let Some(Value::String(name)) = map.get("local-hostname")
        {
            return Some(name.clone());
        }
        if let Some(name) = find(meta, "local-hostname") {
            return Some(name);
        }
    }
    let user = user_data?;
    find(user, "hostname")
        .or_else(|| find(user, "fqdn").map(|f| f.split('.').next().unwrap_or_default().to_string()))
}

/// EUI-64 link-local address from a MAC.
fn link_local(mac: &str) -> String {
    let bytes: Vec<u8> = mac
        .split(':')
        .filter_map(|b| u8::from_str_radix(b, 16).ok())
        .collect();
    if bytes.len() != 6 {
        return "fe80::1".into();
    }
    let groups = [
        u16::from_be_bytes([bytes[0] ^ 0x02, bytes[1]]),
        u16::from_be_bytes([bytes[2], 0xff]),
        u16::from_be_bytes([0xfe, bytes[3]]),
        u16::from_be_bytes([bytes[4], bytes[5]]),
    ];
    format!(
        "fe80::{:x}:{:x}:{:x}:{:x}",
        groups[0], groups[1], groups[2], groups[3]
    )
}

pub fn command(world: &mut World, call: &Call, command: &str) -> ApiResult {
    let vmid = call.vmid();
    check_agent_permission(world, vmid, command)?;
    let vm = load_vm(world, call.node(), vmid)?;
    assert_agent_available(world, vm, call)?;
    // A qemu-ga error is no Perl error here: `mon_cmd` hands it back and the generic
    // endpoint returns it as its result (`register_command`; `QMPClient.pm` `cmd`).
    if let Some(desc) = blocked_command(world, vm, &format!("guest-{command}")) {
        let error = json!({"class": "CommandNotFound", "desc": desc});
        return Ok(Reply::data(json!({ "result": { "error": error } })));
    }
    let hostname = vm
        .agent
        .as_ref()
        .map(|a| a.hostname.clone())
        .unwrap_or_default();
    let nets: Vec<(String, Net)> = vm
        .config
        .iter()
        .filter(|(k, _)| crate::world::is_net_key(k))
        .map(|(k, v)| (k.clone(), Net::parse(v)))
        .collect();
    let result = match command {
        "ping" => json!({}),
        "get-host-name" => json!({ "host-name": hostname }),
        "get-osinfo" => vm.guest.profile.osinfo(),
        "info" => agent_info(world, vm),
        "network-get-interfaces" => network_interfaces(world, nets),
        other => {
            return Err(ApiError::die(format!(
                "VM {vmid} qga command 'guest-{other}' failed - unsupported by pve-sim"
            )));
        }
    };
    Ok(Reply::data(json!({ "result": result })))
}

/// Read-only commands need `VM.GuestAgent.Audit` or `VM.GuestAgent.Unrestricted`, the
/// rest `VM.GuestAgent.Unrestricted`.
fn check_agent_permission(world: &World, vmid: u32, command: &str) -> Result<(), ApiError> {
    let vm_path = format!("/vms/{vmid}");
    if matches!(
        command,
        "network-get-interfaces" | "ping" | "get-osinfo" | "get-host-name" | "info"
    ) {
        if !world.has_privilege(&vm_path, "VM.GuestAgent.Audit")
            && !world.has_privilege(&vm_path, "VM.GuestAgent.Unrestricted")
        {
            return Err(ApiError::perm(format!(
                "{vm_path}, VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted"
            )));
        }
    } else {
        require(world, &vm_path, "VM.GuestAgent.Unrestricted")?;
    }
    Ok(())
}

/// `guest-info`: the agent's version and the commands pve-sim answers (`enabled: false`
/// for the ones a fault blocks).
fn agent_info(world: &World, vm: &Vm) -> Value {
    let commands: Vec<Value> = [
        "guest-ping",
        "guest-info",
        "guest-get-host-name",
        "guest-get-osinfo",
        "guest-network-get-interfaces",
        "guest-shutdown",
        "guest-file-open",
        "guest-file-close",
        "guest-file-read",
        "guest-file-write",
        "guest-file-seek",
    ]
    .iter()
    .map(|name| {
        let enabled = blocked_command(world, vm, name).is_none();
        json!({"name": name, "enabled": enabled, "success-response": true})
    })
    .collect();
    json!({"version": vm.guest.profile.agent_version(), "supported_commands": commands})
}

/// `guest-network-get-interfaces`: loopback, then one interface per NIC with its DHCP
/// lease (if its bridge hands one out) and its link-local IPv6 address.
fn network_interfaces(world: &mut World, nets: Vec<(String, Net)>) -> Value {
    let mut interfaces = vec![json!({
        "name": "lo",
        "hardware-address": "00:00:00:00:00:00",
        "ip-addresses": [
            {"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8},
            {"ip-address": "::1", "ip-address-type": "ipv6", "prefix": 128},
        ],
        "statistics": statistics(),
    })];
    for (index, (key, net)) in nets.into_iter().enumerate() {
        let index_from_key: usize = key.trim_start_matches("net").parse().unwrap_or(index);
        let mac = net.mac.clone().unwrap_or_default().to_lowercase();
        let mut addresses = Vec::new();
        if let Some(bridge) = net.bridge()
            && let Some(ip) = world.lease_ipv4(bridge, net.tag(), &mac)
        {
            addresses.push(json!({
                "ip-address": ip,
                "ip-address-type": "ipv4",
                "prefix": crate::world::LEASE_PREFIX,
            }));
        }
        addresses.push(json!({
            "ip-address": link_local(&mac),
            "ip-address-type": "ipv6",
            "prefix": 64,
        }));
        interfaces.push(json!({
            "name": format!("ens{}", 18 + index_from_key),
            "hardware-address": mac,
            "ip-addresses": addresses,
            "statistics": statistics(),
        }));
    }
    Value::Array(interfaces)
}

fn statistics() -> Value {
    json!({
        "rx-bytes": 0, "rx-packets": 0, "rx-errs": 0, "rx-dropped": 0,
        "tx-bytes": 0, "tx-packets": 0, "tx-errs": 0, "tx-dropped": 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_config_must_install_and_start_the_agent() {
        let good = "#cloud-config\npackages:\n  - nginx\n  - qemu-guest-agent\nruncmd:\n  - \
            systemctl enable --now qemu-guest-agent\n";
        assert!(installs_and_starts_agent(good));
        let inline = "#cloud-config\npackages: [qemu-guest-agent]\nbootcmd:\n  - [systemctl, \
            start, qemu-guest-agent]\n";
        assert!(installs_and_starts_agent(inline));
        let not_started = "#cloud-config\npackages:\n  - qemu-guest-agent\n";
        let multipart = concat!(
            "Content-Type: multipart/mixed; boundary=\"XYZ\"\nMIME-Version: 1.0\n\n",
            "--XYZ\nContent-Type: text/cloud-config\n\n",
            "#cloud-config\npackages:\n  - qemu-guest-agent\n",
            "runcmd:\n  - [systemctl, enable, --now, qemu-guest-agent]\n\n--XYZ--\n",
        );
        assert!(installs_and_starts_agent(multipart));
        let multipart_script = concat!(
            "Content-Type: multipart/mixed; boundary=\"B\"\n\n",
            "--B\nContent-Type: text/plain\n\nhello\n",
            "--B\nContent-Type: text/x-shellscript\n\n#!/bin/sh\n",
            "apt-get install -y qemu-guest-agent\nsystemctl start qemu-guest-agent\n--B--\n",
        );
        assert!(installs_and_starts_agent(multipart_script));
        let multipart_unrelated = concat!(
            "Content-Type: multipart/mixed; boundary=\"B\"\n\n",
            "--B\nContent-Type: text/x-shellscript\n\n#!/bin/sh\necho hi\n--B--\n",
        );
        assert!(!installs_and_starts_agent(multipart_unrelated));
        assert!(user_data_disables_vendor_data(
            "#cloud-config\nvendor_data:\n  enabled: false\n"
        ));
        assert!(user_data_disables_vendor_data(
            "#cloud-config\nvendor_data: {enabled: false}\n"
        ));
        assert!(!user_data_disables_vendor_data(
            "#cloud-config\nvendor_data:\n  enabled: true\n"
        ));
        assert!(!installs_and_starts_agent(not_started));
        let not_installed = "#cloud-config\nruncmd:\n  - systemctl start qemu-guest-agent\n";
        assert!(!installs_and_starts_agent(not_installed));
        let script =
            "#!/bin/sh\napt-get install -y qemu-guest-agent\nsystemctl start qemu-guest-agent\n";
        assert!(installs_and_starts_agent(script));
        assert!(!installs_and_starts_agent(
            "packages:\n - qemu-guest-agent\n"
        ));
    }

    #[test]
    fn hostname_comes_from_meta_data() {
        assert_eq!(
            hostname_from_seed(Some("instance-id: x\nlocal-hostname: edge-1\n"), None),
            Some("edge-1".into())
        );
        assert_eq!(
            hostname_from_seed(Some("{\"local-hostname\": \"edge-2\"}"), None),
            Some("edge-2".into())
        );
        assert_eq!(
            hostname_from_seed(
                Some("instance-id: x\n"),
                Some("#cloud-config\nhostname: h3\n")
            ),
            Some("h3".into())
        );
    }

    #[test]
    fn link_local_is_eui64() {
        assert_eq!(link_local("bc:24:11:aa:bb:cc"), "fe80::be24:11ff:feaa:bbcc");
    }
}
