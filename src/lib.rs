//! The provider layer of terraform-provider-proxmox: schemas, lifecycle and diagnostics of
//! `proxmox_proxy_vm`, `proxmox_health` and `proxmox_proxy_vms`, over `pve` and `nocloud`,
//! served through `tfplugin`.

pub mod cluster_facts;
pub mod context;
pub mod data_sources;
pub mod diagnostics;
pub mod fitness;
pub mod invocation;
pub mod journal;
pub mod ownership;
pub mod provider;
pub mod resources;
pub mod runtime;
pub mod schema_table;
pub mod validate;
pub mod vmid;

use std::process::ExitCode;
use std::sync::Arc;

/// Serves the provider to Terraform/OpenTofu (see `tfplugin::serve`).
pub fn run() -> ExitCode {
    // ServeOptions adds the OpenTofu twin of the address for --debug reattach.
    let options = tfplugin::ServeOptions::new(provider::PROVIDER_ADDRESS);
    tfplugin::serve(Arc::new(provider::ProxmoxProvider::new()), options)
}
