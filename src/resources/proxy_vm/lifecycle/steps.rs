//! The single steps of a create, each a waited-on PVE task and each safe to repeat; update
//! reuses the config, disk and power steps.
//!
//! Every step that writes acts through an [`OwnedVm`]: it reads the config, checks that the
//! mark is still this instance's (for a create: carries this attempt's token), and sends its
//! config write conditional on that read's digest. A create holds its VM through [`Hold`].
//! When two creates resume the same unfinished VM, both may claim it, and the later claim
//! takes it: a claim replaces whatever token the mark holds, as an interrupted create's and
//! a running one's look alike. The create whose token was replaced stops with
//! [`StepError::TakenOver`] at its next write, whose read shows a token not its own; a claim
//! sent between another's read and write makes PVE refuse that one's digest, and its next
//! read stops it the same way. The create that stops may have uploaded its seed already; that
//! cannot harm the other: each attempt uploads to a file named for its own token, and a
//! create that stops this way deletes the file it uploaded.

use std::future::Future;
use std::time::Duration;

use pve::qemu::{CloneRequest, ConfigUpdate, GuestInterface, VmConfig};
use pve::storage::Upload;
use pve::wire::{ByteSize, CdromDrive};
use pve::{Backoff, Client, ErrorKind, MaybeLocked, retry_idempotent, wait_out_locks};
use tokio::time::Instant;

use super::super::model::{Desired, seed_hash};
use super::owned::{CONDITIONAL_ATTEMPTS, Conditional, Digest, OwnedVm, Seen};
use super::read::{Expected, ExpectedToken};
use super::{Step, StepError, failed, patient, run_task, wait};
use crate::ownership::{self, Mark, Ownership, Phase};

/// How many times (250 ms apart) a clone whose answer was lost is looked for before it is
/// sent again: PVE's worker creates the new VMID moments after the answer.
const CLONE_WINDOW_LOOKS: u32 = 16;

