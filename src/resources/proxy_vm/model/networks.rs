//! The further NICs (`networks`, #41): element *i* is PVE's `net<i+1>`. Typed from a plan,
//! turned into state from what PVE holds, and planned (a MAC PVE made is kept by position).

use pve::qemu::VmConfig;
use pve::wire::NetConfig;
use tfplugin::Value;

use super::super::attr::{self, networks as nic};

/// The highest NIC index PVE knows (`net0` … `net31`, qemu-server's `MAX_NETS`).
pub const MAX_NET_INDEX: u8 = 31;

/// One further NIC as the configuration (or plan) asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    pub bridge: String,
    /// `None`: untagged.
    pub vlan_tag: Option<u16>,
    /// Pinned, or kept from the state by the plan; `None`: PVE makes (or keeps) one.
    pub mac_address: Option<String>,
}

/// A NIC as PVE holds it (`None` fields: absent from its value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeenNic {
    pub bridge: Option<String>,
    pub vlan_tag: Option<u16>,
    pub mac: Option<String>,
}

/// The planned list, when known: `None` when `networks` is unset (the VM's further NICs
/// are not managed) or unknown.
pub fn desired(planned: &Value) -> Option<Vec<Nic>> {
    let elements = planned.get_attr(attr::NETWORKS).as_elements()?;
    let nics = elements
        .iter()
        .map(|element| Nic {
            bridge: element
                .get_attr(nic::BRIDGE)
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            vlan_tag: element
                .get_attr(nic::VLAN_TAG)
                .as_i64()
                .and_then(|n| u16::try_from(n).ok()),
            mac_address: element
                .get_attr(nic::MAC_ADDRESS)
                .as_str()
                .filter(|mac| !mac.is_empty())
                .map(str::to_owned),
        })
        .collect();
    Some(nics)
}

/// The further NICs of a config, `net1` up to the highest present, a missing index as an
/// empty NIC (so a gap shows as drift and the next apply fills it).
pub fn seen(config: &VmConfig) -> Vec<SeenNic> {
    let highest = (1..=MAX_NET_INDEX)
        .rev()
        .find(|index| config.net(*index).is_some());
    let Some(highest) = highest else {
        return Vec::new();
    };
    (1..=highest)
        .map(|index| match config.net(index) {
            Some(Ok(net)) => SeenNic {
                bridge: net.bridge,
                vlan_tag: net.tag,
                mac: net.mac,
            },
            _ => SeenNic::default(),
        })
        .collect()
}

/// The state's `networks`: what PVE holds while the configuration manages them (`prior`'s
/// list is set, even partly unknown as planned), else null; an import (`prior` null) shows
/// what the VM has, if anything.
pub fn state_value(prior: &Value, seen: &[SeenNic]) -> Value {
    let managed = !prior.get_attr(attr::NETWORKS).is_null();
    let imported = prior.is_null() && !seen.is_empty();
    if !(managed || imported) {
        return Value::Null;
    }
    let elements = seen
        .iter()
        .map(|nic| {
            Value::object([
                (
                    nic::BRIDGE,
                    Value::string(nic.bridge.as_deref().unwrap_or_default()),
                ),
                (
                    nic::VLAN_TAG,
                    nic.vlan_tag
                        .map_or(Value::Null, |tag| Value::number(i64::from(tag))),
                ),
                (
                    nic::MAC_ADDRESS,
                    Value::string(nic.mac.as_deref().unwrap_or_default()),
                ),
            ])
        })
        .collect();
    Value::List(elements)
}

/// The planned `networks`: the configuration's elements, each MAC as configured, else the
/// prior element's at the same position (PVE keeps a NIC's MAC when only its bridge or VLAN
/// changes), else unknown (PVE makes one).
pub fn planned(prior: &Value, config: &Value) -> Value {
    let configured = config.get_attr(attr::NETWORKS);
    let Some(elements) = configured.as_elements() else {
        return configured.clone();
    };
    let prior_list = prior.get_attr(attr::NETWORKS);
    let planned = elements
        .iter()
        .enumerate()
        .map(|(index, element)| {
            if !element.is_known() {
                return element.clone();
            }
            let mut element = element.clone();
            if element.get_attr(nic::MAC_ADDRESS).is_null() {
                let kept = prior_list
                    .as_elements()
                    .and_then(|list| list.get(index))
                    .map(|prior| prior.get_attr(nic::MAC_ADDRESS))
                    .filter(|mac| mac.as_str().is_some_and(|m| !m.is_empty()));
                element.set_attr(nic::MAC_ADDRESS, kept.cloned().unwrap_or(Value::Unknown));
            }
            element
        })
        .collect();
    Value::List(planned)
}

