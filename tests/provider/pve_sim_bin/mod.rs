//! The `pve-sim` binary, for tests that run it as a module author does. Cargo gives this
//! package's tests the paths of this package's binaries only, so pve-sim is found beside
//! the provider binary, where a workspace build puts it.

use std::path::{Path, PathBuf};
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
