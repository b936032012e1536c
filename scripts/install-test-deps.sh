#!/usr/bin/env bash
# Installs the tools the test suite drives that are not Rust crates: xorriso, isoinfo and
# bsdtar (they judge our seed ISO), blkid (what cloud-init uses to find it), cloud-init and
# its Python (its own code judges our seed's cloud-config), gpg (the release test signs and
# verifies with a throwaway key).
# Terraform itself must already be on the PATH (>= 1.11), or named by TF_ACC_TERRAFORM_PATH.
#
# scripts/test.sh runs this first, so on a fresh machine `scripts/test.sh` alone sets up what
# it needs. Missing tools are installed with apt-get, as root or through sudo; when neither is
# possible this stops at once with the one command to run as root.
set -euo pipefail

# Each tool and its Debian package; the tests name the same packages when a tool is missing
# (TOOL_PACKAGES in tests/provider/support, PACKAGES in crates/nocloud/tests/nocloud/common).
missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need xorriso xorriso
need isoinfo genisoimage
need bsdtar libarchive-tools
need blkid util-linux
need cloud-init cloud-init
need python3 python3
need gpg gpg

if [ ${#missing[@]} -gt 0 ]; then
  here="$(cd "${0%/*}" && pwd)"
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "error: the tests need ${missing[*]} (Debian packages), and this user can install" \
      "nothing (not root, no sudo). Run this as root, then run the tests again:" >&2
    echo "  $here/install-test-deps.sh" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: the tests need ${missing[*]} (Debian package names) and there is no apt-get:" \
      "install their equivalents with this system's package manager." >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Without acceptance tests (TF_ACC=0) nothing runs terraform.
if [ "${TF_ACC:-1}" = "0" ]; then
  exit 0
fi
terraform_bin="${TF_ACC_TERRAFORM_PATH:-$(command -v terraform || true)}"
if [ -z "$terraform_bin" ]; then
  echo "error: terraform (>= 1.11) is not on the PATH; install it or set TF_ACC_TERRAFORM_PATH" >&2
  exit 1
fi
# No pipe into head: under pipefail, terraform's SIGPIPE would fail the script.
version_text=$(TF_CLI_CONFIG_FILE=/dev/null "$terraform_bin" version)
echo "${version_text%%$'\n'*}"
