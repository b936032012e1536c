#!/usr/bin/env bash
# Release artifacts as the Terraform and OpenTofu registries expect them (what goreleaser does
# for Go providers):
#   terraform-provider-proxmox_VERSION_OS_ARCH.zip     one per platform, holding
#                                                      terraform-provider-proxmox_vVERSION[.exe]
#   terraform-provider-proxmox_VERSION_manifest.json   protocol_versions ["6.0"]
#   terraform-provider-proxmox_VERSION_SHA256SUMS      over the zips and the manifest
#   terraform-provider-proxmox_VERSION_SHA256SUMS.sig  binary detached signature (--gpg-key)
#   pve-sim_VERSION_OS-ARCH.zip                        the simulator, one per platform, holding
#                                                      pve-sim[.exe] and its README; for module
#                                                      authors' tests (docs/guides/testing-modules.md)
#
# The pve-sim zips spell the platform OS-ARCH, with a hyphen: the OpenTofu registry's indexer
# takes every release asset matching `_OS_ARCH.zip` for a provider package, and must not take
# the simulator for the provider. Their checksums are in SHA256SUMS too, so the one signature
# covers them; the registries and `terraform init` only look up the provider's zip names there.
#
# Platforms: every one whose Rust target is installed (`rustup target add …`); linux_amd64
# always. Upload everything in the output directory to a GitHub release for tag vVERSION.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/release.sh VERSION [--gpg-key ID] [--out DIR] [--binary PATH --sim-binary PATH]

  VERSION            semantic version without the leading v, e.g. 0.1.0 or 0.2.0-rc1
  --gpg-key ID       sign SHA256SUMS with this RSA or DSA key (the registries reject ECC keys)
  --out DIR          output directory (default: dist/, emptied first)
  --binary PATH      package this already-built provider for the host platform instead of
                     building it (CI pipelines that build in an earlier step; tests)
  --sim-binary PATH  the same for pve-sim; given together with --binary
EOF
}

die() {
  echo "release: $*" >&2
  exit 1
}

[ $# -ge 1 ] || {
  usage >&2
  exit 2
}
case "$1" in -h | --help)
  usage
  exit 0
  ;;
esac
version="$1"
shift
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION must be MAJOR.MINOR.PATCH[-pre] without a leading v, got '$version'"

gpg_key=""
out=""
prebuilt=""
prebuilt_sim=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gpg-key) gpg_key="${2:?--gpg-key needs a key id}" && shift 2 ;;
    --out) out="${2:?--out needs a directory}" && shift 2 ;;
    --binary) prebuilt="${2:?--binary needs a path}" && shift 2 ;;
    --sim-binary) prebuilt_sim="${2:?--sim-binary needs a path}" && shift 2 ;;
    -h | --help) usage && exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

