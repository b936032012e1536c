//! `GET .../agent/file-read` and `POST .../agent/file-write` (qemu-server
//! `API2/Qemu/Agent.pm`), over the simulated guest's files: what `file-write` wrote, and
//! the files cloud-init writes (`/run/cloud-init/result.json`, `status.json` and the
//! `/var/lib/cloud/data/` files they link to, `/var/log/cloud-init-output.log`, the
//! generator's markers), `/etc/hostname` and `/var/lib/cloud/data/instance-id`.
//!
//! Each qemu-ga error becomes PVE's `Agent error: <desc>` (`QemuServer/Agent.pm`
//! `check_agent_error`); qemu-ga's own texts come from `qga/commands-posix.c`
//! (`failed to open file '<path>' (mode: '<mode>'): <strerror>`) and
//! `util/base64.c` (`Base64 data contains invalid characters`).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::agent::{assert_agent_available, blocked_command};
use crate::api::{load_vm, require_any};
use crate::call::{ApiError, ApiResult, Call, Reply};
use crate::cloud_init;
use crate::world::{Vm, World};

/// `$MAX_READ_SIZE`: what one file-read returns at most.
const MAX_READ_SIZE: i64 = 16 * 1024 * 1024;
/// file-read asks qemu-ga for chunks of this size.
const READ_CHUNK: i64 = 1024 * 1024;

/// Directories of the guest's image a written file may be placed in (qemu-ga creates no
/// directories).
const DIRECTORIES: &[&str] = &[
    "/",
    "/etc",
    "/etc/cloud",
    "/home",
    "/opt",
    "/root",
    "/run",
    "/srv",
    "/tmp",
    "/usr",
    "/usr/local",
    "/usr/local/bin",
    "/var",
    "/var/lib",
    "/var/lib/cloud",
    "/var/lib/cloud/data",
    "/var/log",
    "/var/tmp",
];

pub fn file_read(world: &mut World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    let privileges = ["VM.GuestAgent.FileRead", "VM.GuestAgent.Unrestricted"];
    require_any(world, &format!("/vms/{vmid}"), &privileges)?;
    let vm = load_vm(world, call.node(), vmid)?;
    let path = call.str("file").unwrap_or_default();
    let count = call.int("count").unwrap_or(MAX_READ_SIZE);
    let decode = call.bool("decode").unwrap_or(true);
    let offset = call.int("offset").unwrap_or(0);
    agent_step(world, vm, call, "guest-file-open")?;
    refuse_denied_open(vm, &path, "r")?;
    let Some(data) = file(vm, &path, call.now) else {
        return Err(agent_error(&format!(
            "failed to open file '{path}' (mode: 'r'): No such file or directory"
        )));
    };
    if offset > 0 {
        agent_step(world, vm, call, "guest-file-seek")?;
    }
    let mut position = usize::try_from(offset).unwrap_or(usize::MAX);
    let (mut content, mut bytes_read, mut eof) = (String::new(), 0i64, false);
    while bytes_read < count && !eof {
        let chunk_size = (count - bytes_read).min(READ_CHUNK) as usize;
        agent_step(world, vm, call, "guest-file-read")?;
        let chunk = data.get(position..).unwrap_or_default();
        let chunk = &chunk[..chunk.len().min(chunk_size)];
        // stdio's feof: set once a read came back short.
        eof = chunk.len() < chunk_size;
        position += chunk.len();
        bytes_read += chunk.len() as i64;
        if decode {
            // A Perl byte string: each byte is one character to the JSON encoder.
            content.extend(chunk.iter().map(|&b| char::from(b)));
        } else {
            content.push_str(&STANDARD.encode(chunk));
        }
    }
    // A failed close only warns (`check_agent_error` with `$noerr`).
    let mut result = json!({ "content": content, "bytes-read": bytes_read });
    if !eof {
        result["truncated"] = json!(1);
    }
    Ok(Reply::data(result))
}

pub fn file_write(world: &mut World, call: &Call) -> ApiResult {
    let vmid = call.vmid();
    let privileges = ["VM.GuestAgent.FileWrite", "VM.GuestAgent.Unrestricted"];
    require_any(world, &format!("/vms/{vmid}"), &privileges)?;
    let vm = load_vm(world, call.node(), vmid)?;
    let path = call.str("file").unwrap_or_default();
    let content = call.str("content").unwrap_or_default();
    let buf = if call.bool("encode").unwrap_or(true) {
        STANDARD.encode(content.as_bytes())
    } else {
        content
    };
    agent_step(world, vm, call, "guest-file-open")?;
    refuse_denied_open(vm, &path, "wb")?;
    if !directory_exists(vm, parent(&path)) {
        return Err(agent_error(&format!(
            "failed to open file '{path}' (mode: 'wb'): No such file or directory"
        )));
    }
    let write = agent_step(world, vm, call, "guest-file-write").and_then(|()| decode_b64(&buf));
    let close = agent_step(world, vm, call, "guest-file-close");
    let vm = world.vms.get_mut(&vmid).expect("loaded above");
    // Mode `wb` truncated the file at open, whatever happens next.
    let written = vm.guest.files.entry(path).or_default();
    written.clear();
    written.extend(write?);
    close?;
    Ok(Reply::data(Value::Null))
}

