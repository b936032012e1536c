#!/usr/bin/env bash
# Every test CI runs: formatting, lints, unit, simulator, gRPC and terraform-driven
# acceptance tests (TF_ACC=1, against the embedded pve-sim; no PVE host needed), then the
# live-mode acceptance tests against a pve-sim started as a separate process and treated as
# an opaque PVE host (PROXMOX_VE_ENDPOINT/…_API_TOKEN/…_CA_CERT, no admin API), followed by
# the test sweeper's check that the run left no VM or seed ISO behind.
#
# Each stage starts with a `==> [i/4] …` header. Every stage runs even when an earlier one
# failed, so one run reports everything; the exit status is non-zero if any stage failed.
# The last line is the count over the `test result:` lines of every test binary (unit,
# integration and doc tests, both stages): `N passed, N failed, N skipped` (skipped =
# #[ignore]d; tests that skip themselves in live mode say so in the output and count as
# passed).
set -euo pipefail
cd "$(dirname "$0")/.."

export TF_ACC="${TF_ACC:-1}"
export CHECKPOINT_DISABLE=1
# Stage 3 is the in-process suite whatever the shell has exported; stage 4 names its host.
unset PROXMOX_VE_ENDPOINT PROXMOX_VE_API_TOKEN PROXMOX_VE_CA_CERT PROXMOX_VE_TEST_PREFIX

log="$(mktemp "${TMPDIR:-/tmp}/proxmox-test.XXXXXX")"
live_dir="$(mktemp -d "${TMPDIR:-/tmp}/proxmox-live.XXXXXX")"
sim_pid=""
cleanup() {
  if [ -n "$sim_pid" ]; then
    kill "$sim_pid" 2>/dev/null || true
    wait "$sim_pid" 2>/dev/null || true
  fi
  rm -rf "$log" "$live_dir"
}
trap cleanup EXIT

failed_stages=()
stage() { printf '\n==> [%s] %s\n' "$1" "$2"; }

stage 1/4 "cargo fmt --check"
cargo fmt --all -- --check || failed_stages+=("fmt")

stage 2/4 "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings || failed_stages+=("clippy")

stage 3/4 "cargo test --workspace (TF_ACC=$TF_ACC)"
# --no-fail-fast: one run reports every failing test binary, not just the first. tee keeps
# the output live while the log is kept for counting; tee reads to the end, so no SIGPIPE.
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
test_status=${PIPESTATUS[0]}
set -e
[ "$test_status" -eq 0 ] || failed_stages+=("test")

stage 4/4 "live mode against pve-sim as a separate process, then the sweeper"
live_stage() {
  # Both binaries were built by the workspace tests above; this is a no-op then, and builds
  # them when that stage stopped early.
  cargo build --locked -p pvesim --bin pve-sim -p terraform-provider-proxmox \
    --bin proxmox-test-sweeper || return 1
  # Slower tasks than pve-sim's default, as a real host has: the crash-resume tests kill
  # creates between steps they can only see from outside.
  cat >"$live_dir/world.json" <<'JSON'
{"timings": {"task_ms": {"qmclone": 1500, "imgcopy": 700, "qmconfig": 700, "resize": 700,
  "qmstart": 700, "qmstop": 20, "qmshutdown": 50, "qmreboot": 50, "qmdestroy": 50,
  "imgdel": 10}, "agent_boot_ms": 1500}}
JSON
  target/debug/pve-sim --listen 127.0.0.1:0 --state-dir "$live_dir/state" \
    --config "$live_dir/world.json" >"$live_dir/pve-sim.out" 2>"$live_dir/pve-sim.log" &
  sim_pid=$!
  # pve-sim prints its endpoint once it accepts connections (and has written its files).
  local waited=0
  until grep -q '^https://' "$live_dir/pve-sim.out" 2>/dev/null; do
    if ! kill -0 "$sim_pid" 2>/dev/null || [ "$waited" -ge 300 ]; then
      echo "pve-sim did not start:"
      cat "$live_dir/pve-sim.log"
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done

  local prefix="tfacc-ci$$-"
  export PROXMOX_VE_ENDPOINT PROXMOX_VE_API_TOKEN PROXMOX_VE_CA_CERT PROXMOX_VE_TEST_PREFIX
  export PROXMOX_VE_TEST_NODES=pve1,pve2,pve3 PROXMOX_VE_TEST_VLAN=5
  PROXMOX_VE_ENDPOINT="$(head -n 1 "$live_dir/pve-sim.out")"
  PROXMOX_VE_API_TOKEN="$(cat "$live_dir/state/token")" || return 1
  PROXMOX_VE_CA_CERT="$live_dir/state/ca.pem"
  PROXMOX_VE_TEST_PREFIX="$prefix"
  echo "PROXMOX_VE_ENDPOINT=$PROXMOX_VE_ENDPOINT PROXMOX_VE_TEST_PREFIX=$prefix"

  local status=0
  # --nocapture: the tests that run only on the in-process simulator say they are skipped.
  cargo test --locked --no-fail-fast \
    --test acc_provider --test acc_proxy_vm --test acc_proxy_vm_resilience \
    --test acc_proxy_vms --test acc_health --test acc_ownership --test acc_failure_paths \
    -- --nocapture 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1

  # Every test cleans up after itself (terraform destroy, and a sweep when it ends): the
  # check fails if anything of the run is left; the sweep then removes it.
  if ! target/debug/proxmox-test-sweeper --prefix "$prefix" --check; then
    echo "the live run left VMs or seed ISOs behind"
    target/debug/proxmox-test-sweeper --prefix "$prefix" || true
    status=1
  fi
  return "$status"
}
if [ "$TF_ACC" = "0" ] || [ -z "$TF_ACC" ]; then
  echo "skipped: TF_ACC is not set"
else
  # Called in a list, so `set -e` is off inside: live_stage checks each step itself.
  live_stage || failed_stages+=("live")
  if [ -n "$sim_pid" ]; then
    kill "$sim_pid" 2>/dev/null || true
    wait "$sim_pid" 2>/dev/null || true
    sim_pid=""
  fi
fi

# `test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; …`
read -r passed failed skipped < <(
  sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored;.*/\1 \2 \3/p' "$log" |
    awk '{ p += $1; f += $2; s += $3 } END { print p + 0, f + 0, s + 0 }'
)

echo
if [ ${#failed_stages[@]} -gt 0 ]; then
  # A test binary that does not compile or crashes has no `test result:` line; the cargo
  # output above names it.
  echo "failed stages: ${failed_stages[*]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ ${#failed_stages[@]} -eq 0 ]
