//! The checks of `proxmox_proxy_vm`'s attributes that do more than judge one string or
//! number (those are in `crate::validate`); `schema::ATTRIBUTES` points each attribute at its
//! check. Unknown and null values are skipped.

use tfplugin::{AttributePath, Diagnostic, Diagnostics, Value};

use pve::cluster::ha::HaState;

use super::attr::{self, ha, networks as nic};
use super::model::networks::MAX_NET_INDEX;
use super::model::parse_ha_state;
use crate::ownership;
use crate::validate;

/// The summary of a diagnostic on a value a check refused.
pub const INVALID: &str = "Invalid Attribute Value";

/// Each tag as PVE stores it, and never the provider's own.
pub fn tags(value: &Value, at: &AttributePath, diags: &mut Diagnostics) {
    let Some(tags) = value.as_elements() else {
        return;
    };
    for text in tags.iter().filter_map(Value::as_str) {
        if let Err(why) = ownership::check_tag(text) {
            diags.attribute_error(at.clone(), INVALID, why);
        } else if ownership::is_own_tag(&text.to_ascii_lowercase()) {
            // The provider writes these itself; listed by the user they would be stripped
            // on read and the apply result would differ from the plan.
            diags.attribute_error(
                at.clone(),
                INVALID,
                format!(
                    "`{text}` is the provider's own ownership tag: it is added to every proxy VM \
                     by itself and never listed in `tags`. Remove it."
                ),
            );
        } else if text != text.to_ascii_lowercase() {
            // PVE stores tags lower-cased; planning `Web` and reading `web` back would be
            // an inconsistent result after apply.
            diags.attribute_error(
                at.clone(),
                INVALID,
                format!(
                    "PVE stores tags in lower case: write `{}` instead of `{text}`",
                    text.to_ascii_lowercase()
                ),
            );
        }
    }
}

/// cloud-init user-data cloud-init would act on, with a warning when it switches the
/// provider's vendor-data off.
pub fn user_data(value: &Value, at: &AttributePath, diags: &mut Diagnostics) {
    let Some(text) = value.as_str() else {
        return;
    };
    match nocloud::user_data::validate(text) {
        Ok(check) => {
            if let Some(warning) = check.warning() {
                diags.push(
                    Diagnostic::warning("user_data switches vendor-data off", warning)
                        .with_attribute(at.clone()),
                );
            }
        }
        Err(why) => diags.attribute_error(at.clone(), "Invalid user_data", why.to_string()),
    }
}

/// cloud-init network-config version 2.
pub fn network_config(value: &Value, at: &AttributePath, diags: &mut Diagnostics) {
    if let Some(text) = value.as_str()
        && let Err(why) = nocloud::network_config::validate(text)
    {
        diags.attribute_error(at.clone(), "Invalid network_config", why.to_string());
    }
}

/// Each timeout a positive duration.
pub fn timeouts(value: &Value, at: &AttributePath, diags: &mut Diagnostics) {
    for name in [
        attr::timeouts::CREATE,
        attr::timeouts::UPDATE,
        attr::timeouts::DELETE,
    ] {
        if let Some(text) = value.get_attr(name).as_str()
            && let Err(why) = validate::positive_duration(text)
        {
            // Terraform points into an object's keys no further than the attribute itself.
            diags.attribute_error(at.clone(), INVALID, format!("timeouts.{name}: {why}"));
        }
    }
}

/// `cloud_init_timeout`: a positive duration.
pub fn cloud_init_timeout(text: &str) -> Result<(), String> {
    validate::positive_duration(text).map(drop)
}

/// A `startup` object sets at least one part: PVE stores no empty start order (the key is
/// removed), so `{}` would never read back as written.
pub fn startup(value: &Value, at: &AttributePath, diags: &mut Diagnostics) {
    if !value.is_wholly_known() || value.is_null() {
        return;
    }
    let parts = [attr::startup::ORDER, attr::startup::UP, attr::startup::DOWN];
    if parts.iter().all(|part| value.get_attr(part).is_null()) {
        diags.attribute_error(
            at.clone(),
            INVALID,
            "`startup` sets none of `order`, `up`, `down`: set at least one, or leave \
             `startup` unset for no start order",
        );
    }
    for part in parts {
        if let Some(number) = value.get_attr(part).as_number()
            && !number
                .as_i64()
                .is_some_and(|n| (0..=STARTUP_MAX).contains(&n))
        {
            diags.attribute_error(
                at.clone().attr(part),
                INVALID,
                format!(
                    "Attribute startup.{part} value must be a whole number between 0 and \
                     {STARTUP_MAX}, got: {}",
                    number.as_f64()
                ),
            );
        }
    }
}

/// The largest `startup` part the provider writes (PVE takes any non-negative integer).
const STARTUP_MAX: i64 = u32::MAX as i64;

/// `ha`'s own values: a known `state`, whole non-negative numbers.
pub fn check_ha(value: &Value, at: &AttributePath, diags: &mut Diagnostics) {
    if value.is_null() || !value.is_known() {
        return;
    }
    if let Some(text) = value.get_attr(ha::STATE).as_str()
        && parse_ha_state(text).is_none()
    {
        diags.attribute_error(
            at.clone().attr(ha::STATE),
            INVALID,
            format!(
                "ha.state must be one of {}, got: \"{text}\"",
                "\"started\", \"stopped\", \"disabled\", \"ignored\""
            ),
        );
    }
    for name in [ha::MAX_RESTART, ha::MAX_RELOCATE] {
        if let Some(number) = value.get_attr(name).as_number()
            && !number
                .as_i64()
                .is_some_and(|n| (0..=i64::from(u32::MAX)).contains(&n))
        {
            diags.attribute_error(
                at.clone().attr(name),
                INVALID,
                format!(
                    "ha.{name} must be a whole number of 0 or more, got: {}",
                    number.as_f64()
                ),
            );
        }
    }
}

