//! Deterministic NoCloud seed ISOs that cloud-init reads on a VM's first boot.
//!
//! The provider builds one seed per VM, uploads it to the VM's node through
//! the PVE API and attaches it as a CD-ROM; cloud-init's NoCloud datasource
//! finds the volume labelled `cidata` and reads `meta-data`, `user-data`,
//! `vendor-data` and `network-config` from its root. No SSH and no snippets
//! storage are needed.
//!
//! This crate is pure: no I/O, no clock, no randomness. The same input gives
//! the same bytes, so re-uploading after a crash is harmless and an image's
//! hash identifies its content.
//!
//! # Use
//!
//! ```
//! let seed = nocloud::Seed::new("edge-0", "pve1/101")
//!     .user_data("#cloud-config\npackages: [nginx]\n")
//!     .build()
//!     .unwrap();
//! assert!(seed.instance_id.starts_with("iid-"));
//! assert!(seed.bytes.len() < 100 * 1024);
//! ```
//!
//! Check user-data with [`user_data::validate`] and network-config with
//! [`network_config::validate`] before any API write; the builder itself
//! passes both through byte for byte.
//!
//! # The files
//!
//! * `meta-data` ([`render::meta_data`]): `instance-id` is a hash of the VM's
//!   name, its identity and every other seed file, so a new seed is a new
//!   instance and cloud-init runs its per-instance modules again;
//!   `local-hostname` is the VM name.
//! * `user-data`: the user's text, untouched. When none is given an empty
//!   file is written, because NoCloud requires `user-data` to exist.
//! * `vendor-data` ([`render::vendor_data`], the default): a MIME multipart
//!   message with a cloud-config part (`packages: [qemu-guest-agent]`,
//!   `runcmd: systemctl enable --now qemu-guest-agent`, plus `systemctl
//!   start`, since Debian's unit is static), a cloud-config part with
//!   `manual_cache_clean: true` (see [Later boots without the
//!   seed](#later-boots-without-the-seed)) and a vendor script that installs
//!   and starts the agent if it is still missing, so the provider can read the
//!   VM's addresses.
//! * `network-config`: optional, passed through (version 2 is what the
//!   provider documents; cloud-init also reads version 1).
//!
//! # How cloud-init combines user-data and vendor-data
//!
//! (cloud-init's `stages.py`, `helpers.py` and `handlers/cloud_config.py`;
//! checked against Debian's 22.4 by `tests/nocloud/cloud_init.rs`, which runs
//! cloud-init's own datasource, part handlers and merger on our seeds.)
//!
//! * User-data is consumed first, then vendor-data, each through the part
//!   handlers; either may be cloud-config, a script or MIME multipart.
//! * Cloud-config parts are merged per source, then the user-data config is
//!   merged over the vendor-data config with the default rules: any
//!   top-level key in user-data *replaces* the same key from vendor-data. A
//!   user-data `packages:` or `runcmd:` therefore drops ours. A `merge_how`
//!   in vendor-data does not change that: cloud-init removes it when it
//!   stores the vendor config, so it only governs vendor parts among
//!   themselves.
//! * Scripts are not merged. User-data scripts run in `scripts_user`, and
//!   vendor-data scripts in `scripts_vendor`, which runs just before it in the
//!   final stage. That is why our vendor-data carries a script
//!   ([`render::GUEST_AGENT_SCRIPT`]) besides the cloud-config part: whether
//!   user-data is a cloud-config (with or without its own lists), a script or
//!   multipart, the agent gets installed (by `packages` in the config stage,
//!   or else by the script with apt-get, dnf or zypper) and started.
//! * User-data can switch vendor-data off: `vendor_data: {enabled: false}`
//!   (or a `vendor_data` that is not a mapping, or an `enabled` that does not
//!   read as true to cloud-init) skips all of it, and
//!   `vendor_data: {disabled_handlers: [...]}` skips some part types. Then we
//!   install nothing; [`user_data::UserDataCheck::warning`] flags the first
//!   case (in a plain cloud-config) so the plan can say so.
//! * `vendor_data: {prefix: [...]}` in user-data runs our script through the
//!   given command; that is the user's choice and still runs it.
//!
//! # Later boots without the seed
//!
//! The provider detaches the seed (`ide2: none,media=cdrom`) once cloud-init
//! has finished, and deletes the ISO. Without more, cloud-init would not
//! recognise the guest on its next boot: ds-identify finds no datasource and
//! disables cloud-init, or, where it still runs, cloud-init checks its cache
//! against a datasource that is gone, throws the cache away, renders its
//! fallback network config (DHCP on the first NIC) over the seed's, and with
//! `None` on its datasource list starts a new instance (new SSH host keys,
//! per-instance modules again).
//!
//! [`render::DETACHED_SEED_CLOUD_CONFIG`] sets `manual_cache_clean: true`.
//! cloud-init (0.7.9 or newer; the provider documents 20.x) then writes
//! [`render::MANUAL_CLEAN_MARKER`] at the end of the first boot; on every
//! later boot ds-identify keeps cloud-init enabled because of that marker, and
//! cloud-init trusts its cache: the same instance, the same datasource and
//! network config, per-boot modules as before, nothing searched for. A
//! user-data cloud-config that sets `write_files` or any other key leaves the
//! setting alone; only its own `manual_cache_clean` (or switching vendor-data
//! off) changes it. `tests/nocloud/cloud_init.rs` runs cloud-init's own first
//! and later boot, and its ds-identify, on our seeds to show it.
//!
//! What a detached guest needs, and what it means:
//!
//! * cloud-init 20.x or newer with the NoCloud datasource, and vendor-data
//!   left on. Whether a guest got the setting is visible in the guest: the
//!   marker file exists (readable through the agent's `file-read`). A guest
//!   without it must keep its seed.
//! * Re-provisioning: `cloud-init clean --reboot` (add `--logs` to start
//!   afresh) with a seed attached runs the guest as a new instance from that
//!   seed. `clean` removes the cache and the setting with it; without a seed
//!   cloud-init then stays off.
//! * A changed seed attached later is not read until `cloud-init clean`: the
//!   cache is trusted. The provider replaces a VM whose user-data changes, so
//!   it never relies on that.
//! * An image made from such a guest must be cleaned first (`cloud-init clean`),
//!   as cloud-init's docs say for every guest in trust mode.
//! * A distribution upgrade that changes the Python minor version makes
//!   cloud-init drop its cache once (`purge_cache_on_python_version_change`);
//!   without a seed that boot looks for a datasource anew. Attach a seed
//!   (`seed_lifetime = "vm"`) for that boot, or replace the VM.
//! * Do not opt in to cloud-init's per-boot network updates (`updates: network:
//!   when: [boot]`) on a detached guest: they ask a datasource that is gone.
//!
//! Nothing else is in vendor-data for this, on purpose. ds-identify reads
//! `datasource_list` only from `/etc/cloud/cloud.cfg{,.d}` and the kernel
//! command line, never from vendor-data, and a trusted boot searches no
//! datasource, so a vendor `datasource_list` would act only when the cache is
//! gone, and then the stored vendor config is gone with it. A vendor
//! `network: {config: disabled}` changes nothing on trusted boots either
//! (cloud-init renders network config only for a new instance). Files under
//! `/etc/cloud/cloud.cfg.d/` would outlive `cloud-init clean`, and writing
//! them takes `write_files` (which a user's `write_files` replaces) or a
//! script that must also create the marker before the next boot.
//!
//! The instance id stays what it was: a hash of the VM's name, its identity
//! and the seed's files, so the same seed always says the same instance, and
//! after detaching cloud-init keeps the id from its cache anyway. It does not
//! include the create attempt: a create that takes over another attempt's VM
//! with the same content must not make a booted guest a new instance.
//!
//! # Other distributions
//!
//! The vendor-data targets Debian and Ubuntu. It also works where the package
//! is called `qemu-guest-agent`, the unit has that name under systemd and the
//! script finds dnf or zypper: Fedora, RHEL and its rebuilds, openSUSE/SLES;
//! Arch gets the package only from the cloud-config part (pacman). Elsewhere
//! a template or user-data must do it: Alpine uses OpenRC (`rc-update add
//! qemu-guest-agent` and `rc-service qemu-guest-agent start`); FreeBSD needs
//! the `qemu-guest-agent` package plus `qemu_guest_agent_enable="YES"` in
//! `rc.conf`; Windows uses cloudbase-init and the virtio-win guest tools.
//! Package installation needs a network and a package mirror on first boot;
//! offline sites should bake the agent into the template (then `packages` is
//! a no-op and the unit is started by udev).
//!
//! # Why our own ISO writer
//!
//! The image is one flat directory of at most four small files. A writer for
//! exactly that is a few hundred lines ([`iso`]), has no dependencies, and
//! makes determinism plain to see: every timestamp is a constant and every
//! unused byte is zero. We looked at `hadris-iso`, a capable pure-Rust
//! reader/writer with Joliet and Rock Ridge, but it is a broad and fast-moving
//! API (0.2 to 2.0 within a short time) for a job this small, and reproducible
//! output would have to be re-checked on every upgrade. Whatever writes it,
//! the output is judged by tools we did not write (`xorriso`, `isoinfo`,
//! `bsdtar`, `blkid`, cloud-init) in `tests/nocloud/external_tools.rs` and
//! `tests/nocloud/cloud_init.rs`.
//!
//! Names are written three ways, so every reader sees `meta-data` and not
//! `META_DAT.;1`: Rock Ridge (Linux isofs prefers it when the root announces
//! it with an `ER` entry), Joliet (the fallback with `norock`, and what other
//! systems read) and plain ISO9660 level 1.

