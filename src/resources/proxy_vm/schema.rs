//! The `proxmox_proxy_vm` schema. Every attribute is declared once, in [`ATTRIBUTES`]: its
//! name, type, mode, flags and description, what a change to it does, how the plan sets it,
//! and how its configured value is checked. The wire schema ([`schema`]), the replacements,
//! the write-only list, [`validate_config`] and the generic part of the plan are derived
//! from that list, so adding an attribute touches it (and its name in `attr.rs`) only.

use std::time::Duration;

use tfplugin::{Attribute, AttributePath, Diagnostics, Schema, Value};

use super::attr;
use super::checks::{self, INVALID};
use crate::context::Configured;
pub use crate::schema_table::Mode;
use crate::schema_table::{self, Declared};
use crate::validate;
use crate::vmid::{PVE_VMID_MAX, PVE_VMID_MIN};

pub const TYPE_NAME: &str = "proxmox_proxy_vm";

/// The state's schema version: bump it with every change to the stored shape, and add the step
/// that carries the previous version forward in `upgrade.rs`. Version 1 added `fleet`;
/// version 2 `wait_for` (replacing `wait_for_address`) and `seed_lifetime`. The deprecated
/// `wait_for_address` left the schema before the first release without a version of its
/// own: a state that still holds it reads the same (an attribute the schema lacks is
/// ignored, and `wait_for` already says what it meant).
pub const SCHEMA_VERSION: i64 = 2;

const DESCRIPTION: &str = "A small proxy VM: a full clone of a cloud-init-ready template, given a \
    NoCloud seed ISO (user-data, network-config, and vendor-data that installs the QEMU guest \
    agent), configured, grown and started, all through the PVE API.\n\nA VM belongs to exactly one \
    resource instance. Create resumes after any interruption: a re-run adopts the *unfinished* VM \
    it left (recognised by the ownership mark in its description) and never clones a duplicate. A \
    *finished* VM with the same name and fleet, made by another state, workspace or team, is never \
    taken over, wherever it is in the cluster (a VM a `create_before_destroy` roll moved off the \
    name's first VMID included): the plan, and the create before any write, fail and say how to \
    import it, so one fleet and name never has two VMs. A VM without the mark is never \
    touched.\n\nEvery write is an owner's write: update and destroy read the VM's mark again \
    before each step and send every config write conditional on the digest they read, so a \
    VM that is no longer this state's (deleted by hand and made again at its VMID by another \
    state, its mark edited) is never changed, even by a saved plan or `-refresh=false`; the error \
    says why. Destroy first marks the VM `deleting`, so no create adopts it. Locks (a backup) and \
    transient API faults are waited out within `timeouts`.\n\n`lifecycle { create_before_destroy = \
    true }` works with a stable `name` (and `vmid` unset): the replacement is made beside its \
    predecessor, with its own VMID, seed and mark, and the predecessor is destroyed once the new \
    VM is up. A create killed after it finished but before Terraform stored it is resumed by the \
    next apply in the same working directory (the provider keeps a journal under `.terraform/`). \
    `terraform destroy` is never blocked by a plan-time check of a VM that does not exist: those \
    checks fail only an ordinary plan or apply, and every create runs them again before its first \
    write. The workflows guide has the details.";

/// What an attribute holds.
pub type Kind = schema_table::Kind<AttrSpec>;

/// What a change of an attribute does to an existing VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnChange {
    /// Nothing on the VM: it changes only what the provider does (how it waits, times out,
    /// places or reboots), or the attribute is not the configuration's to change.
    Setting,
    /// Written to the VM in place.
    InPlace,
    /// PVE cannot apply it to the VM: the plan replaces the VM.
    Replace,
    /// A smaller value replaces the VM (PVE cannot shrink disks); a larger one grows in place.
    ReplaceWhenShrunk,
    /// Applied in place, and may move the guest's address (unknown in the plan).
    MovesAddress,
    /// Applied in place, maybe pending until the next boot; when `reboot_if_needed` reboots
    /// for it, the guest's address may move.
    PendingUntilReboot,
}

impl OnChange {
    /// Whether a change is written to the existing VM (an update's work).
    pub fn writes_vm(self) -> bool {
        match self {
            OnChange::InPlace
            | OnChange::ReplaceWhenShrunk
            | OnChange::MovesAddress
            | OnChange::PendingUntilReboot => true,
            OnChange::Setting | OnChange::Replace => false,
        }
    }
}

/// The value an unset attribute stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultValue {
    Bool(bool),
    /// A duration as the configuration writes one (`"15m"`).
    Duration(&'static str),
    /// One of the attribute's spelled-out choices (`"cloud-init"`).
    Text(&'static str),
}

impl std::fmt::Display for DefaultValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DefaultValue::Bool(value) => write!(f, "{value}"),
            DefaultValue::Duration(text) => f.write_str(text),
            DefaultValue::Text(text) => write!(f, "\"{text}\""),
        }
    }
}

/// How the plan sets an attribute, beyond `tfplugin::plan::plan_computed` (the configured
/// value; unknown on create when computed and unset; on update the prior value).
#[derive(Clone, Copy, Debug)]
pub enum Planned {
    /// As `plan_computed` plans it.
    AsComputed,
    /// Unset in the configuration: the declared default.
    Default,
    /// Unset in the configuration: on create the provider's setting (when it has one), on
    /// update the prior value.
    ProviderDefault(fn(&Configured) -> Option<&str>),
    /// Empty on the create of a stopped VM; unknown when a change may move the address.
    GuestAddress,
    /// Set by a step of its own in `plan::plan_change`.
    ByRule,
}

/// A check of the configured value at validate, reported on the attribute.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// A known string, checked by a function that says what is wrong with it.
    Text(fn(&str) -> Result<(), String>),
    /// A known number: a whole number within these bounds (inclusive).
    Range(i64, i64),
    /// Anything else: the value (maybe null or unknown) and the path to report at.
    Custom(fn(&Value, &AttributePath, &mut Diagnostics)),
}

