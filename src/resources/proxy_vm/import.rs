//! Import of `proxmox_proxy_vm` by VMID or NODE/VMID, or by identity (`import { identity =
//! {...} }`, Terraform 1.12+: the VMID, and the name and fleet when given): any finished VM of
//! ours in this provider's fleet, never one still being created, never one on another node, of
//! another name or of another fleet than the import names.

use tfplugin::{Diagnostic, ImportResponse, ImportedResource, Value};

use super::apply::step_diagnostic;
use super::attr;
use super::identity::Wanted;
use super::lifecycle::{self, Expected, ExpectedToken};
use super::model::{Observed, Private};
use super::schema::TYPE_NAME;
use crate::context::Configured;
use crate::ownership;

/// By id: `VMID` or `NODE/VMID`.
pub(super) async fn import(configured: &Configured, id: &str) -> ImportResponse {
    let (node, vmid_text) = match id.split_once('/') {
        Some((node, vmid)) => (Some(node.to_owned()), vmid),
        None => (None, id),
    };
    let Ok(vmid) = vmid_text.trim().parse::<u32>() else {
        return refused(Diagnostic::error(
            "Invalid import ID",
            format!("`{id}` is not a VMID or NODE/VMID, e.g. `100123` or `pve1/100123`."),
        ));
    };
    let wanted = Wanted {
        vmid,
        name: None,
        fleet: None,
    };
    import_vm(configured, &wanted, node).await
}

/// By identity: the VMID, and the name and fleet when the identity gives them.
pub(super) async fn import_by_identity(
    configured: &Configured,
    identity: &Value,
) -> ImportResponse {
    let wanted = match Wanted::from_identity(identity) {
        Ok(wanted) => wanted,
        Err(why) => return refused(Diagnostic::error("Invalid import identity", why)),
    };
    if let Some(fleet) = wanted.fleet.as_deref()
        && fleet != configured.fleet
    {
        return refused(Diagnostic::error(
            "Cannot import proxy VM from another fleet",
            format!(
                "The identity names {}, and this provider manages {}. Import it with a \
                 provider whose `fleet` is `{fleet}`, or leave it to the configuration that \
                 owns it.",
                fleet_words(fleet),
                fleet_words(&configured.fleet)
            ),
        ));
    }
    import_vm(configured, &wanted, None).await
}

fn refused(diagnostic: Diagnostic) -> ImportResponse {
    let mut response = ImportResponse::default();
    response.diagnostics.push(diagnostic);
    response
}

fn fleet_words(fleet: &str) -> String {
    if fleet.is_empty() {
        "the default fleet".to_owned()
    } else {
        format!("fleet `{fleet}`")
    }
}

async fn import_vm(
    configured: &Configured,
    wanted: &Wanted,
    node: Option<String>,
) -> ImportResponse {
    let vmid = wanted.vmid;
    // Import takes any name and any create of ours, but only in this provider's fleet.
    let any_vm_of_this_fleet = Expected {
        name: None,
        fleet: &configured.fleet,
        token: ExpectedToken::Any,
    };
    let mut response = ImportResponse::default();
    match lifecycle::read(configured, vmid, any_vm_of_this_fleet).await {
        Ok(lifecycle::Found::Ours(observed)) => match imported(&observed, wanted, node) {
            Ok(resource) => response.imported.push(resource),
            Err(refusal) => response.diagnostics.push(refusal),
        },
        Ok(lifecycle::Found::NotOurs {
            mark: Some(mark), ..
        }) if mark.fleet != configured.fleet => response.diagnostics.error(
            "Cannot import proxy VM from another fleet",
            format!(
                "VM {vmid} (`{}`) belongs to {}, and this provider manages {}. Import it with \
                 a provider whose `fleet` is `{}`, or leave it to the configuration that owns \
                 it.",
                mark.owner,
                fleet_words(&mark.fleet),
                fleet_words(&configured.fleet),
                mark.fleet
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

/// The imported object of a VM of ours, or why it cannot be imported as asked.
fn imported(
    observed: &Observed,
    wanted: &Wanted,
    node: Option<String>,
) -> Result<ImportedResource, Diagnostic> {
    let vmid = observed.vmid;
    let refusal = |detail: String| Diagnostic::error("Cannot import proxy VM", detail);
    let phase = observed.mark.as_ref().map(|m| m.phase);
    if phase == Some(ownership::Phase::Creating) {
        return Err(refusal(format!(
            "VM {vmid} is a create still in progress (or interrupted) of `{}`. Run the apply \
             that creates it (it resumes the create), or destroy it; import it once it is \
             finished.",
            observed.name
        )));
    }
    if let Some(name) = wanted.name.as_deref()
        && name != observed.name
    {
        // The identity was taken from another VM than the one at its VMID now.
        return Err(refusal(format!(
            "VM {vmid} is `{}`, not `{name}` as the identity says: the VM the identity names \
             is gone and another one took its VMID. Find the VM again (`terraform query`, or \
             the `proxmox_proxy_vms` data source).",
            observed.name
        )));
    }
    let mut seed = Value::object([(attr::VMID, Value::number(i64::from(vmid)))]);
    if let Some(node) = node {
        // A state must never say the VM is where it is not.
        if node != observed.node {
            return Err(refusal(format!(
                "VM {vmid} is on node {actual}, not on {node}. Import it as `{actual}/{vmid}` \
                 (or by its VMID alone, `{vmid}`).",
                actual = observed.node
            )));
        }
        seed.set_attr(attr::NODE, Value::string(node));
    }
    let private = Private {
        create_token: observed.mark.as_ref().and_then(|m| m.create_token.clone()),
        imported: true,
        ..Private::default()
    };
    Ok(ImportedResource {
        type_name: TYPE_NAME.into(),
        state: observed.to_state(&seed),
        private: private.encode(),
    })
}
