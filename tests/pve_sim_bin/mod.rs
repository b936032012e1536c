//! The `pve-sim` binary, run as a module author runs it (`pve-sim --listen 127.0.0.1:0
//! --state-dir DIR`). Cargo gives this package's tests the paths of this package's binaries
//! only, so pve-sim is found beside the provider binary, where a workspace build puts it.

#![allow(dead_code)] // each test binary uses a different part

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::SystemTime;

/// `target/<profile>/pve-sim`, checked to exist and to be newer than pvesim's sources: an old
/// binary would test yesterday's simulator without saying so.
pub fn pve_sim_binary() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_terraform-provider-proxmox"))
        .with_file_name(format!("pve-sim{}", std::env::consts::EXE_SUFFIX));
    let hint = "`cargo test --workspace` builds it; alone: `cargo build -p pvesim --bin pve-sim`";
    let built =
        modified(&path).unwrap_or_else(|| panic!("{} does not exist: {hint}", path.display()));
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/pvesim");
    let newest_source = newest_modified(&crate_dir.join("src"))
        .into_iter()
        .chain(modified(&crate_dir.join("Cargo.toml")))
        .max()
        .expect("crates/pvesim has sources");
    assert!(
        built >= newest_source,
        "{} is older than crates/pvesim's sources: {hint}",
        path.display()
    );
    path
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn newest_modified(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let time = if path.is_dir() {
            newest_modified(&path)
        } else {
            modified(&path)
        };
        newest = newest.max(time);
    }
    newest
}

/// A `pve-sim` process; stopped (SIGKILL, then reaped) when dropped.
pub struct RunningSim {
    child: Child,
    pub endpoint: String,
}

impl RunningSim {
    /// Starts `pve-sim --listen 127.0.0.1:0 --state-dir STATE_DIR [ARGS…]` in `cwd` and waits
    /// for the endpoint line it prints once it accepts connections (by then it has written
    /// STATE_DIR/endpoint, token and ca.pem).
    pub fn start(cwd: &Path, state_dir: &str, args: &[&str]) -> Self {
        let mut child = Command::new(pve_sim_binary())
            .args(["--listen", "127.0.0.1:0", "--state-dir", state_dir])
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("pve-sim could not be started");
        let stdout = child.stdout.take().unwrap();
        let mut endpoint = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut endpoint)
            .unwrap();
        let endpoint = endpoint.trim().to_owned();
        if !endpoint.starts_with("https://") {
            let status = child.wait().unwrap();
            panic!("pve-sim exited ({status}) without printing its endpoint");
        }
        Self { child, endpoint }
    }
}

impl Drop for RunningSim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
