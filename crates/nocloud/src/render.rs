//! The seed files we write ourselves: `meta-data` and `vendor-data` (the guest agent, and
//! quiet boots once the seed is detached).

use sha2::{Digest, Sha256};

/// The seed files other than `meta-data`, which the instance id covers.
#[derive(Clone, Copy, Default)]
pub struct SeedContent<'a> {
    /// `user-data` bytes.
    pub user_data: &'a [u8],
    /// `network-config` bytes, if any.
    pub network_config: Option<&'a [u8]>,
    /// `vendor-data` bytes, if any.
    pub vendor_data: Option<&'a [u8]>,
}

impl std::fmt::Debug for SeedContent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeedContent")
            .field("user_data_len", &self.user_data.len())
            .field("network_config_len", &self.network_config.map(<[u8]>::len))
            .field("vendor_data_len", &self.vendor_data.map(<[u8]>::len))
            .finish()
    }
}

/// Rendered `meta-data` and the instance id inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaData {
    /// `iid-` and 32 hex digits.
    pub instance_id: String,
    /// The YAML file.
    pub text: String,
}

/// Prefix of every instance id we make, so they are recognisable in a guest's
/// `/var/lib/cloud/instances/`.
pub const INSTANCE_ID_PREFIX: &str = "iid-";

/// The cloud-init instance id for a VM and its seed content.
///
/// cloud-init runs its per-instance modules (users, packages, runcmd, ...)
/// again whenever the instance id changes, and only then. Hashing the VM's
/// identity keeps two VMs apart even with identical seeds; hashing the content
/// makes a changed seed a new instance, so the new user-data really runs. The
/// result is hex, safe as the directory name cloud-init makes of it.
pub fn instance_id(name: &str, vm_identity: &str, content: &SeedContent<'_>) -> String {
    let mut hash = Sha256::new();
    // Versioned domain separation: changing the recipe must change the ids.
    hash.update(b"proxyvm/proxmox nocloud instance-id v1\0");
    // Length prefixes keep field boundaries unambiguous.
    let mut field = |bytes: Option<&[u8]>| match bytes {
        Some(bytes) => {
            hash.update([1]);
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(bytes);
        }
        None => hash.update([0]),
    };
    field(Some(name.as_bytes()));
    field(Some(vm_identity.as_bytes()));
    field(Some(content.user_data));
    field(content.network_config);
    field(content.vendor_data);
    let digest = hash.finalize();
    let mut id = String::with_capacity(INSTANCE_ID_PREFIX.len() + 32);
    id.push_str(INSTANCE_ID_PREFIX);
    for byte in &digest[..16] {
        id.push_str(&format!("{byte:02x}"));
    }
    id
}

/// Renders `meta-data`: the instance id (see [`instance_id`]) and
/// `local-hostname`, which cloud-init sets as the guest's hostname.
pub fn meta_data(name: &str, vm_identity: &str, content: &SeedContent<'_>) -> MetaData {
    let instance_id = instance_id(name, vm_identity, content);
    let text = format!(
        "instance-id: {instance_id}\nlocal-hostname: {}\n",
        yaml_double_quoted(name)
    );
    MetaData { instance_id, text }
}

/// A YAML double-quoted scalar: always a string, whatever the name looks like
/// (`123`, `yes`, `null` would otherwise change type).
fn yaml_double_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The vendor-data every seed carries by default: [`vendor_data_guest_agent`]'s two parts
/// plus [`DETACHED_SEED_CLOUD_CONFIG`], so the guest keeps booting as the same instance once
/// the provider detached its seed. A MIME multipart message, parts in this order:
/// `guest-agent.cfg`, `detached-seed.cfg`, `guest-agent.sh`.
pub fn vendor_data() -> &'static str {
    VENDOR_DATA
}

