//! The single steps of a create, each a waited-on PVE task and each safe to repeat; update
//! reuses the config, disk and power steps.
//!
//! A create's config writes go through [`Hold`]: each is conditional on the config digest it
//! last read, and each read checks that the mark still carries this create's token. So when
//! two creates resume the same unfinished VM, PVE decides which one continues, and the other
//! stops without writing anything more.

use std::future::Future;
use std::time::Duration;

use pve::qemu::{CloneRequest, ConfigUpdate, GuestInterface, VmConfig};
use pve::storage::Upload;
use pve::wire::{ByteSize, CdromDrive};
use pve::{Client, ErrorKind, retry_idempotent};
use tokio::time::Instant;

use super::super::model::{Desired, seed_hash};
use super::slot::already_made;
use super::{Step, StepError, next_lock_delay, patient, plain, run_task, wait};
use crate::ownership::{self, Mark, Ownership, Phase};

/// How many times (250 ms apart) a clone whose answer was lost is looked for before it is
/// sent again: PVE's worker creates the new VMID moments after the answer.
const CLONE_WINDOW_LOOKS: u32 = 16;

/// How often a conditional write is re-decided after PVE refused its digest before the
/// create gives up: someone else keeps changing the VM.
const CONDITIONAL_ATTEMPTS: u32 = 6;

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
            for _ in 0..CLONE_WINDOW_LOOKS {
                if client.cluster().locate_vm(vmid).await?.is_some() {
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
        desired.user_data.as_deref(),
        desired.network_config.as_deref(),
    ))
}

/// The seed's volume id and bytes for this VM (pure: the same input gives the same bytes).
pub(super) fn build_seed(desired: &Desired, node: &str, vmid: u32) -> Step<(String, bytes::Bytes)> {
    let seed = desired
        .seed(node, vmid)
        .build()
        .map_err(|e| StepError::Plain(format!("building the seed ISO failed: {e}")))?;
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
        .ok_or_else(|| StepError::Plain(format!("unexpected seed volume `{volume}`")))?;
    let storage = client.node(node).storage(storage);
    run_task(client, deadline, || {
        storage.upload(Upload::iso(file, bytes.clone()))
    })
    .await?;
    Ok(())
}

/// A create attempt's hold on its VM (see the module doc).
pub(super) struct Hold<'a> {
    pub client: &'a Client,
    pub node: String,
    pub vmid: u32,
    pub desired: &'a Desired,
    pub deadline: Instant,
}

