//! What a plan says about HA: a replacement of a VM an operator put under HA, with `ha`
//! unset, makes a VM outside HA (the destroy's `purge` removes the old VM's resource, and the
//! create adds none), so the plan warns before anything happens.

use tfplugin::{AttributePath, Diagnostic, Diagnostics, Value};

use super::attr;
use super::model::{Private, vmid_of};

/// See the module doc.
pub(super) fn warn_replacement_drops_ha(
    private: &Private,
    prior: &Value,
    config: &Value,
    replacing: bool,
    diagnostics: &mut Diagnostics,
) {
    let Some(vmid) = vmid_of(prior) else { return };
    if !(replacing && private.operator_ha && config.get_attr(attr::HA).is_null()) {
        return;
    }
    diagnostics.push(
        Diagnostic::warning(
            "The replacement will not be under HA",
            format!(
                "VM {vmid} is an HA resource (vm:{vmid}), put under HA outside this \
                 configuration. This plan replaces the VM: its destroy removes the HA resource \
                 with it, and the new VM is not made one. Set `ha = {{}}` (with the settings you \
                 want) to keep the replacement under HA, or add it again after the apply."
            ),
        )
        .with_attribute(AttributePath::root().attr(attr::HA)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_replacement_of_an_operator_s_ha_vm_warns() {
        let prior = Value::object([("vmid", Value::number(100))]);
        let operator = Private {
            operator_ha: true,
            ..Private::default()
        };
        let warned = |private: &Private, config: &Value, replacing: bool| {
            let mut diags = Diagnostics::new();
            warn_replacement_drops_ha(private, &prior, config, replacing, &mut diags);
            diags.iter().count()
        };
        let unset = Value::object([("ha", Value::Null)]);
        assert_eq!(warned(&operator, &unset, true), 1);
        assert_eq!(warned(&operator, &unset, false), 0);
        assert_eq!(warned(&Private::default(), &unset, true), 0);
        let set = Value::object([("ha", Value::object([("state", Value::Null)]))]);
        assert_eq!(warned(&operator, &set, true), 0);
    }
}
