#!/usr/bin/env sh
# A proxy VM is imported by its VMID, or by node and VMID: <node>/<vmid>.
# Only VMs that carry the provider's ownership mark can be imported.
terraform import proxmox_proxy_vm.example pve1/100042
