//! What each state's configuration says: a few named VMs (the same names in every state, so
//! a second state meets the first one's VMs) and their attributes, changed by [`Edit`]s and
//! rendered as HCL.

use crate::support::Workspace;

/// VM names per state: few, so that sequences revisit the same VMs often.
pub const SLOTS: usize = 3;
/// The slots random sequences use (present by default); the others only named sequences do
/// (the kill sweeps of a three-VM fleet), absent until an edit adds them.
pub const DRAWN_SLOTS: usize = 2;
/// The states (working directories) a sequence drives.
pub const STATES: usize = 2;
/// The templates a VM may be cloned from; the second is added to the simulated world.
pub const TEMPLATES: [&str; 2] = ["debian-13-proxy", "debian-13-proxy-b"];
/// The disk of both templates, in GiB: a `disk_gib` below it is refused at plan.
pub const TEMPLATE_DISK_GIB: u8 = 4;

/// One change to a state's configuration. Slots are indices below [`SLOTS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edit {
    /// The slot's resource block is in the configuration (or removed from it).
    Present(usize, bool),
    Cores(usize, u8),
    Memory(usize, u16),
    Tags(usize, bool),
    Started(usize, bool),
    /// An index into [`TEMPLATES`] (replaces the VM).
    Template(usize, u8),
    /// A variant of the user-data (replaces the VM); 3 and 4 reboot the guest in its first
    /// boot.
    UserData(usize, u8),
    /// `disk_gib` (0 = unset: the VM keeps its size); never below the template's.
    Disk(usize, u8),
    /// `create_before_destroy` on every resource of the state.
    Cbd(bool),
    /// `reboot_if_needed` (a change that needs a reboot reboots a running VM).
    Reboot(usize, bool),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub present: bool,
    pub cores: u8,
    pub memory: u16,
    pub tags: bool,
    pub started: bool,
    pub template: u8,
    pub user_data: u8,
    pub disk: u8,
    pub reboot: bool,
}

impl Default for Slot {
    fn default() -> Self {
        Self {
            present: true,
            cores: 1,
            memory: 512,
            tags: false,
            started: true,
            template: 0,
            user_data: 0,
            disk: 0,
            reboot: false,
        }
    }
}

/// One state's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateConfig {
    pub slots: [Slot; SLOTS],
    pub cbd: bool,
}

impl Default for StateConfig {
    fn default() -> Self {
        let slots = std::array::from_fn(|index| Slot {
            present: index < DRAWN_SLOTS,
            ..Slot::default()
        });
        Self { slots, cbd: false }
    }
}

impl StateConfig {
    pub fn apply(&mut self, edit: Edit) {
        match edit {
            Edit::Present(s, v) => self.slots[s].present = v,
            Edit::Cores(s, v) => self.slots[s].cores = v,
            Edit::Memory(s, v) => self.slots[s].memory = v,
            Edit::Tags(s, v) => self.slots[s].tags = v,
            Edit::Started(s, v) => self.slots[s].started = v,
            Edit::Template(s, v) => self.slots[s].template = v % TEMPLATES.len() as u8,
            Edit::UserData(s, v) => self.slots[s].user_data = v,
            // Smaller than the VM's disk replaces it (PVE cannot shrink disks).
            Edit::Disk(s, v) => self.slots[s].disk = v,
            Edit::Cbd(v) => self.cbd = v,
            Edit::Reboot(s, v) => self.slots[s].reboot = v,
        }
    }

    /// The configuration as HCL; `extra` is appended (import blocks).
    pub fn render(&self, state: usize, extra: &str) -> String {
        let mut out = format!(
            "{}\nprovider \"proxmox\" {{\n  seed_storage = \"proxy-seeds\"\n}}\n",
            Workspace::preamble()
        );
        for (index, slot) in self.slots.iter().enumerate() {
            if slot.present {
                out.push_str(&self.render_slot(state, index, slot));
            }
        }
        out.push_str(extra);
        out
    }

    fn render_slot(&self, state: usize, index: usize, slot: &Slot) -> String {
        let mut body = format!(
            "  name      = \"{}\"\n  template  = \"{}\"\n  cores     = {}\n  memory    = {}\n  \
             started   = {}\n",
            name(index),
            TEMPLATES[usize::from(slot.template)],
            slot.cores,
            slot.memory,
            slot.started,
        );
        // Each state's user-data differs from the other's, so a VM that boots another state's
        // seed is told apart by the seed's bytes as well as by its file name. Variants 3 and
        // 4 reboot the guest during its first boot, as real user-data does: mid final stage
        // (an upgrade with `package_reboot_if_required`) or at its end (`power_state`).
        let reboots = match slot.user_data {
            3 => "package_upgrade: true\\npackage_reboot_if_required: true\\n",
            4 => "power_state:\\n  mode: reboot\\n",
            _ => "",
        };
        body.push_str(&format!(
            "  user_data = \"#cloud-config\\nwrite_files:\\n  - path: /etc/motd\\n    content: \
             s{state}-v{}\\n{reboots}\"\n",
            slot.user_data
        ));
        if slot.tags {
            body.push_str("  tags      = [\"web\"]\n");
        }
        if slot.reboot {
            body.push_str("  reboot_if_needed = true\n");
        }
        if slot.disk > 0 {
            body.push_str(&format!("  disk_gib  = {}\n", slot.disk));
        }
        if self.cbd {
            body.push_str("  lifecycle {\n    create_before_destroy = true\n  }\n");
        }
        format!("\nresource \"proxmox_proxy_vm\" \"s{index}\" {{\n{body}}}\n")
    }

    /// The configuration with one slot's disk set below the template's (refused at plan).
    pub fn with_shrunk_disk(&self, slot: usize) -> StateConfig {
        let mut shrunk = self.clone();
        shrunk.slots[slot].present = true;
        shrunk.slots[slot].disk = TEMPLATE_DISK_GIB - 1;
        shrunk
    }
}

/// The VM name of a slot, the same in every state.
pub fn name(slot: usize) -> String {
    format!("fz-{slot}")
}

/// The resource address of a slot.
pub fn address(slot: usize) -> String {
    format!("proxmox_proxy_vm.s{slot}")
}
