//! Why a lifecycle step stopped, as data: callers branch on the variant and its fields, never
//! on the text. Each text is the user's message, complete with the VM and what to do.

/// See the module doc.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("{0}")]
    Pve(Box<pve::Error>),
    /// A finished VM of this name and fleet exists: it belongs to another state (or to one
    /// that was lost) and is never taken over. Nothing of it belongs in this state.
    #[error("{}", already_made_text(*vmid, node, name, fleet))]
    AlreadyMade {
        vmid: u32,
        node: String,
        name: String,
        fleet: String,
    },
    /// Another create took this VM over (its token replaced ours, it finished the VM, or the
    /// mark is gone): the VM is not this attempt's, and nothing of it belongs in this state.
    #[error(
        "VM {vmid} on {node} (`{name}`) was taken over by another create of the same name, from \
         another Terraform state or a concurrent apply. That create finishes it; this one \
         stopped without changing anything more, and nothing of the VM is kept in this state. \
         Import it if this configuration should own it, or choose another `name`."
    )]
    TakenOver {
        vmid: u32,
        node: String,
        name: String,
    },
    /// The VM at the state's VMID is no longer this instance's (deleted and recreated by
    /// someone else, or its mark edited): nothing was written to it.
    #[error(
        "VM {vmid} on {node} is no longer this state's `{name}` ({why}). Nothing was written to \
         it. If the VM was deleted and another configuration made one at its VMID, run \
         `terraform plan` (a refresh drops the VM from this state and plans a new one); if this \
         configuration should own that VM, import it."
    )]
    NotOurs {
        vmid: u32,
        node: String,
        name: String,
        why: String,
    },
    /// The VM of this name is being destroyed by the state that owns it: never adopted, and
    /// not shadowed by a second VM of the name while it is still there.
    #[error(
        "VM {vmid} on {node}, named `{name}`, is being destroyed by the state that owns it; \
         nothing was changed. Apply again once that destroy has finished."
    )]
    BeingDestroyed {
        vmid: u32,
        node: String,
        name: String,
    },
    /// The VM stopped while the provider waited for its guest agent's address (an operator,
    /// HA, its node, or a guest that powers itself off): no waiting brings the address.
    #[error(
        "VM {vmid} on {node} is not running, so its guest agent cannot report an address: it \
         was stopped while the provider waited (by an operator, HA, its node, or the guest \
         powering itself off). The next apply starts it again, as `started = true` says."
    )]
    StoppedWaiting { vmid: u32, node: String },
    /// cloud-init's first boot of the VM failed (its errors and log quoted): the VM is kept
    /// with its seed for debugging, and the seed stays with it.
    #[error("{0}")]
    CloudInitFailed(String),
    /// No VMID of the name's candidates is free or resumable.
    #[error("no free VMID left in the provider's range {range} for `{name}`")]
    NoFreeVmid { range: String, name: String },
    /// PVE would refuse to destroy the VM (its protection flag, a missing privilege):
    /// found before anything was written, so the VM is as it was.
    #[error(
        "VM {vmid} on {node} cannot be destroyed: {why}. Nothing was changed: the VM is as it \
         was. {hint}"
    )]
    DestroyRefused {
        vmid: u32,
        node: String,
        why: String,
        hint: String,
    },
    /// The VM of the state's name whose ownership mark was edited away: most likely this
    /// state's, but it cannot be proven, so it is neither destroyed nor forgotten.
    #[error(
        "VM {vmid} on {node} is named `{name}` but its description no longer carries this \
         provider's ownership mark (it was edited), so it was not destroyed and stays in this \
         state. To destroy it, put these lines back at the end of its description (PVE web UI: \
         VM {vmid} > Summary > Notes) and run destroy again:\n\n{restore}\n\nIf it is not this \
         configuration's VM any more, remove it from this state instead: terraform state rm \
         'ADDRESS' (ADDRESS is this resource's address, e.g. proxmox_proxy_vm.edge[0])."
    )]
    MarkLost {
        vmid: u32,
        node: String,
        name: String,
        /// The mark lines that hand the VM back (no create token: tokens stay out of
        /// messages).
        restore: String,
    },
    /// Someone else kept changing the VM's config between this operation's reads and writes.
    #[error(
        "the config of VM {vmid} kept changing while this apply tried to {what}; something \
         else is editing the VM"
    )]
    KeptChanging { vmid: u32, what: String },
    /// The operation ran out of its Terraform timeout.
    #[error(
        "{what} did not finish within its timeout ({secs}s); raise `timeouts`, or run apply \
         again to resume"
    )]
    TimedOut { what: &'static str, secs: u64 },
    /// Terraform asked the provider to stop (Ctrl-C).
    #[error("{what} was interrupted by Terraform; the next apply resumes where it stopped")]
    Interrupted { what: &'static str },
    /// A precondition, or a VM that cannot be made as asked: the text says which and what
    /// to do. No caller branches on these.
    #[error("{0}")]
    Unworkable(String),
}

fn already_made_text(vmid: u32, node: &str, name: &str, fleet: &str) -> String {
    let fleet = crate::ownership::in_fleet(fleet);
    format!(
        "a proxy VM named `{name}`{fleet} already exists: VM {vmid} on node {node}, finished by \
        another Terraform state (another working directory, workspace or team) or by an earlier \
        run whose state was lost. It is never taken over, and nothing was changed.\n\nTo manage \
        that VM from this configuration, import it (ADDRESS is this resource's address, e.g. \
        proxmox_proxy_vm.edge[0]):\n  terraform import 'ADDRESS' {node}/{vmid}\nor with an import \
        block:\n  import {{\n    to = ADDRESS\n    id = \"{node}/{vmid}\"\n  }}\nOtherwise choose \
        another `name`, or give each configuration its own provider `fleet` (e.g. fleet = \
        terraform.workspace).\n\nIf it is this configuration's own VM, being replaced under \
        create_before_destroy: the plan records such a replacement in this working directory \
        (.terraform/proxyvm/) for its own run, so a saved plan applied in another directory, a \
        tainted VM planned with -refresh=false, or a replacement an earlier run planned before \
        the VM left this state, is not recognised as one. Run plan and apply in one \
        directory, with refresh."
    )
}

impl StepError {
    /// Whether the VM this step worked on is someone else's: a create that stops this way
    /// keeps nothing of the VM in its state.
    pub fn is_not_ours(&self) -> bool {
        matches!(
            self,
            StepError::AlreadyMade { .. } | StepError::TakenOver { .. } | StepError::NotOurs { .. }
        )
    }
}

impl From<pve::Error> for StepError {
    fn from(e: pve::Error) -> Self {
        StepError::Pve(Box::new(e))
    }
}

/// A step that stopped on a PVE lock is waited out like the lock itself
/// ([`pve::wait_out_locks`]).
impl pve::MaybeLocked for StepError {
    fn lock(&self) -> Option<&pve::Error> {
        match self {
            StepError::Pve(e) => e.lock(),
            _ => None,
        }
    }
}

pub(crate) type Step<T> = Result<T, StepError>;

/// Stops with [`StepError::Unworkable`].
pub(crate) fn unworkable<T>(text: impl Into<String>) -> Step<T> {
    Err(StepError::Unworkable(text.into()))
}
