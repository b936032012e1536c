//! PVE's named formats: validators registered in Perl (pve-common `JSONSchema.pm`,
//! pve-storage, pve-access-control, qemu-server) with their die texts, and the
//! property-string formats registered by name.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::ParamRule;
use super::perl_regex::perl_anchored_match;
use super::rules::{
    BOOT_KEYS, CICUSTOM_KEYS, CPU_KEYS, HOSTPCI_KEYS, IDE_KEYS, IPCONFIG_KEYS, RNG_KEYS, SEV_KEYS,
    SMBIOS1_KEYS, TDX_KEYS, WATCHDOG_KEYS,
};

/// Property-string formats PVE registers by name (a hash, not a code validator).
pub fn property_format(name: &str) -> Option<&'static [ParamRule]> {
    Some(match name {
        "pve-qm-ide" => IDE_KEYS,
        "pve-qm-ipconfig" => IPCONFIG_KEYS,
        "pve-qm-cicustom" => CICUSTOM_KEYS,
        "pve-qm-boot" => BOOT_KEYS,
        "pve-qm-watchdog" => WATCHDOG_KEYS,
        "pve-qm-rng" => RNG_KEYS,
        "pve-qm-smbios1" => SMBIOS1_KEYS,
        "pve-vm-cpu-conf" => CPU_KEYS,
        "pve-qm-hostpci" => HOSTPCI_KEYS,
        "pve-qemu-sev-fmt" => SEV_KEYS,
        "pve-qemu-tdx-fmt" => TDX_KEYS,
        _ => return None,
    })
}

/// Names of the formats that `check_named` really checks (the others pass).
pub const CHECKED_FORMATS: &[&str] = &[
    "pve-vmid",
    "pve-node",
    "pve-storage-id",
    "pve-bridge-id",
    "mac-addr",
    "dns-name",
    "pve-configid",
    "pve-tag",
    "pve-poolid",
    "pve-volume-id",
    "pve-volume-id-or-qm-path",
    "pve-volume-id-or-absolute-path",
    "urlencoded",
    "disk-size",
    "ipv4",
    "ipv6",
    "ip",
    "address",
    "CIDR",
    "CIDRv4",
    "CIDRv6",
    "pve-ipv4-config",
    "pve-ipv6-config",
    "pve-storage-content",
    "pve-task-status-type",
    "pve-startup-order",
    "pve-hotplug-features",
    "pve-qm-bootdisk",
    "pve-qm-bootdev",
    "storage-pair",
    "pve-ha-resource-or-vm-id",
    "pve-ha-resource-id",
    "pve-ha-node",
];

/// pve-common `check_format` for a named format: `-list` validates every element of
/// `split_list`, `-opt` validates a non-empty value. Err is the validator's die text.
pub(crate) fn check_named(format: &str, value: &str) -> Result<(), String> {
    if let Some(base) = format.strip_suffix("-list") {
        return split_list(value)
            .into_iter()
            .try_for_each(|item| check_base(base, item));
    }
    if let Some(base) = format.strip_suffix("-opt") {
        return if value.is_empty() {
            Ok(())
        } else {
            check_base(base, value)
        };
    }
    check_base(format, value)
}

/// pve-common `PVE::Tools::split_list`.
pub fn split_list(value: &str) -> Vec<&str> {
    if value.contains('\0') {
        let mut items: Vec<&str> = value.split('\0').collect();
        // Perl's split drops trailing empty fields.
        while items.last() == Some(&"") {
            items.pop();
        }
        return items;
    }
    value
        .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .collect()
}

