#!/usr/bin/env bash
# `make demo` / `make demo-down`: a local control plane with simulated GPU nodes, left running.
#
# Why a script: the steps (build the binaries on first use, start the cluster, install the CRD,
# apply examples/, show a rejection, print the table) are the README's first command and must
# behave the same from make and by hand. State (certs, etcd data, logs, kubeconfig) lives in
#   ${VLLM_OPERATOR_STATE_DIR:-~/.cache/vllm-operator/run/demo}, outside the repository.
#
# Usage: hack/demo.sh up|down|status|scenario
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-$root/.venv/bin/python}"

case "${1:-up}" in
  up)
    hack/tools/build.sh etcd kubernetes kwok lws
    exec "$py" -m e2e.demo ;;
  down)
    "$py" -m e2e.demo --stop-operator
    exec "$py" -m e2e.localcluster down ;;
  scenario)
    exec "$py" -m e2e.demo --scenario ;;
  status)
    exec "$py" -m e2e.localcluster status ;;
  *)
    echo "usage: $0 up|down|status|scenario" >&2; exit 2 ;;
esac
