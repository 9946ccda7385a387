"""Pure helpers of the catalog generator (hack/vllm-catalog/generate.py) and data/input sync."""

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from vllm_operator.catalog.vllm import supported_versions

HACK = Path(__file__).resolve().parents[2] / "hack" / "vllm-catalog"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    if str(HACK) not in sys.path:
        sys.path.insert(0, str(HACK))
    return importlib.import_module("generate")


def test_index_matches_versions_txt(gen: ModuleType) -> None:
    listed = gen.read_versions(HACK / "versions.txt")
    assert list(supported_versions()) == sorted(listed, key=gen.version_key)


def test_counter_exposed_with_total_suffix(gen: ModuleType) -> None:
    assert gen.exposed_name("vllm:num_preemptions", "counter") == "vllm:num_preemptions_total"
    assert gen.exposed_name("vllm:num_preemptions_total", "counter") == "vllm:num_preemptions_total"
    assert gen.exposed_name("vllm:kv_cache_usage_perc", "gauge") == "vllm:kv_cache_usage_perc"


def test_type_vocabulary(gen: ModuleType) -> None:
    assert gen._norm_type("optional_type:human_readable_int") == ("human_readable_int", True)
    assert gen._norm_type("int") == ("int", False)
    assert gen._norm_type("parse_type:loads") == ("json", False)
    assert gen._norm_type("some_custom_parser") == ("str", False)


def test_write_json_is_deterministic_and_compact(gen: ModuleType, tmp_path: Path) -> None:
    entry = {
        "version": "1.0",
        "flags": {
            "--b": {"dest": "b", "kind": "value", "aliases": [], "default": 0, "deprecated": False},
            "--a": {"dest": "a", "kind": "store_true", "default": False},
        },
        "metrics": {},
        "engine": "v1-only",
    }
    first, second = tmp_path / "1.json", tmp_path / "2.json"
    gen.write_json(first, entry)
    gen.write_json(second, dict(reversed(list(entry.items()))))
    assert first.read_bytes() == second.read_bytes()
    data = json.loads(first.read_text())
    assert list(data["flags"]) == ["--a", "--b"]
    assert data["flags"]["--b"] == {"dest": "b", "kind": "value", "default": 0}
    assert data["flags"]["--a"]["default"] is False


def test_literal_values_read_from_source(gen: ModuleType, tmp_path: Path) -> None:
    src = tmp_path / "vllm"
    src.mkdir()
    (src / "q.py").write_text('from typing import Literal\nQ = Literal["awq", "fp8"]\n')
    assert gen.literal_values(tmp_path, "vllm/q.py", "Q") == ["awq", "fp8"]
    assert gen.literal_values(tmp_path, "vllm/q.py", "Missing") is None
