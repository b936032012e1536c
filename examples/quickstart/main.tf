# Three running proxy VMs and their addresses.
#
# Against the simulator: scripts/demo.sh runs this directory for you.
# Against a real PVE 9 cluster (see docs/guides/pve-setup.md):
#   export PROXMOX_VE_ENDPOINT=https://pve1.example:8006
#   export PROXMOX_VE_API_TOKEN='terraform@pve!provider=…'
#   export PROXMOX_VE_CA_CERT=/path/to/pve-root-ca.pem
#   terraform init && terraform apply -var node=pve1 -var seed_storage=local

terraform {
  required_providers {
    proxmox = {
      source = "proxyvm/proxmox"
    }
  }
}

variable "node" {
  description = "Node to run the VMs on."
  type        = string
  default     = "pve1"
}

variable "template" {
  description = "Cloud-init-ready template to clone (name or VMID)."
  type        = string
  default     = "debian-13-proxy"
}

variable "seed_storage" {
  description = "Storage with `iso` content for the NoCloud seed images."
  type        = string
  default     = "local"
}

variable "bridge" {
  description = "Bridge for the VMs' network interface."
  type        = string
  default     = "vmbr0"
}

variable "vm_count" {
  description = "How many proxy VMs to run."
  type        = number
  default     = 3
}

provider "proxmox" {
  # endpoint, api_token and ca_cert come from PROXMOX_VE_ENDPOINT,
  # PROXMOX_VE_API_TOKEN and PROXMOX_VE_CA_CERT.
  seed_storage = var.seed_storage
}

resource "proxmox_proxy_vm" "edge" {
  count    = var.vm_count
  name     = "edge-${count.index}"
  node     = var.node
  template = var.template
  cores    = 1
  memory   = 1024
  bridge   = var.bridge
  tags     = ["quickstart"]

  user_data = <<-EOT
    #cloud-config
    packages: [haproxy]
    runcmd:
      - systemctl enable --now haproxy
  EOT
}

output "vms" {
  description = "Each VM's name with its node/VMID and primary IPv4 address."
  value = {
    for vm in proxmox_proxy_vm.edge : vm.name => {
      node         = vm.current_node
      vmid         = vm.vmid
      ipv4_address = vm.ipv4_address
      status       = vm.status
    }
  }
}
