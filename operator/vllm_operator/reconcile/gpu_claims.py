"""What a pool claims in gpuAllocation dra mode: the plan's TP, product, memory, MIG profile.

Pure. The cluster default (`vllm-operator run --gpu-allocation`, chart value `gpuAllocation`)
applies to specs that leave `spec.placement.gpuAllocation` out, so a cluster moving to DRA moves
every service that did not choose, and a spec that chose keeps its choice.
"""

from collections.abc import Mapping

from vllm_operator.api.spec import GpuAllocation, VLLMServiceSpec
from vllm_operator.catalog.gpus import GpuFacts
from vllm_operator.rendering.dra import GpuClaim, split_mig_label


def allocation_mode(spec: VLLMServiceSpec, default: GpuAllocation) -> GpuAllocation:
    """The spec's gpuAllocation, else the cluster default."""
    return spec.placement.gpu_allocation or default


def smallest_mig_profile(profiles: Mapping[str, int], target_mib: int) -> str | None:
    """The MIG profile with the least memory that still holds `target_mib` (ties: the profile
    with fewer compute slices, "1g" before "2g"); None when none holds it."""
    fitting = [(mib, _slices(p), p) for p, mib in profiles.items() if mib >= target_mib]
    return min(fitting)[2] if fitting else None


def _slices(profile: str) -> int:
    head = profile.split("g.", 1)[0]
    return int(head) if head.isdigit() else 99


def pool_claim(
    product: str,
    facts: GpuFacts,
    tensor_parallel_size: int,
    mig_profiles: Mapping[str, int] | None = None,
) -> GpuClaim:
    """The claim of one pod of a pool planned on `facts` (the pool's GPU type `product`).

    Memory: the device's total the plan was computed for (vLLM's budget is
    gpu_memory_utilization x total, so a device with less would not hold the planned KV cache).
    MIG: the smallest partition of the parent product that holds it, from the inventory's profiles
    when known (ResourceSlices), else the pool's own profile.
    """
    parent, profile = split_mig_label(product)
    if profile is not None and mig_profiles:
        profile = smallest_mig_profile(mig_profiles, facts.total_mib) or profile
    return GpuClaim(
        count=tensor_parallel_size,
        product=parent,
        min_memory_mib=facts.total_mib,
        compute_capability=facts.compute_capability,
        mig_profile=profile,
    )
