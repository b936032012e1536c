//! Terraform values and types, independent of their wire encoding.

use std::collections::BTreeMap;
use std::fmt;

/// A Terraform type (a cty type), as written in schemas.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// `string`
    String,
    /// `number` (arbitrary precision on the wire)
    Number,
    /// `bool`
    Bool,
    /// `list(T)`
    List(Box<Type>),
    /// `set(T)`
    Set(Box<Type>),
    /// `map(T)`
    Map(Box<Type>),
    /// `object({...})`: every attribute is always present in values.
    Object(BTreeMap<String, Type>),
    /// `tuple([...])`
    Tuple(Vec<Type>),
    /// `any` in HCL: the concrete type travels with the value.
    Dynamic,
}

impl Type {
    /// `list(element)`
    pub fn list(element: Type) -> Type {
        Type::List(Box::new(element))
    }

    /// `set(element)`
    pub fn set(element: Type) -> Type {
        Type::Set(Box::new(element))
    }

    /// `map(element)`
    pub fn map(element: Type) -> Type {
        Type::Map(Box::new(element))
    }

    /// `object({name = type, ...})`
    pub fn object<N: Into<String>>(attributes: impl IntoIterator<Item = (N, Type)>) -> Type {
        Type::Object(
            attributes
                .into_iter()
                .map(|(name, ty)| (name.into(), ty))
                .collect(),
        )
    }

