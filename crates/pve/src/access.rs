//! `GET /access/permissions`.

use std::collections::BTreeMap;

use crate::client::Client;
use crate::error::Result;
use crate::wire::{Form, value_as_u64};

/// ACL path → privilege → propagate flag.
pub type Permissions = BTreeMap<String, BTreeMap<String, bool>>;

impl Client {
    /// The calling token's effective privileges, optionally only for `path`.
    pub async fn permissions(&self, path: Option<&str>) -> Result<Permissions> {
        let query = Form::new().opt_text("path", path);
        let raw: BTreeMap<String, BTreeMap<String, serde_json::Value>> =
            self.get("/access/permissions", &query).await?;
        Ok(raw
            .into_iter()
            .map(|(p, privs)| {
                let privs = privs
                    .into_iter()
                    .map(|(k, v)| {
                        (
                            k,
                            value_as_u64(&v).unwrap_or(0) != 0
                                || v == serde_json::Value::Bool(true),
                        )
                    })
                    .collect();
                (p, privs)
            })
            .collect())
    }
}

/// Whether `privilege` is granted on `path` (exact path, or an ancestor with propagation).
pub fn has_privilege(perms: &Permissions, path: &str, privilege: &str) -> bool {
    if perms.get(path).is_some_and(|p| p.contains_key(privilege)) {
        return true;
    }
    let mut current = path;
    while let Some(idx) = current.rfind('/') {
        current = if idx == 0 { "/" } else { &current[..idx] };
        if perms
            .get(current)
            .and_then(|p| p.get(privilege))
            .is_some_and(|propagate| *propagate)
        {
            return true;
        }
        if current == "/" {
            break;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privilege_lookup_respects_propagation() {
        let perms: Permissions = serde_json::from_str(concat!(
            r#"{"/":{"Sys.Audit":0},"/vms":{"VM.Audit":1},"#,
            r#""/storage/proxy-seeds":{"Datastore.AllocateTemplate":1}}"#
        ))
        .map(|raw: BTreeMap<String, BTreeMap<String, u8>>| {
            raw.into_iter()
                .map(|(p, m)| (p, m.into_iter().map(|(k, v)| (k, v != 0)).collect()))
                .collect()
        })
        .unwrap();
        assert!(has_privilege(&perms, "/", "Sys.Audit"));
        assert!(!has_privilege(&perms, "/nodes/pve1", "Sys.Audit"));
        assert!(has_privilege(&perms, "/vms/100", "VM.Audit"));
        assert!(has_privilege(
            &perms,
            "/storage/proxy-seeds",
            "Datastore.AllocateTemplate"
        ));
        assert!(!has_privilege(
            &perms,
            "/storage/other",
            "Datastore.AllocateTemplate"
        ));
    }
}
