# This provider next to another Proxmox provider (here bpg/proxmox) in one configuration.
# Both default to the local name `proxmox`, so one of them gets another local name, and
# every resource of that provider names it with `provider =`.

terraform {
  required_providers {
    # The other provider keeps the default local name: its resources need no meta-argument.
    proxmox = {
      source = "bpg/proxmox"
    }
    # This provider under its own local name.
    proxyvm = {
      source = "proxyvm/proxmox"
    }
  }
}

# Both read the same cluster; each has its own configuration block.
provider "proxmox" {
  endpoint = "https://pve1.example:8006"
  insecure = false
}

provider "proxyvm" {
  endpoint     = "https://pve1.example:8006"
  seed_storage = "local"
}

# Our resources and data sources are chosen with `provider = proxyvm`; without it Terraform
# would hand them to bpg/proxmox, which does not know them.
data "proxmox_health" "cluster" {
  provider  = proxyvm
  templates = ["debian-13-proxy"]
}

resource "proxmox_proxy_vm" "edge" {
  provider = proxyvm
  count    = 2
  name     = "edge-${count.index}"
  node     = "pve1"
  template = "debian-13-proxy"
}

output "addresses" {
  value = proxmox_proxy_vm.edge[*].ipv4_address
}
