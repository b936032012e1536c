# `terraform test` for this module against pve-sim, started in this directory with
#
#   pve-sim --listen 127.0.0.1:0 --state-dir .pve-sim &
#
# The provider is configured from the files pve-sim writes into .pve-sim; its default
# world has the nodes pve1..pve3, the template debian-13-proxy and the ISO storage
# proxy-seeds (`pve-sim --print-world` lists all of it).

variables {
  pve_sim_dir = ".pve-sim"

  name_prefix = "edge"
  nodes       = ["pve1", "pve2"]
  template    = "debian-13-proxy"
  backends    = ["10.0.0.10:8080", "10.0.0.11:8080"]
}

provider "proxmox" {
  endpoint     = trimspace(file("${var.pve_sim_dir}/endpoint"))
  api_token    = trimspace(file("${var.pve_sim_dir}/token"))
  ca_cert      = file("${var.pve_sim_dir}/ca.pem")
  seed_storage = "proxy-seeds"
}

run "one_proxy_per_node" {
  assert {
    condition     = keys(output.nodes) == ["edge-pve1-0", "edge-pve2-0"]
    error_message = "expected one VM per node, named PREFIX-NODE-N: ${jsonencode(output.nodes)}"
  }
  assert {
    condition     = output.nodes["edge-pve2-0"] == "pve2"
    error_message = "edge-pve2-0 runs on ${output.nodes["edge-pve2-0"]}"
  }
  assert {
    condition     = alltrue([for address in values(output.addresses) : can(cidrhost("${address}/32", 0))])
    error_message = "every VM must report an IPv4 address: ${jsonencode(output.addresses)}"
  }
}

run "scaling_out_keeps_the_running_vms" {
  variables {
    per_node = 2
  }
  assert {
    condition     = length(output.addresses) == 4
    error_message = "expected 2 VMs on each of 2 nodes: ${jsonencode(output.addresses)}"
  }
  assert {
    condition     = output.vmids["edge-pve1-0"] == run.one_proxy_per_node.vmids["edge-pve1-0"]
    error_message = "scaling out replaced edge-pve1-0"
  }
}

run "a_prefix_that_is_no_dns_label_is_refused" {
  command = plan
  variables {
    name_prefix = "Edge_1"
  }
  expect_failures = [var.name_prefix]
}
