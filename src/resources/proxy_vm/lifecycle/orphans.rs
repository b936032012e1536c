//! What this working directory's killed creates left that no state holds. A create killed
//! (SIGKILL, a lost CI runner) after its clone leaves a VM whose token only the journal
//! knows: marked `creating`, or `done` when it was killed after the finish and before it
//! answered Terraform. The next create of the name resumes it, but once the configuration
//! drops the resource no create ever will (fuzzer seeds 12339, 8312). A full `terraform
//! destroy` removes such VMs, with every seed each create uploaded: Terraform holds the
//! state lock then, so no create of this working directory runs meanwhile. It removes only
//! a create of a token the journal still holds, at the VMID it recorded; a finished one only
//! if the create never answered Terraform (else Terraform stored it, and a `state rm` may
//! have let it go since). A create of the name that makes the VM again with other content
//! removes a finished one too.

use tokio::time::Instant;

use super::delete::{Doomed, RecordedSeed, delete, delete_holding_name};
use super::error::{Step, StepError};
use super::expected::{Expected, ExpectedToken};
use super::operation::Operation;
use super::owned::{OwnedVm, Seen, tolerate_gone};
use crate::context::Configured;
use crate::ownership::Phase;

/// Removes every create of this working directory's journal that was killed before it
/// answered Terraform (or, answered, before it finished) and that no state holds; returns a
/// note for each VM removed. A failure is logged and left for the next destroy.
pub async fn remove_killed_creates(configured: &Configured, deadline: Instant) -> Vec<String> {
    let mut removed = Vec::new();
    for unstored in configured.journal.unconfirmed_vms_of_every_name() {
        let killed = KilledCreate {
            fleet: &unstored.fleet,
            name: &unstored.name,
            token: &unstored.token,
            vmid: unstored.vmid,
            node: None,
            finished_too: unstored.never_answered,
            for_create_of_name: false,
        };
        match killed.remove(configured, deadline).await {
            Ok(Some(note)) => removed.push(note),
            Ok(None) => {}
            Err(error) => {
                let (vmid, name) = (unstored.vmid, &unstored.name);
                tracing::warn!(vmid, %name, %error, "could not remove a killed create's VM");
            }
        }
    }
    removed
}

/// One create of this working directory's journal that Terraform never stored, at the VMID
/// its entry recorded.
pub struct KilledCreate<'a> {
    fleet: &'a str,
    name: &'a str,
    token: &'a str,
    vmid: u32,
    /// Where it was found, if known; else the cluster's listing says.
    node: Option<String>,
    /// A finished one is removed too: a create of its name with other content makes it
    /// again (see `slot`), or its create never answered Terraform.
    finished_too: bool,
    /// The caller is a create of the name and holds the name's lock.
    for_create_of_name: bool,
}

impl<'a> KilledCreate<'a> {
    /// An unfinished create found at `vmid` on `node` by a create of its name that is
    /// refused (another state's VM of the name exists: nothing would ever finish this one).
    /// The create holds the name's lock.
    pub fn unfinished(
        (fleet, name): (&'a str, &'a str),
        token: &'a str,
        (vmid, node): (u32, &str),
    ) -> Self {
        Self {
            fleet,
            name,
            token,
            vmid,
            node: Some(node.to_owned()),
            finished_too: false,
            for_create_of_name: true,
        }
    }

    /// A create found at `vmid` on `node`, finished or not, whose guest booted other content
    /// than the configuration's now: the create of its name makes it again.
    pub fn finished(
        (fleet, name): (&'a str, &'a str),
        token: &'a str,
        (vmid, node): (u32, &str),
    ) -> Self {
        Self {
            finished_too: true,
            ..Self::unfinished((fleet, name), token, (vmid, node))
        }
    }
}