/// One attribute, declared once.
#[derive(Clone, Copy, Debug)]
pub struct AttrSpec {
    pub name: &'static str,
    pub kind: Kind,
    pub mode: Mode,
    /// Terraform hides the value in its output.
    pub sensitive: bool,
    /// Configured only: never in a plan or state (the plan answers null).
    pub write_only: bool,
    pub on_change: OnChange,
    pub planned: Planned,
    /// What an unset value stands for; the description says it.
    pub default: Option<DefaultValue>,
    /// The PVE config key that holds a change of this attribute when PVE applies it only at
    /// the next boot (a pending change).
    pub pending_key: Option<&'static str>,
    pub check: Option<Check>,
    /// Markdown; the registry docs are generated from it (with the default appended).
    pub description: &'static str,
}

impl AttrSpec {
    pub const fn new(name: &'static str, kind: Kind, mode: Mode) -> Self {
        Self {
            name,
            kind,
            mode,
            sensitive: false,
            write_only: false,
            on_change: OnChange::Setting,
            planned: Planned::AsComputed,
            default: None,
            pending_key: None,
            check: None,
            description: "",
        }
    }

    pub const fn sensitive(mut self) -> Self {
        self.sensitive = true;
        self
    }

    pub const fn write_only(mut self) -> Self {
        self.write_only = true;
        self
    }

    pub const fn replace_on_change(self) -> Self {
        self.on_change(OnChange::Replace)
    }

    pub const fn on_change(mut self, on_change: OnChange) -> Self {
        self.on_change = on_change;
        self
    }

    pub const fn planned(mut self, planned: Planned) -> Self {
        self.planned = planned;
        self
    }

    /// Unset, the attribute is `value`, in the plan too.
    pub const fn default_bool(mut self, value: bool) -> Self {
        self.default = Some(DefaultValue::Bool(value));
        self.planned = Planned::Default;
        self
    }

    /// Unset, the attribute is this text, in the plan too.
    pub const fn default_text(mut self, text: &'static str) -> Self {
        self.default = Some(DefaultValue::Text(text));
        self.planned = Planned::Default;
        self
    }

    /// Unset, the attribute is this duration (`"15m"`).
    pub const fn default_duration(mut self, text: &'static str) -> Self {
        self.default = Some(DefaultValue::Duration(text));
        self
    }

    pub const fn pending_key(mut self, key: &'static str) -> Self {
        self.pending_key = Some(key);
        self
    }

    pub const fn check(mut self, check: Check) -> Self {
        self.check = Some(check);
        self
    }

    pub const fn description(mut self, markdown: &'static str) -> Self {
        self.description = markdown;
        self
    }
}

impl Declared for AttrSpec {
    fn attribute(&self) -> Attribute {
        let description = match self.default {
            Some(default) => format!("{} Defaults to `{default}`.", self.description),
            None => self.description.to_owned(),
        };
        let mut attribute = schema_table::attribute(self.name, self.kind, self.mode);
        attribute.sensitive = self.sensitive;
        attribute.write_only = self.write_only;
        attribute.description(description)
    }
}

impl Check {
    /// Checks `value`, the configured value of `name`, into `diags`.
    fn run(self, name: &str, value: &Value, diags: &mut Diagnostics) {
        let at = AttributePath::root().attr(name);
        match self {
            Check::Text(check) => {
                if let Some(text) = value.as_str()
                    && let Err(why) = check(text)
                {
                    diags.attribute_error(at, INVALID, why);
                }
            }
            Check::Range(low, high) => {
                if let Some(number) = value.as_number() {
                    match number.as_i64() {
                        Some(n) if (low..=high).contains(&n) => {}
                        _ => diags.attribute_error(
                            at,
                            INVALID,
                            format!(
                                "Attribute {name} value must be a whole number between {low} \
                                 and {high}, got: {}",
                                number.as_f64()
                            ),
                        ),
                    }
                }
            }
            Check::Custom(check) => check(value, &at, diags),
        }
    }
}

fn provider_seed_storage(configured: &Configured) -> Option<&str> {
    Some(&configured.seed_storage)
}

fn provider_clone_storage(configured: &Configured) -> Option<&str> {
    configured.clone_storage.as_deref()
}

