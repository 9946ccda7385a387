"""Conformance: argv that the catalog accepts is accepted by the release's REAL parser.

The catalog (data) and the validation API (code) are only as good as their agreement with
vLLM itself.  These tests render realistic plans with render_engine_args, then run
``vllm serve MODEL ARGV`` through the pinned release's own argument parser (executed from the
official wheel's sources, heavy dependencies stubbed; see docs/vllm-versions.md), and check that
what the catalog rejects, vLLM rejects too.  All argvs of a release go through one parser build.
"""

from collections.abc import Callable
from typing import Any

import pytest

from tests.conformance.conftest import CONFORMANCE_VERSIONS
from vllm_operator.catalog.vllm import check_argv, load_version, render_engine_args

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

PLANS: list[dict[str, Any]] = [
    # single GPU, long context, prefix caching on, bf16 KV
    {
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.9,
        "max_model_len": 32768,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 8192,
        "enable_prefix_caching": True,
        "block_size": 16,
        "dtype": "bfloat16",
    },
    # TP=4, fp8 KV cache, prefix caching off, eager
    {
        "tensor_parallel_size": 4,
        "gpu_memory_utilization": 0.88,
        "max_model_len": 131072,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 16384,
        "enable_prefix_caching": False,
        "kv_cache_dtype": "fp8",
        "enforce_eager": True,
        "enable_chunked_prefill": True,
    },
    # explicit KV budget instead of a utilisation share, quantized weights
    {
        "tensor_parallel_size": 2,
        "kv_cache_memory_bytes": 8 * 1024**3,
        "max_model_len": 8192,
        "max_num_seqs": 32,
        "quantization": "fp8",
        "dtype": "float16",
        "enable_chunked_prefill": False,
        "pipeline_parallel_size": 1,
    },
    # T4-style: half precision, small batches, CPU offload
    {
        "dtype": "half",
        "max_model_len": 4096,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 4096,
        "gpu_memory_utilization": 0.85,
        "cpu_offload_gb": 4,
        "enforce_eager": False,
    },
]

REJECTED: list[list[str]] = [
    ["--max-num-on-the-fly-batches", "4"],
    ["--swap-space", "8"],
    ["--enable-chunked-prefill=False"],
    ["--max-seq-len-to-capture", "8192"],
    ["--dtype", "fp64"],
]


def plan_argvs(version: str) -> list[list[str]]:
    return [[MODEL, *render_engine_args(version, plan)] for plan in PLANS]


def boolean_argvs(version: str) -> list[list[str]]:
    """Each ``--x`` and ``--no-x`` / ``--disable-x`` the catalog lists."""
    out: list[list[str]] = []
    for flag, spec in load_version(version).flags.items():
        if spec.kind in ("bool_optional", "store_true"):
            out.extend([MODEL, form] for form in (flag, *spec.negatives))
    return out


def choice_argvs(version: str) -> list[list[str]]:
    """Every argparse choice of every single-valued flag the catalog lists."""
    out: list[list[str]] = []
    for flag, spec in load_version(version).flags.items():
        if spec.kind == "value" and spec.choices and spec.nargs is None:
            out.extend([MODEL, flag, str(c)] for c in spec.choices if str(c) != "None")
    return out


def rejected_argvs() -> list[list[str]]:
    return [[MODEL, *argv] for argv in REJECTED]


@pytest.fixture(scope="module", params=CONFORMANCE_VERSIONS)
def parsed(
    request: pytest.FixtureRequest, real_parser: Callable[[str, list[list[str]]], list[Any]]
) -> tuple[str, dict[tuple[str, ...], Any]]:
    """(version, {argv: RealParseResult}) for every argv of this module, one parser build."""
    version: str = request.param
    argvs = plan_argvs(version) + boolean_argvs(version) + choice_argvs(version) + rejected_argvs()
    return version, {tuple(r.argv): r for r in real_parser(version, argvs)}


def failures(
    results: dict[tuple[str, ...], Any], argvs: list[list[str]]
) -> list[tuple[tuple[str, ...], str]]:
    return [(tuple(a), results[tuple(a)].error) for a in argvs if not results[tuple(a)].ok]


@pytest.mark.slow
def test_rendered_plans_parse(parsed: tuple[str, dict[tuple[str, ...], Any]]) -> None:
    version, results = parsed
    for argv in plan_argvs(version):
        assert check_argv(version, argv[1:]) == []
    assert failures(results, plan_argvs(version)) == []
    for plan, argv in zip(PLANS, plan_argvs(version), strict=True):
        namespace = results[tuple(argv)].namespace
        assert namespace["model_tag"] == MODEL
        # vLLM parsed every planned value back to what the plan meant
        assert {k: namespace[k] for k in plan} == plan


@pytest.mark.slow
def test_catalog_rejections_are_real(parsed: tuple[str, dict[tuple[str, ...], Any]]) -> None:
    version, results = parsed
    for argv in REJECTED:
        assert check_argv(version, argv), argv
    outcomes = [results[tuple(a)] for a in rejected_argvs()]
    assert [r.argv for r in outcomes if r.ok] == []
    assert {r.exit_code for r in outcomes} == {2}


@pytest.mark.slow
def test_every_boolean_form_in_the_catalog_parses(
    parsed: tuple[str, dict[tuple[str, ...], Any]],
) -> None:
    version, results = parsed
    assert len(boolean_argvs(version)) > 50
    assert failures(results, boolean_argvs(version)) == []


@pytest.mark.slow
def test_every_choice_in_the_catalog_parses(
    parsed: tuple[str, dict[tuple[str, ...], Any]],
) -> None:
    version, results = parsed
    assert len(choice_argvs(version)) > 20
    assert failures(results, choice_argvs(version)) == []
