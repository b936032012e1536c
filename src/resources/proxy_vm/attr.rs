//! The attribute names of `proxmox_proxy_vm`, each written once. Code reads and writes values
//! through these (`planned.get_attr(attr::NODE)`), so a misspelt name does not compile; the
//! schema declares each attribute in `schema::ATTRIBUTES`.

pub const ID: &str = "id";
pub const NAME: &str = "name";
pub const NODE: &str = "node";
pub const NODE_CANDIDATES: &str = "node_candidates";
pub const TEMPLATE: &str = "template";
pub const VMID: &str = "vmid";
pub const CORES: &str = "cores";
pub const MEMORY: &str = "memory";
pub const DISK_GIB: &str = "disk_gib";
pub const BRIDGE: &str = "bridge";
pub const VLAN_TAG: &str = "vlan_tag";
pub const TAGS: &str = "tags";
pub const USER_DATA: &str = "user_data";
pub const NETWORK_CONFIG: &str = "network_config";
pub const SEED_HASH: &str = "seed_hash";
pub const SEED_STORAGE: &str = "seed_storage";
pub const CLONE_STORAGE: &str = "clone_storage";
pub const POOL: &str = "pool";
pub const STARTED: &str = "started";
pub const WAIT_FOR: &str = "wait_for";
pub const SEED_LIFETIME: &str = "seed_lifetime";
pub const REBOOT_IF_NEEDED: &str = "reboot_if_needed";
pub const TIMEOUTS: &str = "timeouts";
pub const CLOUD_INIT_TIMEOUT: &str = "cloud_init_timeout";
pub const CURRENT_NODE: &str = "current_node";
pub const STATUS: &str = "status";
pub const MAC_ADDRESS: &str = "mac_address";
pub const IPV4_ADDRESS: &str = "ipv4_address";
pub const IPV4_ADDRESSES: &str = "ipv4_addresses";
pub const IPV6_ADDRESSES: &str = "ipv6_addresses";
pub const SEED_VOLUME: &str = "seed_volume";
pub const FLEET: &str = "fleet";
pub const START_ON_BOOT: &str = "start_on_boot";
pub const STARTUP: &str = "startup";
pub const HA: &str = "ha";
pub const NETWORKS: &str = "networks";

/// The attributes of the `timeouts` object.
pub mod timeouts {
    pub const CREATE: &str = "create";
    pub const UPDATE: &str = "update";
    pub const DELETE: &str = "delete";
}

/// The attributes of the `startup` object.
pub mod startup {
    pub const ORDER: &str = "order";
    pub const UP: &str = "up";
    pub const DOWN: &str = "down";
}

/// The attributes of the `ha` object.
pub mod ha {
    pub const STATE: &str = "state";
    pub const MAX_RESTART: &str = "max_restart";
    pub const MAX_RELOCATE: &str = "max_relocate";
    pub const FAILBACK: &str = "failback";
    pub const COMMENT: &str = "comment";
}

/// The attributes of each `networks` element.
pub mod networks {
    pub const BRIDGE: &str = "bridge";
    pub const VLAN_TAG: &str = "vlan_tag";
    pub const MAC_ADDRESS: &str = "mac_address";
}
