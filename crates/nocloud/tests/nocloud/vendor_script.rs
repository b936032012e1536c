//! Runs the guest-agent vendor script under `/bin/sh` with stand-in
//! `apt-get`, `systemctl` and `qemu-ga` commands that only record their
//! arguments, so its decisions are checked without touching this machine.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::tool;
use nocloud::render::GUEST_AGENT_SCRIPT;

/// Writes an executable stand-in that appends its name and arguments to
/// `log` and exits with `status`.
fn stand_in(bin: &Path, name: &str, log: &Path, status: u8) {
    let path = bin.join(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho \"{name} $*\" >> '{}'\nexit {status}\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs the script with only `bin` on PATH; returns whether it succeeded and
/// the recorded calls.
fn run_script(bin: &Path, log: &Path) -> (bool, Vec<String>) {
    let sh = Path::new("/bin/sh");
    let script = bin.parent().unwrap().join("guest-agent.sh");
    std::fs::write(&script, GUEST_AGENT_SCRIPT).unwrap();
    let status = Command::new(sh)
        .arg(&script)
        .env_clear()
        .env("PATH", bin)
        .status()
        .unwrap();
    let calls = std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    (status.success(), calls)
}

fn have_sh(test: &str) -> bool {
    // tool() looks on PATH; the script itself names /bin/sh.
    Path::new("/bin/sh").is_file() || tool("sh", test).is_some()
}

#[test]
fn installs_with_apt_when_the_agent_is_missing_then_starts_it() {
    if !have_sh("installs_with_apt_when_the_agent_is_missing_then_starts_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.path().join("calls");
    stand_in(&bin, "apt-get", &log, 0);
    stand_in(&bin, "dnf", &log, 0);
    stand_in(&bin, "systemctl", &log, 0);
    assert_eq!(
        run_script(&bin, &log),
        (
            true,
            vec![
                "apt-get -o DPkg::Lock::Timeout=600 update -q".to_owned(),
                "apt-get -o DPkg::Lock::Timeout=600 install -y -q qemu-guest-agent".to_owned(),
                "systemctl enable --now qemu-guest-agent".to_owned(),
                "systemctl start qemu-guest-agent".to_owned(),
            ]
        )
    );
}

#[test]
fn only_starts_the_agent_when_it_is_installed() {
    if !have_sh("only_starts_the_agent_when_it_is_installed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.path().join("calls");
    stand_in(&bin, "qemu-ga", &log, 0);
    stand_in(&bin, "apt-get", &log, 0);
    // systemctl fails here (no systemd, say): the script's status says so.
    stand_in(&bin, "systemctl", &log, 1);
    let (succeeded, calls) = run_script(&bin, &log);
    assert_eq!(
        calls,
        [
            "systemctl enable --now qemu-guest-agent",
            "systemctl start qemu-guest-agent",
        ]
    );
    // cloud-init then logs the vendor script as failed.
    assert!(!succeeded);
}

#[test]
fn uses_dnf_where_there_is_no_apt() {
    if !have_sh("uses_dnf_where_there_is_no_apt") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.path().join("calls");
    stand_in(&bin, "dnf", &log, 0);
    stand_in(&bin, "systemctl", &log, 0);
    assert_eq!(
        run_script(&bin, &log),
        (
            true,
            vec![
                "dnf install -y qemu-guest-agent".to_owned(),
                "systemctl enable --now qemu-guest-agent".to_owned(),
                "systemctl start qemu-guest-agent".to_owned(),
            ]
        )
    );
}
