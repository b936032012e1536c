//! `UpgradeResourceState` for `proxmox_proxy_vm`: state stored by any earlier release, in
//! any earlier schema version, is carried forward one version at a time to the current one.
//! Terraform calls this for every instance before reading it, also when the version is current.
//!
//! Never calls PVE: an upgrade only reshapes the stored JSON.

use serde_json::{Map, Value as Json};
use tfplugin::{StateUpgrade, UpgradeRequest, UpgradeResponse, upgrade_state_json};

use super::schema;

/// `STEPS[n]` turns schema version `n` into `n + 1`; one entry per version bump.
const STEPS: &[StateUpgrade] = &[v0_to_v1, v1_to_v2];

pub fn upgrade(request: &UpgradeRequest) -> UpgradeResponse {
    upgrade_state_json(&schema::schema(), request, STEPS)
}

/// Version 1 added `fleet`. VMs made before it carry no fleet in their ownership mark, which is
/// the default fleet `""`: a known value, so the first plan after the upgrade stays empty.
fn v0_to_v1(state: &mut Map<String, Json>) -> Result<(), String> {
    state
        .entry("fleet")
        .or_insert_with(|| Json::String(String::new()));
    Ok(())
}

/// Version 2 replaced `wait_for_address` with `wait_for` and added `seed_lifetime`.
/// `wait_for_address = true` (or unset) becomes the default `wait_for = "cloud-init"`, and
/// `false` becomes `"none"`; `wait_for_address` itself is gone from the schema. Existing VMs
/// get the default `seed_lifetime`: their seed is detached by the first apply that finds
/// cloud-init finished (the plan shows it).
fn v1_to_v2(state: &mut Map<String, Json>) -> Result<(), String> {
    let no_wait = state.remove("wait_for_address") == Some(Json::Bool(false));
    let wait_for = if no_wait { "none" } else { "cloud-init" };
    state.insert("wait_for".to_owned(), Json::String(wait_for.to_owned()));
    state
        .entry("seed_lifetime")
        .or_insert_with(|| Json::String("until_ready".to_owned()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(version: i64, json: &str) -> UpgradeRequest {
        UpgradeRequest {
            version,
            raw_state_json: json.as_bytes().to_vec(),
        }
    }

    #[test]
    fn steps_cover_every_earlier_version() {
        assert_eq!(STEPS.len() as i64, schema::SCHEMA_VERSION);
    }

    #[test]
    fn version_0_gains_the_default_fleet_and_keeps_everything_else() {
        let upgraded = upgrade(&request(
            0,
            r#"{"id":"100","vmid":100,"name":"edge-0","tags":["edge"],"user_data":null,
                "started":true}"#,
        ));
        assert!(
            !upgraded.diagnostics.has_errors(),
            "{:?}",
            upgraded.diagnostics
        );
        let state = upgraded.upgraded_state;
        assert_eq!(state.get_attr("fleet").as_str(), Some(""));
        assert_eq!(state.get_attr("vmid").as_i64(), Some(100));
        assert_eq!(state.get_attr("name").as_str(), Some("edge-0"));
        assert_eq!(state.get_attr("started").as_bool(), Some(true));
        assert!(state.get_attr("user_data").is_null());
    }

    #[test]
    fn version_1_waits_for_cloud_init_unless_it_did_not_wait() {
        let waited = upgrade(&request(1, r#"{"id":"100","wait_for_address":true}"#));
        assert!(!waited.diagnostics.has_errors(), "{:?}", waited.diagnostics);
        let state = waited.upgraded_state;
        assert_eq!(state.get_attr("wait_for").as_str(), Some("cloud-init"));
        assert_eq!(
            state.get_attr("seed_lifetime").as_str(),
            Some("until_ready")
        );
        let not = upgrade(&request(1, r#"{"id":"100","wait_for_address":false}"#));
        let state = not.upgraded_state;
        assert_eq!(state.get_attr("wait_for").as_str(), Some("none"));
        assert!(!state.as_entries().unwrap().contains_key("wait_for_address"));
    }

    /// States of schema version 2 written while `wait_for_address` was a deprecated
    /// attribute still read: the value is dropped, and `wait_for` already says what it meant.
    #[test]
    fn a_version_2_state_holding_wait_for_address_still_reads() {
        let upgraded = upgrade(&request(
            2,
            r#"{"id":"100","wait_for":"none","wait_for_address":false}"#,
        ));
        assert!(
            !upgraded.diagnostics.has_errors(),
            "{:?}",
            upgraded.diagnostics
        );
        assert_eq!(
            upgraded.upgraded_state.get_attr("wait_for").as_str(),
            Some("none")
        );
    }

    #[test]
    fn current_state_keeps_its_fleet() {
        let upgraded = upgrade(&request(2, r#"{"id":"100","fleet":"blue"}"#));
        assert!(
            !upgraded.diagnostics.has_errors(),
            "{:?}",
            upgraded.diagnostics
        );
        assert_eq!(
            upgraded.upgraded_state.get_attr("fleet").as_str(),
            Some("blue")
        );
    }

    #[test]
    fn state_from_a_newer_release_is_refused() {
        let upgraded = upgrade(&request(schema::SCHEMA_VERSION + 1, r#"{"id":"100"}"#));
        assert!(upgraded.diagnostics.has_errors());
    }
}
