//! Guest profiles: what the image a VM was made from brings to its guest. Each is a release
//! of cloud-init (the format of its files), a qemu-ga build (what it refuses, and in which
//! words), how the agent gets there, and what the image does to cloud-init. Plain data:
//! `cloud_init`, `agent` and `guest_files` ask it.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The image a guest was made from. Chosen per VM (`vms[].guest_profile`, inherited by a
/// clone with the disk it copies) or by name at a VM's first boot (fault `guest_profiles`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum GuestProfile {
    /// Debian 12's cloud image: cloud-init 22.4.2, qemu-ga 7.2 once a seed installs it.
    #[serde(rename = "debian-12")]
    Debian12,
    /// Debian 13's cloud image: cloud-init 25.1.4, qemu-ga 10.0 once a seed installs it.
    #[default]
    #[serde(rename = "debian-13")]
    Debian13,
    /// Ubuntu 24.04's cloud image as its SRUs ship it: cloud-init 26.1, qemu-ga 8.2.
    #[serde(rename = "ubuntu-24.04")]
    Ubuntu2404,
    /// RHEL 9.4 and later: qemu-ga 8.2 shipped and running, its allow-list without
    /// guest-file-* and guest-exec; cloud-init 23.4.
    #[serde(rename = "rhel-9")]
    Rhel9,
    /// RHEL 9 with file commands allowed, its SELinux policy refusing qemu-ga reads of
    /// cloud-init's files.
    #[serde(rename = "rhel-9-selinux")]
    Rhel9Selinux,
    /// A qemu-ga older than 6.0 (shipped, as RHEL 8 did) whose block-list disables
    /// guest-file-* and guest-exec, in that release's words; cloud-init 20.3.
    #[serde(rename = "old-qemu-agent")]
    OldQemuAgent,
    /// Debian 13 whose agent never runs, whatever the seed says.
    #[serde(rename = "no-agent")]
    NoAgent,
    /// Debian 13 that switches cloud-init off (`/etc/cloud/cloud-init.disabled`) once its
    /// first boot's final stage ended.
    #[serde(rename = "hardened")]
    Hardened,
    /// Debian 13 whose final stage runs `slow_provisioner_ms` after the agent answers.
    #[serde(rename = "slow-provisioner")]
    SlowProvisioner,
    /// Debian 13 whose every new instance ends degraded (a recoverable error).
    #[serde(rename = "degraded")]
    Degraded,
    /// Debian 13 made into an image without `cloud-init clean`: its disk keeps an earlier
    /// instance's cache and `manual-clean` marker.
    #[serde(rename = "dirty-template")]
    DirtyTemplate,
}

/// A cloud-init release, as far as the files a caller reads differ (`cmd/main.py`
/// `status_wrapper`, `cmd/status.py`, `version.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloudInitRelease {
    /// `version_string()`: what the output log's lines say.
    pub version: &'static str,
    /// `start`/`finished` are `time.time()` (Unix seconds) up to 24.1, `util.uptime()`
    /// (seconds since boot) from 24.2 on.
    pub epoch_times: bool,
    /// `status_wrapper`'s stages still include `modules-init` (no unit runs it, so it stays
    /// null) up to 23.3.
    pub modules_init: bool,
    /// From 23.4 on each stage has `recoverable_errors` (level → messages) and
    /// `cloud-init status` reports `degraded` (exit 2).
    pub recoverable_errors: bool,
}

/// Red Hat's 20.3 (RHEL 8): the 22.4.2 layout.
const CLOUD_INIT_20_3: CloudInitRelease = CloudInitRelease {
    version: "20.3",
    epoch_times: true,
    modules_init: true,
    recoverable_errors: false,
};
/// Debian 12's `22.4.2-1+deb12u3`; Debian's `version.py` keeps the upstream string.
const CLOUD_INIT_22_4_2: CloudInitRelease = CloudInitRelease {
    version: "22.4.2",
    epoch_times: true,
    modules_init: true,
    recoverable_errors: false,
};
/// RHEL 9.4's 23.4.
const CLOUD_INIT_23_4: CloudInitRelease = CloudInitRelease {
    version: "23.4",
    epoch_times: true,
    modules_init: false,
    recoverable_errors: true,
};
/// Debian 13's 25.1.4.
const CLOUD_INIT_25_1_4: CloudInitRelease = CloudInitRelease {
    version: "25.1.4",
    epoch_times: false,
    modules_init: false,
    recoverable_errors: true,
};
/// Ubuntu's SRU of 26.1 to 24.04: its `debian/rules` writes the package version into
/// `version.py` (`DOWNSTREAM_VERSION`).
const CLOUD_INIT_26_1_NOBLE: CloudInitRelease = CloudInitRelease {
    version: "26.1-0ubuntu1~24.04.1",
    epoch_times: false,
    modules_init: false,
    recoverable_errors: true,
};

