//! cloud-init in the simulated guest, decided at each boot from what cloud-init's source
//! does (canonical/cloud-init):
//! - `cmd/main.py` `main_init`: `init-local` trusts the cache when the instance's config
//!   set `manual_cache_clean` (or its marker exists), else checks it; `stages.py`
//!   `_restore_from_checked_cache`: NoCloud's `check_instance_id` only reads seed
//!   directories, so a cdrom seed is read again and its `instance-id` compared with the
//!   cached one. Per-instance modules (packages, runcmd: what installs the agent) run only
//!   when the instance-id is new, so a re-attached or changed seed does nothing until then.
//! - `tools/ds-identify`: `/etc/cloud/cloud-init.disabled` stops it first; with no seed
//!   and no `manual-clean` marker no datasource is found and the default policy
//!   (`notfound=disabled`) keeps cloud-init from running that boot.
//! - `cmd/main.py` `status_wrapper`: `init-local` deletes `status.json` and `result.json`;
//!   `modules-final` writes `result.json` (`{"v1": {"datasource", "errors"}}`) at its end;
//!   `status.json`'s layout is the guest profile's release's.
//!
//! The agent (shipped by the image, or installed by an instance's seed, see
//! `agent::installs_and_starts_agent`) answers `agent_boot_ms` after the start, in
//! `modules-final`; the final stage ends `cloud_init_ms` later (`slow_provisioner_ms` for
//! that profile).

use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::agent;
use crate::config::CloudInitErrors;
use crate::guest::{CloudInitRun, Guest, LeftOnDisk, NOCLOUD_CDROM, UnfinishedInstance};
use crate::guest_power::{PowerMode, PowerState};
use crate::guest_profile::{AgentSource, GuestProfile};
use crate::inspect::{GuestState, SeedBoot};
use crate::world::{AgentState, Drive, Vm, World, agent_enabled, is_drive_key};

/// NoCloud's meta-data default when it names no `instance-id` (`DataSourceNoCloud.py`).
const DEFAULT_INSTANCE_ID: &str = "nocloud";

/// A NoCloud seed on a cdrom as the datasource reads it.
struct Seed {
    volid: String,
    sha256: String,
    instance_id: String,
    meta_data: String,
    user_data: String,
    /// `None` also when the user-data switches vendor-data off.
    vendor_data: Option<String>,
}

/// What a boot needs from the world besides the VM.
struct BootInputs {
    seed: Option<Seed>,
    errors_fault: Option<CloudInitErrors>,
    chosen_image: Option<GuestProfile>,
    agent_boot: Duration,
    final_stage: Duration,
    slow_final_stage: Duration,
}

/// The guest boots: cloud-init's run for this boot and whether the agent will answer.
pub fn boot(world: &mut World, vmid: u32, now: Instant) {
    let Some(vm) = world.vms.get(&vmid) else {
        return;
    };
    let name = vm.config.get("name").cloned().unwrap_or_default();
    let matches = |pattern: &str| regex::Regex::new(pattern).is_ok_and(|re| re.is_match(&name));
    let faults = &world.faults;
    let inputs = BootInputs {
        seed: attached_seed(world, vm),
        errors_fault: (faults.cloud_init_errors.iter())
            .find(|f| matches(&f.vm_name_regex))
            .cloned(),
        chosen_image: (faults.guest_profiles.iter())
            .find(|f| matches(&f.vm_name_regex))
            .map(|f| f.profile),
        agent_boot: Duration::from_millis(world.timings.agent_boot_ms),
        final_stage: Duration::from_millis(world.timings.cloud_init_ms),
        slow_final_stage: Duration::from_millis(world.timings.slow_provisioner_ms),
    };
    let Some(vm) = world.vms.get_mut(&vmid) else {
        return;
    };
    let guest = &mut vm.guest;
    if !guest.booted {
        if let Some(profile) = inputs.chosen_image {
            *guest = Guest::from_image(profile);
        }
        guest.booted = true;
    }
    guest.halt(None);
    let agent_at = now + inputs.agent_boot;
    guest.run = cloud_init_run(guest, &vm.node, inputs, now);
    let configured = vm.config.get("agent").is_some_and(|a| agent_enabled(a));
    let runs = guest.agent_installed && guest.profile.agent_source() != AgentSource::Never;
    let power_at = guest
        .run
        .as_ref()
        .and_then(|run| run.power)
        .map(|(at, _)| at);
    vm.agent = (configured && runs).then(|| AgentState {
        ready_at: agent_at,
        hostname: guest.hostname.clone().unwrap_or_else(|| "localhost".into()),
    });
    if let Some(at) = power_at {
        world.guest_power.schedule(at);
    }
}

