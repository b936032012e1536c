//! PVE's wire quirks: form-encoded writes with `0`/`1` booleans, integers that arrive as
//! numbers or numeric strings, the `{"data":…}` envelope, and the property strings of the
//! config keys we touch (`netN`, `ide2`, the boot disk).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

/// The success envelope: `{"data": …}` plus `total` on task logs.
#[derive(Debug, Deserialize)]
pub struct Envelope<T> {
    /// The payload.
    pub data: T,
    /// Line count for task logs.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub total: Option<u64>,
}

/// PVE's error body: `{"data":null,"message":"…\n","errors":{"param":"msg"}}`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(default)]
    pub(crate) message: Option<String>,
    #[serde(default)]
    pub(crate) errors: Option<BTreeMap<String, serde_json::Value>>,
}

/// A form-encoded request body (or query string) in the order the fields were added.
///
/// `Debug` lists the keys only, because values may carry user content.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Form {
    pairs: Vec<(String, String)>,
}

impl Form {
    /// An empty form.
    pub fn new() -> Form {
        Form::default()
    }
    /// Adds a text field.
    pub fn text(mut self, key: &str, value: impl Into<String>) -> Form {
        self.pairs.push((key.to_owned(), value.into()));
        self
    }
    /// Adds a text field when present.
    pub fn opt_text(self, key: &str, value: Option<impl Into<String>>) -> Form {
        match value {
            Some(v) => self.text(key, v),
            None => self,
        }
    }
    /// Adds an integer field.
    pub fn int(self, key: &str, value: impl Into<i128>) -> Form {
        self.text(key, value.into().to_string())
    }
    /// Adds a boolean as PVE wants it in forms: `0` or `1` (never `true`).
    pub fn bool(self, key: &str, value: bool) -> Form {
        self.text(key, if value { "1" } else { "0" })
    }
    /// Adds a field in place (for builders holding `&mut`).
    pub fn push(&mut self, key: &str, value: impl Into<String>) {
        self.pairs.push((key.to_owned(), value.into()));
    }
    /// The value of the last field named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
    /// All fields, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
    /// True when no field was added.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
    /// `application/x-www-form-urlencoded` text.
    pub fn encode(&self) -> String {
        let mut ser = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in &self.pairs {
            ser.append_pair(k, v);
        }
        ser.finish()
    }
}

impl fmt::Debug for Form {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.pairs.iter().map(|(k, _)| k))
            .finish()
    }
}