    /// The JSON type constraint Terraform expects in `Schema.Attribute.type`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Type::String => J::from("string"),
            Type::Number => J::from("number"),
            Type::Bool => J::from("bool"),
            Type::Dynamic => J::from("dynamic"),
            Type::List(element) => J::Array(vec![J::from("list"), element.to_json()]),
            Type::Set(element) => J::Array(vec![J::from("set"), element.to_json()]),
            Type::Map(element) => J::Array(vec![J::from("map"), element.to_json()]),
            Type::Object(attributes) => J::Array(vec![
                J::from("object"),
                J::Object(
                    attributes
                        .iter()
                        .map(|(name, ty)| (name.clone(), ty.to_json()))
                        .collect(),
                ),
            ]),
            Type::Tuple(elements) => J::Array(vec![
                J::from("tuple"),
                J::Array(elements.iter().map(Type::to_json).collect()),
            ]),
        }
    }

    /// Parses a JSON type constraint (the inverse of [`Type::to_json`]).
    /// The optional-attributes list of an object type is accepted and ignored.
    pub fn from_json(json: &serde_json::Value) -> Result<Type, crate::CodecError> {
        use serde_json::Value as J;
        let invalid = || crate::CodecError::new(format!("invalid type constraint {json}"));
        match json {
            J::String(name) => match name.as_str() {
                "string" => Ok(Type::String),
                "number" => Ok(Type::Number),
                "bool" => Ok(Type::Bool),
                "dynamic" => Ok(Type::Dynamic),
                _ => Err(invalid()),
            },
            J::Array(parts) if parts.len() >= 2 => {
                let kind = parts[0].as_str().ok_or_else(invalid)?;
                match kind {
                    "list" => Ok(Type::list(Type::from_json(&parts[1])?)),
                    "set" => Ok(Type::set(Type::from_json(&parts[1])?)),
                    "map" => Ok(Type::map(Type::from_json(&parts[1])?)),
                    "object" => {
                        let attributes = parts[1].as_object().ok_or_else(invalid)?;
                        let mut out = BTreeMap::new();
                        for (name, ty) in attributes {
                            out.insert(name.clone(), Type::from_json(ty)?);
                        }
                        Ok(Type::Object(out))
                    }
                    "tuple" => {
                        let elements = parts[1].as_array().ok_or_else(invalid)?;
                        Ok(Type::Tuple(
                            elements
                                .iter()
                                .map(Type::from_json)
                                .collect::<Result<_, _>>()?,
                        ))
                    }
                    _ => Err(invalid()),
                }
            }
            _ => Err(invalid()),
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

/// A number as Terraform sends it: an integer, a float, or a decimal string
/// for values neither can hold exactly.
#[derive(Clone, Debug)]
pub enum Number {
    /// An integer that fits in `i64`.
    Int(i64),
    /// A finite float with a fractional part (whole floats become `Int`).
    Float(f64),
    /// Decimal text of a number too large or too precise for the other forms.
    Decimal(String),
}

impl Number {
    /// A float, normalised to `Int` when it is whole and fits.
    pub fn from_f64(value: f64) -> Number {
        if value.fract() == 0.0 && (-9.2e18..=9.2e18).contains(&value) {
            Number::Int(value as i64)
        } else {
            Number::Float(value)
        }
    }

    /// Parses decimal text, keeping the exact text when no native form holds it.
    pub fn from_decimal(text: &str) -> Result<Number, crate::CodecError> {
        let trimmed = text.trim();
        if let Ok(int) = trimmed.parse::<i64>() {
            return Ok(Number::Int(int));
        }
        // Decimal syntax only (no "inf"/"nan"); the text itself stays out of
        // the error, as it may be a misplaced secret.
        let not_a_number =
            || crate::CodecError::new("a string in a number slot is not a decimal number");
        let decimal_syntax = trimmed.chars().any(|c| c.is_ascii_digit())
            && trimmed
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '+' | '-' | '.' | 'e' | 'E'));
        if !decimal_syntax {
            return Err(not_a_number());
        }
        let float: f64 = trimmed.parse().map_err(|_| not_a_number())?;
        if float.is_infinite() {
            // Valid decimal syntax beyond f64's range: keep it exactly.
            return Ok(Number::Decimal(trimmed.to_owned()));
        }
        // Up to 15 significant digits survive a round trip through f64;
        // keep longer text exactly (e.g. 2^70 + 1).
        let mantissa = trimmed.split(['e', 'E']).next().unwrap_or(trimmed);
        let significant = mantissa
            .chars()
            .filter(char::is_ascii_digit)
            .skip_while(|digit| *digit == '0')
            .count();
        if significant <= 15 {
            Ok(Number::from_f64(float))
        } else {
            Ok(Number::Decimal(trimmed.to_owned()))
        }
    }

    /// The value as `i64` when it is a whole number in range.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Number::Int(value) => Some(*value),
            Number::Float(_) => None,
            Number::Decimal(text) => text.parse().ok(),
        }
    }

    /// The value as `f64` (possibly rounded).
    pub fn as_f64(&self) -> f64 {
        match self {
            Number::Int(value) => *value as f64,
            Number::Float(value) => *value,
            Number::Decimal(text) => text.parse().unwrap_or(f64::NAN),
        }
    }
}

