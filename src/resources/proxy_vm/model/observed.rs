//! What the cluster shows of one VM, and the state made from it.

use std::collections::BTreeMap;

use tfplugin::Value;

use super::super::{attr, schema};
use super::networks::{self, SeenNic};

/// What the cluster shows of one VM, read for drift.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub vmid: u32,
    pub node: String,
    pub name: String,
    pub mark: Option<crate::ownership::Mark>,
    pub cores: u32,
    pub memory_mib: u64,
    pub disk_gib: Option<u64>,
    pub disk_storage: Option<String>,
    pub bridge: Option<String>,
    pub vlan_tag: Option<u16>,
    pub mac: Option<String>,
    pub tags: Vec<String>,
    pub seed_volume: Option<String>,
    /// `ide2` holds no medium: the seed was detached once cloud-init finished.
    pub seed_detached: bool,
    pub status: String,
    pub running: bool,
    /// Seconds since the VM started, when PVE says.
    pub uptime: Option<u64>,
    pub pool: Option<String>,
    pub ipv4: Vec<String>,
    pub ipv6: Vec<String>,
    /// Config keys with a change PVE applies at the next boot.
    pub pending_keys: Vec<String>,
    /// What the VM runs with now, where a pending change differs.
    pub running_with: RunningValues,
    /// PVE's `onboot`.
    pub onboot: bool,
    /// PVE's `startup` (`None` when unset or unreadable).
    pub startup: Option<pve::wire::Startup>,
    /// The cluster listing shows the VM as an HA resource (`hastate`).
    pub ha_listed: bool,
    /// The further NICs, `net1` on.
    pub networks: Vec<SeenNic>,
    /// The config is PVE's `lock: destroyed` placeholder: a destroy task freed the disks
    /// and removes the VM when its worker ends.
    pub being_destroyed: bool,
}

/// The in-place attributes as the running VM has them (pending changes not applied).
#[derive(Debug, Clone, Default)]
pub struct RunningValues {
    pub cores: u32,
    pub memory_mib: u64,
    pub bridge: Option<String>,
    pub vlan_tag: Option<u16>,
    pub networks: Vec<SeenNic>,
}

