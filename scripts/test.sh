#!/usr/bin/env bash
# Every test CI runs: formatting, lints, unit, simulator, gRPC and terraform-driven
# acceptance tests (TF_ACC=1, against the embedded pve-sim; no PVE host needed), then the
# live-mode acceptance tests against three labs shaped differently (tests/live-worlds/: names
# renamed, the setup guide's exact ACLs, a template copy per node on local storage), each a
# pve-sim started as a separate process and treated as an opaque PVE host
# (PROXMOX_VE_ENDPOINT/…_API_TOKEN/…_CA_CERT and the lab's PROXMOX_VE_TEST_*, no admin API),
# each followed by the test sweeper's check that the run left no VM or seed ISO behind.
#
# Each stage starts with a `==> [i/4] …` header. Every stage runs even when an earlier one
# failed, so one run reports everything; the exit status is non-zero if any stage failed.
# The last line is the count over the `test result:` lines of every test binary (unit,
# integration and doc tests, both stages): `N passed, N failed, N skipped`, where skipped =
# #[ignore]d plus the tests that reported themselves skipped (`SKIPPED: <test> (<reason>)`,
# recorded in PROXMOX_VE_TEST_SKIP_LOG: simulator-only tests in live mode, acceptance tests
# without TF_ACC), which cargo counts as passed and this script does not.
#
# It first sets up what the tests need (scripts/install-test-deps.sh: the tools they run,
# installed with apt-get as root or through sudo), or stops there with the one command to run,
# so on a fresh machine this script alone is enough.
set -euo pipefail
cd "$(dirname "$0")/.."

export TF_ACC="${TF_ACC:-1}"
export CHECKPOINT_DISABLE=1

printf '==> the tools the tests run\n'
scripts/install-test-deps.sh
# Stage 3 is the in-process suite whatever the shell has exported; stage 4 names its host.
unset PROXMOX_VE_ENDPOINT PROXMOX_VE_API_TOKEN PROXMOX_VE_CA_CERT PROXMOX_VE_TEST_PREFIX
for var in $(compgen -e PROXMOX_VE_TEST_); do unset "$var"; done

log="$(mktemp "${TMPDIR:-/tmp}/proxmox-test.XXXXXX")"
live_dir="$(mktemp -d "${TMPDIR:-/tmp}/proxmox-live.XXXXXX")"
# Every test that skips itself appends its `SKIPPED: …` line here
# (tests/provider/support/mod.rs).
export PROXMOX_VE_TEST_SKIP_LOG="$live_dir/skipped"
: >"$PROXMOX_VE_TEST_SKIP_LOG"
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

stage 2/4 "cargo clippy and cargo doc, -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings || failed_stages+=("clippy")
# A broken intra-doc link or a malformed doc comment is a warning of rustdoc alone.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked || failed_stages+=("doc")

stage 3/4 "cargo test --workspace (TF_ACC=$TF_ACC)"
# --no-fail-fast: one run reports every failing test binary, not just the first. tee keeps
# the output live while the log is kept for counting; tee reads to the end, so no SIGPIPE.
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
test_status=${PIPESTATUS[0]}
set -e
[ "$test_status" -eq 0 ] || failed_stages+=("test")