/// The attributes, in the order the schema lists them.
pub const ATTRIBUTES: &[AttrSpec] = &[
    AttrSpec::new(attr::ID, Kind::String, Mode::Computed)
        .description("The VMID as a string. Stable when the VM migrates to another node."),
    AttrSpec::new(attr::NAME, Kind::String, Mode::Required)
        .replace_on_change()
        .check(Check::Text(validate::vm_name))
        .description(
            "The VM's name and the guest's hostname: a DNS name. Changing it replaces the VM.",
        ),
    AttrSpec::new(attr::NODE, Kind::String, Mode::OptionalComputed)
        .replace_on_change()
        .check(Check::Text(validate::node_name))
        .description(
            "The node to create the VM on. Unset: the provider places the VM on an eligible node \
            (online, able to clone the template, with the seed storage, with every bridge the VM \
            will use (the template's NICs', net0's replaced by `bridge` when set, its further \
            NICs' by `networks` when set), and with memory left), the one with the most memory \
            not yet promised to VMs, then the fewest VMs of this fleet; parallel creates spread \
            out. Placement is exact within one apply; across \
            applies running at the same time (other states, other processes) it is best effort: \
            each sees only what the cluster lists, so two may pick the same node and together \
            promise it more memory than it has, which PVE allows (overcommit). `proxmox_health` \
            shows each node's `memory_promised_bytes` beside its `memory_total_bytes`. The chosen \
            node is kept in state and never re-planned. Changing it to another node replaces the \
            VM; setting it to the node the VM is on changes nothing. A VM moved to another node by \
            HA or migration is followed (see `current_node`), not replaced.",
        ),
    AttrSpec::new(attr::NODE_CANDIDATES, Kind::StringList, Mode::Optional).description(
        "With `node` unset: the nodes placement may choose from (all nodes when unset). Each \
            must be a node of the cluster (checked at plan). Changing it never moves an existing \
            VM.",
    ),
    AttrSpec::new(attr::TEMPLATE, Kind::String, Mode::Required)
        .replace_on_change()
        .check(Check::Text(validate::template_ref))
        .description(
            "The template to clone: its name or its VMID. It must be a template (`template: 1`) \
            visible from `node` (on the node, or on shared storage). Changing it replaces the VM.",
        ),
    AttrSpec::new(attr::VMID, Kind::Number, Mode::OptionalComputed)
        .replace_on_change()
        .check(Check::Range(PVE_VMID_MIN as i64, PVE_VMID_MAX as i64))
        .description(
            "The VMID. When unset, one is derived from `name` in the provider's VMID range (the \
            same name always starts at the same VMID, probing past VMs that are not ours). \
            Changing it replaces the VM.",
        ),
    AttrSpec::new(attr::CORES, Kind::Number, Mode::OptionalComputed)
        .on_change(OnChange::PendingUntilReboot)
        .pending_key("cores")
        .check(Check::Range(1, 512))
        .description(
            "CPU cores. Unset keeps the template's. Changes in place; a running VM may need a \
            reboot to see it (see `reboot_if_needed`).",
        ),
    AttrSpec::new(attr::MEMORY, Kind::Number, Mode::OptionalComputed)
        .on_change(OnChange::PendingUntilReboot)
        .pending_key("memory")
        .check(Check::Range(16, 16 * 1024 * 1024))
        .description(
            "Memory in MiB. Unset keeps the template's. Changes in place; a running VM may need a \
            reboot to see it.",
        ),
    AttrSpec::new(attr::DISK_GIB, Kind::Number, Mode::OptionalComputed)
        .on_change(OnChange::ReplaceWhenShrunk)
        .check(Check::Range(1, 128 * 1024))
        .description(
            "Size of the boot disk in GiB. Unset keeps the template's. Growing happens in place; a \
            value smaller than the current size replaces the VM, because PVE cannot shrink disks.",
        ),
    AttrSpec::new(attr::BRIDGE, Kind::String, Mode::OptionalComputed)
        .on_change(OnChange::MovesAddress)
        .pending_key("net0")
        .check(Check::Text(validate::bridge))
        .description(
            "Bridge of the first network interface (`net0`). Unset keeps the template's. Changes \
            in place and keeps the MAC address.",
        ),
    AttrSpec::new(attr::VLAN_TAG, Kind::Number, Mode::OptionalComputed)
        .on_change(OnChange::MovesAddress)
        .pending_key("net0")
        .check(Check::Range(1, 4094))
        .description(
            "VLAN tag of `net0`, 1–4094. Unset keeps the template's. Changes in place and keeps \
            the MAC address.",
        ),
    AttrSpec::new(attr::TAGS, Kind::StringSet, Mode::OptionalComputed)
        .on_change(OnChange::InPlace)
        .check(Check::Custom(checks::tags))
        .description(
            "PVE tags, in lower case: PVE lower-cases every tag it stores (unless the \
            datacenter's tag style is case-sensitive), so a tag with an upper-case letter is \
            refused at validate rather than planned in one case and read back in another. A \
            set: order and repeats do not matter. The provider's own ownership tag `proxyvm` is \
            always added and never shown here.",
        ),
    AttrSpec::new(attr::USER_DATA, Kind::String, Mode::Optional)
        .sensitive()
        .write_only()
        .check(Check::Custom(checks::user_data))
        .description(
            "cloud-init user-data: a `#cloud-config` document or a script (`#!`). Write-only: it \
            is never stored in the plan or state; a change is detected through `seed_hash` and \
            replaces the VM. An imported VM keeps its seed while `user_data` and `network_config` \
            are both unset (as `-generate-config-out` writes them); set either and the VM is \
            replaced with the new seed. Needs Terraform ≥ 1.11 or OpenTofu ≥ 1.11.",
        ),
    AttrSpec::new(attr::NETWORK_CONFIG, Kind::String, Mode::Optional)
        .sensitive()
        .write_only()
        .check(Check::Custom(checks::network_config))
        .description(
            "cloud-init network-config (version 2). Sensitive and write-only like `user_data`; a \
            change replaces the VM.",
        ),
    AttrSpec::new(attr::SEED_HASH, Kind::String, Mode::Computed)
        .replace_on_change()
        .planned(Planned::ByRule)
        .description(
            "HMAC-SHA256 of the seed's content (user-data, network-config, vendor-data), keyed \
            with the random token of the create that made the VM, so the same content gives a \
            different value on every VM and the value alone does not confirm a guessed \
            `user_data`. Known after the create; recorded in the VM's description so that changes \
            to the write-only inputs are detected, also after an import. States made before keyed \
            hashes keep their unkeyed SHA-256 until the VM is replaced. Empty when the VM boots \
            another seed than the one this state made (the plan then replaces it).",
        ),
    AttrSpec::new(attr::SEED_STORAGE, Kind::String, Mode::OptionalComputed)
        .replace_on_change()
        .planned(Planned::ProviderDefault(provider_seed_storage))
        .check(Check::Text(validate::storage_id))
        .description(
            "Storage for the seed ISO (content `iso`) on the VM's node. Defaults to the provider's \
            `seed_storage`. Changing it replaces the VM.",
        ),
    AttrSpec::new(attr::CLONE_STORAGE, Kind::String, Mode::OptionalComputed)
        .replace_on_change()
        .planned(Planned::ProviderDefault(provider_clone_storage))
        .check(Check::Text(validate::storage_id))
        .description(
            "Storage for the cloned disks. Defaults to the provider's `clone_storage`, else the \
            template's storage. Changing it replaces the VM.",
        ),
    AttrSpec::new(attr::POOL, Kind::String, Mode::Optional)
        .replace_on_change()
        .description("Resource pool to put the VM in. Changing it replaces the VM."),
    AttrSpec::new(attr::STARTED, Kind::Bool, Mode::OptionalComputed)
        .on_change(OnChange::MovesAddress)
        .default_bool(true)
        .description(
            "Whether the VM should be running. Changes in place; a VM found stopped behind \
            Terraform's back shows as drift and is started again.",
        ),
    AttrSpec::new(attr::WAIT_FOR, Kind::String, Mode::OptionalComputed)
        .default_text("cloud-init")
        .check(Check::Text(super::seed_life::check_wait_for))
        .description(
            "What a create (and an update that starts or reboots the VM) waits for, within its \
            timeout: `\"cloud-init\"`, the guest agent's IPv4 address and then cloud-init's \
            verdict (`/run/cloud-init/status.json`, read through the agent): errors fail the \
            create with cloud-init's own words (the VM is kept and tainted, the next apply \
            replaces it); `\"address\"`, the address only; `\"none\"`, nothing. A guest whose \
            agent refuses file reads, or a token without `VM.GuestAgent.FileRead`, gets a \
            warning and counts as ready at its address.",
        ),
    AttrSpec::new(attr::SEED_LIFETIME, Kind::String, Mode::OptionalComputed)
        .default_text("until_ready")
        .check(Check::Text(super::seed_life::check_seed_lifetime))
        .description(
            "How long the NoCloud seed ISO (which holds `user_data` in clear) stays: \
            `\"until_ready\"` detaches it (`ide2: none`) and deletes the ISO once cloud-init \
            finished without errors, so the VM can migrate and no secret stays on the storage; \
            a create that did not wait for cloud-init leaves it to a later apply, whose plan \
            shows the detach as an in-place change of `seed_volume` (an apply that starts a \
            VM created stopped waits for cloud-init and detaches it itself: its plan shows \
            `seed_volume` as known after apply). The guest needs a \
            cloud-init that honours `manual_cache_clean` (20.x or newer), which the seed's \
            vendor-data sets; a guest without it keeps its seed (with a warning). `\"vm\"` \
            keeps the seed attached until the VM is destroyed.",
        ),
    AttrSpec::new(attr::REBOOT_IF_NEEDED, Kind::Bool, Mode::OptionalComputed)
        .default_bool(false)
        .description(
            "Whether an update that PVE can only apply at the next boot (e.g. `cores` without CPU \
            hotplug) reboots the VM; without it, such changes are reported as pending in a \
            warning.",
        ),
    AttrSpec::new(
        attr::TIMEOUTS,
        Kind::Object(TIMEOUT_ATTRIBUTES),
        Mode::Optional,
    )
    .check(Check::Custom(checks::timeouts))
    .description(
        "How long each operation may take, as durations like `\"90s\"`, `\"15m\"` or \
            `\"1h30m\"`.",
    ),
    AttrSpec::new(attr::CLOUD_INIT_TIMEOUT, Kind::String, Mode::Optional)
        .check(Check::Text(checks::cloud_init_timeout))
        .description(
            "How long cloud-init's verdict is waited for once the VM has its address \
            (`wait_for = \"cloud-init\"`), apart from `timeouts.create`, e.g. `\"30m\"` for an \
            image that installs much on its first boot; unset: 15 minutes. A cloud-init still \
            running then, with no error so far, fails nothing: the apply warns, the VM stays in \
            the state untainted with its seed, and a later apply (its plan shows `seed_volume` \
            as known after apply) waits again and detaches the seed. Under \
            `create_before_destroy` the new VM's create fails instead, saying cloud-init is \
            still running, so the VM it replaces stays. Changing it changes nothing on the VM.",
        ),
    AttrSpec::new(attr::CURRENT_NODE, Kind::String, Mode::Computed)
        .description("The node the VM runs on now (differs from `node` after a migration)."),
    AttrSpec::new(attr::STATUS, Kind::String, Mode::Computed)
        .planned(Planned::ByRule)
        .description(
            "Power state: `running`, `stopped` or `paused`; `gone` when the VM was deleted \
            outside Terraform while the state still records its seed (the next apply replaces \
            it, a destroy deletes the seed).",
        ),
    AttrSpec::new(attr::MAC_ADDRESS, Kind::String, Mode::OptionalComputed)
        .on_change(OnChange::MovesAddress)
        .pending_key("net0")
        .check(Check::Text(validate::mac_address))
        .description(
            "MAC address of `net0`, upper case (`BC:24:11:0A:00:01`). Unset, the clone's own \
            (PVE makes one), kept across bridge and VLAN changes. Set it to keep a VM's \
            address from DHCP across replacements (a `user_data` change replaces the VM): the \
            new VM gets the same MAC. Under `create_before_destroy` two VMs would hold it \
            during the roll, so such a replacement's create refuses it, before any write, while \
            its predecessor holds the MAC: replace without `create_before_destroy`, or leave \
            `mac_address` unset. Changing it changes `net0` in place.",
        ),
    AttrSpec::new(attr::IPV4_ADDRESS, Kind::String, Mode::Computed)
        .planned(Planned::GuestAddress)
        .description(
            "The primary IPv4 address reported by the guest agent. An empty string, never \
             null, when the guest reports none (a stopped VM, no agent, a VM not waited for \
             whose agent has not answered yet), so it interpolates without a null check. A \
             plan shows it as known after apply only when the apply can change it (a create, \
             a network change, a reboot); in `terraform show -json` of a plan such a value is null \
             and marked unknown, which is how Terraform writes an unknown value there.",
        ),
    AttrSpec::new(attr::IPV4_ADDRESSES, Kind::StringList, Mode::Computed)
        .planned(Planned::GuestAddress)
        .description("Every global IPv4 address the guest agent reports."),
    AttrSpec::new(attr::IPV6_ADDRESSES, Kind::StringList, Mode::Computed)
        .planned(Planned::GuestAddress)
        .description("Every IPv6 address the guest agent reports."),
    AttrSpec::new(attr::SEED_VOLUME, Kind::String, Mode::Computed).description(
        "The seed ISO this state's create made, e.g. \
            `local:iso/seed-edge-0-1a2b3c4d-5e6f7a8b.iso`: the last part names the create attempt, \
            so two creates never write the same file. Destroy deletes this seed, and only when it \
            is this state's and the VM at the VMID (if another's) does not boot it.",
    ),
    AttrSpec::new(attr::FLEET, Kind::String, Mode::Computed)
        .planned(Planned::ByRule)
        .description(
            "The fleet (provider attribute `fleet`) this VM belongs to; part of its ownership \
            mark.",
        ),
    AttrSpec::new(attr::START_ON_BOOT, Kind::Bool, Mode::OptionalComputed)
        .on_change(OnChange::InPlace)
        .planned(Planned::ByRule)
        .description(
            "Whether the node starts the VM when it boots (PVE's `onboot`), so a node reboot \
            does not leave the proxy down until the next apply. Unset, it follows `started`: \
            a VM configured stopped is not started by its node's boot (a state written before \
            this default shows the change in its next plan, and nothing changes on PVE until \
            that apply). Changes in place, without a reboot. An HA-managed VM is started by the \
            HA manager instead, whatever this says.",
        ),
    AttrSpec::new(
        attr::STARTUP,
        Kind::Object(STARTUP_ATTRIBUTES),
        Mode::Optional,
    )
    .on_change(OnChange::InPlace)
    .check(Check::Custom(checks::startup))
    .description(
        "The VM's place in its node's start order (PVE's `startup`): `order` (lower starts \
            first and stops last), `up` (seconds the node waits after starting this VM before \
            starting the next) and `down` (seconds it waits for this VM to stop), each optional; \
            set at least one. Unset: no order (PVE starts such VMs last). Changes in place, \
            without a reboot; an order set by hand shows as drift.",
    ),
    AttrSpec::new(attr::HA, Kind::Object(HA_ATTRIBUTES), Mode::Optional)
        .on_change(OnChange::InPlace)
        .check(Check::Custom(checks::check_ha))
        .description(
            "Makes the VM a PVE HA resource (`vm:VMID`), so the HA manager restarts it, and \
            recovers it on another node when its node fails. Set, the create adds the resource \
            after the VM is configured and before its start (as PVE's own create with \
            `ha-managed` does), an update changes it in place, a replacement's new VM gets it \
            before its start (under `create_before_destroy`, before the old VM is destroyed), \
            and the destroy removes it with the VM. An operator's change of the resource shows \
            as drift in the plan. Unset, a VM an operator put under HA is followed as it is \
            (its power steps wait for the HA manager), and a plan that replaces it warns that \
            the new VM will not be under HA. Changing HA resources needs `Sys.Console` on `/` \
            (the setup guide's role has it).",
        ),
    AttrSpec::new(
        attr::NETWORKS,
        Kind::ObjectList(NETWORK_ATTRIBUTES),
        Mode::Optional,
    )
    .on_change(OnChange::MovesAddress)
    .planned(Planned::ByRule)
    .check(Check::Custom(checks::networks))
    .description(NETWORKS_DESCRIPTION),
];

