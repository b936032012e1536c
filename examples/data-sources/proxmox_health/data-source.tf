# One preflight answer before an apply: API, nodes, ISO storage, templates, privileges.
data "proxmox_health" "cluster" {
  node_names  = ["pve1", "pve2"]
  templates   = ["debian-13-proxy"]
  iso_storage = "local"
}

output "cluster_healthy" {
  value = data.proxmox_health.cluster.healthy
}

# Every reason code of every unhealthy node, e.g. { pve2 = ["StorageInactive"] }.
output "cluster_problems" {
  value = {
    for node in data.proxmox_health.cluster.nodes : node.name => node.reasons
    if length(node.reasons) > 0
  }
}

# A check block warns on every plan and apply without blocking them.
check "cluster_ready" {
  assert {
    condition     = data.proxmox_health.cluster.healthy
    error_message = "The Proxmox cluster is not ready for proxy VMs: ${jsonencode([for n in data.proxmox_health.cluster.nodes : n.messages])}"
  }
}
