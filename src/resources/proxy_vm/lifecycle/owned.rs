//! The one handle through which create, update and delete touch a VM this resource instance
//! owns (a create holds it through its `Hold`, `create/hold.rs`).
//!
//! An [`OwnedVm`] knows the VMID, the node, whose VM it must be (name, fleet, create token)
//! and its operation (client, deadline, the one retry policy); it is made only by
//! [`OwnedVm::new`]. Before each write it reads the config again and checks the mark (or,
//! where nothing of the operation's own changed the config since, reuses such a read:
//! [`OwnedVm::conditional_from`]): the read's [`Seen`] is the only value a write can come
//! from. Every config write is a
//! [`Conditional`], which only [`Seen::change`] makes, bound to that read's digest, so PVE
//! refuses it when anything changed the VM since; a resize takes the `Seen` itself. A VM
//! that is no longer this instance's (deleted by hand and made again by another state at the
//! same VMID, its mark edited) stops the operation with [`StepError::NotOurs`] before
//! anything is sent. Power tasks (start, shutdown, stop, reboot) take no digest in PVE: each
//! needs a [`Proof`] that this operation just found the VM its own, from a read or a
//! conditional write. A VM that PVE no longer knows on the handle's node is looked for in
//! the cluster's VM list and followed where it went, since HA and operators move VMs while
//! an operation works on them ([`OwnedVm::followed`]).

use std::future::Future;
use std::sync::{Arc, OnceLock};

use pve::qemu::{ConfigUpdate, DestroyOptions, VmConfig};
use pve::task_board::TaskState;
use pve::wire::ByteSize;
use pve::{Client, ErrorKind, wait_out_locks};
use tokio::time::Instant;

use super::error::{Step, StepError};
use super::expected::Expected;
use super::operation::Operation;
use super::whereabouts::{MOVES_FOLLOWED, kept_moving};
use crate::ownership::{Mark, Phase};

/// How often a conditional write is re-decided after PVE refused its digest before the
/// operation gives up: someone else keeps changing the VM.
pub(super) const CONDITIONAL_ATTEMPTS: u32 = 6;

/// The digest of a config as read: the only way to make a [`Conditional`]. Only
/// [`OwnedVm::read`] makes one, after it found the VM still this instance's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Digest(String);

impl Digest {
    /// The digest PVE sent with `config`. A config without one cannot be written to: the
    /// write could not be made conditional.
    fn of(config: &VmConfig, vmid: u32) -> Step<Digest> {
        match config.digest().filter(|d| !d.is_empty()) {
            Some(digest) => Ok(Digest(digest)),
            None => Err(StepError::Unworkable(format!(
                "PVE sent the config of VM {vmid} without a digest, so no write to it could be \
                made conditional; nothing was written"
            ))),
        }
    }

    fn as_str(&self) -> &str {
        &self.0
    }
}

/// A config change that PVE applies only if the config still has the digest it was decided
/// from.
#[derive(Debug, Clone)]
pub(super) struct Conditional(ConfigUpdate);

impl Conditional {
    fn new(update: ConfigUpdate, digest: &Digest) -> Self {
        Conditional(update.digest(digest.as_str()))
    }

    /// The form as sent (for tests).
    #[cfg(test)]
    pub(super) fn update(&self) -> &ConfigUpdate {
        &self.0
    }
}

/// What one read of an owned VM saw: the only value a write can be decided from.
pub(super) struct Seen {
    pub config: VmConfig,
    pub mark: Mark,
    digest: Digest,
}

impl Seen {
    /// `update`, sent only if the config still has the digest this read saw.
    pub(super) fn change(&self, update: ConfigUpdate) -> Conditional {
        Conditional::new(update, &self.digest)
    }

    /// That this operation just found the VM its own.
    pub(super) fn proof(&self) -> Proof {
        Proof(())
    }
}

/// That this operation found the VM its own a moment ago (a read, or a conditional write PVE
/// took): what a power task, which PVE takes without a digest, is sent right after.
#[derive(Debug)]
pub(super) struct Proof(());

