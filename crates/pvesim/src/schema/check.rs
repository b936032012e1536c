//! The validation engine: pve-common `PVE::JSONSchema` `check_object`, `check_prop`,
//! `check_type`, `check_format` and `parse_property_string`, with their texts.

use std::collections::BTreeMap;

use serde_json::Value;

use super::formats;
use super::perl_regex::perl_anchored_match;
use super::{EndpointRules, Format, ParamRule, ParamType};

/// A parameter value as the Perl side sees it.
#[derive(Debug, Clone)]
enum Scalar {
    /// Form/query strings and JSON numbers/strings (Perl does not tell them apart).
    Text(String),
    /// A JSON `true`/`false` (a `JSON::PP::Boolean` reference in Perl).
    JsonBool(bool),
    /// A JSON array or object (`ARRAY`/`HASH` reference).
    Reference(&'static str),
}

impl Scalar {
    fn from_json(value: &Value) -> Option<Scalar> {
        match value {
            // JSON null decodes to undef: the parameter counts as absent.
            Value::Null => None,
            Value::Bool(b) => Some(Scalar::JsonBool(*b)),
            // Perl keeps a decoded JSON float as a number and prints `2.0` as `2`.
            Value::Number(n) => Some(Scalar::Text(match n.as_f64() {
                Some(f) if n.is_f64() => perl_number(f),
                _ => n.to_string(),
            })),
            Value::String(s) => Some(Scalar::Text(s.clone())),
            Value::Array(_) => Some(Scalar::Reference("ARRAY")),
            Value::Object(_) => Some(Scalar::Reference("HASH")),
        }
    }
}

/// PVE's `add_error`: a second message for the same key is appended after a literal
/// backslash-n (single-quoted `'\n'` in Perl).
fn add_error(errors: &mut BTreeMap<String, String>, path: &str, message: String) {
    let key = if path.is_empty() { "_root" } else { path };
    errors
        .entry(key.to_string())
        .and_modify(|existing| {
            existing.push_str("\\n");
            existing.push_str(&message);
        })
        .or_insert(message);
}

pub(crate) fn validate_params(
    rules: &EndpointRules,
    path_params: &BTreeMap<String, String>,
    params: &serde_json::Map<String, Value>,
) -> Result<serde_json::Map<String, Value>, BTreeMap<String, String>> {
    let mut errors = BTreeMap::new();
    let mut values: BTreeMap<String, Scalar> = BTreeMap::new();
    for (key, value) in params {
        if let Some(scalar) = Scalar::from_json(value) {
            values.insert(key.clone(), scalar);
        }
    }
    for (key, value) in path_params {
        if let Some(Scalar::Text(given)) = values.get(key)
            && given != value
        {
            add_error(
                &mut errors,
                key,
                "duplicate parameter (already defined in URI) with conflicting values!".into(),
            );
        }
        values.insert(key.clone(), Scalar::Text(value.clone()));
    }

    // Schema keys first (missing required ones), then the given keys (unknown ones and
    // `requires`), as check_object does.
    let variant = variant_type(rules, &values);
    for rule in rules.params.iter().filter(|r| r.index_count == 0) {
        match variant_path(rule, variant) {
            Some(path) => check_variant_prop(values.get(rule.name), rule, &path, &mut errors),
            None if rule.is_variant() => {}
            None => check_prop(values.get(rule.name), rule, rule.name, &mut errors),
        }
    }
    for (key, value) in &values {
        let rule = rules.params.iter().find(|r| r.matches_key(key));
        let outside_variant =
            rule.is_some_and(|r| r.is_variant() && variant_path(r, variant).is_none());
        match rule.filter(|_| !outside_variant) {
            Some(rule) => {
                if rule.index_count > 0 {
                    check_prop(Some(value), rule, key, &mut errors);
                }
                if let Some(required) = rule.requires
                    && !values.contains_key(required)
                {
                    add_error(
                        &mut errors,
                        required,
                        format!("missing property - '{key}' requires this property"),
                    );
                }
            }
            None => add_error(
                &mut errors,
                key,
                "property is not defined in schema and the schema does not allow additional \
                    properties"
                    .into(),
            ),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }

    let mut normalised = serde_json::Map::new();
    for (key, value) in values {
        let Some(rule) = rules.param(&key) else {
            continue;
        };
        normalised.insert(key, normalise(rule.ty, value));
    }
    Ok(normalised)
}

fn normalise(ty: ParamType, value: Scalar) -> Value {
    match (ty, value) {
        (_, Scalar::JsonBool(b)) => Value::Bool(b),
        (ParamType::Boolean, Scalar::Text(text)) => Value::Bool(text == "1"),
        (ParamType::Integer, Scalar::Text(text)) => match text.parse::<i64>() {
            Ok(n) => Value::from(n),
            // Perl accepts any digit string; beyond i64 we keep the nearest float.
            Err(_) => text
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map_or(Value::String(text), Value::Number),
        },
        (ParamType::Number, Scalar::Text(text)) => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::String(text), Value::Number),
        (ParamType::String, Scalar::Text(text)) => Value::String(text),
        (_, Scalar::Reference(kind)) => Value::String(kind.to_string()),
    }
}

/// The `type` of an endpoint whose parameters come from a section config's `oneOf`
/// variants, when it is one of the variants (pve-common `JSONSchema.pm` `check_one_of`).
fn variant_type<'a>(
    rules: &EndpointRules,
    values: &'a BTreeMap<String, Scalar>,
) -> Option<&'a str> {
    if !rules.params.iter().any(ParamRule::is_variant) {
        return None;
    }
    let type_rule = rules.param("type")?;
    match values.get("type") {
        Some(Scalar::Text(text)) if type_rule.enumeration?.contains(&text.as_str()) => {
            Some(text.as_str())
        }
        _ => None,
    }
}

