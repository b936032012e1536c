//! The lifecycle of a proxy VM as plain async functions over `pve::Client` and `nocloud`.
//!
//! Every step is a PVE task that is waited on, and every step is idempotent, so a create
//! interrupted anywhere resumes on the next apply: it adopts the VM it left (recognised by
//! the ownership mark written in the clone call), re-uploads the seed, rewrites the config,
//! grows only if still smaller, starts only if stopped. It never clones a duplicate and never
//! changes a VM without our mark.

use std::time::Duration;

use pve::qemu::{CloneRequest, ConfigUpdate, DestroyOptions, GuestInterface, VmConfig};
use pve::storage::Upload;
use pve::wire::{ByteSize, CdromDrive};
use pve::{Client, ErrorKind, RetryPolicy, retry_idempotent};
use tokio::time::Instant;

use super::model::{Desired, Observed, seed_hash};
use crate::context::Configured;
use crate::ownership::{self, Mark, Ownership};

/// Why a lifecycle step failed, with what the user needs to find the VM again.
#[derive(Debug)]
pub struct Failure {
    /// The VM exists (at least partly) and belongs in state, tainted.
    pub made: Option<(u32, String)>,
    pub error: StepError,
}

#[derive(Debug)]
pub enum StepError {
    Pve(Box<pve::Error>),
    Plain(String),
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Pve(e) => write!(f, "{e}"),
            StepError::Plain(text) => f.write_str(text),
        }
    }
}

impl From<pve::Error> for StepError {
    fn from(e: pve::Error) -> Self {
        StepError::Pve(Box::new(e))
    }
}

type Step<T> = Result<T, StepError>;

fn plain<T>(text: impl Into<String>) -> Step<T> {
    Err(StepError::Plain(text.into()))
}

/// Retries for calls that are safe to repeat, lock timeouts included: another task on the
/// same VM (our own parallel clones, a backup) usually finishes within seconds.
fn patient() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 8,
        ..RetryPolicy::default()
    }
    .with_locked()
}

async fn wait(client: &Client, upid: &pve::Upid) -> Step<pve::TaskOutcome> {
    Ok(client.wait_for_task(upid).await?)
}

// ---------------------------------------------------------------- template and VMID

/// Where the template lives: (node, vmid).
async fn resolve_template(
    client: &Client,
    listing: &[pve::cluster::ClusterVm],
    template: &str,
    node: &str,
) -> Step<(String, u32)> {
    let named: Vec<&pve::cluster::ClusterVm> = match template.parse::<u32>() {
        Ok(vmid) => listing.iter().filter(|vm| vm.vmid == vmid).collect(),
        Err(_) => listing
            .iter()
            .filter(|vm| vm.guest_type == "qemu" && vm.name.as_deref() == Some(template))
            .collect(),
    };
    // Templates first; a plain VM of that name is still chosen, so the error can say what it is.
    let mut candidates: Vec<&pve::cluster::ClusterVm> =
        named.iter().copied().filter(|vm| vm.template).collect();
    if candidates.is_empty() {
        candidates = named;
    }
    let chosen = candidates
        .iter()
        .find(|vm| vm.node == node)
        .or_else(|| candidates.first())
        .copied();
    let Some(vm) = chosen else {
        return plain(format!(
            "template `{template}` was not found in the cluster. Check the name (or give its VMID), and that the API token may see it (VM.Audit)."
        ));
    };
    let config = retry_idempotent(&RetryPolicy::default(), || {
        client.node(&vm.node).qemu(vm.vmid).config()
    })
    .await?;
    if !config.is_template() {
        return plain(format!(
            "VM {} (`{template}`) on {} is not a template. Convert it to a template in PVE (More → Convert to template), or name another.",
            vm.vmid, vm.node
        ));
    }
    Ok((vm.node.clone(), vm.vmid))
}

