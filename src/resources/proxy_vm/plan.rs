//! Plan rules of `proxmox_proxy_vm`: defaults, unknowns, the seed hash of the write-only
//! inputs, replacements, the pending-until-reboot warning, and duplicate names. Pure: no
//! request (the cluster-aware checks are `plan_checks`).

use tfplugin::{
    AttributePath, Diagnostic, Diagnostics, PlanRequest, PlanResponse, Schema, Value, plan,
};

use super::attr;
use super::model::{self, Private, WaitFor, planned_seed_hash, vm_is_gone, vmid_of};
use super::plan_warnings;
use super::schema::{self, AttrSpec, DefaultValue, Kind, OnChange, Planned};
use crate::context::Configured;
use crate::ownership;

/// Two resource instances with the same name in one fleet would fight over one VM: the
/// second one planned in this provider process is refused, pointing at `name`. A planned
/// create counts once per call; an existing VM counts once however often it is planned.
pub(super) fn refuse_duplicate_name(
    configured: &Configured,
    request: &PlanRequest,
    response: &mut PlanResponse,
) {
    let planned = &response.planned_state;
    let Some(name) = planned.get_attr(attr::NAME).as_str() else {
        return;
    };
    let replacing = !response.requires_replace.is_empty();
    // An existing VM is known by its create token. Terraform plans the create half of a
    // replacement in a second call that carries the first call's private data, so both
    // halves of a `-replace` count as the one instance they are.
    let token = Private::decode_or_default(&request.prior_private).create_token;
    let instance = match (vmid_of(&request.prior_state), token) {
        // The first half of a replacement: Terraform plans its create separately.
        (Some(_), _) if replacing => return,
        (_, Some(token)) => format!("create {token}"),
        (Some(vmid), None) => format!("vmid {vmid}"),
        (None, None) => String::new(),
    };
    let fleet = planned
        .get_attr(attr::FLEET)
        .as_str()
        .map_or_else(|| configured.fleet.clone(), str::to_owned);
    if !configured
        .runtime
        .note_planned_name(&fleet, name, &instance)
    {
        let in_fleet = ownership::in_fleet(&fleet);
        response.diagnostics.attribute_error(
            AttributePath::root().attr(attr::NAME),
            "Duplicate proxy VM name",
            format!(
                "Another proxmox_proxy_vm in this configuration is also named `{name}`{in_fleet}. \
                 Each name may be used once per fleet, since the name identifies the VM on the \
                 cluster: give each resource (and each count/for_each instance) its own name."
            ),
        );
    }
}

/// Plan rules: defaults for unset attributes, unknown for what only apply can know, the seed
/// hash from the write-only inputs, and replacement where PVE cannot change the VM in place.
pub(super) fn plan_change(
    schema: &Schema,
    configured: Option<&Configured>,
    request: PlanRequest,
) -> PlanResponse {
    let PlanRequest {
        prior_state: prior,
        proposed_new_state: proposed,
        config,
        prior_private,
    } = request;
    let readable = Private::decode(&prior_private);
    let private = readable.clone().unwrap_or_default();
    let mut response = PlanResponse {
        planned_private: prior_private,
        ..Default::default()
    };
    if proposed.is_null() {
        response.planned_state = Value::Null;
        return response;
    }
    let mut planned = plan::plan_computed(&schema.block, &prior, &proposed);
    plan_declared(&mut planned, &prior, &config, configured);
    planned.set_attr(attr::NETWORKS, model::networks::planned(&prior, &config));
    if prior.is_null() {
        // A new VM joins the provider's fleet (unknown while the provider is not configured).
        planned.set_attr(
            attr::FLEET,
            configured.map_or(Value::Unknown, |c| Value::string(&c.fleet)),
        );
    }
    if readable.is_err() && !prior.is_null() {
        // Without its create token the hash cannot be recomputed: the VM is kept as it is
        // (its refresh warned), never replaced for want of a key.
        planned.set_attr(attr::SEED_HASH, prior.get_attr(attr::SEED_HASH).clone());
    } else {
        plan_seed_hash(&mut planned, &prior, &config, &private);
    }
    plan_power_state(&mut planned, &prior);
    plan_start_on_boot(&mut planned, &config);
    if prior.is_null() {
        plan_create_addresses(&mut planned);
    } else {
        response.requires_replace = replacements(&prior, &planned, &mut response.diagnostics);
        plan_gone_replacement(&mut planned, &prior, &mut response.requires_replace);
        warn_pending(&private.pending, &planned, &mut response.diagnostics);
        warn_mark_lost(&private, &prior, configured, &mut response.diagnostics);
        let replacing = !response.requires_replace.is_empty();
        super::ha_plan::warn_replacement_drops_ha(
            &private,
            &prior,
            &config,
            replacing,
            &mut response.diagnostics,
        );
        plan_update_addresses(&prior, &mut planned);
        plan_seed_detach(&mut planned, &prior, &private, &response.requires_replace);
        plan_update_location(&prior, &mut planned);
        let replacing = &response.requires_replace;
        let diagnostics = &mut response.diagnostics;
        plan_warnings::warn_why(&prior, &planned, &config, replacing, &private, diagnostics);
    }
    response.planned_state = planned;
    response
}