fn check_base(format: &str, value: &str) -> Result<(), String> {
    let ok = |cond: bool, message: String| if cond { Ok(()) } else { Err(message) };
    match format {
        "pve-vmid" => ok(
            perl_anchored_match("[1-9][0-9]{2,8}", value),
            "value does not look like a valid VM ID\n".into(),
        ),
        "pve-node" => ok(
            perl_anchored_match("([a-zA-Z0-9]([a-zA-Z0-9\\-]*[a-zA-Z0-9])?)", value),
            "value does not look like a valid node name\n".into(),
        ),
        "pve-storage-id" => ok(
            is_pve_id(value),
            format!("storage ID '{value}' contains illegal characters\n"),
        ),
        "pve-bridge-id" => ok(
            perl_anchored_match("[-_.\\w\\d]+", value),
            format!("invalid bridge ID '{value}'\n"),
        ),
        "mac-addr" => ok(
            perl_anchored_match("[a-fA-F0-9][02468aceACE](?::[a-fA-F0-9]{2}){5}", value),
            "value does not look like a valid unicast MAC address\n".into(),
        ),
        "dns-name" => ok(
            is_dns_name(value),
            "value does not look like a valid DNS name\n".into(),
        ),
        "pve-configid" => ok(
            perl_anchored_match("[a-zA-Z][a-zA-Z0-9_-]+", value),
            format!("invalid configuration ID '{value}'\n"),
        ),
        "pve-tag" => ok(
            perl_anchored_match("[a-zA-Z0-9_][a-zA-Z0-9_\\-\\+\\.]*", value),
            "invalid characters in tag\n".into(),
        ),
        "pve-poolid" => ok(
            perl_anchored_match("[A-Za-z0-9\\.\\-_]+", value),
            format!("pool name '{value}' contains invalid characters\n"),
        ),
        "pve-volume-id" => ok(
            is_volume_id(value),
            format!("unable to parse volume ID '{value}'\n"),
        ),
        "pve-volume-id-or-qm-path" => ok(
            value == "none" || value == "cdrom" || value.starts_with('/') || is_volume_id(value),
            format!("unable to parse volume ID '{value}'\n"),
        ),
        "pve-volume-id-or-absolute-path" => ok(
            value.starts_with('/') || is_volume_id(value),
            format!("unable to parse volume ID '{value}'\n"),
        ),
        "urlencoded" => ok(
            perl_anchored_match("[-%a-zA-Z0-9_.!~*'()]*", value),
            format!("invalid urlencoded string: {value}\n"),
        ),
        "disk-size" => ok(
            perl_anchored_match("(\\d+(\\.\\d+)?)([KMGT])?", value),
            format!("value does not look like a valid disk size: {value}\n"),
        ),
        "ipv4" => ok(
            is_ipv4(value),
            "value does not look like a valid IPv4 address\n".into(),
        ),
        "ipv6" => ok(
            is_ipv6(value),
            "value does not look like a valid IPv6 address\n".into(),
        ),
        "ip" => ok(
            is_ipv4(value) || is_ipv6(value),
            "value does not look like a valid IP address\n".into(),
        ),
        "address" => ok(
            is_ipv4(value) || is_ipv6(value) || is_dns_name(value),
            format!("value does not look like a valid address: {value}\n"),
        ),
        "CIDRv4" => ok(
            is_cidr_v4(value),
            "value does not look like a valid IPv4 CIDR network\n".into(),
        ),
        "CIDRv6" => ok(
            is_cidr_v6(value),
            "value does not look like a valid IPv6 CIDR network\n".into(),
        ),
        "CIDR" => ok(
            is_cidr_v4(value) || is_cidr_v6(value),
            "value does not look like a valid CIDR network\n".into(),
        ),
        "pve-ipv4-config" => ok(
            value == "dhcp" || value == "manual" || is_cidr_v4(value),
            "value does not look like a valid ipv4 network configuration\n".into(),
        ),
        "pve-ipv6-config" => ok(
            matches!(value, "auto" | "dhcp" | "manual") || is_cidr_v6(value),
            "value does not look like a valid ipv6 network configuration\n".into(),
        ),
        "pve-storage-content" => ok(
            matches!(
                value,
                "images" | "rootdir" | "vztmpl" | "iso" | "backup" | "snippets" | "import"
            ),
            format!("invalid content type '{value}'\n"),
        ),
        "pve-task-status-type" => ok(
            matches!(
                value.to_ascii_lowercase().as_str(),
                "ok" | "error" | "warning" | "unknown"
            ),
            format!("invalid status '{value}'\n"),
        ),
        "pve-startup-order" => ok(
            is_startup_order(value),
            "unable to parse startup options\n".into(),
        ),
        "pve-hotplug-features" => check_hotplug(value),
        "pve-qm-bootdisk" => ok(
            is_drive_name(value),
            format!("invalid boot disk '{value}'\n"),
        ),
        "pve-qm-bootdev" => ok(
            is_boot_device(value),
            format!("invalid boot device '{value}'\n"),
        ),
        "storage-pair" => check_storage_pair(value),
        // pve-ha-manager `HA/Tools.pm` `pve_verify_ha_resource_or_vm_id`.
        "pve-ha-resource-or-vm-id" => ok(
            perl_anchored_match("([a-z]+:\\S+|\\d+)", value),
            "value does not look like a valid ha resource id\n".into(),
        ),
        // pve-ha-manager `HA/Tools.pm` `pve_verify_ha_resource_id`, `pve_verify_ha_node`.
        "pve-ha-resource-id" => ok(
            perl_anchored_match("[a-z]+:\\S+", value),
            "value does not look like a valid ha resource id\n".into(),
        ),
        "pve-ha-node" => ok(
            perl_anchored_match("([a-zA-Z0-9]([a-zA-Z0-9\\-]*[a-zA-Z0-9])?)(:\\d+)?", value),
            "value does not look like a valid ha node\n".into(),
        ),
        // Formats we do not model pass, as an unchecked string.
        _ => Ok(()),
    }
}

