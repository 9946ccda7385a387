"""From the GPU catalog's facts to the memory model's view of one GPU."""

from vllm_operator.catalog.gpus import GpuFacts
from vllm_operator.planning.memory import GpuMemory

MIB_PER_GIB = 1024.0


def gpu_memory(
    facts: GpuFacts,
    *,
    total_gib: float | None = None,
    measured_free_mib: float | None = None,
) -> GpuMemory:
    """The memory model's GPU. `total_gib` overrides the CUDA total (a log or probe measured it);
    `measured_free_mib` is the free memory an NVML probe saw before vLLM started."""
    return GpuMemory(
        label=facts.label,
        marketing_name=facts.marketing_name,
        total_gib=total_gib if total_gib is not None else facts.cuda_total_gib,
        compute_capability=facts.compute_capability,
        bf16=facts.bf16,
        fp8_kv=facts.supports_fp8_kv_cache,
        measured_free_gib=None if measured_free_mib is None else measured_free_mib / MIB_PER_GIB,
        unified_memory=facts.unified_memory,
    )