/// The attributes of `ha`: the options of PVE 9's HA resource (pve-ha-manager 5.2.0).
pub const HA_ATTRIBUTES: &[AttrSpec] = &[
    AttrSpec::new(attr::ha::STATE, Kind::String, Mode::Optional).description(
        "The requested state, as `ha-manager` takes it: `\"started\"`, `\"stopped\"`, \
            `\"disabled\"` (stopped, and never recovered elsewhere; the way out of the HA \
            error state) or `\"ignored\"` (left alone by the HA manager). Unset, it follows \
            `started`. It must agree with `started`.",
    ),
    AttrSpec::new(attr::ha::MAX_RESTART, Kind::Number, Mode::Optional)
        .description("Restart tries on the same node after a failed start; PVE's default 1."),
    AttrSpec::new(attr::ha::MAX_RELOCATE, Kind::Number, Mode::Optional)
        .description("Relocations to other nodes after failed restarts; PVE's default 1."),
    AttrSpec::new(attr::ha::FAILBACK, Kind::Bool, Mode::Optional).description(
        "Move back to the node a node-affinity rule prefers once it is online again; PVE's \
            default `true`.",
    ),
    AttrSpec::new(attr::ha::COMMENT, Kind::String, Mode::Optional)
        .description("The resource's comment."),
];