/// Each further NIC: a bridge name, a VLAN tag PVE takes, a MAC as PVE stores it, and no MAC
/// twice on one VM (`mac_address` of net0 included: QEMU would put two NICs on the network
/// with one address). Reported on the element (`networks[i]`), whose attribute the text
/// names: Terraform finds an element's range in the configuration, but resolves a path
/// past it (`networks[i].bridge`) to a top-level attribute of that name (terraform
/// `internal/tfdiags/contextual.go`, `ElaborateFromConfigBody`).
pub fn networks(value: &Value, at: &AttributePath, diags: &mut Diagnostics) {
    let Some(elements) = value.as_elements() else {
        return;
    };
    if elements.len() > usize::from(MAX_NET_INDEX) {
        diags.attribute_error(
            at.clone(),
            INVALID,
            format!(
                "networks has {} elements; PVE has NICs net1 to net{MAX_NET_INDEX} only",
                elements.len()
            ),
        );
    }
    let mut macs: Vec<&str> = Vec::new();
    for (index, element) in elements.iter().enumerate() {
        let here = |_: &str| at.clone().index(index as i64);
        let named = |name: &str, why: String| format!("networks[{index}].{name}: {why}");
        if let Some(bridge) = element.get_attr(nic::BRIDGE).as_str()
            && let Err(why) = validate::bridge(bridge)
        {
            diags.attribute_error(here(nic::BRIDGE), INVALID, named(nic::BRIDGE, why));
        }
        if let Some(number) = element.get_attr(nic::VLAN_TAG).as_number()
            && !number.as_i64().is_some_and(|tag| (1..=4094).contains(&tag))
        {
            diags.attribute_error(
                here(nic::VLAN_TAG),
                INVALID,
                named(
                    nic::VLAN_TAG,
                    format!(
                        "a whole number between 1 and 4094, got: {}",
                        number.as_f64()
                    ),
                ),
            );
        }
        let Some(mac) = element.get_attr(nic::MAC_ADDRESS).as_str() else {
            continue;
        };
        if let Err(why) = validate::mac_address(mac) {
            diags.attribute_error(
                here(nic::MAC_ADDRESS),
                INVALID,
                named(nic::MAC_ADDRESS, why),
            );
        } else if macs.contains(&mac) {
            diags.attribute_error(
                here(nic::MAC_ADDRESS),
                INVALID,
                named(
                    nic::MAC_ADDRESS,
                    format!("MAC address {mac} is given to two NICs of this VM: give each its own"),
                ),
            );
        }
        macs.push(mac);
    }
}

/// `mac_address` (net0's) given to a further NIC too.
pub fn net0_mac_unique(config: &Value, diags: &mut Diagnostics) {
    let Some(net0) = config.get_attr(attr::MAC_ADDRESS).as_str() else {
        return;
    };
    let Some(elements) = config.get_attr(attr::NETWORKS).as_elements() else {
        return;
    };
    for (index, element) in elements.iter().enumerate() {
        if element.get_attr(nic::MAC_ADDRESS).as_str() == Some(net0) {
            diags.attribute_error(
                AttributePath::root()
                    .attr(attr::NETWORKS)
                    .index(index as i64),
                INVALID,
                format!(
                    "networks[{index}].mac_address: MAC address {net0} is net0's mac_address \
                     too: give each NIC its own"
                ),
            );
        }
    }
}

/// `ha.state` and `started` must agree: the HA manager keeps a `started` service running and
/// a `stopped` or `disabled` one stopped, whatever the provider's power steps did.
pub fn check_ha_with_started(config: &Value, diags: &mut Diagnostics) {
    let started = config.get_attr(attr::STARTED).as_bool().unwrap_or(true);
    let Some(state) = config
        .get_attr(attr::HA)
        .get_attr(ha::STATE)
        .as_str()
        .and_then(parse_ha_state)
    else {
        return;
    };
    let runs = match state {
        HaState::Started => true,
        HaState::Stopped | HaState::Disabled => false,
        _ => return,
    };
    if runs != started {
        diags.attribute_error(
            AttributePath::root().attr(attr::HA).attr(ha::STATE),
            INVALID,
            format!(
                "ha.state = \"{}\" contradicts started = {started}: the HA manager would undo \
                 every power step. Leave ha.state unset (it follows `started`), or make them \
                 agree.",
                state.as_str()
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_refuse_unknown_states_and_a_contradiction_with_started() {
        let at = AttributePath::root().attr(attr::HA);
        let mut diags = Diagnostics::new();
        let bad = Value::object([(ha::STATE, Value::string("enabled"))]);
        check_ha(&bad, &at, &mut diags);
        assert!(diags.has_errors());
        let config = |state: &str, started: bool| {
            Value::object([
                (attr::STARTED, Value::Bool(started)),
                (attr::HA, Value::object([(ha::STATE, Value::string(state))])),
            ])
        };
        for (state, started, refused) in [
            ("started", false, true),
            ("disabled", true, true),
            ("stopped", false, false),
            ("ignored", false, false),
        ] {
            let mut diags = Diagnostics::new();
            check_ha_with_started(&config(state, started), &mut diags);
            assert_eq!(diags.has_errors(), refused, "{state} {started}");
        }
    }
}