/// A seed a refresh found ready to leave (cloud-init finished, or `ide2` already empty
/// after a detach that did not finish) is dropped from `seed_volume`: an in-place change,
/// whose apply detaches and deletes it. Only with `seed_lifetime = "until_ready"`.
fn plan_seed_detach(
    planned: &mut Value,
    prior: &Value,
    private: &Private,
    replacing: &[AttributePath],
) {
    let recorded = prior
        .get_attr(attr::SEED_VOLUME)
        .as_str()
        .is_some_and(|v| !v.is_empty());
    let until_ready = planned.get_attr(attr::SEED_LIFETIME).as_str() == Some("until_ready");
    if !(recorded && until_ready && replacing.is_empty()) {
        return;
    }
    if private.seed_ready {
        planned.set_attr(attr::SEED_VOLUME, Value::string(""));
    } else if private.seed_stays.is_none() && awaits_first_verdict(planned, private) {
        // The first boot's verdict is still to read (the VM was created stopped, a create
        // was killed after the start, or cloud-init still ran at cloud_init_timeout): the
        // update starts the VM or finds it running and waits for cloud-init, and a clean
        // verdict lets the same apply detach the seed (fuzzer seed 10020 and #38's detach
        // sweep: else the plan after it showed the detach). Later boots wait for no verdict.
        planned.set_attr(attr::SEED_VOLUME, Value::Unknown);
    }
}

/// Whether the first boot's verdict is outstanding on a VM meant to run, so the apply waits
/// for it (`Private::verdict_pending`).
fn awaits_first_verdict(planned: &Value, private: &Private) -> bool {
    private.verdict_pending
        && planned.get_attr(attr::STARTED).as_bool() == Some(true)
        && model::wait_for(planned) == WaitFor::CloudInit
}

/// What each attribute's declaration says: write-only ones null, defaults for the unset.
fn plan_declared(
    planned: &mut Value,
    prior: &Value,
    config: &Value,
    configured: Option<&Configured>,
) {
    for spec in schema::ATTRIBUTES {
        let name = spec.name;
        if spec.write_only {
            planned.set_attr(name, Value::Null);
            continue;
        }
        if !config.get_attr(name).is_null() {
            continue;
        }
        match spec.planned {
            Planned::Default => match spec.default {
                Some(DefaultValue::Bool(value)) => {
                    planned.set_attr(name, Value::Bool(value));
                }
                Some(DefaultValue::Text(text)) => {
                    planned.set_attr(name, Value::string(text));
                }
                _ => {}
            },
            // An existing VM keeps what it was made with, whatever the provider says now.
            Planned::ProviderDefault(_) if !prior.is_null() => {
                planned.set_attr(name, prior.get_attr(name).clone());
            }
            Planned::ProviderDefault(setting) => {
                if let Some(value) = configured.and_then(setting) {
                    planned.set_attr(name, Value::string(value));
                }
            }
            Planned::AsComputed | Planned::GuestAddress | Planned::ByRule => {}
        }
    }
}

