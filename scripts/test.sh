#!/usr/bin/env bash
# Every test CI runs: formatting, lints, unit, simulator, gRPC and terraform-driven
# acceptance tests (TF_ACC=1, against the embedded pve-sim; no PVE host needed).
set -euo pipefail
cd "$(dirname "$0")/.."

export TF_ACC="${TF_ACC:-1}"
export CHECKPOINT_DISABLE=1

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# --no-fail-fast: one run reports every failing test binary, not just the first.
cargo test --workspace --locked --no-fail-fast