impl PartialEq for Number {
    fn eq(&self, other: &Number) -> bool {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => a == b,
            (Number::Float(a), Number::Float(b)) => a == b,
            (Number::Decimal(a), Number::Decimal(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Int(value) => write!(f, "{value}"),
            Number::Float(value) => write!(f, "{value}"),
            Number::Decimal(text) => f.write_str(text),
        }
    }
}

impl From<i64> for Number {
    fn from(value: i64) -> Number {
        Number::Int(value)
    }
}

impl From<f64> for Number {
    fn from(value: f64) -> Number {
        Number::from_f64(value)
    }
}

/// A Terraform value: known, null or unknown at any depth.
///
/// Values do not carry their full type; encoding and decoding are driven by
/// the schema's [`Type`]. Objects always hold every attribute of their type
/// after decoding (absent ones as [`Value::Null`]).
///
/// `Debug` shows the structure but never string contents (configuration and
/// state hold secrets such as tokens); use [`Value::as_str`] to see a string.
#[derive(Clone, PartialEq, Default)]
pub enum Value {
    /// null
    #[default]
    Null,
    /// Not known until apply. Refinements sent by Terraform are dropped,
    /// which Terraform accepts (they only narrow the range of the value).
    Unknown,
    /// bool
    Bool(bool),
    /// number
    Number(Number),
    /// string
    String(String),
    /// list
    List(Vec<Value>),
    /// set (element order is not significant to Terraform)
    Set(Vec<Value>),
    /// tuple
    Tuple(Vec<Value>),
    /// map
    Map(BTreeMap<String, Value>),
    /// object
    Object(BTreeMap<String, Value>),
    /// A value decoded from a `dynamic` slot, with the concrete type it was sent with.
    Dynamic(Type, Box<Value>),
}

static NULL: Value = Value::Null;

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("Null"),
            Value::Unknown => f.write_str("Unknown"),
            Value::Bool(flag) => write!(f, "Bool({flag})"),
            Value::Number(number) => write!(f, "Number({number})"),
            Value::String(text) => write!(f, "String(<{} bytes>)", text.len()),
            Value::List(items) => f.debug_tuple("List").field(items).finish(),
            Value::Set(items) => f.debug_tuple("Set").field(items).finish(),
            Value::Tuple(items) => f.debug_tuple("Tuple").field(items).finish(),
            Value::Map(items) => f.debug_tuple("Map").field(items).finish(),
            Value::Object(items) => f.debug_tuple("Object").field(items).finish(),
            Value::Dynamic(ty, inner) => write!(f, "Dynamic({ty}, {inner:?})"),
        }
    }
}

impl Value {
    /// A string value.
    pub fn string(value: impl Into<String>) -> Value {
        Value::String(value.into())
    }

    /// A number value.
    pub fn number(value: impl Into<Number>) -> Value {
        Value::Number(value.into())
    }

    /// An object value from `(name, value)` pairs.
    pub fn object<N: Into<String>>(attributes: impl IntoIterator<Item = (N, Value)>) -> Value {
        Value::Object(
            attributes
                .into_iter()
                .map(|(name, value)| (name.into(), value))
                .collect(),
        )
    }

    /// A null value.
    pub fn is_null(&self) -> bool {
        matches!(self.unwrapped(), Value::Null)
    }

    /// False only for a value that is itself unknown (elements may still be).
    pub fn is_known(&self) -> bool {
        !matches!(self.unwrapped(), Value::Unknown)
    }

    /// True when no unknown appears anywhere inside the value.
    pub fn is_wholly_known(&self) -> bool {
        match self {
            Value::Unknown => false,
            Value::List(items) | Value::Set(items) | Value::Tuple(items) => {
                items.iter().all(Value::is_wholly_known)
            }
            Value::Map(items) | Value::Object(items) => items.values().all(Value::is_wholly_known),
            Value::Dynamic(_, inner) => inner.is_wholly_known(),
            _ => true,
        }
    }

    /// The value with any `Dynamic` wrapper removed.
    pub fn unwrapped(&self) -> &Value {
        match self {
            Value::Dynamic(_, inner) => inner.unwrapped(),
            other => other,
        }
    }

    /// An object attribute or map element; null when absent or when `self`
    /// is not a known object/map, so chains like `v.get_attr("a").get_attr("b")`
    /// never panic.
    pub fn get_attr(&self, name: &str) -> &Value {
        match self.unwrapped() {
            Value::Object(items) | Value::Map(items) => items.get(name).unwrap_or(&NULL),
            _ => &NULL,
        }
    }

    /// A list, set or tuple element by position; null when absent.
    pub fn get_index(&self, index: usize) -> &Value {
        self.as_elements()
            .and_then(|items| items.get(index))
            .unwrap_or(&NULL)
    }

    /// Follows an attribute path; null when any step is missing.
    pub fn get_path(&self, path: &crate::AttributePath) -> &Value {
        let mut current = self;
        for step in path.steps() {
            current = match step {
                crate::PathStep::Attribute(name) | crate::PathStep::Key(name) => {
                    current.get_attr(name)
                }
                crate::PathStep::Index(index) => match usize::try_from(*index) {
                    Ok(index) => current.get_index(index),
                    Err(_) => &NULL,
                },
            };
        }
        current
    }