/// The seed hash of the configured write-only inputs. A new VM's hash is keyed with its
/// create's token, which apply chooses (Terraform plans a create again during apply, so a
/// token chosen here would not survive): known after apply. An existing VM's is recomputed
/// with the state's token.
fn plan_seed_hash(planned: &mut Value, prior: &Value, config: &Value, private: &Private) {
    let (user_data, network_config) = (
        config.get_attr(attr::USER_DATA),
        config.get_attr(attr::NETWORK_CONFIG),
    );
    let prior_hash = prior.get_attr(attr::SEED_HASH);
    let hash = if prior.is_null() || !user_data.is_known() || !network_config.is_known() {
        Value::Unknown
    } else if private.imported && user_data.is_null() && network_config.is_null() {
        // An imported VM's seed came from inputs its configuration cannot hold until the
        // user writes them again: with both unset, the VM keeps its seed (no replacement).
        prior_hash.clone()
    } else {
        Value::string(planned_seed_hash(
            prior_hash.as_str(),
            private.create_token.as_deref(),
            user_data.as_str(),
            network_config.as_str(),
        ))
    };
    planned.set_attr(attr::SEED_HASH, hash);
}

/// The power state follows `started` when it changes; otherwise the VM keeps what it shows
/// (a paused VM stays `paused`, and planning `running` would never come true). A prior whose
/// `started` disagrees with its status (a VM an interrupted destroy marked, read as not
/// started so that the apply marks it finished again, while it runs) follows `started`
/// too: the apply brings the power state there (fuzz seed 24034).
fn plan_power_state(planned: &mut Value, prior: &Value) {
    let started = planned.get_attr(attr::STARTED);
    let prior_started = prior.get_attr(attr::STARTED);
    let powered = match prior.get_attr(attr::STATUS).as_str() {
        Some("stopped") => Some(false),
        Some("running" | "paused") => Some(true),
        _ => None,
    };
    let disagrees = prior_started
        .as_bool()
        .zip(powered)
        .is_some_and(|(started, powered)| started != powered);
    if prior.is_null() || !prior_started.same_as(started) || disagrees {
        planned.set_attr(attr::STATUS, status_when_started(started));
    }
}

/// `start_on_boot` unset follows `started` (#40): a VM configured stopped is not started by
/// its node's boot. A state written while the default was `true` shows the change here, and
/// its apply makes it.
fn plan_start_on_boot(planned: &mut Value, config: &Value) {
    if config.get_attr(attr::START_ON_BOOT).is_null() {
        let started = planned.get_attr(attr::STARTED).clone();
        planned.set_attr(attr::START_ON_BOOT, started);
    }
}

/// The status a VM shows once `started` holds.
fn status_when_started(started: &Value) -> Value {
    match started.as_bool() {
        Some(true) => Value::string("running"),
        Some(false) => Value::string("stopped"),
        None => Value::Unknown,
    }
}

/// A VM created stopped reports no addresses.
fn plan_create_addresses(planned: &mut Value) {
    let started = planned.get_attr(attr::STARTED).as_bool();
    if started.unwrap_or_else(|| schema::default_bool(attr::STARTED)) {
        return;
    }
    for spec in guest_addresses() {
        let empty = match spec.kind {
            Kind::StringList => Value::List(Vec::new()),
            _ => Value::string(""),
        };
        planned.set_attr(spec.name, empty);
    }
}