cd "$(dirname "$0")/.."
root="$(pwd)"
name=terraform-provider-proxmox
out="${out:-$root/dist}"
case "$out" in /*) ;; *) out="$root/$out" ;; esac
# Both or neither: a release holds the provider and pve-sim of one commit.
if { [ -n "$prebuilt" ] && [ -z "$prebuilt_sim" ]; } || { [ -z "$prebuilt" ] && [ -n "$prebuilt_sim" ]; }; then
  die "--binary and --sim-binary go together"
fi
for given in "$prebuilt" "$prebuilt_sim"; do
  [ -z "$given" ] || [ -x "$given" ] || die "$given is not an executable file"
done
absolute() { case "$1" in /* | "") printf '%s' "$1" ;; *) printf '%s/%s' "$(pwd)" "$1" ;; esac; }
prebuilt="$(absolute "$prebuilt")"
prebuilt_sim="$(absolute "$prebuilt_sim")"

crate_version="$(sed -n '/^version = "/{s/^version = "\(.*\)"$/\1/p;q;}' Cargo.toml)"
if [ "$crate_version" != "$version" ]; then
  echo "release: note: Cargo.toml says $crate_version, releasing as $version" >&2
fi

# Zip entries get the commit's time, so the same commit gives the same zips.
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"

host="$(rustc -vV | sed -n 's/^host: //p')"
installed="$(rustup target list --installed 2>/dev/null || echo "$host")"
is_installed() { printf '%s\n' "$installed" "$host" | grep -qx "$1"; }

# Go os_arch (the registries' spelling) → Rust targets, preferred first (static musl on
# Linux: the binary must not depend on the user's libc).
platforms=(
  "linux_amd64 x86_64-unknown-linux-musl x86_64-unknown-linux-gnu"
  "linux_arm64 aarch64-unknown-linux-musl aarch64-unknown-linux-gnu"
  "linux_arm arm-unknown-linux-musleabihf arm-unknown-linux-gnueabihf"
  "linux_386 i686-unknown-linux-musl i686-unknown-linux-gnu"
  "darwin_amd64 x86_64-apple-darwin"
  "darwin_arm64 aarch64-apple-darwin"
  "windows_amd64 x86_64-pc-windows-msvc x86_64-pc-windows-gnu"
  "windows_arm64 aarch64-pc-windows-msvc"
  "windows_386 i686-pc-windows-msvc i686-pc-windows-gnu"
  "freebsd_amd64 x86_64-unknown-freebsd"
)

make_zip() { # make_zip ZIP DIR: the files of DIR at the zip's root, no directory entries
  local zip_path="$1" dir="$2"
  if command -v zip >/dev/null 2>&1; then
    (cd "$dir" && zip -X -q "$zip_path" -- *)
  elif command -v bsdtar >/dev/null 2>&1; then
    (cd "$dir" && bsdtar --format zip --options zip:compression=deflate -cf "$zip_path" -- *)
  elif command -v python3 >/dev/null 2>&1; then
    python3 - "$zip_path" "$dir" <<'EOF'
import os, sys, zipfile
zip_path, folder = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        info = zipfile.ZipInfo.from_file(path, name)
        info.compress_type = zipfile.ZIP_DEFLATED
        with open(path, "rb") as f:
            z.writestr(info, f.read())
EOF
  else
    die "no zip writer: install zip (or bsdtar, or python3)"
  fi
}

stamp() { # stamp DIR: every file gets the commit's time
  touch -d "@$epoch" "$1"/* 2>/dev/null || touch -t "$(date -u -r "$epoch" +%Y%m%d%H%M.%S)" "$1"/*
}

sha256() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$@"; else shasum -a 256 "$@"; fi
}

rm -rf "$out"
mkdir -p "$out"
stage_root="$(mktemp -d)"
trap 'rm -rf "$stage_root"' EXIT

built=()
for entry in "${platforms[@]}"; do
  read -r platform candidates <<<"$entry"
  target=""
  for candidate in $candidates; do
    if is_installed "$candidate"; then
      target="$candidate"
      break
    fi
  done
  if [ -z "$target" ]; then
    [ "$platform" != linux_amd64 ] && continue
    die "linux_amd64 is required (HCP Terraform runs it): rustup target add x86_64-unknown-linux-musl"
  fi
  exe=""
  case "$platform" in windows_*) exe=".exe" ;; esac

  if [ -n "$prebuilt" ] && [ "$target" = "$host" ]; then
    binary="$prebuilt"
    sim_binary="$prebuilt_sim"
    echo "==> $platform: packaging $binary and $sim_binary"
  else
    target_flag=()
    target_dir="${CARGO_TARGET_DIR:-$root/target}/release"
    if [ "$target" != "$host" ]; then
      target_flag=(--target "$target")
      target_dir="${CARGO_TARGET_DIR:-$root/target}/$target/release"
    fi
    # ${a[@]+"${a[@]}"}: an empty array under set -u in bash 3.2 (macOS).
    echo "==> $platform: cargo build --release ${target_flag[*]+"${target_flag[*]}"} (provider and pve-sim)"
    cargo build --release --locked ${target_flag[@]+"${target_flag[@]}"} \
      -p "$name" --bin "$name" -p pvesim --bin pve-sim
    binary="$target_dir/$name$exe"
    sim_binary="$target_dir/pve-sim$exe"
  fi
  [ -f "$binary" ] || die "$platform: no binary at $binary"
  [ -f "$sim_binary" ] || die "$platform: no pve-sim at $sim_binary"

  stage="$stage_root/$platform"
  mkdir -p "$stage"
  cp "$binary" "$stage/${name}_v${version}${exe}"
  chmod 0755 "$stage/${name}_v${version}${exe}"
  for extra in LICENSE* README.md CHANGELOG.md; do
    [ -f "$extra" ] && cp "$extra" "$stage/"
  done
  stamp "$stage"
  make_zip "$out/${name}_${version}_${platform}.zip" "$stage"

  sim_stage="$stage_root/pve-sim-$platform"
  mkdir -p "$sim_stage"
  cp "$sim_binary" "$sim_stage/pve-sim$exe"
  chmod 0755 "$sim_stage/pve-sim$exe"
  cp crates/pvesim/README.md "$sim_stage/README.md"
  for extra in LICENSE*; do
    [ -f "$extra" ] && cp "$extra" "$sim_stage/"
  done
  stamp "$sim_stage"
  make_zip "$out/pve-sim_${version}_${platform/_/-}.zip" "$sim_stage"
  built+=("$platform")
done

manifest="${name}_${version}_manifest.json"
printf '{"version":1,"metadata":{"protocol_versions":["6.0"]}}\n' >"$out/$manifest"

sums="${name}_${version}_SHA256SUMS"
(cd "$out" && sha256 -- *.zip "$manifest" | LC_ALL=C sort -k2 >"$sums")
# The provider zip and the pve-sim zip of every platform built, and the manifest.
[ "$(grep -c '\.zip$' "$out/$sums")" -eq $((2 * ${#built[@]})) ] ||
  die "$sums does not list a provider zip and a pve-sim zip per platform"
# Without the manifest in SHA256SUMS both registries fall back to protocol 5.
grep -q "  $manifest\$" "$out/$sums" || die "the manifest is missing from $sums"

if [ -n "$gpg_key" ]; then
  echo "==> signing $sums with $gpg_key"
  gpg --batch --yes --local-user "$gpg_key" --output "$out/$sums.sig" --detach-sign "$out/$sums"
  # The registries accept RSA (1) and DSA (17) signatures only.
  algo="$(gpg --batch --list-packets "$out/$sums.sig" 2>/dev/null | sed -n '/^:signature packet: algo /{s/^:signature packet: algo \([0-9]*\),.*/\1/p}')"
  case "$algo" in
    1 | 17) ;;
    *) die "key $gpg_key signs with algorithm ${algo:-unknown}; the registries accept RSA or DSA keys only" ;;
  esac
  gpg --batch --verify "$out/$sums.sig" "$out/$sums" 2>/dev/null || die "the signature does not verify"
else
  echo "==> no --gpg-key: SHA256SUMS left unsigned (the registries require a signature)"
fi

echo "==> release $version for ${built[*]} in $out:"
(cd "$out" && ls -l)
