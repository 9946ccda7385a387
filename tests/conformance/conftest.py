"""Fixtures for the conformance tier: vLLM's real argument parser (hack/vllm-catalog/)."""

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

HACK = Path(__file__).resolve().parents[2] / "hack" / "vllm-catalog"
CONFORMANCE_VERSIONS = ("0.33.0",)
"""Releases whose real parser the conformance tests execute (the default version first)."""


@pytest.fixture(scope="session")
def real_parser() -> Callable[[str, list[list[str]]], list[Any]]:
    """``parse(version, [argv, ...])`` through that release's real `vllm serve` parser.

    The first use per release downloads its wheel (cached in ~/.cache/vllm-operator; `make
    conformance-setup` does it ahead of time).
    """
    if str(HACK) not in sys.path:
        sys.path.insert(0, str(HACK))
    module = importlib.import_module("real_parser")
    return cast(Callable[[str, list[list[str]]], list[Any]], module.parse_many_with_real_parser)