impl KilledCreate<'_> {
    /// Destroys the VM when it is still this create's and unfinished (or finished, when
    /// asked), with every seed its token uploaded on the VM's node; `None` when there is
    /// nothing of it to remove.
    pub async fn remove(&self, configured: &Configured, deadline: Instant) -> Step<Option<String>> {
        let Some((node, seen)) = self.read_where_it_is(configured, deadline).await? else {
            return Ok(None);
        };
        let expected = self.expected();
        let journal = &configured.journal;
        let removable = match seen.mark.phase {
            Phase::Creating => true,
            Phase::Done => self.finished_too,
            Phase::Deleting => false,
        };
        // The journal binds the mark the create was about to write (`done`) before it wrote
        // it, so a VM is compared as finished: a create killed in between left it `creating`.
        let bound = seen.mark.clone().with_phase(Phase::Done).render();
        if !removable
            || !journal.is_unconfirmed_for(self.fleet, self.name, self.token, self.vmid, &bound)
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
        match self.for_create_of_name {
            true => delete_holding_name(configured, doomed, deadline).await?,
            false => delete(configured, doomed, deadline).await?,
        };
        // A create killed between its upload and the config write that attaches the seed
        // left the file unattached (fuzzer seed 38906): found by the token in its name.
        remove_seeds_of_token(configured, &node, self.token, deadline).await?;
        journal.forget(self.fleet, self.name, self.token);
        let made = match seen.mark.phase {
            Phase::Done => {
                "was made by a create of this working directory that finished on PVE but was"
            }
            _ => "was an unfinished create of this working directory,",
        };
        Ok(Some(format!(
            "VM {} (`{}`) on {node} {made} killed before Terraform stored it, and no resource \
             of the configuration resumed it: it was destroyed with the seeds it had uploaded.",
            self.vmid, self.name
        )))
    }

    fn expected(&self) -> Expected<'_> {
        Expected {
            name: Some(self.name),
            fleet: self.fleet,
            token: ExpectedToken::Is {
                token: self.token,
                proof: None,
            },
        }
    }

    /// The VM read where it is now (the read follows a move since the listing that placed
    /// it) and found this create's; `None` when it is gone or another's.
    async fn read_where_it_is(
        &self,
        configured: &Configured,
        deadline: Instant,
    ) -> Step<Option<(String, Seen)>> {
        let (runtime, client) = (&configured.runtime, &configured.client);
        let node = match &self.node {
            Some(node) => node.clone(),
            None => match runtime.listing(client).await?.vm(self.vmid) {
                Some(listed) => listed.node.clone(),
                None => return Ok(None),
            },
        };
        let vm = OwnedVm::new(
            Operation::new(client, deadline),
            &node,
            self.vmid,
            self.expected(),
        );
        match vm.read().await {
            Ok(seen) => Ok(Some((vm.node().to_owned(), seen))),
            // Another create claimed it, or it is gone: not this journal's to remove.
            Err(StepError::NotOurs { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// Deletes every seed named for `token` on the ISO storages `node` reaches: a create
/// uploads its seed to the node its VM is on, and a name with the token is that create's
/// alone.
async fn remove_seeds_of_token(
    configured: &Configured,
    node: &str,
    token: &str,
    deadline: Instant,
) -> Step<()> {
    let client = &configured.client;
    let op = Operation::new(client, deadline);
    let storages = op.retry(|| client.node(node).storages(Some("iso"))).await?;
    for storage in storages {
        let store = client.node(node).storage(&storage.storage);
        let items = op.retry(|| store.content(Some("iso"))).await?;
        let seeds = items.into_iter().filter(|item| {
            item.volid
                .split_once(":iso/")
                .is_some_and(|(_, file)| nocloud::file_belongs_to_attempt(file, token))
        });
        for seed in seeds {
            tolerate_gone(
                op.run_answered_task(|| store.delete_volume_answered(&seed.volid))
                    .await,
            )?;
            tracing::info!(volume = %seed.volid, "deleted a killed create's seed");
        }
    }
    Ok(())
}