/// See the module doc.
pub(super) struct OwnedVm<'a> {
    op: Operation<'a>,
    node: String,
    /// Where the VM went since, each move followed in the next slot: the HA manager moves a
    /// VM on its own (at its start with `ha-rebalance-on-start`, by its rebalancer), and an
    /// operator may migrate it while an operation works on it. Shared with the copies made
    /// for other bounds or expectations: one VM, one whereabouts.
    moves: Arc<[OnceLock<String>; MOVES_FOLLOWED]>,
    vmid: u32,
    expected: Expected<'a>,
}

impl<'a> OwnedVm<'a> {
    /// The handle on VM `vmid` on `node`, which must be `expected`'s.
    pub(super) fn new(op: Operation<'a>, node: &str, vmid: u32, expected: Expected<'a>) -> Self {
        Self {
            op,
            node: node.to_owned(),
            moves: Default::default(),
            vmid,
            expected,
        }
    }

    /// The same VM, found on another node (it migrated, or HA recovered it).
    pub(super) fn on_node(self, node: &str) -> Self {
        Self {
            node: node.to_owned(),
            moves: Default::default(),
            ..self
        }
    }

    /// The same VM under another operation (a wait with a bound of its own).
    pub(super) fn with_op(&self, op: Operation<'a>) -> Self {
        Self {
            op,
            node: self.node.clone(),
            moves: Arc::clone(&self.moves),
            ..*self
        }
    }

    /// The same VM, judged by other expectations (a claim accepts any token of the name).
    pub(super) fn expecting(&self, expected: Expected<'a>) -> Self {
        Self {
            expected,
            node: self.node.clone(),
            moves: Arc::clone(&self.moves),
            ..*self
        }
    }