/// This boot's cloud-init, if it runs. `tools/ds-identify` `_main`: the disable marker
/// (`is_disabled`, rc 2) ends it before anything else; then a trusted cache
/// (`manual_clean_and_existing`) or a seed is a datasource, nothing is none
/// (`notfound=disabled`). `cmd/main.py` `main_init`: with the `manual-clean` marker the
/// cache is trusted (`existing = "trust"`), so a seed is not even looked at.
fn cloud_init_run(
    guest: &mut Guest,
    node: &str,
    inputs: BootInputs,
    now: Instant,
) -> Option<CloudInitRun> {
    if guest.cloud_init_disabled {
        return None;
    }
    let trusted = guest.manual_cache_clean && guest.instance_id.is_some();
    let seed_found = inputs.seed.is_some();
    let (new_instance, modules) = match inputs.seed {
        Some(seed) if !trusted && guest.instance_id.as_deref() != Some(&seed.instance_id) => {
            (true, first_boot_of_instance(guest, node, seed))
        }
        _ => (false, InstanceModules::default()),
    };
    if !trusted && !seed_found {
        return None;
    }
    // Per-instance modules fail or warn only at an instance's first boot, or at the boot
    // that runs what a reboot kept the first from reaching.
    let unfinished = match (inputs.errors_fault, new_instance) {
        (Some(f), true) => UnfinishedInstance {
            errors: f.errors,
            recoverable_errors: f.recoverable_errors,
            power_state: modules.power_state,
        },
        (None, true) => UnfinishedInstance {
            recoverable_errors: guest.profile.recoverable_errors(),
            power_state: modules.power_state,
            ..UnfinishedInstance::default()
        },
        _ => guest.unfinished.take().unwrap_or_default(),
    };
    let agent_at = now + inputs.agent_boot;
    let final_stage = if guest.profile.slow_final_stage() {
        inputs.slow_final_stage
    } else {
        inputs.final_stage
    };
    let final_at = agent_at + final_stage;
    let (unfinished, power) = if new_instance && modules.reboots_after_upgrade {
        // `package_update_upgrade_install` is the first final module: the reboot comes
        // mid-stage, before anything else of the instance ran or result.json was written.
        let reboot_at = agent_at + final_stage / 2;
        guest.unfinished = Some(unfinished);
        (
            UnfinishedInstance::default(),
            Some((reboot_at, PowerMode::Reboot)),
        )
    } else {
        // After `modules-final` exited: `result.json` is written first.
        let power = unfinished.power_state.map(|p| (final_at + p.delay, p.mode));
        (unfinished, power)
    };
    let UnfinishedInstance {
        errors,
        recoverable_errors,
        ..
    } = unfinished;
    Some(CloudInitRun {
        release: guest.profile.cloud_init(),
        booted_at: now,
        booted_unix: unix_now_f64(),
        agent_at,
        final_at,
        datasource: guest.datasource.clone().unwrap_or_default(),
        errors,
        recoverable_errors,
        power,
    })
}

/// Now in Unix seconds, to the microsecond as Python's `time.time()` prints.
fn unix_now_f64() -> f64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (since.as_secs_f64() * 1e6).round() / 1e6
}

/// The admin view of a VM's guest.
pub fn guest_state(vm: &Vm, now: Instant) -> GuestState {
    let guest = &vm.guest;
    GuestState {
        first_seed: guest.seed_boots.first().cloned(),
        seed_boots: guest.seed_boots.clone(),
        instance_id: guest.instance_id.clone(),
        agent_installed: guest.agent_installed,
        manual_cache_clean: guest.manual_cache_clean,
        cloud_init: guest.run.as_ref().map(|r| r.status(now).to_string()),
        files: guest.files.keys().cloned().collect(),
        profile: guest.profile.name(),
        cloud_init_disabled: cloud_init_disabled(guest, now),
    }
}

