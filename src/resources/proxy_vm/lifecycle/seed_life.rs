//! The seed's life after the address: cloud-init's verdict ([`super::cloud_init`]) and,
//! with `seed_lifetime = "until_ready"`, the detach ([`super::detach`]); for create, for an
//! update that detaches a seed a refresh found ready, and for that refresh's one look.

use std::time::Duration;

use tokio::time::Instant;

use super::super::model::{Desired, SeedLifetime, SeedStays, WaitFor};
use super::cloud_init::{
    GuestFile, INSTANCE_ID, Verdict, read_guest_file, recorded_verdict, result_json,
    wait_for_cloud_init,
};
use super::detach::{self, detach_seed};
use super::error::{Step, StepError};
use super::expected::Expected;
use super::guest::Guest;
use super::operation::Operation;
use super::owned::OwnedVm;
use super::ready::wait_for_address;
use crate::context::Configured;

pub use super::detach::Detach;

/// How long the detach after cloud-init's verdict may take (a conditional write and the
/// ISO's delete), beyond `cloud_init_timeout`.
const DETACH_ALLOWANCE: Duration = Duration::from_secs(120);

/// What the seed's life after the address came to.
#[derive(Debug, Default)]
pub struct SeedOutcome {
    /// For the apply's warnings.
    pub warnings: Vec<String>,
    /// The seed was detached and its ISO deleted: the state records none.
    pub deleted: bool,
    /// The first boot's verdict is still to be read (not booted, or cloud-init still ran at
    /// `cloud_init_timeout`): a later apply waits for it.
    pub verdict_pending: bool,
    /// Why the seed stays for the VM's life, when that was found out.
    pub stays: Option<SeedStays>,
}

/// What a first boot's cloud-init is waited for against.
#[derive(Debug, Clone, Copy)]
pub struct FirstBoot<'a> {
    /// How long the verdict may take once the VM has its address.
    pub timeout: Duration,
    /// The instance-id of the seed the VM must have booted.
    pub instance_id: &'a str,
    /// The create is a `create_before_destroy` replacement: a verdict still outstanding
    /// must fail it, so the VM it replaces stays.
    pub replaces_beside: bool,
}

/// Cloud-init's verdict when the create waits for it (`wait_for = "cloud-init"`, started,
/// and the agent reported an address), then the detach when `seed_lifetime` says so. A
/// verdict with errors stops the create; a detach that could not finish is a warning (the
/// state keeps the seed, and the next plan shows its detach again).
pub(super) async fn after_ready(
    vm: &OwnedVm<'_>,
    desired: &Desired,
    seed: (&str, &str),
    addressed: bool,
    first_boot: FirstBoot<'_>,
) -> Step<SeedOutcome> {
    let mut outcome = SeedOutcome::default();
    if desired.wait_for != WaitFor::CloudInit {
        return Ok(outcome);
    }
    if !addressed {
        // Not booted (created stopped): the apply that starts it waits for the verdict.
        outcome.verdict_pending = true;
        return Ok(outcome);
    }
    // The verdict has its own bound, apart from the create's (#39).
    let deadline = Instant::now() + first_boot.timeout;
    let op = Operation::new(vm.client(), deadline + DETACH_ALLOWANCE);
    let vm = &vm.with_op(op);
    let (judged, seed_asked) = verdict(vm, deadline, first_boot.instance_id, &mut outcome).await?;
    // Which instance the guest booted, unless the verdict asked already.
    let booted = async {
        if seed_asked {
            return Ok(());
        }
        booted_its_seed(vm, first_boot.instance_id).await
    };
    match judged {
        Judged::Clean if desired.seed_lifetime == SeedLifetime::UntilReady => {
            // The detach's reads go out beside the instance-id's, not one after another:
            // a VM that did not boot its seed stops the create before anything is written.
            let (booted, looked) = tokio::join!(booted, detach::look(vm));
            booted?;
            detach_after_verdict(vm, seed, Some(looked), &mut outcome).await?;
        }
        Judged::Clean => booted.await?,
        Judged::StillRunning if first_boot.replaces_beside => {
            return Err(StepError::Unworkable(still_running_text(
                vm.vmid(),
                first_boot,
            )));
        }
        Judged::Stopped if first_boot.replaces_beside => {
            return Err(StepError::Unworkable(format!(
                "VM {} stopped before cloud-init's verdict could be read. This create replaces \
                 a VM under create_before_destroy, so it fails here and the VM it replaces \
                 stays; the new VM is kept (tainted) and the next apply replaces it.",
                vm.vmid()
            )));
        }
        Judged::StillRunning | Judged::Stopped | Judged::Unknown => {}
    }
    Ok(outcome)
}

