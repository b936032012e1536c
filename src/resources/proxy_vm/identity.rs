//! The identity of a `proxmox_proxy_vm` (Terraform 1.12+): what names one VM for its whole
//! life, read from PVE alone, so a list can produce it and an `import` block can name it.
//!
//! `vmid` says where the VM is; `name` and `fleet` (the VM's name and its ownership mark's
//! fleet) tell it from another VM that later took the same VMID. None of them changes while
//! the VM lives: each replaces the VM when it changes. The node is left out, since a
//! migration (by hand or by HA) moves a VM without making it another one.

use tfplugin::{IdentityAttribute, IdentitySchema, Type, Value};

use super::attr;

/// The identity schema, at version 0.
pub fn schema() -> IdentitySchema {
    IdentitySchema::new()
        .attribute(
            IdentityAttribute::required(attr::VMID, Type::Number).description("The VM's VMID."),
        )
        .attribute(
            IdentityAttribute::optional(attr::NAME, Type::String).description(
                "The VM's name (the resource's `name`). When an import gives it, a VM of another \
             name at the VMID is refused.",
            ),
        )
        .attribute(
            IdentityAttribute::optional(attr::FLEET, Type::String).description(
                "The fleet in the VM's ownership mark (empty for the default fleet). When an \
                 import gives it, it must be the provider's `fleet`.",
            ),
        )
}

/// The identity of the VM a state describes; null when the state names no VMID yet (a create
/// that failed before it chose one). In a create plan the VMID may still be unknown, which
/// Terraform allows there only.
pub fn of_state(state: &Value) -> Value {
    let vmid = state.get_attr(attr::VMID);
    if vmid.is_null() {
        return Value::Null;
    }
    Value::object([
        (attr::VMID, vmid.clone()),
        (attr::NAME, state.get_attr(attr::NAME).clone()),
        (attr::FLEET, fleet_or_default(state.get_attr(attr::FLEET))),
    ])
}

/// The identity of a VM read from PVE: its VMID, its name and its mark's fleet.
pub fn of_vm(vmid: u32, name: &str, fleet: &str) -> Value {
    Value::object([
        (attr::VMID, Value::number(i64::from(vmid))),
        (attr::NAME, Value::string(name)),
        (attr::FLEET, Value::string(fleet)),
    ])
}

/// A state without a fleet is of the default fleet, as its mark says (`upgrade.rs`).
fn fleet_or_default(fleet: &Value) -> Value {
    if fleet.is_null() {
        Value::string("")
    } else {
        fleet.clone()
    }
}

/// What an `import { identity = {...} }` block asks for: the VMID, and the name and fleet
/// when it gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub vmid: u32,
    pub name: Option<String>,
    pub fleet: Option<String>,
}

impl Wanted {
    /// Reads an identity given by an import block; `Err` says what is wrong with it.
    pub fn from_identity(identity: &Value) -> Result<Wanted, String> {
        let vmid = identity.get_attr(attr::VMID);
        let Some(vmid) = vmid.as_i64().and_then(|v| u32::try_from(v).ok()) else {
            return Err(format!(
                "`{}` must be a whole number, a VM's VMID (e.g. `100123`).",
                attr::VMID
            ));
        };
        let text = |name: &str| identity.get_attr(name).as_str().map(str::to_owned);
        Ok(Wanted {
            vmid,
            name: text(attr::NAME),
            fleet: text(attr::FLEET),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(vmid: Value, fleet: Value) -> Value {
        Value::object([
            (attr::VMID, vmid),
            (attr::NAME, Value::string("edge-0")),
            (attr::FLEET, fleet),
            (attr::NODE, Value::string("pve1")),
        ])
    }

    #[test]
    fn the_identity_is_vmid_name_and_fleet_and_never_the_node() {
        let identity = of_state(&state(Value::number(100), Value::string("blue")));
        assert_eq!(identity, of_vm(100, "edge-0", "blue"));
        assert!(identity.get_attr(attr::NODE).is_null());
        let schema = schema();
        assert!(schema.problem().is_none());
        let required: Vec<&str> = schema
            .attributes
            .iter()
            .filter(|a| a.import == tfplugin::ImportRole::Required)
            .map(|a| a.name.as_str())
            .collect();
        assert_eq!(required, [attr::VMID]);
    }

    #[test]
    fn a_state_without_fleet_is_of_the_default_fleet_and_one_without_vmid_has_none() {
        let old = of_state(&state(Value::number(100), Value::Null));
        assert_eq!(old.get_attr(attr::FLEET).as_str(), Some(""));
        assert!(of_state(&state(Value::Null, Value::string(""))).is_null());
        // A create plan: the VMID is chosen at apply.
        let planned = of_state(&state(Value::Unknown, Value::string("")));
        assert!(!planned.is_wholly_known());
    }

    #[test]
    fn an_import_identity_needs_a_vmid_and_may_name_the_vm_and_fleet() {
        let given = Value::object([
            (attr::VMID, Value::number(100123)),
            (attr::NAME, Value::Null),
            (attr::FLEET, Value::string("")),
        ]);
        assert_eq!(
            Wanted::from_identity(&given),
            Ok(Wanted {
                vmid: 100123,
                name: None,
                fleet: Some(String::new()),
            })
        );
        let negative = Value::object([(attr::VMID, Value::number(-1))]);
        assert!(Wanted::from_identity(&negative).is_err());
    }
}
