//! What the provider needs of PVE, as the health check judges it: the oldest release, the
//! room a seed ISO needs, and the privileges on each ACL path.

/// The oldest PVE major release the provider supports.
pub const MIN_PVE_MAJOR: u32 = 9;

/// Below this many free bytes the ISO storage cannot take a seed ISO.
pub const MIN_ISO_FREE_BYTES: u64 = 1 << 20;

/// Privileges on `/vms` (or any ancestor, propagated) for clone, config, power, destroy and
/// agent reads: every VM call the provider makes.
pub const VM_PRIVILEGES: &[&str] = &[
    "VM.Allocate",
    "VM.Audit",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Disk",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileRead",
    "VM.PowerMgmt",
];

/// A privilege that another covers: qemu-server `API2/Qemu/Agent.pm` lets
/// `VM.GuestAgent.Unrestricted` do whatever `…FileRead` does.
pub const COVERED_BY: &[(&str, &str)] = &[("VM.GuestAgent.FileRead", "VM.GuestAgent.Unrestricted")];

/// What a missing privilege costs, and the command that grants it to the setup guide's role,
/// for the few whose lack does not stop every create.
pub fn privilege_hint(privilege: &str) -> Option<&'static str> {
    if privilege == "Sys.Console" {
        return Some(
            " Without it PVE refuses every change of an HA resource (pve-ha-manager \
             `API2/HA/Resources.pm`), so no VM with `ha` can be created. Grant it on `/` alone: \
             pveum acl modify / --tokens 'USER@REALM!TOKEN' --roles ProxyVMProvisioner \
             --propagate 0 (and the same with --users for the token's user)",
        );
    }
    (privilege == "VM.GuestAgent.FileRead").then_some(
        " Without it a create cannot read cloud-init's verdict: it warns, counts the VM ready at \
         its address and keeps its seed attached. Grant it: pveum role modify \
         ProxyVMProvisioner --append 1 --privs VM.GuestAgent.FileRead",
    )
}

/// Privilege on `/vms/{template}`: cloning reads the template.
pub const TEMPLATE_PRIVILEGES: &[&str] = &["VM.Clone"];

/// Privileges on `/storage/{iso_storage}`: upload (`AllocateTemplate`), delete
/// (`Allocate`) and list/status (`Audit`) of seed ISOs.
pub const ISO_STORAGE_PRIVILEGES: &[&str] = &[
    "Datastore.Allocate",
    "Datastore.AllocateTemplate",
    "Datastore.Audit",
];

/// Privilege on every storage a cloned disk lands on (the template's disk storages, or
/// the provider's `clone_storage`): clone and resize allocate space there.
pub const DISK_STORAGE_PRIVILEGES: &[&str] = &["Datastore.AllocateSpace"];

/// Privilege on `/nodes/{node}`: node status (version) for this check.
pub const NODE_PRIVILEGES: &[&str] = &["Sys.Audit"];

/// Privilege on `/sdn/zones/localnetwork/{bridge}` (`…/{bridge}/{tag}` with a VLAN tag) for
/// every bridge named in `bridges` and every NIC of the templates: PVE checks it before it
/// clones (`check_bridge_access`) and on every NIC a config write sets.
pub const BRIDGE_PRIVILEGES: &[&str] = &["SDN.Use"];

/// Privilege on `/` when the VMs use `ha`: pve-ha-manager's resource and rule writes check
/// `Sys.Console` on `/` (`API2/HA/Resources.pm`, `Rules.pm`), and so does qemu-server's
/// create with `ha-managed` (9.1.8).
pub const HA_PRIVILEGES: &[&str] = &["Sys.Console"];

/// Privilege on `/pool/{pool}` for every pool named in `pools`: without it PVE leaves the
/// `pool` out of `/cluster/resources`, so the provider cannot see which pool a VM is in.
pub const POOL_PRIVILEGES: &[&str] = &["Pool.Audit"];