/// pve-common `parse_id`.
fn is_pve_id(value: &str) -> bool {
    perl_anchored_match("[a-zA-Z][a-zA-Z0-9\\-\\_\\.]*[a-zA-Z0-9]", value)
}

/// pve-storage `parse_volume_id`.
fn is_volume_id(value: &str) -> bool {
    perl_anchored_match("([a-zA-Z][a-zA-Z0-9\\-\\_\\.]*[a-zA-Z0-9]):(.+)", value)
}

fn is_dns_name(value: &str) -> bool {
    perl_anchored_match(
        concat!(
            "(([a-zA-Z0-9]([a-zA-Z0-9\\-]*[a-zA-Z0-9])?)\\.)*",
            "([a-zA-Z0-9]([a-zA-Z0-9\\-]*[a-zA-Z0-9])?)",
        ),
        value,
    )
}

fn is_ipv4(value: &str) -> bool {
    value.parse::<Ipv4Addr>().is_ok()
}

fn is_ipv6(value: &str) -> bool {
    value.parse::<Ipv6Addr>().is_ok()
}

fn cidr_parts(value: &str) -> Option<(&str, u32)> {
    let (address, bits) = value.split_once('/')?;
    if bits.is_empty() || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((address, bits.parse().ok()?))
}

fn is_cidr_v4(value: &str) -> bool {
    cidr_parts(value).is_some_and(|(a, bits)| is_ipv4(a) && bits > 7 && bits <= 32)
}

fn is_cidr_v6(value: &str) -> bool {
    cidr_parts(value).is_some_and(|(a, bits)| is_ipv6(a) && bits > 7 && bits <= 128)
}

/// pve-common `pve_parse_startup_order` (an empty or `0` value is rejected).
fn is_startup_order(value: &str) -> bool {
    if value.is_empty() || value == "0" {
        return false;
    }
    value
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .all(|part| {
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            let part = part.strip_prefix("order=").unwrap_or(part);
            digits(part)
                || part.strip_prefix("up=").is_some_and(digits)
                || part.strip_prefix("down=").is_some_and(digits)
        })
}

/// qemu-server `parse_hotplug_features`: `0`, `1` or a list of known features.
fn check_hotplug(value: &str) -> Result<(), String> {
    if value == "0" || value == "1" {
        return Ok(());
    }
    for feature in split_list(value) {
        if !matches!(
            feature,
            "network" | "disk" | "cpu" | "memory" | "usb" | "cloudinit"
        ) {
            return Err(format!("invalid hotplug feature '{feature}'\n"));
        }
    }
    Ok(())
}

