#!/usr/bin/env bash
# Measures what reads cost on a real Proxmox VE node and prints a pve-sim config holding the
# cost profile they give ({"cost_profile": {...}}, for `pve-sim --config`; see
# crates/pvesim/README.md, "Cost profile").
#
# Read-only: every request it sends is a GET (one function sends them all), and it reads
# nothing but /version, /nodes, /cluster/status, /cluster/resources and one VM's config and
# status. What it cannot see without writing (task starts, writes, allocations, copies) keeps
# pve-sim's estimates; it says so on stderr.
#
# Environment, as the provider reads it:
#   PROXMOX_VE_ENDPOINT   https://HOST:8006 (the node whose pveproxy answers)
#   PROXMOX_VE_API_TOKEN  USER@REALM!TOKENID=SECRET (needs Sys.Audit and VM.Audit to see all)
#   PROXMOX_VE_CA_CERT    optional: the CA, as PEM text or a file
#   PROXMOX_VE_INSECURE   optional: true skips certificate checks
#   PVE_PROFILE_SAMPLES   optional: requests per call (default 10; the median is taken)
#   PVE_PROFILE_VMID      optional: the VM whose config is read (default: one on this node)
#
# How: each call is sent SAMPLES times on one kept-alive connection (curl reuses it), and its
# service time is the time to the first byte of the answer after the request was sent
# (time_starttransfer - time_pretransfer) less one round trip (the TCP connect's time).
# Requires curl and jq.
set -euo pipefail

die() {
  printf 'pve-profile: %s\n' "$*" >&2
  exit 1
}
note() { printf 'pve-profile: %s\n' "$*" >&2; }

command -v curl >/dev/null || die "curl is required"
command -v jq >/dev/null || die "jq is required"
endpoint="${PROXMOX_VE_ENDPOINT:-}"
token="${PROXMOX_VE_API_TOKEN:-}"
[ -n "$endpoint" ] || die "PROXMOX_VE_ENDPOINT is not set (https://HOST:8006)"
[ -n "$token" ] || die "PROXMOX_VE_API_TOKEN is not set (USER@REALM!TOKENID=SECRET)"
case "$token" in *'"'* | *'\'*) die "PROXMOX_VE_API_TOKEN holds a quote or a backslash" ;; esac
endpoint="${endpoint%/}"
endpoint="${endpoint%/api2/json}"
samples="${PVE_PROFILE_SAMPLES:-10}"
[[ "$samples" =~ ^[1-9][0-9]*$ ]] || die "PVE_PROFILE_SAMPLES must be a positive number"

tls=()
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
case "${PROXMOX_VE_CA_CERT:-}" in
  "") ;;
  *"-----BEGIN"*)
    printf '%s\n' "$PROXMOX_VE_CA_CERT" >"$scratch/ca.pem"
    tls=(--cacert "$scratch/ca.pem")
    ;;
  *) tls=(--cacert "$PROXMOX_VE_CA_CERT") ;;
esac
case "${PROXMOX_VE_INSECURE:-}" in
  true | 1) tls=(--insecure) ;;
esac

# The only request this script makes: `GET path`, `count` times on one connection. The token
# goes to curl on stdin (-K -), never on its command line. Prints one line per request:
# "pretransfer starttransfer connect namelookup http_code" (seconds), and keeps the last
# answer's body in $scratch/body.
api_get() {
  local path="$1" count="$2" urls=() i
  for ((i = 0; i < count; i++)); do
    urls+=(--url "$endpoint/api2/json$path")
  done
  printf 'header = "Authorization: PVEAPIToken=%s"\n' "$token" |
    curl --silent --show-error --get -K - "${tls[@]}" \
      --output "$scratch/body" \
      --write-out '%{time_pretransfer} %{time_starttransfer} %{time_connect} %{time_namelookup} %{http_code}\n' \
      "${urls[@]}"
}

# One request's answer body as JSON; nothing when it was refused (a missing privilege).
read_json() {
  local path="$1" line
  line="$(api_get "$path" 1)" || die "GET $path failed"
  if [ "${line##* }" = 200 ]; then
    cat "$scratch/body"
  else
    note "GET $path answered ${line##* }"
    echo '{}'
  fi
}