pub mod iso;
pub mod network_config;
pub mod render;
pub mod user_data;

use std::fmt;

use sha2::{Digest, Sha256};

pub use iso::{IsoError, SeedFiles};
pub use render::{MetaData, SeedContent};

/// What goes into a VM's seed. Build it with [`Seed::new`] and the setters,
/// then [`Seed::build`] the image.
///
/// `Debug` shows sizes, not user-data.
#[derive(Clone, PartialEq, Eq)]
pub struct Seed {
    name: String,
    vm_identity: String,
    user_data: Vec<u8>,
    network_config: Option<Vec<u8>>,
    vendor_data: Option<Vec<u8>>,
    attempt: Option<String>,
}

impl Seed {
    /// A seed for the VM called `name` (its hostname in the guest).
    ///
    /// `vm_identity` is whatever tells this VM apart from any other VM of the
    /// same name, for example its node and VMID; it only feeds the instance
    /// id. The guest-agent vendor-data is included by default.
    pub fn new(name: impl Into<String>, vm_identity: impl Into<String>) -> Self {
        Seed {
            name: name.into(),
            vm_identity: vm_identity.into(),
            user_data: Vec::new(),
            network_config: None,
            vendor_data: Some(render::vendor_data().as_bytes().to_vec()),
            attempt: None,
        }
    }

