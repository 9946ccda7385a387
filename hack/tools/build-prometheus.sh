#!/usr/bin/env bash
# Builds Prometheus and promtool from their Go module into the same version-keyed cache that
# hack/tools/build.sh uses for the control-plane tools.
#
# Why: CI checks the PrometheusRule with `promtool check rules` / `promtool test rules`, and the
# remediation e2e runs a real Prometheus. No Docker and no binary downloads are available, but the
# Go module proxy is, so both binaries are compiled from the pinned module in
# hack/tools/prometheus/go.mod, once, into
#   ${VLLM_OPERATOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}/bin/prometheus-<version>/
#
# What is left out, and why the build still works:
#   - the web UI: without the `builtinassets` tag Prometheus serves the UI from disk (web/ui/ui.go),
#     so no npm build and no generated asset files are needed; the HTTP API works fully;
#   - service discovery plugins: `remove_all_sd` keeps only static, file and http SD
#     (plugins/minimum.go). Tests scrape fixed local targets; this halves the cold build.
#   - the module proxy refuses github.com/pb33f/jsonschema/v6, which only Prometheus' own tests
#     import (via libopenapi-validator), so go.mod was tidied with `go mod tidy -e`; the binaries do
#     not need it.
#
# Usage:
#   hack/tools/build-prometheus.sh          build prometheus + promtool (only when missing)
#   hack/tools/build-prometheus.sh --dir    print the directory that holds both binaries
#
# Set VLLM_OPERATOR_BIN_DIR to a directory holding ready-made `prometheus` and `promtool` binaries
# to skip building (same convention as build.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${VLLM_OPERATOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}"
module_dir="${here}/prometheus"
main_module=github.com/prometheus/prometheus
binaries="prometheus promtool"
tags=remove_all_sd

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

module_version() {
  local v
  v="$(awk -v m="$main_module" '($1 == m || ($1 == "require" && $2 == m)) { print ($1 == "require" ? $3 : $2); exit }' \
    "${module_dir}/go.mod")"
  [[ -n "$v" ]] || { log "Failed to find the version of ${main_module} in ${module_dir}/go.mod"; exit 1; }
  printf '%s' "$v"
}

# Prometheus v3.x.y is published as Go module version v0.30x.y (v3.16.0 -> v0.316.0).
release_version() {
  local v="${1#v0.}" minor patch
  minor="${v%%.*}"; patch="${v#*.}"; patch="${patch%%[-+]*}"
  printf '3.%d.%s' "$((10#${minor} - 300))" "$patch"
}

tool_dir() { printf '%s/bin/prometheus-%s' "$cache_root" "$(module_version)"; }

have_all() {
  local dir="$1" b
  for b in $binaries; do [[ -x "${dir}/${b}" ]] || return 1; done
}

if [[ "${1:-}" == "--dir" ]]; then
  if [[ -n "${VLLM_OPERATOR_BIN_DIR:-}" ]] && have_all "$VLLM_OPERATOR_BIN_DIR"; then
    printf '%s\n' "$VLLM_OPERATOR_BIN_DIR"
  else
    printf '%s\n' "$(tool_dir)"
  fi
  exit 0
fi
[[ $# -eq 0 ]] || { log "Unknown argument=$1; accepted: --dir"; exit 2; }

if [[ -n "${VLLM_OPERATOR_BIN_DIR:-}" ]] && have_all "$VLLM_OPERATOR_BIN_DIR"; then
  log "Using prebuilt tool=prometheus dir=${VLLM_OPERATOR_BIN_DIR}"
  exit 0
fi
version="$(module_version)"
dir="$(tool_dir)"
if have_all "$dir"; then
  log "Found tool=prometheus version=${version} dir=${dir}"
  exit 0
fi
command -v go >/dev/null || { log "Failed to build tool=prometheus: no Go toolchain on PATH"; exit 3; }
tmp="${dir}.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
log "Building tool=prometheus version=${version} (first run; cold builds take minutes) dir=${dir}"
start=$SECONDS
release="$(release_version "$version")"
vpkg=github.com/prometheus/common/version
ldflags="-s -w -X ${vpkg}.Version=${release} -X ${vpkg}.Branch=HEAD -X ${vpkg}.Revision=${version}"
ldflags+=" -X ${vpkg}.BuildUser=vllm-operator -X ${vpkg}.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
(
  cd "$module_dir"
  CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "${tmp}/" tool
)
have_all "$tmp" || { log "Failed to build tool=prometheus: missing binaries in ${tmp}"; exit 1; }
rm -rf "$dir"; mv "$tmp" "$dir"
trap - EXIT
log "Built tool=prometheus version=${version} seconds=$((SECONDS - start)) dir=${dir}"