/// How qemu-ga words a command its filters disabled (`qapi/qmp-dispatch.c` `qmp_dispatch`
/// with the reason `qga/main.c` passed to `qmp_disable_command`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisabledWording {
    /// Before QEMU 6.0: "The command X has been disabled for this instance".
    ForThisInstance,
    /// QEMU 6.0 to 9.0: a block-list entry has no reason ("Command X has been disabled"),
    /// an allow-list gives "the command is not allowed".
    ByList,
    /// QEMU 9.1 on (`ga_apply_command_filters_iter`): "…: the command is not allowed" for
    /// both lists.
    NotAllowed,
}

/// Which list disabled a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// `--block-rpcs` (`--blacklist` before 8.0), or pve-sim's `agent_blocked_commands`.
    Block,
    /// `--allow-rpcs`: everything not listed.
    Allow,
}

impl DisabledWording {
    /// qemu-ga's `desc` for `command` disabled by `filter`.
    pub fn desc(self, command: &str, filter: Filter) -> String {
        match (self, filter) {
            (DisabledWording::ForThisInstance, _) => {
                format!("The command {command} has been disabled for this instance")
            }
            (DisabledWording::ByList, Filter::Block) => {
                format!("Command {command} has been disabled")
            }
            _ => format!("Command {command} has been disabled: the command is not allowed"),
        }
    }
}

/// How the agent gets into the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentSource {
    /// Not in the image: an instance's seed must install and start it.
    Seed,
    /// Installed and enabled in the image: it runs from the first boot.
    Shipped,
    /// Never runs.
    Never,
}

/// The commands RHEL's `/etc/sysconfig/qemu-ga` leaves out of its allow-list
/// (`FILTER_RPC_ARGS="--allow-rpcs=…"`, RHEL 9.4 on) and RHEL 7/8 put in `BLACKLIST_RPC`.
const FILE_AND_EXEC_COMMANDS: &[&str] = &[
    "guest-file-open",
    "guest-file-close",
    "guest-file-read",
    "guest-file-write",
    "guest-file-seek",
    "guest-file-flush",
    "guest-exec",
    "guest-exec-status",
];

/// The recoverable error of the `degraded` profile: a WARNING `cc_write_files.py`
/// `write_files` logs (25.1.4) for an entry without `path`, here in the final stage's
/// `write_files_deferred`.
pub const DEGRADED_WARNING: &str = "No path provided to write for entry 1 in module \
    write_files_deferred";

/// The earlier instance a `dirty-template` image keeps in its cache (pve-sim's names).
pub const DIRTY_INSTANCE_ID: &str = "iid-image-build";
pub const DIRTY_HOSTNAME: &str = "image-build";

impl GuestProfile {
    /// Every profile, in the README's order.
    pub const ALL: [GuestProfile; 11] = [
        GuestProfile::Debian12,
        GuestProfile::Debian13,
        GuestProfile::Ubuntu2404,
        GuestProfile::Rhel9,
        GuestProfile::Rhel9Selinux,
        GuestProfile::OldQemuAgent,
        GuestProfile::NoAgent,
        GuestProfile::Hardened,
        GuestProfile::SlowProvisioner,
        GuestProfile::Degraded,
        GuestProfile::DirtyTemplate,
    ];

    /// The profile's name, as the config and the admin state write it.
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    pub fn cloud_init(self) -> CloudInitRelease {
        match self {
            GuestProfile::Debian12 => CLOUD_INIT_22_4_2,
            GuestProfile::Ubuntu2404 => CLOUD_INIT_26_1_NOBLE,
            GuestProfile::Rhel9 | GuestProfile::Rhel9Selinux => CLOUD_INIT_23_4,
            GuestProfile::OldQemuAgent => CLOUD_INIT_20_3,
            _ => CLOUD_INIT_25_1_4,
        }
    }

    pub fn agent_source(self) -> AgentSource {
        match self {
            GuestProfile::Rhel9 | GuestProfile::Rhel9Selinux | GuestProfile::OldQemuAgent => {
                AgentSource::Shipped
            }
            GuestProfile::NoAgent => AgentSource::Never,
            _ => AgentSource::Seed,
        }
    }

