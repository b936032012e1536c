#!/usr/bin/env bash
# The heavy failure-path runs (docs/dev/reliability.md): 15 and 20 VMs under 10% injected 5xx on
# every endpoint and under a mixed fault set (resets, 5xx, 595, a failed start task, a held
# template lock, latency), each against its own pve-sim. Every run must converge within one
# re-apply, end with empty plans and leave no VM and no seed ISO; each prints its figures.
set -euo pipefail
cd "$(dirname "$0")/.."

export TF_ACC=1 CHECKPOINT_DISABLE=1
# One run at a time: the figures are per run, and 20 VMs already keep 2 cores busy.
cargo test --locked --test provider -- --ignored --nocapture --test-threads=1 \
  acc_failure_paths::soak_ 2>&1 \
  | grep -E '^soak |^test |test result'
