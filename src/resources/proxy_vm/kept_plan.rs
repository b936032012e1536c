//! What PVE changed while an apply ran. Terraform holds a provider to its plan: a value the
//! plan knew that the apply's new state gives otherwise is "Provider produced inconsistent
//! result after apply", an error, and a new VM so reported is tainted, so the next apply
//! destroys a VM that was fine (hashicorp/terraform, `internal/terraform/
//! node_resource_abstract_instance.go`: `apply` checks the planned and new values with
//! `objchange.AssertObjectCompatible`, and `maybeTainted` taints a create that erred). A
//! VM that a node's reboot stopped, that HA moved or an operator edited while the apply ran
//! is no fault of the apply: its state keeps the plan's values, with a warning, and the next
//! refresh reads PVE's, so the next plan shows the change.

use tfplugin::{Diagnostic, Value};

use super::attr;
use super::schema;

/// Given as the apply found them, never as planned: the record of a seed on storage (a
/// destroy deletes what it names; a detach that did not finish keeps it) and which VM it is.
const AS_FOUND: [&str; 3] = [attr::SEED_VOLUME, attr::ID, attr::VMID];

/// Puts the plan's known values back into `state` where the VM shows others; a warning
/// names them (not the values of sensitive attributes), or `None` when nothing changed.
pub(super) fn keep_plan(planned: &Value, state: &mut Value, vmid: u32) -> Option<Diagnostic> {
    let mut changed = Vec::new();
    let sensitive = schema::names_where(|spec| spec.sensitive);
    for name in schema::names_where(|spec| !AS_FOUND.contains(&spec.name)) {
        let (kept, differs) = kept(planned.get_attr(name), state.get_attr(name));
        if !differs {
            continue;
        }
        let what = match sensitive.contains(&name) {
            true => format!("{name} (sensitive)"),
            false => format!(
                "{name}: planned {}, PVE shows {}",
                describe(planned.get_attr(name)),
                describe(state.get_attr(name))
            ),
        };
        changed.push(what);
        state.set_attr(name, kept);
    }
    if changed.is_empty() {
        return None;
    }
    Some(Diagnostic::warning(
        "VM changed in PVE while this apply ran",
        format!(
            "VM {vmid} changed in PVE while this apply ran (a node's reboot, HA, or an edit \
             outside Terraform): {}. The state keeps the planned values, as Terraform requires; \
             the next plan reads the VM again, shows what differs, and its apply puts it back.",
            changed.join("; ")
        ),
    ))
}

/// The value to keep: `found`, except where the plan knew a value and `found` differs (then
/// the plan's, and `true`). Unknown parts of the plan take what was found.
fn kept(planned: &Value, found: &Value) -> (Value, bool) {
    if planned.is_wholly_known() {
        return match planned.same_as(found) {
            true => (found.clone(), false),
            false => (planned.clone(), true),
        };
    }
    match (planned.unwrapped(), found.unwrapped()) {
        (Value::Object(planned), Value::Object(found)) => {
            let mut merged = found.clone();
            let mut differs = false;
            for (key, value) in planned {
                let (kept, changed) = kept(value, found.get(key).unwrap_or(&Value::Null));
                differs |= changed;
                merged.insert(key.clone(), kept);
            }
            (Value::Object(merged), differs)
        }
        (Value::List(planned), Value::List(found)) if planned.len() == found.len() => {
            let (items, differs) = kept_items(planned, found);
            (Value::List(items), differs)
        }
        (Value::Tuple(planned), Value::Tuple(found)) if planned.len() == found.len() => {
            let (items, differs) = kept_items(planned, found);
            (Value::Tuple(items), differs)
        }
        // Unknown, or partly unknown in a shape that cannot be matched item by item (a set):
        // what was found.
        _ => (found.clone(), false),
    }
}

fn kept_items(planned: &[Value], found: &[Value]) -> (Vec<Value>, bool) {
    let mut differs = false;
    let items = planned
        .iter()
        .zip(found)
        .map(|(planned, found)| {
            let (kept, changed) = kept(planned, found);
            differs |= changed;
            kept
        })
        .collect();
    (items, differs)
}