impl Hold<'_> {
    fn qemu(&self) -> pve::qemu::Qemu<'_> {
        self.client.node(&self.node).qemu(self.vmid)
    }

    fn taken_over(&self, by: Option<&str>) -> StepError {
        StepError::TakenOver(format!(
            "VM {} on {} (`{}`) was taken over by another create of the same name (create {}), from another Terraform state or a concurrent apply. That create finishes it; this one stopped without changing anything more, and nothing of the VM is kept in this state. Import it if this configuration should own it, or choose another `name`.",
            self.vmid,
            self.node,
            self.desired.name,
            by.unwrap_or("unknown"),
        ))
    }

    /// The config, read again; an error if another create's token replaced ours.
    async fn read(&self) -> Step<VmConfig> {
        let config = retry_idempotent(&patient(self.deadline), || self.qemu().config()).await?;
        let mark = config.description().as_deref().and_then(Mark::parse);
        match mark {
            Some(mark)
                if mark.names(&self.desired.name, &self.desired.fleet)
                    && mark.create_token.as_deref() == Some(&self.desired.create_token) =>
            {
                Ok(config)
            }
            Some(mark) => Err(self.taken_over(mark.create_token.as_deref())),
            None => Err(self.taken_over(None)),
        }
    }

    /// Runs a write decided from a fresh read and sent with that read's digest; when PVE
    /// refuses the digest (the config changed meanwhile), reads and decides again.
    async fn conditional<F, Fut>(&self, what: &str, mut attempt: F) -> Step<()>
    where
        F: FnMut(VmConfig) -> Fut,
        Fut: Future<Output = Step<()>>,
    {
        let mut conflicts = 0;
        let mut lock_delay = Duration::from_millis(200);
        while conflicts < CONDITIONAL_ATTEMPTS {
            let config = self.read().await?;
            match attempt(config).await {
                Err(StepError::Pve(e)) if e.kind() == ErrorKind::Conflict => {
                    conflicts += 1;
                    tracing::info!(
                        vmid = self.vmid,
                        step = what,
                        "the VM's config changed since it was read; reading it again"
                    );
                }
                // The task's worker met a lock (a backup): wait, then decide again.
                Err(StepError::Pve(e)) if e.kind() == ErrorKind::Locked => {
                    let Some(pause) = next_lock_delay(&mut lock_delay, self.deadline) else {
                        return Err(StepError::Pve(e));
                    };
                    tracing::info!(vmid = self.vmid, step = what, reason = %e.message(), "waiting out a lock");
                    tokio::time::sleep(pause).await;
                }
                other => return other,
            }
        }
        plain(format!(
            "the config of VM {} kept changing while this create tried to {what}; something else is editing the VM",
            self.vmid
        ))
    }

    /// Makes the VM this create's: our token in the mark (replacing an interrupted create's)
    /// and our tags, in one write conditional on the digest read. Whoever writes first wins:
    /// if another create claims the VM between our read and our write, we stop.
    pub async fn claim(&self) -> Step<()> {
        let mut seen_token: Option<Option<String>> = None;
        for _ in 0..CONDITIONAL_ATTEMPTS {
            let config = retry_idempotent(&patient(self.deadline), || self.qemu().config()).await?;
            let mark = match ownership::classify(
                config.description().as_deref(),
                &self.desired.name,
                &self.desired.fleet,
            ) {
                Ownership::OursForThisName(mark) => mark,
                _ => {
                    return plain(format!(
                        "VM {} on {} no longer carries the mark of `{}`; it was left untouched",
                        self.vmid, self.node, self.desired.name
                    ));
                }
            };
            if mark.phase == Phase::Done
                && mark.create_token.as_deref() != Some(&self.desired.create_token)
            {
                return Err(already_made(self.vmid, &self.node, self.desired));
            }
            // A token that changed since our last look is a concurrent claim that won.
            if let Some(seen) = &seen_token
                && *seen != mark.create_token
                && mark.create_token.as_deref() != Some(&self.desired.create_token)
            {
                return Err(self.taken_over(mark.create_token.as_deref()));
            }
            seen_token = Some(mark.create_token.clone());
            let mut update = ConfigUpdate::new();
            let description = creating_mark(self.desired).render();
            if mark.create_token.as_deref() != Some(&self.desired.create_token) {
                tracing::info!(vmid = self.vmid, previous = ?mark.create_token, "taking over an interrupted create");
                update = update.description(&description);
            }
            let tags = self.tags_for(&config);
            if current_tags(&config) != tags {
                update = update.set("tags", tags);
            }
            if update.is_empty() {
                return Ok(());
            }
            let update = with_digest(update, &config);
            match retry_idempotent(&patient(self.deadline), || {
                self.qemu().update_config(&update)
            })
            .await
            {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Conflict => continue,
                Err(e) => return Err(e.into()),
            }
        }
        plain(format!(
            "the config of VM {} kept changing while this create tried to resume it",
            self.vmid
        ))
    }

    fn tags_for(&self, config: &VmConfig) -> String {
        let user = match &self.desired.tags {
            Some(tags) => ownership::normalise_tags(tags.iter().map(String::as_str)),
            None => ownership::user_tags(&config.tags().join(";")),
        };
        ownership::tags_to_write(&user, &self.desired.fleet)
    }

    /// The config step of the create: [`config_update`] sent conditionally.
    pub async fn write_config(&self, seed_volume: &str) -> Step<()> {
        self.conditional("write the config", |config| async move {
            let update = config_update(&config, self.desired, Some(seed_volume), true)?;
            if update.is_empty() {
                return Ok(());
            }
            let update = with_digest(update, &config);
            let upid = retry_idempotent(&patient(self.deadline), || {
                self.qemu().update_config_async(&update)
            })
            .await?;
            wait(self.client, &upid).await?;
            Ok(())
        })
        .await
    }

    /// Grows the boot disk to `disk_gib`, conditionally.
    pub async fn grow_disk(&self) -> Step<()> {
        let Some(wanted) = self.desired.disk_gib else {
            return Ok(());
        };
        self.conditional("grow the disk", |config| async move {
            let Some((key, size)) = growth_needed(&config, wanted)? else {
                return Ok(());
            };
            let digest = config.digest().unwrap_or_default();
            let upid = retry_idempotent(&patient(self.deadline), || {
                self.qemu().resize_if_unchanged(&key, size, &digest)
            })
            .await?;
            wait(self.client, &upid).await?;
            Ok(())
        })
        .await
    }

    /// Checks the VM is still this create's before a step that is not a config write.
    pub async fn still_ours(&self) -> Step<()> {
        self.read().await.map(|_| ())
    }

    /// The create's very last step: the mark says `done`, so no other create adopts the VM.
    pub async fn finish(&self) -> Step<()> {
        self.conditional("mark the create finished", |config| async move {
            let done = creating_mark(self.desired).with_phase(Phase::Done).render();
            if config.description().as_deref().map(str::trim_end) == Some(done.as_str()) {
                return Ok(());
            }
            let update = with_digest(ConfigUpdate::new().description(&done), &config);
            retry_idempotent(&patient(self.deadline), || {
                self.qemu().update_config(&update)
            })
            .await?;
            Ok(())
        })
        .await
    }
}

