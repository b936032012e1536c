//! Import of `proxmox_proxy_vm` by VMID or NODE/VMID: any finished VM of ours in this
//! provider's fleet, never one still being created, never one on another node than named.

use tfplugin::{ImportResponse, ImportedResource, Value};

use super::apply::step_diagnostic;
use super::attr;
use super::lifecycle::{self, Expected, ExpectedToken};
use super::model::Private;
use super::schema::TYPE_NAME;
use crate::context::Configured;
use crate::ownership;

/// See the module doc.
pub(super) async fn import(configured: &Configured, id: &str) -> ImportResponse {
    let mut response = ImportResponse::default();
    let (node, vmid_text) = match id.split_once('/') {
        Some((node, vmid)) => (Some(node.to_owned()), vmid),
        None => (None, id),
    };
    let Ok(vmid) = vmid_text.trim().parse::<u32>() else {
        response.diagnostics.error(
            "Invalid import ID",
            format!("`{id}` is not a VMID or NODE/VMID, e.g. `100123` or `pve1/100123`."),
        );
        return response;
    };
    // Import takes any name and any create of ours, but only in this provider's fleet.
    let any_vm_of_this_fleet = Expected {
        name: None,
        fleet: &configured.fleet,
        token: ExpectedToken::Any,
    };
    match lifecycle::read(configured, vmid, any_vm_of_this_fleet).await {
        Ok(lifecycle::Found::Ours(observed)) => {
            let phase = observed.mark.as_ref().map(|m| m.phase);
            if phase == Some(ownership::Phase::Creating) {
                response.diagnostics.error(
                    "Cannot import proxy VM",
                    format!(
                        "VM {vmid} is a create still in progress (or interrupted) of `{}`. Run \
                         the apply that creates it (it resumes the create), or destroy it; \
                         import it once it is finished.",
                        observed.name
                    ),
                );
                return response;
            }
            let mut seed = Value::object([("vmid", Value::number(i64::from(vmid)))]);
            if let Some(node) = node {
                // A state must never say the VM is where it is not.
                if node != observed.node {
                    response.diagnostics.error(
                        "Cannot import proxy VM",
                        format!(
                            "VM {vmid} is on node {actual}, not on {node}. Import it as \
                             `{actual}/{vmid}` (or by its VMID alone, `{vmid}`).",
                            actual = observed.node
                        ),
                    );
                    return response;
                }
                seed.set_attr(attr::NODE, Value::string(node));
            }
            let state = observed.to_state(&seed);
            let private = Private {
                create_token: observed.mark.as_ref().and_then(|m| m.create_token.clone()),
                imported: true,
                ..Private::default()
            };
            response.imported.push(ImportedResource {
                type_name: TYPE_NAME.into(),
                state,
                private: private.encode(),
            });
        }
        Ok(lifecycle::Found::NotOurs {
            mark: Some(mark), ..
        }) if mark.fleet != configured.fleet => response.diagnostics.error(
            "Cannot import proxy VM from another fleet",
            format!(
                "VM {vmid} (`{}`) belongs to fleet `{}`, and this provider manages fleet `{}`. \
                 Import it with a provider whose `fleet` is `{}`, or leave it to the \
                 configuration that owns it.",
                mark.owner, mark.fleet, configured.fleet, mark.fleet
            ),
        ),
        Ok(_) => response.diagnostics.error(
            "Cannot import proxy VM",
            format!(
                "No VM {vmid} carrying this provider's ownership mark was found. Only VMs made \
                 by proxmox_proxy_vm can be imported; other VMs are never modified."
            ),
        ),
        Err(error) => {
            response
                .diagnostics
                .push(step_diagnostic("import", &format!("{vmid}"), &error))
        }
    }
    response
}