/// The vendor-data that installs, enables and starts `qemu-guest-agent`: a
/// MIME multipart message with [`GUEST_AGENT_CLOUD_CONFIG`] and
/// [`GUEST_AGENT_SCRIPT`]. This was the whole default before
/// [`DETACHED_SEED_CLOUD_CONFIG`] joined it in [`vendor_data`]; it stays byte for byte as it
/// was, because text hashed into values that users keep (the provider's `seed_hash`) must
/// never change under them.
///
/// Two parts because cloud-init lets any top-level key of a user-data
/// cloud-config replace the same key of vendor-data: user-data with its own
/// `packages:` or `runcmd:` drops the cloud-config part's lists (a
/// `merge_how` in vendor-data does not help: cloud-init strips it before
/// vendor-data meets user-data). The script part is a vendor script, which
/// cloud-init runs in its own module (`scripts_vendor`) whatever user-data
/// says, and which installs and starts the agent if it is still missing.
/// See the crate docs for the whole set of rules.
pub fn vendor_data_guest_agent() -> &'static str {
    GUEST_AGENT_VENDOR_DATA
}

/// The MIME boundary of [`vendor_data`] and [`vendor_data_guest_agent`]; it occurs in no
/// part.
pub const VENDOR_DATA_BOUNDARY: &str = "==proxyvm-vendor-data-boundary==";

/// The file cloud-init writes at the end of a first boot whose merged config says
/// `manual_cache_clean: true` (`stages.py`, `Init._write_to_cache`), and the one ds-identify
/// looks for (`manual_clean_and_existing`) to keep cloud-init enabled when no datasource
/// can be found. Read through the guest agent, its presence says the guest will boot
/// quietly without its seed; a guest without it must keep the seed.
pub const MANUAL_CLEAN_MARKER: &str = "/var/lib/cloud/instance/manual-clean";

macro_rules! guest_agent_cloud_config {
    () => {
        "\
#cloud-config
# Written by terraform-provider-proxmox: installs and starts the QEMU guest
# agent, through which the provider reads the VM's addresses.
packages:
  - qemu-guest-agent
runcmd:
  # Debian's unit is static (udev starts it at boot), where enable is a no-op
  # with a notice, so start it explicitly as well.
  - [systemctl, enable, --now, qemu-guest-agent]
  - [systemctl, start, qemu-guest-agent]
"
    };
}

macro_rules! detached_seed_cloud_config {
    () => {
        "\
#cloud-config
# Written by terraform-provider-proxmox, which detaches this seed once
# cloud-init has finished. On every later boot cloud-init then trusts its
# cache: the same instance, datasource and network config, with no search
# for the missing seed, no fallback network config and no new instance.
# Per-boot modules still run. `cloud-init clean` ends it (re-provisioning).
manual_cache_clean: true
"
    };
}

macro_rules! guest_agent_script {
    () => {
        "\
#!/bin/sh
# Written by terraform-provider-proxmox. Makes sure the QEMU guest agent is
# installed and running even when user-data's own packages: or runcmd:
# replaced those of our cloud-config part.
if ! command -v qemu-ga >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    # Wait for another apt (unattended-upgrades at first boot) to finish.
    apt-get -o DPkg::Lock::Timeout=600 update -q
    apt-get -o DPkg::Lock::Timeout=600 install -y -q qemu-guest-agent
  elif command -v dnf >/dev/null 2>&1; then
    dnf install -y qemu-guest-agent
  elif command -v zypper >/dev/null 2>&1; then
    zypper --non-interactive install qemu-guest-agent
  fi
fi
# Debian's unit is static (udev starts it at boot), where enable only prints
# a notice; start makes sure it runs now either way.
systemctl enable --now qemu-guest-agent
systemctl start qemu-guest-agent
"
    };
}

/// The cloud-config part of [`vendor_data_guest_agent`].
pub const GUEST_AGENT_CLOUD_CONFIG: &str = guest_agent_cloud_config!();

/// The vendor-script part of [`vendor_data_guest_agent`].
pub const GUEST_AGENT_SCRIPT: &str = guest_agent_script!();

