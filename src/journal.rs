//! What this working directory's own runs did, kept beside the configuration.
//!
//! Terraform tells a provider nothing about the state it writes to, and a finished VM of a
//! name must never be taken by another state. Two things still need to know "this VM is
//! this configuration's own", and the journal is how they know:
//! - A create that finished on PVE but was killed before Terraform stored it. Its create
//!   token is written here before the clone and stays *unconfirmed* until a later plan,
//!   refresh or update shows the token in Terraform's state. The next create of the name
//!   resumes a finished VM whose token is unconfirmed here, with no import, and, once the
//!   entry records the VM's VMID and mark, only that VM with that mark.
//! - A `create_before_destroy` replacement. The plan that replaces a VM records its token
//!   as *being replaced*; the new VM's create then makes a second VM of the name beside it
//!   instead of refusing it as another state's.
//!
//! The journal lives under Terraform's data directory (`TF_DATA_DIR`, default
//! `.terraform/`, relative to the working directory Terraform starts the provider in): one
//! folder per workspace, in it one folder per fleet and name, and in that one file per
//! token and fact (`<token hash>.unconfirmed`, `<token hash>.replacing`). A fact is made
//! true by writing its file whole (see `files`) and false by deleting it, so no change reads
//! and rewrites what another process may be changing: any number of provider processes
//! (two provider aliases, a plan beside an apply) share one journal and lose nothing.
//! Another working directory, workspace or machine has its own (or none): there every rule
//! of ownership holds as if the journal did not exist. Failing to read or write it only
//! loses the recovery, and is never silent: it becomes a [`JournalWarning`], which the
//! caller shows as a Terraform warning ([`Journal::report_to`]).

mod files;
mod legacy;

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How old a temporary file must be to count as a killed writer's: a live write takes
/// milliseconds.
const STALE_TEMP: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct Journal {
    /// The workspace's folder; `None` keeps nothing (tests of the lifecycle alone).
    dir: Option<PathBuf>,
    /// What this process did and saw. Never the entries, which live in their files alone.
    local: Mutex<Local>,
    /// The Terraform run this process serves (see [`Run`]).
    run: Run,
}

/// The Terraform run a provider process serves, for telling a replacement this run planned
/// from one an earlier run planned and never carried out (#38: a plan that replaced a VM,
/// then `state rm`, or a state file a killed terraform left empty, and an apply: that VM is
/// no longer this state's, and a create must not take it for its predecessor).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    /// The Terraform process (see `invocation::run_identity`); `None` when unknown.
    pub identity: Option<String>,
    /// It applies a saved plan: the plan, and its records, are an earlier process's.
    pub applies_saved_plan: bool,
}

#[derive(Debug, Default)]
struct Local {
    /// Killed writers' temporary files were looked for.
    swept: bool,
    /// Names (by key) whose first-layout file this process found moved or moved itself.
    settled: HashSet<String>,
    /// Names whose first-layout file could not be moved: it is read where it lies.
    in_place: HashSet<String>,
    warnings: Vec<JournalWarning>,
    /// Every warning this process made, so each is shown once.
    reported: HashSet<String>,
}

/// Something the journal could not read or write, for the caller to show as a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalWarning {
    pub summary: &'static str,
    pub detail: String,
}

const UNREADABLE: &str = "Proxy VM journal entry unreadable";
const NOT_WRITTEN: &str = "Proxy VM journal not updated";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fact {
    Unconfirmed,
    Replacing,
    /// Terraform's state held the token's VM once (a refresh saw it).
    Held,
}

/// What the journal was asked to do, for the warning when it could not.
#[derive(Debug, Clone, Copy)]
enum Change {
    RecordCreate,
    RecordVm,
    Confirm,
    RecordHeld,
    RecordHandedOver,
    RecordReplacement,
    ForgetReplacement,
    MoveFirstLayout,
}

