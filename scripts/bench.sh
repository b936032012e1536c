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
# Then the apply under pve-sim's cost profile (#42: PVE's worker pools, keep-alive and storage
# locks; `bench_apply_under_costs`), written between the cost-apply markers:
#   BENCH_COST_SIZES=20,100 BENCH_COST_PARALLELISM=10,50    # the defaults
#   BENCH_COST_TREES="this tree=/path/a,0afa8e7=/path/b"    # other trees' provider builds,
#                                                           # alternating in the same run
#   BENCH_COST_HISTORY=fresh,history                        # also after an earlier apply
#                                                           # (its tasks in PVE's archive)
#   BENCH_COST_AGENT_PING_MS=100                            # the agent's ping timeout
#                                                           # (default PVE's 3000)
#   BENCH_COST_AGENT_BOOT_MS=30000                          # the agent up later after its
#                                                           # start (default 3000)
#   BENCH_SKIP_FLEET=1 scripts/bench.sh                     # the cost-profile run only
#
# With BENCH_SCALE=1, first the refresh and plan of 10,000 VMs in one state and in 20 states
# of 500 (#42's scale item; `bench_refresh_at_scale`, about 20 minutes of building the
# fleet), written between the refresh-scale markers; it sizes by BENCH_SCALE_VMS and
# BENCH_SCALE_STATES.
#
# Needs terraform on the PATH (or TF_ACC_TERRAFORM_PATH) and /usr/bin/time (GNU time) for
# the provider's peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

out="$PWD/target/bench-fleet"
doc=docs/dev/benchmarks.md
mkdir -p "$out" docs/dev/images

profile="${BENCH_PROFILE:-release}"   # BENCH_PROFILE=dev reuses the debug build
cargo_test() { cargo test --profile "$profile" --locked --test provider -- "$@"; }
replace_section() { # marker, file with the new text
    awk -v section="$2" -v begin="<!-- $1:begin -->" -v end="<!-- $1:end -->" '
        $0 == begin { print; while ((getline line < section) > 0) print line; skip = 1; next }
        $0 == end { skip = 0 }
        !skip { print }
    ' "$doc" >"$out/benchmarks.md"
    mv "$out/benchmarks.md" "$doc"
}
stamp() {
    echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores (load average $(cut -d' ' -f1 /proc/loadavg) at the end), $(terraform version | head -1), $profile build:"
    echo
}

if [ -n "${BENCH_SCALE:-}" ]; then
    BENCH_OUT="$out" TF_ACC=1 cargo_test --ignored --nocapture --exact \
        acc_request_budget::bench_refresh_at_scale
    { stamp; cat "$out/scale.md"; } >"$out/scale-section.md"
    replace_section refresh-scale "$out/scale-section.md"
    echo "==> scale figures written to $doc"
fi

BENCH_OUT="$out" TF_ACC=1 cargo_test --ignored --nocapture --exact \
    acc_request_budget::bench_apply_under_costs
{ stamp; cat "$out/cost-apply.md"; } >"$out/cost-section.md"
replace_section cost-apply "$out/cost-section.md"
echo "==> cost-profile figures written to $doc"
[ -n "${BENCH_SKIP_FLEET:-}" ] && exit 0

BENCH_OUT="$out" TF_ACC=1 cargo_test --ignored --nocapture --exact \
    acc_request_budget::bench_fleet_scale
cp "$out/fleet-scale.svg" docs/dev/images/fleet-scale.svg
{ stamp; cat "$out/fleet-scale.md"; } >"$out/section.md"
replace_section fleet-scale "$out/section.md"
echo "==> figures written to $doc and docs/dev/images/fleet-scale.svg"
