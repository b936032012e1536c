# An apply that refuses to start unless the cluster is ready: the health data source is
# read at plan time, and the precondition fails the plan (not just warns) when it is not.

terraform {
  required_providers {
    proxmox = {
      source = "proxyvm/proxmox"
    }
  }
}

variable "node" {
  type    = string
  default = "pve1"
}

variable "template" {
  type    = string
  default = "debian-13-proxy"
}

variable "seed_storage" {
  type    = string
  default = "local"
}

provider "proxmox" {
  seed_storage = var.seed_storage
}

data "proxmox_health" "cluster" {
  node_names  = [var.node]
  templates   = [var.template]
  iso_storage = var.seed_storage
}

resource "proxmox_proxy_vm" "edge" {
  count    = 2
  name     = "gated-${count.index}"
  node     = var.node
  template = var.template

  lifecycle {
    precondition {
      condition     = data.proxmox_health.cluster.healthy
      error_message = "Proxmox is not ready for proxy VMs: ${join("; ", flatten([for n in data.proxmox_health.cluster.nodes : [for i, r in n.reasons : "${n.name}: ${r}: ${n.messages[i]}"]]))}"
    }
  }
}

output "addresses" {
  value = proxmox_proxy_vm.edge[*].ipv4_address
}