/// Only a change that can move the guest's address makes it unknown: the network, the power
/// state, or a reboot to apply cores/memory.
fn plan_update_addresses(prior: &Value, planned: &mut Value) {
    let changed = plan::changed_attributes(prior, planned);
    let reboots = planned.get_attr(attr::REBOOT_IF_NEEDED).as_bool() == Some(true);
    let moves = schema::ATTRIBUTES
        .iter()
        .filter(|spec| changed.iter().any(|name| name == spec.name))
        .any(|spec| match spec.on_change {
            OnChange::MovesAddress => true,
            OnChange::PendingUntilReboot => reboots,
            OnChange::Setting
            | OnChange::InPlace
            | OnChange::Replace
            | OnChange::ReplaceWhenShrunk => false,
        });
    if moves {
        for spec in guest_addresses() {
            planned.set_attr(spec.name, Value::Unknown);
        }
    }
}

/// An update acts on the VM where it is at apply time, and a VM moves by itself (a drain, an
/// HA recovery; unseen with `-refresh=false`): where an update will find it is known only
/// after the apply. A plan without changes keeps the refreshed node, so it stays empty.
fn plan_update_location(prior: &Value, planned: &mut Value) {
    if !plan::changed_attributes(prior, planned).is_empty() {
        planned.set_attr(attr::CURRENT_NODE, Value::Unknown);
    }
}

fn guest_addresses() -> impl Iterator<Item = &'static AttrSpec> {
    schema::ATTRIBUTES
        .iter()
        .filter(|spec| matches!(spec.planned, Planned::GuestAddress))
}

/// A VM the last refresh found gone with its seed left (status `gone`) is replaced: the
/// destroy half deletes the seed, the create half makes the VM again.
fn plan_gone_replacement(planned: &mut Value, prior: &Value, replace: &mut Vec<AttributePath>) {
    if !vm_is_gone(prior) {
        return;
    }
    let status = status_when_started(planned.get_attr(attr::STARTED));
    planned.set_attr(attr::STATUS, status);
    replace.push(AttributePath::root().attr(attr::STATUS));
}

/// The attributes whose change replaces the VM: those declared so, and a shrunk disk, which
/// the plan explains in a warning.
fn replacements(
    prior: &Value,
    planned: &Value,
    diagnostics: &mut Diagnostics,
) -> Vec<AttributePath> {
    let mut paths = plan::requires_replace(prior, planned, &schema::replace_on_change());
    let shrinkable = schema::ATTRIBUTES
        .iter()
        .filter(|spec| spec.on_change == OnChange::ReplaceWhenShrunk);
    for spec in shrinkable {
        let name = spec.name;
        if let (Some(new), Some(old)) = (
            planned.get_attr(name).as_i64(),
            prior.get_attr(name).as_i64(),
        ) && new < old
        {
            let at = AttributePath::root().attr(name);
            paths.push(at.clone());
            diagnostics.push(
                Diagnostic::warning(
                    format!("{name} shrinks: the VM will be replaced"),
                    format!(
                        "{name} = {new} is smaller than the current {old} GiB. PVE cannot shrink \
                         disks, so the plan replaces the VM. Keep {name} at {old} or more to keep \
                         it."
                    ),
                )
                .with_attribute(at),
            );
        }
    }
    paths
}

/// A VM whose last refresh found its mark edited away, planned without a refresh of its own
/// in this process (`-refresh=false`): the plan says so, as the refresh did, since an
/// update or destroy of it will be refused.
fn warn_mark_lost(
    private: &Private,
    prior: &Value,
    configured: Option<&Configured>,
    diagnostics: &mut Diagnostics,
) {
    let Some(vmid) = vmid_of(prior) else { return };
    let warned = configured.is_some_and(|c| c.runtime.mark_lost_warned(vmid));
    if !private.mark_lost || warned {
        return;
    }
    diagnostics.warning(
        "Proxy VM lost its ownership mark",
        format!(
            "At the last refresh, VM {vmid}'s description no longer carried this provider's \
             ownership mark, and this plan did not refresh it. Nothing will be changed or \
             destroyed on it until it is marked again; a plan with refresh shows the lines to \
             put back."
        ),
    );
}

