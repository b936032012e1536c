//! The `proxmox_proxy_vm` schema.

use tfplugin::{Attribute, Block, Nesting, Schema, Type};

pub const TYPE_NAME: &str = "proxmox_proxy_vm";

/// The state's schema version: bump it with every change to the stored shape, and add the step
/// that carries the previous version forward in `upgrade.rs`.
pub const SCHEMA_VERSION: i64 = 1;

/// Attributes whose change cannot be applied to the existing VM.
pub const REPLACE_ON_CHANGE: &[&str] = &[
    "name",
    "node",
    "template",
    "vmid",
    "seed_storage",
    "clone_storage",
    "pool",
    "seed_hash",
];

pub fn schema() -> Schema {
    let s = |name: &str| Attribute::new(name, Type::String);
    let n = |name: &str| Attribute::new(name, Type::Number);
    let b = |name: &str| Attribute::new(name, Type::Bool);
    Schema::new(
        Block::new()
            .description(
                "A small proxy VM: a full clone of a cloud-init-ready template, given a NoCloud seed ISO (user-data, network-config, and vendor-data that installs the QEMU guest agent), configured, grown and started, all through the PVE API.\n\nA VM belongs to exactly one resource instance. Create resumes after any interruption: a re-run adopts the *unfinished* VM it left (recognised by the ownership mark in its description) and never clones a duplicate. A *finished* VM with the same name and fleet, made by another state, workspace or team, is never taken over: the create fails before any write and says how to import it. A VM without the mark is never touched.\n\nEvery write is an owner's write: update and destroy read the VM's mark again before each step and send every config write conditional on the digest they read, so a VM that is no longer this state's (deleted by hand and made again at its VMID by another state, its mark edited) is never changed, even by a saved plan or `-refresh=false`; the error says why. Destroy first marks the VM `deleting`, so no create adopts it. Locks (a backup) and transient API faults are waited out within `timeouts`.\n\n`lifecycle { create_before_destroy = true }` works with a stable `name` (and `vmid` unset): the replacement is made beside its predecessor, with its own VMID, seed and mark, and the predecessor is destroyed once the new VM is up. A create killed after it finished but before Terraform stored it is resumed by the next apply in the same working directory (the provider keeps a journal under `.terraform/`). `terraform destroy` is never blocked by a plan-time check of a VM that does not exist: those checks fail only an ordinary plan or apply, and every create runs them again before its first write. The workflows guide has the details.",
            )
            .attribute(s("id").computed().description("The VMID as a string. Stable when the VM migrates to another node."))
            .attribute(s("name").required().description("The VM's name and the guest's hostname: a DNS name. Changing it replaces the VM."))
            .attribute(s("node").optional().computed().description("The node to create the VM on. Unset: the provider places the VM on an eligible node (online, able to clone the template, with the seed storage, with every bridge the VM will use (the template's NICs', net0's replaced by `bridge` when set), and with memory left), the one with the most memory not yet promised to VMs, then the fewest VMs of this fleet; parallel creates spread out. Placement is exact within one apply; across applies running at the same time (other states, other processes) it is best effort: each sees only what the cluster lists, so two may pick the same node and together promise it more memory than it has, which PVE allows (overcommit). `proxmox_health` shows each node's `memory_promised_bytes` beside its `memory_total_bytes`. The chosen node is kept in state and never re-planned. Changing it to another node replaces the VM; setting it to the node the VM is on changes nothing. A VM moved to another node by HA or migration is followed (see `current_node`), not replaced."))
            .attribute(Attribute::new("node_candidates", Type::list(Type::String)).optional().description("With `node` unset: the nodes placement may choose from (all nodes when unset). Each must be a node of the cluster (checked at plan). Changing it never moves an existing VM."))
            .attribute(s("template").required().description("The template to clone: its name or its VMID. It must be a template (`template: 1`) visible from `node` (on the node, or on shared storage). Changing it replaces the VM."))
            .attribute(n("vmid").optional().computed().description("The VMID. When unset, one is derived from `name` in the provider's VMID range (the same name always starts at the same VMID, probing past VMs that are not ours). Changing it replaces the VM."))
            .attribute(n("cores").optional().computed().description("CPU cores. Unset keeps the template's. Changes in place; a running VM may need a reboot to see it (see `reboot_if_needed`)."))
            .attribute(n("memory").optional().computed().description("Memory in MiB. Unset keeps the template's. Changes in place; a running VM may need a reboot to see it."))
            .attribute(n("disk_gib").optional().computed().description("Size of the boot disk in GiB. Unset keeps the template's. Growing happens in place; a value smaller than the current size replaces the VM, because PVE cannot shrink disks."))
            .attribute(s("bridge").optional().computed().description("Bridge of the first network interface (`net0`). Unset keeps the template's. Changes in place and keeps the MAC address."))
            .attribute(n("vlan_tag").optional().computed().description("VLAN tag of `net0`, 1–4094. Unset keeps the template's. Changes in place and keeps the MAC address."))
            .attribute(Attribute::new("tags", Type::set(Type::String)).optional().computed().description("PVE tags, normalised as PVE stores them (lower case, sorted, unique). The provider's own ownership tag `proxyvm` is always added and never shown here."))
            .attribute(s("user_data").optional().sensitive().write_only().description("cloud-init user-data: a `#cloud-config` document or a script (`#!`). Write-only: it is never stored in the plan or state; a change is detected through `seed_hash` and replaces the VM. An imported VM keeps its seed while `user_data` and `network_config` are both unset (as `-generate-config-out` writes them); set either and the VM is replaced with the new seed. Needs Terraform ≥ 1.11 or OpenTofu ≥ 1.11."))
            .attribute(s("network_config").optional().sensitive().write_only().description("cloud-init network-config (version 2). Sensitive and write-only like `user_data`; a change replaces the VM."))
            .attribute(s("seed_hash").computed().description("HMAC-SHA256 of the seed's content (user-data, network-config, vendor-data), keyed with the random token of the create that made the VM, so the same content gives a different value on every VM and the value alone does not confirm a guessed `user_data`. Known after the create; recorded in the VM's description so that changes to the write-only inputs are detected, also after an import. States made before keyed hashes keep their unkeyed SHA-256 until the VM is replaced. Empty when the VM boots another seed than the one this state made (the plan then replaces it)."))
            .attribute(s("seed_storage").optional().computed().description("Storage for the seed ISO (content `iso`) on the VM's node. Defaults to the provider's `seed_storage`. Changing it replaces the VM."))
            .attribute(s("clone_storage").optional().computed().description("Storage for the cloned disks. Defaults to the provider's `clone_storage`, else the template's storage. Changing it replaces the VM."))
            .attribute(s("pool").optional().description("Resource pool to put the VM in. Changing it replaces the VM."))
            .attribute(b("started").optional().computed().description("Whether the VM should be running. Defaults to `true`. Changes in place; a VM found stopped behind Terraform's back shows as drift and is started again."))
            .attribute(b("wait_for_address").optional().computed().description("Whether create waits, within the create timeout, until the guest agent reports an IPv4 address. Defaults to `true`."))
            .attribute(b("reboot_if_needed").optional().computed().description("Whether an update that PVE can only apply at the next boot (e.g. `cores` without CPU hotplug) reboots the VM. Defaults to `false`: such changes are reported as pending in a warning."))
            .attribute(Attribute::nested(
                "timeouts",
                Nesting::Single,
                vec![
                    s("create").optional().description("Create, including waiting for an address. Default `15m`."),
                    s("update").optional().description("Update. Default `10m`."),
                    s("delete").optional().description("Delete. Default `10m`."),
                ],
            ).optional().description("How long each operation may take, as durations like `\"90s\"`, `\"15m\"` or `\"1h30m\"`."))
            .attribute(s("current_node").computed().description("The node the VM runs on now (differs from `node` after a migration)."))
            .attribute(s("status").computed().description("Power state: `running`, `stopped` or `paused`."))
            .attribute(s("mac_address").computed().description("MAC address of `net0`, kept across bridge and VLAN changes."))
            .attribute(s("ipv4_address").computed().description("The primary IPv4 address reported by the guest agent (empty when unknown)."))
            .attribute(Attribute::new("ipv4_addresses", Type::list(Type::String)).computed().description("Every global IPv4 address the guest agent reports."))
            .attribute(Attribute::new("ipv6_addresses", Type::list(Type::String)).computed().description("Every IPv6 address the guest agent reports."))
            .attribute(s("seed_volume").computed().description("The seed ISO this state's create made, e.g. `local:iso/seed-edge-0-1a2b3c4d-5e6f7a8b.iso`: the last part names the create attempt, so two creates never write the same file. Destroy deletes this seed, and only when it is this state's and the VM at the VMID (if another's) does not boot it."))
            .attribute(s("fleet").computed().description("The fleet (provider attribute `fleet`) this VM belongs to; part of its ownership mark.")),
    )
    // Version 1 added `fleet`; `upgrade.rs` carries every earlier version's state forward.
    .with_version(SCHEMA_VERSION)
}
