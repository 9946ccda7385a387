"""Every engine rule quotes vLLM's words from the function it cites (#19 item 2).

Reads the release sources the catalog generator caches (hack/vllm-catalog/fetch.py:
``<cache>/vllm-src/<version>``; `make catalog` fetches them) and checks, for each rule and each
release it cites, that the cited file has the cited function and that the function raises the
message the rule quotes (its literal text, the interpolated numbers aside). A release whose
sources are not cached is skipped; the rule table itself is tested in test_engine_rules.py.
"""

import ast
import os
import re
from functools import cache
from pathlib import Path

import pytest

from vllm_operator.catalog.vllm.loader import supported_versions
from vllm_operator.planning.engine_rules import RULES, ConfigValue, EngineRule
from vllm_operator.planning.versions import Engine, VllmVersion

CACHE = Path(
    os.environ.get("VLLM_OPERATOR_CACHE_DIR")
    or os.environ.get("VLLM_OPERATOR_CACHE")
    or Path.home() / ".cache" / "vllm-operator"
)

VIOLATIONS: dict[str, dict[str, ConfigValue]] = {
    "chunked-prefill-off-needs-batched-tokens-of-max-model-len": {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": 2048,
        "max_model_len": 8192,
    },
    "batched-tokens-at-least-max-num-seqs": {"max_num_batched_tokens": 16, "max_num_seqs": 32},
    "long-prefill-threshold-within-max-model-len": {
        "long_prefill_token_threshold": 9000,
        "max_model_len": 8192,
        "max_num_partial_prefills": 2,
    },
    "partial-prefills-need-chunked-prefill": {
        "max_num_partial_prefills": 2,
        "enable_chunked_prefill": False,
    },
    "long-partial-prefills-within-partial-prefills": {
        "max_long_partial_prefills": 3,
        "max_num_partial_prefills": 2,
    },
    "active-seqs-within-max-num-seqs": {"max_num_active_seqs": 9, "max_num_seqs": 8},
    "local-data-parallel-within-data-parallel": {
        "data_parallel_size_local": 4,
        "data_parallel_size": 2,
    },
    "external-lb-needs-data-parallel": {"data_parallel_external_lb": True},
    "eplb-needs-expert-parallel": {"enable_eplb": True},
    "tensor-parallel-divisible-by-decode-context-parallel": {
        "tensor_parallel_size": 2,
        "decode_context_parallel_size": 4,
    },
}

CASES = [
    (rule, version)
    for version in supported_versions()
    for rule in RULES
    if rule.applies(VllmVersion.parse(version))
]


def _literal_text(node: ast.AST) -> str:
    """A string expression's literal parts, interpolations left out."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_literal_text(v) for v in node.values)
    return ""


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _function(path: Path, qualified: str) -> ast.FunctionDef:
    cls_name, func_name = qualified.split(".")
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == func_name:
                    return item
    raise AssertionError(f"{qualified} not found")


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"\d+", "", text)).strip()


def test_every_rule_has_a_violation_case() -> None:
    assert {r.name for r in RULES} == set(VIOLATIONS)


@pytest.mark.parametrize(
    ("rule", "version"), CASES, ids=[f"{v}-{r.name}-{r.since}" for r, v in CASES]
)
def test_the_cited_function_raises_the_quoted_message(rule: EngineRule, version: str) -> None:
    """For every catalog release and every rule applying to it."""
    root = CACHE / "vllm-src" / version
    if not root.is_dir():
        pytest.skip(f"vLLM {version} sources not cached in {root}")
    parsed = VllmVersion.parse(version)
    path, qualified = rule.where(parsed).split(":")
    function = _function(root / path, qualified)
    texts = [
        _normal(_literal_text(n))
        for n in ast.walk(function)
        if isinstance(n, ast.Constant | ast.JoinedStr)
    ]
    engine = next(iter(rule.engines)) if rule.engines else Engine.V1
    message = rule.check(VIOLATIONS[rule.name], engine)
    assert message is not None, rule.name
    assert _normal(message) in texts, (message, version, path, qualified)


def test_a_release_without_a_rule_has_no_function_raising_it() -> None:
    """The ranges end where vLLM stopped checking: partial prefills are gone from 0.27.0."""
    root = CACHE / "vllm-src" / "0.27.0"
    if not root.is_dir():
        pytest.skip(f"vLLM 0.27.0 sources not cached in {root}")
    text = (root / "vllm/config/scheduler.py").read_text()
    assert "max_num_partial_prefills > 1" not in text
    assert not [
        r.name for r in RULES if r.applies(VllmVersion.parse("0.27.0")) and "partial" in r.name
    ]