    /// Sets an attribute of an object (or element of a map). A null or
    /// unknown `self` becomes an object first. Returns `self` for chaining.
    pub fn set_attr(&mut self, name: impl Into<String>, value: Value) -> &mut Value {
        if let Value::Dynamic(_, inner) = self {
            inner.set_attr(name, value);
            return self;
        }
        match self {
            Value::Object(items) | Value::Map(items) => {
                items.insert(name.into(), value);
            }
            _ => {
                *self = Value::object([(name.into(), value)]);
            }
        }
        self
    }

    /// The string, when this is a known string.
    pub fn as_str(&self) -> Option<&str> {
        match self.unwrapped() {
            Value::String(value) => Some(value),
            _ => None,
        }
    }

    /// The bool, when this is a known bool.
    pub fn as_bool(&self) -> Option<bool> {
        match self.unwrapped() {
            Value::Bool(value) => Some(*value),
            _ => None,
        }
    }

    /// The number, when this is a known number.
    pub fn as_number(&self) -> Option<&Number> {
        match self.unwrapped() {
            Value::Number(value) => Some(value),
            _ => None,
        }
    }

    /// The number as `i64`, when it is a known whole number in range.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_number().and_then(Number::as_i64)
    }

    /// The number as `f64`, when it is a known number.
    pub fn as_f64(&self) -> Option<f64> {
        self.as_number().map(Number::as_f64)
    }

    /// Elements of a known list, set or tuple.
    pub fn as_elements(&self) -> Option<&[Value]> {
        match self.unwrapped() {
            Value::List(items) | Value::Set(items) | Value::Tuple(items) => Some(items),
            _ => None,
        }
    }

    /// Entries of a known map or object.
    pub fn as_entries(&self) -> Option<&BTreeMap<String, Value>> {
        match self.unwrapped() {
            Value::Map(items) | Value::Object(items) => Some(items),
            _ => None,
        }
    }

    /// Elements of a known list/set/tuple of known strings (skips others).
    pub fn as_string_list(&self) -> Option<Vec<&str>> {
        self.as_elements()
            .map(|items| items.iter().filter_map(Value::as_str).collect())
    }

    /// Semantic equality: sets compare regardless of element order and
    /// numbers regardless of representation.
    pub fn same_as(&self, other: &Value) -> bool {
        match (self.unwrapped(), other.unwrapped()) {
            (Value::Set(a), Value::Set(b)) => {
                a.len() == b.len() && a.iter().all(|x| b.iter().any(|y| x.same_as(y)))
            }
            (Value::List(a), Value::List(b)) | (Value::Tuple(a), Value::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_as(y))
            }
            (Value::Map(a), Value::Map(b)) | (Value::Object(a), Value::Object(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .all(|(key, x)| b.get(key).is_some_and(|y| x.same_as(y)))
            }
            (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
            (a, b) => a == b,
        }
    }

    /// The concrete type this value would be given in a `dynamic` slot.
    /// Empty collections and nulls cannot reveal their element type and are
    /// typed `dynamic` there; wrap them in [`Value::Dynamic`] to be exact.
    pub fn infer_type(&self) -> Type {
        match self {
            Value::Null | Value::Unknown => Type::Dynamic,
            Value::Bool(_) => Type::Bool,
            Value::Number(_) => Type::Number,
            Value::String(_) => Type::String,
            Value::List(items) => Type::list(common_type(items.iter())),
            Value::Set(items) => Type::set(common_type(items.iter())),
            Value::Map(items) => Type::map(common_type(items.values())),
            Value::Tuple(items) => Type::Tuple(items.iter().map(Value::infer_type).collect()),
            Value::Object(items) => Type::Object(
                items
                    .iter()
                    .map(|(name, value)| (name.clone(), value.infer_type()))
                    .collect(),
            ),
            Value::Dynamic(ty, _) => ty.clone(),
        }
    }
}

