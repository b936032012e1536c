//! PVE's parameter rules for the endpoints pve-sim serves, and a validator that
//! reproduces pve-common's `PVE::JSONSchema` checks and error texts.
//!
//! The rules are written by us (see `schema/rules.rs`) from the facts of PVE's
//! API schema, so pve-sim needs no file from outside the project at run time.
//! `tests/schema_conformance.rs` compares them with the official schema dump
//! when that file is present.

mod check;
mod formats;
mod perl_regex;
mod rules;

use std::collections::BTreeMap;

pub use check::parse_property_string;
pub use formats::{CHECKED_FORMATS, property_format, split_list};
pub(crate) use rules::{AGENT_COMMANDS, NIC_MODELS};

/// A matched API path: which endpoint it is and the values of its `{…}` segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The endpoint's path template, e.g. `/nodes/{node}/qemu/{vmid}/config`.
    pub template: &'static str,
    /// `GET`, `POST`, `PUT` or `DELETE`.
    pub method: &'static str,
    /// Percent-decoded path segments by template name (`node`, `vmid`, …).
    pub path_params: BTreeMap<String, String>,
}

/// Why a request matches no endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// PVE answers 501 with [`not_implemented_message`].
    NotImplemented,
}

impl std::fmt::Display for RouteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouteError::NotImplemented => f.write_str("not implemented"),
        }
    }
}

impl std::error::Error for RouteError {}

/// PVE's 501 text for a path/method without handler (pve-manager `PVE/HTTPServer.pm`
/// `rest_handler`): `Method 'GET /foo' not implemented`, the path being the part after
/// `/api2/json`. The JSON `message` carries it without trailing newline.
pub fn not_implemented_message(method: &str, path_after_api2_json: &str) -> String {
    format!("Method '{method} {path_after_api2_json}' not implemented")
}

/// JSON type of a parameter as PVE declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    String,
    Integer,
    Number,
    Boolean,
}

impl ParamType {
    /// The name PVE uses in schemas and in `type check ('…') failed` messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Number => "number",
            ParamType::Boolean => "boolean",
        }
    }
}

/// The `format` of a string parameter.
#[derive(Debug, Clone, Copy)]
pub enum Format {
    /// A format registered by name in PVE (`pve-vmid`, `pve-tag-list`, `pve-qm-ipconfig`, …).
    /// Names ending in `-list` validate each element of a `,`/`;`/space separated list.
    Named(&'static str),
    /// An inline property-string format (`key=value,…`), given by its keys.
    Keys(&'static [ParamRule]),
}

/// One parameter of an endpoint, or one key of a property-string format.
#[derive(Debug, Clone, Copy)]
pub struct ParamRule {
    /// Name; indexed parameters are written as PVE's docs do, e.g. `net[n]`.
    pub name: &'static str,
    /// For `name[n]`: the accepted indexes are `0..index_count`.
    pub index_count: u32,
    pub ty: ParamType,
    pub format: Option<Format>,
    pub optional: bool,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub min_length: Option<usize>,
    pub max_length: Option<usize>,
    /// PVE's Perl pattern, verbatim; matched as `m/^PATTERN$/`.
    pub pattern: Option<&'static str>,
    pub enumeration: Option<&'static [&'static str]>,
    /// The default as PVE documents it (informational, never injected into requests).
    pub default: Option<&'static str>,
    /// Another parameter that must be present when this one is.
    pub requires: Option<&'static str>,
    /// Property-string keys only: the value may be given without `key=`.
    pub default_key: bool,
    /// Property-string keys only: this key is another name for `alias`.
    pub alias: Option<&'static str>,
    /// Property-string keys only: the key's own name is stored as the value of this key
    /// (`net0: virtio=MAC` stores `model=virtio`, `macaddr=MAC`).
    pub key_alias: Option<&'static str>,
    /// The section types (values of the endpoint's `type`) the parameter belongs to, as
    /// PVE's schema dump flattens a section config with isolated properties.
    pub instance_types: Option<&'static [&'static str]>,
    /// The parameter is declared in each variant of such a config's `oneOf` (pve-common
    /// `SectionConfig.pm` `make_isolated_base_schema`, since libpve-common-perl 9.1.21):
    /// its errors are reported under `oneOf[<type>].<name>`, and without a valid `type` it
    /// is an unknown property.
    pub in_variant: bool,
    /// Required within its variant although the flattened dump calls it optional.
    pub variant_required: bool,
}

