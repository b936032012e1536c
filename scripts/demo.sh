#!/usr/bin/env bash
# The README's first command: the whole product on the embedded simulator, no PVE host needed.
#
# Builds the provider and pve-sim, starts pve-sim on a free loopback port, installs the built
# provider through a local filesystem mirror (no registry is contacted), checks the cluster
# with the proxmox_health data source, runs `init` and `apply` on examples/quickstart with
# tofu (or terraform when tofu is absent), prints the VMs and their addresses, shows that the
# next plan is empty, destroys, checks with proxmox_proxy_vms that no VM of ours is left, and
# stops the simulator. Any failure stops the demo with a non-zero exit.
#
# Environment: TF_CLI=/path/to/terraform-or-tofu picks the CLI; KEEP_DEMO_DIR=1 keeps the
# working directory (state, logs) even on success.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

step() { printf '\n==> %s\n' "$*"; }
die() {
  printf '\ndemo failed: %s\n' "$*" >&2
  exit 1
}

tf="${TF_CLI:-$(command -v tofu || command -v terraform || true)}"
[ -n "$tf" ] || die "neither tofu nor terraform is on the PATH (Terraform >= 1.11 or OpenTofu >= 1.11)"
tf_name="$(basename "$tf")"
# The quickstart's user_data is a write-only argument, which OpenTofu supports from 1.11.
if [ -z "${TF_CLI:-}" ] && [ "$tf_name" = tofu ]; then
  read -r tofu_major tofu_minor <<<"$("$tf" version | sed -n '1s/^OpenTofu v\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')"
  if [ "${tofu_major:-1}" -eq 1 ] && [ "${tofu_minor:-11}" -lt 11 ]; then
    if command -v terraform >/dev/null 2>&1; then
      tf="$(command -v terraform)"
      tf_name=terraform
    else
      die "OpenTofu $tofu_major.$tofu_minor is too old for the quickstart (write-only user_data needs >= 1.11)"
    fi
  fi
fi
# Both CLIs support write-only arguments from 1.11 (docs/index.md, "Terraform and OpenTofu
# versions"); an older one would stop at validate with the provider's error on user_data.
read -r cli_major cli_minor <<<"$("$tf" version | sed -n '1s/^[A-Za-z]* v\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')"
if [ "${cli_major:-1}" -eq 1 ] && [ "${cli_minor:-11}" -lt 11 ]; then
  die "$tf_name $cli_major.$cli_minor is too old for the quickstart: its write-only user_data needs Terraform >= 1.11 or OpenTofu >= 1.11 (without user_data the provider works from Terraform 1.5 and OpenTofu 1.6; see docs/index.md)"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/proxmox-demo.XXXXXX")"
sim_pid=""
finish() {
  status=$?
  if [ -n "$sim_pid" ] && kill -0 "$sim_pid" 2>/dev/null; then
    printf '==> stopping pve-sim (pid %s)\n' "$sim_pid"
    kill -TERM "$sim_pid" 2>/dev/null || true
    wait "$sim_pid" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] || [ -n "${KEEP_DEMO_DIR:-}" ]; then
    printf '==> kept %s (simulator log: %s/sim.log)\n' "$work" "$work" >&2
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT TERM

# A debug build: the demo needs no optimised binaries, and scripts/test.sh then reuses every
# crate this compiled instead of building the workspace a second time with other settings.
step "building the provider and pve-sim (cargo build --locked)"
cargo build --locked --workspace --bins
target_dir="${CARGO_TARGET_DIR:-$root/target}"
provider_bin="$target_dir/debug/terraform-provider-proxmox"
sim_bin="$target_dir/debug/pve-sim"
[ -x "$provider_bin" ] || die "the build did not produce $provider_bin"
[ -x "$sim_bin" ] || die "the build did not produce $sim_bin"

version="$(sed -n '/^version = "/{s/^version = "\(.*\)"$/\1/p;q;}' Cargo.toml)"
case "$(uname -s)" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  FreeBSD) os=freebsd ;;
  *) die "unsupported OS $(uname -s)" ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) die "unsupported CPU $(uname -m)" ;;
esac

step "starting pve-sim on a free port"
"$sim_bin" --listen 127.0.0.1:0 --state-dir "$work/sim" >"$work/sim.out" 2>"$work/sim.log" &
sim_pid=$!
# pve-sim writes the endpoint file once it accepts connections.
for _ in $(seq 1 300); do
  [ -s "$work/sim/endpoint" ] && break
  kill -0 "$sim_pid" 2>/dev/null || die "pve-sim exited early: $(tail -n 5 "$work/sim.log")"
  sleep 0.1
done
[ -s "$work/sim/endpoint" ] || die "pve-sim did not become ready within 30 s"
endpoint="$(cat "$work/sim/endpoint")"
echo "    pve-sim serves $endpoint (nodes pve1..pve3, template debian-13-proxy, ISO storage proxy-seeds)"

step "installing provider $version ($os/$arch) into a local filesystem mirror"
# The same package under both registry hosts: `proxyvm/proxmox` means registry.terraform.io
# to terraform and registry.opentofu.org to tofu.
for host in registry.terraform.io registry.opentofu.org; do
  dir="$work/mirror/$host/proxyvm/proxmox/$version/${os}_${arch}"
  mkdir -p "$dir"
  cp "$provider_bin" "$dir/terraform-provider-proxmox_v$version"