    /// Names the create attempt the seed belongs to (any unique text, e.g. a random token):
    /// its file name then carries [`attempt_tag`] of it, so two attempts for the same VM never
    /// write the same file. Only the file name changes, never the bytes or the instance id.
    pub fn attempt(mut self, attempt: impl AsRef<str>) -> Self {
        self.attempt = Some(attempt_tag(attempt.as_ref()));
        self
    }

    /// Sets `user-data`, written byte for byte.
    pub fn user_data(mut self, user_data: impl Into<Vec<u8>>) -> Self {
        self.user_data = user_data.into();
        self
    }

    /// Sets `network-config`, written byte for byte.
    pub fn network_config(mut self, network_config: impl Into<Vec<u8>>) -> Self {
        self.network_config = Some(network_config.into());
        self
    }

    /// Replaces the default guest-agent vendor-data.
    pub fn vendor_data(mut self, vendor_data: impl Into<Vec<u8>>) -> Self {
        self.vendor_data = Some(vendor_data.into());
        self
    }

    /// Leaves `vendor-data` out (the guest agent must then come from the
    /// template or from user-data).
    pub fn without_vendor_data(mut self) -> Self {
        self.vendor_data = None;
        self
    }

    /// The rendered files and the instance id, without the image.
    pub fn files(&self) -> (SeedFiles, String) {
        let content = SeedContent {
            user_data: &self.user_data,
            network_config: self.network_config.as_deref(),
            vendor_data: self.vendor_data.as_deref(),
        };
        let meta = render::meta_data(&self.name, &self.vm_identity, &content);
        let files = SeedFiles {
            meta_data: meta.text.into_bytes(),
            user_data: self.user_data.clone(),
            network_config: self.network_config.clone(),
            vendor_data: self.vendor_data.clone(),
        };
        (files, meta.instance_id)
    }

