//! cloud-init's `power_state` (canonical/cloud-init `config/cc_power_state_change.py`): the
//! last module of `cloud_final_modules` (`config/cloud.cfg.tmpl`), run once per instance
//! (`frequency = PER_INSTANCE`). It forks a child that waits until the `modules-final`
//! process has exited (`run_after_pid_gone`: so `result.json` is written first), then runs
//! `shutdown -P|-H|-r <delay>` (`Distro.shutdown_command`, `shutdown_options_map`): the
//! guest powers off (QEMU exits: PVE shows the VM stopped), halts (the OS stops, QEMU runs
//! on: PVE shows it running, with no agent) or reboots (QEMU stays: no pending change is
//! applied, cloud-init runs its per-boot stages again).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::agent;

/// `power_state.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerMode {
    Poweroff,
    Halt,
    Reboot,
}

/// A `power_state` cloud-init acts on: its mode and its `delay` (`now`, or `+m` minutes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerState {
    pub mode: PowerMode,
    pub delay: Duration,
}

/// The user-data's `power_state`, when cloud-init would act on it. `load_power_state`
/// refuses (and `handle` only logs) a mode other than `halt`, `poweroff`, `reboot` and a
/// delay other than `now` or an integer of minutes; `condition: false` does nothing. A
/// command as `condition` is taken as met (the simulator runs no commands).
pub fn from_user_data(user_data: &str) -> Option<PowerState> {
    let fields = section_fields(user_data)?;
    let field = |key: &str| {
        fields
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let mode = match field("mode")? {
        "poweroff" => PowerMode::Poweroff,
        "halt" => PowerMode::Halt,
        "reboot" => PowerMode::Reboot,
        _ => return None,
    };
    let delay = match field("delay").unwrap_or("now") {
        "now" => Duration::ZERO,
        // Python's `int("+5")` is 5.
        minutes => Duration::from_secs(60 * minutes.parse::<u64>().ok()?),
    };
    if matches!(field("condition"), Some("false" | "False" | "no" | "off")) {
        return None;
    }
    Some(PowerState { mode, delay })
}

/// The `key: value` lines of the last cloud-config part's `power_state`, block or flow
/// style (`power_state: {mode: reboot}`), quotes removed.
fn section_fields(user_data: &str) -> Option<Vec<(String, String)>> {
    let body = agent::cloud_config_value(user_data, "power_state", Some)?;
    let text = body.join("\n");
    let text = text.trim().trim_start_matches('{').trim_end_matches('}');
    Some(
        text.split([',', '\n'])
            .filter_map(|item| {
                let (key, value) = item.split_once(':')?;
                let value = value.split(" #").next().unwrap_or_default();
                Some((
                    key.trim().to_string(),
                    value.trim().trim_matches(['"', '\'']).to_string(),
                ))
            })
            .collect(),
    )
}

/// When guests have a power change due: [`crate::guest_power_due::settle`] looks here
/// first, so a world with none due costs one comparison.
#[derive(Debug, Default)]
pub struct GuestPowerClock {
    pub due: BTreeSet<Instant>,
}

impl GuestPowerClock {
    /// A guest's power change falls due at `at`.
    pub fn schedule(&mut self, at: Instant) {
        self.due.insert(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_state_is_read_as_cloud_init_reads_it() {
        let block = "#cloud-config\npower_state:\n  mode: poweroff\n  delay: \"+2\"\n";
        assert_eq!(
            from_user_data(block),
            Some(PowerState {
                mode: PowerMode::Poweroff,
                delay: Duration::from_secs(120),
            })
        );
        let flow = "#cloud-config\npackages: [nginx]\npower_state: {mode: reboot}\n";
        assert_eq!(
            from_user_data(flow),
            Some(PowerState {
                mode: PowerMode::Reboot,
                delay: Duration::ZERO,
            })
        );
        let halt = "#cloud-config\npower_state:\n  mode: 'halt'\n  message: bye\n";
        assert_eq!(from_user_data(halt).map(|p| p.mode), Some(PowerMode::Halt));
        // Refused by `load_power_state`, or not met: nothing happens.
        for text in [
            "#cloud-config\npower_state:\n  mode: sleep\n",
            "#cloud-config\npower_state:\n  mode: reboot\n  delay: soon\n",
            "#cloud-config\npower_state:\n  mode: reboot\n  condition: false\n",
            "#cloud-config\npackages: [nginx]\n",
            "#!/bin/sh\npower_state: {mode: reboot}\n",
        ] {
            assert_eq!(from_user_data(text), None, "{text}");
        }
    }
}
