//! What a simulated guest keeps on its disk across boots (cloud-init's cache, the packages
//! an instance installed, files written through the agent), and what its cloud-init does
//! during one boot. Plain data: `cloud_init` decides it at boot, `guest_files` reads it.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::guest_power::{PowerMode, PowerState};
use crate::guest_profile::{
    AgentSource, CloudInitRelease, DIRTY_HOSTNAME, DIRTY_INSTANCE_ID, GuestProfile,
};
use crate::inspect::SeedBoot;

/// `str(datasource)` of a NoCloud seed on a cdrom.
pub const NOCLOUD_CDROM: &str = "DataSourceNoCloud [seed=/dev/sr0]";

/// One VM's guest. Lives in the VM, so it goes with a destroy and follows a migration.
#[derive(Debug, Clone, Default)]
pub struct Guest {
    /// `qemu-guest-agent` is installed and enabled: the image ships it, or an instance's
    /// seed installed and started it (systemd starts it on every later boot).
    pub agent_installed: bool,
    /// The hostname the first boot of the current instance set.
    pub hostname: Option<String>,
    /// cloud-init's cached instance-id (`/var/lib/cloud/data/instance-id`).
    pub instance_id: Option<String>,
    /// The instance's cloud-config set `manual_cache_clean: true` (cloud-init then writes
    /// `/var/lib/cloud/instance/manual-clean`, which ds-identify and `init-local` honour).
    pub manual_cache_clean: bool,
    /// `str(datasource)` of the cached datasource.
    pub datasource: Option<String>,
    /// The first boot of each instance-id, oldest first.
    pub seed_boots: Vec<SeedBoot>,
    /// Files written through the agent. Paths under `/run/` are on tmpfs: gone at boot.
    pub files: BTreeMap<String, Vec<u8>>,
    /// `/var/log/cloud-init-output.log` as earlier boots left it.
    pub output_log: String,
    /// This boot's cloud-init run; `None` while stopped or when cloud-init did not run.
    pub run: Option<CloudInitRun>,
    /// The image the disk was made from.
    pub profile: GuestProfile,
    /// The guest booted in the simulator (its own or, for a clone, its source's): from
    /// then on its image is what it is, whatever a `guest_profiles` fault says.
    pub booted: bool,
    /// `/etc/cloud/cloud-init.disabled` is on the disk (the `hardened` image's first boot
    /// wrote it).
    pub cloud_init_disabled: bool,
    /// `/var/lib/cloud/data/status.json` and `result.json` as the last run left them on
    /// the disk (the links in `/run/cloud-init/` went with the tmpfs).
    pub data_status: Option<String>,
    pub data_result: Option<String>,
    /// The instance's final stage was cut short by a reboot (a package upgrade's): the next
    /// boot runs the per-instance modules it did not reach, with these outcomes.
    pub unfinished: Option<UnfinishedInstance>,
}

/// What an instance's first final stage had left to do when a reboot cut it short.
#[derive(Debug, Clone, Default)]
pub struct UnfinishedInstance {
    pub errors: Vec<String>,
    pub recoverable_errors: Vec<String>,
    pub power_state: Option<PowerState>,
}

/// What a run leaves on the disk when the guest powers off.
#[derive(Debug, Default)]
pub struct LeftOnDisk {
    /// What this boot wrote to `/var/log/cloud-init-output.log`.
    pub log: String,
    /// `/var/lib/cloud/data/status.json` and `result.json` as the run left them.
    pub status: String,
    pub result: Option<String>,
    /// The run ended its final stage on an image that then switches cloud-init off.
    pub disables_cloud_init: bool,
}

/// cloud-init's stages during one boot, on the simulator's clock.
#[derive(Debug, Clone)]
pub struct CloudInitRun {
    /// The release that runs (the format of its files).
    pub release: CloudInitRelease,
    /// When the guest booted (uptime 0).
    pub booted_at: Instant,
    /// The same moment in Unix seconds (the log's timestamps, older releases' times).
    pub booted_unix: f64,
    /// When the agent answers: the guest is in `modules-final` from here on (the agent is
    /// installed and started by the final stage's package and runcmd modules).
    pub agent_at: Instant,
    /// When `modules-final` finished and `result.json` was written.
    pub final_at: Instant,
    /// `str(datasource)`, e.g. `DataSourceNoCloud [seed=/dev/sr0]`.
    pub datasource: String,
    /// `modules-final` errors (result.json `v1.errors`).
    pub errors: Vec<String>,
    /// `modules-final` recoverable errors at level WARNING (status.json only).
    pub recoverable_errors: Vec<String>,
    /// The power change this boot's cloud-init makes, when and how: the instance's
    /// `power_state` at the end of its final stage, or the reboot a package upgrade asks
    /// for in the middle of it.
    pub power: Option<(Instant, PowerMode)>,
}

impl CloudInitRun {
    /// `running`, `done`, `degraded` or `error`, as `cloud-init status` would say
    /// (`degraded` only from 23.4 on: older releases do not collect recoverable errors).
    pub fn status(&self, now: Instant) -> &'static str {
        if now < self.final_at {
            "running"
        } else if !self.errors.is_empty() {
            "error"
        } else if self.release.recoverable_errors && !self.recoverable_errors.is_empty() {
            "degraded"
        } else {
            "done"
        }
    }
}

impl Guest {
    /// A disk fresh from an image of `profile`.
    pub fn from_image(profile: GuestProfile) -> Guest {
        let mut guest = Guest {
            profile,
            agent_installed: profile.agent_source() == AgentSource::Shipped,
            ..Guest::default()
        };
        if profile.dirty_cache() {
            // What the image's build VM left: its cache (`obj.pkl`, `data/instance-id`),
            // the `manual-clean` marker its config asked for, and the agent it installed.
            guest.agent_installed = true;
            guest.instance_id = Some(DIRTY_INSTANCE_ID.to_string());
            guest.hostname = Some(DIRTY_HOSTNAME.to_string());
            guest.manual_cache_clean = true;
            guest.datasource = Some(NOCLOUD_CDROM.to_string());
        }
        guest
    }

    /// What a clone's disk starts with: this disk without the tmpfs of a running guest.
    /// The seed history stays with this VM: the clone's own boots make its own.
    pub fn disk_copy(&self) -> Guest {
        let mut copy = self.clone();
        copy.halt(None);
        copy.seed_boots.clear();
        copy
    }

    /// The guest powered off: tmpfs is gone, the disk keeps what this boot's run wrote.
    pub fn halt(&mut self, left: Option<LeftOnDisk>) {
        if let Some(left) = left {
            self.output_log.push_str(&left.log);
            self.data_status = Some(left.status);
            self.data_result = left.result;
            self.cloud_init_disabled |= left.disables_cloud_init;
        }
        self.run = None;
        self.files.retain(|path, _| !path.starts_with("/run/"));
    }
}
