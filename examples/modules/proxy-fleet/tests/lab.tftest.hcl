# The same module in a world shaped like a lab cluster, against a second pve-sim:
#
#   pve-sim --listen 127.0.0.1:0 --state-dir .pve-sim-lab --config tests/lab-world.json &
#
# Nodes hv1 and hv2 (hv3 is offline), the template ubuntu-2404-haproxy on shared Ceph,
# a shared ISO storage "isos", and PVE answering the first two cluster listings with 503.

variables {
  pve_sim_dir = ".pve-sim-lab"

  name_prefix = "lab"
  nodes       = ["hv1", "hv2"]
  template    = "ubuntu-2404-haproxy"
  backends    = ["192.0.2.10:443"]
}

provider "proxmox" {
  endpoint     = trimspace(file("${var.pve_sim_dir}/endpoint"))
  api_token    = trimspace(file("${var.pve_sim_dir}/token"))
  ca_cert      = file("${var.pve_sim_dir}/ca.pem")
  seed_storage = "isos"
}

run "clones_across_nodes_from_shared_storage" {
  assert {
    condition     = output.nodes == { "lab-hv1-0" = "hv1", "lab-hv2-0" = "hv2" }
    error_message = "expected one VM on each online node: ${jsonencode(output.nodes)}"
  }
  assert {
    condition     = alltrue([for address in values(output.addresses) : address != ""])
    error_message = "every VM must report an address: ${jsonencode(output.addresses)}"
  }
}
