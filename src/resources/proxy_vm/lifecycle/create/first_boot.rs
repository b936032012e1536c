//! A VM's first boot is its holder's (#32, invariant I3). A create that adopts an unfinished
//! VM another create attempt made may find it already started with that attempt's seed:
//! cloud-init reads a seed at the first boot of an instance only, so the VM runs (and
//! keeps) the other attempt's user-data whatever seed is attached later. Such a VM is never
//! re-seeded in place: it is stopped, destroyed and cloned again, all through this
//! attempt's handle (its claim made the VM this attempt's, so no other create writes to it
//! meanwhile).
//!
//! A create attaches its seed before it starts the VM, so a VM that runs, or that has
//! another attempt's seed attached, may have booted that seed (it may have been started and
//! stopped since); only a stopped VM without another attempt's seed surely never booted
//! one. This working directory's own killed create of the same content is not another
//! attempt: `slot` resumes it with its own token, so its seed is this create's.

use super::super::error::{Step, StepError};
use super::super::teardown;
use super::hold::Hold;
use crate::ownership::Phase;

/// Whether the held VM, cloned by this attempt (`made_here`) or adopted, may have booted
/// another attempt's seed. A VM this attempt cloned has not: it carries this attempt's
/// mark from the clone call, and a concurrent create that adopts, seeds and starts it
/// before this attempt's first write (fuzzer seed 9074) changes the mark's token, so that
/// write (conditional on the token) stops this create as taken over, and the VM never
/// gets this attempt's seed.
pub(super) async fn booted_another_seed(
    hold: &Hold<'_>,
    made_here: bool,
    attached: Option<&str>,
) -> Step<bool> {
    if made_here {
        Ok(false)
    } else {
        may_have_booted_another_seed(hold, attached).await
    }
}

fn is_this_attempts(hold: &Hold<'_>, volume: &str) -> bool {
    volume
        .split_once(":iso/")
        .is_some_and(|(_, file)| nocloud::file_belongs_to_attempt(file, &hold.desired.create_token))
}

/// Whether the held VM may have booted a seed that is not this attempt's (see the module
/// doc), from the `ide2` volume its claim read.
async fn may_have_booted_another_seed(hold: &Hold<'_>, attached: Option<&str>) -> Step<bool> {
    if attached == Some("none") {
        // An empty `ide2` on a finished VM of this token: this token's create detached the
        // seed it booted (#30; a create killed inside the detach is resumed so).
        let seen = hold.vm.read().await?;
        if seen.mark.phase == Phase::Done
            && seen.mark.create_token.as_deref() == Some(hold.desired.create_token.as_str())
        {
            return Ok(false);
        }
    }
    match attached.filter(|volume| volume.contains(":iso/")) {
        Some(volume) => Ok(!is_this_attempts(hold, volume)),
        // No seed attached: it booted none of ours, but a VM running without one was
        // started by someone, and whatever it ran is not its holder's seed.
        None => {
            let vm = &hold.vm;
            let status = vm.op().retry(|| vm.qemu().status()).await?;
            Ok(status.is_running())
        }
    }
}

/// How often the discard stops the VM again when PVE refuses its destroy because it runs.
const DISCARD_ATTEMPTS: usize = 3;

/// Stops and destroys the held VM (purge), and waits until PVE no longer knows it, so its
/// VMID can be cloned again. The create this one took the VM from may start it once more
/// between the stop and the destroy (its start is not a config write, so it learns of the
/// claim only at its next one): PVE then refuses the destroy, and the VM is stopped again.
pub(super) async fn discard(hold: &Hold<'_>) -> Step<()> {
    let vm = &hold.vm;
    tracing::info!(
        vmid = vm.vmid(),
        "the adopted VM may have booted another create's seed; destroying it to clone it again"
    );
    let mut attempt = 1;
    let gone = loop {
        hold.unless_taken_over(teardown::stop(vm).await)?;
        match vm.destroy().await {
            Err(StepError::Pve(e))
                if e.is_destroy_of_running_vm() && attempt < DISCARD_ATTEMPTS =>
            {
                tracing::info!(
                    vmid = vm.vmid(),
                    "started again meanwhile; stopping it again"
                );
                attempt += 1;
            }
            other => break hold.unless_taken_over(other)?,
        }
    };
    if !gone {
        teardown::wait_until_gone(vm).await?;
    }
    Ok(())
}
