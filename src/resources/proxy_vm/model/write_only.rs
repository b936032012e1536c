//! The refusal of write-only arguments to clients that would store them.

use tfplugin::{AttributePath, Diagnostics, Value};

use super::super::schema;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::proxy_vm::attr;

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
}
