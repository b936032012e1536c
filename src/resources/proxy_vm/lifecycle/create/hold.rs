//! A create attempt's hold on its VM: the [`OwnedVm`] of this attempt's token, whose "not
//! ours" means another create took the VM over, and the claim that makes an adopted VM this
//! attempt's.
//!
//! When two creates resume the same unfinished VM, both may claim it, and the later claim
//! takes it: a claim replaces whatever token the mark holds, as an interrupted create's and
//! a running one's look alike. The create whose token was replaced stops with
//! [`StepError::TakenOver`] at its next write, whose read shows a token not its own; a claim
//! sent between another's read and write makes PVE refuse that one's digest, and its next
//! read stops it the same way. The create that stops may have uploaded its seed already; that
//! cannot harm the other: each attempt uploads to a file named for its own token, and a
//! create that stops this way deletes the file it uploaded.

use pve::qemu::ConfigUpdate;
use tokio::time::Instant;

use super::super::super::model::Desired;
use super::super::configure::{current_tags, tags_to_write};
use super::super::error::{Step, StepError};
use super::super::expected::{Expected, ExpectedToken};
use super::super::marks::creating_mark;
use super::super::operation::Operation;
use super::super::owned::{OwnedVm, Seen};
use crate::context::Configured;
use crate::journal::Journal;
use crate::ownership::Phase;

/// That this attempt claimed its VM ([`Hold::claim`]): what the phases after the claim and
/// the finish need, so none can run on a VM the attempt has not made its own.
#[derive(Debug)]
pub(super) struct Claimed(());

/// That the create finished its VM ([`Hold::finish`]): no other create adopts it any more,
/// so what only a finished VM allows (removing earlier attempts' seeds) needs this.
#[derive(Debug)]
pub(super) struct Finished(());

/// See the module doc.
pub(super) struct Hold<'a> {
    pub vm: OwnedVm<'a>,
    pub desired: &'a Desired,
    journal: &'a Journal,
}

impl<'a> Hold<'a> {
    pub fn new(
        configured: &'a Configured,
        node: &str,
        vmid: u32,
        desired: &'a Desired,
        deadline: Instant,
    ) -> Self {
        Hold {
            vm: OwnedVm::new(
                Operation::new(&configured.client, deadline),
                node,
                vmid,
                Expected {
                    name: Some(&desired.name),
                    fleet: &desired.fleet,
                    token: ExpectedToken::Is {
                        token: &desired.create_token,
                        proof: None,
                    },
                },
            ),
            desired,
            journal: &configured.journal,
        }
    }

    fn taken_over(&self) -> StepError {
        // The other create's token is not named: tokens stay out of messages and logs.
        StepError::TakenOver {
            vmid: self.vm.vmid(),
            node: self.vm.node().to_owned(),
            name: self.desired.name.clone(),
        }
    }

    /// For a create, a VM that is not this attempt's any more was taken over.
    pub fn unless_taken_over<T>(&self, step: Step<T>) -> Step<T> {
        match step {
            Err(StepError::NotOurs { .. }) => Err(self.taken_over()),
            other => other,
        }
    }

    /// What an error met while this create held the VM means: when the VM is no longer this
    /// attempt's (another create took it over, or discarded it to clone it again, so the
    /// step failed on a VM that is gone), the create was taken over whatever the step said,
    /// and nothing of the VM belongs in this state.
    pub async fn explain(&self, error: StepError) -> StepError {
        if error.is_not_ours() {
            return error;
        }
        match self.vm.read().await {
            Err(StepError::NotOurs { .. }) => self.taken_over(),
            _ => error,
        }
    }

    /// Makes the VM this create's: our token in the mark (replacing whatever token it holds:
    /// an interrupted create's, or a concurrent create's that claimed before our read, which
    /// then stops at its next write) and our tags, in one write conditional on the digest
    /// read. Stops with
    /// [`StepError::TakenOver`] when the VM is not an unfinished create of this name any more
    /// (another create finished it, or the mark is gone), and when another create's claim
    /// lands between our read and our write: PVE refuses our digest, and the next read shows
    /// their token. Returns the volume `ide2` held when it was claimed.
    pub async fn claim(&self) -> Step<(Claimed, Option<String>)> {
        // Any token of this name and fleet: the claim is what replaces it.
        let any_attempt = self.vm.expecting(Expected {
            token: ExpectedToken::Any,
            ..*self.vm.expected()
        });
        // The token each attempt saw: one that changed since our last look is a concurrent
        // claim that won (its write made PVE refuse our digest).
        let seen_token: std::sync::Mutex<Option<Option<String>>> = std::sync::Mutex::new(None);
        let seen_token = &seen_token;
        let any_attempt = &any_attempt;
        let claimed = any_attempt.conditional("resume this create", |seen| async move {
            let mark = &seen.mark;
            let attached = seen
                .config
                .cdrom("ide2")
                .and_then(Result::ok)
                .map(|d| d.volume);
            let ours = mark.create_token.as_deref() == Some(&self.desired.create_token);
            // Another create finished it (or a destroy is removing it) since the slot was
            // chosen: it is theirs.
            if mark.phase != Phase::Creating && !ours {
                return Err(self.taken_over());
            }
            let earlier = seen_token
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .replace(mark.create_token.clone());
            if earlier.is_some_and(|earlier| earlier != mark.create_token) && !ours {
                return Err(self.taken_over());
            }
            let mut update = ConfigUpdate::new();
            if !ours {
                tracing::info!(vmid = self.vm.vmid(), "taking over an interrupted create");
                update = update.description(&creating_mark(self.desired).render());
            }
            let tags = tags_to_write(&seen.config, self.desired);
            if current_tags(&seen.config) != tags {
                update = update.set("tags", tags);
            }
            if !update.is_empty() {
                any_attempt.write(&seen.change(update)).await?;
            }
            Ok(attached)
        });
        let attached = self.unless_taken_over(claimed.await)?;
        Ok((Claimed(()), attached))
    }

    /// The claim of a VM this attempt's own clone just made: it carries this attempt's mark
    /// from the clone call, nobody else could have started it, and the configure phase
    /// writes its tags, so nothing needs to be read or written here (two requests a create,
    /// #42). A concurrent create that adopts it meanwhile is found by the configure's
    /// conditional read, as any takeover is.
    pub fn claim_own_clone(&self) -> Claimed {
        Claimed(())
    }

    /// The create's very last step: the mark says `done`, so no other create adopts the VM.
    /// Decided from `started`, the read before this create's own start, when there was one
    /// (the start wrote nothing to the config: one read fewer, #42), else from a fresh read.
    pub async fn finish(&self, _claimed: Claimed, started: Option<Seen>) -> Step<Finished> {
        let what = "mark the create finished";
        let attempt = |seen: Seen| async move {
            let done = creating_mark(self.desired).with_phase(Phase::Done).render();
            // Before the mark says done: the journal knows which VM and mark this
            // create finished, so it resumes only that one if Terraform never stores it.
            let desired = self.desired;
            self.journal.record_vm(
                &desired.fleet,
                &desired.name,
                &desired.create_token,
                self.vm.vmid(),
                &done,
            );
            if seen.config.description().as_deref().map(str::trim_end) == Some(done.as_str()) {
                return Ok(());
            }
            let change = seen.change(ConfigUpdate::new().description(&done));
            self.vm.write(&change).await.map(drop)
        };
        let finished = match started {
            Some(seen) => self.vm.conditional_from(seen, what, attempt).await,
            None => self.vm.conditional(what, attempt).await,
        };
        self.unless_taken_over(finished)?;
        Ok(Finished(()))
    }
}
