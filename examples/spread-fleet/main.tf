# A fleet of proxy VMs spread over the cluster: no `node`, so the provider places each VM
# on an eligible node with the most memory not yet promised to VMs. A parallel apply spreads
# evenly; a node that is offline, lacks the bridge or the seed storage, cannot clone the
# template or has no memory left is skipped. Each workspace is its own fleet, so staging and
# production can use the same names on one cluster.
#
#   terraform workspace new staging
#   terraform apply -var vm_count=6

terraform {
  required_providers {
    proxmox = {
      source = "proxyvm/proxmox"
    }
  }
}

variable "vm_count" {
  description = "How many proxy VMs to run."
  type        = number
  default     = 6
}

variable "nodes" {
  description = "Nodes the VMs may run on (empty: every node of the cluster)."
  type        = list(string)
  default     = []
}

provider "proxmox" {
  # endpoint, api_token and ca_cert come from PROXMOX_VE_ENDPOINT,
  # PROXMOX_VE_API_TOKEN and PROXMOX_VE_CA_CERT.
  fleet        = lower(terraform.workspace)
  seed_storage = "local"
}

resource "proxmox_proxy_vm" "edge" {
  count           = var.vm_count
  name            = "edge-${count.index}"
  template        = "debian-13-proxy"
  bridge          = "vmbr0"
  node_candidates = length(var.nodes) > 0 ? var.nodes : null
}

output "placement" {
  description = "Where each VM landed: the chosen node stays in state and is never re-planned."
  value       = { for vm in proxmox_proxy_vm.edge : vm.name => vm.node }
}