    /// Builds the ISO image.
    pub fn build(&self) -> Result<SeedIso, IsoError> {
        let (files, instance_id) = self.files();
        let bytes = iso::write(&files)?;
        Ok(SeedIso {
            bytes,
            instance_id,
            file_name_suggestion: file_name_suggestion(
                &self.name,
                &self.vm_identity,
                self.attempt.as_deref(),
            ),
        })
    }
}

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Seed")
            .field("name", &self.name)
            .field("vm_identity", &self.vm_identity)
            .field("user_data_len", &self.user_data.len())
            .field(
                "network_config_len",
                &self.network_config.as_ref().map(Vec::len),
            )
            .field("vendor_data_len", &self.vendor_data.as_ref().map(Vec::len))
            .field("attempt", &self.attempt)
            .finish()
    }
}

/// A built seed image.
#[derive(Clone, PartialEq, Eq)]
pub struct SeedIso {
    /// The ISO9660 image.
    pub bytes: Vec<u8>,
    /// The `instance-id` in its meta-data.
    pub instance_id: String,
    /// A storage file name for it, e.g. `seed-edge-0-3f2a9c1b.iso`, or with an
    /// attempt `seed-edge-0-3f2a9c1b-77e0d1a2.iso`: stable for the VM (and the
    /// attempt) and independent of the content, so a repeated upload replaces the
    /// file instead of leaving another behind. Only `[a-z0-9.-]`.
    pub file_name_suggestion: String,
}

impl SeedIso {
    /// Lowercase hex SHA-256 of the image, e.g. for PVE's upload `checksum`.
    pub fn sha256_hex(&self) -> String {
        hex(&Sha256::digest(&self.bytes))
    }
}

impl fmt::Debug for SeedIso {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeedIso")
            .field("len", &self.bytes.len())
            .field("instance_id", &self.instance_id)
            .field("file_name_suggestion", &self.file_name_suggestion)
            .finish()
    }
}

/// Longest VM-name part of a file name; PVE names are at most 63 characters.
const FILE_NAME_MAX_NAME: usize = 63;

/// The short tag of a create attempt in a seed's file name: 8 hex digits of a hash of the
/// attempt, so the name shows which attempt wrote it without showing the attempt itself.
///
/// ```
/// let tag = nocloud::attempt_tag("a-secret-token");
/// assert_eq!(tag.len(), 8);
/// assert!(!tag.contains("secret"));
/// assert_eq!(tag, nocloud::attempt_tag("a-secret-token"));
/// ```
pub fn attempt_tag(attempt: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"nocloud seed attempt\0");
    hash.update(attempt.as_bytes());
    hex(&hash.finalize())[..8].to_owned()
}

/// Whether `file` (a seed file name) was named for `attempt` by [`Seed::attempt`].
///
/// ```
/// let seed = nocloud::Seed::new("edge-0", "pve1/101").attempt("token-a").build().unwrap();
/// let file = seed.file_name_suggestion;
/// assert!(nocloud::file_belongs_to_attempt(&file, "token-a"));
/// assert!(!nocloud::file_belongs_to_attempt(&file, "token-b"));
/// assert!(file.starts_with(&nocloud::file_name_stem("edge-0", "pve1/101")));
/// ```
pub fn file_belongs_to_attempt(file: &str, attempt: &str) -> bool {
    file.strip_suffix(".iso")
        .and_then(|stem| stem.rsplit_once('-'))
        .is_some_and(|(_, tag)| tag == attempt_tag(attempt))
}

/// The part of a seed file name shared by every attempt for the same VM (name and identity),
/// e.g. `seed-edge-0-3f2a9c1b`.
pub fn file_name_stem(name: &str, vm_identity: &str) -> String {
    file_name_suggestion(name, vm_identity, None)
        .trim_end_matches(".iso")
        .to_owned()
}