impl Change {
    fn consequence(self, name: &str) -> String {
        match self {
            Change::RecordCreate => format!(
                "If this apply is killed before Terraform stores the VM of `{name}`, the next \
                 apply cannot resume it and asks for an import instead."
            ),
            Change::RecordVm => format!(
                "The journal keeps no VMID and mark for this create of `{name}`, so a later \
                 create here resumes its VM without checking them."
            ),
            Change::Confirm => format!(
                "The journal still counts this create of `{name}` as one Terraform never \
                 stored, so a create here could resume its VM after it left this state."
            ),
            Change::RecordHeld => format!(
                "A plan here that replaces this state's own VM of `{name}` without a refresh \
                 (a taint with -refresh=false) may refuse it as another state's; the apply \
                 decides again after the destroy."
            ),
            Change::RecordHandedOver => format!(
                "The journal still counts this create of `{name}` as one killed before it \
                 answered Terraform: if a `state rm` takes its VM out of the state before any \
                 plan or refresh, the next full destroy here removes that VM."
            ),
            Change::RecordReplacement => format!(
                "A `create_before_destroy` replacement of `{name}` will be refused as another \
                 state's VM; apply again, or replace it without `create_before_destroy`."
            ),
            Change::ForgetReplacement => format!(
                "The journal still says a plan replaces the VM of `{name}`, so a create of the \
                 name may be made beside it."
            ),
            Change::MoveFirstLayout => format!(
                "This journal file of `{name}` is from an earlier version of the provider: its \
                 tokens are still read where they lie, but no change to them can be saved."
            ),
        }
    }
}

/// One entry's file: the token it is for (checked on reading), whose it is, and, once the
/// create knows them, the VM it made and the mark that VM is to carry.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Entry {
    token: String,
    fleet: String,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vmid: Option<u32>,
    /// A hash of the mark's fingerprint as the caller gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mark: Option<String>,
    /// The Terraform run whose plan wrote a replacement entry ([`Run::identity`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    planned_by: Option<String>,
    /// Whether the create answered Terraform with its VM (then Terraform may have stored it,
    /// and a `state rm` may have let it go since). `None` in entries written before this was
    /// kept: unknown, so counted as answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    handed_over: Option<bool>,
}

impl Entry {
    fn new(fleet: &str, name: &str, token: &str) -> Entry {
        Entry {
            token: token.to_owned(),
            fleet: fleet.to_owned(),
            name: name.to_owned(),
            vmid: None,
            mark: None,
            planned_by: None,
            handed_over: None,
        }
    }

    /// Whether `bytes` are an entry of `token` that names VM `vmid`.
    fn names_vm(bytes: &[u8], token: &str, vmid: u32) -> bool {
        serde_json::from_slice::<Entry>(bytes)
            .is_ok_and(|entry| entry.token == token && entry.vmid == Some(vmid))
    }

    fn bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// A create Terraform may not have stored, with the VM it recorded.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnstoredCreate {
    pub fleet: String,
    pub name: String,
    pub token: String,
    pub vmid: u32,
    /// The create never answered Terraform with its VM (it was killed first), so no state
    /// ever held it. Else Terraform may have stored it and a `state rm` let it go since.
    pub never_answered: bool,
}

/// The entry in `path`, if there is a readable one.
fn existing_entry(path: &Path) -> Option<Entry> {
    match files::read(path) {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).ok(),
        _ => None,
    }
}

/// Where one fleet and name's entries live.
#[derive(Debug)]
struct Place {
    workspace: PathBuf,
    /// A hash of fleet and name (also the first layout's file stem).
    key: String,
    dir: PathBuf,
}

