//! What the configuration (or plan) asks for, typed.

use std::time::Duration;

use tfplugin::Value;

use super::super::seed_life::{SeedLifetime, WaitFor};
use super::super::{attr, schema};
use crate::validate;

/// What the configuration (or plan) asks for. Optional numbers are `None` when unset or
/// still unknown.
#[derive(Debug, Clone)]
pub struct Desired {
    pub name: String,
    pub node: String,
    pub template: String,
    pub vmid: Option<u32>,
    pub cores: Option<u32>,
    pub memory_mib: Option<u64>,
    pub disk_gib: Option<u64>,
    pub bridge: Option<String>,
    pub vlan_tag: Option<u16>,
    /// net0's MAC, when the configuration pins it (or the plan kept the state's).
    pub mac_address: Option<String>,
    pub tags: Option<Vec<String>>,
    pub user_data: Option<String>,
    pub network_config: Option<String>,
    pub seed_storage: String,
    pub clone_storage: Option<String>,
    pub pool: Option<String>,
    pub started: bool,
    pub wait_for: WaitFor,
    pub seed_lifetime: SeedLifetime,
    pub reboot_if_needed: bool,
    pub timeouts: Timeouts,
    /// How long cloud-init's verdict is waited for once the VM has its address.
    pub cloud_init_timeout: Duration,
    /// The fleet the VM belongs to (the provider's, for a new VM).
    pub fleet: String,
    /// Nodes placement may choose from when `node` is unset (all when `None`).
    pub node_candidates: Option<Vec<String>>,
    /// The random token of this create attempt, written into the mark (empty outside create).
    pub create_token: String,
    /// PVE's `onboot`.
    pub start_on_boot: bool,
    /// PVE's `startup`; `None`: no start order.
    pub startup: Option<pve::wire::Startup>,
    /// `ha`: the HA resource the VM is; `None` when unset.
    pub ha: Option<super::HaSpec>,
    /// The prior state set `ha`: an update that finds it unset removes the resource.
    pub ha_before: bool,
    /// The further NICs (`net1`…); `None`: unmanaged (`networks` unset).
    pub networks: Option<Vec<super::networks::Nic>>,
}

/// `cloud_init_timeout` when unset: long enough for a first boot that installs packages.
pub const DEFAULT_CLOUD_INIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub create: Duration,
    pub update: Duration,
    pub delete: Duration,
}

impl Timeouts {
    pub fn from_value(value: &Value) -> Self {
        let read = |name: &str| {
            value
                .get_attr(name)
                .as_str()
                .and_then(|text| validate::duration(text).ok())
                .unwrap_or_else(|| schema::default_timeout(name))
        };
        Self {
            create: read(attr::timeouts::CREATE),
            update: read(attr::timeouts::UPDATE),
            delete: read(attr::timeouts::DELETE),
        }
    }
}

fn str_attr(value: &Value, name: &str) -> Option<String> {
    value.get_attr(name).as_str().map(str::to_owned)
}

/// A boolean, or its declared default when unset or unknown.
fn bool_attr(value: &Value, name: &str) -> bool {
    value
        .get_attr(name)
        .as_bool()
        .unwrap_or_else(|| schema::default_bool(name))
}

/// `wait_for` as planned, or its default.
pub fn wait_for(planned: &Value) -> WaitFor {
    planned
        .get_attr(attr::WAIT_FOR)
        .as_str()
        .and_then(WaitFor::parse)
        .unwrap_or(WaitFor::CloudInit)
}

fn num_attr<T: TryFrom<i64>>(value: &Value, name: &str) -> Option<T> {
    value
        .get_attr(name)
        .as_i64()
        .and_then(|n| T::try_from(n).ok())
}

impl Desired {
    /// From a planned state (for everything) and the configuration (for the write-only
    /// seed inputs, which the plan never holds).
    pub fn from_plan(
        planned: &Value,
        config: &Value,
        default_seed_storage: &str,
        default_fleet: &str,
    ) -> Self {
        Self {
            name: str_attr(planned, attr::NAME).unwrap_or_default(),
            node: str_attr(planned, attr::NODE).unwrap_or_default(),
            template: str_attr(planned, attr::TEMPLATE).unwrap_or_default(),
            vmid: num_attr(planned, attr::VMID),
            cores: num_attr(planned, attr::CORES),
            memory_mib: num_attr(planned, attr::MEMORY),
            disk_gib: num_attr(planned, attr::DISK_GIB),
            bridge: str_attr(planned, attr::BRIDGE),
            vlan_tag: num_attr(planned, attr::VLAN_TAG),
            mac_address: str_attr(planned, attr::MAC_ADDRESS),
            tags: planned
                .get_attr(attr::TAGS)
                .as_string_list()
                .map(|tags| tags.into_iter().map(str::to_owned).collect()),
            user_data: str_attr(config, attr::USER_DATA),
            network_config: str_attr(config, attr::NETWORK_CONFIG),
            seed_storage: str_attr(planned, attr::SEED_STORAGE)
                .unwrap_or_else(|| default_seed_storage.to_owned()),
            clone_storage: str_attr(planned, attr::CLONE_STORAGE),
            pool: str_attr(planned, attr::POOL),
            started: bool_attr(planned, attr::STARTED),
            wait_for: wait_for(planned),
            seed_lifetime: planned
                .get_attr(attr::SEED_LIFETIME)
                .as_str()
                .and_then(SeedLifetime::parse)
                .unwrap_or(SeedLifetime::UntilReady),
            reboot_if_needed: bool_attr(planned, attr::REBOOT_IF_NEEDED),
            timeouts: Timeouts::from_value(planned.get_attr(attr::TIMEOUTS)),
            cloud_init_timeout: str_attr(planned, attr::CLOUD_INIT_TIMEOUT)
                .and_then(|text| validate::duration(text.as_str()).ok())
                .unwrap_or(DEFAULT_CLOUD_INIT_TIMEOUT),
            fleet: str_attr(planned, attr::FLEET).unwrap_or_else(|| default_fleet.to_owned()),
            node_candidates: planned
                .get_attr(attr::NODE_CANDIDATES)
                .as_string_list()
                .map(|nodes| nodes.into_iter().map(str::to_owned).collect()),
            create_token: String::new(),
            // Unset (or unknown), it follows `started` as the plan does.
            start_on_boot: planned
                .get_attr(attr::START_ON_BOOT)
                .as_bool()
                .unwrap_or_else(|| bool_attr(planned, attr::STARTED)),
            startup: super::startup_of(planned.get_attr(attr::STARTUP)),
            ha: super::HaSpec::of(planned.get_attr(attr::HA)),
            ha_before: false,
            networks: super::networks::desired(planned),
        }
    }

    /// The seed built for this VM.
    pub fn seed(&self, node: &str, vmid: u32) -> nocloud::Seed {
        let mut seed = nocloud::Seed::new(&self.name, format!("{node}/{vmid}"))
            .user_data(self.user_data.clone().unwrap_or_default());
        // Each create attempt writes its own file: a taken-over create's late upload can
        // never land in the file another create's VM boots from.
        if !self.create_token.is_empty() {
            seed = seed.attempt(&self.create_token);
        }
        if let Some(network) = &self.network_config {
            seed = seed.network_config(network.clone());
        }
        seed
    }
}
