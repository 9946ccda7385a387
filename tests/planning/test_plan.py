"""The planner: the controller's pure function from intent to engine arguments."""

from pathlib import Path

import pytest
import yaml

from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.alternatives import AlternativeKind, Infeasible
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.plan import PoolPlan, plan_pool, plan_service

REPO = Path(__file__).resolve().parents[2]
LLAMA8 = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")
LLAMA70 = lookup_architecture("meta-llama/Llama-3.1-70B-Instruct")


def test_plan_picks_the_smallest_tp_that_holds_the_target() -> None:
    intent = PlanIntent(p99_context_tokens=8192, concurrency=32)
    result = plan_pool(intent, lookup_gpu("NVIDIA-H100-80GB-HBM3"), LLAMA70)
    assert isinstance(result, PoolPlan)
    assert result.engine_args.tensor_parallel_size == 4
    assert result.memory.concurrency_at_p99 >= 32
    assert any("TP=2" in r for r in result.reasons)


def test_engine_args_use_vllm_field_names() -> None:
    result = plan_pool(
        PlanIntent(p99_context_tokens=4000, concurrency=4), lookup_gpu("NVIDIA-L4"), LLAMA8
    )
    assert isinstance(result, PoolPlan)
    assert set(result.engine_args.rendered()) >= {
        "tensor_parallel_size",
        "gpu_memory_utilization",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
        "kv_cache_dtype",
        "dtype",
        "quantization",
        "enable_prefix_caching",
    }
    assert result.engine_args.max_model_len == 4000  # rounded up to the block size 16
    assert result.engine_args.max_num_seqs == 4
    assert result.engine_args.gpu_memory_utilization == 0.9
    status = result.to_status()
    assert (
        status.memory is not None and status.memory.kv_cache_tokens == result.memory.kv_cache_tokens
    )


def test_headroom_and_ceiling_bound_utilisation() -> None:
    intent = PlanIntent(
        p99_context_tokens=2048,
        concurrency=2,
        max_gpu_memory_utilization=0.85,
        memory_headroom_fraction=0.05,
    )
    result = plan_pool(intent, lookup_gpu("NVIDIA-L4"), LLAMA8)
    assert isinstance(result, PoolPlan)
    assert result.engine_args.gpu_memory_utilization == 0.8


def test_versions_before_0_20_leave_room_for_cuda_graphs() -> None:
    intent = PlanIntent(
        p99_context_tokens=2048,
        concurrency=2,
        max_gpu_memory_utilization=0.98,
        vllm_version="0.11.0",
    )
    result = plan_pool(intent, lookup_gpu("NVIDIA-L4"), LLAMA8)
    assert isinstance(result, PoolPlan)
    util = result.engine_args.gpu_memory_utilization
    assert isinstance(util, float) and util < 0.98
    assert (1 - util) * result.memory.gpu_total_gib >= result.memory.cuda_graph_gib


def test_fp16_on_gpus_without_bf16() -> None:
    result = plan_pool(
        PlanIntent(p99_context_tokens=2048, concurrency=1, vllm_version="0.11.0"),
        lookup_gpu("Tesla-T4"),
        lookup_architecture("Qwen/Qwen2.5-1.5B-Instruct"),
    )
    assert isinstance(result, PoolPlan) and result.engine_args.dtype == "float16"


def test_infeasible_intent_gives_reasons_and_concrete_alternatives() -> None:
    intent = PlanIntent(p99_context_tokens=8192, concurrency=32, max_gpus_per_replica=4)
    h100 = lookup_gpu("NVIDIA-H100-80GB-HBM3")
    result = plan_pool(intent, lookup_gpu("NVIDIA-A100-SXM4-40GB"), LLAMA70, other_gpus=(h100,))
    assert isinstance(result, Infeasible) and not result.usage_error
    kinds = {a.kind for a in result.alternatives}
    assert AlternativeKind.LARGER_TP in kinds
    assert AlternativeKind.QUANTIZED_CHECKPOINT in kinds
    assert AlternativeKind.OTHER_GPU_TYPE in kinds
    assert any("TP=4" in r for r in result.reasons)


def test_fp8_kv_alternative_only_where_the_gpu_supports_it() -> None:
    intent = PlanIntent(p99_context_tokens=32768, concurrency=8, max_gpus_per_replica=1)
    on_l4 = plan_pool(intent, lookup_gpu("NVIDIA-L40S"), LLAMA8)
    assert isinstance(on_l4, Infeasible)
    assert AlternativeKind.FP8_KV_CACHE in {a.kind for a in on_l4.alternatives}
    on_a100 = plan_pool(intent, lookup_gpu("NVIDIA-A100-SXM4-40GB"), LLAMA8)
    if isinstance(on_a100, Infeasible):
        assert AlternativeKind.FP8_KV_CACHE not in {a.kind for a in on_a100.alternatives}


def test_context_is_never_cut_and_too_long_contexts_are_usage_errors() -> None:
    result = plan_pool(
        PlanIntent(p99_context_tokens=200_000, concurrency=1),
        lookup_gpu("NVIDIA-H100-80GB-HBM3"),
        LLAMA8,
    )
    assert isinstance(result, Infeasible) and result.usage_error
    assert "131072" in result.reasons[0]


def test_measured_budget_caps_utilisation_and_is_recorded() -> None:
    intent = PlanIntent(p99_context_tokens=2048, concurrency=2)
    result = plan_pool(intent, lookup_gpu("NVIDIA-L4"), LLAMA8, measured_free_mib=19_000)
    assert isinstance(result, PoolPlan)
    assert result.memory.budget_source == "probe"
    util = result.engine_args.gpu_memory_utilization
    assert isinstance(util, float) and util * result.memory.gpu_total_gib <= 19_000 / 1024


def test_prefix_caching_follows_the_spec_or_the_version_default() -> None:
    gpu = lookup_gpu("NVIDIA-L4")
    auto_v1 = plan_pool(PlanIntent(p99_context_tokens=2048, concurrency=1), gpu, LLAMA8)
    auto_v0 = plan_pool(
        PlanIntent(p99_context_tokens=2048, concurrency=1, vllm_version="0.6.6"), gpu, LLAMA8
    )
    off = plan_pool(
        PlanIntent(p99_context_tokens=2048, concurrency=1, prefix_caching="disabled"), gpu, LLAMA8
    )
    assert isinstance(auto_v1, PoolPlan) and auto_v1.engine_args.enable_prefix_caching is True
    assert isinstance(auto_v0, PoolPlan) and auto_v0.engine_args.enable_prefix_caching is False
    assert isinstance(off, PoolPlan) and off.engine_args.enable_prefix_caching is False


@pytest.mark.parametrize(
    "example", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_example_plans_on_every_allowed_gpu(example: Path) -> None:
    service = VLLMService.model_validate(yaml.safe_load(example.read_text()))
    arch = lookup_architecture(service.spec.model.name)
    gpus = [lookup_gpu(g) for g in service.spec.placement.gpu_types]
    for result in plan_service(service.spec, gpus, arch):
        assert isinstance(result, PoolPlan), result
        assert result.memory.concurrency_at_p99 >= service.spec.workload.concurrency