/// Deserializers for PVE's loosely typed JSON (use with `#[serde(deserialize_with = …)]`).
pub mod de {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    fn value_to_i128(v: &Value) -> Option<i128> {
        match v {
            Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                        .map(|f| f as i128)
                }),
            Value::String(s) => s.trim().parse().ok(),
            Value::Bool(b) => Some(i128::from(*b)),
            _ => None,
        }
    }

    /// An integer given as a JSON number or a numeric string.
    pub fn int<'de, D, T>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: TryFrom<i128>,
    {
        let v = Value::deserialize(d)?;
        value_to_i128(&v)
            .and_then(|i| T::try_from(i).ok())
            .ok_or_else(|| D::Error::custom(format!("expected an integer, got {v}")))
    }

    /// Like [`int`], with `null` or a missing key (add `#[serde(default)]`) as `None`.
    pub fn opt_int<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: TryFrom<i128>,
    {
        let v = Value::deserialize(d)?;
        if v.is_null() {
            return Ok(None);
        }
        value_to_i128(&v)
            .and_then(|i| T::try_from(i).ok())
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("expected an integer, got {v}")))
    }

    /// A float given as a number or numeric string (cpu load and the like).
    pub fn opt_float<'de, D>(d: D) -> Result<Option<f64>, D::Error>
    where
        D: Deserializer<'de>,
    {
        let v = Value::deserialize(d)?;
        match &v {
            Value::Null => Ok(None),
            Value::Number(n) => Ok(n.as_f64()),
            Value::String(s) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| D::Error::custom(format!("expected a number, got {v}"))),
            _ => Err(D::Error::custom(format!("expected a number, got {v}"))),
        }
    }

    /// A boolean given as `0`/`1` (number or string) or JSON `true`/`false`; missing = false.
    pub fn bool01<'de, D>(d: D) -> Result<bool, D::Error>
    where
        D: Deserializer<'de>,
    {
        let v = Value::deserialize(d)?;
        match &v {
            Value::Null => Ok(false),
            Value::Bool(b) => Ok(*b),
            _ => value_to_i128(&v)
                .map(|i| i != 0)
                .ok_or_else(|| D::Error::custom(format!("expected 0 or 1, got {v}"))),
        }
    }

    /// Like [`bool01`], with `null` or a missing key (add `#[serde(default)]`) as `None`.
    pub fn opt_bool01<'de, D>(d: D) -> Result<Option<bool>, D::Error>
    where
        D: Deserializer<'de>,
    {
        let v = Value::deserialize(d)?;
        match &v {
            Value::Null => Ok(None),
            Value::Bool(b) => Ok(Some(*b)),
            _ => value_to_i128(&v)
                .map(|i| Some(i != 0))
                .ok_or_else(|| D::Error::custom(format!("expected 0 or 1, got {v}"))),
        }
    }

    /// Any scalar as text (numbers become their decimal form).
    pub fn opt_string<'de, D>(d: D) -> Result<Option<String>, D::Error>
    where
        D: Deserializer<'de>,
    {
        let v = Value::deserialize(d)?;
        Ok(match v {
            Value::Null => None,
            Value::String(s) => Some(s),
            other => Some(other.to_string()),
        })
    }
}

/// Reads an integer from a config value that may be a number or numeric string.
pub fn value_as_u64(v: &serde_json::Value) -> Option<u64> {
    match v {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Splits a PVE property string (`a=1,b=2,bare`) into its items.
fn split_property_string(s: &str) -> impl Iterator<Item = (Option<&str>, &str)> {
    s.split(',')
        .filter(|i| !i.is_empty())
        .map(|item| match item.split_once('=') {
            Some((k, v)) => (Some(k), v),
            None => (None, item),
        })
}

/// Why a config string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse {what} {input:?}: {reason}")]
pub struct ParseError {
    what: &'static str,
    input: String,
    reason: &'static str,
}

fn parse_err(what: &'static str, input: &str, reason: &'static str) -> ParseError {
    ParseError {
        what,
        input: input.to_owned(),
        reason,
    }
}

/// A size as PVE writes it: `\d+(\.\d+)?[KMGT]?` (binary units; bare = bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

const KIB: u64 = 1024;

impl ByteSize {
    /// From whole GiB.
    pub fn gib(n: u64) -> ByteSize {
        ByteSize(n * KIB * KIB * KIB)
    }
    /// Bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
    /// Whole GiB, rounded up.
    pub fn gib_ceil(self) -> u64 {
        self.0.div_ceil(KIB * KIB * KIB)
    }
}

impl FromStr for ByteSize {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |r| parse_err("size", s, r);
        let (num, mult) = match s.as_bytes().last() {
            Some(b'K') => (&s[..s.len() - 1], KIB),
            Some(b'M') => (&s[..s.len() - 1], KIB.pow(2)),
            Some(b'G') => (&s[..s.len() - 1], KIB.pow(3)),
            Some(b'T') => (&s[..s.len() - 1], KIB.pow(4)),
            Some(_) => (s, 1),
            None => return Err(err("empty")),
        };
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err("not a number"));
        }
        if !frac.bytes().all(|b| b.is_ascii_digit()) || (num.contains('.') && frac.is_empty()) {
            return Err(err("not a number"));
        }
        let whole: u64 = int.parse().map_err(|_| err("too large"))?;
        let mut bytes = whole.checked_mul(mult).ok_or(err("too large"))?;
        if !frac.is_empty() {
            let f: f64 = format!("0.{frac}")
                .parse()
                .map_err(|_| err("not a number"))?;
            bytes += (f * mult as f64).round() as u64;
        }
        Ok(ByteSize(bytes))
    }
}

