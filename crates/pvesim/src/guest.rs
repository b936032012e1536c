//! What a simulated guest keeps on its disk across boots (cloud-init's cache, the packages
//! an instance installed, files written through the agent), and what its cloud-init does
//! during one boot. Plain data: `cloud_init` decides it at boot, `guest_files` reads it.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::inspect::SeedBoot;

/// One VM's guest. Lives in the VM, so it goes with a destroy and follows a migration.
#[derive(Debug, Clone, Default)]
pub struct Guest {
    /// An instance's seed installed and started `qemu-guest-agent` (systemd starts it on
    /// every later boot).
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
}

/// cloud-init's stages during one boot, on the simulator's clock.
#[derive(Debug, Clone)]
pub struct CloudInitRun {
    /// When the guest booted (uptime 0).
    pub booted_at: Instant,
    /// The same moment in Unix seconds (for the log's timestamps).
    pub booted_unix: u64,
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
}

impl CloudInitRun {
    /// `running`, `done`, `degraded` or `error`, as `cloud-init status` would say.
    pub fn status(&self, now: Instant) -> &'static str {
        if now < self.final_at {
            "running"
        } else if !self.errors.is_empty() {
            "error"
        } else if !self.recoverable_errors.is_empty() {
            "degraded"
        } else {
            "done"
        }
    }
}

impl Guest {
    /// The guest powered off: tmpfs is gone, the output log keeps what this boot wrote.
    pub fn halt(&mut self, log_of_this_boot: Option<String>) {
        if let Some(log) = log_of_this_boot {
            self.output_log.push_str(&log);
        }
        self.run = None;
        self.files.retain(|path, _| !path.starts_with("/run/"));
    }
}