impl Observed {
    /// The pending keys that an attribute of this resource shows.
    pub fn pending_attributes(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for name in self.pending_keys.iter().filter_map(|k| pending_name(k)) {
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }

    /// State from what the cluster shows, keeping what only the configuration knows from
    /// `prior` (null on import).
    pub fn to_state(&self, prior: &Value) -> Value {
        let mut state = Value::Object(BTreeMap::new());
        self.identity_into(prior, &mut state);
        self.hardware_into(prior, &mut state);
        self.seed_into(prior, &mut state);
        self.settings_into(prior, &mut state);
        self.guest_into(&mut state);
        state
    }

    /// Which VM it is: its ids, name, fleet, node and template.
    fn identity_into(&self, prior: &Value, state: &mut Value) {
        let mark = self.mark.as_ref();
        state.set_attr(attr::ID, Value::string(self.vmid.to_string()));
        state.set_attr(attr::VMID, Value::number(i64::from(self.vmid)));
        // A half-made VM has no name yet: the state keeps the configured one, so a refresh
        // still recognises the VM (its mark names it) and destroy removes it.
        let name = if self.name.is_empty() {
            kept(prior, attr::NAME).non_null_or(Value::string(&self.name))
        } else {
            Value::string(&self.name)
        };
        state.set_attr(attr::NAME, name);
        let fleet = mark
            .map(|m| Value::string(&m.fleet))
            .unwrap_or_else(|| kept(prior, attr::FLEET).non_null_or(Value::string("")));
        state.set_attr(attr::FLEET, fleet);
        // `node` is where the user asked for the VM; a migration does not change it.
        let node = kept(prior, attr::NODE).non_null_or(Value::string(&self.node));
        state.set_attr(attr::NODE, node);
        let template = mark
            .and_then(|m| m.template.as_deref())
            .map_or(Value::Null, Value::string);
        state.set_attr(
            attr::TEMPLATE,
            kept(prior, attr::TEMPLATE).non_null_or(template),
        );
    }

    /// CPU, memory, disk, network and tags.
    fn hardware_into(&self, prior: &Value, state: &mut Value) {
        // With reboot_if_needed, a change still pending (an interrupted reboot) shows as the
        // running value, so the next plan carries the change and its apply reboots.
        let show_running = kept(prior, attr::REBOOT_IF_NEEDED).as_bool() == Some(true)
            && self.running
            && !self.pending_attributes().is_empty();
        let (cores, memory_mib, bridge, vlan_tag, nics) = if show_running {
            let r = &self.running_with;
            (
                r.cores,
                r.memory_mib,
                r.bridge.clone(),
                r.vlan_tag,
                &r.networks,
            )
        } else {
            (
                self.cores,
                self.memory_mib,
                self.bridge.clone(),
                self.vlan_tag,
                &self.networks,
            )
        };
        state.set_attr(attr::NETWORKS, networks::state_value(prior, nics));
        state.set_attr(attr::CORES, Value::number(i64::from(cores)));
        state.set_attr(attr::MEMORY, Value::number(memory_mib as i64));
        let disk_gib = self
            .disk_gib
            .map_or(Value::Null, |g| Value::number(g as i64));
        state.set_attr(attr::DISK_GIB, disk_gib);
        state.set_attr(
            attr::BRIDGE,
            bridge.as_deref().map_or(Value::Null, Value::string),
        );
        let vlan_tag = vlan_tag.map_or(Value::Null, |t| Value::number(i64::from(t)));
        state.set_attr(attr::VLAN_TAG, vlan_tag);
        let tags = self.tags.iter().map(Value::string).collect();
        state.set_attr(attr::TAGS, Value::Set(tags));
    }

    /// The seed: its inputs (never stored), hash, storages and volume.
    fn seed_into(&self, prior: &Value, state: &mut Value) {
        state.set_attr(attr::USER_DATA, Value::Null);
        state.set_attr(attr::NETWORK_CONFIG, Value::Null);
        // A VM that boots another seed than the one this state made shows an empty hash,
        // which the plan replaces (see `seed_drift`).
        let seed_hash = if self.seed_drift(prior).is_some() {
            Value::string("")
        } else {
            self.mark
                .as_ref()
                .and_then(|m| m.seed_hash.as_deref())
                .map(Value::string)
                .unwrap_or_else(|| kept(prior, attr::SEED_HASH))
        };
        state.set_attr(attr::SEED_HASH, seed_hash);
        let seed_storage = self
            .seed_volume
            .as_deref()
            .and_then(|v| v.split_once(':'))
            .map_or(Value::Null, |(storage, _)| Value::string(storage));
        state.set_attr(
            attr::SEED_STORAGE,
            kept(prior, attr::SEED_STORAGE).non_null_or(seed_storage),
        );
        let disk_storage = self
            .disk_storage
            .as_deref()
            .map_or(Value::Null, Value::string);
        state.set_attr(
            attr::CLONE_STORAGE,
            kept(prior, attr::CLONE_STORAGE).non_null_or(disk_storage),
        );
        // The seed this state made stays recorded (destroy deletes it, and only it); a VM
        // without one recorded (an import) records the one it boots.
        let seed_volume = match made_seed(prior) {
            Some(made) => made,
            None => self.seed_volume.as_deref().unwrap_or_default(),
        };
        state.set_attr(attr::SEED_VOLUME, Value::string(seed_volume));
    }

    /// The pool, power, and what only the configuration says.
    fn settings_into(&self, prior: &Value, state: &mut Value) {
        let pool = self
            .pool
            .as_deref()
            .map(Value::string)
            .unwrap_or_else(|| kept(prior, attr::POOL));
        state.set_attr(attr::POOL, pool);
        state.set_attr(attr::STARTED, Value::Bool(self.running));
        let default = Value::Bool(schema::default_bool(attr::REBOOT_IF_NEEDED));
        let reboot = kept(prior, attr::REBOOT_IF_NEEDED).non_null_or(default);
        state.set_attr(attr::REBOOT_IF_NEEDED, reboot);
        let wait_for = Value::string(schema::default_text(attr::WAIT_FOR));
        state.set_attr(
            attr::WAIT_FOR,
            kept(prior, attr::WAIT_FOR).non_null_or(wait_for),
        );
        // With nothing to keep (an import), what the VM shows: a seed still attached is kept
        // by `"vm"`, so importing it plans no detach and no change (#43); the configuration's
        // default then plans the detach, as it would have.
        let lifetime = match self.seed_volume.as_deref() {
            Some(volume) if !volume.is_empty() => "vm",
            _ => schema::default_text(attr::SEED_LIFETIME),
        };
        let lifetime = kept(prior, attr::SEED_LIFETIME).non_null_or(Value::string(lifetime));
        state.set_attr(attr::SEED_LIFETIME, lifetime);
        for name in [
            attr::TIMEOUTS,
            attr::CLOUD_INIT_TIMEOUT,
            attr::NODE_CANDIDATES,
        ] {
            state.set_attr(name, kept(prior, name));
        }
        state.set_attr(attr::START_ON_BOOT, Value::Bool(self.onboot));
        state.set_attr(attr::STARTUP, super::startup_value(self.startup.as_ref()));
        // What the configuration wrote; a refresh puts PVE's values in (`observed_ha`).
        state.set_attr(attr::HA, kept(prior, attr::HA));
    }

    /// Where the VM runs and what its guest reports.
    fn guest_into(&self, state: &mut Value) {
        state.set_attr(attr::CURRENT_NODE, Value::string(&self.node));
        state.set_attr(attr::STATUS, Value::string(&self.status));
        let mac = self.mac.as_deref().unwrap_or_default();
        state.set_attr(attr::MAC_ADDRESS, Value::string(mac));
        let first = self.ipv4.first().map(String::as_str).unwrap_or_default();
        state.set_attr(attr::IPV4_ADDRESS, Value::string(first));
        let list =
            |addresses: &[String]| Value::List(addresses.iter().map(Value::string).collect());
        state.set_attr(attr::IPV4_ADDRESSES, list(&self.ipv4));
        state.set_attr(attr::IPV6_ADDRESSES, list(&self.ipv6));
    }

    /// Why the VM does not boot the seed this state made (`prior`'s `seed_volume`), or `None`
    /// when it does or the state recorded none. A VM booting another seed (another state's
    /// upload, a hand-attached ISO, none) runs another user-data than this configuration's.
    pub fn seed_drift(&self, prior: &Value) -> Option<String> {
        let made = made_seed(prior)?;
        if self.seed_detached {
            // Detached by `seed_lifetime = "until_ready"`: the guest keeps the instance it
            // booted; the mark's seed hash still says what it was made from.
            return None;
        }
        match self.seed_volume.as_deref() {
            Some(attached) if attached == made => None,
            Some(attached) => Some(format!(
                "VM {} boots the seed {attached}, not {made}, the one this state made",
                self.vmid
            )),
            None => Some(format!(
                "VM {} has no seed attached as ide2; this state made {made}",
                self.vmid
            )),
        }
    }
}

/// How a pending change of `key` is named: the table's name, and `networks` for a further
/// NIC (`net1`…), which no single attribute declares.
fn pending_name(key: &str) -> Option<&'static str> {
    let further_nic = key
        .strip_prefix("net")
        .and_then(|index| index.parse::<u8>().ok())
        .is_some_and(|index| (1..=networks::MAX_NET_INDEX).contains(&index));
    if further_nic {
        return Some(attr::NETWORKS);
    }
    schema::pending_name(key)
}