    /// qemu-ga's `guest-info` `version`.
    pub fn agent_version(self) -> &'static str {
        match self {
            // Debian 12's 1:7.2+dfsg-7+deb12u15 answers 7.2.18.
            GuestProfile::Debian12 => "7.2.18",
            GuestProfile::Ubuntu2404 => "8.2.2",
            GuestProfile::Rhel9 | GuestProfile::Rhel9Selinux => "8.2.0",
            GuestProfile::OldQemuAgent => "5.2.0",
            _ => "10.0.2",
        }
    }

    pub fn disabled_wording(self) -> DisabledWording {
        match self {
            GuestProfile::OldQemuAgent => DisabledWording::ForThisInstance,
            GuestProfile::Debian12
            | GuestProfile::Ubuntu2404
            | GuestProfile::Rhel9
            | GuestProfile::Rhel9Selinux => DisabledWording::ByList,
            _ => DisabledWording::NotAllowed,
        }
    }

    /// The list of the image's own qemu-ga configuration that disables `command`, if any.
    pub fn image_filter(self, command: &str) -> Option<Filter> {
        let file_or_exec = FILE_AND_EXEC_COMMANDS.contains(&command);
        match self {
            GuestProfile::Rhel9 if file_or_exec => Some(Filter::Allow),
            GuestProfile::OldQemuAgent if file_or_exec => Some(Filter::Block),
            _ => None,
        }
    }

    /// Whether the image's SELinux policy keeps qemu-ga from opening `path`: the confined
    /// agent may not read cloud-init's files (`virt_qemu_ga_read_nonsecurity_files` off).
    pub fn denies_open(self, path: &str) -> bool {
        self == GuestProfile::Rhel9Selinux
            && (path.starts_with("/run/cloud-init/")
                || path.starts_with("/var/lib/cloud/")
                || path.starts_with("/var/log/cloud-init"))
    }

    /// The image touches `/etc/cloud/cloud-init.disabled` once its first boot ended.
    pub fn disables_cloud_init_after_first_boot(self) -> bool {
        self == GuestProfile::Hardened
    }

    /// The final stage takes `slow_provisioner_ms` instead of `cloud_init_ms`.
    pub fn slow_final_stage(self) -> bool {
        self == GuestProfile::SlowProvisioner
    }

    /// The recoverable errors every new instance's final stage logs.
    pub fn recoverable_errors(self) -> Vec<String> {
        match self {
            GuestProfile::Degraded => vec![DEGRADED_WARNING.to_string()],
            _ => Vec::new(),
        }
    }

    /// The image's disk carries an earlier instance's cache.
    pub fn dirty_cache(self) -> bool {
        self == GuestProfile::DirtyTemplate
    }

    /// qemu-ga's `guest-get-osinfo` (`qga/commands-posix.c` reads `/etc/os-release` and
    /// `uname`); the kernels are plausible releases, not checked.
    pub fn osinfo(self) -> Value {
        let (id, name, pretty, version, version_id, kernel, kernel_version) = match self {
            GuestProfile::Debian12 => (
                "debian",
                "Debian GNU/Linux",
                "Debian GNU/Linux 12 (bookworm)",
                "12 (bookworm)",
                "12",
                "6.1.0-37-cloud-amd64",
                "#1 SMP PREEMPT_DYNAMIC Debian 6.1.140-1 (2025-05-22)",
            ),
            GuestProfile::Ubuntu2404 => (
                "ubuntu",
                "Ubuntu",
                "Ubuntu 24.04.3 LTS",
                "24.04.3 LTS (Noble Numbat)",
                "24.04",
                "6.8.0-79-generic",
                "#79-Ubuntu SMP PREEMPT_DYNAMIC Tue Aug 12 14:42:46 UTC 2025",
            ),
            GuestProfile::Rhel9 | GuestProfile::Rhel9Selinux => (
                "rhel",
                "Red Hat Enterprise Linux",
                "Red Hat Enterprise Linux 9.4 (Plow)",
                "9.4 (Plow)",
                "9.4",
                "5.14.0-427.13.1.el9_4.x86_64",
                "#1 SMP PREEMPT_DYNAMIC Wed Apr 10 10:29:16 EDT 2024",
            ),
            GuestProfile::OldQemuAgent => (
                "rhel",
                "Red Hat Enterprise Linux",
                "Red Hat Enterprise Linux 8.4 (Ootpa)",
                "8.4 (Ootpa)",
                "8.4",
                "4.18.0-305.el8.x86_64",
                "#1 SMP Thu Apr 29 08:54:30 EDT 2021",
            ),
            _ => (
                "debian",
                "Debian GNU/Linux",
                "Debian GNU/Linux 13 (trixie)",
                "13 (trixie)",
                "13",
                "6.12.43+deb13-cloud-amd64",
                "#1 SMP PREEMPT_DYNAMIC Debian 6.12.43-1 (2025-08-27)",
            ),
        };
        json!({
            "id": id,
            "name": name,
            "pretty-name": pretty,
            "version": version,
            "version-id": version_id,
            "kernel-release": kernel,
            "kernel-version": kernel_version,
            "machine": "x86_64",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for profile in GuestProfile::ALL {
            let name = profile.name();
            let back: GuestProfile = serde_json::from_value(json!(name)).unwrap();
            assert_eq!(back, profile);
        }
        assert_eq!(GuestProfile::Ubuntu2404.name(), "ubuntu-24.04");
        assert!(serde_json::from_value::<GuestProfile>(json!("fedora")).is_err());
    }

    #[test]
    fn disabled_commands_are_worded_by_release() {
        let desc = |w: DisabledWording, f| w.desc("guest-file-open", f);
        assert_eq!(
            desc(DisabledWording::ForThisInstance, Filter::Block),
            "The command guest-file-open has been disabled for this instance"
        );
        assert_eq!(
            desc(DisabledWording::ByList, Filter::Block),
            "Command guest-file-open has been disabled"
        );
        assert_eq!(
            desc(DisabledWording::ByList, Filter::Allow),
            "Command guest-file-open has been disabled: the command is not allowed"
        );
        assert_eq!(
            desc(DisabledWording::NotAllowed, Filter::Block),
            desc(DisabledWording::ByList, Filter::Allow)
        );
    }
}
