//! Typed views of the resource's values: what the configuration asks for, and what the
//! cluster shows, turned into state.

use std::collections::BTreeMap;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use tfplugin::{AttributePath, Diagnostics, Value};

use super::{attr, schema};
use crate::validate;

pub const DEFAULT_CREATE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
pub const DEFAULT_UPDATE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
pub const DEFAULT_DELETE_TIMEOUT: Duration = Duration::from_secs(10 * 60);

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
    pub tags: Option<Vec<String>>,
    pub user_data: Option<String>,
    pub network_config: Option<String>,
    pub seed_storage: String,
    pub clone_storage: Option<String>,
    pub pool: Option<String>,
    pub started: bool,
    pub wait_for_address: bool,
    pub reboot_if_needed: bool,
    pub timeouts: Timeouts,
    /// The fleet the VM belongs to (the provider's, for a new VM).
    pub fleet: String,
    /// Nodes placement may choose from when `node` is unset (all when `None`).
    pub node_candidates: Option<Vec<String>>,
    /// The random token of this create attempt, written into the mark (empty outside create).
    pub create_token: String,
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub create: Duration,
    pub update: Duration,
    pub delete: Duration,
}

impl Timeouts {
    pub fn from_value(value: &Value) -> Self {
        let read = |name: &str, default: Duration| {
            value
                .get_attr(name)
                .as_str()
                .and_then(|text| validate::duration(text).ok())
                .unwrap_or(default)
        };
        Self {
            create: read(attr::timeouts::CREATE, DEFAULT_CREATE_TIMEOUT),
            update: read(attr::timeouts::UPDATE, DEFAULT_UPDATE_TIMEOUT),
            delete: read(attr::timeouts::DELETE, DEFAULT_DELETE_TIMEOUT),
        }
    }
}

