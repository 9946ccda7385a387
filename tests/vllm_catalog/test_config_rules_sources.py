"""Every config-class rule quotes vLLM's words from the validator it cites (#19).

Reads the release sources the catalog generator caches (hack/vllm-catalog/fetch.py:
``<cache>/vllm-src/<version>``; `make catalog` fetches them) and checks, for each rule and each
release it claims, that the cited file has the cited class and function and that the function
*raises* the message the rule quotes (its literal parts; vLLM's interpolations aside), or, for a
``Field`` constraint, that the cited field is declared with that keyword and value. A release
whose sources are not cached is skipped. The behaviour (check-args refuses a breaking value with
the rule quoted, takes a value that keeps it) is checked for every release from the catalog.
"""

import ast
import json
import os
import re
from functools import cache
from pathlib import Path

import pytest

from vllm_operator.catalog.vllm import ArgsError, check_argv, load_version, render_extra_args
from vllm_operator.catalog.vllm.config_rules import RULES, ConfigRule
from vllm_operator.catalog.vllm.loader import supported_versions

CACHE = Path(
    os.environ.get("VLLM_OPERATOR_CACHE_DIR")
    or os.environ.get("VLLM_OPERATOR_CACHE")
    or Path.home() / ".cache" / "vllm-operator"
)

