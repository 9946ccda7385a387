"""Locate the Go-built test tools (Helm, promtool) the packaging tests run.

The tools are built by `make tools-helm` / `make promtool` (hack/tools/build.sh,
hack/tools/build-prometheus.sh) into a version-keyed cache; the scripts' `--dir` mode says where.
A missing tool skips its tests, unless VLLM_OPERATOR_REQUIRE_TOOLS=1 (set by `make test-packaging`,
which builds them first), where a skip would hide that CI checked nothing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack" / "tools"

_SCRIPTS = {
    "helm": [str(HACK / "build.sh"), "--dir", "helm"],
    "promtool": [str(HACK / "build-prometheus.sh"), "--dir"],
    "prometheus": [str(HACK / "build-prometheus.sh"), "--dir"],
}
_BUILD_HINT = {
    "helm": "make tools-helm",
    "promtool": "make promtool",
    "prometheus": "make promtool",
}


def tool_path(name: str) -> Path:
    """The tool's binary, or skip (fail when VLLM_OPERATOR_REQUIRE_TOOLS=1) when not built."""
    directory = subprocess.run(
        _SCRIPTS[name], check=True, capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    path = Path(directory) / name
    if not os.access(path, os.X_OK):
        message = f"{name} is not built at {path}: run `{_BUILD_HINT[name]}`"
        if os.environ.get("VLLM_OPERATOR_REQUIRE_TOOLS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path