/// A create whose VM stopped while it waited for the guest agent's address: a warning, as
/// for a stop before cloud-init's verdict, and the apply that starts the VM again waits for
/// both. A `create_before_destroy` replacement fails instead, so the VM it replaces stays.
pub(super) fn stopped_before_address(
    vmid: u32,
    desired: &Desired,
    first_boot: FirstBoot<'_>,
) -> Step<SeedOutcome> {
    if first_boot.replaces_beside {
        return Err(StepError::Unworkable(format!(
            "VM {vmid} stopped before its guest agent reported an address. This create replaces \
             a VM under create_before_destroy, so it fails here and the VM it replaces stays; \
             the new VM is kept (tainted) and the next apply replaces it."
        )));
    }
    let awaits_verdict = desired.wait_for == WaitFor::CloudInit;
    let then = if awaits_verdict {
        "its address and cloud-init's verdict, and detaches the seed once cloud-init finished"
    } else {
        "its address"
    };
    Ok(SeedOutcome {
        warnings: vec![format!(
            "VM {vmid} stopped before its guest agent reported an address (its node rebooted, \
             someone stopped it, or its user-data powers it off): the VM stays, untainted, with \
             its seed, and the apply that starts it again waits for {then}. For a guest that \
             powers itself off by design, set started = false once it has."
        )],
        verdict_pending: awaits_verdict,
        ..SeedOutcome::default()
    })
}

fn still_running_text(vmid: u32, first_boot: FirstBoot<'_>) -> String {
    format!(
        "cloud-init in VM {vmid} was still running after cloud_init_timeout ({} s), with no \
         error so far. This create replaces a VM under create_before_destroy, so it fails \
         here and the VM it replaces stays; the new VM is kept (tainted) and the next apply \
         replaces it. Raise cloud_init_timeout for this image, or read the guest's \
         /var/log/cloud-init-output.log to see what takes so long.",
        first_boot.timeout.as_secs()
    )
}

/// The detach once cloud-init finished cleanly: done, kept for good (no marker, the guest
/// refusing the read), or left to a later apply (a warning).
pub(super) async fn detach_after_verdict(
    vm: &OwnedVm<'_>,
    (seed_node, seed_volume): (&str, &str),
    looked: Option<detach::Looked>,
    outcome: &mut SeedOutcome,
) -> Step<()> {
    match detach_seed(vm, seed_node, seed_volume, looked).await {
        Ok(Detach::Done) => outcome.deleted = true,
        Ok(Detach::Kept { why, stays }) => {
            outcome.warnings.push(why);
            outcome.stays = Some(stays);
        }
        Err(e) if e.is_not_ours() => return Err(e),
        Err(e) => outcome.warnings.push(format!(
            "the seed of VM {} could not be detached yet ({e}); it stays in the state, and the \
             next plan shows its detach",
            vm.vmid()
        )),
    }
    Ok(())
}

/// How a first boot's verdict ended, for what follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// Finished cleanly (recoverable errors are warnings), and the VM booted its own seed.
    Clean,
    /// The guest cannot be asked: a warning, and the seed stays for good.
    Unknown,
    /// Still running at `deadline`: a warning, and a later apply waits again.
    StillRunning,
    /// The VM stopped before the verdict could be read: a warning, and the apply that
    /// starts it again waits for the verdict.
    Stopped,
}

/// Waits until `deadline` for the first boot's cloud-init verdict, recording in `outcome`
/// what it means for the seed. Errors stop the operation ([`StepError::CloudInitFailed`]);
/// so does a VM that did not boot its own seed (a template whose cloud-init cache was not
/// cleaned: its clones never read their seed, #39).
pub(super) async fn judge(
    vm: &OwnedVm<'_>,
    deadline: Instant,
    instance_id: &str,
    outcome: &mut SeedOutcome,
) -> Step<Judged> {
    let (judged, seed_asked) = verdict(vm, deadline, instance_id, outcome).await?;
    if judged == Judged::Clean && !seed_asked {
        booted_its_seed(vm, instance_id).await?;
    }
    Ok(judged)
}