/// The cloud-config part of [`vendor_data`] that keeps later boots of a guest without its
/// seed quiet: `manual_cache_clean: true`.
///
/// Why a top-level key of vendor-data, read from cloud-init's source (`stages.py`,
/// `helpers.py`, `cmd/main.py`, `tools/ds-identify`):
/// * cloud-init merges the instance's stored vendor cloud-config into its own config
///   (`ConfigMerger`, `include_vendor`), so after the first boot's `consume_data` the key is
///   set, and `activate_datasource` writes [`MANUAL_CLEAN_MARKER`] in that same boot;
/// * on later boots ds-identify finds the marker and keeps cloud-init enabled without a
///   datasource, and `init --local` reads the key (or the marker) before any datasource is
///   fetched and restores the cached one with `existing="trust"`: not a new instance, the
///   cached network config, no fallback;
/// * a user's cloud-config replaces only the top-level keys it sets itself, so `write_files`
///   (or any other key but `manual_cache_clean`) leaves it alone; a file written by our own
///   `write_files` would have been dropped by the user's;
/// * it lives in the instance directory, so `cloud-init clean` removes it and a cleaned guest
///   provisions from a new seed as any other.
///
/// cloud-init's schema lists only module keys: `cloud-init schema` of releases since 23.4
/// reports this key as unexpected (`--system` shows it for vendor-data); cloud-init itself
/// validates only user-data at boot and uses the key either way.
pub const DETACHED_SEED_CLOUD_CONFIG: &str = detached_seed_cloud_config!();

// The layout `cloud-init devel make-mime` writes, with a fixed boundary so
// the bytes never change.
macro_rules! part {
    ($content_type:literal, $file:literal, $body:expr) => {
        concat!(
            "--==proxyvm-vendor-data-boundary==\n",
            "Content-Type: ",
            $content_type,
            "; charset=\"us-ascii\"\n",
            "MIME-Version: 1.0\n",
            "Content-Transfer-Encoding: 7bit\n",
            "Content-Disposition: attachment; filename=\"",
            $file,
            "\"\n",
            "\n",
            $body,
            "\n",
        )
    };
}

macro_rules! multipart {
    ($($part:expr),+ $(,)?) => {
        concat!(
            "Content-Type: multipart/mixed; boundary=\"==proxyvm-vendor-data-boundary==\"\n",
            "MIME-Version: 1.0\n",
            "\n",
            $($part,)+
            "--==proxyvm-vendor-data-boundary==--\n",
        )
    };
}

const GUEST_AGENT_VENDOR_DATA: &str = multipart!(
    part!(
        "text/cloud-config",
        "guest-agent.cfg",
        guest_agent_cloud_config!()
    ),
    part!(
        "text/x-shellscript",
        "guest-agent.sh",
        guest_agent_script!()
    ),
);

const VENDOR_DATA: &str = multipart!(
    part!(
        "text/cloud-config",
        "guest-agent.cfg",
        guest_agent_cloud_config!()
    ),
    part!(
        "text/cloud-config",
        "detached-seed.cfg",
        detached_seed_cloud_config!()
    ),
    part!(
        "text/x-shellscript",
        "guest-agent.sh",
        guest_agent_script!()
    ),
);

#[cfg(test)]
mod tests {
    use super::*;