/// The seed storage must exist on the node, be active and take ISO images: checked before
/// anything is cloned, so a wrong `seed_storage` leaves nothing to clean up.
async fn check_seed_storage(client: &Client, node: &str, storage: &str) -> Step<()> {
    let info = retry_idempotent(&RetryPolicy::default(), || {
        client.node(node).storage(storage).status()
    })
    .await?;
    if !info.enabled || !info.active {
        return plain(format!(
            "the seed storage `{storage}` is not active on node {node}. Enable it there, or choose another with `seed_storage`."
        ));
    }
    if !info.accepts("iso") {
        return plain(format!(
            "the seed storage `{storage}` does not take ISO images (its content types: {}). Enable ISO images on it in Datacenter → Storage, or choose another with `seed_storage`.",
            info.content
        ));
    }
    Ok(())
}

/// A VMID to create on: fresh (nothing there) or ours to adopt (on this node).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    Fresh(u32),
    Adopt(u32, String),
}

/// Holds a VMID reservation for as long as a create uses it.
struct Reservation<'a> {
    runtime: &'a crate::runtime::Runtime,
    vmid: u32,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.runtime.release_vmid(self.vmid);
    }
}

/// Waits until a VM is no longer locked by a clone: a half-made VM has no name or
/// description until the clone writes its config, so ownership is decided afterwards. A
/// clone with `target` ends by moving the config to the target node, so a VM that vanishes
/// from one node is looked for on the others. Returns where it is and its config, or `None`
/// when it is gone (a failed clone cleans up after itself).
async fn config_after_clone(
    client: &Client,
    node: &str,
    vmid: u32,
    deadline: Instant,
) -> Step<Option<(String, VmConfig)>> {
    let mut node = node.to_owned();
    let mut delay = Duration::from_millis(100);
    loop {
        match client.node(&node).qemu(vmid).config().await {
            Ok(config) if config.lock().as_deref() == Some("clone") => {}
            Ok(config) => return Ok(Some((node, config))),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                match retry_idempotent(&RetryPolicy::default(), || client.cluster().locate_vm(vmid))
                    .await?
                {
                    Some(entry) if entry.node != node => {
                        node = entry.node;
                        continue;
                    }
                    Some(_) => {}
                    None => return Ok(None),
                }
            }
            Err(e) if e.kind() == ErrorKind::Transient => {}
            Err(e) => return Err(e.into()),
        }
        if Instant::now() + delay > deadline {
            return plain(format!(
                "VM {vmid} on {node} stayed locked by a clone until the timeout"
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// A fresh listing, for decisions a cached one could get wrong: it may predate VMs made a
/// moment ago.
async fn fresh_listing(client: &Client) -> Step<Vec<pve::cluster::ClusterVm>> {
    Ok(retry_idempotent(&RetryPolicy::default(), || client.cluster().vm_resources()).await?)
}

async fn choose_slot<'a>(
    configured: &'a Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
    deadline: Instant,
) -> Step<(Slot, Reservation<'a>)> {
    let client = &configured.client;
    let runtime = &configured.runtime;
    let candidates = candidate_vmids(configured, desired);
    for vmid in candidates {
        if !runtime.reserve_vmid(vmid) {
            if desired.vmid.is_some() {
                return plain(format!(
                    "VMID {vmid} is also being created by another resource in this run"
                ));
            }
            continue;
        }
        let reservation = Reservation { runtime, vmid };
        let Some(existing) = listing.iter().find(|vm| vm.vmid == vmid) else {
            return Ok((Slot::Fresh(vmid), reservation));
        };
        let found = config_after_clone(client, &existing.node, vmid, deadline).await?;
        let Some((node, config)) = found else {
            // It was a clone that failed and cleaned up: the VMID is free again.
            return Ok((Slot::Fresh(vmid), reservation));
        };
        match ownership::classify(config.description().as_deref(), &desired.name) {
            Ownership::OursForThisName => {
                tracing::info!(vmid, %node, name = %desired.name, "adopting a VM this resource made earlier");
                return Ok((Slot::Adopt(vmid, node), reservation));
            }
            other => {
                if desired.vmid.is_some() {
                    let whose = match other {
                        Ownership::OursForAnotherName(owner) => format!("the proxy VM `{owner}`"),
                        _ => "a VM not managed by this provider".to_owned(),
                    };
                    return plain(format!(
                        "VMID {vmid} is taken by {whose}; it is never modified. Choose another `vmid`, or leave it unset to derive one."
                    ));
                }
                tracing::debug!(
                    vmid,
                    "VMID taken by a VM that is not this resource's; probing on"
                );
            }
        }
    }
    plain(format!(
        "no free VMID left in the provider's range {} for `{}`",
        configured.vmid_range, desired.name
    ))
}

/// The VMIDs a create tries, in order: the configured one, or the name's probe sequence.
fn candidate_vmids<'a>(
    configured: &'a Configured,
    desired: &'a Desired,
) -> Box<dyn Iterator<Item = u32> + Send + 'a> {
    match desired.vmid {
        Some(vmid) => Box::new(std::iter::once(vmid)),
        None => Box::new(configured.vmid_range.probe_sequence(&desired.name)),
    }
}

/// The VM this resource made, if one exists: where a create that was cut short left it.
pub async fn locate_own(configured: &Configured, desired: &Desired) -> Option<(u32, String)> {
    let client = &configured.client;
    let listing = client.cluster().vm_resources().await.ok()?;
    let candidates = candidate_vmids(configured, desired);
    for vmid in candidates {
        // Probing stops where a create would have stopped: at the first free VMID.
        let entry = listing.iter().find(|vm| vm.vmid == vmid)?;
        let config = client.node(&entry.node).qemu(vmid).config().await.ok()?;
        let is_clone_in_progress = config.lock().as_deref() == Some("clone");
        // A clone in progress has no description yet, so it may be ours.
        if is_clone_in_progress
            || ownership::classify(config.description().as_deref(), &desired.name)
                == Ownership::OursForThisName
        {
            return Some((vmid, entry.node.clone()));
        }
    }
    None
}

// ---------------------------------------------------------------- create

/// Clones the template onto `vmid`, waiting out the task. A lost answer is checked against
/// the cluster before anything is sent again, so a clone never happens twice.
async fn clone_vm(
    client: &Client,
    template: (&str, u32),
    vmid: u32,
    desired: &Desired,
) -> Step<()> {
    let mut request = CloneRequest::full(vmid);
    request.name = Some(desired.name.clone());
    request.description = Some(Mark::new(&desired.name, &desired.template).render());
    request.target = (template.0 != desired.node).then(|| desired.node.clone());
    request.storage = desired.clone_storage.clone();
    request.pool = desired.pool.clone();
    let source = client.node(template.0).qemu(template.1);
    let dispatched = pve::retry_with_check(
        &RetryPolicy::default(),
        || async { source.clone_to(&request).await.map(Some) },
        || async {
            // Did the lost request start a clone? Then the VMID exists now.
            match client.cluster().vm_resources().await {
                Ok(list) if list.iter().any(|vm| vm.vmid == vmid) => Ok(Some(None)),
                Ok(_) => Ok(None),
                Err(e) => Err(e),
            }
        },
    )
    .await?;
    if let Some(upid) = dispatched {
        wait(client, &upid).await?;
    }
    Ok(())
}

async fn upload_seed(client: &Client, node: &str, vmid: u32, desired: &Desired) -> Step<String> {
    let seed = desired
        .seed(node, vmid)
        .build()
        .map_err(|e| StepError::Plain(format!("building the seed ISO failed: {e}")))?;
    let bytes = bytes::Bytes::from(seed.bytes);
    let file = seed.file_name_suggestion;
    let storage = client.node(node).storage(&desired.seed_storage);
    // Uploads overwrite, so repeating one is harmless.
    let upid = retry_idempotent(&patient(), || {
        storage.upload(Upload::iso(&file, bytes.clone()))
    })
    .await?;
    wait(client, &upid).await?;
    Ok(format!("{}:iso/{file}", desired.seed_storage))
}

/// Writes cores, memory, agent, the seed as `ide2`, tags, the mark with the seed hash, and
/// net0's bridge/VLAN keeping its MAC. Only keys whose value differs are sent.
async fn write_config(
    client: &Client,
    node: &str,
    vmid: u32,
    desired: &Desired,
    seed_volume: Option<&str>,
) -> Step<()> {
    let qemu = client.node(node).qemu(vmid);
    let current = retry_idempotent(&patient(), || qemu.config()).await?;
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
    let tags = ownership::tags_to_write(&user_tags);
    if ownership::normalise_tags(current.tags().iter().map(String::as_str)).join(";") != tags {
        update = update.set("tags", tags);
    }
    let mark = Mark::new(&desired.name, &desired.template).with_seed_hash(&seed_hash(
        desired.user_data.as_deref(),
        desired.network_config.as_deref(),
    ));
    let description = mark.render();
    if current.description().as_deref().map(str::trim_end) != Some(description.as_str()) {
        update = update.description(&description);
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
    if update.is_empty() {
        return Ok(());
    }
    let upid = retry_idempotent(&patient(), || qemu.update_config_async(&update)).await?;
    wait(client, &upid).await?;
    Ok(())
}

async fn grow_disk(client: &Client, node: &str, vmid: u32, disk_gib: Option<u64>) -> Step<()> {
    let Some(wanted) = disk_gib else {
        return Ok(());
    };
    let qemu = client.node(node).qemu(vmid);
    let config = retry_idempotent(&patient(), || qemu.config()).await?;
    let Some((key, disk)) = config.boot_disk() else {
        return plain("the VM has no boot disk to grow");
    };
    let current = disk.size.map(|s| s.bytes()).unwrap_or(0);
    if current >= ByteSize::gib(wanted).bytes() {
        return Ok(());
    }
    let upid = retry_idempotent(&patient(), || qemu.resize(&key, ByteSize::gib(wanted))).await?;
    wait(client, &upid).await?;
    Ok(())
}

/// Brings the power state to `running`; start only if stopped.
async fn ensure_power(client: &Client, node: &str, vmid: u32, running: bool) -> Step<()> {
    let qemu = client.node(node).qemu(vmid);
    let status = retry_idempotent(&patient(), || qemu.status()).await?;
    if status.is_running() == running {
        return Ok(());
    }
    let upid = if running {
        pve::retry_with_check(
            &patient(),
            || async { qemu.start().await.map(Some) },
            || async { Ok(qemu.status().await?.is_running().then_some(None)) },
        )
        .await?
    } else {
        // A clean shutdown first; PVE stops it hard after the timeout.
        pve::retry_with_check(
            &patient(),
            || async { qemu.shutdown(Some(60), true).await.map(Some) },
            || async { Ok((!qemu.status().await?.is_running()).then_some(None)) },
        )
        .await?
    };
    if let Some(upid) = upid {
        wait(client, &upid).await?;
    }
    Ok(())
}

/// Polls the guest agent until it reports a usable IPv4 address or the deadline passes, and
/// returns what it reported.
async fn wait_for_address(
    client: &Client,
    node: &str,
    vmid: u32,
    deadline: Instant,
) -> Step<Vec<GuestInterface>> {
    let agent = client.node(node).qemu(vmid).agent();
    let mut delay = Duration::from_millis(200);
    let mut last;
    loop {
        match agent.network_get_interfaces().await {
            Ok(interfaces) => {
                if interfaces
                    .iter()
                    .flat_map(|i| &i.ip_addresses)
                    .any(|ip| ip.is_usable_ipv4())
                {
                    return Ok(interfaces);
                }
                last = "the guest agent reports no IPv4 address yet".into();
            }
            Err(e) => last = e.to_string(),
        }
        if Instant::now() + delay > deadline {
            return plain(format!(
                "no IPv4 address from the guest agent within the create timeout (last answer: {last}). The VM runs; check that the image can install qemu-guest-agent (the seed's vendor-data does it on Debian/Ubuntu), or set wait_for_address = false."
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 3 / 2).min(Duration::from_secs(3));
    }
}

/// Create, steps 1–7 of the design, resuming whatever an earlier run left.
pub async fn create(configured: &Configured, desired: &Desired) -> Result<Observed, Failure> {
    let deadline = Instant::now() + desired.timeouts.create;
    let client = &configured.client;
    let _name_guard = configured.runtime.lock_name(&desired.name).await;
    let before = |error: StepError| Failure { made: None, error };

    check_seed_storage(client, &desired.node, &desired.seed_storage)
        .await
        .map_err(before)?;
    // One listing serves the template lookup and the first choice of VMID.
    let listing = fresh_listing(client).await.map_err(before)?;
    let template = resolve_template(client, &listing, &desired.template, &desired.node)
        .await
        .map_err(before)?;
    let (mut slot, mut reservation) = choose_slot(configured, desired, &listing, deadline)
        .await
        .map_err(before)?;
    // Another process may take a fresh VMID between our look and our clone: PVE then
    // refuses the clone, and we look again.
    for attempt in 1.. {
        let Slot::Fresh(vmid) = slot else { break };
        match clone_vm(client, (&template.0, template.1), vmid, desired).await {
            Ok(()) => {
                slot = Slot::Adopt(vmid, desired.node.clone());
            }
            Err(StepError::Pve(e)) if e.kind() == ErrorKind::AlreadyExists && attempt < 5 => {
                tracing::info!(vmid, "VMID taken meanwhile; choosing again");
                // Our own claim on the VMID must not make us skip it: it may be ours now.
                drop(reservation);
                let listing = fresh_listing(client).await.map_err(before)?;
                let (next, claim) = choose_slot(configured, desired, &listing, deadline)
                    .await
                    .map_err(before)?;
                slot = next;
                reservation = claim;
            }
            Err(StepError::Pve(e)) if e.kind() == ErrorKind::Locked && attempt < 5 => {
                tracing::info!(vmid, "template busy; cloning again");
                tokio::time::sleep(Duration::from_millis(250 * attempt)).await;
            }
            Err(error) => {
                // A failed clone task removes what it made; only a VM that exists is ours to track.
                let exists = client.node(&desired.node).qemu(vmid).config().await.is_ok();
                return Err(Failure {
                    made: exists.then(|| (vmid, desired.node.clone())),
                    error,
                });
            }
        }
    }
    let Slot::Adopt(vmid, node) = slot else {
        unreachable!("the loop leaves only adopted slots")
    };
    configured.runtime.forget_listing().await;
    // An adopted clone may still be running, and may end on another node: follow it.
    let found = config_after_clone(client, &node, vmid, deadline)
        .await
        .map_err(|error| Failure {
            made: Some((vmid, node.clone())),
            error,
        })?;
    let Some((node, _)) = found else {
        return Err(Failure {
            made: None,
            error: StepError::Plain(format!("VM {vmid} vanished right after its clone")),
        });
    };
    let _claim = reservation;
    let made = || Some((vmid, node.clone()));
    let after = |error: StepError| Failure {
        made: made(),
        error,
    };

    let seed_volume = upload_seed(client, &node, vmid, desired)
        .await
        .map_err(after)?;
    write_config(client, &node, vmid, desired, Some(&seed_volume))
        .await
        .map_err(after)?;
    grow_disk(client, &node, vmid, desired.disk_gib)
        .await
        .map_err(after)?;
    ensure_power(client, &node, vmid, desired.started)
        .await
        .map_err(after)?;
    let reported = if desired.started && desired.wait_for_address {
        Some(
            wait_for_address(client, &node, vmid, deadline)
                .await
                .map_err(after)?,
        )
    } else {
        None
    };
    match observe_with(client, &node, vmid, desired.pool.clone(), reported).await {
        Ok(Some(observed)) => Ok(observed),
        Ok(None) => Err(after(StepError::Plain(format!(
            "VM {vmid} vanished right after it was created"
        )))),
        Err(error) => Err(after(error)),
    }
}

// ---------------------------------------------------------------- read

/// What drift detection needs of one VM on a known node: config, status, and one agent
/// attempt without waiting. `None` when the VM is not there.
pub async fn observe(
    client: &Client,
    node: &str,
    vmid: u32,
    pool: Option<String>,
) -> Step<Option<Observed>> {
    observe_with(client, node, vmid, pool, None).await
}

/// [`observe`], with the agent's interfaces when the caller already has them.
pub async fn observe_with(
    client: &Client,
    node: &str,
    vmid: u32,
    pool: Option<String>,
    reported: Option<Vec<GuestInterface>>,
) -> Step<Option<Observed>> {
    let qemu = client.node(node).qemu(vmid);
    let config = match retry_idempotent(&RetryPolicy::default(), || qemu.config()).await {
        Ok(config) => config,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let status = match retry_idempotent(&RetryPolicy::default(), || qemu.status()).await {
        Ok(status) => status,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let net = config.net(0).and_then(Result::ok);
    let mac = net.as_ref().and_then(|n| n.mac.clone());
    let (mut ipv4, mut ipv6) = (Vec::new(), Vec::new());
    if status.is_running() && config.agent_enabled() {
        // One attempt: an agent that is not up yet is not an error for a refresh.
        let interfaces = match reported {
            Some(interfaces) => Ok(interfaces),
            None => qemu.agent().network_get_interfaces().await,
        };
        if let Ok(mut interfaces) = interfaces {
            // The interface with net0's MAC first, so the primary address is on it.
            interfaces.sort_by_key(|i| {
                let same = i
                    .hardware_address
                    .as_deref()
                    .zip(mac.as_deref())
                    .is_some_and(|(a, b)| a.eq_ignore_ascii_case(b));
                !same
            });
            for interface in interfaces.iter().filter(|i| i.name != "lo") {
                for ip in &interface.ip_addresses {
                    if ip.is_usable_ipv4() {
                        ipv4.push(ip.address.clone());
                    } else if ip.kind == "ipv6" && ip.address != "::1" {
                        ipv6.push(ip.address.clone());
                    }
                }
            }
        }
    }
    let disk = config.boot_disk();
    let status_text = match status.qmpstatus.as_deref() {
        Some("paused") => "paused".to_owned(),
        _ => status.status.clone(),
    };
    Ok(Some(Observed {
        vmid,
        node: node.to_owned(),
        name: config.name().unwrap_or_default(),
        mark: config.description().as_deref().and_then(Mark::parse),
        cores: config.cores(),
        memory_mib: config.memory_mib(),
        disk_gib: disk
            .as_ref()
            .and_then(|(_, d)| d.size)
            .map(|s| s.gib_ceil()),
        disk_storage: disk
            .as_ref()
            .and_then(|(_, d)| d.storage().map(str::to_owned)),
        bridge: net.as_ref().and_then(|n| n.bridge.clone()),
        vlan_tag: net.as_ref().and_then(|n| n.tag),
        mac,
        tags: ownership::user_tags(&config.tags().join(";")),
        seed_volume: config.cdrom("ide2").and_then(Result::ok).map(|d| d.volume),
        status: status_text,
        running: status.is_running(),
        pool,
        ipv4,
        ipv6,
    }))
}

/// What a read finds at a VMID.
#[derive(Debug)]
pub enum Found {
    /// This resource's VM.
    Ours(Box<Observed>),
    /// Still being cloned: it exists, but shows nothing to compare yet.
    Cloning,
    /// Nothing there, or a VM that is not this resource's.
    Gone,
}

/// Finds VM `vmid` through the shared listing (following a migration) and observes it.
pub async fn read(configured: &Configured, vmid: u32, name: Option<&str>) -> Step<Found> {
    let listing = configured.runtime.vm_listing(&configured.client).await?;
    let Some(entry) = listing.iter().find(|vm| vm.vmid == vmid) else {
        return Ok(Found::Gone);
    };
    if entry.lock.as_deref() == Some("clone") {
        return Ok(Found::Cloning);
    }
    let Some(observed) = observe(&configured.client, &entry.node, vmid, entry.pool.clone()).await?
    else {
        return Ok(Found::Gone);
    };
    let ours = match (&observed.mark, name) {
        (Some(mark), Some(name)) => mark.owner == name,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if !ours {
        tracing::warn!(
            vmid,
            "the VM at this VMID has no ownership mark for this resource: treating ours as gone"
        );
        return Ok(Found::Gone);
    }
    Ok(Found::Ours(Box::new(observed)))
}

// ---------------------------------------------------------------- update

/// What an update did that the caller reports.
#[derive(Debug, Default)]
pub struct Updated {
    /// PVE holds some changes until a reboot.
    pub pending_warning: Option<String>,
    /// The VM was (re)started and its agent already reported these interfaces.
    pub interfaces: Option<Vec<GuestInterface>>,
}

/// In-place changes: config, disk growth, power. A VM that had to be started is waited on
/// like a created one, so its address is known when the apply ends.
pub async fn update(
    configured: &Configured,
    node: &str,
    vmid: u32,
    desired: &Desired,
    disk_changed: bool,
    deadline: Instant,
) -> Step<Updated> {
    let client = &configured.client;
    write_config(client, node, vmid, desired, None).await?;
    if disk_changed {
        grow_disk(client, node, vmid, desired.disk_gib).await?;
    }
    let mut updated = Updated::default();
    let qemu = client.node(node).qemu(vmid);
    let was_running = qemu.status().await?.is_running();
    let mut rebooting = false;
    if desired.started && was_running {
        let pending: Vec<String> = qemu
            .pending()
            .await?
            .into_iter()
            .filter(|p| p.is_pending())
            .map(|p| p.key)
            .collect();
        if !pending.is_empty() {
            if desired.reboot_if_needed {
                tracing::info!(vmid, ?pending, "rebooting to apply pending changes");
                ensure_power(client, node, vmid, false).await?;
                rebooting = true;
            } else {
                updated.pending_warning = Some(format!(
                    "PVE applies these changes to VM {vmid} at its next boot: {}. Reboot it, or set reboot_if_needed = true to let the provider do it.",
                    pending.join(", ")
                ));
            }
        }
    }
    ensure_power(client, node, vmid, desired.started).await?;
    let booted = desired.started && (!was_running || rebooting);
    if booted && desired.wait_for_address {
        updated.interfaces = Some(wait_for_address(client, node, vmid, deadline).await?);
    }
    Ok(updated)
}

// ---------------------------------------------------------------- delete

/// Stop, delete the seed, destroy with purge. The seed goes first, so a failed seed delete
/// leaves the VM for the next delete instead of leaking the ISO. A VM already gone is done.
pub async fn delete(
    configured: &Configured,
    vmid: u32,
    name: &str,
    seed: Option<(&str, &str)>,
) -> Step<Option<String>> {
    let client = &configured.client;
    let _name_guard = configured.runtime.lock_name(name).await;
    let listing =
        retry_idempotent(&RetryPolicy::default(), || client.cluster().vm_resources()).await?;
    let location = listing
        .iter()
        .find(|vm| vm.vmid == vmid)
        .map(|vm| vm.node.clone());
    let mut note = None;
    let vm_is_ours = match &location {
        None => false,
        Some(node) => {
            match retry_idempotent(&patient(), || client.node(node).qemu(vmid).config()).await {
                Ok(config) => match ownership::classify(config.description().as_deref(), name) {
                    Ownership::OursForThisName => true,
                    _ => {
                        note = Some(format!(
                            "VM {vmid} now belongs to something else (no ownership mark for `{name}`); it was left untouched."
                        ));
                        false
                    }
                },
                Err(e) if e.kind() == ErrorKind::NotFound => false,
                Err(e) => return Err(e.into()),
            }
        }
    };
    if let (true, Some(node)) = (vm_is_ours, &location) {
        let qemu = client.node(node).qemu(vmid);
        if retry_idempotent(&patient(), || qemu.status())
            .await?
            .is_running()
        {
            // Hard stop: the VM is going away.
            let upid = retry_idempotent(&patient(), || qemu.stop()).await?;
            wait(client, &upid).await?;
        }
    }
    if let Some((seed_node, volume)) = seed
        && let Some((storage, _)) = volume.split_once(':')
    {
        let store = client.node(seed_node).storage(storage);
        match retry_idempotent(&patient(), || store.delete_volume(volume)).await {
            Ok(upid) => {
                wait(client, &upid).await?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let (true, Some(node)) = (vm_is_ours, &location) {
        let qemu = client.node(node).qemu(vmid);
        let options = DestroyOptions {
            purge: true,
            destroy_unreferenced_disks: true,
        };
        match retry_idempotent(&patient(), || qemu.destroy(options)).await {
            Ok(upid) => {
                wait(client, &upid).await?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    configured.runtime.forget_listing().await;
    Ok(note)
}
