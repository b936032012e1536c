//! A guest's own power change (cloud-init `power_state`, see `guest_power`) carried out on
//! the world when it falls due. Done lazily, at the start of every request and admin call,
//! as the rest of a guest's boot is read off the clock: every look from its moment on sees
//! it, however late a timer would have run on a loaded machine.

use std::time::Duration;

use tokio::time::Instant;

use crate::guest_power::PowerMode;
use crate::world::World;

/// Carries out the power changes due at `now`, of guests still in the boot that planned
/// them (a VM stopped or rebooted meanwhile has another run, or none).
pub fn settle(world: &mut World, now: Instant) {
    if world.guest_power.due.first().is_none_or(|at| *at > now) {
        return;
    }
    world.guest_power.due.retain(|at| *at > now);
    let due: Vec<(u32, PowerMode)> = world
        .vms
        .values()
        .filter(|vm| vm.running)
        .filter_map(|vm| {
            let (at, mode) = vm.guest.run.as_ref()?.power?;
            (at <= now).then_some((vm.vmid, mode))
        })
        .collect();
    for (vmid, mode) in due {
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
                    crate::cloud_init::halt(vm, now);
                    vm.agent = None;
                }
            }
            PowerMode::Reboot => {
                if let Some(vm) = world.vms.get_mut(&vmid) {
                    crate::cloud_init::halt(vm, now);
                }
                crate::cloud_init::boot(world, vmid, now);
            }
        }
    }
}