stage 4/4 "live mode against three labs (pve-sim as a separate process each), then the sweeper"
# The labs, each a pve-sim world (tests/live-worlds/NAME.json) and the PROXMOX_VE_TEST_*
# a user of that lab would export (NAME.env), and the modules of the provider's test binary
# (tests/provider/) that run there. A full set on one lab and a focused one on the others:
# the simulator-only modules (ownership, failure paths) only report themselves skipped, so
# they run once; the crash-resume module (about half the stage's time) depends on names,
# not on ACLs, so it runs on the renamed lab and, for the copy-per-node clones, on
# local-copies; the ACL lab runs every module that writes through the token (lifecycle,
# listing, health). The cluster-life module's drain and migration refusal need two nodes, a
# token that may migrate and (the drain) a shared ISO storage: the renamed lab has them.
worlds=(
  "renamed|acc_provider acc_proxy_vm acc_proxy_vm_resilience acc_proxy_vms acc_health acc_ownership acc_failure_paths acc_cluster_life"
  "guide-acls|acc_proxy_vm acc_proxy_vms acc_health"
  "local-copies|acc_proxy_vm acc_proxy_vm_resilience acc_proxy_vms acc_health"
)
stop_sim() {
  if [ -n "$sim_pid" ]; then
    kill "$sim_pid" 2>/dev/null || true
    wait "$sim_pid" 2>/dev/null || true
    sim_pid=""
  fi
}
live_world() {
  local world="$1" tests="$2" dir="$live_dir/$1"
  mkdir -p "$dir"
  target/debug/pve-sim --listen 127.0.0.1:0 --state-dir "$dir/state" \
    --config "tests/live-worlds/$world.json" >"$dir/pve-sim.out" 2>"$dir/pve-sim.log" &
  sim_pid=$!
  # pve-sim prints its endpoint once it accepts connections (and has written its files).
  local waited=0
  until grep -q '^https://' "$dir/pve-sim.out" 2>/dev/null; do
    if ! kill -0 "$sim_pid" 2>/dev/null || [ "$waited" -ge 300 ]; then
      echo "pve-sim did not start:"
      cat "$dir/pve-sim.log"
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done

  local prefix="tfacc-ci$$-"
  (
    # The lab's facts, as its user would export them; nothing else of a previous lab.
    set -a
    # shellcheck disable=SC1090
    . "tests/live-worlds/$world.env"
    set +a
    export PROXMOX_VE_ENDPOINT PROXMOX_VE_API_TOKEN PROXMOX_VE_CA_CERT PROXMOX_VE_TEST_PREFIX
    PROXMOX_VE_ENDPOINT="$(head -n 1 "$dir/pve-sim.out")"
    PROXMOX_VE_API_TOKEN="$(cat "$dir/state/token")" || exit 1
    PROXMOX_VE_CA_CERT="$dir/state/ca.pem"
    PROXMOX_VE_TEST_PREFIX="$prefix"
    echo "PROXMOX_VE_ENDPOINT=$PROXMOX_VE_ENDPOINT PROXMOX_VE_TEST_PREFIX=$prefix"
    env | grep '^PROXMOX_VE_TEST_' | grep -v -e _PREFIX= -e _SKIP_LOG= | sort

    local status=0 filters=()
    # One filter per module of the provider's test binary; `::` keeps `acc_proxy_vm::` from
    # also running `acc_proxy_vm_resilience::`.
    for t in $tests; do filters+=("$t::"); done
    # --nocapture: the skip lines and the live-mode notices show as they happen.
    # --workspace: the same package set as stage 3, so cargo unifies the same features and
    # reuses what stage 3 built (one package alone would rebuild tokio and its dependents).
    cargo test --workspace --locked --no-fail-fast --test provider -- --nocapture \
      "${filters[@]}" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1

    # Every test cleans up after itself (terraform destroy, and a sweep when it ends): the
    # check fails if anything of the run is left; the sweep then removes it.
    if ! target/debug/proxmox-test-sweeper --prefix "$prefix" --check; then
      echo "the live run left VMs or seed ISOs behind"
      target/debug/proxmox-test-sweeper --prefix "$prefix" || true
      status=1
    fi
    exit "$status"
  )
}
live_stage() {
  # pve-sim and the sweeper were built by the workspace tests above, with the same package
  # set and so the same features: this is a no-op then, and builds them when that stage
  # stopped early.
  cargo test --workspace --locked --no-run || return 1
  local status=0 entry world tests started
  for entry in "${worlds[@]}"; do
    world="${entry%%|*}"
    tests="${entry#*|}"
    printf '\n--> live lab %s: %s\n' "$world" "$tests"
    started=$SECONDS
    live_world "$world" "$tests" || {
      status=1
      failed_worlds+=("$world")
    }
    stop_sim
    timings+=("$world $((SECONDS - started)) s")
  done
  return "$status"
}
failed_worlds=()
timings=()
if [ "$TF_ACC" = "0" ] || [ -z "$TF_ACC" ]; then
  echo "skipped: TF_ACC is not set"
else
  # Called in a list, so `set -e` is off inside: live_stage checks each step itself.
  live_stage || failed_stages+=("live")
  stop_sim
  echo
  echo "live stage wall time per lab: $(IFS=,; echo "${timings[*]}" | sed 's/,/, /g')"
  [ ${#failed_worlds[@]} -eq 0 ] || echo "failed labs: ${failed_worlds[*]}"
fi

# `test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; …`
read -r passed failed skipped < <(
  sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored;.*/\1 \2 \3/p' "$log" |
    awk '{ p += $1; f += $2; s += $3 } END { print p + 0, f + 0, s + 0 }'
)
# A test that skipped itself returned early, so cargo counted it passed: count it skipped.
self_skipped=$(grep -c '^SKIPPED: ' "$PROXMOX_VE_TEST_SKIP_LOG" || true)
passed=$((passed - self_skipped))
skipped=$((skipped + self_skipped))
if [ -s "$PROXMOX_VE_TEST_SKIP_LOG" ]; then
  echo
  echo "skipped tests and parts of tests (count, test and reason):"
  sed 's/^SKIPPED: /test: /; s/^SKIPPED PART: /part: /' "$PROXMOX_VE_TEST_SKIP_LOG" | sort | uniq -c
fi

echo
if [ ${#failed_stages[@]} -gt 0 ]; then
  # A test binary that does not compile or crashes has no `test result:` line; the cargo
  # output above names it.
  echo "failed stages: ${failed_stages[*]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ ${#failed_stages[@]} -eq 0 ]
