//! `ha` between its Terraform object and PVE's HA resource (`/cluster/ha/resources`,
//! pve-ha-manager 5.2.0 `API2/HA/Resources.pm`, `HA/Resources.pm` for the options and their
//! defaults: `state` started, `max_restart` 1, `max_relocate` 1, `failback` on).
//!
//! Every part of `ha` is optional and never computed, so the state holds what the
//! configuration wrote: a refresh shows an option PVE holds at its default (or `state` at
//! `started`/`stopped`, which follow `started`) as unset, and anything else as its value.

use pve::cluster::ha::{HaResource, HaResourceSettings, HaState};
use tfplugin::Value;

use super::super::attr::ha;

/// PVE's defaults of the options (`HA/Resources.pm`).
const DEFAULT_MAX_RESTART: u32 = 1;
const DEFAULT_MAX_RELOCATE: u32 = 1;
const DEFAULT_FAILBACK: bool = true;

/// What `ha` asks for; `None` fields are unset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HaSpec {
    pub state: Option<HaState>,
    pub max_restart: Option<u32>,
    pub max_relocate: Option<u32>,
    pub failback: Option<bool>,
    pub comment: Option<String>,
}

/// A `state` value `ha` takes (PVE's `enabled`, an alias of `started`, is left out).
pub fn parse_ha_state(text: &str) -> Option<HaState> {
    match text {
        "started" => Some(HaState::Started),
        "stopped" => Some(HaState::Stopped),
        "disabled" => Some(HaState::Disabled),
        "ignored" => Some(HaState::Ignored),
        _ => None,
    }
}

impl HaSpec {
    /// The configured (or planned) `ha`; `None` when unset.
    pub fn of(value: &Value) -> Option<HaSpec> {
        if value.is_null() || !value.is_known() {
            return None;
        }
        let number = |name: &str| {
            value
                .get_attr(name)
                .as_i64()
                .and_then(|n| u32::try_from(n).ok())
        };
        Some(HaSpec {
            state: value.get_attr(ha::STATE).as_str().and_then(parse_ha_state),
            max_restart: number(ha::MAX_RESTART),
            max_relocate: number(ha::MAX_RELOCATE),
            failback: value.get_attr(ha::FAILBACK).as_bool(),
            comment: value.get_attr(ha::COMMENT).as_str().map(str::to_owned),
        })
    }

    /// The requested state: the configured one, else what `started` says.
    pub fn requested_state(&self, started: bool) -> HaState {
        self.state.unwrap_or(if started {
            HaState::Started
        } else {
            HaState::Stopped
        })
    }

    /// The settings of a new resource: the state always, the options set.
    pub fn settings(&self, started: bool) -> HaResourceSettings {
        HaResourceSettings {
            state: Some(self.requested_state(started)),
            comment: self.comment.clone(),
            max_restart: self.max_restart,
            max_relocate: self.max_relocate,
            failback: self.failback,
            group: None,
        }
    }

    /// What a `PUT` must change on `resource` to make it this: the settings that differ and
    /// the options to remove (set on PVE, unset here). `None` when nothing differs.
    pub fn changes(
        &self,
        started: bool,
        resource: &HaResource,
    ) -> Option<(HaResourceSettings, Vec<&'static str>)> {
        let mut change = HaResourceSettings::default();
        let mut delete = Vec::new();
        let state = self.requested_state(started);
        if resource.requested_state() != state {
            change.state = Some(state);
        }
        let mut option = |wanted: Option<u32>, held: Option<u32>, name: &'static str| match wanted {
            Some(n) if held != Some(n) => Some(n),
            None if held.is_some() => {
                delete.push(name);
                None
            }
            _ => None,
        };
        change.max_restart = option(self.max_restart, resource.max_restart, ha::MAX_RESTART);
        change.max_relocate = option(self.max_relocate, resource.max_relocate, ha::MAX_RELOCATE);
        match (self.failback, resource.failback) {
            (Some(wanted), held) if held != Some(wanted) => change.failback = Some(wanted),
            (None, Some(_)) => delete.push(ha::FAILBACK),
            _ => {}
        }
        match (&self.comment, &resource.comment) {
            (Some(wanted), held) if held.as_ref() != Some(wanted) => {
                change.comment = Some(wanted.clone());
            }
            (None, Some(_)) => delete.push(ha::COMMENT),
            _ => {}
        }
        (change != HaResourceSettings::default() || !delete.is_empty()).then_some((change, delete))
    }
}