/// [`judge`] without the look at which seed the guest booted: the caller makes it (with
/// other reads beside it) before it counts [`Judged::Clean`], unless it was made here (the
/// `bool`). A boot in which cloud-init does not run is that case: a clone of a template that
/// keeps it off never read its seed, which fails here; a later boot of this instance (a
/// hardened image rebooted before the verdict was read) is judged by what its first boot
/// left on the disk.
async fn verdict(
    vm: &OwnedVm<'_>,
    deadline: Instant,
    instance_id: &str,
    outcome: &mut SeedOutcome,
) -> Step<(Judged, bool)> {
    let vmid = vm.vmid();
    let (found, seed_asked) = match wait_for_cloud_init(Guest::Owned(vm), deadline).await? {
        Verdict::Disabled => {
            booted_its_seed(vm, instance_id).await?;
            let recorded = recorded_verdict(Guest::Owned(vm)).await?;
            (recorded.unwrap_or(Verdict::Disabled), true)
        }
        found => (found, false),
    };
    let judged = judged_verdict(vmid, found, outcome);
    Ok((judged, seed_asked))
}

/// What a verdict means for the seed, its warnings recorded in `outcome`.
fn judged_verdict(vmid: u32, found: Verdict, outcome: &mut SeedOutcome) -> Judged {
    match found {
        Verdict::Disabled => {
            outcome.warnings.push(format!(
                "cloud-init does not run in VM {vmid}'s guest in this boot \
                 (/run/cloud-init/disabled), and its disk holds no finished run to judge. VM \
                 {vmid} counts as ready at its address, and its seed stays attached."
            ));
            Judged::Unknown
        }
        Verdict::Unknown { why, stays } => {
            outcome.warnings.push(format!(
                "{why} VM {vmid} counts as ready at its address, and its seed stays attached."
            ));
            outcome.stays = stays;
            Judged::Unknown
        }
        Verdict::StillRunning => {
            outcome.warnings.push(format!(
                "cloud-init in VM {vmid} was still running after cloud_init_timeout, with no \
                 error so far: the VM stays (untainted) with its seed, and the next apply waits \
                 for cloud-init again and detaches the seed once it finished. Raise \
                 cloud_init_timeout for a first boot this long."
            ));
            outcome.verdict_pending = true;
            Judged::StillRunning
        }
        Verdict::Stopped => {
            outcome.warnings.push(format!(
                "VM {vmid} stopped before cloud-init's verdict could be read (its node \
                 rebooted, someone stopped it, or its user-data powers it off): its seed stays, \
                 and the apply that starts it again waits for the verdict and detaches the seed \
                 once cloud-init finished."
            ));
            outcome.verdict_pending = true;
            Judged::Stopped
        }
        Verdict::Clean { recoverable } => {
            if !recoverable.is_empty() {
                outcome.warnings.push(format!(
                    "cloud-init in VM {vmid} finished, degraded (recoverable errors):\n  {}",
                    recoverable.join("\n  ")
                ));
            }
            Judged::Clean
        }
    }
}

/// Whether the guest's cloud-init ran as the instance its seed names. A clone of a template
/// made from a VM without `cloud-init clean` keeps that VM's cache and its `manual-clean`
/// marker: cloud-init trusts the cache, never reads the seed, and reports success while
/// none of the seed's user-data ran. A guest that cannot be asked is not judged here.
async fn booted_its_seed(vm: &OwnedVm<'_>, instance_id: &str) -> Step<()> {
    let file = read_guest_file(Guest::Owned(vm), INSTANCE_ID).await?;
    let GuestFile::Read(bytes) = file else {
        return Ok(());
    };
    let found = String::from_utf8_lossy(&bytes).trim().to_owned();
    if found == instance_id {
        return Ok(());
    }
    Err(StepError::CloudInitFailed(format!(
        "VM {} did not boot its seed: its cloud-init holds instance `{found}`, not the seed's \
         `{instance_id}`, so none of this configuration's user-data ran (the VM reports \
         success all the same). Its template carries an earlier VM's cloud-init cache, which \
         its cloud-init trusts or, with /etc/cloud/cloud-init.disabled on the disk (a \
         hardened image after its first boot), never even runs past: in the VM the template \
         is made from, remove that file if it is there, run `cloud-init clean --logs --seed`, \
         shut it down, and make the template again. The VM is kept with its seed.",
        vm.vmid()
    )))
}

/// The first boot's verdict an apply waits for when the create could not (the VM was
/// created stopped, or cloud-init still ran at `cloud_init_timeout`): the address within
/// `deadline`, then cloud-init within the verdict's own bound. Later boots never wait for a
/// verdict (a hardened image writes none after its first boot).
pub async fn first_verdict(
    configured: &Configured,
    (node, vmid): (&str, u32),
    template: &str,
    expected: Expected<'_>,
    first_boot: FirstBoot<'_>,
    deadline: Instant,
) -> Step<(Judged, SeedOutcome)> {
    let client = &configured.client;
    let vm = OwnedVm::new(Operation::new(client, deadline), node, vmid, expected);
    wait_for_address(Guest::Owned(&vm), template, deadline).await?;
    let verdict_deadline = Instant::now() + first_boot.timeout;
    // The same VM, followed where it moved during the wait.
    let vm = vm.with_op(Operation::new(client, verdict_deadline + DETACH_ALLOWANCE));
    let mut outcome = SeedOutcome::default();
    let judged = judge(&vm, verdict_deadline, first_boot.instance_id, &mut outcome).await?;
    Ok((judged, outcome))
}