done
cat >"$work/cli.tfrc" <<EOF
provider_installation {
  filesystem_mirror {
    path    = "$work/mirror"
    include = ["registry.terraform.io/proxyvm/proxmox", "registry.opentofu.org/proxyvm/proxmox"]
  }
}
EOF

export TF_CLI_CONFIG_FILE="$work/cli.tfrc"
export CHECKPOINT_DISABLE=1
export TF_IN_AUTOMATION=1
export PROXMOX_VE_ENDPOINT="$endpoint"
export PROXMOX_VE_API_TOKEN="$(cat "$work/sim/token")"
export PROXMOX_VE_CA_CERT="$work/sim/ca.pem"
export TF_VAR_seed_storage=proxy-seeds
unset PROXMOX_VE_INSECURE TF_LOG TF_LOG_PROVIDER

cp -R examples/quickstart "$work/quickstart"
run_tf() { "$tf" -chdir="$work/quickstart" "$@"; }
# Runs a CLI command showing only its progress lines; the whole output goes to LOG and is
# printed if the command fails.
run_progress() { # run_progress LOG PATTERN ARGS...
  local log="$1" pattern="$2" status
  shift 2
  set +e
  run_tf "$@" -no-color 2>&1 | tee "$log" | grep -E --line-buffered "$pattern" | sed 's/^/    /'
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" -ne 0 ]; then
    cat "$log" >&2
    return 1
  fi
}

# Applies a configuration of data sources only (read from stdin) in $work/NAME.
run_data_check() { # run_data_check NAME < main.tf body
  local dir="$work/$1"
  mkdir -p "$dir"
  {
    printf 'terraform {\n  required_providers {\n    proxmox = { source = "proxyvm/proxmox" }\n  }\n}\n'
    printf 'provider "proxmox" {\n  seed_storage = "%s"\n}\n' "$TF_VAR_seed_storage"
    cat
  } >"$dir/main.tf"
  "$tf" -chdir="$dir" init -input=false -no-color >"$dir.log" 2>&1 &&
    "$tf" -chdir="$dir" apply -auto-approve -input=false -no-color >>"$dir.log" 2>&1 || {
    cat "$dir.log" >&2
    die "reading the data sources in $1 failed"
  }
}

step "preflight: proxmox_health checks the API, nodes, ISO storage, template and privileges"
run_data_check preflight <<'EOF'
data "proxmox_health" "cluster" {
  templates = ["debian-13-proxy"]
}
output "healthy" { value = data.proxmox_health.cluster.healthy }
output "summary" {
  value = "healthy = ${data.proxmox_health.cluster.healthy}: PVE ${data.proxmox_health.cluster.version}, ${length(data.proxmox_health.cluster.nodes)} nodes, reasons ${jsonencode(data.proxmox_health.cluster.reasons)}"
}
EOF
echo "    $("$tf" -chdir="$work/preflight" output -raw summary)"
[ "$("$tf" -chdir="$work/preflight" output -raw healthy)" = "true" ] ||
  die "the simulated cluster is not healthy: $("$tf" -chdir="$work/preflight" output -json)"

step "$tf_name init (offline, from the mirror)"
# sed, not head: head would exit early and break the pipe under pipefail.
"$tf" version | sed -n 1p
run_tf init -input=false -no-color >"$work/init.log" 2>&1 || {
  cat "$work/init.log" >&2
  die "$tf_name init failed"
}
grep -i "installed proxyvm/proxmox" "$work/init.log" || true

step "$tf_name apply: clone, seed, configure, start, wait for addresses"
run_progress "$work/apply.log" 'Creat|complete!|Warning|Error' apply -auto-approve -input=false ||
  die "$tf_name apply failed"

step "the VMs and their addresses"
run_tf output vms || die "no vms output"
addresses="$(run_tf output -json vms)"
case "$addresses" in
  *'"ipv4_address": ""'* | *'"ipv4_address":""'* | *'"ipv4_address":null'*) die "a VM has no address" ;;
esac

step "$tf_name plan: nothing to change"
set +e
run_tf plan -detailed-exitcode -input=false -no-color >"$work/plan.log" 2>&1
plan_status=$?
set -e
case "$plan_status" in
  0) grep -m 1 "No changes" "$work/plan.log" | sed 's/^/    /' ;;
  2)
    cat "$work/plan.log" >&2
    die "the plan after apply is not empty"
    ;;
  *)
    cat "$work/plan.log" >&2
    die "$tf_name plan failed"
    ;;
esac

step "$tf_name destroy"
run_progress "$work/destroy.log" 'Destr|complete!|Warning|Error' destroy -auto-approve -input=false ||
  die "$tf_name destroy failed"

step "nothing of ours is left (data source proxmox_proxy_vms)"
run_data_check leftovers <<'EOF'
data "proxmox_proxy_vms" "left" {}
output "left" { value = length(data.proxmox_proxy_vms.left.vms) }
EOF
left="$("$tf" -chdir="$work/leftovers" output -raw left)"
[ "$left" = "0" ] || die "$left VM(s) of ours are still in the cluster after destroy"
echo "    0 VMs of ours left"

step "done: the demo ran init, apply, an empty plan and destroy against pve-sim"