/// Clones the template onto `vmid` with the mark of this create attempt, waiting out the task
/// and a lock on the template. A lost or unexplained answer is checked against the cluster
/// before anything is sent again, so a clone never happens twice. True when this call's own
/// clone task ended well (the VM is then on `desired.node`, unlocked); false when a lost
/// answer's clone was found, whose end nobody waited for.
pub(super) async fn clone_vm(
    client: &Client,
    template: (&str, u32),
    vmid: u32,
    desired: &Desired,
    deadline: Instant,
) -> Step<bool> {
    let mut request = CloneRequest::full(vmid);
    request.name = Some(desired.name.clone());
    request.description = Some(creating_mark(desired).render());
    request.target = (template.0 != desired.node).then(|| desired.node.clone());
    request.storage = desired.clone_storage.clone();
    request.pool = desired.pool.clone();
    let source = client.node(template.0).qemu(template.1);
    let dispatched = pve::retry_with_check(
        &patient(deadline),
        || async { source.clone_to(&request).await.map(Some) },
        || async {
            // Did the lost request start a clone? Then the VMID exists now, or within PVE's
            // window: it answers with the UPID before the worker writes the new VMID's
            // temporary config. Look a while before deciding it did not happen.
            // Each look is retried on its own: one failed look must not fail the create.
            for _ in 0..CLONE_WINDOW_LOOKS {
                let found =
                    retry_idempotent(&patient(deadline), || client.cluster().locate_vm(vmid))
                        .await?;
                if found.is_some() {
                    return Ok(Some(None));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Ok(None)
        },
    )
    .await?;
    match dispatched {
        Some(upid) => {
            wait(client, &upid).await?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// The mark a create in progress writes.
fn creating_mark(desired: &Desired) -> Mark {
    Mark::creating(
        &desired.name,
        &desired.fleet,
        &desired.create_token,
        &desired.template,
    )
    .with_seed_hash(&seed_hash(
        Some(&desired.create_token),
        desired.user_data.as_deref(),
        desired.network_config.as_deref(),
    ))
}

/// The seed's volume id and bytes for this VM (pure: the same input gives the same bytes).
pub(super) fn build_seed(desired: &Desired, node: &str, vmid: u32) -> Step<(String, bytes::Bytes)> {
    let seed = desired
        .seed(node, vmid)
        .build()
        .map_err(|e| StepError::Failed(format!("building the seed ISO failed: {e}")))?;
    Ok((
        format!("{}:iso/{}", desired.seed_storage, seed.file_name_suggestion),
        bytes::Bytes::from(seed.bytes),
    ))
}

/// Uploads the seed to its storage on the VM's node. Uploads overwrite, so repeating one is
/// harmless.
pub(super) async fn upload_seed(
    client: &Client,
    node: &str,
    volume: &str,
    bytes: bytes::Bytes,
    deadline: Instant,
) -> Step<()> {
    let (storage, file) = volume
        .split_once(":iso/")
        .ok_or_else(|| StepError::Failed(format!("unexpected seed volume `{volume}`")))?;
    let storage = client.node(node).storage(storage);
    run_task(client, deadline, || {
        storage.upload(Upload::iso(file, bytes.clone()))
    })
    .await?;
    Ok(())
}

/// A create attempt's hold on its VM (see the module doc): the [`OwnedVm`] of this
/// attempt's token, whose "not ours" means another create took the VM over.
pub(super) struct Hold<'a> {
    pub vm: OwnedVm<'a>,
    pub desired: &'a Desired,
}

impl<'a> Hold<'a> {
    pub fn new(
        client: &'a Client,
        node: &str,
        vmid: u32,
        desired: &'a Desired,
        deadline: Instant,
    ) -> Self {
        Hold {
            vm: OwnedVm {
                client,
                node: node.to_owned(),
                vmid,
                expected: Expected {
                    name: Some(&desired.name),
                    fleet: &desired.fleet,
                    token: ExpectedToken::Is {
                        token: &desired.create_token,
                        proof: None,
                    },
                },
                deadline,
            },
            desired,
        }
    }

    fn qemu(&self) -> pve::qemu::Qemu<'_> {
        self.vm.qemu()
    }

    fn taken_over(&self) -> StepError {
        // The other create's token is not named: tokens stay out of messages and logs.
        StepError::TakenOver(format!(
            "VM {} on {} (`{}`) was taken over by another create of the same name, from another \
            Terraform state or a concurrent apply. That create finishes it; this one stopped \
            without changing anything more, and nothing of the VM is kept in this state. Import it \
            if this configuration should own it, or choose another `name`.",
            self.vm.vmid, self.vm.node, self.desired.name,
        ))
    }

    /// For a create, a VM that is not this attempt's any more was taken over.
    fn taken_over_if_not_ours<T>(&self, step: Step<T>) -> Step<T> {
        match step {
            Err(StepError::NotOurs(_)) => Err(self.taken_over()),
            other => other,
        }
    }

    async fn conditional<F, Fut>(&self, what: &str, attempt: F) -> Step<()>
    where
        F: Fn(Seen) -> Fut,
        Fut: Future<Output = Step<()>>,
    {
        self.taken_over_if_not_ours(self.vm.conditional(what, attempt).await)
    }

    /// Makes the VM this create's: our token in the mark (replacing whatever token it holds:
    /// an interrupted create's, or a concurrent create's that claimed before our read, which
    /// then stops at its next write) and our tags, in one write conditional on the digest
    /// read. True when it replaced an earlier attempt's token. Stops with
    /// [`StepError::TakenOver`] when the VM is not an unfinished create of this name any more
    /// (another create finished it, or the mark is gone), and when another create's claim
    /// lands between our read and our write: PVE refuses our digest, and the next read shows
    /// their token.
    pub async fn claim(&self) -> Step<bool> {
        let mut seen_token: Option<Option<String>> = None;
        for _ in 0..CONDITIONAL_ATTEMPTS {
            let config =
                retry_idempotent(&patient(self.vm.deadline), || self.qemu().config()).await?;
            let mark = match ownership::classify(
                config.description().as_deref(),
                &self.desired.name,
                &self.desired.fleet,
            ) {
                Ownership::OursForThisName(mark) => mark,
                // Someone replaced the mark since the slot was chosen: not ours to resume.
                _ => return Err(self.taken_over()),
            };
            // Another create finished it (or a destroy is removing it) since the slot was
            // chosen: it is theirs.
            if mark.phase != Phase::Creating
                && mark.create_token.as_deref() != Some(&self.desired.create_token)
            {
                return Err(self.taken_over());
            }
            // A token that changed since our last look is a concurrent claim that won.
            if let Some(seen) = &seen_token
                && *seen != mark.create_token
                && mark.create_token.as_deref() != Some(&self.desired.create_token)
            {
                return Err(self.taken_over());
            }
            seen_token = Some(mark.create_token.clone());
            let mut update = ConfigUpdate::new();
            let description = creating_mark(self.desired).render();
            let replaces = mark.create_token.as_deref() != Some(&self.desired.create_token);
            if replaces {
                tracing::info!(vmid = self.vm.vmid, "taking over an interrupted create");
                update = update.description(&description);
            }
            let tags = self.tags_for(&config);
            if current_tags(&config) != tags {
                update = update.set("tags", tags);
            }
            if update.is_empty() {
                return Ok(false);
            }
            let change = Conditional::new(update, &Digest::of(&config, self.vm.vmid)?);
            match self.vm.write(&change).await {
                Ok(()) => return Ok(replaces),
                Err(StepError::Pve(e)) if e.kind() == ErrorKind::Conflict => continue,
                Err(e) => return Err(e),
            }
        }
        failed(format!(
            "the config of VM {} kept changing while this create tried to resume it",
            self.vm.vmid
        ))
    }

    fn tags_for(&self, config: &VmConfig) -> String {
        let user = match &self.desired.tags {
            Some(tags) => ownership::normalise_tags(tags.iter().map(String::as_str)),
            None => ownership::user_tags(&config.tags().join(";")),
        };
        ownership::tags_to_write(&user, &self.desired.fleet)
    }

    /// The config step of the create: [`config_update`] with the seed and this attempt's
    /// mark, sent conditionally; stops with [`StepError::TakenOver`] once another create
    /// holds the VM.
    pub async fn write_config_unless_taken_over(&self, seed_volume: &str) -> Step<()> {
        self.conditional("write the config", |seen| async move {
            let update = config_update(&seen.config, self.desired, Some(seed_volume), true)?;
            if update.is_empty() {
                return Ok(());
            }
            self.vm
                .write_task(&Conditional::new(update, &seen.digest))
                .await
        })
        .await
    }

    /// Grows the boot disk to `disk_gib`, conditionally.
    pub async fn grow_disk(&self) -> Step<()> {
        self.taken_over_if_not_ours(grow_disk(&self.vm, self.desired.disk_gib).await)
    }

    /// Starts (or stops) the VM as the create wants it, after checking it is still ours.
    pub async fn ensure_power(&self) -> Step<()> {
        self.taken_over_if_not_ours(ensure_power(&self.vm, self.desired.started).await)
    }

    /// The create's very last step: the mark says `done`, so no other create adopts the VM.
    pub async fn finish(&self) -> Step<()> {
        self.conditional("mark the create finished", |seen| async move {
            let done = creating_mark(self.desired).with_phase(Phase::Done).render();
            if seen.config.description().as_deref().map(str::trim_end) == Some(done.as_str()) {
                return Ok(());
            }
            let change = Conditional::new(ConfigUpdate::new().description(&done), &seen.digest);
            self.vm.write(&change).await
        })
        .await
    }
}

fn current_tags(config: &VmConfig) -> String {
    ownership::normalise_tags(config.tags().iter().map(String::as_str)).join(";")
}

/// What to change so the VM has the desired cores, memory, agent, seed as `ide2`, tags and
/// net0 bridge/VLAN (keeping its MAC). Only keys whose value differs are included.
fn config_update(
    current: &VmConfig,
    desired: &Desired,
    seed_volume: Option<&str>,
    creating: bool,
) -> Step<ConfigUpdate> {
    let mut update = ConfigUpdate::new();
    if let Some(cores) = desired.cores.filter(|c| *c != current.cores()) {
        update = update.cores(cores);
    }
    if let Some(memory) = desired.memory_mib.filter(|m| *m != current.memory_mib()) {
        update = update.memory_mib(memory);
    }
    if !current.agent_enabled() {
        update = update.agent(true);
    }
    if let Some(volume) = seed_volume {
        let (storage, file) = volume
            .split_once(":iso/")
            .ok_or_else(|| StepError::Failed(format!("unexpected seed volume `{volume}`")))?;
        let wanted = CdromDrive::iso(storage, file);
        let attached = current.cdrom("ide2").and_then(Result::ok);
        if attached.as_ref().map(|d| &d.volume) != Some(&wanted.volume) {
            update = update.cdrom("ide2", &wanted);
        }
    }
    let user_tags = match &desired.tags {
        Some(tags) => ownership::normalise_tags(tags.iter().map(String::as_str)),
        None => ownership::user_tags(&current.tags().join(";")),
    };
    let tags = ownership::tags_to_write(&user_tags, &desired.fleet);
    if current_tags(current) != tags {
        update = update.set("tags", tags);
    }
    if creating {
        let description = creating_mark(desired).render();
        if current.description().as_deref().map(str::trim_end) != Some(description.as_str()) {
            update = update.description(&description);
        }
    }
    if desired.bridge.is_some() || desired.vlan_tag.is_some() {
        match current.net(0) {
            Some(Ok(mut net)) => {
                let before = net.clone();
                if let Some(bridge) = &desired.bridge {
                    net.bridge = Some(bridge.clone());
                }
                if let Some(tag) = desired.vlan_tag {
                    net.tag = Some(tag);
                }
                // The MAC stays in the value we send: without it PVE would make a new one.
                if net != before {
                    update = update.net(0, &net);
                }
            }
            Some(Err(e)) => return failed(format!("the VM's net0 cannot be read: {e}")),
            None => {
                return failed(
                    "the template has no net0 network interface to put on a bridge or VLAN",
                );
            }
        }
    }
    Ok(update)
}

/// The boot disk's key and new size when it is smaller than `wanted` GiB.
fn growth_needed(config: &VmConfig, wanted: u64) -> Step<Option<(String, ByteSize)>> {
    let Some((key, disk)) = config.boot_disk() else {
        return failed("the VM has no boot disk to grow");
    };
    let current = disk.size.map(|s| s.bytes()).unwrap_or(0);
    if current >= ByteSize::gib(wanted).bytes() {
        return Ok(None);
    }
    Ok(Some((key, ByteSize::gib(wanted))))
}

/// Update's config step: the desired cores, memory, tags and network, conditional on the
/// digest of a read that found the VM still this instance's (a concurrent edit in the UI
/// makes PVE refuse the write; it is read and decided again).
pub(super) async fn write_config_if_still_ours(vm: &OwnedVm<'_>, desired: &Desired) -> Step<()> {
    vm.conditional("write the config", |seen| async move {
        let update = config_update(&seen.config, desired, None, false)?;
        if update.is_empty() {
            return Ok(());
        }
        vm.write_task(&Conditional::new(update, &seen.digest)).await
    })
    .await
}

/// The disk step of create and update: grows the boot disk to `disk_gib` when it is
/// smaller, conditional on the digest of the read that decided it.
pub(super) async fn grow_disk(vm: &OwnedVm<'_>, disk_gib: Option<u64>) -> Step<()> {
    let Some(wanted) = disk_gib else {
        return Ok(());
    };
    vm.conditional("grow the disk", |seen| async move {
        let Some((key, size)) = growth_needed(&seen.config, wanted)? else {
            return Ok(());
        };
        vm.grow(&key, size, &seen.digest).await
    })
    .await
}

/// Brings the power state to `running`; start only if stopped. Each start or shutdown is
/// sent right after a check that the VM is still this instance's, and a lost answer is
/// checked against the VM's status before the call is sent again.
pub(super) async fn ensure_power(vm: &OwnedVm<'_>, running: bool) -> Step<()> {
    let qemu = &vm.qemu();
    let deadline = vm.deadline;
    let vmid = vm.vmid;
    // The worker met a lock (a backup): wait, then look again.
    wait_out_locks(&mut Backoff::for_locks(deadline), || async move {
        let status = retry_idempotent(&patient(deadline), || qemu.status()).await?;
        if status.is_running() == running {
            return Ok(());
        }
        let upid = if running {
            vm.power_task(
                || qemu.start(),
                || async { Ok(qemu.status().await?.is_running()) },
            )
            .await?
        } else {
            // A clean shutdown first; PVE stops it hard after the timeout.
            vm.power_task(
                || qemu.shutdown(Some(60), true),
                || async { Ok(!qemu.status().await?.is_running()) },
            )
            .await?
        };
        let Some(upid) = upid else { return Ok(()) };
        match wait(vm.client, &upid).await {
            Ok(_) => Ok(()),
            Err(locked) if locked.lock().is_some() => Err(locked),
            Err(error) => {
                // Another task brought it there first (`VM … already running`): the state
                // we want is what counts.
                let now = retry_idempotent(&patient(deadline), || qemu.status()).await?;
                if now.is_running() != running {
                    return Err(error);
                }
                tracing::info!(
                    vmid,
                    running,
                    "the power task failed, but the VM is already as wanted"
                );
                Ok(())
            }
        }
    })
    .await
}

/// Applies pending changes with one PVE reboot task: PVE finishes it even if this process is
/// killed meanwhile, so the VM never stays stopped half-way. Sent once: after a lost answer
/// the node's task list is asked whether a reboot task of this VM started since, before
/// anything is sent again; a lock met by the task is waited out with a fresh ownership check
/// before the next send.
pub(super) async fn reboot(vm: &OwnedVm<'_>) -> Step<()> {
    let qemu = &vm.qemu();
    let node = &vm.client.node(&vm.node);
    wait_out_locks(&mut Backoff::for_locks(vm.deadline), || async move {
        // The reboot tasks PVE knows before this send: a new one afterwards is ours (task
        // ids, not clocks, so a node's clock skew cannot mislead the check).
        let known: Vec<String> = retry_idempotent(&patient(vm.deadline), || {
            node.tasks_of_vm(vm.vmid, "qmreboot")
        })
        .await?
        .into_iter()
        .map(|t| t.upid)
        .collect();
        let known = &known;
        let upid = vm
            .power_task(
                || qemu.reboot(Some(60)),
                || async move {
                    let tasks = node.tasks_of_vm(vm.vmid, "qmreboot").await?;
                    Ok(tasks.iter().any(|t| !known.contains(&t.upid)))
                },
            )
            .await?;
        let Some(upid) = upid else { return Ok(()) };
        wait(vm.client, &upid).await?;
        Ok(())
    })
    .await
}

/// Polls the guest agent until it reports a usable IPv4 address or the deadline passes, and
/// returns what it reported. The timeout error says what the agent last answered: no agent,
/// or an agent without an IPv4 address (a DHCP or network-config problem). The looks are
/// paced like task polls: near the boot time learned from this process's earlier creates,
/// and early when a VM started beside this one gets its address.
pub(super) async fn wait_for_address(
    client: &Client,
    node: &str,
    vmid: u32,
    deadline: Instant,
) -> Step<Vec<GuestInterface>> {
    let agent = client.node(node).qemu(vmid).agent();
    // A guest boots for seconds, and each look at an agent that is not up yet holds a PVE
    // worker until the agent times out: a gentler ladder than a task's.
    let pace = pve::TaskWait {
        first_poll: Duration::from_millis(300),
        backoff: 2.0,
        ..client.config().task_wait.clone()
    };
    let mut pacer = pve::Pacer::new(client.task_times(), "guest-address", &pace);
    let mut last = "no answer yet".to_owned();
    let mut agent_answered = false;
    loop {
        if tokio::time::timeout_at(deadline, pacer.pause())
            .await
            .is_err()
        {
            let hint = if agent_answered {
                "The VM runs and its guest agent answers, but the guest got no IPv4 address: check \
                DHCP on the bridge/VLAN, or give a static address with `network_config`; or set \
                wait_for_address = false."
            } else {
                "The VM runs; check that the image can install qemu-guest-agent (the seed's \
                vendor-data does it on Debian/Ubuntu), or set wait_for_address = false."
            };
            return failed(format!(
                "no IPv4 address from the guest agent within the create timeout (last answer: \
                {last}). {hint}"
            ));
        }
        match agent.network_get_interfaces().await {
            Ok(interfaces) => {
                if interfaces
                    .iter()
                    .flat_map(|i| &i.ip_addresses)
                    .any(|ip| ip.is_usable_ipv4())
                {
                    pacer.finished();
                    tracing::info!(
                        vmid,
                        duration_ms = pacer.elapsed().as_millis() as u64,
                        polls = pacer.looks(),
                        "the guest agent reports an IPv4 address"
                    );
                    return Ok(interfaces);
                }
                if !agent_answered {
                    tracing::info!(
                        vmid,
                        "the guest agent answers but reports no IPv4 address yet (waiting for DHCP \
                        or the network config)"
                    );
                }
                agent_answered = true;
                last = "the guest agent answers but reports no IPv4 address".to_owned();
            }
            Err(e) => last = e.to_string(),
        }
        pacer.still_running();
    }
}
