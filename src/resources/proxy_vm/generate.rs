//! The configuration `-generate-config-out` writes for an imported or listed VM (Terraform 1.14
//! and later ask the provider through `GenerateResourceConfig`; Terraform 1.11 to 1.13 filter
//! the state themselves): one that imports to an empty plan, as short as that allows.
//!
//! From the state, Terraform's own filter keeps what a configuration may set
//! (`tfplugin::config_from_state`). Left out as well: `vmid` and `node` (the import names the
//! VM, and unset they keep it where it is), values equal to what leaving them out plans (the
//! declared defaults, the provider's storage defaults), and an empty `tags`. A VM whose seed is
//! still attached gets `seed_lifetime = "vm"`, which keeps it so (an import cannot read the
//! setting, and the default would detach it). `user_data` and `network_config` are
//! write-only: nothing can read them back, so they stay unset, which keeps the VM's seed; a
//! warning says so.

use tfplugin::{Diagnostic, GenerateConfigResponse, Value, config_from_state};

use super::attr;
use super::schema::{self, DefaultValue};
use crate::context::Configured;

/// The configuration for `state` (null for a null state). `configured` is the provider's
/// context, when it is configured: its storage defaults need not be written.
pub fn config_for(state: &Value, configured: Option<&Configured>) -> GenerateConfigResponse {
    let mut config = config_from_state(&schema::schema().block, state);
    if config.is_null() {
        return GenerateConfigResponse {
            config,
            diagnostics: Default::default(),
        };
    }
    for name in [attr::VMID, attr::NODE] {
        config.set_attr(name, Value::Null);
    }
    for spec in schema::ATTRIBUTES {
        let default = match spec.default {
            Some(DefaultValue::Bool(value)) => Value::Bool(value),
            Some(DefaultValue::Text(text)) => Value::string(text),
            _ => continue,
        };
        if config.get_attr(spec.name).same_as(&default) {
            config.set_attr(spec.name, Value::Null);
        }
    }
    // Unset, `start_on_boot` follows `started`.
    if config
        .get_attr(attr::START_ON_BOOT)
        .same_as(state.get_attr(attr::STARTED))
    {
        config.set_attr(attr::START_ON_BOOT, Value::Null);
    }
    if let Some(configured) = configured {
        drop_if(
            &mut config,
            attr::SEED_STORAGE,
            Some(&configured.seed_storage),
        );
        drop_if(
            &mut config,
            attr::CLONE_STORAGE,
            configured.clone_storage.as_ref(),
        );
    }
    if config
        .get_attr(attr::TAGS)
        .as_elements()
        .is_some_and(|t| t.is_empty())
    {
        config.set_attr(attr::TAGS, Value::Null);
    }
    // A seed still attached is kept by `"vm"`, as the import records it: the VM stays as it
    // is (unset, the default would plan the seed's detach).
    let attached = state.get_attr(attr::SEED_VOLUME).as_str();
    if attached.is_some_and(|volume| !volume.is_empty()) {
        config.set_attr(attr::SEED_LIFETIME, Value::string("vm"));
    }
    GenerateConfigResponse {
        config,
        diagnostics: Diagnostic::warning(
            "user_data and network_config are not generated",
            "They are write-only: no plan, state or PVE answer holds them, so the generated \
             configuration leaves them unset, which keeps the VM's seed as it is. Setting either \
             replaces the VM with one seeded from the new values.",
        )
        .into(),
    }
}

fn drop_if(config: &mut Value, name: &str, provider_default: Option<&String>) {
    if provider_default.is_some_and(|value| config.get_attr(name).as_str() == Some(value)) {
        config.set_attr(name, Value::Null);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> Value {
        let mut state = Value::object(
            schema::ATTRIBUTES
                .iter()
                .map(|spec| (spec.name, Value::Null)),
        );
        for (name, value) in [
            (attr::ID, Value::string("100123")),
            (attr::NAME, Value::string("edge-0")),
            (attr::NODE, Value::string("pve1")),
            (attr::VMID, Value::number(100123)),
            (attr::TEMPLATE, Value::string("debian-13-proxy")),
            (attr::CORES, Value::number(2)),
            (attr::TAGS, Value::Set(vec![])),
            (attr::STARTED, Value::Bool(false)),
            (attr::START_ON_BOOT, Value::Bool(true)),
            (attr::WAIT_FOR, Value::string("cloud-init")),
            (attr::SEED_LIFETIME, Value::string("vm")),
            (attr::REBOOT_IF_NEEDED, Value::Bool(false)),
            (attr::SEED_STORAGE, Value::string("local")),
            (attr::SEED_VOLUME, Value::string("")),
            (attr::CURRENT_NODE, Value::string("pve1")),
            (attr::STATUS, Value::string("stopped")),
        ] {
            state.set_attr(name, value);
        }
        state
    }

    #[test]
    fn only_what_differs_from_leaving_it_out_is_written() {
        let generated = config_for(&state(), None);
        let config = generated.config;
        assert_eq!(config.get_attr(attr::NAME).as_str(), Some("edge-0"));
        assert_eq!(config.get_attr(attr::CORES).as_i64(), Some(2));
        // Not the defaults: kept.
        assert_eq!(config.get_attr(attr::STARTED).as_bool(), Some(false));
        // Unset it would follow `started` (false): kept.
        assert_eq!(config.get_attr(attr::START_ON_BOOT).as_bool(), Some(true));
        assert_eq!(config.get_attr(attr::SEED_LIFETIME).as_str(), Some("vm"));
        assert_eq!(config.get_attr(attr::SEED_STORAGE).as_str(), Some("local"));
        for gone in [
            attr::ID,
            attr::VMID,
            attr::NODE,
            attr::TAGS,
            attr::WAIT_FOR,
            attr::REBOOT_IF_NEEDED,
            attr::CURRENT_NODE,
            attr::STATUS,
            attr::USER_DATA,
        ] {
            assert!(config.get_attr(gone).is_null(), "{gone}");
        }
        let warning = generated.diagnostics.iter().next().unwrap();
        assert!(warning.summary.contains("user_data"));
        assert!(!generated.diagnostics.has_errors());
    }

    #[test]
    fn a_seed_still_attached_is_kept_so() {
        let mut attached = state();
        attached.set_attr(attr::SEED_LIFETIME, Value::string("until_ready"));
        attached.set_attr(
            attr::SEED_VOLUME,
            Value::string("local:iso/seed-edge-0-1a2b3c4d-5e6f7a8b.iso"),
        );
        let config = config_for(&attached, None).config;
        assert_eq!(config.get_attr(attr::SEED_LIFETIME).as_str(), Some("vm"));
        let mut detached = state();
        detached.set_attr(attr::SEED_LIFETIME, Value::string("until_ready"));
        let config = config_for(&detached, None).config;
        assert!(config.get_attr(attr::SEED_LIFETIME).is_null());
    }

    #[test]
    fn a_null_state_gives_a_null_configuration() {
        assert!(config_for(&Value::Null, None).config.is_null());
    }
}
