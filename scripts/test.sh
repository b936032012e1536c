#!/usr/bin/env bash
# Every test CI runs: formatting, lints, unit, simulator, gRPC and terraform-driven
# acceptance tests (TF_ACC=1, against the embedded pve-sim; no PVE host needed).
#
# Each stage starts with a `==> [i/3] …` header. Every stage runs even when an earlier one
# failed, so one run reports everything; the exit status is non-zero if any stage failed.
# The last line is the count over the `test result:` lines of every test binary (unit,
# integration and doc tests): `N passed, N failed, N skipped` (skipped = #[ignore]d).
set -euo pipefail
cd "$(dirname "$0")/.."

export TF_ACC="${TF_ACC:-1}"
export CHECKPOINT_DISABLE=1

log="$(mktemp "${TMPDIR:-/tmp}/proxmox-test.XXXXXX")"
trap 'rm -f "$log"' EXIT

failed_stages=()
stage() { printf '\n==> [%s] %s\n' "$1" "$2"; }

stage 1/3 "cargo fmt --check"
cargo fmt --all -- --check || failed_stages+=("fmt")

stage 2/3 "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings || failed_stages+=("clippy")

stage 3/3 "cargo test --workspace (TF_ACC=$TF_ACC)"
# --no-fail-fast: one run reports every failing test binary, not just the first. tee keeps
# the output live while the log is kept for counting; tee reads to the end, so no SIGPIPE.
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
test_status=${PIPESTATUS[0]}
set -e
[ "$test_status" -eq 0 ] || failed_stages+=("test")

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