    pub(super) fn op(&self) -> Operation<'a> {
        self.op
    }

    pub(super) fn client(&self) -> &'a Client {
        self.op.client()
    }

    pub(super) fn deadline(&self) -> Instant {
        self.op.deadline()
    }

    /// Where the VM is: its node at the start, or where a read last followed it to.
    pub(super) fn node(&self) -> &str {
        let followed = self.moves.iter().filter_map(OnceLock::get).last();
        followed.unwrap_or(&self.node)
    }

    /// Whether the VM, which PVE did not know on `missed_on`, is elsewhere now: then this
    /// handle follows it there, so every later call goes where it is (one fresh look at the
    /// cluster's VM list). False when the cluster lists it nowhere else.
    pub(super) async fn followed(&self, missed_on: &str) -> Step<bool> {
        if self.node() != missed_on {
            // Another call of this operation followed it meanwhile.
            return Ok(true);
        }
        let cluster = self.client().cluster();
        let listed = self.op.retry(|| cluster.locate_vm(self.vmid)).await?;
        let Some(now) = listed.map(|vm| vm.node).filter(|node| node != missed_on) else {
            return Ok(false);
        };
        if self.node() != missed_on {
            return Ok(true);
        }
        let Some(slot) = self.moves.iter().find(|slot| slot.get().is_none()) else {
            return Err(kept_moving(self.vmid, &now));
        };
        tracing::info!(vmid = self.vmid, from = missed_on, to = %now, "the VM moved: following it");
        // A concurrent follow of the same move may have filled it first: the same node.
        let _ = slot.set(now);
        Ok(true)
    }

    pub(super) fn vmid(&self) -> u32 {
        self.vmid
    }

    pub(super) fn expected(&self) -> &Expected<'a> {
        &self.expected
    }

    pub(super) fn qemu(&self) -> pve::qemu::Qemu<'_> {
        self.op.client().node(self.node()).qemu(self.vmid)
    }

    fn name(&self) -> &str {
        self.expected.name.unwrap_or("?")
    }

    /// The error for a VM that is no longer this instance's.
    pub(super) fn not_ours(&self, why: &str) -> StepError {
        StepError::NotOurs {
            vmid: self.vmid,
            node: self.node().to_owned(),
            name: self.name().to_owned(),
            why: why.to_owned(),
        }
    }

    /// The config, read now where the VM is (followed when it moved);
    /// [`StepError::NotOurs`] unless the mark is this instance's.
    pub(super) async fn read(&self) -> Step<Seen> {
        let config = loop {
            let node = self.node().to_owned();
            match self.op.retry(|| self.qemu().config()).await {
                Ok(config) => break config,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    if !self.followed(&node).await? {
                        return Err(self.not_ours("there is no VM at that VMID any more"));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        };
        // qemu-server's `destroy_vm` freed the disks and left only this until its worker
        // ends: whoever's VM it was, it is going.
        if config.is_being_destroyed() {
            return Err(self.not_ours(
                "a PVE destroy task is removing it: its config is only `lock: destroyed`",
            ));
        }
        let mark = config.description().as_deref().and_then(Mark::parse);
        if let Some(why) = self.expected.mismatch(mark.as_ref()) {
            return Err(self.not_ours(&why));
        }
        let mark = mark.expect("a matching mark is present");
        let digest = Digest::of(&config, self.vmid)?;
        Ok(Seen {
            config,
            mark,
            digest,
        })
    }

    /// `PUT …/config` (synchronous), conditional.
    pub(super) async fn write(&self, change: &Conditional) -> Step<Proof> {
        self.op
            .retry(|| self.qemu().update_config(&change.0))
            .await?;
        Ok(Proof(()))
    }

    /// `POST …/config` (a task, waited for: by PVE's worker first, then polled if it runs
    /// longer), conditional.
    pub(super) async fn write_task(&self, change: &Conditional) -> Step<Proof> {
        let upid = self
            .op
            .retry(|| self.qemu().update_config_answered(&change.0))
            .await?;
        if let Some(upid) = upid {
            self.op.wait(&upid).await?;
        }
        Ok(Proof(()))
    }

    /// Grows `disk` to `size`, conditional on the digest `seen` read.
    pub(super) async fn grow(&self, disk: &str, size: ByteSize, seen: &Seen) -> Step<()> {
        let digest = seen.digest.as_str();
        let upid = self
            .op
            .retry(|| self.qemu().resize_if_unchanged(disk, size, digest))
            .await?;
        self.op.wait(&upid).await?;
        Ok(())
    }

    /// Runs a write decided from a fresh read and sent with that read's digest; when PVE
    /// refuses the digest (the config changed meanwhile), reads and decides again. A lock
    /// met by the task's worker (a backup) is waited out, then decided again.
    pub(super) async fn conditional<T, F, Fut>(&self, what: &str, attempt: F) -> Step<T>
    where
        F: Fn(Seen) -> Fut,
        Fut: Future<Output = Step<T>>,
    {
        let attempt = &attempt;
        // One lock schedule across every refused digest, as the deadline is one.
        let mut locks = self.op.locks();
        for _ in 0..CONDITIONAL_ATTEMPTS {
            let decided = wait_out_locks(&mut locks, || async move {
                let seen = self.read().await?;
                attempt(seen).await
            })
            .await;
            match decided {
                Err(StepError::Pve(e)) if e.kind() == ErrorKind::Conflict => {
                    tracing::info!(
                        vmid = self.vmid,
                        step = what,
                        "the VM's config changed since it was read; reading it again"
                    );
                }
                Err(StepError::Pve(e)) if self.moved_before_write(&e).await? => {}
                other => return other,
            }
        }
        Err(StepError::KeptChanging {
            vmid: self.vmid,
            what: what.to_owned(),
        })
    }

    /// [`OwnedVm::conditional`] decided first from `seen`, an earlier read of this operation,
    /// so an unchanged VM costs no read: the write still carries that read's digest, so PVE
    /// applies it only to the config that read found this instance's. A digest PVE refuses
    /// (changed since) or a lock met is decided again from fresh reads.
    pub(super) async fn conditional_from<T, F, Fut>(
        &self,
        seen: Seen,
        what: &str,
        attempt: F,
    ) -> Step<T>
    where
        F: Fn(Seen) -> Fut,
        Fut: Future<Output = Step<T>>,
    {
        match attempt(seen).await {
            Err(StepError::Pve(e))
                if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::Locked) =>
            {
                self.conditional(what, attempt).await
            }
            Err(StepError::Pve(e)) if self.moved_before_write(&e).await? => {
                self.conditional(what, attempt).await
            }
            other => other,
        }
    }

    /// Whether a write's `error` says PVE does not know the VM where the write went because
    /// it moved between the read the write was decided from and the write: then this handle
    /// follows it, and the write is decided again from a read where it is. (The read itself
    /// follows a VM it misses; a write is never resent blind.)
    async fn moved_before_write(&self, error: &pve::Error) -> Step<bool> {
        if error.kind() != ErrorKind::NotFound {
            return Ok(false);
        }
        let node = self.node().to_owned();
        self.followed(&node).await
    }

    /// A destroy's first write: the mark says `deleting`, so no create adopts the VM while
    /// it goes, and the destroy's later checks still recognise it.
    pub(super) async fn mark_deleting(&self) -> Step<Proof> {
        self.conditional("mark the VM as being deleted", |seen| async move {
            if seen.mark.phase == Phase::Deleting {
                return Ok(seen.proof());
            }
            let deleting = seen.mark.clone().with_phase(Phase::Deleting).render();
            self.write(&seen.change(ConfigUpdate::new().description(&deleting)))
                .await
        })
        .await
    }

    /// [`OwnedVm::mark_deleting`] decided from `seen`, a read this destroy just made (its
    /// checks read the same config), so the mark costs one write; a digest PVE refuses
    /// (changed since) is decided again from fresh reads.
    pub(super) async fn mark_deleting_from(&self, seen: Seen) -> Step<Proof> {
        if seen.mark.phase == Phase::Deleting {
            return Ok(seen.proof());
        }
        let deleting = seen.mark.clone().with_phase(Phase::Deleting).render();
        let change = seen.change(ConfigUpdate::new().description(&deleting));
        match self.write(&change).await {
            Err(StepError::Pve(e)) if e.kind() == ErrorKind::Conflict => self.mark_deleting().await,
            other => other,
        }
    }

    /// Undoes [`OwnedVm::mark_deleting`] of a destroy that was interrupted: the mark says
    /// `done` again. Nothing is written when it does not say `deleting`.
    pub(super) async fn unmark_deleting(&self) -> Step<()> {
        self.conditional("mark the VM as kept", |seen| async move {
            if seen.mark.phase != Phase::Deleting {
                return Ok(());
            }
            let done = seen.mark.clone().with_phase(Phase::Done).render();
            self.write(&seen.change(ConfigUpdate::new().description(&done)))
                .await
                .map(drop)
        })
        .await
    }

    /// Sends a power task (start, shutdown, stop, reboot) after checking the VM is still
    /// this instance's; a lost answer is checked with `done` before anything is sent again,
    /// so a task is never sent twice.
    pub(super) async fn power_task<S, SFut, C, CFut>(
        &self,
        send: S,
        done: C,
    ) -> Step<Option<pve::Upid>>
    where
        S: FnMut() -> SFut,
        SFut: Future<Output = pve::Result<pve::Upid>>,
        C: FnMut() -> CFut,
        CFut: Future<Output = pve::Result<bool>>,
    {
        let seen = self.read().await?;
        self.send_power_task(seen.proof(), send, done).await
    }

    /// [`OwnedVm::power_task`] without its read: only right after this operation proved the
    /// VM this instance's (`proof`: a read, or a conditional write such as a destroy's mark).
    pub(super) async fn send_power_task<S, SFut, C, CFut>(
        &self,
        _proof: Proof,
        send: S,
        done: C,
    ) -> Step<Option<pve::Upid>>
    where
        S: FnMut() -> SFut,
        SFut: Future<Output = pve::Result<pve::Upid>>,
        C: FnMut() -> CFut,
        CFut: Future<Output = pve::Result<bool>>,
    {
        let mut send = send;
        let mut done = done;
        let sent = pve::retry_with_check(
            &self.op.policy(),
            || {
                let fut = send();
                async move { fut.await.map(Some) }
            },
            || {
                let fut = done();
                async move { Ok(fut.await?.then_some(None)) }
            },
        )
        .await?;
        Ok(sent)
    }

    /// The destroy task of this VM running on its node, if any: a VMID has one VM at a time,
    /// so it is this VM's.
    async fn running_destroy(&self) -> pve::Result<Option<pve::Upid>> {
        let node = self.client().node(self.node());
        let tasks = node.tasks_of_vm(self.vmid(), "qmdestroy").await?;
        Ok(tasks
            .into_iter()
            .filter(|t| TaskState::from_listing(t.status.as_deref()) == TaskState::Running)
            .find_map(|t| t.upid.parse().ok()))
    }

    /// Whether PVE no longer knows the VM on its node.
    async fn is_gone(&self) -> Step<bool> {
        match self.op.retry(|| self.qemu().status()).await {
            Ok(_) => Ok(false),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// Destroys the VM with purge, checking before every send (the first, and each one
    /// after a lock made PVE end the task) that it is still this instance's and marked
    /// `deleting`. True when it is surely gone (this call's destroy task ended, or PVE no
    /// longer knows it); false when an earlier destroy task was found still running.
    pub(super) async fn destroy(&self) -> Step<bool> {
        let options = DestroyOptions {
            purge: true,
            destroy_unreferenced_disks: true,
        };
        // A lock that made PVE end the task (a backup started meanwhile): wait, look again,
        // send again.
        wait_out_locks(&mut self.op.locks(), || async move {
            match self.read().await {
                Ok(_) => {}
                // Gone meanwhile (an earlier destroy task finished): done.
                Err(StepError::NotOurs { .. }) if self.is_gone().await? => return Ok(true),
                Err(e) => return Err(e),
            }
            let qemu = self.qemu();
            let sent = pve::retry_with_check(
                &self.op.policy(),
                || async { qemu.destroy(options).await.map(Some) },
                // A destroy whose answer was lost: if the VM is gone or going, do not send
                // another.
                || async {
                    match qemu.config().await {
                        Ok(config) if config.is_being_destroyed() => Ok(Some(None)),
                        // PVE's worker frees the disks before it locks the config `destroyed`
                        // (qemu-server `destroy_vm`): meanwhile only its task shows it going.
                        Ok(_) => Ok(self.running_destroy().await?.map(Some)),
                        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Some(None)),
                        Err(e) => Err(e),
                    }
                },
            )
            .await;
            match sent {
                Ok(Some(upid)) => tolerate_gone(self.op.wait(&upid).await).map(|()| true),
                Ok(None) => Ok(false),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(true),
                Err(e) => Err(e.into()),
            }
        })
        .await
    }
}

/// A task that failed because the VM no longer exists (an earlier destroy removed it) did
/// what a delete wants.
pub(super) fn tolerate_gone<T>(outcome: Step<T>) -> Step<()> {
    match outcome {
        Ok(_) => Ok(()),
        Err(StepError::Pve(e)) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: serde_json::Value) -> VmConfig {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_config_without_a_digest_cannot_be_written() {
        let without = config(serde_json::json!({"cores": 1}));
        assert!(matches!(
            Digest::of(&without, 101),
            Err(StepError::Unworkable(text)) if text.contains("without a digest")
        ));
        let empty = config(serde_json::json!({"cores": 1, "digest": ""}));
        assert!(Digest::of(&empty, 101).is_err());
    }

    /// Every lifecycle module but this one: none may send a config write or a resize
    /// itself, so every one goes through `OwnedVm` with a `Conditional` (a `Digest` exists
    /// only from `OwnedVm::read`; this catches a module that bypasses the handle).
    #[test]
    fn no_lifecycle_module_writes_a_config_but_through_the_handle() {
        fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    files(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/resources/proxy_vm/lifecycle");
        let mut modules = Vec::new();
        files(&dir, &mut modules);
        assert!(modules.len() > 10, "the lifecycle's modules were found");
        for file in modules.iter().filter(|f| !f.ends_with("owned.rs")) {
            let text = std::fs::read_to_string(file).unwrap();
            for call in [
                ".update_config(",
                ".update_config_async(",
                ".update_config_answered(",
                ".resize(",
                ".resize_if_unchanged(",
            ] {
                assert!(
                    !text.contains(call),
                    "{} calls {call} directly: send it through OwnedVm",
                    file.display()
                );
            }
        }
    }

    #[test]
    fn every_conditional_write_carries_the_digest_it_was_decided_from() {
        let read = config(serde_json::json!({"cores": 1, "digest": "abc123"}));
        let digest = Digest::of(&read, 101).unwrap();
        let change = Conditional::new(ConfigUpdate::new().cores(2), &digest);
        assert_eq!(change.update().to_form().get("digest"), Some("abc123"));
    }
}
