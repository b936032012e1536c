#!/usr/bin/env bash
# Fleet-scale benchmark: refresh and apply of growing fleets against pve-sim, driven by the real
# terraform (tests/provider/acc_request_budget.rs, `bench_fleet_scale`, release build). Writes the
# figures between the fleet-scale markers of docs/dev/benchmarks.md and the plot to
# docs/dev/images/fleet-scale.svg.
#
#   scripts/bench.sh                                   # refresh 10,100,500,1000; apply 20,100
#   BENCH_APPLY_SIZES=20,100,500 scripts/bench.sh      # add the 500-VM apply (~7 min more)
#   BENCH_REFRESH_SIZES=10,100 BENCH_APPLY_SIZES=20 scripts/bench.sh   # a quick look
#
# Needs terraform on the PATH (or TF_ACC_TERRAFORM_PATH) and /usr/bin/time (GNU time) for
# the provider's peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

out="$PWD/target/bench-fleet"
doc=docs/dev/benchmarks.md
mkdir -p "$out" docs/dev/images

BENCH_OUT="$out" TF_ACC=1 cargo test --release --locked --test provider -- \
    --ignored --nocapture --exact acc_request_budget::bench_fleet_scale

cp "$out/fleet-scale.svg" docs/dev/images/fleet-scale.svg
{
    echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores (load average $(cut -d' ' -f1 /proc/loadavg) at the end), $(terraform version | head -1), release build:"
    echo
    cat "$out/fleet-scale.md"
} >"$out/section.md"
# Replace what lies between the markers with the new figures.
awk -v section="$out/section.md" '
    /<!-- fleet-scale:begin -->/ { print; while ((getline line < section) > 0) print line; skip = 1; next }
    /<!-- fleet-scale:end -->/ { skip = 0 }
    !skip { print }
' "$doc" >"$out/benchmarks.md"
mv "$out/benchmarks.md" "$doc"
echo "==> figures written to $doc and docs/dev/images/fleet-scale.svg"