fn with_digest(update: ConfigUpdate, config: &VmConfig) -> ConfigUpdate {
    match config.digest() {
        Some(digest) => update.digest(&digest),
        None => update,
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
            .ok_or_else(|| StepError::Plain(format!("unexpected seed volume `{volume}`")))?;
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
            Some(Err(e)) => return plain(format!("the VM's net0 cannot be read: {e}")),
            None => {
                return plain(
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
        return plain("the VM has no boot disk to grow");
    };
    let current = disk.size.map(|s| s.bytes()).unwrap_or(0);
    if current >= ByteSize::gib(wanted).bytes() {
        return Ok(None);
    }
    Ok(Some((key, ByteSize::gib(wanted))))
}

/// Update's config step: the desired cores, memory, tags and network, unconditionally (the
/// VM is this state's; a concurrent edit in the UI is what drift detection shows next).
pub(super) async fn write_config(
    client: &Client,
    node: &str,
    vmid: u32,
    desired: &Desired,
    deadline: Instant,
) -> Step<()> {
    let qemu = client.node(node).qemu(vmid);
    let current = retry_idempotent(&patient(deadline), || qemu.config()).await?;
    let update = config_update(&current, desired, None, false)?;
    if update.is_empty() {
        return Ok(());
    }
    run_task(client, deadline, || qemu.update_config_async(&update)).await?;
    Ok(())
}

/// Update's disk step.
pub(super) async fn grow_disk(
    client: &Client,
    node: &str,
    vmid: u32,
    disk_gib: Option<u64>,
    deadline: Instant,
) -> Step<()> {
    let Some(wanted) = disk_gib else {
        return Ok(());
    };
    let qemu = client.node(node).qemu(vmid);
    let config = retry_idempotent(&patient(deadline), || qemu.config()).await?;
    let Some((key, size)) = growth_needed(&config, wanted)? else {
        return Ok(());
    };
    run_task(client, deadline, || qemu.resize(&key, size)).await?;
    Ok(())
}

/// Brings the power state to `running`; start only if stopped. A lost or unexplained answer
/// is checked against the VM's status before the call is sent again.
pub(super) async fn ensure_power(
    client: &Client,
    node: &str,
    vmid: u32,
    running: bool,
    deadline: Instant,
) -> Step<()> {
    let qemu = client.node(node).qemu(vmid);
    let mut lock_delay = Duration::from_millis(200);
    loop {
        let status = retry_idempotent(&patient(deadline), || qemu.status()).await?;
        if status.is_running() == running {
            return Ok(());
        }
        let upid = if running {
            pve::retry_with_check(
                &patient(deadline),
                || async { qemu.start().await.map(Some) },
                || async { Ok(qemu.status().await?.is_running().then_some(None)) },
            )
            .await?
        } else {
            // A clean shutdown first; PVE stops it hard after the timeout.
            pve::retry_with_check(
                &patient(deadline),
                || async { qemu.shutdown(Some(60), true).await.map(Some) },
                || async { Ok((!qemu.status().await?.is_running()).then_some(None)) },
            )
            .await?
        };
        let Some(upid) = upid else { return Ok(()) };
        match wait(client, &upid).await {
            Ok(_) => return Ok(()),
            // The worker met a lock (a backup): wait, then look again.
            Err(StepError::Pve(e)) if e.kind() == ErrorKind::Locked => {
                let Some(pause) = next_lock_delay(&mut lock_delay, deadline) else {
                    return Err(StepError::Pve(e));
                };
                tokio::time::sleep(pause).await;
            }
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
                return Ok(());
            }
        }
    }
}

/// Applies pending changes with one PVE reboot task: PVE finishes it even if this process is
/// killed meanwhile, so the VM never stays stopped half-way.
pub(super) async fn reboot(client: &Client, node: &str, vmid: u32, deadline: Instant) -> Step<()> {
    let qemu = client.node(node).qemu(vmid);
    run_task(client, deadline, || qemu.reboot(Some(60))).await?;
    Ok(())
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
                "The VM runs and its guest agent answers, but the guest got no IPv4 address: check DHCP on the bridge/VLAN, or give a static address with `network_config`; or set wait_for_address = false."
            } else {
                "The VM runs; check that the image can install qemu-guest-agent (the seed's vendor-data does it on Debian/Ubuntu), or set wait_for_address = false."
            };
            return plain(format!(
                "no IPv4 address from the guest agent within the create timeout (last answer: {last}). {hint}"
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
                        "the guest agent answers but reports no IPv4 address yet (waiting for DHCP or the network config)"
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
