terraform {
  required_providers {
    proxmox = {
      source  = "proxyvm/proxmox"
      version = "~> 0.1"
    }
  }
}

# Credentials are best left to the environment:
#   export PROXMOX_VE_ENDPOINT=https://pve1.example:8006
#   export PROXMOX_VE_API_TOKEN='terraform@pve!provider=xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx'
#   export PROXMOX_VE_CA_CERT=/etc/pve/pve-root-ca.pem   # PEM text or a file path
provider "proxmox" {
  # endpoint  = "https://pve1.example:8006"
  # api_token = var.pve_api_token
  # ca_cert   = file("pve-root-ca.pem")

  seed_storage     = "local" # must accept `iso` content on every node
  vmid_range_start = 100000  # VMIDs derived from VM names fall in this range
  vmid_range_end   = 199999
}