const NETWORKS_DESCRIPTION: &str = "Further network interfaces, after `net0` (which `bridge`, \
    `vlan_tag` and `mac_address` configure): element *i* is PVE's `net<i+1>`, e.g. a backend \
    network beside the public one. Each has a `bridge`, an optional `vlan_tag` and an optional \
    `mac_address`, and the model of `net0` (`virtio` when the VM has no `net0`). Every bridge \
    must exist on the VM's node: checked at plan, and placement (with `node` unset) only \
    chooses nodes that have them all. The list is exactly the VM's further NICs: a template's \
    own `net1`… are replaced, and NICs beyond the list are removed. Unset: the VM keeps \
    whatever further NICs its template gave it, unmanaged; `[]`: none. Changing, adding or \
    removing an element is done in place, on a running VM too (PVE hot-plugs NICs unless the \
    VM's `hotplug` option leaves out `network`; then an added or removed NIC, or a new MAC, \
    waits for the next boot and the plan warns of it as pending). Elements are matched by \
    position: removing one that is not the last moves the later ones down a NIC (pin \
    `mac_address` to keep each MAC with its element). A NIC changed behind Terraform's back \
    shows as drift. Without `network_config` cloud-init configures DHCP on one NIC only; \
    address the others in `network_config` (version 2) with `match: {macaddress: ...}` on a \
    pinned `mac_address`, or by interface name (PVE puts `net0`…`net5` at PCI slots 18…23, \
    so a systemd guest names `net1` `ens19`). The guest agent's addresses of every NIC are \
    in `ipv4_addresses` and `ipv6_addresses`.";

