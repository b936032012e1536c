# A reusable module: a fleet of HAProxy VMs, the same number on each of the given nodes,
# forwarding TCP to the same backends. Its own tests (tests/*.tftest.hcl) run with
# `terraform test` against pve-sim; see docs/guides/testing-modules.md.

terraform {
  required_version = ">= 1.11" # user_data is write-only
  required_providers {
    proxmox = {
      source  = "proxyvm/proxmox"
      version = ">= 0.1"
    }
  }
}

variable "name_prefix" {
  description = "Start of every VM name; each VM is named PREFIX-NODE-N."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}$", var.name_prefix))
    error_message = "name_prefix must be a lower-case DNS label of at most 31 characters."
  }
}

variable "nodes" {
  description = "Nodes to run the fleet on."
  type        = list(string)
  validation {
    condition     = length(var.nodes) > 0
    error_message = "nodes must name at least one node."
  }
}

variable "per_node" {
  description = "How many proxy VMs to run on each node."
  type        = number
  default     = 1
  validation {
    condition     = var.per_node >= 1 && var.per_node <= 10
    error_message = "per_node must be between 1 and 10."
  }
}

variable "template" {
  description = "Cloud-init-ready template to clone (name or VMID)."
  type        = string
}

variable "backends" {
  description = "host:port of every backend the proxies forward to."
  type        = list(string)
}

variable "listen_port" {
  description = "TCP port the proxies listen on."
  type        = number
  default     = 443
}

locals {
  vms = {
    for pair in setproduct(var.nodes, range(var.per_node)) :
    "${var.name_prefix}-${pair[0]}-${pair[1]}" => pair[0]
  }

  haproxy_cfg = join("\n", concat(
    [
      "defaults",
      "  mode tcp",
      "  timeout connect 5s",
      "  timeout client 1m",
      "  timeout server 1m",
      "frontend in",
      "  bind :${var.listen_port}",
      "  default_backend out",
      "backend out",
      "  balance roundrobin",
    ],
    [for i, backend in var.backends : "  server b${i} ${backend} check"],
    [""],
  ))

  # yamlencode, not a heredoc: the config file's lines cannot break the YAML around them.
  user_data = "#cloud-config\n${yamlencode({
    packages    = ["haproxy"]
    write_files = [{ path = "/etc/haproxy/haproxy.cfg", content = local.haproxy_cfg }]
    runcmd      = ["systemctl restart haproxy"]
  })}"
}

resource "proxmox_proxy_vm" "this" {
  for_each = local.vms

  name     = each.key
  node     = each.value
  template = var.template
  cores    = 1
  memory   = 512
  tags     = ["fleet", var.name_prefix]

  user_data = local.user_data
}

output "addresses" {
  description = "Each VM's name with its primary IPv4 address."
  value       = { for name, vm in proxmox_proxy_vm.this : name => vm.ipv4_address }
}

output "vmids" {
  description = "Each VM's name with its VMID."
  value       = { for name, vm in proxmox_proxy_vm.this : name => vm.vmid }
}

output "nodes" {
  description = "Each VM's name with the node it runs on."
  value       = { for name, vm in proxmox_proxy_vm.this : name => vm.current_node }
}
