//! What a stored state says about the VM it tracks.

use tfplugin::Value;

use super::super::attr;

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

/// The status a refresh records for a VM no longer at its VMID whose seed the state still
/// records: the instance stays so that its seed is deleted (see `refresh`).
pub const STATUS_GONE: &str = "gone";

/// Whether the state's last refresh found its VM gone, its seed left.
pub fn vm_is_gone(state: &Value) -> bool {
    state.get_attr(attr::STATUS).as_str() == Some(STATUS_GONE)
}