/// Whether `/etc/cloud/cloud-init.disabled` is on the disk at `now`: the `hardened` image
/// writes it as this boot's final stage ends.
pub fn cloud_init_disabled(guest: &Guest, now: Instant) -> bool {
    guest.cloud_init_disabled
        || guest.run.as_ref().is_some_and(|run| {
            guest.profile.disables_cloud_init_after_first_boot() && now >= run.final_at
        })
}

/// The guest powers off: what this boot's run wrote stays on its disk.
pub fn halt(vm: &mut Vm, now: Instant) {
    let disables = cloud_init_disabled(&vm.guest, now);
    let left = vm.guest.run.as_ref().map(|run| LeftOnDisk {
        log: output_of_run(run, now),
        status: status_json(run, now),
        result: result_json(run, now),
        disables_cloud_init: disables,
    });
    vm.guest.halt(left);
}

/// What an instance's user-data makes its final stage do to the guest's power.
#[derive(Debug, Default)]
struct InstanceModules {
    /// `power_state`, at the end of the final stage.
    power_state: Option<PowerState>,
    /// A reboot right after the package upgrade (see [`reboots_after_upgrade`]).
    reboots_after_upgrade: bool,
}

/// The first boot of the seed's instance: what its per-instance modules leave on the disk,
/// and what its final stage does to the guest's power.
fn first_boot_of_instance(guest: &mut Guest, node: &str, seed: Seed) -> InstanceModules {
    let installs = [Some(&seed.user_data), seed.vendor_data.as_ref()]
        .into_iter()
        .flatten()
        .any(|t| agent::installs_and_starts_agent(t));
    // An image without the agent package in reach (`no-agent`) never gets it.
    guest.agent_installed |= installs && guest.profile.agent_source() != AgentSource::Never;
    if let Some(name) = agent::hostname_from_seed(Some(&seed.meta_data), Some(&seed.user_data)) {
        guest.hostname = Some(name);
    }
    // User cloud-config is merged over vendor-data: its own setting wins.
    guest.manual_cache_clean = cloud_config_flag(&seed.user_data, "manual_cache_clean")
        .or_else(|| {
            seed.vendor_data
                .as_deref()
                .and_then(|v| cloud_config_flag(v, "manual_cache_clean"))
        })
        .unwrap_or(false);
    guest.datasource = Some(NOCLOUD_CDROM.into());
    guest.instance_id = Some(seed.instance_id.clone());
    guest.seed_boots.push(SeedBoot {
        node: node.to_string(),
        volid: seed.volid,
        instance_id: seed.instance_id,
        sha256: seed.sha256,
    });
    InstanceModules {
        power_state: crate::guest_power::from_user_data(&seed.user_data),
        reboots_after_upgrade: reboots_after_upgrade(&seed.user_data),
    }
}

/// `cc_package_update_upgrade_install.py` `handle`: after an upgrade (`package_upgrade`, or
/// `apt_upgrade`) with `package_reboot_if_required` (or `apt_reboot_if_required`) set, a
/// `/var/run/reboot-required` left by the upgrade makes it run `/sbin/reboot` at once. In
/// pve-sim every upgrade leaves it: a cloud image is older than its archive's kernel.
fn reboots_after_upgrade(user_data: &str) -> bool {
    let set = |keys: [&str; 2]| {
        keys.iter()
            .find_map(|key| cloud_config_flag(user_data, key))
            .unwrap_or(false)
    };
    set(["package_upgrade", "apt_upgrade"])
        && set(["package_reboot_if_required", "apt_reboot_if_required"])
}

/// The first cdrom (ide2 first) holding an ISO labelled `cidata` with `user-data` and
/// `meta-data` (NoCloud requires both; `vendor-data` is optional).
fn attached_seed(world: &World, vm: &Vm) -> Option<Seed> {
    let mut cdroms: Vec<(&String, Drive)> = vm
        .config
        .iter()
        .filter(|(k, _)| is_drive_key(k))
        .map(|(k, v)| (k, Drive::parse(v)))
        .filter(|(_, d)| d.is_cdrom())
        .collect();
    cdroms.sort_by_key(|(k, _)| k.as_str() != "ide2");
    cdroms.into_iter().find_map(|(_, drive)| {
        let data = world.volume(&drive.volid, &vm.node)?.data.clone()?;
        let image = crate::iso::read_iso(&data).ok()?;
        if !image.volume_id.trim().eq_ignore_ascii_case("cidata") {
            return None;
        }
        let text = |name: &str| {
            image
                .files
                .get(name)
                .map(|b| String::from_utf8_lossy(b).into_owned())
        };
        let (meta_data, user_data) = (text("meta-data")?, text("user-data")?);
        let vendor_data =
            text("vendor-data").filter(|_| !agent::user_data_disables_vendor_data(&user_data));
        let instance_id = meta_value(&meta_data, "instance-id")
            .unwrap_or_else(|| DEFAULT_INSTANCE_ID.to_string());
        Some(Seed {
            volid: drive.volid.clone(),
            sha256: hex(&Sha256::digest(&data)),
            instance_id,
            meta_data,
            user_data,
            vendor_data,
        })
    })
}