/// The attributes of a `networks` element: a NIC `netN` (N ≥ 1), in PVE's `pve-qm-net`
/// terms (`bridge`, `tag`, `macaddr`); checked by `checks::networks`.
pub const NETWORK_ATTRIBUTES: &[AttrSpec] = &[
    AttrSpec::new(attr::networks::BRIDGE, Kind::String, Mode::Required)
        .description("The bridge the NIC is on, e.g. `vmbr1`; it must exist on the VM's node."),
    AttrSpec::new(attr::networks::VLAN_TAG, Kind::Number, Mode::Optional)
        .description("VLAN tag, 1–4094; unset: untagged."),
    AttrSpec::new(
        attr::networks::MAC_ADDRESS,
        Kind::String,
        Mode::OptionalComputed,
    )
    .description(
        "MAC address, upper case (`BC:24:11:0A:00:02`). Unset: PVE makes one, kept across \
            bridge and VLAN changes of this element. Pinned, it follows the same rule as \
            `mac_address` under `create_before_destroy`.",
    ),
];

/// The attributes of `startup`: whole numbers of PVE's `pve-startup-order` format.
pub const STARTUP_ATTRIBUTES: &[AttrSpec] = &[
    AttrSpec::new(attr::startup::ORDER, Kind::Number, Mode::Optional)
        .description("Position in the node's start order; lower first."),
    AttrSpec::new(attr::startup::UP, Kind::Number, Mode::Optional)
        .description("Seconds to wait after starting this VM."),
    AttrSpec::new(attr::startup::DOWN, Kind::Number, Mode::Optional)
        .description("Seconds to wait for this VM to stop."),
];

/// The attributes of `timeouts`: durations like `"15m"` (see `model::Timeouts`).
pub const TIMEOUT_ATTRIBUTES: &[AttrSpec] = &[
    AttrSpec::new(attr::timeouts::CREATE, Kind::String, Mode::Optional)
        .default_duration("15m")
        .description(
            "Create: the clone, seed, configuration, growth and start, and the wait for the \
            guest agent's address; cloud-init's verdict after it has its own bound, \
            `cloud_init_timeout`.",
        ),
    AttrSpec::new(attr::timeouts::UPDATE, Kind::String, Mode::Optional)
        .default_duration("10m")
        .description(
            "Update, including the wait for the address after a boot (and for the first \
            boot's verdict, within `cloud_init_timeout`, when the create could not wait for \
            it).",
        ),
    AttrSpec::new(attr::timeouts::DELETE, Kind::String, Mode::Optional)
        .default_duration("10m")
        .description("Delete."),
];

pub fn schema() -> Schema {
    Schema::new(schema_table::block(DESCRIPTION, ATTRIBUTES)).with_version(SCHEMA_VERSION)
}

/// The declaration of `name` in `table`.
///
/// # Panics
/// When `name` has none: every name of `attr.rs` has one (a test checks it).
pub fn spec_in(table: &'static [AttrSpec], name: &str) -> &'static AttrSpec {
    table
        .iter()
        .find(|spec| spec.name == name)
        .unwrap_or_else(|| panic!("`{name}` is not declared in the attribute table"))
}

/// What an unset boolean attribute stands for.
pub fn default_bool(name: &str) -> bool {
    match spec_in(ATTRIBUTES, name).default {
        Some(DefaultValue::Bool(value)) => value,
        other => panic!("`{name}` declares no boolean default: {other:?}"),
    }
}

/// What an unset text attribute stands for.
pub fn default_text(name: &str) -> &'static str {
    match spec_in(ATTRIBUTES, name).default {
        Some(DefaultValue::Text(text)) => text,
        other => panic!("`{name}` declares no text default: {other:?}"),
    }
}

/// What an unset `timeouts` attribute stands for.
pub fn default_timeout(name: &str) -> Duration {
    match spec_in(TIMEOUT_ATTRIBUTES, name).default {
        Some(DefaultValue::Duration(text)) => validate::duration(text)
            .unwrap_or_else(|why| panic!("the default of timeouts.{name}: {why}")),
        other => panic!("`timeouts.{name}` declares no duration default: {other:?}"),
    }
}

/// Attributes whose change an update writes to the VM.
pub fn written_in_place() -> Vec<&'static str> {
    names_where(|spec| spec.on_change.writes_vm())
}

/// The attributes a pending change of the PVE config key `key` stands for, in schema order.
pub fn pending_attributes(key: &str) -> Vec<&'static str> {
    names_where(|spec| spec.pending_key == Some(key))
}

/// How a pending change of the PVE config key `key` is named, in the plan's warning and in
/// the private state (of every earlier release too, so the form never changes): the
/// attributes that set it, `/`-joined (`net0` is `bridge/vlan_tag`). `None` for a key no
/// attribute sets.
pub fn pending_name(key: &str) -> Option<&'static str> {
    static NAMES: std::sync::OnceLock<Vec<(&'static str, String)>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let mut names: Vec<(&'static str, String)> = Vec::new();
        for key in ATTRIBUTES.iter().filter_map(|spec| spec.pending_key) {
            if names.iter().all(|(known, _)| *known != key) {
                names.push((key, pending_attributes(key).join("/")));
            }
        }
        names
    });
    names
        .iter()
        .find(|(known, _)| *known == key)
        .map(|(_, name)| name.as_str())
}

/// Attributes whose change cannot be applied to the existing VM.
pub fn replace_on_change() -> Vec<&'static str> {
    names_where(|spec| spec.on_change == OnChange::Replace)
}

