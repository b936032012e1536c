#!/usr/bin/env bash
# Installs the tools the test suite drives that are not Rust crates: xorriso, isoinfo and
# bsdtar (they judge our seed ISO), cloud-init (its own code judges our seed's cloud-config),
# gpg (the release test signs and verifies with a throwaway key).
# Terraform itself must already be on the PATH (>= 1.11), or named by TF_ACC_TERRAFORM_PATH.
set -euo pipefail

missing=()
command -v xorriso >/dev/null 2>&1 || missing+=(xorriso)
command -v isoinfo >/dev/null 2>&1 || missing+=(genisoimage)
command -v cloud-init >/dev/null 2>&1 || missing+=(cloud-init)
command -v bsdtar >/dev/null 2>&1 || missing+=(libarchive-tools)
command -v gpg >/dev/null 2>&1 || missing+=(gpg)

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

terraform_bin="${TF_ACC_TERRAFORM_PATH:-$(command -v terraform || true)}"
if [ -z "$terraform_bin" ]; then
  echo "error: terraform (>= 1.11) is not on the PATH; install it or set TF_ACC_TERRAFORM_PATH" >&2
  exit 1
fi
# No pipe into head: under pipefail, terraform's SIGPIPE would fail the script.
version_text=$(TF_CLI_CONFIG_FILE=/dev/null "$terraform_bin" version)
echo "${version_text%%$'\n'*}"
