//! What this working directory's killed creates left that no state holds. A create killed
//! (SIGKILL, a lost CI runner) after its clone leaves a VM marked `creating` whose token only
//! the journal knows; the next create of the name resumes it, but once the configuration
//! drops the resource no create ever will (fuzzer seed 12339). A full `terraform destroy`
//! removes such VMs, with the seed each has attached: Terraform holds the state lock then, so
//! no create of this working directory runs meanwhile. A finished VM is never removed here:
//! only an unfinished create of a token the journal still holds, at the VMID it recorded.

use tokio::time::Instant;

use super::delete::{Doomed, RecordedSeed, delete};
use super::error::{Step, StepError};
use super::expected::{Expected, ExpectedToken};
use super::operation::Operation;
use super::owned::OwnedVm;
use crate::context::Configured;
use crate::ownership::Phase;

/// Removes every unfinished create of this working directory's journal that no state holds;
/// returns a note for each VM removed. A failure is logged and left for the next destroy.
pub async fn remove_killed_creates(configured: &Configured, deadline: Instant) -> Vec<String> {
    let mut removed = Vec::new();
    for (fleet, name, token, vmid) in configured.journal.unconfirmed_vms_of_every_name() {
        let killed = KilledCreate {
            fleet: &fleet,
            name: &name,
            token: &token,
            vmid,
            node: None,
        };
        match killed.remove(configured, deadline).await {
            Ok(Some(note)) => removed.push(note),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(vmid, %name, %error, "could not remove a killed create's VM");
            }
        }
    }
    removed
}

/// Removes one unfinished create of this working directory's journal, found at `vmid` on
/// `node` by a create of its name that is refused (another state's VM of the name exists:
/// nothing would ever finish this one). `None` when there is nothing of it to remove.
pub async fn remove_killed_create(
    configured: &Configured,
    (fleet, name): (&str, &str),
    token: &str,
    (vmid, node): (u32, &str),
    deadline: Instant,
) -> Step<Option<String>> {
    let killed = KilledCreate {
        fleet,
        name,
        token,
        vmid,
        node: Some(node.to_owned()),
    };
    killed.remove(configured, deadline).await
}

/// One unconfirmed create of the journal, at the VMID its entry recorded.
struct KilledCreate<'a> {
    fleet: &'a str,
    name: &'a str,
    token: &'a str,
    vmid: u32,
    /// Where it was found, if known; else the cluster's listing says.
    node: Option<String>,
}

impl KilledCreate<'_> {
    /// Destroys the VM when it is still this create's and unfinished; `None` when there is
    /// nothing of it to remove.
    async fn remove(&self, configured: &Configured, deadline: Instant) -> Step<Option<String>> {
        let node = match &self.node {
            Some(node) => node.clone(),
            None => {
                let listing = configured.runtime.vm_listing(&configured.client).await?;
                let listed = listing.iter().find(|vm| vm.vmid == self.vmid);
                match listed {
                    Some(vm) => vm.node.clone(),
                    None => return Ok(None),
                }
            }
        };
        let expected = Expected {
            name: Some(self.name),
            fleet: self.fleet,
            token: ExpectedToken::Is {
                token: self.token,
                proof: None,
            },
        };
        let vm = OwnedVm::new(
            Operation::new(&configured.client, deadline),
            &node,
            self.vmid,
            expected,
        );
        let seen = match vm.read().await {
            Ok(seen) => seen,
            // Another create claimed it, or it is gone: not this journal's to remove.
            Err(StepError::NotOurs { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let journal = &configured.journal;
        let fingerprint = seen.mark.render();
        if seen.mark.phase != Phase::Creating
            || !journal.is_unconfirmed_for(
                self.fleet,
                self.name,
                self.token,
                self.vmid,
                &fingerprint,
            )
        {
            return Ok(None);
        }
        let attached = seen
            .config
            .cdrom("ide2")
            .and_then(Result::ok)
            .map(|drive| drive.volume)
            .filter(|volume| volume.contains(":iso/"));
        let doomed = Doomed {
            vmid: self.vmid,
            node_hint: &node,
            expected,
            seed: attached.as_deref().map(|volume| RecordedSeed {
                node: &node,
                volume,
            }),
            mark_to_restore: String::new(),
            // A killed create may have made it an HA resource just before its start.
            under_ha: true,
        };
        delete(configured, doomed, deadline).await?;
        journal.forget(self.fleet, self.name, self.token);
        Ok(Some(format!(
            "VM {} (`{}`) on {node} was an unfinished create of this working directory, killed \
             before Terraform stored it, and no resource of the configuration resumed it: it \
             was destroyed with the seed it had attached.",
            self.vmid, self.name
        )))
    }
}