/// The write-only arguments: never planned or stored.
pub fn write_only() -> Vec<&'static str> {
    names_where(|spec| spec.write_only)
}

/// The names of the attributes `pick` chooses, in schema order.
pub fn names_where(pick: impl Fn(&AttrSpec) -> bool) -> Vec<&'static str> {
    ATTRIBUTES
        .iter()
        .filter(|spec| pick(spec))
        .map(|spec| spec.name)
        .collect()
}

/// Checks on a configuration that need no API call: each attribute's [`Check`], in schema
/// order. Unknown values are skipped.
pub fn validate_config(config: &Value) -> Diagnostics {
    let mut diags = Diagnostics::new();
    for spec in ATTRIBUTES {
        if let Some(check) = spec.check {
            check.run(spec.name, config.get_attr(spec.name), &mut diags);
        }
    }
    checks::check_ha_with_started(config, &mut diags);
    checks::net0_mac_unique(config, &mut diags);
    diags
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is built in a const context, so its builders never run at run time: here
    /// each is run, and sets what it names and nothing else.
    #[test]
    fn each_builder_sets_what_it_names() {
        let plain = AttrSpec::new("probe", Kind::Bool, Mode::Optional);
        assert!(!plain.sensitive && !plain.write_only);
        assert_eq!(plain.on_change, OnChange::Setting);
        assert!(matches!(plain.planned, Planned::AsComputed));
        assert_eq!(
            (plain.default, plain.pending_key, plain.description),
            (None, None, "")
        );
        assert!(plain.check.is_none());

        let spec = plain
            .sensitive()
            .write_only()
            .replace_on_change()
            .pending_key("cores")
            .check(Check::Range(1, 4))
            .description("what it is");
        assert!(spec.sensitive && spec.write_only);
        assert_eq!(spec.on_change, OnChange::Replace);
        assert_eq!(spec.pending_key, Some("cores"));
        assert!(matches!(spec.check, Some(Check::Range(1, 4))));
        assert_eq!(spec.description, "what it is");
        let spec = spec.on_change(OnChange::InPlace).planned(Planned::ByRule);
        assert_eq!(spec.on_change, OnChange::InPlace);
        assert!(matches!(spec.planned, Planned::ByRule));

        // A declared default is what the plan shows, except a timeout's (never planned).
        let flag = plain.default_bool(true);
        assert_eq!(flag.default, Some(DefaultValue::Bool(true)));
        assert!(matches!(flag.planned, Planned::Default));
        let choice = plain.default_text("vm");
        assert_eq!(choice.default, Some(DefaultValue::Text("vm")));
        assert!(matches!(choice.planned, Planned::Default));
        let timeout = plain.default_duration("15m");
        assert_eq!(timeout.default, Some(DefaultValue::Duration("15m")));
        assert!(matches!(timeout.planned, Planned::AsComputed));
        assert_eq!(
            [flag, choice, timeout].map(|s| s.default.unwrap().to_string()),
            ["true", "\"vm\"", "15m"]
        );
    }

    #[test]
    fn every_attribute_has_a_description_and_a_unique_name() {
        let mut names = names_where(|_| true);
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ATTRIBUTES.len());
        assert!(ATTRIBUTES.iter().all(|spec| !spec.description.is_empty()));
    }

    #[test]
    fn derived_lists() {
        assert_eq!(
            replace_on_change(),
            [
                "name",
                "node",
                "template",
                "vmid",
                "seed_hash",
                "seed_storage",
                "clone_storage",
                "pool"
            ]
        );
        assert_eq!(write_only(), ["user_data", "network_config"]);
        assert_eq!(
            written_in_place(),
            [
                "cores",
                "memory",
                "disk_gib",
                "bridge",
                "vlan_tag",
                "tags",
                "started",
                "mac_address",
                "start_on_boot",
                "startup",
                "ha",
                "networks"
            ]
        );
        assert_eq!(
            pending_attributes("net0"),
            ["bridge", "vlan_tag", "mac_address"]
        );
        assert_eq!(pending_attributes("cores"), ["cores"]);
        assert_eq!(pending_name("net0"), Some("bridge/vlan_tag/mac_address"));
        assert_eq!(pending_name("memory"), Some("memory"));
        assert_eq!(pending_name("scsi0"), None);
    }

    #[test]
    fn every_name_in_attr_rs_has_a_spec() {
        let source = include_str!("attr.rs");
        let (top, nested) = source
            .split_once("pub mod timeouts")
            .expect("attr.rs has `mod timeouts`");
        let (timeouts, startup) = nested
            .split_once("pub mod startup")
            .expect("attr.rs has `mod startup` after `mod timeouts`");
        let (startup, ha_and_networks) = startup
            .split_once("pub mod ha")
            .expect("attr.rs has `mod ha` after `mod startup`");
        let (ha, networks) = ha_and_networks
            .split_once("pub mod networks")
            .expect("attr.rs has `mod networks` after `mod ha`");
        let names = schema_table::declared_names(networks);
        assert_eq!(names.len(), NETWORK_ATTRIBUTES.len(), "{names:?}");
        for name in names {
            spec_in(NETWORK_ATTRIBUTES, name);
        }
        let names = schema_table::declared_names(ha);
        assert_eq!(names.len(), HA_ATTRIBUTES.len(), "{names:?}");
        for name in names {
            spec_in(HA_ATTRIBUTES, name);
        }
        let names = schema_table::declared_names(startup);
        assert_eq!(names.len(), STARTUP_ATTRIBUTES.len(), "{names:?}");
        for name in names {
            spec_in(STARTUP_ATTRIBUTES, name);
        }
        let names = schema_table::declared_names(top);
        assert_eq!(names.len(), ATTRIBUTES.len(), "{names:?}");
        for name in names {
            spec_in(ATTRIBUTES, name);
        }
        let names = schema_table::declared_names(timeouts);
        assert_eq!(names.len(), TIMEOUT_ATTRIBUTES.len(), "{names:?}");
        for name in names {
            spec_in(TIMEOUT_ATTRIBUTES, name);
            default_timeout(name);
        }
    }

    #[test]
    fn defaults_are_declared_once_and_said_in_the_description() {
        assert!(default_bool(attr::STARTED));
        assert!(!default_bool(attr::REBOOT_IF_NEEDED));
        assert_eq!(
            default_timeout(attr::timeouts::CREATE),
            Duration::from_secs(15 * 60)
        );
        let started = spec_in(ATTRIBUTES, attr::STARTED).attribute();
        assert!(
            started.description.ends_with(" Defaults to `true`."),
            "{}",
            started.description
        );
        for spec in ATTRIBUTES {
            let planned_default = matches!(spec.planned, Planned::Default);
            let plain_default = matches!(
                spec.default,
                Some(DefaultValue::Bool(_) | DefaultValue::Text(_))
            );
            assert_eq!(planned_default, plain_default, "{}", spec.name);
            assert!(
                !spec.description.contains("Defaults to `"),
                "{}: the default is appended from the declaration",
                spec.name
            );
        }
    }

    #[test]
    fn tags_must_be_written_as_pve_stores_them() {
        let config = Value::object([(
            "tags",
            Value::Set(vec![Value::string("web"), Value::string("Edge")]),
        )]);
        let diags = validate_config(&config);
        assert_eq!(diags.iter().count(), 1, "{diags:?}");
        assert!(diags.iter().any(|d| d.detail.contains("write `edge`")));
    }

    #[test]
    fn startup_must_set_a_part_and_whole_non_negative_numbers() {
        let startup = |parts: Vec<(&str, Value)>| {
            let config = Value::object([("startup", Value::object(parts))]);
            validate_config(&config)
                .iter()
                .map(|d| d.detail.clone())
                .collect::<Vec<_>>()
        };
        let empty = startup(vec![
            ("order", Value::Null),
            ("up", Value::Null),
            ("down", Value::Null),
        ]);
        assert_eq!(empty.len(), 1, "{empty:?}");
        assert!(empty[0].contains("set at least one"), "{empty:?}");
        let negative = startup(vec![
            ("order", Value::number(-1)),
            ("up", Value::Null),
            ("down", Value::Null),
        ]);
        assert_eq!(negative.len(), 1, "{negative:?}");
        assert!(negative[0].contains("startup.order"), "{negative:?}");
        let fine = startup(vec![
            ("order", Value::number(2)),
            ("up", Value::number(30)),
            ("down", Value::Null),
        ]);
        assert!(fine.is_empty(), "{fine:?}");
    }

    #[test]
    fn each_nic_is_checked_on_its_element() {
        let nic = |bridge: &str, tag: Value, mac: Value| {
            Value::object([
                ("bridge", Value::string(bridge)),
                ("vlan_tag", tag),
                ("mac_address", mac),
            ])
        };
        let config = Value::object([
            ("mac_address", Value::string("BC:24:11:00:00:01")),
            (
                "networks",
                Value::List(vec![
                    nic("vmbr1", Value::number(20), Value::Unknown),
                    nic(
                        "1bad",
                        Value::number(5000),
                        Value::string("bc:24:11:00:00:02"),
                    ),
                    nic("vmbr2", Value::Null, Value::string("BC:24:11:00:00:03")),
                    nic("vmbr3", Value::Null, Value::string("BC:24:11:00:00:03")),
                    nic("vmbr4", Value::Null, Value::string("BC:24:11:00:00:01")),
                ]),
            ),
        ]);
        let diags = validate_config(&config);
        let found: Vec<String> = diags
            .iter()
            .map(|d| format!("{:?}", d.attribute.as_ref().unwrap().steps()))
            .collect();
        assert_eq!(diags.iter().count(), 5, "{diags:?}");
        // Each on its element, naming the attribute (see `checks::networks`).
        let at = |index: i64| {
            format!(
                "{:?}",
                AttributePath::root().attr("networks").index(index).steps()
            )
        };
        let expected = [at(1), at(1), at(1), at(3), at(4)];
        let mut found_sorted = found.clone();
        found_sorted.sort();
        assert_eq!(found_sorted, expected, "{diags:?}");
        let details: Vec<&str> = diags.iter().map(|d| d.detail.as_str()).collect();
        for name in [
            "networks[1].bridge",
            "networks[1].vlan_tag",
            "networks[1].mac_address",
            "networks[3].mac_address",
            "networks[4].mac_address",
        ] {
            assert!(
                details.iter().any(|d| d.starts_with(name)),
                "{name}: {details:?}"
            );
        }
        let fine = Value::object([(
            "networks",
            Value::List(vec![nic("vmbr1", Value::number(20), Value::Null)]),
        )]);
        assert!(validate_config(&fine).is_empty());
    }

    #[test]
    fn validation_points_at_attributes() {
        let config = Value::object([
            ("name", Value::string("edge_1")),
            ("vlan_tag", Value::number(5000)),
            ("cores", Value::Unknown),
            ("user_data", Value::string("hello")),
            (
                "timeouts",
                Value::object([("create", Value::string("soon"))]),
            ),
        ]);
        let diags = validate_config(&config);
        let paths: Vec<String> = diags
            .iter()
            .map(|d| format!("{:?}", d.attribute.as_ref().unwrap().steps()))
            .collect();
        assert_eq!(diags.iter().count(), 4, "{diags:?}");
        assert!(paths.iter().any(|p| p.contains("\"name\"")));
        assert!(paths.iter().any(|p| p.contains("\"vlan_tag\"")));
        assert!(paths.iter().any(|p| p.contains("\"user_data\"")));
        assert!(paths.iter().any(|p| p.contains("\"timeouts\"")));
    }
}