impl Place {
    fn entry(&self, token: &str, fact: Fact) -> PathBuf {
        let suffix = match fact {
            Fact::Unconfirmed => "unconfirmed",
            Fact::Replacing => "replacing",
            Fact::Held => "held",
        };
        self.dir.join(format!("{}.{suffix}", hex_hash(token, 16)))
    }
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
        let run = Run {
            identity: crate::invocation::run_identity().map(str::to_owned),
            applies_saved_plan: crate::invocation::applies_saved_plan(),
        };
        Self::at(dir).for_run(run)
    }

    /// A journal kept in `dir` (or nowhere), of a run nothing is known of.
    pub fn at(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            local: Mutex::new(Local::default()),
            run: Run::default(),
        }
    }

    /// This journal, read and written by a process serving `run`.
    pub fn for_run(self, run: Run) -> Self {
        Self { run, ..self }
    }

    /// Before a create's first write: its token may soon name a VM Terraform never stores.
    pub fn record_create(&self, fleet: &str, name: &str, token: &str) {
        let Some(place) = self.place(fleet, name) else {
            return;
        };
        let path = place.entry(token, Fact::Unconfirmed);
        let entry = Entry {
            handed_over: Some(false),
            ..Entry::new(fleet, name, token)
        };
        self.put(&path, &entry, Change::RecordCreate);
    }

    /// The create of `token` is about to clone onto (or claim) VM `vmid`: a later create of
    /// the name looks there first for it ([`Journal::unconfirmed_vms`]), wherever the name's
    /// probe sequence would stop. Nothing is recorded for a token no longer unconfirmed, and
    /// an entry that names this VM already keeps what it says.
    pub fn record_clone(&self, fleet: &str, name: &str, token: &str, vmid: u32) {
        let Some(place) = self.place(fleet, name) else {
            return;
        };
        let path = place.entry(token, Fact::Unconfirmed);
        if matches!(files::read(&path), Ok(Some(bytes)) if Entry::names_vm(&bytes, token, vmid)) {
            return;
        }
        self.record_where(&path, fleet, name, token, (vmid, None), Change::RecordVm);
    }

    /// The create of `token` made (or resumed) VM `vmid` and is about to mark it with the mark
    /// whose fingerprint is `mark_fingerprint` (any text that changes when the mark does):
    /// from now on only that VM, so marked, is resumed for the token
    /// ([`Journal::is_unconfirmed_for`]). Nothing is recorded for a token no longer
    /// unconfirmed.
    pub fn record_vm(
        &self,
        fleet: &str,
        name: &str,
        token: &str,
        vmid: u32,
        mark_fingerprint: &str,
    ) {
        let Some(place) = self.place(fleet, name) else {
            return;
        };
        let path = place.entry(token, Fact::Unconfirmed);
        let mark = Some(hex_hash(mark_fingerprint, 16));
        self.record_where(&path, fleet, name, token, (vmid, mark), Change::RecordVm);
    }

    /// Writes where the create of `token` works (its VMID, and the mark's hash once known)
    /// into its existing entry, keeping whether it answered: a confirmed create never
    /// becomes resumable again.
    fn record_where(
        &self,
        path: &Path,
        fleet: &str,
        name: &str,
        token: &str,
        (vmid, mark): (u32, Option<String>),
        change: Change,
    ) {
        if !matches!(path.try_exists(), Ok(true)) {
            return;
        }
        let entry = Entry {
            vmid: Some(vmid),
            mark,
            handed_over: existing_entry(path).and_then(|existing| existing.handed_over),
            ..Entry::new(fleet, name, token)
        };
        self.put(path, &entry, change);
    }

    /// The create of `token` is answering Terraform with its VM: from now on Terraform may
    /// hold it, so a full destroy no longer takes it for a killed create's
    /// ([`UnstoredCreate::never_answered`]). Nothing is recorded for a token no longer
    /// unconfirmed.
    pub fn record_handed_over(&self, fleet: &str, name: &str, token: &str) {
        let Some(place) = self.place(fleet, name) else {
            return;
        };
        let path = place.entry(token, Fact::Unconfirmed);
        let Some(existing) = existing_entry(&path) else {
            return;
        };
        if existing.handed_over == Some(true) {
            return;
        }
        let entry = Entry {
            handed_over: Some(true),
            ..existing
        };
        self.put(&path, &entry, Change::RecordHandedOver);
    }

    /// The creates of `fleet` and `name` Terraform may not have stored that recorded the VM
    /// they work on: each token with its VMID. An unreadable entry is left out with a
    /// warning, like any other.
    pub fn unconfirmed_vms(&self, fleet: &str, name: &str) -> Vec<(String, u32)> {
        let Some(place) = self.place(fleet, name) else {
            return Vec::new();
        };
        let mut found: Vec<(String, u32)> = self
            .unconfirmed_in(&place.dir, name)
            .into_iter()
            .filter(|entry| entry.fleet == fleet && entry.name == name)
            .filter_map(|entry| Some((entry.token, entry.vmid?)))
            .collect();
        found.sort();
        found
    }

    /// Every create of this workspace, of any name, Terraform may not have stored that
    /// recorded the VM it works on.
    pub fn unconfirmed_vms_of_every_name(&self) -> Vec<UnstoredCreate> {
        let Some(workspace) = self.dir.as_ref() else {
            return Vec::new();
        };
        self.sweep_once(workspace);
        let Ok(folders) = std::fs::read_dir(workspace) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for folder in folders.flatten().map(|item| item.path()) {
            if !folder.is_dir() {
                continue;
            }
            for entry in self.unconfirmed_in(&folder, "?") {
                if let Some(vmid) = entry.vmid {
                    found.push(UnstoredCreate {
                        never_answered: entry.handed_over == Some(false),
                        fleet: entry.fleet,
                        name: entry.name,
                        token: entry.token,
                        vmid,
                    });
                }
            }
        }
        found.sort();
        found
    }

    /// The readable unconfirmed entries in one name's folder; an unreadable one is a warning
    /// (`name` is what the warning calls the folder's name).
    fn unconfirmed_in(&self, dir: &Path, name: &str) -> Vec<Entry> {
        let listed = match std::fs::read_dir(dir) {
            Ok(listed) => listed,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Vec::new(),
            Err(error) => {
                self.unreadable(dir, name, &error.to_string());
                return Vec::new();
            }
        };
        let mut found = Vec::new();
        for path in listed.flatten().map(|item| item.path()) {
            if path
                .extension()
                .is_none_or(|suffix| suffix != "unconfirmed")
            {
                continue;
            }
            let read = files::read(&path).map(|bytes| bytes.map(|b| serde_json::from_slice(&b)));
            match read {
                Ok(Some(Ok(entry))) => found.push(entry),
                Ok(None) => {}
                Ok(Some(Err(error))) => {
                    self.unreadable(&path, name, &format!("not a journal entry: {error}"));
                }
                Err(error) => self.unreadable(&path, name, &error.to_string()),
            }
        }
        found
    }

    /// Terraform's state holds `token`: from now on its VM is resumed by no create, so a
    /// `state rm` or a lost state makes it another state's VM like any other.
    pub fn confirm(&self, fleet: &str, name: &str, token: &str) {
        self.remove(fleet, name, token, Fact::Unconfirmed, Change::Confirm);
        // Kept until the VM is destroyed: a plan that replaces it without a refresh (a
        // taint with -refresh=false) carries nothing of it, and the VM is then told from
        // another state's by this record alone. Written once; later refreshes only look.
        let Some(place) = self.place(fleet, name) else {
            return;
        };
        let path = place.entry(token, Fact::Held);
        if !path.exists() {
            self.put(&path, &Entry::new(fleet, name, token), Change::RecordHeld);
        }
        self.carry_replacement_into_this_run(&place, fleet, name, token);
    }

    /// A replacement of the VM of `token` that an earlier run planned counts in this run too
    /// once this run's state shows the VM: Terraform refreshes a replaced VM it still holds
    /// (current, or deposed by a `create_before_destroy` apply that was killed before its
    /// destroy), and destroys it after the new VM's create. One that no longer holds it (a
    /// `state rm`, a state file a killed terraform left empty) never refreshes it here.
    fn carry_replacement_into_this_run(&self, place: &Place, fleet: &str, name: &str, token: &str) {
        let Some(current) = &self.run.identity else {
            return;
        };
        let Some(entry) = self.lookup(fleet, name, token, Fact::Replacing) else {
            return;
        };
        if entry.planned_by.as_ref() == Some(current) {
            return;
        }
        let path = place.entry(token, Fact::Replacing);
        let entry = Entry {
            planned_by: Some(current.clone()),
            ..Entry::new(fleet, name, token)
        };
        self.put(&path, &entry, Change::RecordReplacement);
    }

    /// Whether this directory's state held the VM of `token` (see [`Journal::confirm`]).
    pub fn is_held(&self, fleet: &str, name: &str, token: &str) -> bool {
        self.lookup(fleet, name, token, Fact::Held).is_some()
    }

    /// A plan replaces the VM of `token`.
    pub fn record_replacement(&self, fleet: &str, name: &str, token: &str) {
        let Some(place) = self.place(fleet, name) else {
            return;
        };
        let path = place.entry(token, Fact::Replacing);
        let entry = Entry {
            planned_by: self.run.identity.clone(),
            ..Entry::new(fleet, name, token)
        };
        self.put(&path, &entry, Change::RecordReplacement);
    }

    /// A plan keeps the VM of `token` (no replacement, or no longer).
    pub fn forget_replacement(&self, fleet: &str, name: &str, token: &str) {
        let change = Change::ForgetReplacement;
        self.remove(fleet, name, token, Fact::Replacing, change);
    }

    /// The VM of `token` is gone (destroyed), or its create was dropped or failed before it
    /// made a VM: nothing of the token is kept.
    pub fn forget(&self, fleet: &str, name: &str, token: &str) {
        self.remove(fleet, name, token, Fact::Unconfirmed, Change::Confirm);
        let change = Change::ForgetReplacement;
        self.remove(fleet, name, token, Fact::Replacing, change);
        self.remove(fleet, name, token, Fact::Held, Change::Confirm);
    }

    /// Whether `token` is a create of this directory that Terraform may not have stored.
    pub fn is_unconfirmed(&self, fleet: &str, name: &str, token: &str) -> bool {
        self.lookup(fleet, name, token, Fact::Unconfirmed).is_some()
    }

    /// Whether `token` is a create of this directory that Terraform may not have stored and
    /// that made VM `vmid` with the mark of `mark_fingerprint`, as far as its entry recorded
    /// them ([`Journal::record_vm`]): a VM whose mark changed since (another state imported
    /// and re-marked it) or a copy of it at another VMID is not this directory's to resume.
    pub fn is_unconfirmed_for(
        &self,
        fleet: &str,
        name: &str,
        token: &str,
        vmid: u32,
        mark_fingerprint: &str,
    ) -> bool {
        let Some(entry) = self.lookup(fleet, name, token, Fact::Unconfirmed) else {
            return false;
        };
        let same_vm = entry.vmid.is_none_or(|recorded| recorded == vmid);
        let same_mark = entry
            .mark
            .is_none_or(|recorded| recorded == hex_hash(mark_fingerprint, 16));
        if !(same_vm && same_mark) {
            tracing::info!(vmid, %name, recorded_vmid = ?entry.vmid, same_mark, "the journal's \
                unconfirmed create names another VM or mark; not resuming this one");
        }
        same_vm && same_mark
    }

    /// Whether a plan of this directory replaces the VM of `token` in this run: the plan
    /// this process's Terraform run made, or the saved plan it applies. Another run's plan
    /// that was never carried out replaces nothing now (its VM may have left the state since).
    pub fn is_replaced(&self, fleet: &str, name: &str, token: &str) -> bool {
        let Some(entry) = self.lookup(fleet, name, token, Fact::Replacing) else {
            return false;
        };
        let this_run = match (&entry.planned_by, &self.run.identity) {
            (Some(planned_by), Some(current)) => {
                planned_by == current || self.run.applies_saved_plan
            }
            // Written before runs were recorded, or the run cannot be told: as before.
            _ => true,
        };
        if !this_run {
            tracing::info!(%name, planned_by = ?entry.planned_by, "a replacement another \
                Terraform run planned and did not carry out: its VM is not a predecessor now");
        }
        this_run
    }

    /// The warnings made since the last call, each once per process.
    pub fn take_warnings(&self) -> Vec<JournalWarning> {
        std::mem::take(&mut self.local().warnings)
    }

    /// Adds the warnings made since the last call to `diagnostics`.
    pub fn report_to(&self, diagnostics: &mut tfplugin::Diagnostics) {
        for warning in self.take_warnings() {
            diagnostics.warning(warning.summary, warning.detail);
        }
    }

    /// Where the entries of `fleet` and `name` live, once killed writers' leftovers are
    /// cleaned and the name's first-layout file is moved; `None` when nothing is kept.
    fn place(&self, fleet: &str, name: &str) -> Option<Place> {
        let workspace = self.dir.as_ref()?;
        self.sweep_once(workspace);
        let key = hex_hash(&format!("{fleet}\0{name}"), 12);
        let place = Place {
            workspace: workspace.clone(),
            dir: workspace.join(&key),
            key,
        };
        self.settle_first_layout(&place, fleet, name);
        Some(place)
    }

    fn put(&self, path: &Path, entry: &Entry, change: Change) {
        if let Err(error) = files::replace(path, &entry.bytes()) {
            self.not_written(path, &entry.name, &error, change);
        }
    }

    fn remove(&self, fleet: &str, name: &str, token: &str, fact: Fact, change: Change) {
        let Some(place) = self.place(fleet, name) else {
            return;
        };
        let path = place.entry(token, fact);
        if let Err(error) = files::remove(&path) {
            self.not_written(&path, name, &error, change);
        }
    }

    fn lookup(&self, fleet: &str, name: &str, token: &str, fact: Fact) -> Option<Entry> {
        let place = self.place(fleet, name)?;
        let path = place.entry(token, fact);
        let why = match files::read(&path) {
            Ok(None) => return self.lookup_in_place(&place, fleet, name, token, fact),
            Ok(Some(bytes)) => match serde_json::from_slice::<Entry>(&bytes) {
                Ok(entry) if entry.token == token => return Some(entry),
                Ok(_) => "it is for another create token".to_owned(),
                Err(error) => format!("not a journal entry: {error}"),
            },
            Err(error) => error.to_string(),
        };
        self.unreadable(&path, name, &why);
        None
    }

    /// A token in a first-layout file that could not be moved.
    fn lookup_in_place(
        &self,
        place: &Place,
        fleet: &str,
        name: &str,
        token: &str,
        fact: Fact,
    ) -> Option<Entry> {
        if !self.local().in_place.contains(&place.key) {
            return None;
        }
        let path = legacy::file(&place.workspace, &place.key);
        let lists = match files::read(&path).map(|bytes| bytes.map(|b| legacy::parse(&b))) {
            Ok(Some(Ok(lists))) => lists,
            Ok(None) => return None,
            Ok(Some(Err(error))) => {
                self.unreadable(&path, name, &format!("not a journal file: {error}"));
                return None;
            }
            Err(error) => {
                self.unreadable(&path, name, &error.to_string());
                return None;
            }
        };
        let list = match fact {
            Fact::Unconfirmed => lists.unconfirmed,
            Fact::Replacing => lists.replacing,
            // The first layout kept no such record.
            Fact::Held => return None,
        };
        list.iter()
            .any(|t| t == token)
            .then(|| Entry::new(fleet, name, token))
    }

    /// Moves the name's first-layout file into entries, once per process: waits (briefly)
    /// for another process moving it, takes over a move a killed process left, and reads the
    /// file where it lies when it cannot be moved.
    fn settle_first_layout(&self, place: &Place, fleet: &str, name: &str) {
        if self.local().settled.contains(&place.key) {
            return;
        }
        let give_up = Instant::now() + legacy::STALE_CLAIM + Duration::from_secs(1);
        loop {
            match self.move_first_layout(place, fleet, name) {
                Ok(true) => break,
                Ok(false) if Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                // Still another process's: looked at again by the next call.
                Ok(false) => return,
                Err(error) => {
                    let path = legacy::file(&place.workspace, &place.key);
                    if path.exists() {
                        self.not_written(&path, name, &error, Change::MoveFirstLayout);
                    }
                    self.local().in_place.insert(place.key.clone());
                    break;
                }
            }
        }
        self.local().settled.insert(place.key.clone());
    }

    /// One round of the move: claims the first-layout file and any stale claim, and moves
    /// what it claimed. `Ok(true)` when no other process's move is still under way.
    fn move_first_layout(&self, place: &Place, fleet: &str, name: &str) -> io::Result<bool> {
        let legacy_file = legacy::file(&place.workspace, &place.key);
        let mut mine: Vec<PathBuf> = legacy::claim(&legacy_file, &place.dir)?
            .into_iter()
            .collect();
        let (fresh, stale) = legacy::pending(&place.dir)?;
        for claim in &stale {
            mine.extend(legacy::take_over(claim)?);
        }
        for claim in &mine {
            self.move_claim(place, claim, fleet, name);
        }
        Ok(fresh.iter().all(|claim| mine.contains(claim)))
    }

    /// Writes the tokens of a claimed first-layout file as entries (never over newer ones),
    /// then deletes the claim; an unreadable one is put aside and reported.
    fn move_claim(&self, place: &Place, claim: &Path, fleet: &str, name: &str) {
        let lists = match files::read(claim).map(|bytes| bytes.map(|b| legacy::parse(&b))) {
            Ok(Some(Ok(lists))) => lists,
            // Taken over meanwhile by another process.
            Ok(None) => return,
            Ok(Some(Err(error))) => {
                let aside = legacy::put_aside(&place.dir);
                let shown = match files::take(claim, &aside) {
                    Ok(_) => aside,
                    Err(_) => claim.to_owned(),
                };
                let why = format!("not a journal file: {error}");
                self.unreadable(&shown, name, &why);
                return;
            }
            Err(error) => return self.unreadable(claim, name, &error.to_string()),
        };
        let facts = [
            (Fact::Unconfirmed, &lists.unconfirmed, Change::RecordCreate),
            (Fact::Replacing, &lists.replacing, Change::RecordReplacement),
        ];
        let mut all_moved = true;
        for (fact, tokens, change) in facts {
            for token in tokens {
                let path = place.entry(token, fact);
                let bytes = Entry::new(fleet, name, token).bytes();
                if let Err(error) = files::create_if_absent(&path, &bytes) {
                    all_moved = false;
                    self.not_written(&path, name, &error, change);
                }
            }
        }
        // Otherwise the claim stays, and is taken over (and moved again) once stale.
        if all_moved && let Err(error) = files::remove(claim) {
            tracing::warn!(path = %claim.display(), %error, "could not delete a moved journal \
                file");
        }
    }

    /// Deletes the temporary files killed writers left, once per process.
    fn sweep_once(&self, workspace: &Path) {
        if std::mem::replace(&mut self.local().swept, true) {
            return;
        }
        let Ok(entries) = std::fs::read_dir(workspace) else {
            return;
        };
        let mut folders = vec![workspace.to_owned()];
        folders.extend(
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
        for folder in folders {
            match files::remove_stale_temps(&folder, STALE_TEMP) {
                Ok(0) => {}
                Ok(removed) => {
                    tracing::debug!(folder = %folder.display(), removed, "removed temporary \
                        files of killed journal writes");
                }
                Err(error) => {
                    tracing::warn!(folder = %folder.display(), %error, "could not clean the \
                        provider's journal");
                }
            }
        }
    }

    fn unreadable(&self, path: &Path, name: &str, why: &str) {
        let detail = format!(
            "{} could not be read ({why}), so it is ignored: a create of `{name}` killed \
             before Terraform stored its VM cannot be resumed from it (the next apply asks \
             for an import instead), and a `create_before_destroy` replacement it records \
             may be refused. Delete the file to stop this warning.",
            path.display()
        );
        self.warn(UNREADABLE, detail);
    }

    fn not_written(&self, path: &Path, name: &str, error: &io::Error, change: Change) {
        let detail = format!(
            "Could not change {}: {error}. {}",
            path.display(),
            change.consequence(name)
        );
        self.warn(NOT_WRITTEN, detail);
    }

    fn warn(&self, summary: &'static str, detail: String) {
        let mut local = self.local();
        if local.reported.insert(detail.clone()) {
            tracing::warn!(%detail, "{summary}");
            local.warnings.push(JournalWarning { summary, detail });
        }
    }

    fn local(&self) -> MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The first `bytes` bytes of the SHA-256 of `text`, in hex.
fn hex_hash(text: &str, bytes: usize) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest[..bytes].iter().map(|b| format!("{b:02x}")).collect()
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
mod tests;