/// The detach an update applies when the plan dropped `seed_volume` (a refresh found
/// cloud-init finished, or a detach that an earlier apply left unfinished). With the seed's
/// `instance_id`, the guest is first asked whether it booted that seed, beside the detach's
/// own reads: a refresh judges cloud-init's `result.json` alone (it cannot know the
/// instance-id without the write-only inputs), so a VM whose template carries an earlier
/// VM's cache fails here, keeping its seed, instead of losing it unnoticed.
pub async fn detach(
    configured: &Configured,
    (node, vmid): (&str, u32),
    expected: Expected<'_>,
    (seed_node, seed_volume): (&str, &str),
    instance_id: Option<&str>,
    deadline: Instant,
) -> Step<Detach> {
    let vm = OwnedVm::new(
        Operation::new(&configured.client, deadline),
        node,
        vmid,
        expected,
    );
    let looked = match instance_id {
        Some(instance_id) => {
            let (booted, looked) =
                tokio::join!(booted_its_seed(&vm, instance_id), detach::look(&vm));
            booted?;
            Some(looked)
        }
        None => None,
    };
    detach_seed(&vm, seed_node, seed_volume, looked).await
}

/// What a refresh's look found of a seed still attached (`until_ready`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// cloud-init finished this boot without errors and the guest holds the `manual-clean`
    /// marker: the apply may detach it.
    Ready,
    /// Not yet (cloud-init running, the VM stopped, the agent not up yet, a privilege the
    /// token lacks): the next refresh looks again.
    NotYet,
    /// Never: recorded, and no refresh asks again (#39).
    Stays(SeedStays),
}

/// A refresh's look at a VM whose seed is still attached and whose lifetime is
/// `until_ready`: whether the apply may detach it now, i.e. cloud-init finished this boot
/// (or, in a boot without cloud-init, its last run did) without errors and the guest holds
/// the `manual-clean` marker. Two agent reads, four in a boot without cloud-init.
/// What can never change (a failed run, a guest refusing reads, no marker, no agent after
/// `silence` of uptime) is [`Readiness::Stays`]. `silence` is the VM's `cloud_init_timeout`:
/// a first boot that has no agent answering by then has none (an image that ships none,
/// under `wait_for = "none"`), and each look at it costs PVE's 3 s agent ping.
pub async fn seed_readiness(
    configured: &Configured,
    (node, vmid): (&str, u32),
    uptime: Option<u64>,
    silence: Duration,
) -> Readiness {
    let guest = Guest::Listed {
        client: &configured.client,
        node,
        vmid,
    };
    match result_json(guest).await {
        Ok(GuestFile::Read(bytes)) => match run_errors(&bytes) {
            Some(0) => {}
            Some(_) => return Readiness::Stays(SeedStays::FirstBootFailed),
            None => return Readiness::NotYet,
        },
        Ok(GuestFile::Refused { stays, .. }) => {
            return stays.map_or(Readiness::NotYet, Readiness::Stays);
        }
        Err(StepError::Pve(e))
            if e.agent_failure() == Some(pve::AgentFailure::NotRunning)
                && uptime.is_some_and(|up| up >= silence.as_secs()) =>
        {
            return Readiness::Stays(SeedStays::NoAgent);
        }
        Ok(GuestFile::Missing) | Err(_) => return Readiness::NotYet,
    }
    let marker = nocloud::render::MANUAL_CLEAN_MARKER;
    match read_guest_file(guest, marker).await {
        Ok(GuestFile::Read(_)) => Readiness::Ready,
        Ok(GuestFile::Missing) => Readiness::Stays(SeedStays::NoMarker),
        Ok(GuestFile::Refused { stays, .. }) => stays.map_or(Readiness::NotYet, Readiness::Stays),
        Err(_) => Readiness::NotYet,
    }
}

/// How many errors a finished run's `result.json` names; `None` when it cannot be read.
fn run_errors(result_json: &[u8]) -> Option<usize> {
    let json: serde_json::Value = serde_json::from_slice(result_json).ok()?;
    json.pointer("/v1/errors")?.as_array().map(Vec::len)
}