fn str_attr(value: &Value, name: &str) -> Option<String> {
    value.get_attr(name).as_str().map(str::to_owned)
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
            started: planned.get_attr(attr::STARTED).as_bool().unwrap_or(true),
            wait_for_address: planned
                .get_attr(attr::WAIT_FOR_ADDRESS)
                .as_bool()
                .unwrap_or(true),
            reboot_if_needed: planned
                .get_attr(attr::REBOOT_IF_NEEDED)
                .as_bool()
                .unwrap_or(false),
            timeouts: Timeouts::from_value(planned.get_attr(attr::TIMEOUTS)),
            fleet: str_attr(planned, attr::FLEET).unwrap_or_else(|| default_fleet.to_owned()),
            node_candidates: planned
                .get_attr(attr::NODE_CANDIDATES)
                .as_string_list()
                .map(|nodes| nodes.into_iter().map(str::to_owned).collect()),
            create_token: String::new(),
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

/// The seed's content hash, known at plan time (before a VMID is) and changing exactly when
/// the seed's content does: HMAC-SHA256 of the content keyed with the create token, so the
/// value in the state, the plan and the VM's description does not confirm a guessed
/// `user_data` to whoever lacks the token, and two VMs with the same content show different
/// hashes. `None` for the key is the unkeyed SHA-256 of releases before keyed hashes (states
/// made before create tokens existed have no key).
pub fn seed_hash(
    key: Option<&str>,
    user_data: Option<&str>,
    network_config: Option<&str>,
) -> String {
    let mut message = Vec::new();
    // Lengths first, so moving bytes between fields changes the hash.
    for part in [
        user_data.unwrap_or_default().as_bytes(),
        network_config.map(str::as_bytes).unwrap_or(b"\0none"),
        nocloud::render::vendor_data_guest_agent().as_bytes(),
    ] {
        message.extend_from_slice(&(part.len() as u64).to_be_bytes());
        message.extend_from_slice(part);
    }
    let digest = match key {
        Some(key) => hmac_sha256(key.as_bytes(), &message),
        None => Sha256::digest(&message).into(),
    };
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// HMAC-SHA256 (RFC 2104).
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length (a longer one is hashed first): this never fails.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// What a plan shows as `seed_hash` for the configured seed content: the prior value while
/// the content is the same (whether the prior hash was keyed or made before keyed hashes),
/// otherwise the hash keyed with the state's create token.
pub fn planned_seed_hash(
    prior: Option<&str>,
    key: Option<&str>,
    user_data: Option<&str>,
    network_config: Option<&str>,
) -> String {
    let keyed = seed_hash(key, user_data, network_config);
    match prior {
        Some(prior) if prior == keyed => keyed,
        Some(prior) if key.is_some() && prior == seed_hash(None, user_data, network_config) => {
            prior.to_owned()
        }
        _ => keyed,
    }
}

pub use super::schema::validate_config;

/// The fleet a state's VM belongs to: states from before fleets existed have none, which is
/// the default fleet.
pub fn fleet_of(state: &Value) -> String {
    state
        .get_attr(attr::FLEET)
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub fn vmid_of(state: &Value) -> Option<u32> {
    state
        .get_attr(attr::VMID)
        .as_i64()
        .and_then(|v| u32::try_from(v).ok())
}

/// What the provider keeps in the state's private bytes (never shown in plans): the token of
/// the create that made the VM, so a state recognises its own VM and not another create's of
/// the same name, and the changes a read found pending, for the plan's warning.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Private {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_token: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// The VM came into this state by import: its seed was written from a `user_data` and
    /// `network_config` the configuration may not know (write-only values cannot be read
    /// back). While both are unset, the plan keeps the VM's seed instead of replacing it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub imported: bool,
}

impl Private {
    /// Private bytes from any earlier release (none, or not ours) read as empty.
    pub fn decode(bytes: &[u8]) -> Private {
        serde_json::from_slice(bytes).unwrap_or_default()
    }

    pub fn encode(&self) -> Vec<u8> {
        if *self == Private::default() {
            return Vec::new();
        }
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Refuses `user_data` and `network_config` when the client cannot treat them as write-only.
/// An older CLI does not know the write-only flag: it would keep the cloud-init content (often
/// passwords and keys) in plan and state, or reject our null plan as inconsistent. Checked at
/// validate and again at plan, since a client may skip validation.
pub fn refuse_write_only_without_support(config: &Value, client: &tfplugin::Client) -> Diagnostics {
    let mut diags = Diagnostics::new();
    if client.capabilities.write_only_attributes_allowed {
        return diags;
    }
    // Terraform validates before it configures the provider, so the version may be unknown yet.
    let cli = match client.describe() {
        Some(described) if client.version.is_some() => described,
        _ => format!(
            "The {} version running this command",
            client.name.unwrap_or("Terraform or OpenTofu")
        ),
    };
    // Write-only arguments are never planned or stored, so only a client that keeps them out
    // of plans and state (`write_only_attributes_allowed`) may be given them.
    for name in schema::write_only() {
        if config.get_attr(name).is_null() {
            continue;
        }
        diags.attribute_error(
            AttributePath::root().attr(name),
            format!("{name} needs Terraform >= 1.11 or OpenTofu >= 1.11"),
            format!(
                "`{name}` is a write-only argument: the provider uses it to build the VM's seed \
                 and never keeps it in the plan or state. {cli} does not support write-only \
                 arguments, so it would store the value (cloud-init content often holds passwords \
                 and keys); the provider refuses it instead.\n\nUpgrade to Terraform >= 1.11 or \
                 OpenTofu >= 1.11, or remove `{name}`: the VM then boots with the seed's \
                 vendor-data only (which installs the QEMU guest agent), and its configuration can \
                 come from the template instead. Everything else in this resource works with older \
                 versions."
            ),
        );
    }
    diags
}

/// How a pending change of `net0` is named (in the plan's warning, and in the private state
/// of every earlier release, so it never changes): the attributes that set `net0`.
const NET0_ATTRIBUTES: &str = "bridge/vlan_tag";

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
    pub status: String,
    pub running: bool,
    pub pool: Option<String>,
    pub ipv4: Vec<String>,
    pub ipv6: Vec<String>,
    /// Config keys with a change PVE applies at the next boot.
    pub pending_keys: Vec<String>,
    /// What the VM runs with now, where a pending change differs.
    pub running_with: RunningValues,
}

/// The in-place attributes as the running VM has them (pending changes not applied).
#[derive(Debug, Clone, Default)]
pub struct RunningValues {
    pub cores: u32,
    pub memory_mib: u64,
    pub bridge: Option<String>,
    pub vlan_tag: Option<u16>,
}

impl Observed {
    /// The pending keys that an attribute of this resource shows.
    pub fn pending_attributes(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for key in &self.pending_keys {
            let attribute = match key.as_str() {
                "cores" => attr::CORES,
                "memory" => attr::MEMORY,
                "net0" => NET0_ATTRIBUTES,
                _ => continue,
            };
            if !out.contains(&attribute) {
                out.push(attribute);
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
        let (cores, memory_mib, bridge, vlan_tag) = if show_running {
            let r = &self.running_with;
            (r.cores, r.memory_mib, r.bridge.clone(), r.vlan_tag)
        } else {
            (
                self.cores,
                self.memory_mib,
                self.bridge.clone(),
                self.vlan_tag,
            )
        };
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
        for (name, default) in [
            (attr::WAIT_FOR_ADDRESS, true),
            (attr::REBOOT_IF_NEEDED, false),
        ] {
            state.set_attr(name, kept(prior, name).non_null_or(Value::Bool(default)));
        }
        for name in [attr::TIMEOUTS, attr::NODE_CANDIDATES] {
            state.set_attr(name, kept(prior, name));
        }
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
    fn seed_hash_tracks_content_only() {
        for key in [None, Some("t0k3n")] {
            let a = seed_hash(key, Some("#cloud-config\n"), None);
            assert_eq!(a, seed_hash(key, Some("#cloud-config\n"), None));
            assert_ne!(a, seed_hash(key, Some("#cloud-config\n#x\n"), None));
            assert_ne!(
                a,
                seed_hash(key, Some("#cloud-config\n"), Some("version: 2\n"))
            );
            assert_ne!(
                seed_hash(key, Some("ab"), Some("")),
                seed_hash(key, Some("a"), Some("b"))
            );
            assert_eq!(a.len(), 64);
        }
    }

    #[test]
    fn the_keyed_seed_hash_differs_per_key() {
        let content = Some("#cloud-config\npassword: hunter2\n");
        let (a, b) = (
            seed_hash(Some("a"), content, None),
            seed_hash(Some("b"), content, None),
        );
        assert_ne!(
            a, b,
            "the same content under two tokens must not compare equal"
        );
        assert_ne!(a, seed_hash(None, content, None));
    }

    /// RFC 4231, section 4: every HMAC-SHA256 test case (case 5's output is truncated to 128
    /// bits there; its full value is compared by its prefix).
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        let long_key = [0xaa; 131];
        let cases: [(&[u8], &[u8], &str); 7] = [
            (
                &[0x0b; 20],
                b"Hi There",
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe",
                b"what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                &[0xaa; 20],
                &[0xdd; 50],
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            ),
            (
                &[
                    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                    23, 24, 25,
                ],
                &[0xcd; 50],
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                &[0x0c; 20],
                b"Test With Truncation",
                "a3b6167473100ee06e0c796c2955552b",
            ),
            (
                &long_key,
                b"Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                &long_key,
                b"This is a test using a larger than block-size key and a larger than block-size \
                  data. The key needs to be hashed before being used by the HMAC algorithm.",
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ];
        for (number, (key, data, expected)) in cases.into_iter().enumerate() {
            let mac = hmac_sha256(key, data);
            let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
            assert!(hex.starts_with(expected), "test case {}: {hex}", number + 1);
        }
    }

    /// Seed hashes are stored in states and in VMs' descriptions: the values today's code
    /// computes must never change (pinned from the hand-written HMAC this crate had before
    /// it used `hmac`), for unkeyed, short-keyed and longer-than-a-block keys.
    #[test]
    fn seed_hashes_stay_what_earlier_releases_stored() {
        let long_key = "k".repeat(100);
        let contents = [
            (None, None),
            (Some("#cloud-config\n"), None),
            (
                Some("#cloud-config\npackages: [nginx]\n"),
                Some("version: 2\n"),
            ),
        ];
        let pinned = [
            (
                None,
                [
                    "0c6939de7127d08c774e562bf15f08c39be5cbc4bed41b976dccc7e94b47fdea",
                    "25f4a82aec2f152dcb45a69cd5732632585feea80d328a91876e60f17e0d3693",
                    "d7a8121baba10c87b19bde304e67e1de14e24a561c44e3c5a0bc3182c89e1753",
                ],
            ),
            (
                Some("t0k3n"),
                [
                    "67679750123c487de04cd00df0cf17b2a1d311169263d46a6d651f2c26318c52",
                    "afb150e2255ccf58227f7b4635931fa0ae4570740affb8f679b52bd22ff4a98c",
                    "bf6bc794d8c237f10ed94acefcc10ec4060f5321a84be29431ab10a3a0a6e950",
                ],
            ),
            (
                Some(long_key.as_str()),
                [
                    "5bd906ddc45736c7cafaf45b8b06d189d3613675f55b9347d8941b6f1de0b193",
                    "d5652c62826476b052e7977d39cffb69669c7a7d497bbb3b8f0b9268a92fe958",
                    "90f72903265909d8053ec76df7ce6bc6c6300525b300e838ab5b4715af32a007",
                ],
            ),
        ];
        for (key, hashes) in pinned {
            for ((user_data, network_config), expected) in contents.iter().zip(hashes) {
                assert_eq!(
                    seed_hash(key, *user_data, *network_config),
                    expected,
                    "{key:?} {user_data:?} {network_config:?}"
                );
            }
        }
    }

    #[test]
    fn a_plan_keeps_the_prior_hash_while_the_content_is_the_same() {
        let content = Some("#cloud-config\n");
        let legacy = seed_hash(None, content, None);
        let keyed = seed_hash(Some("t"), content, None);
        // A state from before keyed hashes: same content, no replacement.
        assert_eq!(
            planned_seed_hash(Some(&legacy), Some("t"), content, None),
            legacy
        );
        assert_eq!(
            planned_seed_hash(Some(&legacy), None, content, None),
            legacy
        );
        assert_eq!(
            planned_seed_hash(Some(&keyed), Some("t"), content, None),
            keyed
        );
        // New content: the keyed hash of it, whatever the prior was.
        let other = Some("#cloud-config\n#x\n");
        assert_eq!(
            planned_seed_hash(Some(&legacy), Some("t"), other, None),
            seed_hash(Some("t"), other, None)
        );
        assert_eq!(
            planned_seed_hash(Some(""), Some("t"), content, None),
            keyed,
            "a drifted seed (empty hash) is replaced"
        );
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
    fn write_only_inputs_are_refused_for_clients_that_would_store_them() {
        let config = Value::object([
            ("name", Value::string("edge-0")),
            ("user_data", Value::string("#cloud-config\n")),
            ("network_config", Value::Unknown),
        ]);
        let mut client = tfplugin::Client::default();
        // At validate the provider is not configured yet: no version.
        let diags = refuse_write_only_without_support(&config, &client);
        let paths: Vec<_> = diags.iter().map(|d| d.attribute.clone().unwrap()).collect();
        assert_eq!(
            paths,
            [
                AttributePath::root().attr(attr::USER_DATA),
                AttributePath::root().attr(attr::NETWORK_CONFIG)
            ]
        );
        let detail = &diags.iter().next().unwrap().detail;
        assert!(
            detail.contains(
                "The Terraform or OpenTofu version running this command does not support \
                 write-only arguments"
            ),
            "{detail}"
        );
        assert!(detail.contains("Terraform >= 1.11 or OpenTofu >= 1.11"));
        assert!(!detail.contains("#cloud-config"), "never quote the value");

        client.version = Some("1.9.8".into());
        client.name = Some("Terraform");
        let diags = refuse_write_only_without_support(&config, &client);
        assert!(
            diags
                .iter()
                .all(|d| d.detail.contains("Terraform 1.9.8 does not support")),
            "{diags:?}"
        );

        // Without the write-only inputs an older client is fine.
        let plain = Value::object([("name", Value::string("edge-0"))]);
        assert!(refuse_write_only_without_support(&plain, &client).is_empty());

        client.capabilities.write_only_attributes_allowed = true;
        assert!(refuse_write_only_without_support(&config, &client).is_empty());
    }

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