impl fmt::Display for ByteSize {
    /// The largest exact unit: `32G`, `512M`, `1536K`, or bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, mult) in [
            ("T", KIB.pow(4)),
            ("G", KIB.pow(3)),
            ("M", KIB.pow(2)),
            ("K", KIB),
        ] {
            if self.0 >= mult && self.0.is_multiple_of(mult) {
                return write!(f, "{}{unit}", self.0 / mult);
            }
        }
        write!(f, "{}", self.0)
    }
}

/// NIC models PVE accepts as the key of `model=MAC`.
const NIC_MODELS: &[&str] = &[
    "virtio",
    "e1000",
    "e1000e",
    "rtl8139",
    "vmxnet3",
    "ne2k_pci",
    "ne2k_isa",
    "pcnet",
    "i82551",
    "i82557b",
    "i82559er",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
];

/// A `netN` value, e.g. `virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,firewall=1,tag=20`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConfig {
    /// NIC model (`virtio`, `e1000`, …).
    pub model: String,
    /// MAC address; PVE generates a new one when it is omitted, so keep it to keep the MAC.
    pub mac: Option<String>,
    /// Bridge, e.g. `vmbr0`.
    pub bridge: Option<String>,
    /// VLAN tag 1..4094.
    pub tag: Option<u16>,
    /// Firewall flag.
    pub firewall: Option<bool>,
    /// Keys we do not model, kept so a rewrite does not drop them.
    pub other: BTreeMap<String, String>,
}

impl FromStr for NetConfig {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut model = None;
        let mut mac = None;
        let mut bridge = None;
        let mut tag = None;
        let mut firewall = None;
        let mut other = BTreeMap::new();
        for (key, value) in split_property_string(s) {
            match key {
                Some(k) if NIC_MODELS.contains(&k) => {
                    model = Some(k.to_owned());
                    mac = Some(value.to_owned());
                }
                Some("model") | None => model = Some(value.to_owned()),
                Some("macaddr") => mac = Some(value.to_owned()),
                Some("bridge") => bridge = Some(value.to_owned()),
                Some("tag") => {
                    let t: u16 = value.parse().map_err(|_| parse_err("net", s, "bad tag"))?;
                    if !(1..=4094).contains(&t) {
                        return Err(parse_err("net", s, "tag outside 1..4094"));
                    }
                    tag = Some(t);
                }
                Some("firewall") => {
                    firewall = Some(match value {
                        "1" => true,
                        "0" => false,
                        _ => return Err(parse_err("net", s, "bad firewall flag")),
                    })
                }
                Some(k) => {
                    other.insert(k.to_owned(), value.to_owned());
                }
            }
        }
        Ok(NetConfig {
            model: model.ok_or(parse_err("net", s, "no model"))?,
            mac,
            bridge,
            tag,
            firewall,
            other,
        })
    }
}

impl fmt::Display for NetConfig {
    /// PVE's canonical order: `model=MAC` first, then the other keys sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.mac {
            Some(mac) => write!(f, "{}={mac}", self.model)?,
            None => write!(f, "model={}", self.model)?,
        }
        let mut rest: BTreeMap<&str, String> = self
            .other
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        if let Some(b) = &self.bridge {
            rest.insert("bridge", b.clone());
        }
        if let Some(fw) = self.firewall {
            rest.insert("firewall", if fw { "1" } else { "0" }.to_owned());
        }
        if let Some(t) = self.tag {
            rest.insert("tag", t.to_string());
        }
        for (k, v) in rest {
            write!(f, ",{k}={v}")?;
        }
        Ok(())
    }
}

/// A cdrom drive value, e.g. `proxy-seeds:iso/edge-0.iso,media=cdrom`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdromDrive {
    /// `<storage>:iso/<file>`, or `none`/`cdrom`.
    pub volume: String,
    /// Other options after the volume, in order, without `media`.
    pub other: Vec<(String, String)>,
}