/// Where a variant parameter's errors go: `oneOf[<type>].<name>`, when it belongs to the
/// given type's variant.
fn variant_path(rule: &ParamRule, variant: Option<&str>) -> Option<String> {
    let variant = variant.filter(|_| rule.is_variant())?;
    let belongs = rule
        .instance_types
        .is_none_or(|types| types.contains(&variant));
    belongs.then(|| format!("oneOf[{variant}].{}", rule.name))
}

fn check_variant_prop(
    value: Option<&Scalar>,
    rule: &ParamRule,
    path: &str,
    errors: &mut BTreeMap<String, String>,
) {
    if value.is_none() && rule.variant_required {
        add_error(
            errors,
            path,
            "property is missing and it is not optional".into(),
        );
        return;
    }
    check_prop(value, rule, path, errors);
}

/// pve-common `is_number`.
pub(crate) fn is_number(value: &str) -> bool {
    let v = value.strip_suffix('\n').unwrap_or(value);
    let v = v.strip_prefix(['+', '-']).unwrap_or(v);
    let (mantissa, exponent) = match v.find(['e', 'E']) {
        Some(i) => (&v[..i], Some(&v[i + 1..])),
        None => (v, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (digits(int) && (frac.is_empty() || digits(frac))) || (int.is_empty() && digits(frac))
        }
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// pve-common `is_integer`: `^[+-]?\d+$` (Perl's `\d` is Unicode-aware, `$` allows a
/// final newline).
pub(crate) fn is_integer(value: &str) -> bool {
    let v = value.strip_suffix('\n').unwrap_or(value);
    let v = v.strip_prefix(['+', '-']).unwrap_or(v);
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())
}

fn check_prop(
    value: Option<&Scalar>,
    rule: &ParamRule,
    path: &str,
    errors: &mut BTreeMap<String, String>,
) {
    let Some(value) = value else {
        if !rule.optional && rule.alias.is_none() {
            add_error(
                errors,
                path,
                "property is missing and it is not optional".into(),
            );
        }
        return;
    };
    if rule.alias.is_some() {
        // Only reachable for property-string keys; parse_property_string never stores
        // under an alias name.
        return;
    }
    if let Err(message) = check_value(value, rule, path) {
        add_error(errors, path, message);
    }
}

/// PVE's checks of one value in its order; the first that fails is the error.
fn check_value(value: &Scalar, rule: &ParamRule, path: &str) -> Result<(), String> {
    let ty = rule.ty.as_str();
    let text = match value {
        Scalar::Reference(kind) => {
            return Err(format!("type check ('{ty}') failed - got {kind}"));
        }
        Scalar::JsonBool(_) if rule.ty == ParamType::Boolean => return Ok(()),
        Scalar::JsonBool(_) => {
            return Err(format!(
                "type check ('{ty}') failed - got JSON::PP::Boolean"
            ));
        }
        Scalar::Text(text) => text.as_str(),
    };
    let type_ok = match rule.ty {
        ParamType::String => true,
        ParamType::Boolean => text == "1" || text == "0",
        ParamType::Integer => is_integer(text),
        ParamType::Number => is_number(text),
    };
    if !type_ok {
        return Err(format!("type check ('{ty}') failed - got '{text}'"));
    }
    if let Some(format) = rule.format {
        check_format(format, text, path)
            .map_err(|message| format!("invalid format - {message}"))?;
    }
    if let Some(pattern) = rule.pattern
        && !perl_anchored_match(pattern, text)
    {
        return Err("value does not match the regex pattern".into());
    }
    check_length(rule, text)?;
    if is_number(text) {
        check_range(rule, text)?;
    }
    match rule.enumeration {
        Some(allowed) if !allowed.contains(&text) => Err(format!(
            "value '{text}' does not have a value in the enumeration '{}'",
            allowed.join(", ")
        )),
        _ => Ok(()),
    }
}

fn check_length(rule: &ParamRule, text: &str) -> Result<(), String> {
    let length = text.chars().count();
    if let Some(max) = rule.max_length
        && length > max
    {
        return Err(format!("value may only be {max} characters long"));
    }
    if let Some(min) = rule.min_length
        && length < min
    {
        return Err(format!("value must be at least {min} characters long"));
    }
    Ok(())
}

/// `minimum`/`maximum` of a value that looks like a number.
fn check_range(rule: &ParamRule, text: &str) -> Result<(), String> {
    let number: f64 = text
        .trim_end_matches('\n')
        .trim_start_matches('+')
        .parse()
        .unwrap_or(f64::NAN);
    if let Some(max) = rule.maximum
        && number > max
    {
        return Err(format!(
            "value must have a maximum value of {}",
            perl_number(max)
        ));
    }
    if let Some(min) = rule.minimum
        && number < min
    {
        return Err(format!(
            "value must have a minimum value of {}",
            perl_number(min)
        ));
    }
    Ok(())
}

/// How Perl prints a number from a schema (`100`, `0.1`, `999999999`).
pub(crate) fn perl_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// pve-common `check_format`; the error is the die text, trailing newline included.
fn check_format(format: Format, value: &str, path: &str) -> Result<(), String> {
    match format {
        Format::Keys(keys) => parse_property_string(keys, value, path).map(|_| ()),
        Format::Named(name) => {
            if let Some(keys) = formats::property_format(name) {
                return parse_property_string(keys, value, path).map(|_| ());
            }
            formats::check_named(name, value)
        }
    }
}

/// pve-common `parse_property_string` followed by the `check_object` of the parsed keys:
/// `key=value` parts separated by `,`, one value without key for the default key, aliases
/// resolved, booleans parsed leniently (`on`, `yes`, `true` …). Returns the parsed keys or
/// the die text (`"format error\n"` plus `"<path>.<key>: <message>\n"` lines).
pub fn parse_property_string(
    keys: &[ParamRule],
    data: &str,
    path: &str,
) -> Result<BTreeMap<String, String>, String> {
    let find = |name: &str| keys.iter().find(|k| k.name == name);
    let mut parsed: BTreeMap<String, String> = BTreeMap::new();
    let mut default_key_used: Option<&str> = None;
    for part in data.split(',') {
        if part.trim().is_empty() {
            continue;
        }
        if let Some((key, value)) = split_key_value(part) {
            if parsed.contains_key(key) {
                return Err(format!(
                    "duplicate key in comma-separated list property: {key}\n"
                ));
            }
            let mut key = key.to_string();
            let mut rule = find(&key);
            if let Some(aliased) = rule.and_then(|r| r.alias) {
                if let Some(key_alias) = rule.and_then(|r| r.key_alias) {
                    if parsed.contains_key(key_alias) {
                        return Err(format!("key alias '{key_alias}' is already defined\n"));
                    }
                    parsed.insert(key_alias.to_string(), key.clone());
                }
                key = aliased.to_string();
                rule = find(aliased);
            }
            let Some(rule) = rule else {
                return Err(format!(
                    "invalid key in comma-separated list property: {key}\n"
                ));
            };
            let value = if rule.ty == ParamType::Boolean {
                parse_boolean(value).map_or_else(
                    || value.to_string(),
                    |b| if b { "1" } else { "0" }.to_string(),
                )
            } else {
                value.to_string()
            };
            parsed.insert(key, value);
        } else if !part.contains('=') {
            if let Some(default_key) = default_key_used {
                return Err(format!(
                    "duplicate key in comma-separated list property: {default_key}\n"
                ));
            }
            let Some(rule) = keys.iter().find(|k| k.default_key) else {
                return Err("value without key, but schema does not define a default key\n".into());
            };
            default_key_used = Some(rule.name);
            // Perl tests truthiness: an earlier explicit "0" or "" is overwritten.
            match parsed.get(rule.name) {
                Some(existing) if !(existing.is_empty() || existing == "0") => {
                    return Err(format!(
                        "duplicate key in comma-separated list property: {}\n",
                        rule.name
                    ));
                }
                _ => {
                    parsed.insert(rule.name.to_string(), part.to_string());
                }
            }
        } else {
            return Err("missing key in comma-separated list property\n".into());
        }
    }

    let mut errors = BTreeMap::new();
    for rule in keys {
        let sub_path = if path.is_empty() {
            rule.name.to_string()
        } else {
            format!("{path}.{}", rule.name)
        };
        let value = parsed.get(rule.name).map(|v| Scalar::Text(v.clone()));
        check_prop(value.as_ref(), rule, &sub_path, &mut errors);
    }
    for key in parsed.keys() {
        let sub_path = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match find(key) {
            Some(rule) => {
                if let Some(required) = rule.requires
                    && !parsed.contains_key(required)
                {
                    let required_path = if path.is_empty() {
                        required.to_string()
                    } else {
                        format!("{path}.{required}")
                    };
                    let message = format!("missing property - '{sub_path}' requires this property");
                    add_error(&mut errors, &required_path, message);
                }
            }
            None => add_error(
                &mut errors,
                &sub_path,
                "property is not defined in schema and the schema does not allow additional \
                    properties"
                    .into(),
            ),
        }
    }
    if errors.is_empty() {
        return Ok(parsed);
    }
    // PVE::Exception stringify: the message, then one "key: error" line per error
    // (Perl hash order; we sort for stable output).
    let mut message = String::from("format error\n");
    for (key, error) in errors {
        message.push_str(&format!("{key}: {error}\n"));
    }
    Err(message)
}

/// Perl `m/^([^=]+)=(.+)$/` on one comma-separated part.
fn split_key_value(part: &str) -> Option<(&str, &str)> {
    let (key, value) = part.split_once('=')?;
    let value = value.strip_suffix('\n').unwrap_or(value);
    // `.` does not match a newline.
    (!key.is_empty() && !value.is_empty() && !value.contains('\n')).then_some((key, value))
}

/// pve-common `parse_boolean`.
pub(crate) fn parse_boolean(value: &str) -> Option<bool> {
    let v = value
        .strip_suffix('\n')
        .unwrap_or(value)
        .to_ascii_lowercase();
    match v.as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_number_predicates() {
        for yes in ["1", "+1", "-12", "1.5", "1.", ".5", "1e3", "1.5E-2"] {
            assert!(is_number(yes), "{yes}");
        }
        for no in ["", "abc", "1.2.3", ".", "e5", "1e", "0x10"] {
            assert!(!is_number(no), "{no}");
        }
        assert!(is_integer("-7"));
        assert!(!is_integer("7.0"));
        assert!(!is_integer("seven"));
    }
}
