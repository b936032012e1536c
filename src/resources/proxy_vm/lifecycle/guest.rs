//! Where a guest agent call goes: the node the VM is on now. A running VM moves while an
//! operation waits on its guest (the HA rebalancer, a node-affinity rule, an operator's
//! migration), and PVE answers an agent call on the node it left as it answers any call for
//! a VM it does not know there: "Configuration file 'nodes/…/qemu-server/N.conf' does not
//! exist".

use pve::qemu::Agent;
use pve::{Client, ErrorKind};

use super::error::Step;
use super::owned::OwnedVm;

/// The guest of one VM, asked where the VM is.
#[derive(Clone, Copy)]
pub(super) enum Guest<'g> {
    /// An owned VM's guest, followed where the VM moved ([`OwnedVm::followed`]).
    Owned(&'g OwnedVm<'g>),
    /// A refresh's look, on the node the refresh found the VM on: a VM gone from there is not
    /// followed (the next refresh finds it where it went).
    Listed {
        client: &'g Client,
        node: &'g str,
        vmid: u32,
    },
}

impl<'g> Guest<'g> {
    pub(super) fn client(&self) -> &'g Client {
        match self {
            Guest::Owned(vm) => vm.client(),
            Guest::Listed { client, .. } => client,
        }
    }

    pub(super) fn vmid(&self) -> u32 {
        match self {
            Guest::Owned(vm) => vm.vmid(),
            Guest::Listed { vmid, .. } => *vmid,
        }
    }

    /// The node the VM is on, as last known.
    pub(super) fn node(&self) -> &str {
        match self {
            Guest::Owned(vm) => vm.node(),
            Guest::Listed { node, .. } => node,
        }
    }

    /// The agent, on the node the VM is on.
    pub(super) fn agent(&self) -> Agent<'_> {
        self.client().node(self.node()).qemu(self.vmid()).agent()
    }

    /// Whether `error`, the answer to an agent call sent to `asked`, says PVE does not know
    /// the VM there because it moved: then this guest follows it, and the call is to be made
    /// again. An agent's own error (a file not there) is never a move.
    pub(super) async fn moved(&self, asked: &str, error: &pve::Error) -> Step<bool> {
        if error.kind() != ErrorKind::NotFound || error.agent_failure().is_some() {
            return Ok(false);
        }
        match self {
            Guest::Owned(vm) => vm.followed(asked).await,
            Guest::Listed { .. } => Ok(false),
        }
    }
}