impl CdromDrive {
    /// An ISO on a storage, e.g. `CdromDrive::iso("proxy-seeds", "edge-0.iso")`.
    pub fn iso(storage: &str, file: &str) -> CdromDrive {
        CdromDrive {
            volume: format!("{storage}:iso/{file}"),
            other: Vec::new(),
        }
    }
    /// The storage of an ISO volume.
    pub fn iso_storage(&self) -> Option<&str> {
        let (storage, path) = self.volume.split_once(':')?;
        path.starts_with("iso/").then_some(storage)
    }
    /// The file name of an ISO volume.
    pub fn iso_file(&self) -> Option<&str> {
        self.volume.split_once(':')?.1.strip_prefix("iso/")
    }
    /// An empty drive, `none,media=cdrom`: the drive stays (so the guest's device names do
    /// not move) and holds no medium, as after a seed is detached.
    pub fn none() -> CdromDrive {
        CdromDrive {
            volume: "none".to_owned(),
            other: Vec::new(),
        }
    }
    /// Whether the drive holds no medium (`none`).
    pub fn is_none(&self) -> bool {
        self.volume == "none"
    }
}

impl FromStr for CdromDrive {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut volume = None;
        let mut media_cdrom = false;
        let mut other = Vec::new();
        for (key, value) in split_property_string(s) {
            match key {
                None | Some("file") | Some("volume") => volume = Some(value.to_owned()),
                Some("media") => media_cdrom = value == "cdrom",
                Some(k) => other.push((k.to_owned(), value.to_owned())),
            }
        }
        if !media_cdrom {
            return Err(parse_err("cdrom drive", s, "not media=cdrom"));
        }
        Ok(CdromDrive {
            volume: volume.ok_or(parse_err("cdrom drive", s, "no volume"))?,
            other,
        })
    }
}

impl fmt::Display for CdromDrive {
    /// `media=cdrom` is always written: PVE rejects an ISO without it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.volume)?;
        for (k, v) in &self.other {
            write!(f, ",{k}={v}")?;
        }
        f.write_str(",media=cdrom")
    }
}

/// A VM's `startup` property string, `[order=]N,up=S,down=S`, every part optional: its place
/// in the node's boot order and the delays after starting it and before stopping it, in
/// seconds (pve-common `PVE::JSONSchema::pve_parse_startup_order`, format
/// `pve-startup-order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Startup {
    /// Position in the startup order (lower first; shutdown in reverse).
    pub order: Option<u32>,
    /// Seconds to wait after starting this VM before starting the next.
    pub up: Option<u32>,
    /// Seconds to wait for this VM to stop before stopping the next.
    pub down: Option<u32>,
}

impl Startup {
    /// Whether no part is set (PVE would store an empty string; delete the key instead).
    pub fn is_empty(&self) -> bool {
        *self == Startup::default()
    }
}

impl FromStr for Startup {
    type Err = ParseError;
    /// PVE's rules: parts split on `,`, blank parts skipped, a bare number is the order,
    /// anything else (an unknown key, a non-number) makes the whole value invalid.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut startup = Startup::default();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = match part.split_once('=') {
                Some((key, value)) => (key, value),
                None => ("order", part),
            };
            let number = (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
                .then(|| value.parse::<u32>().ok())
                .flatten()
                .ok_or_else(|| parse_err("startup", s, "not a non-negative number"))?;
            match key {
                "order" => startup.order = Some(number),
                "up" => startup.up = Some(number),
                "down" => startup.down = Some(number),
                _ => return Err(parse_err("startup", s, "unknown key")),
            }
        }
        Ok(startup)
    }
}

impl fmt::Display for Startup {
    /// `order=N,up=S,down=S` with the parts that are set, in that order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [("order", self.order), ("up", self.up), ("down", self.down)];
        let mut first = true;
        for (key, value) in parts {
            if let Some(value) = value {
                if !first {
                    f.write_str(",")?;
                }
                write!(f, "{key}={value}")?;
                first = false;
            }
        }
        Ok(())
    }
}

