//! PVE task identifiers.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A parsed UPID: `UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:`.
///
/// The original text is kept and printed verbatim, since PVE looks tasks up by the exact string.
///
/// ```
/// let text = "UPID:pve1:000A1B2C:0001E240:6744F00D:qmclone:9000:terraform@pve!provider:";
/// let upid: pve::Upid = text.parse().unwrap();
/// assert_eq!(upid.node(), "pve1");
/// assert_eq!(upid.task_type(), "qmclone");
/// assert_eq!(upid.id(), "9000");
/// assert_eq!(upid.to_string(), text);
/// assert!("UPID:pve1:no".parse::<pve::Upid>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Upid {
    raw: String,
    node: String,
    pid: u32,
    pstart: u64,
    starttime: u64,
    task_type: String,
    id: String,
    user: String,
}

/// Why a string is not a UPID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a PVE task id (UPID): {reason}")]
pub struct UpidParseError {
    reason: &'static str,
}

fn bad(reason: &'static str) -> UpidParseError {
    UpidParseError { reason }
}

fn valid_node(node: &str) -> bool {
    let bytes = node.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
}

fn no_space_or_slash(s: &str) -> bool {
    !s.chars().any(|c| c.is_whitespace() || c == '/')
}

impl FromStr for Upid {
    type Err = UpidParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix("UPID:").ok_or(bad("missing UPID: prefix"))?;
        let rest = rest
            .strip_suffix(':')
            .ok_or(bad("missing trailing colon"))?;
        let fields: Vec<&str> = rest.split(':').collect();
        let [node, pid, pstart, starttime, task_type, id, user] = fields[..] else {
            return Err(bad("wrong number of fields"));
        };
        if !valid_node(node) {
            return Err(bad("invalid node name"));
        }
        let hex = |v: &str, max: usize| {
            (!v.is_empty() && v.len() <= max && v.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u64::from_str_radix(v, 16).ok())
                .flatten()
        };
        let pid = hex(pid, 8).ok_or(bad("invalid pid"))?;
        let pstart = hex(pstart, 9).ok_or(bad("invalid pstart"))?;
        let starttime = hex(starttime, 8).ok_or(bad("invalid starttime"))?;
        if task_type.is_empty() || !no_space_or_slash(task_type) {
            return Err(bad("invalid task type"));
        }
        if !no_space_or_slash(id) {
            return Err(bad("invalid task id"));
        }
        if user.is_empty() || !no_space_or_slash(user) {
            return Err(bad("invalid user"));
        }
        Ok(Upid {
            raw: s.to_owned(),
            node: node.to_owned(),
            pid: u32::try_from(pid).map_err(|_| bad("invalid pid"))?,
            pstart,
            starttime,
            task_type: task_type.to_owned(),
            id: id.to_owned(),
            user: user.to_owned(),
        })
    }
}

impl Upid {
    /// The node the task runs on; its status must be polled there.
    pub fn node(&self) -> &str {
        &self.node
    }
    /// Worker process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }
    /// Process start time in clock ticks.
    pub fn pstart(&self) -> u64 {
        self.pstart
    }
    /// Task start, Unix seconds.
    pub fn starttime(&self) -> u64 {
        self.starttime
    }
    /// Task type, e.g. `qmclone`, `qmstart`, `imgcopy`.
    pub fn task_type(&self) -> &str {
        &self.task_type
    }
    /// Task object id (for `qmclone` the **source** VMID; empty for `imgcopy`).
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The user or token (`user@realm!token`) that started the task.
    pub fn user(&self) -> &str {
        &self.user
    }
    /// The UPID exactly as PVE printed it.
    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

impl fmt::Display for Upid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for Upid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for Upid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_facts_example() {
        let text = "UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:terraform@pve!prov:";
        let upid: Upid = text.parse().unwrap();
        assert_eq!(upid.node(), "pve1");
        assert_eq!(upid.pid(), 0x000D_6BDA);
        assert_eq!(upid.pstart(), 0x041E_0A54);
        assert_eq!(upid.starttime(), 0x654A_5A1D);
        assert_eq!(upid.task_type(), "qmclone");
        assert_eq!(upid.id(), "9000");
        assert_eq!(upid.user(), "terraform@pve!prov");
        assert_eq!(upid.to_string(), text);
    }

    #[test]
    fn empty_id_for_uploads_and_nine_digit_pstart() {
        let upid: Upid = "UPID:pve-2:0001F2A3:1041E0A54:654A5A1D:imgcopy::root@pam:"
            .parse()
            .unwrap();
        assert_eq!(upid.node(), "pve-2");
        assert_eq!(upid.id(), "");
        assert_eq!(upid.task_type(), "imgcopy");
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:root@pam",
            "UPID:-pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:root@pam:",
            "UPID:pve1:XYZ:041E0A54:654A5A1D:qmclone:9000:root@pam:",
            "UPID:pve1:000D6BDA:041E0A54:654A5A1D:qm clone:9000:root@pam:",
            "UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000::",
            "UPID:pve1:000D6BDA:041E0A54:qmclone:9000:root@pam:",
            "TASK:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:root@pam:",
        ] {
            assert!(bad.parse::<Upid>().is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn serde_round_trip() {
        let text = "\"UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmstart:100:root@pam!tf:\"";
        let upid: Upid = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&upid).unwrap(), text);
    }
}