/// The value of `net<index>` for `wanted`: the current NIC's (its model, MAC and other
/// options kept) with the bridge, tag and pinned MAC set, or a new NIC of `model`.
pub fn net_value(current: Option<NetConfig>, wanted: &Nic, model: &str) -> NetConfig {
    let mut net = current.unwrap_or_else(|| NetConfig {
        model: model.to_owned(),
        mac: None,
        bridge: None,
        tag: None,
        firewall: None,
        other: Default::default(),
    });
    net.bridge = Some(wanted.bridge.clone());
    net.tag = wanted.vlan_tag;
    if let Some(mac) = &wanted.mac_address {
        net.mac = Some(mac.clone());
    }
    net
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(bridge: &str, tag: Option<i64>, mac: Option<&str>) -> Value {
        Value::object([
            ("bridge", Value::string(bridge)),
            ("vlan_tag", tag.map_or(Value::Null, Value::number)),
            ("mac_address", mac.map_or(Value::Null, Value::string)),
        ])
    }

    fn with(list: Vec<Value>) -> Value {
        Value::object([("networks", Value::List(list))])
    }

    #[test]
    fn a_plan_keeps_macs_by_position_and_leaves_new_ones_to_pve() {
        let prior = with(vec![element("vmbr1", Some(20), Some("BC:24:11:00:00:02"))]);
        let config = with(vec![
            element("vmbr2", None, None),
            element("vmbr1", Some(30), None),
            element("vmbr3", None, Some("BC:24:11:00:00:09")),
        ]);
        let planned_list = planned(&prior, &config);
        let list = planned_list.as_elements().unwrap();
        assert_eq!(
            list[0].get_attr("mac_address"),
            &Value::string("BC:24:11:00:00:02")
        );
        assert_eq!(list[0].get_attr("bridge"), &Value::string("vmbr2"));
        assert_eq!(list[1].get_attr("mac_address"), &Value::Unknown);
        assert_eq!(
            list[2].get_attr("mac_address"),
            &Value::string("BC:24:11:00:00:09")
        );
        // Unset stays unset; a create plans every unpinned MAC unknown.
        assert!(planned_of(&prior, &Value::object([("networks", Value::Null)])).is_null());
        let created = planned(&Value::Null, &config);
        assert_eq!(
            created.as_elements().unwrap()[0].get_attr("mac_address"),
            &Value::Unknown
        );
    }

    fn planned_of(prior: &Value, config: &Value) -> Value {
        planned(prior, config)
    }

    #[test]
    fn desired_reads_each_element_and_none_when_unset() {
        let planned = with(vec![
            element("vmbr1", Some(20), None),
            element("vmbr2", None, Some("BC:24:11:00:00:09")),
        ]);
        assert_eq!(
            desired(&planned).unwrap(),
            vec![
                Nic {
                    bridge: "vmbr1".into(),
                    vlan_tag: Some(20),
                    mac_address: None
                },
                Nic {
                    bridge: "vmbr2".into(),
                    vlan_tag: None,
                    mac_address: Some("BC:24:11:00:00:09".into())
                },
            ]
        );
        assert!(desired(&Value::object([("networks", Value::Null)])).is_none());
        assert_eq!(desired(&with(vec![])).unwrap(), vec![]);
    }

    fn config(pairs: &[(&str, &str)]) -> VmConfig {
        let raw: serde_json::Map<String, serde_json::Value> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
            .collect();
        serde_json::from_value(serde_json::Value::Object(raw)).unwrap()
    }

    #[test]
    fn seen_lists_net1_up_to_the_highest_with_gaps_empty() {
        let vm = config(&[
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
            ("net1", "virtio=BC:24:11:00:00:02,bridge=vmbr1,tag=20"),
            ("net3", "virtio=BC:24:11:00:00:04,bridge=vmbr3"),
        ]);
        let seen = seen(&vm);
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0].bridge.as_deref(), Some("vmbr1"));
        assert_eq!(seen[0].vlan_tag, Some(20));
        assert_eq!(seen[1], SeenNic::default());
        assert_eq!(seen[2].mac.as_deref(), Some("BC:24:11:00:00:04"));
        // Shown while managed, and on import; null while unset.
        let managed = with(vec![]);
        assert_eq!(state_value(&managed, &seen).as_elements().unwrap().len(), 3);
        assert_eq!(
            state_value(&Value::Null, &seen)
                .as_elements()
                .unwrap()
                .len(),
            3
        );
        let unmanaged = Value::object([("networks", Value::Null)]);
        assert!(state_value(&unmanaged, &seen).is_null());
        assert!(state_value(&Value::Null, &[]).is_null());
        let shown = state_value(&managed, &seen);
        let gap = &shown.as_elements().unwrap()[1];
        assert_eq!(gap.get_attr("bridge"), &Value::string(""));
    }

    #[test]
    fn a_changed_nic_keeps_its_model_mac_and_options() {
        let current: NetConfig = "e1000=BC:24:11:00:00:02,bridge=vmbr1,firewall=1,tag=20"
            .parse()
            .unwrap();
        let wanted = Nic {
            bridge: "vmbr2".into(),
            vlan_tag: None,
            mac_address: None,
        };
        let net = net_value(Some(current), &wanted, "virtio");
        assert_eq!(
            net.to_string(),
            "e1000=BC:24:11:00:00:02,bridge=vmbr2,firewall=1"
        );
        let pinned = Nic {
            mac_address: Some("BC:24:11:00:00:09".into()),
            vlan_tag: Some(30),
            ..wanted
        };
        let new = net_value(None, &pinned, "virtio");
        assert_eq!(
            new.to_string(),
            "virtio=BC:24:11:00:00:09,bridge=vmbr2,tag=30"
        );
    }
}