fn common_type<'a>(mut items: impl Iterator<Item = &'a Value>) -> Type {
    items
        .find(|item| !item.is_null() && item.is_known())
        .map(Value::infer_type)
        .unwrap_or(Type::Dynamic)
}

impl From<&str> for Value {
    fn from(value: &str) -> Value {
        Value::String(value.to_owned())
    }
}

impl From<String> for Value {
    fn from(value: String) -> Value {
        Value::String(value)
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Value {
        Value::Bool(value)
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Value {
        Value::Number(Number::Int(value))
    }
}

impl From<f64> for Value {
    fn from(value: f64) -> Value {
        Value::Number(Number::from_f64(value))
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(value: Option<T>) -> Value {
        value.map_or(Value::Null, Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_json_round_trip() {
        let ty = Type::object([
            ("name", Type::String),
            ("tags", Type::set(Type::String)),
            ("disks", Type::list(Type::object([("size", Type::Number)]))),
            ("labels", Type::map(Type::Bool)),
            ("pair", Type::Tuple(vec![Type::String, Type::Dynamic])),
        ]);
        let json = ty.to_json();
        assert_eq!(
            json.to_string(),
            concat!(
                r#"["object",{"disks":["list",["object",{"size":"number"}]],"#,
                r#""labels":["map","bool"],"name":"string","#,
                r#""pair":["tuple",["string","dynamic"]],"tags":["set","string"]}]"#
            )
        );
        assert_eq!(Type::from_json(&json).unwrap(), ty);
    }

    #[test]
    fn object_type_with_optional_attributes_list_parses() {
        let json: serde_json::Value =
            serde_json::from_str(r#"["object",{"a":"string"},["a"]]"#).unwrap();
        assert_eq!(
            Type::from_json(&json).unwrap(),
            Type::object([("a", Type::String)])
        );
    }

    #[test]
    fn numbers_normalise_and_keep_precision() {
        assert_eq!(Number::from_f64(3.0), Number::Int(3));
        assert_eq!(Number::from_decimal("42").unwrap(), Number::Int(42));
        assert_eq!(Number::from_decimal("1.5").unwrap(), Number::Float(1.5));
        assert_eq!(
            Number::from_decimal("1180591620717411303425").unwrap(),
            Number::Decimal("1180591620717411303425".into())
        );
        assert!(Number::from_decimal("abc").is_err());
        assert!(Number::from_decimal("inf").is_err());
        assert!(Number::from_decimal("NaN").is_err());
        assert_eq!(
            Number::from_decimal("1e400").unwrap(),
            Number::Decimal("1e400".into())
        );
    }

    #[test]
    fn accessors_never_panic_on_missing_paths() {
        let value = Value::object([("a", Value::object([("b", Value::from("x"))]))]);
        assert_eq!(value.get_attr("a").get_attr("b").as_str(), Some("x"));
        assert!(value.get_attr("missing").get_attr("b").is_null());
        assert!(Value::Unknown.get_attr("a").is_null());
        assert!(!Value::Unknown.is_known());
        assert!(!Value::List(vec![Value::Unknown]).is_wholly_known());
        assert!(Value::List(vec![Value::Unknown]).is_known());
    }

    #[test]
    fn debug_output_hides_string_contents() {
        let value = Value::object([("api_token", Value::from("root@pam!t=s3cr3t"))]);
        let shown = format!("{value:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("api_token"), "{shown}");
    }

    #[test]
    fn sets_compare_without_order() {
        let a = Value::Set(vec![Value::from("x"), Value::from("y")]);
        let b = Value::Set(vec![Value::from("y"), Value::from("x")]);
        assert!(a.same_as(&b));
        assert_ne!(a, b);
        assert!(!a.same_as(&Value::Set(vec![Value::from("x")])));
    }
}