/// The seed volume a state recorded, if any.
fn made_seed(prior: &Value) -> Option<&str> {
    let value = prior.get_attr(attr::SEED_VOLUME);
    value
        .is_wholly_known()
        .then(|| value.as_str())
        .flatten()
        .filter(|v| !v.is_empty())
}

/// What only the configuration knows, from `prior`; a value still unknown in a plan counts as
/// absent.
fn kept(prior: &Value, name: &str) -> Value {
    let value = prior.get_attr(name);
    if value.is_wholly_known() {
        value.clone()
    } else {
        Value::Null
    }
}

trait NonNullOr {
    fn non_null_or(self, fallback: Value) -> Value;
}

impl NonNullOr for Value {
    fn non_null_or(self, fallback: Value) -> Value {
        if self.is_null() { fallback } else { self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_is_kept_through_a_read_that_does_not_report_one() {
        let observed = Observed {
            vmid: 100,
            node: "pve1".into(),
            ..Observed::default()
        };
        let prior = Value::object([("fleet", Value::string("blue"))]);
        assert_eq!(
            observed.to_state(&prior).get_attr(attr::FLEET),
            &Value::string("blue")
        );
        // A new VM (fleet still unknown in the plan) and an import start with the default.
        let planned = Value::object([("fleet", Value::Unknown)]);
        assert_eq!(
            observed.to_state(&planned).get_attr(attr::FLEET),
            &Value::string("")
        );
        assert_eq!(
            observed.to_state(&Value::Null).get_attr(attr::FLEET),
            &Value::string("")
        );
    }

    /// An import records `seed_lifetime` from what it finds: `"vm"` for a VM whose seed is
    /// still attached (so importing it plans no detach), the default for one without; a
    /// read with a prior value keeps it.
    #[test]
    fn an_import_keeps_a_seed_it_finds_attached() {
        let attached = Observed {
            vmid: 100,
            node: "pve1".into(),
            seed_volume: Some("proxy-seeds:iso/seed-a-1.iso".into()),
            ..Observed::default()
        };
        let lifetime = |observed: &Observed, prior: &Value| {
            observed
                .to_state(prior)
                .get_attr(attr::SEED_LIFETIME)
                .clone()
        };
        assert_eq!(lifetime(&attached, &Value::Null), Value::string("vm"));
        let detached = Observed {
            seed_volume: None,
            ..attached.clone()
        };
        assert_eq!(
            lifetime(&detached, &Value::Null),
            Value::string("until_ready")
        );
        let prior = Value::object([("seed_lifetime", Value::string("until_ready"))]);
        assert_eq!(lifetime(&attached, &prior), Value::string("until_ready"));
    }
}
