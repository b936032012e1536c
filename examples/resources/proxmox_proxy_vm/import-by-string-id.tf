import {
  to = proxmox_proxy_vm.example
  id = "pve1/100042"
}