/// `agent_cmd` for one qemu-ga command: the agent must answer and allow the command.
fn agent_step(world: &World, vm: &Vm, call: &Call, command: &str) -> Result<(), ApiError> {
    assert_agent_available(world, vm, call)?;
    match blocked_command(world, vm, command) {
        Some(desc) => Err(agent_error(&desc)),
        None => Ok(()),
    }
}

/// `safe_open_or_create`'s `open()` failing with EACCES where the image's SELinux policy
/// keeps the confined qemu-ga out (`GuestProfile::denies_open`).
fn refuse_denied_open(vm: &Vm, path: &str, mode: &str) -> Result<(), ApiError> {
    if vm.guest.profile.denies_open(path) {
        return Err(agent_error(&format!(
            "failed to open file '{path}' (mode: '{mode}'): Permission denied"
        )));
    }
    Ok(())
}

fn agent_error(desc: &str) -> ApiError {
    ApiError::die(format!("Agent error: {desc}"))
}

/// qemu's `qbase64_decode`: only base64 characters and newlines, then GLib's lenient
/// decoder.
fn decode_b64(buf: &str) -> Result<Vec<u8>, ApiError> {
    const VALID: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\n";
    if !buf.chars().all(|c| VALID.contains(c)) {
        return Err(agent_error("Base64 data contains invalid characters"));
    }
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    let lenient = GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone);
    let engine = GeneralPurpose::new(&base64::alphabet::STANDARD, lenient);
    let compact: String = buf.chars().filter(|&c| c != '\n' && c != '=').collect();
    // A lone trailing character carries no whole byte.
    let usable = compact.len() - usize::from(compact.len() % 4 == 1);
    Ok(engine.decode(&compact[..usable]).unwrap_or_default())
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => "",
    }
}

fn directory_exists(vm: &Vm, dir: &str) -> bool {
    DIRECTORIES.contains(&dir) || dir == "/run/cloud-init" && vm.guest.run.is_some()
}

/// The file's bytes as the guest has them at `now`; `None` if it does not exist.
pub fn file(vm: &Vm, path: &str, now: Instant) -> Option<Vec<u8>> {
    let guest = &vm.guest;
    if let Some(data) = guest.files.get(path) {
        return Some(data.clone());
    }
    let run = guest.run.as_ref();
    let text = match path {
        // Links `status_wrapper` makes to the files in `/var/lib/cloud/data`; on the tmpfs,
        // so only a boot whose cloud-init ran has them.
        "/run/cloud-init/result.json" => run.and_then(|r| cloud_init::result_json(r, now)),
        "/run/cloud-init/status.json" => run.map(|r| cloud_init::status_json(r, now)),
        // `init-local` deletes them at each boot cloud-init runs; a boot it does not run
        // keeps what the last run left.
        "/var/lib/cloud/data/result.json" => match run {
            Some(r) => cloud_init::result_json(r, now),
            None => guest.data_result.clone(),
        },
        "/var/lib/cloud/data/status.json" => match run {
            Some(r) => Some(cloud_init::status_json(r, now)),
            None => guest.data_status.clone(),
        },
        // `cloud-init-generator`: `enabled` when ds-identify found a datasource, else
        // `disabled` (also for the disable marker).
        "/run/cloud-init/enabled" => (vm.running && run.is_some()).then(String::new),
        "/run/cloud-init/disabled" => (vm.running && run.is_none()).then(String::new),
        "/etc/cloud/cloud-init.disabled" => {
            cloud_init::cloud_init_disabled(guest, now).then(String::new)
        }
        "/var/log/cloud-init-output.log" => {
            let log = guest.output_log.clone()
                + &run
                    .map(|r| cloud_init::output_of_run(r, now))
                    .unwrap_or_default();
            (!log.is_empty()).then_some(log)
        }
        "/etc/hostname" => Some(format!(
            "{}\n",
            guest.hostname.as_deref().unwrap_or("localhost")
        )),
        "/var/lib/cloud/data/instance-id" => guest.instance_id.as_ref().map(|i| format!("{i}\n")),
        // cloud-init `stages.py` `Init._write_to_cache`: an empty marker in the instance
        // directory once the merged config says `manual_cache_clean` (first boot on).
        "/var/lib/cloud/instance/manual-clean" => {
            (guest.manual_cache_clean && guest.instance_id.is_some()).then(String::new)
        }
        _ => None,
    };
    text.map(String::into_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_as_qemu_takes_it() {
        assert_eq!(decode_b64("aGk=\n").unwrap(), b"hi");
        assert_eq!(decode_b64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(
            decode_b64("a b").unwrap_err().message,
            "Agent error: Base64 data contains invalid characters\n"
        );
    }

    #[test]
    fn parents() {
        assert_eq!(parent("/etc/x"), "/etc");
        assert_eq!(parent("/x"), "/");
        assert_eq!(parent("/run/cloud-init/a"), "/run/cloud-init");
    }
}
