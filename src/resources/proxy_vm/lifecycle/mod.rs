//! The lifecycle of a proxy VM as plain async functions over `pve::Client` and `nocloud`,
//! one module per phase.
//!
//! Every phase is a PVE task that is waited on, and every phase is idempotent, so a create
//! interrupted anywhere resumes on the next apply: it adopts the VM it left (recognised by
//! the ownership mark written in the clone call), re-uploads the seed, rewrites the config,
//! grows only if still smaller, starts only if stopped. It never clones a duplicate and never
//! changes a VM without our mark. Every write goes through the owner's handle
//! ([`owned::OwnedVm`]): it reads the config, checks the mark and token, and sends config
//! writes conditional on the digest of that read, the only way a digest exists.
//!
//! A create reads top-down as its phases (`create/`): place, slot, clone, claim, seed,
//! configure, grow, boot, ready, finish, then cloud-init's verdict and the seed's
//! detach. Update (`update.rs`) runs configure, grow, boot and
//! ready on the state's VM; delete (`delete/`) locates, judges and destroys (and a full
//! destroy removes what killed creates left, `orphans`); read
//! (`read.rs`) observes. The phases shared by create and update live here: `configure`
//! (with `boot_order`: what the node does with the VM at its own boot), `disk`, `power`
//! (with `ha_power`: waiting for the VM itself when HA turns a power call into a request),
//! `ready`, and the seed's life after the address (`seed_life`: cloud-init's verdict in
//! `cloud_init`, the detach in `detach`); `whereabouts` finds where a VM moved to, and
//! `guest` sends the guest agent's calls where the VM is now. `error` and `tasks` hold what
//! every phase uses: the error type, the retry policy and the task wait. Every wait for a
//! lock runs on `pve`'s one loop, [`pve::wait_out_locks`], bounded by the operation's
//! deadline.

mod boot_order;
mod cloud_init;
mod configure;
mod create;
mod delete;
mod detach;
mod disk;
mod error;
mod expected;
mod guest;
mod ha;
mod ha_power;
mod marks;
mod observe;
mod operation;
mod orphans;
mod owned;
pub(crate) mod placement;
mod power;
pub(crate) mod prechecks;
mod read;
mod ready;
mod seed_life;
mod slot;
mod teardown;
mod update;
mod whereabouts;

pub use create::{Created, create};
pub use delete::{Doomed, RecordedSeed, delete};
pub use error::StepError;
pub use expected::{Expected, ExpectedToken};
pub use ha::observe_resource;
pub use observe::observe;
pub use orphans::remove_killed_creates;
pub use read::{Found, read};
pub use seed_life::{
    Detach, FirstBoot, Judged, Readiness, SeedOutcome, detach, first_verdict, seed_readiness,
};
pub use slot::refusal_at_plan;
pub use update::{Updated, update};
pub use whereabouts::{node_now, observe_where_it_is};

/// How far a create got, kept outside it: when a create is cut short (timeout, Ctrl-C, a
/// failed step), the state still names the VM and the seed it made, so a refresh recognises
/// the VM and destroy removes both.
#[derive(Debug, Default, Clone)]
pub struct Progress {
    /// The VMID and node, recorded before the clone is sent (it may happen even if its
    /// answer never comes).
    pub vm: Option<(u32, String)>,
    /// The seed volume, recorded before the upload is sent.
    pub seed_volume: Option<String>,
    /// The token of this directory's killed create that this create resumed: the VM's mark
    /// keeps it, so the state must too.
    pub resumed_token: Option<String>,
}

/// Where a create records its [`Progress`].
#[derive(Debug, Default)]
pub struct ProgressCell(std::sync::Mutex<Progress>);

impl ProgressCell {
    pub fn get(&self) -> Progress {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn update(&self, change: impl FnOnce(&mut Progress)) {
        change(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }
}