impl ParamRule {
    const fn new(name: &'static str, ty: ParamType) -> Self {
        ParamRule {
            name,
            index_count: 0,
            ty,
            format: None,
            optional: false,
            minimum: None,
            maximum: None,
            min_length: None,
            max_length: None,
            pattern: None,
            enumeration: None,
            default: None,
            requires: None,
            default_key: false,
            alias: None,
            key_alias: None,
            instance_types: None,
            in_variant: false,
            variant_required: false,
        }
    }

    /// Whether the parameter belongs to a `oneOf` variant (see `in_variant`).
    pub fn is_variant(&self) -> bool {
        self.in_variant || self.instance_types.is_some()
    }

    /// Whether `key` names this parameter (`net7` for `net[n]`).
    pub fn matches_key(&self, key: &str) -> bool {
        if self.index_count == 0 {
            return self.name == key;
        }
        let Some(prefix) = self.name.strip_suffix("[n]") else {
            return false;
        };
        let Some(digits) = key.strip_prefix(prefix) else {
            return false;
        };
        // PVE registers net0..net31 literally, so `net01` or `net+1` is unknown.
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        canonical && digits.parse::<u32>().is_ok_and(|n| n < self.index_count)
    }
}

/// All rules of one endpoint.
#[derive(Debug, Clone)]
pub struct EndpointRules {
    pub method: &'static str,
    pub template: &'static str,
    pub params: Vec<ParamRule>,
}

impl EndpointRules {
    /// The rule for a concrete parameter name (`net0` finds `net[n]`).
    pub fn param(&self, key: &str) -> Option<&ParamRule> {
        self.params.iter().find(|rule| rule.matches_key(key))
    }
}

/// Every endpoint pve-sim serves, with PVE's parameter rules.
pub fn endpoints() -> &'static [EndpointRules] {
    rules::all()
}

/// The rules of one endpoint by method and template.
pub fn endpoint(method: &str, template: &str) -> Option<&'static EndpointRules> {
    endpoints()
        .iter()
        .find(|e| e.method == method && e.template == template)
}

/// Matches `method` and the path after `/api2/json` (query string ignored) against the
/// served endpoints. Path segments are percent-decoded; a `{volume}` segment takes the
/// rest of the path, as PVE's storage content handler does.
pub fn route(method: &str, path_after_api2_json: &str) -> Result<Route, RouteError> {
    let path = path_after_api2_json
        .split_once('?')
        .map_or(path_after_api2_json, |(p, _)| p);
    let decoded = percent_decode(path);
    let segments: Vec<&str> = decoded.split('/').filter(|s| !s.is_empty()).collect();
    // PVE answers the same 501 for an unknown path and for an unknown method on a known one.
    for endpoint in endpoints().iter().filter(|e| e.method == method) {
        if let Some(params) = match_template(endpoint.template, &segments) {
            return Ok(Route {
                template: endpoint.template,
                method: endpoint.method,
                path_params: params,
            });
        }
    }
    Err(RouteError::NotImplemented)
}

fn match_template(template: &str, segments: &[&str]) -> Option<BTreeMap<String, String>> {
    let parts: Vec<&str> = template.split('/').filter(|s| !s.is_empty()).collect();
    let mut params = BTreeMap::new();
    for (i, part) in parts.iter().enumerate() {
        if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            if name == "volume" && i + 1 == parts.len() {
                if segments.len() <= i {
                    return None;
                }
                params.insert(name.to_string(), segments[i..].join("/"));
                return Some(params);
            }
            params.insert(name.to_string(), (*segments.get(i)?).to_string());
        } else if segments.get(i) != Some(part) {
            return None;
        }
    }
    (segments.len() == parts.len()).then_some(params)
}

fn percent_decode(input: &str) -> String {
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Validates the path parameters of `route` plus `params` (form/query strings or JSON
/// values) as PVE does before calling a handler. Returns the normalised values (booleans
/// as JSON bools, integers as i64, numbers as f64, the rest as strings, JSON `null`
/// dropped) or PVE's per-parameter error map (the `errors` of its 400 body).
pub fn validate(
    route: &Route,
    params: &serde_json::Map<String, serde_json::Value>,
) -> Result<serde_json::Map<String, serde_json::Value>, BTreeMap<String, String>> {
    let Some(rules) = endpoint(route.method, route.template) else {
        let mut errors = BTreeMap::new();
        errors.insert(
            "_root".to_string(),
            format!("no rules for {} {}", route.method, route.template),
        );
        return Err(errors);
    };
    check::validate_params(rules, &route.path_params, params)
}