    fn content(user_data: &[u8]) -> SeedContent<'_> {
        SeedContent {
            user_data,
            network_config: None,
            vendor_data: Some(vendor_data().as_bytes()),
        }
    }

    #[test]
    fn instance_id_changes_with_identity_and_every_file() {
        let base = instance_id("edge-0", "vmid=101", &content(b"#cloud-config\n"));
        assert!(base.starts_with("iid-") && base.len() == 36);
        assert!(base[4..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            base,
            instance_id("edge-0", "vmid=101", &content(b"#cloud-config\n"))
        );
        let others = [
            instance_id("edge-1", "vmid=101", &content(b"#cloud-config\n")),
            instance_id("edge-0", "vmid=102", &content(b"#cloud-config\n")),
            instance_id("edge-0", "vmid=101", &content(b"#cloud-config\n\n")),
            instance_id(
                "edge-0",
                "vmid=101",
                &SeedContent {
                    network_config: Some(b"version: 2\n"),
                    ..content(b"#cloud-config\n")
                },
            ),
            instance_id(
                "edge-0",
                "vmid=101",
                &SeedContent {
                    vendor_data: None,
                    ..content(b"#cloud-config\n")
                },
            ),
            // Moving bytes between fields must not collide.
            instance_id("edge-0v", "mid=101", &content(b"#cloud-config\n")),
        ];
        for other in &others {
            assert_ne!(&base, other);
        }
    }

    #[test]
    fn meta_data_quotes_the_hostname() {
        let meta = meta_data("123", "x", &content(b""));
        assert_eq!(
            meta.text,
            format!(
                "instance-id: {}\nlocal-hostname: \"123\"\n",
                meta.instance_id
            )
        );
        assert_eq!(yaml_double_quoted("a\"b\\c\n"), "\"a\\\"b\\\\c\\x0a\"");
    }

    #[test]
    fn vendor_data_is_multipart_with_both_parts() {
        use crate::user_data::{UserDataKind, validate};
        let text = vendor_data_guest_agent();
        assert_eq!(validate(text).unwrap().kind, UserDataKind::MimeMultipart);
        assert!(text.contains(GUEST_AGENT_CLOUD_CONFIG));
        assert!(text.contains(GUEST_AGENT_SCRIPT));
        assert!(!text.contains(DETACHED_SEED_CLOUD_CONFIG));
        assert!(text.contains(&format!("boundary=\"{VENDOR_DATA_BOUNDARY}\"")));
        assert_eq!(text.matches(VENDOR_DATA_BOUNDARY).count(), 4);
        assert!(text.ends_with(&format!("--{VENDOR_DATA_BOUNDARY}--\n")));
        assert!(text.is_ascii(), "declared us-ascii");
        assert_eq!(
            validate(GUEST_AGENT_CLOUD_CONFIG).unwrap().kind,
            UserDataKind::CloudConfig
        );
        assert!(GUEST_AGENT_CLOUD_CONFIG.contains("  - qemu-guest-agent\n"));
        assert!(GUEST_AGENT_CLOUD_CONFIG.contains("[systemctl, enable, --now, qemu-guest-agent]"));
        assert_eq!(
            validate(GUEST_AGENT_SCRIPT).unwrap().kind,
            UserDataKind::Script
        );
    }

    #[test]
    fn default_vendor_data_adds_the_detached_seed_part_between_the_agent_parts() {
        use crate::user_data::{UserDataKind, validate};
        let text = vendor_data();
        assert_eq!(validate(text).unwrap().kind, UserDataKind::MimeMultipart);
        assert_eq!(text.matches(VENDOR_DATA_BOUNDARY).count(), 5);
        assert!(text.is_ascii(), "declared us-ascii");
        let agent = text.find(GUEST_AGENT_CLOUD_CONFIG).unwrap();
        let detached = text.find(DETACHED_SEED_CLOUD_CONFIG).unwrap();
        let script = text.find(GUEST_AGENT_SCRIPT).unwrap();
        assert!(agent < detached && detached < script);
        assert!(text.contains("filename=\"detached-seed.cfg\""));
        assert_eq!(
            validate(DETACHED_SEED_CLOUD_CONFIG).unwrap().kind,
            UserDataKind::CloudConfig
        );
        // The one setting, as a top-level key (see its doc for why).
        let keys: Vec<&str> = DETACHED_SEED_CLOUD_CONFIG
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        assert_eq!(keys, ["manual_cache_clean: true"]);
        // Everything else is the guest-agent vendor-data's.
        let without = text.replace(
            &format!(
                "--{VENDOR_DATA_BOUNDARY}\nContent-Type: text/cloud-config; \
                 charset=\"us-ascii\"\nMIME-Version: 1.0\nContent-Transfer-Encoding: 7bit\n\
                 Content-Disposition: attachment; filename=\"detached-seed.cfg\"\n\n\
                 {DETACHED_SEED_CLOUD_CONFIG}\n"
            ),
            "",
        );
        assert_eq!(without, vendor_data_guest_agent());
    }
}
