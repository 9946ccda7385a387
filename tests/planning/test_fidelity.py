"""Fail safe where the model is unsure (issue #15 item 5): margins from the measured error."""

import re

import pytest

from tests.planning.test_bench import load_bench
from vllm_operator.api.spec import LatencyProfile
from vllm_operator.catalog.architectures import Architecture, lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.fidelity import (
    ERAS,
    KV_MARGINS,
    MARGIN_FLOOR,
    MIN_CELL_ROWS,
    WIDEST_MARGIN,
    gpu_family,
    is_thin_cell,
    kv_error_margin,
    margin_for_errors,
    weight_format,
)
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.memory import EngineArgs, MemoryEstimate, estimate_memory
from vllm_operator.planning.plan import PoolPlan, plan_pool

LLAMA8 = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")
GPT_OSS_20B = lookup_architecture("openai/gpt-oss-20b")


def test_the_margin_table_is_what_the_bench_measures() -> None:
    """KV_MARGINS holds exactly the cells with enough rows, each at its measured p90 (or worst
    over-prediction) rounded up: a new bench row that moves a cell fails here until
    `python hack/bench_planner.py --margins` is pasted into planning/fidelity.py."""
    bench = load_bench()
    assert bench.measured_margins(bench.run_all()) == KV_MARGINS


def test_no_cell_over_predicts_beyond_its_own_margin() -> None:
    """The margin a plan takes (own p90, or the widest for a thin cell) covers every
    over-prediction the bench measured in that cell, and the p90 of every calibrated cell."""
    bench = load_bench()
    for cell, errs in bench.cell_errors(bench.run_all()).items():
        margin = KV_MARGINS[cell][0] if cell in KV_MARGINS else WIDEST_MARGIN
        assert max(errs) <= margin * 100 + 1e-9, (cell, max(errs), margin)
        if len(errs) >= MIN_CELL_ROWS:
            assert bench._p90([abs(e) for e in errs]) <= margin * 100, cell
        else:
            assert cell not in KV_MARGINS


def test_a_cell_of_one_model_is_not_calibrated_however_many_rows() -> None:
    """Five runs of one checkpoint measure that checkpoint, not the cell: a cell earns its own
    margin only from MIN_CELL_MODELS distinct models."""
    bench = load_bench()

    def row(i: int, model: str) -> object:
        return bench.Result(
            row=i, model=model, version="0.24.0", gpu="H200", tp=1, answered=True,
            kv_pred=100.0 + i * 0.1, kv_log=100.0, gpu_family="Hopper (sm90)", fmt="bf16",
        )  # fmt: skip

    one_model = [row(i, "org/a") for i in range(MIN_CELL_ROWS + 2)]
    assert bench.measured_margins(one_model) == {}
    two_models = [*one_model[:-1], row(9, "org/b")]
    (cell,) = bench.measured_margins(two_models)
    assert cell[1:] == ("Hopper (sm90)", "bf16")


def test_the_widest_margin_is_the_widest_any_era_or_cell_needs() -> None:
    """New rows that widen an era's error fail here until WIDEST_MARGIN is raised to what
    `python hack/bench_planner.py --margins` prints."""
    bench = load_bench()
    results = bench.run_all()
    assert bench.widest_needed(results) == WIDEST_MARGIN
    assert all(margin <= WIDEST_MARGIN for margin, _, _ in KV_MARGINS.values())
    for _, era in ERAS:
        errs = [
            r.kv_err for r in results if r.kv_err is not None and bench.era_of(r.version) == era
        ]
        if len(errs) >= MIN_CELL_ROWS:
            assert margin_for_errors(errs) <= WIDEST_MARGIN, era
    assert min(margin for margin, _, _ in KV_MARGINS.values()) >= MARGIN_FLOOR


def test_margins_by_cell_gpu_family_and_format() -> None:
    dense, why = kv_error_margin("0.19.0", LLAMA8, (9, 0))
    assert dense == KV_MARGINS[("0.17-0.19", "Hopper (sm90)", "bf16")][0]
    assert "calibration rows" in why and "fewer than" not in why
    # the same model and release on an L4 (Ada): no rows, the widest margin, and it says so
    thin, why = kv_error_margin("0.19.0", LLAMA8, (8, 9))
    assert thin == WIDEST_MARGIN and "fewer than 5 calibration rows" in why
    assert is_thin_cell("0.19.0", (8, 9), "bf16") and not is_thin_cell("0.19.0", (9, 0), "bf16")
    # MoE on a calibrated cell still gets its family floor
    moe, why = kv_error_margin("0.19.0", GPT_OSS_20B, (9, 0), None)
    assert moe >= 0.05


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ((12, 0), "Blackwell workstation/consumer (sm12x)"),
        ((12, 1), "Blackwell workstation/consumer (sm12x)"),
        ((10, 0), "Blackwell datacenter (sm10x)"),
        ((10, 3), "Blackwell datacenter (sm10x)"),
        ((9, 0), "Hopper (sm90)"),
        ((8, 9), "Ada (sm89)"),
        ((8, 6), "Ampere (sm80/sm86)"),
        ((8, 0), "Ampere (sm80/sm86)"),
        ((7, 5), "Volta/Turing (sm7x)"),
        (None, "unknown (memory only)"),
    ],
)
def test_gpu_families(cc: tuple[int, int] | None, family: str) -> None:
    assert gpu_family(cc) == family


def test_weight_formats() -> None:
    assert weight_format(None) == "bf16"
    for model, fmt in (
        ("Qwen/Qwen3-14B-AWQ", "AWQ/GPTQ (int4)"),
        ("openai/gpt-oss-20b", "MXFP4"),
        ("RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic", "8-bit (FP8/INT8)"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "AWQ/GPTQ (int4)"),
        ("nvidia/Qwen3.6-35B-A3B-NVFP4", "NVFP4"),
    ):
        assert weight_format(lookup_architecture(model).quantization) == fmt, model


def test_a_thin_cell_says_so_in_the_plan_reasons() -> None:
    intent = PlanIntent(p99_context_tokens=4096, concurrency=2, vllm_version="0.19.0")
    thin = plan_pool(intent, lookup_gpu("NVIDIA-L4"), LLAMA8)
    calibrated = plan_pool(intent, lookup_gpu("NVIDIA-H100-80GB-HBM3"), LLAMA8)
    assert isinstance(thin, PoolPlan) and isinstance(calibrated, PoolPlan)
    assert any("fewer than 5 calibration rows" in r for r in thin.reasons)
    assert not any("calibration rows" in r for r in calibrated.reasons)


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
        margin, _ = kv_error_margin(version, arch, lookup_gpu(gpu).compute_capability)
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
        notes = [r for r in result.reasons if r.startswith("KV margin") and "instead of" in r]
        if notes:
            found += 1
            match = re.search(r"max_num_batched_tokens (\d+) instead of (\d+)", notes[0])
            assert match is not None
            chosen, without_margin = int(match[1]), int(match[2])
            assert chosen == result.engine_args.max_num_batched_tokens
            assert chosen < without_margin
            assert result.engine_args.tensor_parallel_size == 1
            margin = re.match(r"KV margin (\d+) %", notes[0])
            assert margin is not None  # the cell's own margin (8 % since its fifth bench row)
            kept = result.memory.kv_cache_tokens * (1 - int(margin[1]) / 100) / 1024
            assert kept >= concurrency
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