/// A disk drive value, e.g. `vmdata:vm-100-disk-0,iothread=1,size=32G`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskDrive {
    /// The volume id.
    pub volume: String,
    /// `size=`, when present.
    pub size: Option<ByteSize>,
    /// Other options in order (without `size`).
    pub other: Vec<(String, String)>,
}

impl DiskDrive {
    /// The storage part of the volume id.
    pub fn storage(&self) -> Option<&str> {
        self.volume.split_once(':').map(|(s, _)| s)
    }
    /// Whether the drive is a cdrom (then it is not a disk).
    pub fn is_cdrom(&self) -> bool {
        self.other.iter().any(|(k, v)| k == "media" && v == "cdrom")
    }
}

impl FromStr for DiskDrive {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut volume = None;
        let mut size = None;
        let mut other = Vec::new();
        for (key, value) in split_property_string(s) {
            match key {
                None | Some("file") | Some("volume") => volume = Some(value.to_owned()),
                Some("size") => size = Some(value.parse()?),
                Some(k) => other.push((k.to_owned(), value.to_owned())),
            }
        }
        Ok(DiskDrive {
            volume: volume.ok_or(parse_err("disk", s, "no volume"))?,
            size,
            other,
        })
    }
}

impl fmt::Display for DiskDrive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.volume)?;
        for (k, v) in &self.other {
            write!(f, ",{k}={v}")?;
        }
        if let Some(size) = self.size {
            write!(f, ",size={size}")?;
        }
        Ok(())
    }
}