BREAKS: dict[str, tuple[dict[str, object], dict[str, object]]] = {
    "kv-transfer-config-needs-kv-connector": (
        {"engine_id": "x"},
        {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
    ),
    "kv-connector-needs-kv-role": (
        {"kv_connector": "NixlConnector"},
        {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
    ),
    "ec-connector-needs-ec-role": (
        {"ec_connector": "ECExampleConnector"},
        {"ec_connector": "ECExampleConnector", "ec_role": "ec_producer"},
    ),
    "disable-additional-properties-needs-guidance": (
        {"disable_additional_properties": True},
        {"disable_additional_properties": True, "backend": "guidance"},
    ),
    "engram-shared-memory-needs-cpu-offload": (
        {"dp_shared_memory": True},
        {"dp_shared_memory": True, "cpu_offload": True},
    ),
    "engram-thp-needs-private-cpu-offload": (
        {"cpu_offload": False, "use_thp": True},
        {"cpu_offload": True, "use_thp": True},
    ),
    "disable-any-whitespace-needs-xgrammar-or-guidance": (
        {"disable_any_whitespace": True, "backend": "outlines"},
        {"disable_any_whitespace": True, "backend": "xgrammar"},
    ),
    "torch-profiler-activities-without-duplicates": (
        {
            "torch_profiler_activities": ["CPU", "CPU"],
            "profiler": "torch",
            "torch_profiler_dir": "/p",
        },
        {"torch_profiler_activities": ["CPU"], "profiler": "torch", "torch_profiler_dir": "/p"},
    ),
    "torch-profiler-dir-needs-torch": (
        {"torch_profiler_dir": "/tmp/p"},
        {"torch_profiler_dir": "/tmp/p", "profiler": "torch"},
    ),
    "torch-profiler-needs-dir": (
        {"profiler": "torch"},
        {"profiler": "torch", "torch_profiler_dir": "/tmp/p"},
    ),
    "proton-profiler-needs-dir": (
        {"profiler": "proton"},
        {"profiler": "proton", "proton_profiler_dir": "/tmp/p"},
    ),
    "capture-torch-profiler-needs-torch": (
        {"capture_torch_profiler": True},
        {"capture_torch_profiler": True, "profiler": "torch", "torch_profiler_dir": "/tmp/p"},
    ),
    "proton-options-need-proton": (
        {"proton_context": "python"},
        {"proton_context": "python", "profiler": "proton", "proton_profiler_dir": "/tmp/p"},
    ),
    "torch-profiler-activities-need-torch": (
        {"torch_profiler_activities": []},
        {"torch_profiler_activities": [], "profiler": "torch", "torch_profiler_dir": "/tmp/p"},
    ),
    "sparse-mla-prefill-workspace-factor-at-least-2": (
        {"sparse_mla_prefill_workspace_factor": 1},
        {"sparse_mla_prefill_workspace_factor": 2},
    ),
    "linear-backend-per-quant-not-empty": (
        {"linear_backend_per_quant": {}},
        {"linear_backend_per_quant": None},
    ),
}
"""Per rule: a value that breaks it and the nearest value that keeps it."""

CASES = [(rule, v) for v in supported_versions() for rule in RULES if rule.applies(v)]
IDS = [f"{v}-{r.name}" for r, v in CASES]


def _literal_text(node: ast.AST) -> str:
    """A string expression's literal parts, interpolations left out."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_literal_text(v) for v in node.values)
    return ""


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _class(path: Path, name: str) -> ast.ClassDef:
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"class {name} not found in {path}")


def _raised_texts(cls: ast.ClassDef, func: str) -> list[str]:
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == func:
            return [
                _normal(_literal_text(n))
                for r in ast.walk(item)
                if isinstance(r, ast.Raise)
                for n in ast.walk(r)
                if isinstance(n, ast.Constant | ast.JoinedStr)
            ]
    raise AssertionError(f"{cls.name}.{func} not found")


def _field_keyword(cls: ast.ClassDef, field: str, keyword: str) -> object:
    for item in cls.body:
        if (
            isinstance(item, ast.AnnAssign)
            and isinstance(item.target, ast.Name)
            and item.target.id == field
            and isinstance(item.value, ast.Call)
        ):
            for kw in item.value.keywords:
                if kw.arg == keyword:
                    return ast.literal_eval(kw.value)
    raise AssertionError(f"{cls.name}.{field} has no Field({keyword}=...)")


def test_every_rule_has_a_breaking_case() -> None:
    assert {r.name for r in RULES} == set(BREAKS)


@pytest.mark.parametrize(("rule", "version"), CASES, ids=IDS)
def test_the_cited_validator_raises_the_quoted_message(rule: ConfigRule, version: str) -> None:
    """For every catalog release each rule claims."""
    root = CACHE / "vllm-src" / version
    if not root.is_dir():
        pytest.skip(f"vLLM {version} sources not cached in {root}")
    path, qualified = rule.where(version).split(":")
    cls_name, member = qualified.split(".")
    cls = _class(root / path, cls_name)
    if rule.constraint is not None:
        field, keyword, value = rule.constraint
        assert member == field
        assert _field_keyword(cls, field, keyword) == value, (version, path, qualified)
        return
    literal = _normal("".join(rule.quote.split("{}")))
    assert literal in _raised_texts(cls, member), (literal, version, path, qualified)


@pytest.mark.parametrize(("rule", "version"), CASES, ids=IDS)
def test_check_args_refuses_a_breaking_value_with_the_rule_quoted(
    rule: ConfigRule, version: str
) -> None:
    catalog = load_version(version)
    spec = catalog.flags[rule.flag]
    assert spec.json_value is not None and spec.json_value.config is not None
    fields = catalog.config_classes[spec.json_value.config].fields
    bad, good = BREAKS[rule.name]
    assert set(bad) | set(good) <= set(fields), (version, rule.name)
    messages = [p.message for p in check_argv(version, [rule.flag, json.dumps(bad)])]
    literal_start = rule.quote.split("{}")[0] or rule.quote.split("{}")[1]
    assert len(messages) == 1 and literal_start in messages[0], messages
    assert rule.where(version) in messages[0]
    assert check_argv(version, [rule.flag, json.dumps(good)]) == []


def test_the_ranges_start_where_vllm_started_checking() -> None:
    """0.10.2 still says kv_disagg_role (the kv_role wording starts in 0.11.2); 0.27.1 has no
    proton options, and 0.31.0 no sparse MLA workspace factor."""
    kv = [r for r in RULES if r.name == "kv-connector-needs-kv-role"]
    assert [r.quote.split(" when")[0] for r in kv if r.applies("0.10.2")] == [
        "Please specify kv_disagg_role"
    ]
    assert [r.quote.split(" when")[0] for r in kv if r.applies("0.11.2")] == [
        "Please specify kv_role"
    ]
    assert not [r for r in RULES if r.name.startswith("proton") and r.applies("0.27.1")]
    assert "proton_mode" not in load_version("0.27.1").config_classes["ProfilerConfig"].fields
    assert "sparse_mla_prefill_workspace_factor" not in (
        load_version("0.31.0").config_classes["AttentionConfig"].fields
    )


def test_render_refuses_extra_args_that_break_a_rule_in_json_and_dotted_forms() -> None:
    """spec.vllm.extraArgs go through the same rules, whichever form the value is written in."""
    with pytest.raises(ArgsError) as json_form:
        render_extra_args("0.33.0", {"--kv-transfer-config": '{"kv_connector": "NixlConnector"}'})
    (problem,) = json_form.value.problems
    assert "Please specify kv_role when kv_connector is set" in problem.message
    assert "vllm/config/kv_transfer.py:KVTransferConfig.__post_init__" in problem.message
    with pytest.raises(ArgsError, match="capture_torch_profiler is only applicable"):
        render_extra_args("0.33.0", {"--profiler-config.capture_torch_profiler": "true"})
    assert render_extra_args(
        "0.33.0",
        {"--kv-transfer-config": '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'},
    ) == ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}']