/// qemu-server `is_valid_drivename`: ide0-3, sata0-5, scsi0-30, virtio0-15, efidisk0, tpmstate0.
pub(crate) fn is_drive_name(value: &str) -> bool {
    let indexed = |prefix: &str, count: u32| {
        value.strip_prefix(prefix).is_some_and(|n| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0'))
                && n.parse::<u32>().is_ok_and(|n| n < count)
        })
    };
    indexed("ide", 4)
        || indexed("sata", 6)
        || indexed("scsi", 31)
        || indexed("virtio", 16)
        || value == "efidisk0"
        || value == "tpmstate0"
}

/// qemu-server `verify_bootdev`: a drive other than efidisk/tpmstate, or netN/usbN/hostpciN.
fn is_boot_device(value: &str) -> bool {
    if is_drive_name(value) {
        return !(value.starts_with("efidisk") || value.starts_with("tpmstate"));
    }
    let indexed = |prefix: &str, count: u32| {
        value.strip_prefix(prefix).is_some_and(|n| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0'))
                && n.parse::<u32>().is_ok_and(|n| n < count)
        })
    };
    indexed("net", 32) || indexed("usb", 14) || indexed("hostpci", 16)
}

/// pve-common `verify_storagepair` (one entry of a storage map).
fn check_storage_pair(value: &str) -> Result<(), String> {
    if value == "1" {
        return Ok(());
    }
    let ids: Vec<&str> = match value.split_once(':') {
        Some((source, target)) if !target.contains(':') => vec![source, target],
        _ => vec![value],
    };
    match ids.iter().find(|id| !is_pve_id(id)) {
        None => Ok(()),
        Some(bad) => Err(format!(
            "entry '{value}' contains invalid ID - storage ID '{bad}' contains illegal \
                characters\n\n\n"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_formats_accept_and_reject_like_pve() {
        assert!(check_named("pve-vmid", "100").is_ok());
        assert_eq!(
            check_named("pve-vmid", "099").unwrap_err(),
            "value does not look like a valid VM ID\n"
        );
        assert!(check_named("pve-tag-list", "proxy;b a,c").is_ok());
        assert_eq!(
            check_named("pve-tag-list", "ok;bad!").unwrap_err(),
            "invalid characters in tag\n"
        );
        assert!(check_named("mac-addr", "BC:24:11:AA:BB:CC").is_ok());
        assert!(check_named("mac-addr", "01:24:11:AA:BB:CC").is_err());
        assert!(check_named("dns-name", "edge-0.example").is_ok());
        assert!(check_named("dns-name", "-edge").is_err());
        assert!(check_named("pve-configid-list", "net1,ide2").is_ok());
        assert_eq!(
            check_named("pve-configid-list", "net1,2x").unwrap_err(),
            "invalid configuration ID '2x'\n"
        );
        assert!(check_named("pve-volume-id", "proxy-seeds:iso/a.iso").is_ok());
        assert!(check_named("pve-volume-id-or-qm-path", "none").is_ok());
        assert!(check_named("pve-ipv4-config", "10.0.0.5/24").is_ok());
        assert!(check_named("pve-ipv4-config", "10.0.0.5/4").is_err());
        assert!(check_named("pve-hotplug-features", "disk,network").is_ok());
        assert_eq!(
            check_named("pve-hotplug-features", "disk,floppy").unwrap_err(),
            "invalid hotplug feature 'floppy'\n"
        );
        assert!(check_named("pve-qm-bootdisk", "scsi30").is_ok());
        assert!(check_named("pve-qm-bootdisk", "scsi31").is_err());
        assert!(check_named("pve-startup-order", "order=1,up=30").is_ok());
        assert!(check_named("pve-startup-order", "first").is_err());
        assert!(check_named("pve-storage-id", "local-lvm").is_ok());
        assert_eq!(
            check_named("pve-storage-id", "9local").unwrap_err(),
            "storage ID '9local' contains illegal characters\n"
        );
    }
}
