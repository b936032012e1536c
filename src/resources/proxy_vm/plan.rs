//! Plan rules of `proxmox_proxy_vm`: defaults, unknowns, the seed hash of the write-only
//! inputs, replacements, the pending-until-reboot warning, and duplicate names. Pure: no
//! request (the cluster-aware checks are `plan_checks`).

use tfplugin::{AttributePath, Diagnostic, PlanRequest, PlanResponse, Schema, Value, plan};

use super::model::{Private, planned_seed_hash, vmid_of};
use super::schema;
use crate::context::Configured;

/// Two resource instances with the same name in one fleet would fight over one VM: the
/// second one planned in this provider process is refused, pointing at `name`. A planned
/// create counts once per call; an existing VM counts once however often it is planned.
pub(super) fn refuse_duplicate_name(
    configured: &Configured,
    request: &PlanRequest,
    response: &mut PlanResponse,
) {
    let planned = &response.planned_state;
    let Some(name) = planned.get_attr("name").as_str() else {
        return;
    };
    let replacing = !response.requires_replace.is_empty();
    // An existing VM is known by its create token. Terraform plans the create half of a
    // replacement in a second call that carries the first call's private data, so both
    // halves of a `-replace` count as the one instance they are.
    let token = Private::decode(&request.prior_private).create_token;
    let instance = match (vmid_of(&request.prior_state), token) {
        // The first half of a replacement: Terraform plans its create separately.
        (Some(_), _) if replacing => return,
        (_, Some(token)) => format!("create {token}"),
        (Some(vmid), None) => format!("vmid {vmid}"),
        (None, None) => String::new(),
    };
    let fleet = planned
        .get_attr("fleet")
        .as_str()
        .map_or_else(|| configured.fleet.clone(), str::to_owned);
    if !configured
        .runtime
        .note_planned_name(&fleet, name, &instance)
    {
        let in_fleet = if fleet.is_empty() {
            String::new()
        } else {
            format!(" in fleet `{fleet}`")
        };
        response.diagnostics.attribute_error(
            AttributePath::root().attr("name"),
            "Duplicate proxy VM name",
            format!("Another proxmox_proxy_vm in this configuration is also named `{name}`{in_fleet}. Each name may be used once per fleet, since the name identifies the VM on the cluster: give each resource (and each count/for_each instance) its own name."),
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
    let private = Private::decode(&prior_private);
    let (pending, imported) = (private.pending.clone(), private.imported);
    let mut response = PlanResponse {
        planned_private: prior_private,
        ..Default::default()
    };
    if proposed.is_null() {
        response.planned_state = Value::Null;
        return response;
    }
    let creating = prior.is_null();

    let mut planned = plan::plan_computed(&schema.block, &prior, &proposed);
    let default = |planned: &mut Value, name: &str, value: Value| {
        if config.get_attr(name).is_null() {
            planned.set_attr(name, value);
        }
    };
    default(&mut planned, "started", Value::Bool(true));
    default(&mut planned, "wait_for_address", Value::Bool(true));
    default(&mut planned, "reboot_if_needed", Value::Bool(false));
    if creating {
        planned.set_attr(
            "fleet",
            configured.map_or(Value::Unknown, |c| Value::string(&c.fleet)),
        );
    }
    if creating && let Some(configured) = configured {
        {
            default(
                &mut planned,
                "seed_storage",
                Value::string(&configured.seed_storage),
            );
            if let Some(storage) = &configured.clone_storage {
                default(&mut planned, "clone_storage", Value::string(storage));
            }
        }
    }
    planned.set_attr("user_data", Value::Null);
    planned.set_attr("network_config", Value::Null);
    let (user_data, network_config) = (
        config.get_attr("user_data"),
        config.get_attr("network_config"),
    );
    // A new VM's hash is keyed with its create's token, which apply chooses (Terraform plans
    // a create again during apply, so a token chosen here would not survive): known after
    // apply. An existing VM's is recomputed with the state's token.
    planned.set_attr(
        "seed_hash",
        if !creating && user_data.is_known() && network_config.is_known() {
            Value::string(planned_seed_hash(
                prior.get_attr("seed_hash").as_str(),
                private.create_token.as_deref(),
                user_data.as_str(),
                network_config.as_str(),
            ))
        } else {
            Value::Unknown
        },
    );
    // The power state follows `started` when it changes; otherwise the VM keeps what it
    // shows (a paused VM stays `paused`, and planning `running` would never come true).
    let started = planned.get_attr("started").as_bool();
    if creating
        || !prior
            .get_attr("started")
            .same_as(planned.get_attr("started"))
    {
        planned.set_attr(
            "status",
            match started {
                Some(true) => Value::string("running"),
                Some(false) => Value::string("stopped"),
                None => Value::Unknown,
            },
        );
    }
    if creating {
        if !planned.get_attr("started").as_bool().unwrap_or(true) {
            // A stopped VM reports no addresses.
            planned.set_attr("ipv4_address", Value::string(""));
            planned.set_attr("ipv4_addresses", Value::List(Vec::new()));
            planned.set_attr("ipv6_addresses", Value::List(Vec::new()));
        }
        response.planned_state = planned;
        return response;
    }
    // Update.
    // An imported VM's seed came from inputs its configuration cannot hold until the user
    // writes them again: with both unset, the VM keeps its seed (no replacement).
    if imported && user_data.is_null() && network_config.is_null() {
        planned.set_attr("seed_hash", prior.get_attr("seed_hash").clone());
    }
    for name in ["seed_storage", "clone_storage"] {
        if config.get_attr(name).is_null() {
            planned.set_attr(name, prior.get_attr(name).clone());
        }
    }
    response.requires_replace = plan::requires_replace(&prior, &planned, schema::REPLACE_ON_CHANGE);
    if let (Some(new), Some(old)) = (
        planned.get_attr("disk_gib").as_i64(),
        prior.get_attr("disk_gib").as_i64(),
    ) && new < old
    {
        response
            .requires_replace
            .push(AttributePath::root().attr("disk_gib"));
        response.diagnostics.push(
            Diagnostic::warning(
                "disk_gib shrinks: the VM will be replaced",
                format!("disk_gib = {new} is smaller than the current {old} GiB. PVE cannot shrink disks, so the plan replaces the VM. Keep disk_gib at {old} or more to keep it."),
            )
            .with_attribute(AttributePath::root().attr("disk_gib")),
        );
    }
    if !pending.is_empty() && planned.get_attr("reboot_if_needed").as_bool() != Some(true) {
        let first = pending[0].split('/').next().unwrap_or("cores");
        response.diagnostics.push(
            Diagnostic::warning(
                "Changes pending until reboot",
                format!(
                    "PVE holds changes to {} of this VM until its next boot. Reboot it, or set reboot_if_needed = true to let the provider do it at the next apply.",
                    pending.join(", ")
                ),
            )
            .with_attribute(AttributePath::root().attr(first)),
        );
    }
    // Only a change that can move the guest's address makes it unknown: the network, the
    // power state, or a reboot to apply cores/memory.
    let changed = plan::changed_attributes(&prior, &planned);
    let reboots = planned.get_attr("reboot_if_needed").as_bool() == Some(true)
        && changed.iter().any(|c| c == "cores" || c == "memory");
    if reboots
        || changed
            .iter()
            .any(|name| ["bridge", "vlan_tag", "started"].contains(&name.as_str()))
    {
        for name in ["ipv4_address", "ipv4_addresses", "ipv6_addresses"] {
            planned.set_attr(name, Value::Unknown);
        }
    }
    response.planned_state = planned;
    response
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
    fn addresses_stay_known_unless_the_change_can_move_them() {
        let mut prior = created();
        prior.set_attr("cores", Value::number(1));
        prior.set_attr("bridge", Value::string("vmbr0"));
        prior.set_attr("reboot_if_needed", Value::Bool(false));
        prior.set_attr("started", Value::Bool(true));
        prior.set_attr("wait_for_address", Value::Bool(true));
        prior.set_attr("ipv4_address", Value::string("10.0.0.10"));
        let planned = |change: &dyn Fn(&mut Value)| {
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
            .get_attr("ipv4_address")
            .clone()
        };
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
