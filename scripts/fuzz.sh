#!/usr/bin/env bash
# One long run of the workflow fuzzer (tests/provider/acc_fuzz, issue #32): random sequences
# of terraform commands, injected faults and an operator's hand on pve-sim, with the
# invariants I1-I7 checked after every step (docs/dev/reliability.md, "Workflow fuzzer").
#
#   scripts/fuzz.sh SEED STEPS
#   scripts/fuzz.sh sweep
#
# `sweep` runs the long kill sweeps instead (acc_fuzz::kill_points, #38): the update with a
# reboot, the detach, a create the configuration then drops (cleaned by the full destroy), a
# create applied again with other user_data, a destroy, an update with a reboot and a
# replacement of an HA resource, and the create_before_destroy rolls of one and three VMs,
# each killed at every request index (before the request, and after it with its answer
# lost), then applied and destroyed; each prints `sweep NAME: N kill points, R runs, D
# duplicates, L leaks, ...`. SWEEP_PARALLEL (default 2) runs that many kill points at once.
#
# SEED is the first sequence's seed (the next sequences take SEED+1, SEED+2, ...); STEPS is
# the total number of steps, in sequences of FUZZ_SEQ_LEN (default 15) steps. Optional
# environment: FUZZ_SECONDS (a wall-time cap), FUZZ_ALL=1 or FUZZ_ON=Race,HandMark,... (the
# families waiting for a fix of a known bug, all or by name; the list is FAMILIES_WAITING in
# tests/provider/acc_fuzz/mod.rs), FUZZ_SHRINK_SECONDS (time to shrink each failure, default
# 600), FUZZ_VERBOSE=1 (every step on stderr). Prints every failure with its seed, the sequence
# and the shortest failing sequence as a regression test, then the summary: sequences,
# steps, invariant checks, failures. Exits non-zero when a failure was found.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -eq 1 ] && [ "$1" = sweep ]; then
  export TF_ACC=1 CHECKPOINT_DISABLE=1
  cargo test --locked --test provider --no-run
  exec cargo test --locked --test provider -- --ignored --nocapture --test-threads=1 \
    acc_fuzz::kill_points::
fi
if [ $# -ne 2 ]; then
  echo "usage: scripts/fuzz.sh SEED STEPS | scripts/fuzz.sh sweep" >&2
  exit 2
fi
export TF_ACC=1 CHECKPOINT_DISABLE=1 FUZZ_SEED="$1" FUZZ_STEPS="$2"

# Builds the provider binary and the test binary (the harness installs the former through a
# filesystem mirror), then runs the one ignored test that reads the variables above.
cargo test --locked --test provider --no-run
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked --test provider -- --ignored --nocapture --test-threads=1 \
  acc_fuzz::long_run 2>&1 | tee "$log" || status=$?
echo
sed -n '/^fuzz summary/,/^$/p' "$log" | grep -v -e '^$' -e '^ok$' || echo "fuzz: no summary (see above)"
exit "$status"
