//! The provider layer of terraform-provider-proxmox: schemas, lifecycle and diagnostics of
//! `proxmox_proxy_vm`, `proxmox_health` and `proxmox_proxy_vms`, over `pve` and `nocloud`,
//! served through `tfplugin`.

pub mod ownership;
pub mod validate;
pub mod vmid;