# The median service time of `GET path` in whole milliseconds (at least 0).
service_ms() {
  local path="$1" lines
  lines="$(api_get "$path" "$samples")" || die "GET $path failed"
  awk -v path="$path" '
    $5 != 200 { print "GET " path " answered " $5 > "/dev/stderr"; failed = 1; exit 1 }
    NR == 1 { rtt = $3 - $4 }
    { ms = ($2 - $1 - rtt) * 1000; if (ms < 0) ms = 0; t[NR] = ms }
    END {
      if (failed) exit 1
      n = asort_numeric(t)
      median = (n % 2) ? t[(n + 1) / 2] : (t[n / 2] + t[n / 2 + 1]) / 2
      printf "%d\n", median + 0.5
    }
    function asort_numeric(a,   i, j, k, v, n) {
      n = 0
      for (k in a) n++
      for (i = 2; i <= n; i++) {
        v = a[i]
        for (j = i - 1; j >= 1 && a[j] > v; j--) a[j + 1] = a[j]
        a[j + 1] = v
      }
      return n
    }' <<<"$lines" || die "GET $path did not answer 200"
}

version="$(read_json /version | jq -r '.data.version // empty')"
[ -n "$version" ] || die "GET /version did not name a version"
entry="$(read_json /cluster/status |
  jq -r '[.data // [] | .[] | select(.type == "node" and .local == 1)][0].name // empty')"
[ -n "$entry" ] || entry="$(read_json /nodes | jq -r '.data[0].node // empty')"
[ -n "$entry" ] || die "found no node (the token may lack Sys.Audit)"
vmid="${PVE_PROFILE_VMID:-}"
if [ -z "$vmid" ]; then
  vmid="$(read_json '/cluster/resources?type=vm' | jq -r --arg node "$entry" \
    '[.data // [] | .[] | select(.node == $node and .type == "qemu")][0].vmid // empty')"
fi
note "PVE $version, entry node $entry, $samples samples per call"

read_version="$(service_ms /version)"
read_nodes="$(service_ms /nodes)"
resources="$(service_ms /cluster/resources)"
routes="$(jq -n --argjson v "$read_version" --argjson n "$read_nodes" --argjson r "$resources" \
  '{"GET /version": $v, "GET /nodes": $n, "GET /cluster/resources": $r}')"
proxy=""
if [ -n "$vmid" ]; then
  config="$(service_ms "/nodes/$entry/qemu/$vmid/config")"
  status_index="$(service_ms "/nodes/$entry/qemu/$vmid/status")"
  current="$(service_ms "/nodes/$entry/qemu/$vmid/status/current")"
  routes="$(jq --argjson c "$config" '. + {"GET /nodes/{node}/qemu/{vmid}/config": $c}' <<<"$routes")"
  # status/current is protected (pvedaemon runs it, one forwarding hop), the status index is
  # not: the difference is roughly one hop (plus the QMP query of a running VM).
  proxy=$((current > status_index ? current - status_index : 0))
  note "VM $vmid: config ${config} ms, status index ${status_index} ms, status/current ${current} ms"
else
  note "no VM on $entry to read (set PVE_PROFILE_VMID): the config read and the hop are not measured"
fi
read_ms=$(((read_version + read_nodes + 1) / 2))
note "reads: /version ${read_version} ms, /nodes ${read_nodes} ms," \
  "/cluster/resources ${resources} ms"
note "measured: service_ms.read, service_ms.proxy (an estimate), route_ms; pve-sim's own:" \
  "workers (3 each), keep-alive (5 s, 100 requests), write, task_start, upload, storage costs"

jq -n --argjson read "$read_ms" --arg proxy "$proxy" --argjson routes "$routes" '{
  cost_profile: {
    service_ms: ({read: $read} + (if $proxy == "" then {} else {proxy: ($proxy | tonumber)} end)),
    route_ms: $routes
  }
}'
