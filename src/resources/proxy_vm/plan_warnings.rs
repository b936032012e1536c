//! The plan's word on what an update does to a VM beyond its attributes (#41): what forces
//! a replacement, named by the input the user changed rather than by `seed_hash`, and
//! which VM the apply reboots or stops. Terraform prints a provider's plan warnings under
//! the plan, so a reader of `terraform plan` learns why before approving. Pure: no request.

use tfplugin::{AttributePath, Diagnostic, Diagnostics, Value, plan};

use super::attr;
use super::model::{self, Private};
use super::schema::{self, OnChange};

/// The warnings for an update of `prior` planned as `planned`: why it is replaced, or else
/// whether the apply reboots or stops it. Nothing when the plan changes nothing.
pub(super) fn warn_why(
    prior: &Value,
    planned: &Value,
    config: &Value,
    replacing: &[AttributePath],
    private: &Private,
    diagnostics: &mut Diagnostics,
) {
    if prior.is_null() || planned.is_null() {
        return;
    }
    let vm = VmName::of(prior);
    if !replacing.is_empty() {
        diagnostics.push(replacement_warning(&vm, prior, planned, config, replacing));
        return;
    }
    if plan::changed_attributes(prior, planned).is_empty() {
        return;
    }
    if let Some(warning) = reboot_warning(&vm, prior, planned, private) {
        diagnostics.push(warning);
    }
    if let Some(warning) = stop_warning(&vm, prior, planned) {
        diagnostics.push(warning);
    }
}

/// How a warning names the VM: `VM 4242 (`edge-0`)`.
struct VmName(String);

impl VmName {
    fn of(prior: &Value) -> Self {
        let name = prior.get_attr(attr::NAME).as_str().unwrap_or("?");
        Self(match prior.get_attr(attr::VMID).as_i64() {
            Some(vmid) => format!("VM {vmid} (`{name}`)"),
            None => format!("VM `{name}`"),
        })
    }
}

/// One warning naming every cause of the replacement, pointed at the first cause's
/// attribute (so Terraform shows the resource's address and line).
fn replacement_warning(
    vm: &VmName,
    prior: &Value,
    planned: &Value,
    config: &Value,
    replacing: &[AttributePath],
) -> Diagnostic {
    let mut causes = Vec::new();
    let mut first: Option<&str> = None;
    for name in replacing.iter().filter_map(first_attribute) {
        let (cause, at) = replacement_cause(name, prior, planned, config);
        first.get_or_insert(at);
        causes.push(cause);
    }
    let warning = Diagnostic::warning(
        format!("{} will be replaced", vm.0),
        format!(
            "{} will be destroyed and created again (a new clone, seed and MAC unless \
             `mac_address` is pinned) because {}.",
            vm.0,
            causes.join("; and ")
        ),
    );
    match first {
        Some(at) => warning.with_attribute(AttributePath::root().attr(at)),
        None => warning,
    }
}

fn first_attribute(path: &AttributePath) -> Option<&str> {
    match path.steps().first()? {
        tfplugin::PathStep::Attribute(name) => Some(name.as_str()),
        _ => None,
    }
}

/// Why a change of `name` replaces the VM, in the user's terms, and the attribute of the
/// configuration to point at.
fn replacement_cause(
    name: &str,
    prior: &Value,
    planned: &Value,
    config: &Value,
) -> (String, &'static str) {
    match name {
        attr::SEED_HASH => seed_cause(prior, config),
        attr::STATUS => (
            "the VM was deleted outside Terraform (its seed is left; the destroy half deletes \
             it)"
            .to_owned(),
            attr::NAME,
        ),
        attr::DISK_GIB => (
            format!(
                "`disk_gib` shrinks from {} to {} (PVE cannot shrink disks)",
                shown(prior.get_attr(name)),
                shown(planned.get_attr(name))
            ),
            attr::DISK_GIB,
        ),
        other => {
            let declared = schema::ATTRIBUTES.iter().find(|spec| spec.name == other);
            let at = declared.map_or(attr::NAME, |spec| spec.name);
            (
                format!(
                    "`{other}` changes from {} to {}, which PVE cannot change on an existing VM",
                    shown(prior.get_attr(other)),
                    shown(planned.get_attr(other))
                ),
                at,
            )
        }
    }
}

