"""Fail safe where the model is unsure (issue #15 item 5): margins from the measured error."""

import re

import pytest

from tests.planning.test_bench import load_bench
from vllm_operator.api.spec import LatencyProfile, VLLMServiceSpec
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


GIB = 2**30


def _segment(arch: Architecture, version: str, **args: object) -> float:
    """The reserve of an engine without expandable segments (vLLM's own default)."""
    gpu = gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3"))
    est = estimate_memory(arch, gpu, EngineArgs(vllm_version=version, max_model_len=4096, **args))
    return est.compile_segment_gib


def test_a_cold_first_compile_may_keep_the_embedding_table_it_benchmarks() -> None:
    """The reserve is the (vocab padded to 64) x hidden table per TP rank in the model dtype,
    where the compiled graph holds the embedding lookup (vLLM 0.19+, combo-kernel benchmarking):
    Llama-3.1-8B 128,256 x 4,096 x 2 B; none eager, none at TP>1 from 0.29 (vLLM's fused
    embedding op), half per rank at TP2 before it, none before 0.11.1 (torch 2.8)."""
    table = 128256 * 4096 * 2 / GIB
    assert _segment(LLAMA8, "0.33.0") == pytest.approx(table, abs=1e-3)
    assert _segment(LLAMA8, "0.33.0", enforce_eager=True) == 0.0
    assert _segment(LLAMA8, "0.33.0", tensor_parallel_size=2) == 0.0
    assert _segment(LLAMA8, "0.28.0", tensor_parallel_size=2) == pytest.approx(table / 2, abs=1e-3)
    assert _segment(LLAMA8, "0.11.1") == pytest.approx(table, abs=1e-3)  # torch 2.9.0
    assert _segment(LLAMA8, "0.11.0") == 0.0  # torch 2.8.0: no combo kernels
    gemma = lookup_architecture("google/gemma-3-27b-it")
    assert gemma.is_multimodal and _segment(gemma, "0.33.0") == 0.0  # embeddings outside the graph
    # expandable segments: empty_cache() unmaps every free page, the table's too
    assert _segment(LLAMA8, "0.33.0", expandable_segments=True) == 0.0


@pytest.mark.parametrize("concurrency", range(1, 9))
def test_a_plan_holds_its_target_even_if_the_first_compile_keeps_the_table(
    concurrency: int,
) -> None:
    """Llama-3.1-8B on one L4 at 4,096 tokens (the README example) in a pod without expandable
    segments: a plan that does not warn holds its target with the table kept (about a quarter of
    the L4's KV cache), and says so where the table sets the margin; one that cannot promises
    only what is left."""
    intent = PlanIntent(
        p99_context_tokens=4096,
        concurrency=concurrency,
        vllm_version="0.33.0",
        expandable_segments=False,  # a KV connector's pod
    )
    result = plan_pool(intent, lookup_gpu("NVIDIA-L4"), LLAMA8)
    assert isinstance(result, PoolPlan) and result.memory is not None
    table = 128256 * 4096 * 2 / GIB
    mem = result.memory
    kept = mem.kv_cache_tokens * (1 - table / mem.kv_cache_gib) / 4096
    notes = [r for r in result.reasons if r.startswith("KV margin")]
    warned = [r for r in result.reasons if "within the model's error" in r]
    if warned:
        assert mem.concurrency_at_p99 == pytest.approx(kept, abs=0.01)
        assert "first compile" in warned[0]
    else:
        assert kept >= concurrency
        assert notes and "first compile" in notes[0] and "0.98 GiB" in notes[0]


def test_the_operators_pods_take_no_reserve_and_a_kv_connectors_pod_does() -> None:
    """The operator's pods run with expandable segments, so their plans hold nothing back for
    the table; a service with a KV connector runs without them (vLLM refuses the pair), and its
    plan keeps the table back: a smaller prefill chunk for the README example."""
    spec = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "vllm": {"version": "0.33.0"},
        "workload": {"p99ContextTokens": 4096, "concurrency": 6},
        "placement": {"gpuTypes": ["NVIDIA-L4"]},
    }
    plain = PlanIntent.from_spec(VLLMServiceSpec.model_validate(spec))
    nixl = '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'
    spec["vllm"] = {"version": "0.33.0", "extraArgs": {"--kv-transfer-config": nixl}}
    connector = PlanIntent.from_spec(VLLMServiceSpec.model_validate(spec))
    assert plain.expandable_segments and not connector.expandable_segments
    a = plan_pool(plain, lookup_gpu("NVIDIA-L4"), LLAMA8)
    b = plan_pool(connector, lookup_gpu("NVIDIA-L4"), LLAMA8)
    assert isinstance(a, PoolPlan) and isinstance(b, PoolPlan)
    assert not any("first compile" in r for r in a.reasons)
    assert any("first compile" in r for r in b.reasons)
    chunk_a, chunk_b = a.engine_args.max_num_batched_tokens, b.engine_args.max_num_batched_tokens
    assert chunk_a is not None and chunk_b is not None and chunk_b < chunk_a
