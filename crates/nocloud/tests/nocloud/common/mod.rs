//! Helpers for tests that judge our images with tools we did not write.
//! Without `TF_ACC` each test skips, with a printed reason, when its tool is
//! not installed; with `TF_ACC=1` (the README's suite, `scripts/test.sh`,
//! which installs them first) a missing tool fails the test at once, naming
//! the command that installs it, instead of leaving the images unjudged.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The Debian package of each tool these tests run, as `scripts/install-test-deps.sh`
/// installs them.
pub const PACKAGES: &[(&str, &str)] = &[
    ("xorriso", "xorriso"),
    ("isoinfo", "genisoimage"),
    ("cloud-init", "cloud-init"),
    ("bsdtar", "libarchive-tools"),
    ("blkid", "util-linux"),
    ("python3", "python3"),
];

/// `name` on PATH, or `None` after reporting why the calling test skips (a
/// failure at once under `TF_ACC`).
pub fn tool(name: &str, test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        missing(test, &format!("`{name}` is not installed"), name);
    }
    found
}

/// The Python that runs cloud-init (Debian's `/usr/bin/python3` with the
/// `cloudinit` package), or `None` after reporting why the test skips.
pub fn cloud_init_python(test: &str) -> Option<PathBuf> {
    let python = PathBuf::from("/usr/bin/python3");
    let importable = python.is_file()
        && Command::new(&python)
            .args(["-c", "import cloudinit"])
            .output()
            .is_ok_and(|out| out.status.success());
    if importable {
        Some(python)
    } else {
        missing(
            test,
            "cloud-init's Python package is not installed",
            "cloud-init",
        );
        None
    }
}

/// A tool `test` needs is missing: under `TF_ACC` the test fails here, naming
/// the command that installs it; otherwise it is reported skipped.
fn missing(test: &str, what: &str, tool: &str) {
    let package = PACKAGES
        .iter()
        .find(|(name, _)| *name == tool)
        .map_or(tool, |(_, package)| package);
    let install =
        format!("run scripts/install-test-deps.sh, or as root: apt-get install -y {package}");
    let tf_acc = std::env::var("TF_ACC").is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(
        !tf_acc,
        "{test}: {what}; TF_ACC=1 runs every test, so {install}"
    );
    skipped(test, &format!("{what} ({install})"));
}

/// Reports `test` skipped the way the workspace's tests do (`skip` in
/// `tests/provider/support/mod.rs`): a `SKIPPED: <test> (<reason>)` line, also appended to
/// the file `PROXMOX_VE_TEST_SKIP_LOG` names, which `scripts/test.sh` counts as skipped.
/// A test that lacks several tools is reported once, with the first one missing.
pub fn skipped(test: &str, reason: &str) {
    static REPORTED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    {
        let mut reported = REPORTED.lock().unwrap();
        if reported.iter().any(|t| t == test) {
            return;
        }
        reported.push(test.to_owned());
    }
    let line = format!("SKIPPED: {test} ({reason})");
    println!("{line}");
    if let Some(path) = std::env::var_os("PROXMOX_VE_TEST_SKIP_LOG").filter(|p| !p.is_empty()) {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
            .expect("cannot record the skip in PROXMOX_VE_TEST_SKIP_LOG");
    }
}

/// Runs a command and insists it succeeds, showing its output if not.
pub fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A seed with all four files, as the provider would build it.
pub fn full_seed() -> nocloud::Seed {
    nocloud::Seed::new("edge-0", "pve1/101")
        .user_data(SAMPLE_USER_DATA)
        .network_config(SAMPLE_NETWORK_CONFIG)
}

pub const SAMPLE_USER_DATA: &str = "\
#cloud-config
packages:
  - haproxy
runcmd:
  - [systemctl, restart, haproxy]
write_files:
  - path: /etc/motd
    content: |
      proxy VM managed by Terraform
";

pub const SAMPLE_NETWORK_CONFIG: &str = "\
version: 2
ethernets:
  eth0:
    match:
      name: \"e*\"
    dhcp4: true
";

/// Writes `bytes` as `name` in `dir` and returns its path.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}