/// The seed's inputs are write-only: the plan sees only their keyed hash, so it names
/// which of them the configuration sets (one of them changed).
fn seed_cause(prior: &Value, config: &Value) -> (String, &'static str) {
    if prior.get_attr(attr::SEED_HASH).as_str() == Some("") {
        return (
            "the VM boots another seed than the one this state made (see the refresh's \
             warning)"
                .to_owned(),
            attr::USER_DATA,
        );
    }
    let set = |name| !config.get_attr(name).is_null();
    let inputs = match (set(attr::USER_DATA), set(attr::NETWORK_CONFIG)) {
        (true, false) => "`user_data` (or the removal of `network_config`)",
        (false, true) => "`network_config` (or the removal of `user_data`)",
        _ => "`user_data` or `network_config`",
    };
    let at = if set(attr::USER_DATA) || !set(attr::NETWORK_CONFIG) {
        attr::USER_DATA
    } else {
        attr::NETWORK_CONFIG
    };
    (
        format!(
            "the seed's content changed: {inputs}, write-only inputs the plan compares only \
             through `seed_hash`; cloud-init reads a seed at a new instance's first boot, so \
             a new seed means a new VM"
        ),
        at,
    )
}

/// A value as the plan shows it.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::String(text) => format!("\"{text}\""),
        other => match (other.as_i64(), other.as_bool()) {
            (Some(number), _) => number.to_string(),
            (_, Some(flag)) => flag.to_string(),
            _ if !other.is_known() => "(known after apply)".to_owned(),
            _ => "another value".to_owned(),
        },
    }
}

/// The apply reboots a running VM that stays started when `reboot_if_needed` is planned
/// true and PVE holds a change until the next boot: one a read found pending, or a change
/// of this plan that PVE takes only at boot (cores, memory without hotplug).
fn reboot_warning(
    vm: &VmName,
    prior: &Value,
    planned: &Value,
    private: &Private,
) -> Option<Diagnostic> {
    let reboots = planned.get_attr(attr::REBOOT_IF_NEEDED).as_bool() == Some(true);
    let stays_up = planned.get_attr(attr::STARTED).as_bool() == Some(true);
    if !(reboots && stays_up && is_running(prior)) {
        return None;
    }
    let detail = if !private.pending.is_empty() {
        format!(
            "{} will be rebooted by this apply: PVE holds changes to {} until its next \
             boot, and reboot_if_needed = true. Its guest restarts, and its address may \
             change.",
            vm.0,
            private.pending.join(", ")
        )
    } else {
        let changed = plan::changed_attributes(prior, planned);
        let boot_only: Vec<&str> = schema::ATTRIBUTES
            .iter()
            .filter(|spec| spec.on_change == OnChange::PendingUntilReboot)
            .map(|spec| spec.name)
            .filter(|name| changed.iter().any(|c| c == name))
            .collect();
        if boot_only.is_empty() {
            return None;
        }
        format!(
            "{} will be rebooted by this apply if PVE holds its change of {} until the next \
             boot (it does unless the VM's `hotplug` option includes cpu and memory, which \
             PVE's default does not), since reboot_if_needed = true. Its guest restarts, and \
             its address may change.",
            vm.0,
            boot_only.join(", ")
        )
    };
    Some(
        Diagnostic::warning(format!("{} will be rebooted", vm.0), detail)
            .with_attribute(AttributePath::root().attr(attr::REBOOT_IF_NEEDED)),
    )
}

/// `started` planned false for a VM that runs: the apply shuts it down. Judged by the status,
/// not the prior `started`: a VM an interrupted destroy marked reads in the power state it
/// does not show.
fn stop_warning(vm: &VmName, prior: &Value, planned: &Value) -> Option<Diagnostic> {
    let stops = planned.get_attr(attr::STARTED).as_bool() == Some(false);
    (is_running(prior) && stops).then(|| {
        Diagnostic::warning(
            format!("{} will be stopped", vm.0),
            format!(
                "{} will be shut down by this apply (started = false): the proxy it runs \
                 stops serving until started is true again.",
                vm.0
            ),
        )
        .with_attribute(AttributePath::root().attr(attr::STARTED))
    })
}

