//! A guest's own power change (cloud-init's `power_state`, see `guest_power`, or the
//! reboot a package upgrade asks for) carried out on the world when it falls due. Done
//! lazily, at the start of every request and admin call, as the rest of a guest's boot is
//! read off the clock: every look from its moment on sees it, however late a timer would
//! have run on a loaded machine.

use std::time::Duration;

use tokio::time::Instant;

use crate::guest_power::PowerMode;
use crate::world::World;

/// Carries out the power changes due at `now`, of guests still in the boot that planned
/// them (a VM stopped or rebooted meanwhile has another run, or none), each at its own
/// moment: what the guest left on its disk, and a rebooted guest's new boot, are as of
/// then, however late the look that settles them. A rebooted guest's next change may be due
/// too, so this goes on until none is.
pub fn settle(world: &mut World, now: Instant) {
    while world.guest_power.due.first().is_some_and(|at| *at <= now) {
        world.guest_power.due.retain(|at| *at > now);
        let due: Vec<(u32, Instant, PowerMode)> = world
            .vms
            .values()
            .filter(|vm| vm.running)
            .filter_map(|vm| {
                let (at, mode) = vm.guest.run.as_ref()?.power?;
                (at <= now).then_some((vm.vmid, at, mode))
            })
            .collect();
        for (vmid, at, mode) in due {
            act(world, vmid, at, mode);
        }
    }
}

fn act(world: &mut World, vmid: u32, at: Instant, mode: PowerMode) {
    if let Some(vm) = world.vms.get_mut(&vmid) {
        crate::cloud_init::halt(vm, at);
    }
    match mode {
        PowerMode::Poweroff => {
            crate::qemu::halt(world, vmid);
            // The HA stack starts a VM it should keep started (the LRM's `started`).
            if world.ha.is_managed(vmid) {
                let delay = Duration::from_millis(world.timings.ha_delay_ms);
                world.ha.schedule(delay);
            }
        }
        PowerMode::Halt => {
            if let Some(vm) = world.vms.get_mut(&vmid) {
                vm.agent = None;
            }
        }
        PowerMode::Reboot => crate::cloud_init::boot(world, vmid, at),
    }
}
