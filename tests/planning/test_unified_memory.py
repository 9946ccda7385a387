"""The unified-memory non-torch term (issue #28, bench rows 115-116).

On an integrated GPU (GB10) vLLM reads free memory from the host (utils/mem_utils.py
MemorySnapshot.measure: psutil MemAvailable when is_integrated_gpu), so host allocations during
startup count as non-torch memory. The planner holds a conservative allowance there; discrete GPUs
keep their per-instance base.
"""

import pytest

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu, lookup_gpu_by_memory
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.memory import (
    NON_TORCH_BASE_GIB_018,
    UNIFIED_MEMORY_NON_TORCH_GIB,
    UNIFIED_MEMORY_REASON,
    EngineArgs,
    GpuMemory,
    estimate_memory,
)
from vllm_operator.planning.plan import PoolPlan, plan_pool

QWEN3_8B = lookup_architecture("Qwen/Qwen3-8B")
# 122501 MiB: the CUDA total a GB10 logged (bench row 116, 119.63 GiB)
GB10_MIB = 122501


def _gpu(*, unified: bool) -> GpuMemory:
    """The same 119.63 GiB sm_121 GPU, discrete or unified."""
    return GpuMemory(
        label="NVIDIA-GB10" if unified else "discrete-sm121",
        marketing_name="test GPU",
        total_gib=119.63,
        compute_capability=(12, 1),
        unified_memory=unified,
    )


def test_the_catalog_marks_gb10_as_unified_memory_and_discrete_gpus_not() -> None:
    gb10 = lookup_gpu("NVIDIA-GB10", memory_mib=GB10_MIB)
    assert gb10.unified_memory and gb10.compute_capability == (12, 1)
    # a node known only by its memory and compute capability 12.1 is a GB10
    by_memory = lookup_gpu_by_memory(GB10_MIB, compute_capability=(12, 1))
    assert by_memory.label == "NVIDIA-GB10" and by_memory.unified_memory
    for label in ("NVIDIA-H100-80GB-HBM3", "NVIDIA-GeForce-RTX-4090", "NVIDIA-GB200"):
        assert not lookup_gpu(label).unified_memory, label
    assert not lookup_gpu_by_memory(GB10_MIB, compute_capability=(12, 0)).unified_memory
    assert gpu_memory(gb10).unified_memory


@pytest.mark.parametrize("version", ["0.21.0", "0.27.1", "0.33.0"])
def test_a_unified_memory_gpu_plans_less_kv_by_the_term(version: str) -> None:
    args = EngineArgs(vllm_version=version, max_model_len=32768, gpu_memory_utilization=0.9)
    discrete = estimate_memory(QWEN3_8B, _gpu(unified=False), args)
    unified = estimate_memory(QWEN3_8B, _gpu(unified=True), args)
    assert discrete.non_torch_gib == pytest.approx(NON_TORCH_BASE_GIB_018)
    assert unified.non_torch_gib == pytest.approx(UNIFIED_MEMORY_NON_TORCH_GIB)
    term = UNIFIED_MEMORY_NON_TORCH_GIB - NON_TORCH_BASE_GIB_018
    assert discrete.kv_cache_gib - unified.kv_cache_gib == pytest.approx(term, abs=0.01)
    assert UNIFIED_MEMORY_REASON in unified.reasons
    assert UNIFIED_MEMORY_REASON not in discrete.reasons


def test_a_gb10_plan_says_its_non_torch_figure_is_conservative() -> None:
    intent = PlanIntent(p99_context_tokens=8192, concurrency=4, vllm_version="0.27.1")
    gb10 = plan_pool(intent, lookup_gpu("NVIDIA-GB10", memory_mib=GB10_MIB), QWEN3_8B)
    assert isinstance(gb10, PoolPlan)
    assert UNIFIED_MEMORY_REASON in gb10.reasons
    assert gb10.memory.non_torch_gib == pytest.approx(UNIFIED_MEMORY_NON_TORCH_GIB)
    h100 = plan_pool(intent, lookup_gpu("NVIDIA-H100-80GB-HBM3"), QWEN3_8B)
    assert isinstance(h100, PoolPlan)
    assert UNIFIED_MEMORY_REASON not in h100.reasons
