#!/usr/bin/env sh
# A proxy VM is imported by its VMID, or by node and VMID: <node>/<vmid>.
# Only VMs that carry the provider's ownership mark can be imported.
# The VM keeps its seed while user_data and network_config are unset in its configuration
# (-generate-config-out writes `user_data = null`); setting either replaces the VM.
terraform import proxmox_proxy_vm.example pve1/100042