/// The state's `ha` after a refresh: `prior`'s (what the configuration wrote) with PVE's
/// values; null when the state had none, or when the resource is gone (the plan adds it).
pub fn observed_ha(prior: &Value, resource: Option<&HaResource>) -> Value {
    let Some(resource) = resource.filter(|_| !prior.is_null() && prior.is_known()) else {
        return Value::Null;
    };
    let written = |name: &str| !prior.get_attr(name).is_null();
    let state = resource.requested_state();
    let state = match state {
        // `started` and `stopped` follow `started` when unset.
        HaState::Started | HaState::Stopped if !written(ha::STATE) => Value::Null,
        other => Value::string(other.as_str()),
    };
    let number = |name: &str, held: Option<u32>, default: u32| {
        let value = held.unwrap_or(default);
        if !written(name) && value == default {
            Value::Null
        } else {
            Value::number(i64::from(value))
        }
    };
    let failback = resource.failback.unwrap_or(DEFAULT_FAILBACK);
    let failback = if !written(ha::FAILBACK) && failback == DEFAULT_FAILBACK {
        Value::Null
    } else {
        Value::Bool(failback)
    };
    let comment = resource
        .comment
        .as_deref()
        .map_or(Value::Null, Value::string);
    let max_restart = number(ha::MAX_RESTART, resource.max_restart, DEFAULT_MAX_RESTART);
    let max_relocate = number(
        ha::MAX_RELOCATE,
        resource.max_relocate,
        DEFAULT_MAX_RELOCATE,
    );
    Value::object([
        (ha::STATE, state),
        (ha::MAX_RESTART, max_restart),
        (ha::MAX_RELOCATE, max_relocate),
        (ha::FAILBACK, failback),
        (ha::COMMENT, comment),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(json: serde_json::Value) -> HaResource {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_spec_reads_its_object_and_follows_started() {
        let value = Value::object([
            (ha::STATE, Value::Null),
            (ha::MAX_RESTART, Value::number(3)),
            (ha::MAX_RELOCATE, Value::Null),
            (ha::FAILBACK, Value::Bool(false)),
            (ha::COMMENT, Value::string("edge")),
        ]);
        let spec = HaSpec::of(&value).unwrap();
        assert_eq!(spec.requested_state(true), HaState::Started);
        assert_eq!(spec.requested_state(false), HaState::Stopped);
        assert_eq!(
            spec.settings(true).add_form("vm:100").encode(),
            "sid=vm%3A100&state=started&comment=edge&max_restart=3&failback=0"
        );
        assert_eq!(HaSpec::of(&Value::Null), None);
    }

    #[test]
    fn changes_set_what_differs_and_delete_what_is_unset() {
        let spec = HaSpec {
            max_restart: Some(2),
            ..HaSpec::default()
        };
        let held = resource(serde_json::json!({
            "sid": "vm:100", "type": "vm", "state": "started", "max_restart": 1,
            "comment": "by hand", "digest": "d"
        }));
        let (change, delete) = spec.changes(true, &held).unwrap();
        assert_eq!(change.max_restart, Some(2));
        assert_eq!(change.state, None);
        assert_eq!(delete, [ha::COMMENT]);
        let same = resource(serde_json::json!({
            "sid": "vm:100", "type": "vm", "state": "stopped", "max_restart": 2
        }));
        assert_eq!(spec.changes(false, &same), None);
        assert!(spec.changes(true, &same).is_some(), "state follows started");
    }

    #[test]
    fn a_refresh_shows_defaults_as_unset_and_the_rest_as_drift() {
        let prior = Value::object([
            (ha::STATE, Value::Null),
            (ha::MAX_RESTART, Value::number(2)),
            (ha::MAX_RELOCATE, Value::Null),
            (ha::FAILBACK, Value::Null),
            (ha::COMMENT, Value::Null),
        ]);
        let held = resource(serde_json::json!({
            "sid": "vm:100", "type": "vm", "state": "stopped", "max_restart": 2,
            "max_relocate": 1
        }));
        assert_eq!(observed_ha(&prior, Some(&held)), prior);
        let changed = resource(serde_json::json!({
            "sid": "vm:100", "type": "vm", "state": "disabled", "max_restart": 5,
            "max_relocate": 4, "failback": 0, "comment": "x"
        }));
        let seen = observed_ha(&prior, Some(&changed));
        assert_eq!(seen.get_attr(ha::STATE), &Value::string("disabled"));
        assert_eq!(seen.get_attr(ha::MAX_RESTART), &Value::number(5));
        assert_eq!(seen.get_attr(ha::MAX_RELOCATE), &Value::number(4));
        assert_eq!(seen.get_attr(ha::FAILBACK), &Value::Bool(false));
        assert_eq!(seen.get_attr(ha::COMMENT), &Value::string("x"));
        assert_eq!(observed_ha(&prior, None), Value::Null);
        assert_eq!(observed_ha(&Value::Null, Some(&held)), Value::Null);
    }
}