/// The VM ran at the last refresh (a paused VM counts: a reboot restarts it too).
fn is_running(prior: &Value) -> bool {
    !model::vm_is_gone(prior)
        && matches!(
            prior.get_attr(attr::STATUS).as_str(),
            Some("running" | "paused")
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prior() -> Value {
        Value::object([
            ("name", Value::string("edge-0")),
            ("vmid", Value::number(4242)),
            ("node", Value::string("pve1")),
            ("cores", Value::number(1)),
            ("disk_gib", Value::number(20)),
            ("started", Value::Bool(true)),
            ("status", Value::string("running")),
            ("reboot_if_needed", Value::Bool(false)),
            ("seed_hash", Value::string("abc")),
        ])
    }

    fn warnings(
        planned: &Value,
        config: &Value,
        replacing: &[&str],
        private: &Private,
    ) -> Vec<(String, String)> {
        let paths: Vec<AttributePath> = replacing
            .iter()
            .map(|name| AttributePath::root().attr(*name))
            .collect();
        let mut diagnostics = Diagnostics::new();
        warn_why(&prior(), planned, config, &paths, private, &mut diagnostics);
        diagnostics
            .iter()
            .map(|d| (d.summary.clone(), d.detail.clone()))
            .collect()
    }

    fn changed(change: impl Fn(&mut Value)) -> Value {
        let mut planned = prior();
        change(&mut planned);
        planned
    }

    #[test]
    fn an_empty_plan_warns_of_nothing() {
        let pending = Private {
            pending: vec!["cores".into()],
            ..Private::default()
        };
        let planned = changed(|v| {
            v.set_attr("reboot_if_needed", Value::Bool(true));
        });
        let mut prior_rebooting = prior();
        prior_rebooting.set_attr("reboot_if_needed", Value::Bool(true));
        let mut diagnostics = Diagnostics::new();
        warn_why(
            &prior_rebooting,
            &planned,
            &Value::Null,
            &[],
            &pending,
            &mut diagnostics,
        );
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
    }

    #[test]
    fn a_seed_change_names_the_write_only_input() {
        let planned = changed(|v| {
            v.set_attr("seed_hash", Value::string("def"));
        });
        let config = Value::object([("user_data", Value::string("#cloud-config\n"))]);
        let out = warnings(&planned, &config, &["seed_hash"], &Private::default());
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, "VM 4242 (`edge-0`) will be replaced");
        assert!(out[0].1.contains("`user_data`"), "{out:?}");
        assert!(!out[0].1.contains("seed_hash changed"), "{out:?}");
    }

    #[test]
    fn every_cause_of_a_replacement_is_named_with_its_values() {
        let planned = changed(|v| {
            v.set_attr("node", Value::string("pve2"));
            v.set_attr("disk_gib", Value::number(10));
        });
        let out = warnings(
            &planned,
            &Value::Null,
            &["node", "disk_gib"],
            &Private::default(),
        );
        assert_eq!(out.len(), 1, "{out:?}");
        let detail = &out[0].1;
        assert!(
            detail.contains("`node` changes from \"pve1\" to \"pve2\""),
            "{detail}"
        );
        assert!(
            detail.contains("`disk_gib` shrinks from 20 to 10"),
            "{detail}"
        );
    }

    #[test]
    fn turning_on_reboot_with_a_pending_change_names_the_reboot() {
        let pending = Private {
            pending: vec!["cores".into()],
            ..Private::default()
        };
        let planned = changed(|v| {
            v.set_attr("reboot_if_needed", Value::Bool(true));
        });
        let out = warnings(&planned, &Value::Null, &[], &pending);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, "VM 4242 (`edge-0`) will be rebooted");
        assert!(out[0].1.contains("changes to cores"), "{out:?}");
        // Without a pending change nor a boot-time change, nothing reboots.
        assert!(warnings(&planned, &Value::Null, &[], &Private::default()).is_empty());
        // A boot-time change of this plan may.
        let cores = changed(|v| {
            v.set_attr("reboot_if_needed", Value::Bool(true));
            v.set_attr("cores", Value::number(2));
        });
        let out = warnings(&cores, &Value::Null, &[], &Private::default());
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].1.contains("if PVE holds its change of cores"),
            "{out:?}"
        );
    }

    #[test]
    fn a_stopped_vm_is_not_rebooted_and_stopping_is_named() {
        let planned = changed(|v| {
            v.set_attr("reboot_if_needed", Value::Bool(true));
            v.set_attr("started", Value::Bool(false));
        });
        let pending = Private {
            pending: vec!["cores".into()],
            ..Private::default()
        };
        let out = warnings(&planned, &Value::Null, &[], &pending);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, "VM 4242 (`edge-0`) will be stopped");
    }
}
