//! The `DynamicValue` wire formats: msgpack (Terraform's default, and what
//! we always answer in) and JSON (what Terraform may send, e.g. raw state).
//!
//! Decoding is type-directed: the schema's [`Type`] says how to read every
//! byte, as in Terraform's own codec. Null is msgpack nil; unknown is any
//! msgpack extension value (we emit `d4 00 00`, Terraform's plain unknown;
//! refined unknowns, extension 12, are read and their refinements dropped).

use std::collections::BTreeMap;
use std::fmt;

use crate::diag::{AttributePath, PathStep};
use crate::proto::tfplugin6 as pb;
use crate::value::{Number, Type, Value};

/// A value that does not match its type, or bytes that are not a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodecError {
    message: String,
    path: AttributePath,
}

impl CodecError {
    pub(crate) fn new(message: impl Into<String>) -> CodecError {
        CodecError {
            message: message.into(),
            path: AttributePath::root(),
        }
    }

    fn at(mut self, step: PathStep) -> CodecError {
        self.path.prepend(step);
        self
    }

    /// Where in the value the problem is.
    pub fn path(&self) -> &AttributePath {
        &self.path
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_root() {
            f.write_str(&self.message)
        } else {
            write!(f, "at {}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for CodecError {}

/// Decodes a `DynamicValue`: msgpack when present, else JSON; both empty is null.
pub fn decode_dynamic_value(value: &pb::DynamicValue, ty: &Type) -> Result<Value, CodecError> {
    if !value.msgpack.is_empty() {
        decode_msgpack(&value.msgpack, ty)
    } else if !value.json.is_empty() {
        decode_json(&value.json, ty)
    } else {
        Ok(Value::Null)
    }
}

/// Encodes a value as a msgpack `DynamicValue`.
pub fn encode_dynamic_value(value: &Value, ty: &Type) -> Result<pb::DynamicValue, CodecError> {
    Ok(pb::DynamicValue {
        msgpack: encode_msgpack(value, ty)?,
        json: Vec::new(),
    })
}

// ---------------------------------------------------------------------------
// msgpack encoding
// ---------------------------------------------------------------------------

/// Encodes `value` as msgpack for `ty`. Objects are written with every
/// attribute of their type (absent ones as nil), as Terraform requires.
pub fn encode_msgpack(value: &Value, ty: &Type) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(64);
    write_value(&mut out, value, ty)?;
    Ok(out)
}

/// Terraform's encoding of a wholly unknown value (fixext1, type 0, one zero byte).
pub const UNKNOWN_MSGPACK: [u8; 3] = [0xd4, 0x00, 0x00];

fn write_value(out: &mut Vec<u8>, value: &Value, ty: &Type) -> Result<(), CodecError> {
    if *ty == Type::Dynamic {
        return match value {
            Value::Null => {
                out.push(0xc0);
                Ok(())
            }
            Value::Unknown => {
                out.extend_from_slice(&UNKNOWN_MSGPACK);
                Ok(())
            }
            Value::Dynamic(concrete, inner) => write_dynamic(out, inner, concrete),
            other => write_dynamic(out, other, &other.infer_type()),
        };
    }
    let mismatch = || {
        CodecError::new(format!(
            "a {} value cannot be encoded as {ty}",
            value_kind(value)
        ))
    };
    match (value, ty) {
        (Value::Null, _) => out.push(0xc0),
        (Value::Unknown, _) => out.extend_from_slice(&UNKNOWN_MSGPACK),
        (Value::Dynamic(_, inner), _) => write_value(out, inner, ty)?,
        (Value::String(text), Type::String) => write_str(out, text),
        (Value::Bool(flag), Type::Bool) => out.push(if *flag { 0xc3 } else { 0xc2 }),
        (Value::Number(number), Type::Number) => match number {
            Number::Int(int) => write_int(out, *int),
            Number::Float(float) => {
                out.push(0xcb);
                out.extend_from_slice(&float.to_be_bytes());
            }
            // Terraform reads a string in a number slot as exact decimal text.
            Number::Decimal(text) => write_str(out, text),
        },
        (Value::List(items) | Value::Set(items), Type::List(element) | Type::Set(element)) => {
            write_len(out, items.len(), 0x90, 0xdc)?;
            for (index, item) in items.iter().enumerate() {
                write_value(out, item, element).map_err(|e| e.at(PathStep::Index(index as i64)))?;
            }
        }
        (Value::Tuple(items) | Value::List(items), Type::Tuple(elements)) => {
            if items.len() != elements.len() {
                return Err(CodecError::new(format!(
                    "tuple has {} elements, its type {}",
                    items.len(),
                    elements.len()
                )));
            }
            write_len(out, items.len(), 0x90, 0xdc)?;
            for (index, (item, element)) in items.iter().zip(elements).enumerate() {
                write_value(out, item, element).map_err(|e| e.at(PathStep::Index(index as i64)))?;
            }
        }
        (Value::Map(items) | Value::Object(items), Type::Map(element)) => {
            write_len(out, items.len(), 0x80, 0xde)?;
            for (key, item) in items {
                write_str(out, key);
                write_value(out, item, element).map_err(|e| e.at(PathStep::Key(key.clone())))?;
            }
        }
        (Value::Object(items) | Value::Map(items), Type::Object(attributes)) => {
            if let Some(extra) = items.keys().find(|name| !attributes.contains_key(*name)) {
                return Err(CodecError::new(format!(
                    "attribute {extra:?} is not in the schema"
                )));
            }
            write_len(out, attributes.len(), 0x80, 0xde)?;
            for (name, attribute_type) in attributes {
                write_str(out, name);
                let item = items.get(name).unwrap_or(&Value::Null);
                write_value(out, item, attribute_type)
                    .map_err(|e| e.at(PathStep::Attribute(name.clone())))?;
            }
        }
        _ => return Err(mismatch()),
    }
    Ok(())
}

fn write_dynamic(out: &mut Vec<u8>, value: &Value, ty: &Type) -> Result<(), CodecError> {
    out.push(0x92);
    let type_json = ty.to_json().to_string();
    write_bin(out, type_json.as_bytes());
    write_value(out, value, ty)
}

fn value_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Unknown => "unknown",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::List(_) => "list",
        Value::Set(_) => "set",
        Value::Tuple(_) => "tuple",
        Value::Map(_) => "map",
        Value::Object(_) => "object",
        Value::Dynamic(..) => "dynamic",
    }
}

fn write_int(out: &mut Vec<u8>, value: i64) {
    match value {
        0..=0x7f => out.push(value as u8),
        -32..=-1 => out.push(value as i8 as u8),
        0x80..=0xff => out.extend_from_slice(&[0xcc, value as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(value as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(value as u32).to_be_bytes());
        }
        -128..=-33 => out.extend_from_slice(&[0xd0, value as i8 as u8]),
        -32768..=-129 => {
            out.push(0xd1);
            out.extend_from_slice(&(value as i16).to_be_bytes());
        }
        -2_147_483_648..=-32769 => {
            out.push(0xd2);
            out.extend_from_slice(&(value as i32).to_be_bytes());
        }
        _ if value > 0 => {
            out.push(0xcf);
            out.extend_from_slice(&(value as u64).to_be_bytes());
        }
        _ => {
            out.push(0xd3);
            out.extend_from_slice(&value.to_be_bytes());
        }
    }
}

fn write_str(out: &mut Vec<u8>, text: &str) {
    let len = text.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(text.as_bytes());
}

fn write_bin(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = bytes.len();
    if len <= 0xff {
        out.extend_from_slice(&[0xc4, len as u8]);
    } else if len <= 0xffff {
        out.push(0xc5);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xc6);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(bytes);
}

/// Array or map header: `fix` marker for < 16 entries, else the 16/32-bit form
/// (`wide16`, and `wide16 + 1` for 32 bits).
fn write_len(out: &mut Vec<u8>, len: usize, fix: u8, wide16: u8) -> Result<(), CodecError> {
    if len < 16 {
        out.push(fix | len as u8);
    } else if len <= 0xffff {
        out.push(wide16);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        let len = u32::try_from(len).map_err(|_| CodecError::new("collection too large"))?;
        out.push(wide16 + 1);
        out.extend_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// msgpack decoding
// ---------------------------------------------------------------------------

/// Decodes msgpack bytes of type `ty`. Trailing bytes are an error.
pub fn decode_msgpack(bytes: &[u8], ty: &Type) -> Result<Value, CodecError> {
    let mut reader = Reader { bytes, position: 0 };
    let value = reader.value(ty)?;
    if reader.position != bytes.len() {
        return Err(CodecError::new(format!(
            "{} trailing bytes after the value",
            bytes.len() - reader.position
        )));
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

/// What a msgpack header announces.
enum Item<'a> {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(&'a [u8]),
    Bin(&'a [u8]),
    Array(usize),
    Map(usize),
    Ext,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], CodecError> {
        let end = self
            .position
            .checked_add(len)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| CodecError::new("unexpected end of msgpack data"))?;
        let slice = &self.bytes[self.position..end];
        self.position = end;
        Ok(slice)
    }

    fn byte(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    fn uint(&mut self, width: usize) -> Result<u64, CodecError> {
        let raw = self.take(width)?;
        Ok(raw.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn sint(&mut self, width: usize) -> Result<i64, CodecError> {
        let raw = self.uint(width)?;
        let shift = 64 - 8 * width as u32;
        Ok(((raw << shift) as i64) >> shift)
    }

    fn item(&mut self) -> Result<Item<'a>, CodecError> {
        let marker = self.byte()?;
        Ok(match marker {
            0x00..=0x7f => Item::Int(i128::from(marker)),
            0x80..=0x8f => Item::Map(usize::from(marker & 0x0f)),
            0x90..=0x9f => Item::Array(usize::from(marker & 0x0f)),
            0xa0..=0xbf => Item::Str(self.take(usize::from(marker & 0x1f))?),
            0xc0 => Item::Nil,
            0xc2 => Item::Bool(false),
            0xc3 => Item::Bool(true),
            0xc4..=0xc6 => {
                let len = self.uint(1 << (marker - 0xc4))? as usize;
                Item::Bin(self.take(len)?)
            }
            0xc7..=0xc9 => {
                let len = self.uint(1 << (marker - 0xc7))? as usize;
                self.take(1 + len)?;
                Item::Ext
            }
            0xca => Item::Float(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => Item::Float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => Item::Int(i128::from(self.uint(1 << (marker - 0xcc))?)),
            0xd0..=0xd3 => Item::Int(i128::from(self.sint(1 << (marker - 0xd0))?)),
            0xd4..=0xd8 => {
                self.take(1 + (1 << (marker - 0xd4)))?;
                Item::Ext
            }
            0xd9..=0xdb => {
                let len = self.uint(1 << (marker - 0xd9))? as usize;
                Item::Str(self.take(len)?)
            }
            0xdc | 0xdd => Item::Array(self.uint(2 << (marker - 0xdc))? as usize),
            0xde | 0xdf => Item::Map(self.uint(2 << (marker - 0xde))? as usize),
            0xe0..=0xff => Item::Int(i128::from(marker as i8)),
            0xc1 => return Err(CodecError::new("invalid msgpack marker 0xc1")),
        })
    }

    fn string(&mut self) -> Result<String, CodecError> {
        match self.item()? {
            Item::Str(raw) | Item::Bin(raw) => text(raw),
            _ => Err(CodecError::new("expected a string")),
        }
    }

    fn value(&mut self, ty: &Type) -> Result<Value, CodecError> {
        let item = self.item()?;
        let unexpected = |what: &str| CodecError::new(format!("expected {ty}, found {what}"));
        match item {
            Item::Nil => return Ok(Value::Null),
            Item::Ext => return Ok(Value::Unknown),
            _ => {}
        }
        match ty {
            Type::Dynamic => {
                let Item::Array(2) = item else {
                    return Err(unexpected("something other than [type, value]"));
                };
                let type_json: serde_json::Value = serde_json::from_str(&self.string()?)
                    .map_err(|e| CodecError::new(format!("invalid dynamic type: {e}")))?;
                let concrete = Type::from_json(&type_json)?;
                let inner = self.value(&concrete)?;
                Ok(Value::Dynamic(concrete, Box::new(inner)))
            }
            Type::String => match item {
                Item::Str(raw) => Ok(Value::String(text(raw)?)),
                _ => Err(unexpected("another kind")),
            },
            Type::Bool => match item {
                Item::Bool(flag) => Ok(Value::Bool(flag)),
                _ => Err(unexpected("another kind")),
            },
            Type::Number => match item {
                Item::Int(int) => Ok(Value::Number(match i64::try_from(int) {
                    Ok(int) => Number::Int(int),
                    Err(_) => Number::Decimal(int.to_string()),
                })),
                Item::Float(float) if float.is_finite() => {
                    Ok(Value::Number(Number::from_f64(float)))
                }
                Item::Str(raw) => Ok(Value::Number(Number::from_decimal(&text(raw)?)?)),
                _ => Err(unexpected("another kind")),
            },
            Type::List(element) | Type::Set(element) => {
                let Item::Array(len) = item else {
                    return Err(unexpected("another kind"));
                };
                let mut items = Vec::with_capacity(len.min(1024));
                for index in 0..len {
                    items.push(
                        self.value(element)
                            .map_err(|e| e.at(PathStep::Index(index as i64)))?,
                    );
                }
                Ok(if matches!(ty, Type::Set(_)) {
                    Value::Set(items)
                } else {
                    Value::List(items)
                })
            }
            Type::Tuple(elements) => {
                let Item::Array(len) = item else {
                    return Err(unexpected("another kind"));
                };
                if len != elements.len() {
                    return Err(unexpected("a tuple of another length"));
                }
                let mut items = Vec::with_capacity(len);
                for (index, element) in elements.iter().enumerate() {
                    items.push(
                        self.value(element)
                            .map_err(|e| e.at(PathStep::Index(index as i64)))?,
                    );
                }
                Ok(Value::Tuple(items))
            }
            Type::Map(element) => {
                let Item::Map(len) = item else {
                    return Err(unexpected("another kind"));
                };
                let mut items = BTreeMap::new();
                for _ in 0..len {
                    let key = self.string()?;
                    let value = self
                        .value(element)
                        .map_err(|e| e.at(PathStep::Key(key.clone())))?;
                    items.insert(key, value);
                }
                Ok(Value::Map(items))
            }
            Type::Object(attributes) => {
                let Item::Map(len) = item else {
                    return Err(unexpected("another kind"));
                };
                let mut items = BTreeMap::new();
                for _ in 0..len {
                    let name = self.string()?;
                    let Some(attribute_type) = attributes.get(&name) else {
                        return Err(CodecError::new(format!(
                            "attribute {name:?} is not in the schema"
                        )));
                    };
                    let value = self
                        .value(attribute_type)
                        .map_err(|e| e.at(PathStep::Attribute(name.clone())))?;
                    items.insert(name, value);
                }
                fill_missing(&mut items, attributes);
                Ok(Value::Object(items))
            }
        }
    }
}

fn text(raw: &[u8]) -> Result<String, CodecError> {
    String::from_utf8(raw.to_vec()).map_err(|_| CodecError::new("string is not valid UTF-8"))
}

fn fill_missing(items: &mut BTreeMap<String, Value>, attributes: &BTreeMap<String, Type>) {
    for name in attributes.keys() {
        items.entry(name.clone()).or_insert(Value::Null);
    }
}

// ---------------------------------------------------------------------------
// JSON decoding
// ---------------------------------------------------------------------------

/// Decodes JSON of type `ty` (JSON has no unknowns). Object attributes that
/// are not in the type are ignored: stored state written by an older schema
/// may still carry them.
pub fn decode_json(bytes: &[u8], ty: &Type) -> Result<Value, CodecError> {
    let json: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| CodecError::new(format!("invalid JSON: {e}")))?;
    json_value(&json, ty)
}

/// Type-directed conversion of an already parsed JSON value.
pub fn json_value(json: &serde_json::Value, ty: &Type) -> Result<Value, CodecError> {
    use serde_json::Value as J;
    // Name the JSON kind, never the value: it may be a secret from stored state.
    let unexpected = || CodecError::new(format!("expected {ty}, found {}", json_kind(json)));
    if json.is_null() {
        return Ok(Value::Null);
    }
    match ty {
        Type::Dynamic => {
            let (Some(type_json), Some(inner)) = (json.get("type"), json.get("value")) else {
                return Err(CodecError::new(
                    "a dynamic value must be an object with \"type\" and \"value\"",
                ));
            };
            let concrete = Type::from_json(type_json)?;
            let inner = json_value(inner, &concrete)?;
            Ok(Value::Dynamic(concrete, Box::new(inner)))
        }
        // Terraform converts primitive JSON tokens to strings in string slots.
        Type::String => match json {
            J::String(text) => Ok(Value::String(text.clone())),
            J::Number(number) => Ok(Value::String(number.to_string())),
            J::Bool(flag) => Ok(Value::String(flag.to_string())),
            _ => Err(unexpected()),
        },
        Type::Bool => match json {
            J::Bool(flag) => Ok(Value::Bool(*flag)),
            J::String(text) if text == "true" => Ok(Value::Bool(true)),
            J::String(text) if text == "false" => Ok(Value::Bool(false)),
            _ => Err(unexpected()),
        },
        Type::Number => match json {
            J::Number(number) => Ok(Value::Number(if let Some(int) = number.as_i64() {
                Number::Int(int)
            } else if let Some(unsigned) = number.as_u64() {
                Number::Decimal(unsigned.to_string())
            } else {
                Number::from_f64(number.as_f64().ok_or_else(unexpected)?)
            })),
            J::String(text) => Ok(Value::Number(Number::from_decimal(text)?)),
            _ => Err(unexpected()),
        },
        Type::List(element) | Type::Set(element) => {
            let items = json.as_array().ok_or_else(unexpected)?;
            let items = items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    json_value(item, element).map_err(|e| e.at(PathStep::Index(index as i64)))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(if matches!(ty, Type::Set(_)) {
                Value::Set(items)
            } else {
                Value::List(items)
            })
        }
        Type::Tuple(elements) => {
            let items = json.as_array().ok_or_else(unexpected)?;
            if items.len() != elements.len() {
                return Err(unexpected());
            }
            let items = items
                .iter()
                .zip(elements)
                .enumerate()
                .map(|(index, (item, element))| {
                    json_value(item, element).map_err(|e| e.at(PathStep::Index(index as i64)))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Value::Tuple(items))
        }
        Type::Map(element) => {
            let entries = json.as_object().ok_or_else(unexpected)?;
            let mut items = BTreeMap::new();
            for (key, item) in entries {
                let value =
                    json_value(item, element).map_err(|e| e.at(PathStep::Key(key.clone())))?;
                items.insert(key.clone(), value);
            }
            Ok(Value::Map(items))
        }
        Type::Object(attributes) => {
            let entries = json.as_object().ok_or_else(unexpected)?;
            let mut items = BTreeMap::new();
            for (name, attribute_type) in attributes {
                let value = match entries.get(name) {
                    Some(item) => json_value(item, attribute_type)
                        .map_err(|e| e.at(PathStep::Attribute(name.clone())))?,
                    None => Value::Null,
                };
                items.insert(name.clone(), value);
            }
            Ok(Value::Object(items))
        }
    }
}

fn json_kind(json: &serde_json::Value) -> &'static str {
    use serde_json::Value as J;
    match json {
        J::Null => "null",
        J::Bool(_) => "a bool",
        J::Number(_) => "a number",
        J::String(_) => "a string",
        J::Array(_) => "an array",
        J::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm_type() -> Type {
        Type::object([
            ("id", Type::String),
            ("cores", Type::Number),
            ("running", Type::Bool),
            ("tags", Type::set(Type::String)),
            ("labels", Type::map(Type::String)),
            (
                "disks",
                Type::list(Type::object([
                    ("size", Type::Number),
                    ("name", Type::String),
                ])),
            ),
            ("extra", Type::Dynamic),
            ("pair", Type::Tuple(vec![Type::String, Type::Number])),
        ])
    }

    fn sample() -> Value {
        Value::object([
            ("id", Value::Unknown),
            ("cores", Value::from(4)),
            ("running", Value::Null),
            ("tags", Value::Set(vec![Value::from("a"), Value::Unknown])),
            (
                "labels",
                Value::Map([("k".to_owned(), Value::from("v"))].into()),
            ),
            (
                "disks",
                Value::List(vec![
                    Value::object([("size", Value::from(1.5)), ("name", Value::Unknown)]),
                    Value::object([("size", Value::Null), ("name", Value::from("b"))]),
                ]),
            ),
            (
                "extra",
                Value::Dynamic(Type::list(Type::String), Box::new(Value::List(vec![]))),
            ),
            (
                "pair",
                Value::Tuple(vec![Value::from("x"), Value::from(-200)]),
            ),
        ])
    }

    #[test]
    fn msgpack_round_trip_with_nulls_and_unknowns_at_every_depth() {
        let ty = vm_type();
        let bytes = encode_msgpack(&sample(), &ty).unwrap();
        assert_eq!(decode_msgpack(&bytes, &ty).unwrap(), sample());
    }

    #[test]
    fn golden_bytes_match_terraforms_encoding() {
        let ty = Type::object([("a", Type::String), ("b", Type::Number), ("c", Type::Bool)]);
        let value = Value::object([
            ("a", Value::from("hi")),
            ("b", Value::Unknown),
            ("c", Value::Null),
        ]);
        // {"a":"hi","b":<unknown>,"c":nil} with attributes in name order.
        let expected = [
            0x83, 0xa1, b'a', 0xa2, b'h', b'i', 0xa1, b'b', 0xd4, 0x00, 0x00, 0xa1, b'c', 0xc0,
        ];
        assert_eq!(encode_msgpack(&value, &ty).unwrap(), expected);
    }

    #[test]
    fn golden_numbers() {
        let cases: [(Value, &[u8]); 8] = [
            (Value::from(0), &[0x00]),
            (Value::from(127), &[0x7f]),
            (Value::from(128), &[0xcc, 0x80]),
            (Value::from(-1), &[0xff]),
            (Value::from(-33), &[0xd0, 0xdf]),
            (Value::from(70000), &[0xce, 0x00, 0x01, 0x11, 0x70]),
            (
                Value::from(0.5),
                &[0xcb, 0x3f, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
            ),
            (
                Value::Number(Number::Decimal("1e400".into())),
                &[0xa5, b'1', b'e', b'4', b'0', b'0'],
            ),
        ];
        for (value, bytes) in cases {
            assert_eq!(encode_msgpack(&value, &Type::Number).unwrap(), bytes);
            assert_eq!(
                decode_msgpack(bytes, &Type::Number).unwrap(),
                value,
                "{bytes:x?}"
            );
        }
    }

    #[test]
    fn every_integer_width_round_trips() {
        for int in [
            i64::MIN,
            -2_147_483_649,
            -2_147_483_648,
            -32769,
            -32768,
            -129,
            -128,
            -32,
            255,
            256,
            65535,
            65536,
            4_294_967_295,
            4_294_967_296,
            i64::MAX,
        ] {
            let bytes = encode_msgpack(&Value::from(int), &Type::Number).unwrap();
            assert_eq!(
                decode_msgpack(&bytes, &Type::Number).unwrap().as_i64(),
                Some(int)
            );
        }
    }

    #[test]
    fn refined_unknowns_and_other_extensions_decode_as_unknown() {
        // ext 12 with a refinement map {1: false} (definitely not null).
        let refined = [0xc7, 0x03, 0x0c, 0x81, 0x01, 0xc2];
        assert_eq!(
            decode_msgpack(&refined, &Type::String).unwrap(),
            Value::Unknown
        );
        assert_eq!(
            decode_msgpack(&[0xd4, 0x00, 0x00], &Type::list(Type::String)).unwrap(),
            Value::Unknown
        );
        assert_eq!(
            decode_msgpack(&[0xc7, 0x00, 0x00], &Type::Dynamic).unwrap(),
            Value::Unknown
        );
    }

    #[test]
    fn dynamic_values_carry_their_type() {
        // [bin("\"string\""), "x"] as go-cty writes it.
        let mut bytes = vec![0x92, 0xc4, 0x08];
        bytes.extend_from_slice(b"\"string\"");
        bytes.extend_from_slice(&[0xa1, b'x']);
        let value = decode_msgpack(&bytes, &Type::Dynamic).unwrap();
        assert_eq!(
            value,
            Value::Dynamic(Type::String, Box::new(Value::from("x")))
        );
        assert_eq!(value.as_str(), Some("x"));
        assert_eq!(encode_msgpack(&value, &Type::Dynamic).unwrap(), bytes);
        // A plain value in a dynamic slot gets its inferred type.
        assert_eq!(
            encode_msgpack(&Value::from("x"), &Type::Dynamic).unwrap(),
            bytes
        );
    }

    #[test]
    fn type_mismatches_and_garbage_are_errors_with_paths() {
        let ty = Type::object([("a", Type::list(Type::Number))]);
        let bad = Value::object([("a", Value::List(vec![Value::from("x")]))]);
        let err = encode_msgpack(&bad, &ty).unwrap_err();
        assert_eq!(err.path(), &AttributePath::root().attr("a").index(0));
        assert!(err.to_string().contains("a[0]"), "{err}");
        assert!(encode_msgpack(&Value::object([("zz", Value::Null)]), &ty).is_err());
        assert!(decode_msgpack(&[0x81, 0xa1, b'z', 0xc0], &ty).is_err());
        assert!(decode_msgpack(&[0xa5, b'x'], &Type::String).is_err());
        assert!(decode_msgpack(&[0xc0, 0xc0], &Type::String).is_err());
        assert!(decode_msgpack(&[0xc1], &Type::String).is_err());
    }

    #[test]
    fn truncated_or_corrupted_input_is_an_error_never_a_panic() {
        let ty = vm_type();
        let bytes = encode_msgpack(&sample(), &ty).unwrap();
        for len in 0..bytes.len() {
            assert!(decode_msgpack(&bytes[..len], &ty).is_err(), "prefix {len}");
        }
        // Deterministic pseudo-random corruption (xorshift), every byte position.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..4000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut corrupted = bytes.clone();
            let position = round % corrupted.len();
            corrupted[position] = (state >> 24) as u8;
            let _ = decode_msgpack(&corrupted, &ty);
        }
    }

    #[test]
    fn missing_object_attributes_decode_as_null() {
        let ty = Type::object([("a", Type::String), ("b", Type::String)]);
        let value = decode_msgpack(&[0x81, 0xa1, b'a', 0xa1, b'x'], &ty).unwrap();
        assert_eq!(
            value,
            Value::object([("a", Value::from("x")), ("b", Value::Null)])
        );
    }

    #[test]
    fn json_decoding_follows_the_type() {
        let json = br#"{
            "id": "101", "cores": 4, "running": true, "tags": ["a","b"],
            "labels": {"k": "v"}, "disks": [{"size": "20", "name": "d"}],
            "extra": {"type": ["list","string"], "value": ["q"]},
            "pair": ["x", 2.5], "removed_attribute": 1
        }"#;
        let value = decode_json(json, &vm_type()).unwrap();
        assert_eq!(value.get_attr("id").as_str(), Some("101"));
        assert_eq!(value.get_attr("cores").as_i64(), Some(4));
        assert_eq!(value.get_attr("running").as_bool(), Some(true));
        assert_eq!(
            value.get_attr("tags"),
            &Value::Set(vec!["a".into(), "b".into()])
        );
        assert_eq!(value.get_attr("labels").get_attr("k").as_str(), Some("v"));
        assert_eq!(
            value
                .get_attr("disks")
                .get_index(0)
                .get_attr("size")
                .as_i64(),
            Some(20)
        );
        assert_eq!(value.get_attr("extra").get_index(0).as_str(), Some("q"));
        assert_eq!(value.get_attr("pair").get_index(1).as_f64(), Some(2.5));
        // Decoded JSON re-encodes as msgpack for the same type.
        let bytes = encode_msgpack(&value, &vm_type()).unwrap();
        assert_eq!(decode_msgpack(&bytes, &vm_type()).unwrap(), value);
    }

    #[test]
    fn json_errors_name_the_attribute() {
        let ty = Type::object([("cores", Type::Number)]);
        let err = decode_json(br#"{"cores": "many"}"#, &ty).unwrap_err();
        assert_eq!(err.path(), &AttributePath::from("cores"));
        let err = decode_json(br#"{"cores": ["s3cr3t"]}"#, &ty).unwrap_err();
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }

    #[test]
    fn dynamic_value_prefers_msgpack_and_treats_empty_as_null() {
        let both = pb::DynamicValue {
            msgpack: vec![0xa1, b'm'],
            json: br#""j""#.to_vec(),
        };
        assert_eq!(
            decode_dynamic_value(&both, &Type::String).unwrap().as_str(),
            Some("m")
        );
        let json_only = pb::DynamicValue {
            msgpack: vec![],
            json: br#""j""#.to_vec(),
        };
        assert_eq!(
            decode_dynamic_value(&json_only, &Type::String)
                .unwrap()
                .as_str(),
            Some("j")
        );
        assert!(
            decode_dynamic_value(&pb::DynamicValue::default(), &Type::String)
                .unwrap()
                .is_null()
        );
    }
}