/// A top-level `key: value` of meta-data, YAML or JSON.
fn meta_value(meta_data: &str, key: &str) -> Option<String> {
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(meta_data) {
        return map.get(key).and_then(Value::as_str).map(str::to_string);
    }
    meta_data.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.trim_start().strip_prefix(':')?;
        let value = rest.trim().trim_matches(['"', '\'']);
        (!value.is_empty()).then(|| value.to_string())
    })
}

/// A boolean top-level key of a cloud-config (or of the cloud-config parts of a MIME
/// multipart message); `None` when it is not set.
fn cloud_config_flag(text: &str, key: &str) -> Option<bool> {
    agent::cloud_config_value(text, key, |body| body.first().map(|v| yaml_true(v)))
}

fn yaml_true(value: &str) -> bool {
    let value = value.split('#').next().unwrap_or_default();
    matches!(
        value
            .trim()
            .trim_matches(['"', '\''])
            .to_ascii_lowercase()
            .as_str(),
        "true" | "yes" | "on" | "1"
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `/run/cloud-init/result.json`: written at the end of `modules-final`.
pub fn result_json(run: &CloudInitRun, now: Instant) -> Option<String> {
    (now >= run.final_at)
        .then(|| python_json(&json!({"v1": {"datasource": run.datasource, "errors": run.errors}})))
}

/// `/run/cloud-init/status.json` (a link to `/var/lib/cloud/data/status.json`), as
/// `status_wrapper` last wrote it by `now`: every stage's times and errors, in the layout of
/// the release that runs (see [`crate::guest_profile::CloudInitRelease`]).
pub fn status_json(run: &CloudInitRun, now: Instant) -> String {
    let release = run.release;
    let time = |at: Instant| {
        let since = (at - run.booted_at).as_secs_f64();
        if release.epoch_times {
            // `time.time()`.
            ((run.booted_unix + since) * 1e6).round() / 1e6
        } else {
            // `float(util.uptime())`: /proc/uptime has two decimals.
            (since * 100.0).round() / 100.0
        }
    };
    let boot = run.agent_at - run.booted_at;
    let mark = |fraction: f64| time(run.booted_at + boot.mul_f64(fraction));
    let stage = |errors: Vec<String>, start: Value, finished: Value| {
        let mut stage = json!({"errors": errors, "finished": finished, "start": start});
        if release.recoverable_errors {
            stage["recoverable_errors"] = json!({});
        }
        stage
    };
    let ran = |start: f64, end: f64| stage(Vec::new(), json!(start), json!(end));
    let done = now >= run.final_at;
    let mut last = if done {
        stage(
            run.errors.clone(),
            json!(mark(0.8)),
            json!(time(run.final_at)),
        )
    } else {
        stage(Vec::new(), json!(mark(0.8)), Value::Null)
    };
    if done && release.recoverable_errors && !run.recoverable_errors.is_empty() {
        last["recoverable_errors"] = json!({"WARNING": run.recoverable_errors});
    }
    let mut v1 = json!({
        "datasource": run.datasource,
        "init": ran(mark(0.3), mark(0.6)),
        "init-local": ran(mark(0.2), mark(0.3)),
        "modules-config": ran(mark(0.6), mark(0.8)),
        "modules-final": last,
        "stage": if done { Value::Null } else { json!("modules-final") },
    });
    if release.modules_init {
        // Listed in `modes`, but no unit runs `modules --mode=init`: its null status stays.
        v1["modules-init"] = stage(Vec::new(), Value::Null, Value::Null);
    }
    python_json(&json!({ "v1": v1 }))
}

/// What this boot has written to `/var/log/cloud-init-output.log` by `now`.
pub fn output_of_run(run: &CloudInitRun, now: Instant) -> String {
    let version = run.release.version;
    let boot = run.agent_at - run.booted_at;
    let stamp = |at: Instant| {
        let since = at - run.booted_at;
        (run.booted_unix + since.as_secs_f64(), since.as_secs_f64())
    };
    let mut out = String::new();
    let stages = [("init-local", 0.2), ("init", 0.3), ("modules:config", 0.6)];
    for (action, fraction) in stages.into_iter().chain([("modules:final", 0.8)]) {
        let (unix, up) = stamp(run.booted_at + boot.mul_f64(fraction));
        out.push_str(&format!(
            "Cloud-init v. {version} running '{action}' at {}. Up {up:.2} seconds.\n",
            rfc2822(unix)
        ));
    }
    if now < run.final_at {
        return out;
    }
    let (unix, up) = stamp(run.final_at);
    for line in run.recoverable_errors.iter().chain(&run.errors) {
        out.push_str(&format!("{} - main.py[WARNING]: {line}\n", log_time(unix)));
    }
    out.push_str(&format!(
        "Cloud-init v. {version} finished at {}. Datasource {}.  Up {up:.2} seconds\n",
        rfc2822(unix),
        run.datasource
    ));
    out
}

/// `atomic_helper.json_dumps`: indent 1, keys sorted, `", "`/`": "` separators, plus the
/// newline `write_json` adds. serde_json's maps are sorted already.
fn python_json(value: &Value) -> String {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(value, &mut serializer).expect("JSON values serialise");
    let mut text = String::from_utf8(out).expect("serde_json writes UTF-8");
    text.push('\n');
    text
}

/// `util.time_rfc2822`: `Wed, 02 Dec 2026 01:02:03 +0000`.
fn rfc2822(unix: f64) -> String {
    let (days, secs) = (
        (unix as i64).div_euclid(86_400),
        (unix as i64).rem_euclid(86_400),
    );
    let (y, m, d) = civil_date(days);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} +0000",
        WEEKDAYS[days.rem_euclid(7) as usize],
        MONTHS[m as usize - 1],
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Python logging's default time format: `2026-12-02 01:02:03,456`.
fn log_time(unix: f64) -> String {
    let whole = unix as i64;
    let (y, m, d) = civil_date(whole.div_euclid(86_400));
    let secs = whole.rem_euclid(86_400);
    let millis = ((unix - whole as f64) * 1000.0) as i64;
    format!(
        "{y}-{m:02}-{d:02} {:02}:{:02}:{:02},{millis:03}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_date(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(rfc2822(1_796_173_323.0), "Wed, 02 Dec 2026 01:02:03 +0000");
        assert_eq!(log_time(1_796_173_323.456), "2026-12-02 01:02:03,456");
        assert_eq!(civil_date(11_016), (2000, 2, 29));
    }

    #[test]
    fn instance_id_and_flags_come_from_the_seed() {
        assert_eq!(
            meta_value("instance-id: iid-1\n", "instance-id"),
            Some("iid-1".into())
        );
        assert_eq!(
            meta_value("{\"instance-id\": \"j\"}", "instance-id"),
            Some("j".into())
        );
        assert_eq!(meta_value("local-hostname: x\n", "instance-id"), None);
        let vendor = "#cloud-config\nmanual_cache_clean: true\n";
        assert_eq!(cloud_config_flag(vendor, "manual_cache_clean"), Some(true));
        let user = "#cloud-config\nmanual_cache_clean: false # no\n";
        assert_eq!(cloud_config_flag(user, "manual_cache_clean"), Some(false));
        assert_eq!(cloud_config_flag("#!/bin/sh\n", "manual_cache_clean"), None);
        let mime = concat!(
            "Content-Type: multipart/mixed; boundary=\"B\"\n\n",
            "--B\nContent-Type: text/cloud-config\n\n#cloud-config\nmanual_cache_clean: on\n",
            "--B--\n",
        );
        assert_eq!(cloud_config_flag(mime, "manual_cache_clean"), Some(true));
    }

    #[test]
    fn json_is_written_as_cloud_init_writes_it() {
        assert_eq!(
            python_json(&json!({"v1": {"errors": [], "datasource": "D"}})),
            "{\n \"v1\": {\n  \"datasource\": \"D\",\n  \"errors\": []\n }\n}\n"
        );
    }
}
