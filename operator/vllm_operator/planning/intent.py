"""What the planner needs from a VLLMService spec, as one frozen value.

Kept apart from the search (planning/plan.py) and the alternatives (planning/alternatives.py),
which both take it: the planner can be driven without a whole spec (tests, `estimate`).
"""

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.spec import LatencyProfile, PrefixCaching, VLLMServiceSpec
from vllm_operator.planning.versions import DEFAULT_VLLM_VERSION


class PlanIntent(BaseModel):
    """What the planner needs from a VLLMService spec (testable without a whole spec)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p99_context_tokens: int = Field(ge=1)
    max_context_tokens: int | None = Field(default=None, ge=1)
    concurrency: int = Field(ge=1)
    prefix_caching: PrefixCaching = PrefixCaching.AUTO
    latency_profile: LatencyProfile = LatencyProfile.INTERACTIVE
    max_gpu_memory_utilization: float = Field(default=0.90, gt=0, le=0.98)
    memory_headroom_fraction: float = Field(default=0.0, ge=0, le=0.5)
    max_gpus_per_replica: int = Field(
        default=8,
        ge=1,
        description="Largest tensor-parallel size: GPUs of one node a replica may use (the "
        "controller lowers it to the node's GPU count).",
    )
    max_nodes_per_replica: int = Field(
        default=1,
        ge=1,
        description="Most pipeline stages, one per node; 1 keeps the replica on one node.",
    )
    dtype: str = "auto"
    quantization: str | None = None
    vllm_version: str = DEFAULT_VLLM_VERSION

    @classmethod
    def from_spec(cls, spec: VLLMServiceSpec) -> "PlanIntent":
        return cls(
            p99_context_tokens=spec.workload.p99_context_tokens,
            max_context_tokens=spec.workload.max_context_tokens,
            concurrency=spec.workload.concurrency,
            prefix_caching=spec.workload.prefix_caching,
            latency_profile=spec.workload.latency_profile,
            max_gpu_memory_utilization=spec.safety.max_gpu_memory_utilization,
            memory_headroom_fraction=spec.safety.memory_headroom_fraction,
            max_gpus_per_replica=spec.placement.max_gpus_per_replica,
            max_nodes_per_replica=spec.placement.max_nodes_per_replica,
            dtype=spec.model.dtype.value,
            quantization=spec.model.quantization,
            vllm_version=spec.vllm.version or DEFAULT_VLLM_VERSION,
        )
