#!/usr/bin/env bash
# Fetch the model-registry source of every release in versions.txt from its PyPI wheel, for
# hack/vllm-catalog/architectures.py:  hack/vllm-catalog/fetch-registries.sh DIR [PIP]
# One folder per release: registry.py (vllm/model_executor/models/registry.py, or
# models/__init__.py for releases before registry.py existed) and a `wheel` line
# "<wheel> <sha256> <path in the wheel>". Each wheel is deleted after its file is read.
# The platform tags list every manylinux tag vLLM's wheels were published with (manylinux1 up to
# 0.11, manylinux_2_31 for 0.12 to 0.19, manylinux_2_35 for 0.20, manylinux_2_24 for 0.21,
# manylinux_2_28 from 0.22): pip matches them exactly.
set -euo pipefail
out=${1:?usage: fetch-registries.sh DIR [PIP]}
pip=${2:-pip}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for v in $(grep -v '^#' "$here/versions.txt"); do
  [ -f "$out/$v/wheel" ] && continue
  rm -f "$work"/vllm-*.whl
  "$pip" download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_35_x86_64 --platform manylinux_2_31_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
    "vllm==$v" -d "$work"
  wheel=$(ls "$work"/vllm-*.whl)
  path=vllm/model_executor/models/registry.py
  unzip -Z1 "$wheel" "$path" > /dev/null 2>&1 || path=vllm/model_executor/models/__init__.py
  mkdir -p "$out/$v"
  unzip -p "$wheel" "$path" > "$out/$v/registry.py"
  echo "$(basename "$wheel") $(sha256sum "$wheel" | cut -d' ' -f1) $path" > "$out/$v/wheel"
  echo "vLLM $v: $path"
done