/// Changes a read found PVE holding until the next boot, unless the apply reboots for them.
fn warn_pending(pending: &[String], planned: &Value, diagnostics: &mut Diagnostics) {
    if pending.is_empty() || planned.get_attr(attr::REBOOT_IF_NEEDED).as_bool() == Some(true) {
        return;
    }
    let first = pending[0].split('/').next().unwrap_or(attr::CORES);
    diagnostics.push(
        Diagnostic::warning(
            "Changes pending until reboot",
            format!(
                "PVE holds changes to {} of this VM until its next boot. Reboot it, or set \
                 reboot_if_needed = true to let the provider do it at the next apply.",
                pending.join(", ")
            ),
        )
        .with_attribute(AttributePath::root().attr(first)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::proxy_vm::model::seed_hash;

    fn request(prior: Value, proposed: Value, config: Value) -> PlanRequest {
        PlanRequest {
            prior_state: prior,
            proposed_new_state: proposed,
            config,
            prior_private: Vec::new(),
        }
    }

    /// The state of a VM created from [`config`]: write-only values gone, the seed hashed.
    fn created() -> Value {
        let mut state = config();
        state.set_attr("user_data", Value::Null);
        state.set_attr(
            "seed_hash",
            Value::string(seed_hash(None, Some("#cloud-config\n"), None)),
        );
        state
    }

    fn config() -> Value {
        Value::object([
            ("name", Value::string("edge-0")),
            ("node", Value::string("pve1")),
            ("template", Value::string("debian-13-proxy")),
            ("disk_gib", Value::number(10)),
            ("user_data", Value::string("#cloud-config\n")),
        ])
    }

    /// The status follows `started` where the prior's `started` and status disagree (a VM
    /// an interrupted destroy marked, read as not started while it runs), and where
    /// `started` changes; it stays as shown otherwise (a paused VM stays `paused`).
    #[test]
    fn the_planned_status_follows_started_where_the_prior_disagrees() {
        let prior = |started: bool, status: &str| {
            Value::object([
                ("started", Value::Bool(started)),
                ("status", Value::string(status)),
            ])
        };
        let planned_status = |prior: Value, started: bool| {
            let mut planned = Value::object([("started", Value::Bool(started))]);
            planned.set_attr("status", prior.get_attr("status").clone());
            plan_power_state(&mut planned, &prior);
            planned.get_attr("status").as_str().map(str::to_owned)
        };
        let status = |s: &str| Some(s.to_owned());
        assert_eq!(
            planned_status(prior(false, "running"), false),
            status("stopped")
        );
        assert_eq!(
            planned_status(prior(false, "paused"), false),
            status("stopped")
        );
        assert_eq!(
            planned_status(prior(false, "stopped"), false),
            status("stopped")
        );
        assert_eq!(
            planned_status(prior(false, "stopped"), true),
            status("running")
        );
        assert_eq!(
            planned_status(prior(true, "paused"), true),
            status("paused")
        );
        assert_eq!(
            planned_status(prior(true, "running"), false),
            status("stopped")
        );
        assert_eq!(planned_status(prior(false, "gone"), false), status("gone"));
    }

    #[test]
    fn create_plans_defaults_and_never_holds_write_only_values() {
        let mut proposed = config();
        proposed.set_attr("user_data", Value::Null);
        let plan = plan_change(
            &schema::schema(),
            None,
            request(Value::Null, proposed, config()),
        );
        let planned = plan.planned_state;
        assert_eq!(planned.get_attr("started"), &Value::Bool(true));
        assert_eq!(planned.get_attr("status"), &Value::string("running"));
        assert!(planned.get_attr("user_data").is_null());
        // The seed hash is keyed with the create's token, chosen at apply: an unkeyed hash
        // in the plan would confirm a guessed user_data.
        assert_eq!(planned.get_attr("seed_hash"), &Value::Unknown);
        assert!(
            !planned.get_attr("vmid").is_known(),
            "a derived VMID is known only after apply"
        );
        assert!(plan.requires_replace.is_empty());
    }

    #[test]
    fn shrinking_the_disk_replaces_and_says_why_while_a_paused_vm_stays_paused() {
        let mut prior = config();
        prior.set_attr("user_data", Value::Null);
        prior.set_attr("disk_gib", Value::number(20));
        prior.set_attr("started", Value::Bool(true));
        prior.set_attr("status", Value::string("paused"));
        prior.set_attr(
            "seed_hash",
            Value::string(seed_hash(None, Some("#cloud-config\n"), None)),
        );
        let mut proposed = prior.clone();
        proposed.set_attr("disk_gib", Value::number(10));
        let plan = plan_change(&schema::schema(), None, request(prior, proposed, config()));
        assert!(
            plan.requires_replace
                .iter()
                .any(|p| *p == AttributePath::root().attr("disk_gib"))
        );
        assert!(
            plan.diagnostics
                .iter()
                .any(|d| d.summary.contains("disk_gib shrinks"))
        );
        assert_eq!(
            plan.planned_state.get_attr("status"),
            &Value::string("paused")
        );
    }

    #[test]
    fn a_vm_gone_with_its_seed_left_is_replaced_and_planned_as_started_says() {
        for (started, status) in [(true, "running"), (false, "stopped")] {
            let mut prior = created();
            prior.set_attr("started", Value::Bool(started));
            prior.set_attr("status", Value::string(model::STATUS_GONE));
            let mut proposed = prior.clone();
            proposed.set_attr("status", Value::Unknown);
            let mut config = config();
            config.set_attr("started", Value::Bool(started));
            let plan = plan_change(&schema::schema(), None, request(prior, proposed, config));
            assert_eq!(
                plan.requires_replace,
                [AttributePath::root().attr("status")],
                "started = {started}"
            );
            assert_eq!(
                plan.planned_state.get_attr("status"),
                &Value::string(status)
            );
        }
        // Any other status is the VM's own: nothing to replace.
        let mut prior = created();
        prior.set_attr("status", Value::string("stopped"));
        let plan = plan_change(
            &schema::schema(),
            None,
            request(prior.clone(), prior, config()),
        );
        assert!(plan.requires_replace.is_empty());
    }

    /// `name` as planned when `change` is made to both the prior state and the config.
    fn planned_attr(prior: &Value, change: &dyn Fn(&mut Value), name: &str) -> Value {
        let mut proposed = prior.clone();
        change(&mut proposed);
        let mut config = config();
        change(&mut config);
        plan_change(
            &schema::schema(),
            None,
            request(prior.clone(), proposed, config),
        )
        .planned_state
        .get_attr(name)
        .clone()
    }

    #[test]
    fn addresses_stay_known_unless_the_change_can_move_them() {
        let mut prior = created();
        prior.set_attr("cores", Value::number(1));
        prior.set_attr("bridge", Value::string("vmbr0"));
        prior.set_attr("reboot_if_needed", Value::Bool(false));
        prior.set_attr("started", Value::Bool(true));
        prior.set_attr("ipv4_address", Value::string("10.0.0.10"));
        let planned = |change: &dyn Fn(&mut Value)| planned_attr(&prior, change, "ipv4_address");
        assert_eq!(
            planned(&|v| {
                v.set_attr("cores", Value::number(2));
            }),
            Value::string("10.0.0.10"),
            "cores pending until a reboot cannot move the address"
        );
        assert_eq!(
            planned(&|v| {
                v.set_attr("bridge", Value::string("vmbr1"));
            }),
            Value::Unknown
        );
        assert_eq!(
            planned(&|v| {
                v.set_attr("cores", Value::number(2));
                v.set_attr("reboot_if_needed", Value::Bool(true));
            }),
            Value::Unknown,
            "a reboot may"
        );
    }

    #[test]
    fn an_update_learns_where_the_vm_is_only_at_apply() {
        let mut prior = created();
        prior.set_attr("current_node", Value::string("pve2"));
        prior.set_attr("started", Value::Bool(true));
        prior.set_attr("start_on_boot", Value::Bool(true));
        prior.set_attr("wait_for", Value::string("cloud-init"));
        prior.set_attr("seed_lifetime", Value::string("until_ready"));
        prior.set_attr("reboot_if_needed", Value::Bool(false));
        let planned = |change: &dyn Fn(&mut Value)| planned_attr(&prior, change, "current_node");
        assert_eq!(planned(&|_| {}), Value::string("pve2"), "no change: kept");
        assert_eq!(
            planned(&|v| {
                v.set_attr("cores", Value::number(2));
            }),
            Value::Unknown,
            "a drain may move it before the update reaches it"
        );
    }

    #[test]
    fn an_imported_vm_keeps_its_seed_while_user_data_is_unset() {
        let prior = created();
        let mut unset = config();
        unset.set_attr("user_data", Value::Null);
        let plan_with = |private: &Private, config: Value| {
            plan_change(
                &schema::schema(),
                None,
                PlanRequest {
                    prior_private: private.encode(),
                    ..request(prior.clone(), prior.clone(), config)
                },
            )
        };
        let imported = Private {
            imported: true,
            ..Private::default()
        };
        let plan = plan_with(&imported, unset.clone());
        assert!(
            plan.requires_replace.is_empty(),
            "{:?}",
            plan.requires_replace
        );
        assert_eq!(
            plan.planned_state.get_attr("seed_hash"),
            prior.get_attr("seed_hash")
        );
        // Written again, the inputs count as for any state.
        let mut other = config();
        other.set_attr("user_data", Value::string("#cloud-config\n#x\n"));
        assert!(!plan_with(&imported, other).requires_replace.is_empty());
        // A VM this state created: removing user_data is a new (empty) seed.
        assert!(
            !plan_with(&Private::default(), unset)
                .requires_replace
                .is_empty()
        );
    }

    #[test]
    fn start_on_boot_unset_follows_started() {
        let mut prior = created();
        prior.set_attr("started", Value::Bool(false));
        // Written while the default was `true`: the plan shows the change.
        prior.set_attr("start_on_boot", Value::Bool(true));
        let stopped = |v: &mut Value| {
            v.set_attr("started", Value::Bool(false));
        };
        assert_eq!(
            planned_attr(&prior, &stopped, "start_on_boot"),
            Value::Bool(false)
        );
        let set = |v: &mut Value| {
            v.set_attr("started", Value::Bool(false));
            v.set_attr("start_on_boot", Value::Bool(true));
        };
        assert_eq!(
            planned_attr(&prior, &set, "start_on_boot"),
            Value::Bool(true)
        );
        let mut new = config();
        new.set_attr("started", Value::Unknown);
        let plan = plan_change(
            &schema::schema(),
            None,
            request(Value::Null, new.clone(), new),
        );
        assert_eq!(
            plan.planned_state.get_attr("start_on_boot"),
            &Value::Unknown
        );
    }

    #[test]
    fn a_new_seed_content_replaces_the_vm() {
        let prior = created();
        let proposed = prior.clone();
        let mut changed = config();
        changed.set_attr(
            "user_data",
            Value::string("#cloud-config\npackages: [nginx]\n"),
        );
        let plan = plan_change(&schema::schema(), None, request(prior, proposed, changed));
        assert!(
            plan.requires_replace
                .iter()
                .any(|p| *p == AttributePath::root().attr("seed_hash"))
        );
    }
}