fn file_name_suggestion(name: &str, vm_identity: &str, attempt: Option<&str>) -> String {
    let mut safe: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .take(FILE_NAME_MAX_NAME)
        .collect();
    if safe.is_empty() {
        safe.push_str("vm");
    }
    let mut hash = Sha256::new();
    hash.update(name.as_bytes());
    hash.update([0]);
    hash.update(vm_identity.as_bytes());
    // The hash keeps two VMs whose names map to the same text apart.
    let vm = &hex(&hash.finalize())[..8];
    match attempt {
        Some(tag) => format!("seed-{safe}-{vm}-{tag}.iso"),
        None => format!("seed-{safe}-{vm}.iso"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_writes_the_files_it_was_given() {
        let seed = Seed::new("edge-0", "pve1/101")
            .user_data("#!/bin/sh\necho hi\n")
            .network_config("version: 2\n");
        let (files, instance_id) = seed.files();
        assert_eq!(files.user_data, b"#!/bin/sh\necho hi\n");
        assert_eq!(files.network_config.as_deref(), Some(&b"version: 2\n"[..]));
        assert_eq!(
            files.vendor_data.as_deref(),
            Some(render::vendor_data().as_bytes())
        );
        let meta = String::from_utf8(files.meta_data).unwrap();
        assert!(meta.contains(&format!("instance-id: {instance_id}\n")));
        assert!(meta.contains("local-hostname: \"edge-0\"\n"));
        let built = seed.build().unwrap();
        assert_eq!(built.instance_id, instance_id);
        assert_eq!(built.bytes, iso::write(&seed.files().0).unwrap());
    }

    #[test]
    fn without_vendor_data_changes_the_instance() {
        let with = Seed::new("a", "1").build().unwrap();
        let without = Seed::new("a", "1").without_vendor_data().build().unwrap();
        assert_ne!(with.instance_id, without.instance_id);
        assert!(
            Seed::new("a", "1")
                .without_vendor_data()
                .files()
                .0
                .vendor_data
                .is_none()
        );
    }

    #[test]
    fn file_name_is_stable_per_vm_and_safe() {
        let a = Seed::new("Edge_0", "pve1/101").build().unwrap();
        let b = Seed::new("Edge_0", "pve1/101")
            .user_data("#cloud-config\n")
            .build()
            .unwrap();
        assert_eq!(a.file_name_suggestion, b.file_name_suggestion);
        assert!(a.file_name_suggestion.starts_with("seed-edge-0-"));
        assert!(a.file_name_suggestion.ends_with(".iso"));
        let c = Seed::new("edge-0", "pve1/101").build().unwrap();
        assert_ne!(a.file_name_suggestion, c.file_name_suggestion);
        assert!(
            a.file_name_suggestion
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        );
    }

    #[test]
    fn each_attempt_names_its_own_file_with_the_same_bytes() {
        let seed = |attempt: &str| {
            Seed::new("edge-0", "pve1/101")
                .user_data("#cloud-config\n")
                .attempt(attempt)
                .build()
                .unwrap()
        };
        let (a, b) = (seed("token-a"), seed("token-b"));
        assert_ne!(a.file_name_suggestion, b.file_name_suggestion);
        assert_eq!(a.bytes, b.bytes);
        assert_eq!(a.instance_id, b.instance_id);
        let stem = file_name_stem("edge-0", "pve1/101");
        assert!(a.file_name_suggestion.starts_with(&format!("{stem}-")));
        assert!(file_belongs_to_attempt(&a.file_name_suggestion, "token-a"));
        assert!(!file_belongs_to_attempt(&a.file_name_suggestion, "token-b"));
        assert!(!file_belongs_to_attempt(&format!("{stem}.iso"), "token-a"));
        assert!(!a.file_name_suggestion.contains("token"));
        assert!(a.file_name_suggestion.len() <= 255);
        assert!(
            a.file_name_suggestion
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        );
    }

    #[test]
    fn debug_never_shows_user_data() {
        let seed = Seed::new("a", "1").user_data("#cloud-config\npassword: hunter2\n");
        assert!(!format!("{seed:?}").contains("hunter2"));
        assert!(!format!("{:?}", seed.build().unwrap()).contains("hunter2"));
        assert!(!format!("{:?}", seed.files().0).contains("hunter2"));
    }
}
