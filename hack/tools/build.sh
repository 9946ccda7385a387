#!/usr/bin/env bash
# Builds the local control-plane tools from their Go modules into a version-keyed cache.
#
# Why: this project's e2e tier and `make demo` need a real etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok (and Helm for the chart). No Docker and no
# binary downloads are available, but the Go module proxy is, so each tool is compiled from the
# pinned module in hack/tools/<tool>/go.mod. A binary is built only when missing from
#   ${VLLM_OPERATOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}/bin/<tool>-<version>/
#
# Usage:
#   hack/tools/build.sh [TOOL...]      build the tools (default: etcd kubernetes kwok)
#   hack/tools/build.sh --dir TOOL     print the directory that holds TOOL's binaries
#   TOOL is one of: etcd kubernetes kwok helm lws epp extproc-client
#   (extproc-client is this repository's own program, hack/tools/extproc-client/main.go: a test
#   client of the Endpoint Picker's ext_proc API; its cache directory is keyed by a hash of its
#   sources instead of a module version)
#
# Set VLLM_OPERATOR_BIN_DIR to a directory holding ready-made binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok, helm, lws-controller) to skip building; the harness and this
# script then use those instead.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${VLLM_OPERATOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}"

# module path whose required version names the cache directory
declare -A main_module=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kubernetes]=k8s.io/kubernetes
  [kwok]=sigs.k8s.io/kwok
  [helm]=helm.sh/helm/v3
  [lws]=sigs.k8s.io/lws
  [epp]=sigs.k8s.io/gateway-api-inference-extension
  [extproc-client]=vllm-operator.dev/hack/tools/extproc-client
)
# tools whose source is in this repository (no released version to key the cache by)
declare -A local_source=(
  [extproc-client]=1
)
declare -A binaries=(
  [etcd]="etcd"
  [kubernetes]="kube-apiserver kube-controller-manager kube-scheduler kubectl"
  [kwok]="kwok"
  [helm]="helm"
  [lws]="lws-controller"
  [epp]="epp"
  [extproc-client]="extproc-client"
)
# a tool whose main package is not named after its binary: built name -> cached name
# (the LeaderWorkerSet controller's main package is sigs.k8s.io/lws/cmd)
declare -A renames=(
  [lws]="cmd:lws-controller"
)

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

tool_version() {
  local tool="$1" mod="${main_module[$1]}"
  local v
  if [[ -n "${local_source[$tool]:-}" ]]; then
    v="$(cd "${here}/${tool}" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-12)"
    printf 'src-%s' "$v"
    return 0
  fi
  v="$(awk -v m="$mod" '($1 == m || ($1 == "require" && $2 == m)) { print ($1 == "require" ? $3 : $2); exit }' \
    "${here}/${tool}/go.mod")"
  [[ -n "$v" ]] || { log "Failed to find the version of ${mod} in ${here}/${tool}/go.mod"; exit 1; }
  printf '%s' "$v"
}

tool_dir() {
  printf '%s/bin/%s-%s' "$cache_root" "$1" "$(tool_version "$1")"
}

have_all() {
  local dir="$1" tool="$2" b
  for b in ${binaries[$tool]}; do [[ -x "${dir}/${b}" ]] || return 1; done
}

ldflags_for() {
  local tool="$1" version="$2"
  local date; date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  case "$tool" in
    kubernetes)
      local minor="${version#v1.}"; minor="${minor%%.*}"
      local f="" pkg
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        f+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
        f+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${date}"
      done
      printf '%s' "$f" ;;
    kwok) printf '' ;;  # kwok embeds its own version constant
    helm) printf ' -X helm.sh/helm/v3/internal/version.version=%s' "$version" ;;
    lws) printf ' -X sigs.k8s.io/lws/pkg/version.GitVersion=%s -X sigs.k8s.io/lws/pkg/version.BuildDate=%s' \
      "$version" "$date" ;;
    *) printf '' ;;
  esac
}

build_tool() {
  local tool="$1"
  [[ -n "${main_module[$tool]:-}" ]] || { log "Unknown tool=${tool}; accepted: ${!main_module[*]}"; exit 2; }
  if [[ -n "${VLLM_OPERATOR_BIN_DIR:-}" ]] && have_all "$VLLM_OPERATOR_BIN_DIR" "$tool"; then
    log "Using prebuilt tool=${tool} dir=${VLLM_OPERATOR_BIN_DIR}"
    return 0
  fi
  local version dir
  version="$(tool_version "$tool")"
  dir="$(tool_dir "$tool")"
  if have_all "$dir" "$tool"; then
    log "Found tool=${tool} version=${version} dir=${dir}"
    return 0
  fi
  command -v go >/dev/null || { log "Failed to build tool=${tool}: no Go toolchain on PATH"; exit 3; }
  local tmp="${dir}.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  log "Building tool=${tool} version=${version} (first run; cold builds take minutes) dir=${dir}"
  local start=$SECONDS
  local -a pkgs
  if grep -q '^tool' "${here}/${tool}/go.mod"; then pkgs=(tool); else pkgs=(.); fi
  (
    cd "${here}/${tool}"
    CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
      go build -trimpath -ldflags "-s -w$(ldflags_for "$tool" "$version")" -o "${tmp}/" "${pkgs[@]}"
  )
  if [[ -n "${renames[$tool]:-}" ]]; then
    mv "${tmp}/${renames[$tool]%%:*}" "${tmp}/${renames[$tool]#*:}"
  fi
  if [[ "$tool" == lws ]]; then
    # The controller's CRD from the same module version, beside the binary.
    local moddir
    moddir="$(cd "${here}/${tool}" && GOFLAGS="${GOFLAGS:-} -mod=readonly" go list -m -f '{{.Dir}}' "${main_module[$tool]}")"
    mkdir -p "${tmp}/crds"
    cp "${moddir}"/config/crd/bases/*.yaml "${tmp}/crds/"
  fi
  have_all "$tmp" "$tool" || { log "Failed to build tool=${tool}: missing binaries in ${tmp}"; exit 1; }
  rm -rf "$dir"; mv "$tmp" "$dir"
  trap - EXIT
  log "Built tool=${tool} version=${version} seconds=$((SECONDS - start)) dir=${dir}"
}

if [[ "${1:-}" == "--dir" ]]; then
  tool="${2:?usage: $0 --dir TOOL}"
  if [[ -n "${VLLM_OPERATOR_BIN_DIR:-}" ]] && have_all "$VLLM_OPERATOR_BIN_DIR" "$tool"; then
    printf '%s\n' "$VLLM_OPERATOR_BIN_DIR"
  else
    printf '%s\n' "$(tool_dir "$tool")"
  fi
  exit 0
fi

tools=("$@")
[[ ${#tools[@]} -gt 0 ]] || tools=(etcd kubernetes kwok)
for t in "${tools[@]}"; do build_tool "$t"; done
