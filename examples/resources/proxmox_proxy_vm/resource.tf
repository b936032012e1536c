resource "proxmox_proxy_vm" "example" {
  name     = "edge-1"
  node     = "pve1"
  template = "debian-13-proxy"

  cores    = 2
  memory   = 2048 # MiB
  disk_gib = 20   # grows in place; never shrinks
  bridge   = "vmbr0"
  vlan_tag = 4
  networks = [
    { bridge = "vmbr1", vlan_tag = 20 }, # net1: a backend network
  ]
  tags = ["edge", "proxy"]

  # Write-only: never stored in plan or state (Terraform >= 1.11, OpenTofu >= 1.11).
  user_data = <<-EOT
    #cloud-config
    packages: [haproxy]
  EOT

  timeouts = {
    create = "15m"
  }
}

output "edge_1_address" {
  value = proxmox_proxy_vm.example.ipv4_address
}