/// A value as a warning shows it: scalars as written in a configuration.
fn describe(value: &Value) -> String {
    match value.unwrapped() {
        Value::Null => "null".to_owned(),
        Value::Unknown => "(known after apply)".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => n.as_f64().to_string(),
        },
        Value::String(s) => format!("{s:?}"),
        _ => "another value".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(pairs: &[(&str, Value)]) -> Value {
        Value::object(pairs.iter().map(|(k, v)| (*k, v.clone())))
    }

    #[test]
    fn a_known_planned_value_the_vm_no_longer_shows_is_kept_and_named() {
        let planned = state(&[
            (attr::STARTED, Value::Bool(true)),
            (attr::STATUS, Value::string("running")),
            (attr::CORES, Value::number(2)),
            (attr::IPV4_ADDRESS, Value::Unknown),
        ]);
        let mut found = state(&[
            (attr::STARTED, Value::Bool(false)),
            (attr::STATUS, Value::string("stopped")),
            (attr::CORES, Value::number(2)),
            (attr::IPV4_ADDRESS, Value::string("192.0.2.7")),
        ]);
        let warning = keep_plan(&planned, &mut found, 104).expect("a warning");
        assert_eq!(found.get_attr(attr::STARTED), &Value::Bool(true));
        assert_eq!(found.get_attr(attr::STATUS), &Value::string("running"));
        assert_eq!(
            found.get_attr(attr::IPV4_ADDRESS),
            &Value::string("192.0.2.7"),
            "unknown in the plan: what the VM shows"
        );
        assert_eq!(warning.summary, "VM changed in PVE while this apply ran");
        assert!(
            warning.detail.contains("VM 104")
                && warning
                    .detail
                    .contains("started: planned true, PVE shows false")
                && warning
                    .detail
                    .contains("status: planned \"running\", PVE shows \"stopped\"")
                && !warning.detail.contains("cores"),
            "{}",
            warning.detail
        );
    }

    #[test]
    fn nothing_changed_gives_no_warning_and_the_state_as_found() {
        let planned = state(&[
            (attr::CORES, Value::number(2)),
            (
                attr::TAGS,
                Value::Set(vec![Value::string("a"), Value::string("b")]),
            ),
        ]);
        let mut found = state(&[
            (attr::CORES, Value::number(2)),
            // A set's order is not a change.
            (
                attr::TAGS,
                Value::Set(vec![Value::string("b"), Value::string("a")]),
            ),
        ]);
        let before = found.clone();
        assert!(keep_plan(&planned, &mut found, 104).is_none());
        assert_eq!(found, before);
    }

    #[test]
    fn the_seed_record_and_the_vms_identity_stay_as_found() {
        let planned = state(&[
            (attr::SEED_VOLUME, Value::string("")),
            (attr::VMID, Value::number(104)),
        ]);
        let mut found = state(&[
            (
                attr::SEED_VOLUME,
                Value::string("proxy-seeds:iso/seed-a.iso"),
            ),
            (attr::VMID, Value::number(105)),
        ]);
        let before = found.clone();
        assert!(keep_plan(&planned, &mut found, 105).is_none());
        assert_eq!(found, before, "a seed still on storage stays recorded");
    }

    #[test]
    fn a_partly_known_list_keeps_the_known_items_of_the_plan() {
        let nic = |bridge: &str, mac: Value| {
            Value::object([("bridge", Value::string(bridge)), ("mac_address", mac)])
        };
        let planned = state(&[(
            attr::NETWORKS,
            Value::List(vec![
                nic("vmbr0", Value::Unknown),
                nic("vmbr1", Value::Unknown),
            ]),
        )]);
        let found_list = |second: &str| {
            Value::List(vec![
                nic("vmbr0", Value::string("BC:24:11:00:00:01")),
                nic(second, Value::string("BC:24:11:00:00:02")),
            ])
        };
        let mut found = state(&[(attr::NETWORKS, found_list("vmbr9"))]);
        let warning = keep_plan(&planned, &mut found, 104).expect("a warning");
        assert_eq!(found.get_attr(attr::NETWORKS), &found_list("vmbr1"));
        assert!(
            warning.detail.contains("networks: planned another value"),
            "{}",
            warning.detail
        );
        // A list of another length cannot be matched item by item: as found.
        let mut shorter = state(&[(
            attr::NETWORKS,
            Value::List(vec![nic("vmbr0", Value::string("BC:24:11:00:00:01"))]),
        )]);
        let before = shorter.clone();
        assert!(keep_plan(&planned, &mut shorter, 104).is_none());
        assert_eq!(shorter, before);
    }

    #[test]
    fn values_are_described_as_a_configuration_writes_them() {
        assert_eq!(describe(&Value::Null), "null");
        assert_eq!(describe(&Value::Unknown), "(known after apply)");
        assert_eq!(describe(&Value::number(2048)), "2048");
        assert_eq!(describe(&Value::string("pve2")), "\"pve2\"");
        assert_eq!(describe(&Value::List(vec![])), "another value");
    }
}
