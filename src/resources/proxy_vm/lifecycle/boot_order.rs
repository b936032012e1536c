//! What the node does with the VM when the node boots: `onboot` and the `startup` order,
//! written by the configure phase. Both are options PVE applies at once, also to a running
//! VM (qemu-server `PVE::QemuServer` `$fast_plug_option`), so they never wait for a reboot.

use pve::qemu::{ConfigUpdate, VmConfig};

use super::super::model::Desired;

/// `update` with `onboot` and `startup` where they differ from `current`. An unset start
/// order removes the VM's (one set by hand is drift); a `startup` PVE cannot parse is
/// rewritten.
pub(super) fn update(current: &VmConfig, desired: &Desired, update: ConfigUpdate) -> ConfigUpdate {
    let mut update = update;
    if current.onboot() != desired.start_on_boot {
        update = update.onboot(desired.start_on_boot);
    }
    let now = current.startup();
    let wanted = desired.startup.unwrap_or_default();
    let differs = match &now {
        None => !wanted.is_empty(),
        Some(Ok(now)) => *now != wanted,
        Some(Err(_)) => true,
    };
    if differs {
        update = update.startup(&wanted);
    }
    update
}

#[cfg(test)]
mod tests {
    use pve::wire::Startup;

    use super::*;
    use crate::resources::proxy_vm::model::Desired;

    fn config(json: serde_json::Value) -> VmConfig {
        serde_json::from_value(json).unwrap()
    }

    fn desired(start_on_boot: bool, startup: Option<Startup>) -> Desired {
        let planned = tfplugin::Value::object([("name", tfplugin::Value::string("edge-0"))]);
        let mut desired = Desired::from_plan(&planned, &tfplugin::Value::Null, "local", "");
        desired.start_on_boot = start_on_boot;
        desired.startup = startup;
        desired
    }

    #[test]
    fn onboot_and_startup_are_written_only_when_they_differ() {
        let order = Startup {
            order: Some(3),
            up: Some(20),
            down: None,
        };
        let plain = config(serde_json::json!({"cores": 1}));
        let form = update(&plain, &desired(true, Some(order)), ConfigUpdate::new()).to_form();
        assert_eq!(form.get("onboot"), Some("1"));
        assert_eq!(form.get("startup"), Some("order=3,up=20"));

        let set = config(serde_json::json!({"onboot": 1, "startup": "order=3,up=20"}));
        assert!(update(&set, &desired(true, Some(order)), ConfigUpdate::new()).is_empty());

        // Unset in the configuration: the VM's order (set by hand) is removed, onboot off.
        let form = update(&set, &desired(false, None), ConfigUpdate::new()).to_form();
        assert_eq!(form.get("onboot"), Some("0"));
        assert_eq!(form.get("delete"), Some("startup"));
    }
}
