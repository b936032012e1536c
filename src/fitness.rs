//! The fitness rules a storage, a template's disks and a node's bridges must meet, decided
//! once (#44): pure functions over what PVE reported, returning which problem stands in the
//! way. `proxmox_health` maps each problem to its reason code; plan checks, placement and the
//! create's prechecks put it in their own words. None of them judges a fact itself, so the
//! rules cannot drift apart. No I/O, nothing of Terraform.

use pve::storage::StorageInfo;

/// What a storage must take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// ISO images (`iso`): the seed.
    Iso,
    /// VM disk images (`images`): the clone.
    Images,
}

impl Content {
    /// PVE's content type.
    pub fn pve(self) -> &'static str {
        match self {
            Content::Iso => "iso",
            Content::Images => "images",
        }
    }

    /// In a user's words.
    pub fn kind(self) -> &'static str {
        match self {
            Content::Iso => "ISO images",
            Content::Images => "VM disk images",
        }
    }
}

/// Why a storage cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageProblem {
    /// Not on the node (or not visible to the token).
    Missing,
    /// Disabled or not active on the node.
    Inactive,
    /// It does not take the content.
    LacksContent,
}

/// Whether `storage` takes `content` where it was listed.
pub fn storage_usable(storage: &StorageInfo, content: Content) -> Result<(), StorageProblem> {
    if !storage.enabled || !storage.active {
        Err(StorageProblem::Inactive)
    } else if !storage.accepts(content.pve()) {
        Err(StorageProblem::LacksContent)
    } else {
        Ok(())
    }
}

/// The storage `id` of a node's `storages`, when it takes `content` there.
pub fn storage<'a>(
    storages: &'a [StorageInfo],
    id: &str,
    content: Content,
) -> Result<&'a StorageInfo, StorageProblem> {
    let found = storages
        .iter()
        .find(|s| s.storage == id)
        .ok_or(StorageProblem::Missing)?;
    storage_usable(found, content).map(|()| found)
}

/// The storages of a node that take `content` (for a hint: choose one of these).
pub fn storages_taking(storages: &[StorageInfo], content: Content) -> Vec<String> {
    storages
        .iter()
        .filter(|s| storage_usable(s, content).is_ok())
        .map(|s| s.storage.clone())
        .collect()
}

/// The disk storages of a template on another node that keep it from being cloned onto a
/// node with `storages`: PVE clones across nodes (`target`) only from a storage shared with
/// the target and active there. Empty: it can be cloned there.
pub fn disks_not_shared<'a>(disk_storages: &'a [String], storages: &[StorageInfo]) -> Vec<&'a str> {
    disk_storages
        .iter()
        .filter(|id| {
            !storages
                .iter()
                .any(|s| &s.storage == *id && s.shared && s.enabled && s.active)
        })
        .map(String::as_str)
        .collect()
}

/// The bridges of `wanted` a node that has `present` lacks: PVE refuses to start a VM whose
/// NIC names a bridge its node does not have.
pub fn missing_bridges<'a, W, P>(wanted: &'a [W], present: &[P]) -> Vec<&'a str>
where
    W: AsRef<str>,
    P: AsRef<str>,
{
    wanted
        .iter()
        .map(AsRef::as_ref)
        .filter(|bridge| !present.iter().any(|p| p.as_ref() == *bridge))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage_info(id: &str, content: &str, shared: bool, enabled: bool) -> StorageInfo {
        serde_json::from_value(serde_json::json!({
            "storage": id, "type": "dir", "content": content, "enabled": enabled as u8,
            "active": 1, "shared": shared as u8,
        }))
        .unwrap()
    }

    #[test]
    fn a_storage_is_found_active_and_taking_the_content_or_says_which_it_is_not() {
        let list = [
            storage_info("local", "iso,vztmpl", false, true),
            storage_info("lvm", "images", false, true),
            storage_info("off", "iso", false, false),
        ];
        assert!(storage(&list, "local", Content::Iso).is_ok());
        assert_eq!(
            storage(&list, "nope", Content::Iso),
            Err(StorageProblem::Missing)
        );
        assert_eq!(
            storage(&list, "off", Content::Iso),
            Err(StorageProblem::Inactive)
        );
        assert_eq!(
            storage(&list, "lvm", Content::Iso),
            Err(StorageProblem::LacksContent)
        );
        assert_eq!(storages_taking(&list, Content::Images), vec!["lvm"]);
    }

    #[test]
    fn a_template_elsewhere_needs_every_disk_on_shared_active_storage() {
        let here = [
            storage_info("ceph", "images", true, true),
            storage_info("local", "images", false, true),
        ];
        let disks = vec!["ceph".to_owned(), "local".to_owned()];
        assert_eq!(disks_not_shared(&disks, &here), vec!["local"]);
        assert!(disks_not_shared(&disks[..1], &here).is_empty());
    }

    #[test]
    fn missing_bridges_are_named_in_order() {
        let wanted = ["vmbr0", "vmbr9", "vmbr1"];
        assert_eq!(missing_bridges(&wanted, &["vmbr1", "vmbr0"]), vec!["vmbr9"]);
    }
}
