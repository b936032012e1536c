# Every VM of ours across the cluster, from one listing.
data "proxmox_proxy_vms" "all" {}

# Orphans: VMs of ours that this configuration does not manage, e.g. left by a
# workspace that was deleted without `terraform destroy`.
locals {
  managed_names = toset([for vm in proxmox_proxy_vm.edge : vm.name])
  orphans = [
    for vm in data.proxmox_proxy_vms.all.vms : "${vm.node}/${vm.vmid} ${vm.name}"
    if !contains(local.managed_names, vm.name)
  ]
}

resource "proxmox_proxy_vm" "edge" {
  count    = 2
  name     = "edge-${count.index}"
  node     = "pve1"
  template = "debian-13-proxy"
}

output "orphans" {
  value = local.orphans
}
