//! What this working directory's own runs did, kept beside the configuration.
//!
//! Terraform tells a provider nothing about the state it writes to, and a finished VM of a
//! name must never be taken by another state. Two things still need to know "this VM is
//! this configuration's own", and the journal is how they know:
//! - A create that finished on PVE but was killed before Terraform stored it. Its create
//!   token is written here before the clone and stays *unconfirmed* until a later plan,
//!   refresh or update shows the token in Terraform's state. The next create of the name
//!   resumes a finished VM whose token is unconfirmed here, with no import.
//! - A `create_before_destroy` replacement. The plan that replaces a VM records its token
//!   as *being replaced*; the new VM's create then makes a second VM of the name beside it
//!   instead of refusing it as another state's.
//!
//! The journal lives under Terraform's data directory (`TF_DATA_DIR`, default
//! `.terraform/`, relative to the working directory Terraform starts the provider in), one
//! folder per workspace and one small file per fleet and name. Another working directory,
//! workspace or machine has its own (or none): there every rule of ownership holds as if
//! the journal did not exist. Failing to read or write it only loses the recovery.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug)]
pub struct Journal {
    /// The workspace's folder; `None` keeps nothing (tests of the lifecycle alone).
    dir: Option<PathBuf>,
    /// One read-modify-write at a time in this process.
    lock: Mutex<()>,
}

#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
struct Entry {
    /// Create tokens of this directory's creates that Terraform's state may not hold.
    #[serde(default)]
    unconfirmed: Vec<String>,
    /// Tokens of this directory's VMs that a plan replaces.
    #[serde(default)]
    replacing: Vec<String>,
}

impl Journal {
    /// The journal of the working directory and workspace this process serves.
    pub fn for_working_directory() -> Self {
        let data_dir = std::env::var_os("TF_DATA_DIR")
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from(".terraform"), PathBuf::from);
        let workspace = std::env::var("TF_WORKSPACE")
            .ok()
            .filter(|w| !w.is_empty())
            .or_else(|| {
                std::fs::read_to_string(data_dir.join("environment"))
                    .ok()
                    .map(|w| w.trim().to_owned())
                    .filter(|w| !w.is_empty())
            })
            .unwrap_or_else(|| "default".to_owned());
        let dir = std::env::current_dir().ok().map(|cwd| {
            cwd.join(&data_dir)
                .join("proxyvm")
                .join(file_safe(&workspace))
        });
        Self::at(dir)
    }

    /// A journal kept in `dir` (or nowhere).
    pub fn at(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            lock: Mutex::new(()),
        }
    }

    /// Before a create's first write: its token may soon name a VM Terraform never stores.
    pub fn creating(&self, fleet: &str, name: &str, token: &str) {
        self.change(fleet, name, |entry| {
            push_once(&mut entry.unconfirmed, token)
        });
    }

    /// Terraform's state holds `token`: from now on its VM is resumed by no create, so a
    /// `state rm` or a lost state makes it another state's VM like any other.
    pub fn confirmed(&self, fleet: &str, name: &str, token: &str) {
        self.change(fleet, name, |entry| {
            entry.unconfirmed.retain(|t| t != token)
        });
    }

    /// A plan replaces the VM of `token`.
    pub fn replacing(&self, fleet: &str, name: &str, token: &str) {
        self.change(fleet, name, |entry| push_once(&mut entry.replacing, token));
    }

    /// A plan keeps the VM of `token` (no replacement, or no longer).
    pub fn not_replaced(&self, fleet: &str, name: &str, token: &str) {
        self.change(fleet, name, |entry| entry.replacing.retain(|t| t != token));
    }

    /// The VM of `token` is gone (destroyed) or its create was dropped.
    pub fn forget(&self, fleet: &str, name: &str, token: &str) {
        self.change(fleet, name, |entry| {
            entry.unconfirmed.retain(|t| t != token);
            entry.replacing.retain(|t| t != token);
        });
    }

    /// Whether `token` is a create of this directory that Terraform may not have stored.
    pub fn is_unconfirmed(&self, fleet: &str, name: &str, token: &str) -> bool {
        self.read(fleet, name)
            .unconfirmed
            .iter()
            .any(|t| t == token)
    }

    /// Whether a plan of this directory replaces the VM of `token`.
    pub fn is_replaced(&self, fleet: &str, name: &str, token: &str) -> bool {
        self.read(fleet, name).replacing.iter().any(|t| t == token)
    }

    fn path(&self, fleet: &str, name: &str) -> Option<PathBuf> {
        let digest = Sha256::digest(format!("{fleet}\0{name}").as_bytes());
        let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.as_ref().map(|dir| dir.join(format!("{hex}.json")))
    }

    fn read(&self, fleet: &str, name: &str) -> Entry {
        self.path(fleet, name)
            .and_then(|path| std::fs::read(path).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    fn change(&self, fleet: &str, name: &str, edit: impl FnOnce(&mut Entry)) {
        let Some(path) = self.path(fleet, name) else {
            return;
        };
        let _one_at_a_time = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut entry = self.read(fleet, name);
        let before = serde_json::to_vec(&entry).unwrap_or_default();
        edit(&mut entry);
        let after = serde_json::to_vec(&entry).unwrap_or_default();
        if before == after {
            return;
        }
        if let Err(error) = write_atomically(&path, &after) {
            tracing::warn!(path = %path.display(), %error, "could not write the provider's \
                journal; a create killed before Terraform stored it will need an import");
        }
    }
}

fn push_once(list: &mut Vec<String>, token: &str) {
    if !list.iter().any(|t| t == token) {
        list.push(token.to_owned());
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, path)
}

/// A workspace name as one path component.
fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_stays_resumable_until_the_state_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::at(Some(dir.path().join("default")));
        journal.creating("", "edge-0", "t1");
        journal.creating("", "edge-0", "t2");
        assert!(journal.is_unconfirmed("", "edge-0", "t1"));
        assert!(
            !journal.is_unconfirmed("prod", "edge-0", "t1"),
            "fleets apart"
        );
        assert!(!journal.is_unconfirmed("", "edge-1", "t1"), "names apart");
        journal.confirmed("", "edge-0", "t2");
        assert!(journal.is_unconfirmed("", "edge-0", "t1"));
        assert!(!journal.is_unconfirmed("", "edge-0", "t2"));
        // Another process reads what this one wrote.
        let again = Journal::at(Some(dir.path().join("default")));
        journal.creating("", "edge-0", "t3");
        assert!(again.is_unconfirmed("", "edge-0", "t3"));
        again.forget("", "edge-0", "t3");
        assert!(!journal.is_unconfirmed("", "edge-0", "t3"));
    }

    #[test]
    fn a_replacement_is_recorded_by_its_plan_and_dropped_when_kept_or_gone() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::at(Some(dir.path().to_owned()));
        journal.replacing("", "edge-0", "old");
        assert!(journal.is_replaced("", "edge-0", "old"));
        journal.not_replaced("", "edge-0", "old");
        assert!(!journal.is_replaced("", "edge-0", "old"));
        journal.replacing("", "edge-0", "old");
        journal.forget("", "edge-0", "old");
        assert!(!journal.is_replaced("", "edge-0", "old"));
    }

    #[test]
    fn no_directory_keeps_nothing_and_workspace_names_stay_one_component() {
        let journal = Journal::at(None);
        journal.creating("", "edge-0", "t1");
        assert!(!journal.is_unconfirmed("", "edge-0", "t1"));
        assert_eq!(file_safe("../prod/x"), "_prod_x");
        assert_eq!(file_safe("team-a"), "team-a");
    }
}
