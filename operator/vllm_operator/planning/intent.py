"""What the planner needs from a VLLMService spec, as one frozen value.

Kept apart from the search (planning/plan.py) and the alternatives (planning/alternatives.py),
which both take it: the planner can be driven without a whole spec (tests, `estimate`).
"""

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.spec import EnvVar, LatencyProfile, PrefixCaching, VLLMServiceSpec
from vllm_operator.catalog.vllm.values import configures_kv_connector
from vllm_operator.planning.adapters import Adapters, adapters_from_extra_args
from vllm_operator.planning.errors import PlanningInputError
from vllm_operator.planning.versions import DEFAULT_VLLM_VERSION


class ObservedKv(BaseModel):
    """The KV capacity an engine measured for one configuration on this pool's GPU type.

    A typed planner input (the reconcile selects the observations of the service's model and the
    pool's GPU type from status.observations): planning stays a pure function of its inputs, and
    the plan cache keys on them. The planner uses `kv_cache_tokens` instead of its memory model
    for a candidate with exactly these memory-relevant arguments and at most `max_num_seqs`
    sequences and `max_num_batched_tokens` tokens (less of either never leaves vLLM less KV).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    vllm_version: str
    tensor_parallel_size: int = Field(ge=1)
    max_model_len: int = Field(ge=1)
    gpu_memory_utilization: float = Field(gt=0, le=1)
    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str
    quantization: str | None = None
    enforce_eager: bool = False
    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int | None = None
    kv_cache_tokens: int = Field(ge=1)
    observed_at: datetime
    source: str = "vllm:cache_config_info"


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
    observations: tuple[ObservedKv, ...] = Field(
        default=(),
        description="Measured KV capacities of this pool's GPU type (learning from the fleet).",
    )
    adapters: Adapters = Adapters()
    flashinfer_sampler: bool = Field(
        default=True,
        description="FlashInfer's top-k/top-p sampler is on: spec.vllm.env does not set "
        "VLLM_USE_FLASHINFER_SAMPLER=0 (memory.EngineArgs.flashinfer_sampler).",
    )
    expandable_segments: bool = Field(
        default=True,
        description="The pod's allocator runs with expandable segments: the operator sets "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless extraArgs configure a KV "
        "connector (memory.EngineArgs.expandable_segments).",
    )

    @classmethod
    def from_spec(cls, spec: VLLMServiceSpec) -> "PlanIntent":
        try:
            adapters = adapters_from_extra_args(spec.vllm.extra_args)
        except PlanningInputError:
            # a malformed --speculative-config / --max-loras stops vLLM itself; the argument
            # check reports it (vllm.extraArgs), the memory plan goes on without it
            adapters = Adapters()
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
            adapters=adapters,
            flashinfer_sampler=flashinfer_sampler_on(spec.vllm.env),
            expandable_segments=not configures_kv_connector(
                spec.vllm.version or DEFAULT_VLLM_VERSION, spec.vllm.extra_args
            ),
        )


def flashinfer_sampler_on(env: Sequence[EnvVar]) -> bool:
    """Whether the container's env leaves FlashInfer's sampler on. vLLM reads the variable as
    ``bool(int(value))`` (envs.py, 0.27.1 and 0.33.0 alike); a value that is not an integer stops
    vLLM at start, so only an integer 0 turns it off here."""
    for var in env:
        if var.name == "VLLM_USE_FLASHINFER_SAMPLER":
            try:
                return bool(int(var.value))
            except ValueError:
                return True
    return True
