#!/usr/bin/env bash
# Regenerates the registry docs (docs/index.md, docs/resources/, docs/data-sources/) from the
# provider's schema, as `terraform providers schema -json` reports it, and examples/.
# Pass --check to compare instead of writing (exit 1 on any difference).
set -euo pipefail
cd "$(dirname "$0")/.."

tf="${TF_ACC_TERRAFORM_PATH:-$(command -v terraform || command -v tofu || true)}"
if [ -z "$tf" ]; then
  echo "error: neither terraform nor tofu is on the PATH" >&2
  exit 1
fi

# A debug build: the schema is the same as a release build's, and the tests' build is reused.
echo "==> building the provider"
cargo build --locked --bin terraform-provider-proxmox
if [ "${1:-}" != "--check" ]; then
  echo "==> formatting examples/"
  "$tf" fmt -recursive examples >/dev/null
fi
echo "==> generating docs"
cargo run --quiet --locked -p docgen -- \
  --terraform "$tf" \
  --provider-binary "${CARGO_TARGET_DIR:-target}/debug/terraform-provider-proxmox" \
  "$@"
