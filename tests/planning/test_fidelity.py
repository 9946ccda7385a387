"""Fail safe where the model is unsure (issue #15 item 5): margins from the measured error."""

import re
import statistics

import pytest

from tests.planning.test_bench import load_bench
from vllm_operator.api.spec import LatencyProfile
from vllm_operator.catalog.architectures import Architecture, lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.fidelity import KV_ERROR_BY_ERA, kv_error_margin
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.memory import EngineArgs, MemoryEstimate, estimate_memory
from vllm_operator.planning.plan import PoolPlan, plan_pool

LLAMA8 = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")
GPT_OSS_20B = lookup_architecture("openai/gpt-oss-20b")


def test_margins_cover_the_error_the_bench_measures_per_era() -> None:
    """A margin below the measured p90 would let a plan promise what the model cannot back."""
    bench = load_bench()
    results = bench.run_all()
    for floor, margin, _ in KV_ERROR_BY_ERA:
        era = bench.era_of(floor)
        errs = [
            abs(r.kv_err)
            for r in results
            if r.kv_err is not None and bench.era_of(r.version) == era
        ]
        if len(errs) < 2:
            continue
        assert bench._p90(errs) <= margin * 100, (era, bench._p90(errs), margin)
        assert statistics.median(errs) <= margin * 100


def test_moe_and_mla_get_at_least_the_sparse_family_floor() -> None:
    dense, _ = kv_error_margin("0.19.0", LLAMA8)
    moe, why = kv_error_margin("0.19.0", GPT_OSS_20B)
    assert dense == 0.02
    assert moe == 0.05 and "MoE" in why
    assert kv_error_margin("0.33.0", LLAMA8)[0] == 0.12


@pytest.mark.parametrize(
    ("arch", "gpu", "version", "p99"),
    [
        (LLAMA8, "NVIDIA-L4", "0.33.0", 4096),
        (LLAMA8, "NVIDIA-H100-80GB-HBM3", "0.19.0", 32768),
        (GPT_OSS_20B, "NVIDIA-H100-80GB-HBM3", "0.19.0", 65536),
    ],
)
def test_a_plan_never_promises_more_than_the_model_backs_after_its_error(
    arch: Architecture, gpu: str, version: str, p99: int
) -> None:
    """Every feasible plan either holds the target after the margin, or says that it is within
    the model's error and promises only what survives the margin."""
    seen_within = False
    for concurrency in range(1, 80):
        intent = PlanIntent(p99_context_tokens=p99, concurrency=concurrency, vllm_version=version)
        result = plan_pool(intent, lookup_gpu(gpu), arch)
        if not isinstance(result, PoolPlan):
            continue
        margin, _ = kv_error_margin(version, arch)
        predicted = result.memory.kv_cache_tokens / p99
        if predicted * (1 - margin) >= concurrency:
            assert result.memory.concurrency_at_p99 == pytest.approx(predicted, abs=0.01)
            assert not any("within the model's error" in r for r in result.reasons)
        else:
            seen_within = True
            warning = [r for r in result.reasons if "within the model's error" in r]
            assert len(warning) == 1 and f"{margin * 100:.0f} %" in warning[0]
            assert result.memory.concurrency_at_p99 == pytest.approx(
                predicted * (1 - margin), abs=0.01
            )
            assert result.memory.concurrency_at_p99 < concurrency
    assert seen_within, "the sweep never reached a target within the model's error"


def test_the_margin_shrinks_the_prefill_chunk_before_it_warns() -> None:
    """Llama-3.1-8B on one L4, vLLM 0.33, throughput profile (8192-token chunks): where the
    default chunk holds the target only without the margin, a smaller chunk holds it with the
    margin, at the same TP, and the plan says so."""
    gpu = lookup_gpu("NVIDIA-L4")
    found = 0
    for concurrency in range(1, 40):
        intent = PlanIntent(
            p99_context_tokens=1024,
            concurrency=concurrency,
            latency_profile=LatencyProfile.THROUGHPUT,
        )
        result = plan_pool(intent, gpu, LLAMA8)
        if not isinstance(result, PoolPlan):
            continue
        notes = [r for r in result.reasons if r.startswith("KV margin")]
        if notes:
            found += 1
            match = re.search(r"max_num_batched_tokens (\d+) instead of (\d+)", notes[0])
            assert match is not None
            chosen, without_margin = int(match[1]), int(match[2])
            assert chosen == result.engine_args.max_num_batched_tokens
            assert chosen < without_margin
            assert result.engine_args.tensor_parallel_size == 1
            assert result.memory.kv_cache_tokens * (1 - 0.12) / 1024 >= concurrency
    assert found


def _estimate(util: float, version: str, tp: int = 1) -> MemoryEstimate:
    gpu = gpu_memory(lookup_gpu("NVIDIA-L4"))
    args = EngineArgs(
        gpu_memory_utilization=util,
        max_model_len=4096,
        vllm_version=version,
        tensor_parallel_size=tp,
    )
    return estimate_memory(lookup_architecture("Qwen/Qwen3-0.6B"), gpu, args)


def test_post_kv_allocations_that_do_not_fit_are_a_startup_warning_from_0_20() -> None:
    """vllm#57475: util 0.98 on a 22 GiB card OOMs in graph capture after the KV cache, 0.97
    boots. The estimate keeps its KV figure but warns; the bench counts it as a failure."""
    tight = _estimate(0.98, "0.33.0")
    assert tight.fits and tight.kv_cache_gib > 0
    assert len(tight.startup_warnings) == 1
    assert "after the KV cache" in tight.startup_warnings[0]
    assert tight.startup_warnings[0] in tight.reasons
    assert _estimate(0.97, "0.33.0").startup_warnings == []
    # more TP peers, more buffers after the KV cache
    assert _estimate(0.96, "0.33.0", tp=8).startup_warnings != []


def test_graphs_after_the_kv_cache_are_a_startup_warning_before_0_20() -> None:
    assert _estimate(0.99, "0.19.0").startup_warnings != []
    assert _estimate(0.90, "0.19.0").startup_warnings == []


def test_a_plan_leaves_the_post_kv_slack_outside_the_budget() -> None:
    intent = PlanIntent(p99_context_tokens=4096, concurrency=2, max_gpu_memory_utilization=0.98)
    result = plan_pool(intent, lookup_gpu("NVIDIA-L4"), LLAMA8)
    assert isinstance(result, PoolPlan)
    assert result.engine_args.gpu_memory_utilization == 0.97
    assert any("after the KV cache" in r and "lowered to 0.97" in r for r in result.reasons)
    assert not any("may fail" in r for r in result.reasons)