/// Whether a config key names a disk bus slot (`scsi0`, `virtio1`, `sata0`, `ide0`, …).
pub fn is_drive_key(key: &str) -> bool {
    ["scsi", "virtio", "sata", "ide"].iter().any(|bus| {
        key.strip_prefix(bus)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The boot disk key of a config: the first disk in `boot: order=…`, else the legacy
/// `bootdisk`, else the first of scsi0/virtio0/sata0/ide0 that is not a cdrom.
pub fn boot_disk_key(config: &BTreeMap<String, serde_json::Value>) -> Option<String> {
    let is_disk = |key: &str| {
        is_drive_key(key)
            && config
                .get(key)
                .and_then(|v| v.as_str())
                .and_then(|v| v.parse::<DiskDrive>().ok())
                .is_some_and(|d| !d.is_cdrom() && d.volume != "none")
    };
    if let Some(boot) = config.get("boot").and_then(|v| v.as_str()) {
        for (key, value) in split_property_string(boot) {
            if matches!(key, Some("order") | None)
                && let Some(first) = value.split(';').find(|k| is_disk(k))
            {
                return Some(first.to_owned());
            }
        }
    }
    if let Some(legacy) = config.get("bootdisk").and_then(|v| v.as_str())
        && is_disk(legacy)
    {
        return Some(legacy.to_owned());
    }
    ["scsi0", "virtio0", "sata0", "ide0"]
        .into_iter()
        .find(|k| is_disk(k))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn form_uses_zero_one_and_encodes() {
        let f = Form::new()
            .int("newid", 101)
            .bool("full", true)
            .bool("purge", false)
            .text("description", "managed by terraform; name=a b&c")
            .text("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr1,tag=20");
        assert_eq!(
            f.encode(),
            "newid=101&full=1&purge=0&description=managed+by+terraform%3B+name%3Da+b%26c\
             &net0=virtio%3DBC%3A24%3A11%3AAA%3ABB%3ACC%2Cbridge%3Dvmbr1%2Ctag%3D20"
        );
        assert_eq!(f.get("full"), Some("1"));
        assert_eq!(
            format!("{f:?}"),
            r#"["newid", "full", "purge", "description", "net0"]"#
        );
    }

    #[derive(Deserialize)]
    struct Loose {
        #[serde(deserialize_with = "de::int")]
        a: u32,
        #[serde(default, deserialize_with = "de::opt_int")]
        b: Option<u64>,
        #[serde(default, deserialize_with = "de::bool01")]
        c: bool,
    }

    #[test]
    fn ints_as_number_or_string_and_bools_as_01() {
        let l: Loose = serde_json::from_value(json!({"a": "101", "b": 2048, "c": 1})).unwrap();
        assert_eq!((l.a, l.b, l.c), (101, Some(2048), true));
        let l: Loose = serde_json::from_value(json!({"a": 5, "c": "0"})).unwrap();
        assert_eq!((l.a, l.b, l.c), (5, None, false));
        let l: Loose = serde_json::from_value(json!({"a": 5, "c": true})).unwrap();
        assert!(l.c);
        assert!(serde_json::from_value::<Loose>(json!({"a": "abc"})).is_err());
        assert!(serde_json::from_value::<Loose>(json!({"a": -1})).is_err());
    }

    #[test]
    fn envelope_nextid_string() {
        let e: Envelope<serde_json::Value> = serde_json::from_str(r#"{"data":"101"}"#).unwrap();
        assert_eq!(value_as_u64(&e.data), Some(101));
        let e: Envelope<Option<String>> = serde_json::from_str(r#"{"data":null}"#).unwrap();
        assert!(e.data.is_none());
        let e: Envelope<Vec<serde_json::Value>> =
            serde_json::from_str(r#"{"data":[{"n":1,"t":"no content"}],"total":1}"#).unwrap();
        assert_eq!(e.total, Some(1));
    }

    #[test]
    fn net_round_trips_canonical_pve_strings() {
        let text = "virtio=BC:24:11:AA:BB:CC,bridge=vmbr1,tag=20";
        let net: NetConfig = text.parse().unwrap();
        assert_eq!(net.model, "virtio");
        assert_eq!(net.mac.as_deref(), Some("BC:24:11:AA:BB:CC"));
        assert_eq!(net.bridge.as_deref(), Some("vmbr1"));
        assert_eq!(net.tag, Some(20));
        assert_eq!(net.to_string(), text);

        let text = "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1,mtu=1450,tag=4";
        let net: NetConfig = text.parse().unwrap();
        assert_eq!(net.firewall, Some(true));
        assert_eq!(net.other.get("mtu").map(String::as_str), Some("1450"));
        assert_eq!(net.to_string(), text);
    }

    #[test]
    fn net_changing_bridge_keeps_mac_and_sorts_keys() {
        let mut net: NetConfig = "e1000=BC:24:11:AA:BB:CC,tag=5,bridge=vmbr0"
            .parse()
            .unwrap();
        net.bridge = Some("vmbr2".into());
        net.tag = None;
        assert_eq!(net.to_string(), "e1000=BC:24:11:AA:BB:CC,bridge=vmbr2");
        let alias: NetConfig = "model=virtio,macaddr=BC:24:11:AA:BB:CC,bridge=vmbr0"
            .parse()
            .unwrap();
        assert_eq!(alias.to_string(), "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0");
        assert!(
            "virtio=BC:24:11:AA:BB:CC,tag=4095"
                .parse::<NetConfig>()
                .is_err()
        );
        assert!("bridge=vmbr0".parse::<NetConfig>().is_err());
    }

    #[test]
    fn cdrom_iso_round_trip() {
        let d = CdromDrive::iso("proxy-seeds", "edge-0.iso");
        assert_eq!(d.to_string(), "proxy-seeds:iso/edge-0.iso,media=cdrom");
        let parsed: CdromDrive = "proxy-seeds:iso/edge-0.iso,media=cdrom".parse().unwrap();
        assert_eq!(parsed, d);
        assert_eq!(parsed.iso_storage(), Some("proxy-seeds"));
        assert_eq!(parsed.iso_file(), Some("edge-0.iso"));
        let none: CdromDrive = "none,media=cdrom".parse().unwrap();
        assert_eq!(none.iso_storage(), None);
        assert_eq!(none.iso_file(), None);
        assert!(none.is_none());
        assert_eq!(none, CdromDrive::none());
        assert_eq!(CdromDrive::none().to_string(), "none,media=cdrom");
        assert!(!parsed.is_none());
        assert!("local:iso/x.iso".parse::<CdromDrive>().is_err());
        let with_size: CdromDrive = "local:iso/seed.iso,media=cdrom,size=364K".parse().unwrap();
        assert_eq!(
            with_size.to_string(),
            "local:iso/seed.iso,size=364K,media=cdrom"
        );
    }

    #[test]
    fn startup_property_string_as_pve_parses_it() {
        let full: Startup = "order=3,up=30,down=60".parse().unwrap();
        assert_eq!(
            full,
            Startup {
                order: Some(3),
                up: Some(30),
                down: Some(60)
            }
        );
        assert_eq!(full.to_string(), "order=3,up=30,down=60");
        // A bare number is the order; parts in any order; blanks skipped.
        let bare: Startup = "up=5,,2".parse().unwrap();
        assert_eq!((bare.order, bare.up, bare.down), (Some(2), Some(5), None));
        assert_eq!(bare.to_string(), "order=2,up=5");
        let down: Startup = "down=10".parse().unwrap();
        assert_eq!(down.to_string(), "down=10");
        assert!("".parse::<Startup>().unwrap().is_empty());
        assert_eq!(Startup::default().to_string(), "");
        for bad in [
            "order=-1",
            "up=x",
            "delay=3",
            "order=",
            "1.5",
            "up=99999999999",
        ] {
            assert!(bad.parse::<Startup>().is_err(), "{bad}");
        }
    }

    #[test]
    fn disk_and_sizes() {
        let d: DiskDrive = "vmdata:vm-100-disk-0,iothread=1,size=32G".parse().unwrap();
        assert_eq!(d.volume, "vmdata:vm-100-disk-0");
        assert_eq!(d.storage(), Some("vmdata"));
        assert_eq!(d.size, Some(ByteSize::gib(32)));
        assert_eq!(d.to_string(), "vmdata:vm-100-disk-0,iothread=1,size=32G");
        assert_eq!("2252M".parse::<ByteSize>().unwrap().to_string(), "2252M");
        assert_eq!(
            "1.5G".parse::<ByteSize>().unwrap(),
            ByteSize(1536 * 1024 * 1024)
        );
        assert_eq!("4096".parse::<ByteSize>().unwrap(), ByteSize(4096));
        assert_eq!(ByteSize(4096).to_string(), "4K");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        assert_eq!(ByteSize::gib(20).gib_ceil(), 20);
        assert_eq!(ByteSize(ByteSize::gib(20).0 + 1).gib_ceil(), 21);
        for bad in ["", "G", "1.G", "-1G", "12GB", "1,5G"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn boot_disk_from_order_legacy_and_fallback() {
        let cfg = |v: serde_json::Value| -> BTreeMap<String, serde_json::Value> {
            serde_json::from_value(v).unwrap()
        };
        let c = cfg(json!({
            "boot": "order=ide2;virtio0;net0",
            "ide2": "proxy-seeds:iso/a.iso,media=cdrom",
            "scsi0": "vmdata:vm-100-disk-1,size=8G",
            "virtio0": "vmdata:vm-100-disk-0,size=4G",
        }));
        assert_eq!(boot_disk_key(&c).as_deref(), Some("virtio0"));
        let c = cfg(json!({"bootdisk": "sata0", "sata0": "vmdata:vm-1-disk-0,size=2G"}));
        assert_eq!(boot_disk_key(&c).as_deref(), Some("sata0"));
        let c = cfg(json!({"ide0": "none,media=cdrom", "scsi0": "vmdata:vm-1-disk-0,size=2G"}));
        assert_eq!(boot_disk_key(&c).as_deref(), Some("scsi0"));
        assert!(is_drive_key("scsi12") && !is_drive_key("scsihw") && !is_drive_key("net0"));
    }
}
