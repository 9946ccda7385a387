"""The VLLMService status: what the operator observed, planned and changed.

Status is the operator's only output on the object (the spec belongs to the user and to GitOps).
Remediation overrides live here too, so that deleting the status, or the operator, returns the
service to its planned state.
"""

from datetime import datetime
from typing import Any

from pydantic import Field

from vllm_operator.api.base import ApiModel
from vllm_operator.api.conditions import Condition
from vllm_operator.api.engine_args import OverrideField, PlannedArgs


class MemoryBreakdown(ApiModel):
    """Per-GPU memory the plan expects vLLM to use, in GiB (2^30 bytes)."""

    gpu_total_gib: float = Field(alias="gpuTotalGiB", description="GPU memory CUDA reports.")
    budget_gib: float = Field(
        alias="budgetGiB", description="gpu_memory_utilization x total: what vLLM may use."
    )
    weights_gib: float = Field(alias="weightsGiB", description="Model weights on one GPU.")
    lora_gib: float | None = Field(
        default=None,
        alias="loraGiB",
        description="LoRA slot buffers on one GPU (--max-loras x --max-lora-rank), apart from "
        "the weights.",
    )
    draft_weights_gib: float | None = Field(
        default=None,
        alias="draftWeightsGiB",
        description="The speculative draft's weights on one GPU (--speculative-config).",
    )
    draft_kv_cache_gib: float | None = Field(
        default=None,
        alias="draftKvCacheGiB",
        description="Of kvCacheGiB, what the speculative draft's layers cache.",
    )
    activation_gib: float = Field(
        alias="activationGiB", description="Peak activation memory of the profiling batch."
    )
    non_torch_gib: float = Field(
        alias="nonTorchGiB", description="CUDA context, NCCL and cuBLAS buffers outside PyTorch."
    )
    cuda_graph_gib: float = Field(alias="cudaGraphGiB", description="Captured CUDA graphs.")
    kv_cache_gib: float = Field(alias="kvCacheGiB", description="Memory left for the KV cache.")
    kv_cache_tokens: int = Field(description="Tokens the KV cache holds.")
    predicted_kv_cache_tokens: int | None = Field(
        default=None,
        ge=0,
        description="The memory model's own prediction, set only when kvCacheTokens is the "
        "engine's measured capacity (status.observations): the plan learned from the fleet.",
    )
    concurrency_at_p99: float = Field(
        alias="concurrencyAtP99", description="Sequences of p99ContextTokens the KV cache holds."
    )
    budget_source: str = Field(
        default="catalog",
        description="Where the GPU's memory came from: catalog, nodeLabel or probe (measured).",
    )


class StageMemory(ApiModel):
    """One pipeline stage (one node's pod) of a multi-node replica, per GPU, in GiB."""

    stage: int = Field(
        ge=0,
        description="Pipeline rank: 0 holds the embeddings, the last "
        "the final norm, lm_head and sampler.",
    )
    layers: int = Field(ge=0, description="Decoder layers on this stage (vLLM get_pp_indices).")
    weights_gib: float = Field(alias="weightsGiB", description="Weights on one GPU of the stage.")
    activation_gib: float = Field(
        alias="activationGiB", description="Peak activation memory of the profiling batch."
    )
    cuda_graph_gib: float = Field(alias="cudaGraphGiB", description="Captured CUDA graphs.")
    kv_free_gib: float = Field(
        alias="kvFreeGiB", description="Budget left for the KV cache on this stage."
    )
    kv_cache_gib: float = Field(
        alias="kvCacheGiB",
        description="KV cache the stage allocates: the replica's block count (the smallest "
        "over the stages) times this stage's bytes per block.",
    )
    num_gpu_blocks: int = Field(
        ge=0, alias="numGPUBlocks", description="Blocks this stage's memory alone would hold."
    )


class PoolLayout(ApiModel):
    """How a multi-node replica is laid out: one pipeline stage per node, tensor-parallel within
    the node; one pod per node (a LeaderWorkerSet group of `nodes` pods)."""

    nodes: int = Field(ge=1, description="Nodes (pods) per replica: the group size.")
    tensor_parallel_size: int = Field(ge=1, description="GPUs per stage, within one node.")
    pipeline_parallel_size: int = Field(ge=1, description="Pipeline stages, one per node.")
    gpus_per_node: int = Field(
        ge=1, alias="gpusPerNode", description="GPUs the replica's pod requests on each node."
    )
    stages: list[StageMemory] = Field(
        default_factory=list,
        description="Memory of every stage; the stage with the fewest blocks bounds the KV cache.",
    )


class HostMemoryComponent(ApiModel):
    """One part of a replica's host (CPU) memory plan."""

    name: str = Field(
        description="weightStaging, swapSpace, cpuOffload, kvOffload, sharedMemory, apiServer, "
        "workers, engineCore or margin."
    )
    gib: float = Field(ge=0, description="GiB (2^30 bytes).")
    reason: str = Field(default="", description="Why this much (the vLLM behaviour it models).")


class HostMemory(ApiModel):
    """Host (CPU) memory of one replica: the vLLM container's memory request and limit.

    An OOMKilled container ran out of this, never of GPU memory (remediation raises the limit).
    """

    request_gib: int = Field(alias="requestGiB", ge=1, description="Rendered memory request.")
    limit_gib: int = Field(
        alias="limitGiB",
        ge=1,
        description="Rendered memory limit (equal to the request): the plan, clamped to what the "
        "pool's nodes can allocate. A HostOOM override in status.overrides raises what is "
        "rendered above this.",
    )
    planned_gib: int = Field(
        alias="plannedGiB", ge=1, description="The sum of the components, rounded up."
    )
    components: list[HostMemoryComponent] = Field(
        default_factory=list, description="What the plan counts, with a reason each."
    )
    node_allocatable_gib: float | None = Field(
        default=None,
        alias="nodeAllocatableGiB",
        description="Smallest allocatable memory of the pool's nodes (absent: unknown).",
    )
    max_limit_gib: int | None = Field(
        default=None,
        alias="maxLimitGiB",
        description="The largest limit the pool's nodes can honour (allocatable minus a reserve); "
        "HostOOM steps stop here.",
    )
    clamped: bool = Field(
        default=False,
        description="True when the nodes' allocatable memory is below the plan: the limit is "
        "clamped and loading may be OOMKilled.",
    )
    note: str | None = Field(default=None, description="The risk, when clamped.")


class UserOverride(ApiModel):
    """A planner-owned engine argument the user set in spec.vllm.extraArgs (allowPlannerOverride).

    The pool runs `value`: it is rendered once, in place of the planner's, and the plan's
    engineArgs and memory figures are those of the user's value.
    """

    arg: str = Field(description="vLLM engine field, e.g. max_num_seqs.")
    flag: str = Field(description="The extraArgs key that set it, e.g. --max-num-seqs.")
    planned: Any = Field(
        default=None,
        description="What the planner chose (absent: the version's default).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    value: Any = Field(
        description="The user's value, in force.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class PoolPlan(ApiModel):
    """The engine arguments chosen for one GPU pool and why."""

    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="vLLM engine arguments by vLLM field name (tensor_parallel_size, "
        "gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens, ...): "
        "the effective ones, the user's overrides (userOverrides) included; remediation "
        "overrides (status.overrides) apply on top.",
        json_schema_extra={"additionalProperties": {"x-kubernetes-preserve-unknown-fields": True}},
    )
    memory: MemoryBreakdown | None = Field(default=None, description="Expected memory per GPU.")
    layout: PoolLayout | None = Field(
        default=None,
        description="Multi-node layout (pipelineParallelSize > 1) with the memory of every "
        "stage; absent for a single-node pool. memory is then the stage that bounds the KV cache.",
    )
    host_memory: HostMemory | None = Field(
        default=None, description="Host (CPU) memory of one replica: its request and limit."
    )
    user_overrides: list[UserOverride] = Field(
        default_factory=list,
        description="Engine arguments spec.vllm.extraArgs sets in place of the planner's "
        "(allowPlannerOverride); engineArgs and memory already use them.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["arg"]},
    )
    reasons: list[str] = Field(default_factory=list, description="Why each value was chosen.")
    hash: str | None = Field(default=None, description="Hash of the rendered plan.")
    inputs: str | None = Field(
        default=None,
        description="Digest of everything the planning of this pool read (spec, architecture, "
        "the GPU type's facts, measured budget, remediation overrides, observations); it "
        "changes exactly when the pool was planned from different inputs.",
    )

    def planned_args(self) -> PlannedArgs:
        """The typed engine arguments (the one place the wire map is parsed)."""
        return PlannedArgs.from_wire(self.engine_args)


class ObservedCapacity(ApiModel):
    """The KV-cache capacity the running engine itself reports, next to what the plan expected.

    Read from vLLM's `vllm:cache_config_info` (labels num_gpu_blocks x block_size) through
    Prometheus. A deviation far from zero means the memory model mispredicts this model on this
    GPU type: the signal the planner is calibrated against.
    """

    kv_cache_tokens: int = Field(
        ge=0, description="Tokens the engine's KV cache holds (the smallest over the pool's pods)."
    )
    planned_kv_cache_tokens: int | None = Field(
        default=None, ge=0, description="Tokens the plan expected (plan.memory.kvCacheTokens)."
    )
    deviation_percent: float | None = Field(
        default=None,
        description="(observed - planned) / planned x 100, one decimal; negative: fewer tokens "
        "than planned.",
    )
    pods: int = Field(default=0, ge=0, description="Pods whose engine reported its capacity.")
    plan_hash: str | None = Field(
        default=None,
        description="Hash of the plan the engine ran (observations of older plans are dropped).",
    )
    source: str = Field(
        default="vllm:cache_config_info", description="Where the engine's capacity was read."
    )


MAX_OBSERVATIONS = 16
"""Observations kept in status.observations, newest first (bounded: status is one object)."""


class ObservationKey(ApiModel):
    """What decides the KV capacity vLLM allocates: the same key, the same capacity.

    max_num_seqs and max_num_batched_tokens are not part of it: fewer sequences (fewer CUDA graphs
    to capture) or a smaller prefill chunk (a smaller profiling peak) never leave vLLM less KV
    cache, so an observation also holds, as a lower bound, for a plan with less of either.
    """

    model: str = Field(description="spec.model.name.")
    revision: str | None = Field(default=None, description="spec.model.revision (absent: main).")
    gpu_type: str = Field(description="GPU Feature Discovery product label of the pool.")
    vllm_version: str = Field(description="The vLLM version the engine ran.")
    tensor_parallel_size: int = Field(ge=1, description="tensor_parallel_size.")
    max_model_len: int = Field(ge=1, description="max_model_len.")
    gpu_memory_utilization: float = Field(gt=0, le=1, description="gpu_memory_utilization.")
    block_size: int | None = Field(default=None, ge=1, description="block_size.")
    kv_cache_dtype: str = Field(default="auto", description="kv_cache_dtype.")
    dtype: str = Field(default="auto", description="dtype (as planned: bfloat16, float16, ...).")
    quantization: str | None = Field(default=None, description="quantization (absent: none).")
    enforce_eager: bool = Field(default=False, description="enforce_eager.")


class Observation(ApiModel):
    """The KV capacity one engine configuration really got, kept across plan changes.

    The planner uses it for this key instead of its memory model (docs/planning-model.md,
    "Learning from the fleet").
    """

    key: ObservationKey = Field(description="The configuration the engine ran.")
    max_num_seqs: int = Field(ge=1, description="max_num_seqs the engine ran with.")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, description="max_num_batched_tokens the engine ran with."
    )
    kv_cache_tokens: int = Field(
        ge=1, description="Tokens the engine's KV cache holds (the smallest pod's)."
    )
    predicted_kv_cache_tokens: int | None = Field(
        default=None, ge=0, description="What the memory model predicted for this key."
    )
    deviation_percent: float | None = Field(
        default=None,
        description="(observed - predicted) / predicted x 100, one decimal: the memory model's "
        "error for this key.",
    )
    observed_at: datetime = Field(description="When this capacity was first measured.")
    pods: int = Field(default=1, ge=1, description="Pods whose engine reported it.")
    source: str = Field(
        default="vllm:cache_config_info", description="Where the engine's capacity was read."
    )


class PoolFailure(ApiModel):
    """Why a pool's pods do not run clean: the crash the classifier read, or a stalled startup.

    Set by the run-time evaluation and kept until the pool runs clean again (every desired
    replica Ready, none crash-looping, no termination since); the reconcile folds it into
    Degraded, so Degraded stays True while a pool crashes even after a remediation step.
    """

    reason: str = Field(description="Degraded reason: StartupOOM, RuntimeOOM, HostOOM, ...")
    failure_class: str | None = Field(
        default=None,
        description="Diagnosis class (startup-cuda-oom, host-oom, other, ...); none for a stall.",
    )
    pod: str = Field(description="The pod whose failure is reported (the newest).")
    message: str = Field(description="Pool, pod, class and the numbers the classifier read.")
    since: datetime = Field(description="When the pool was first found failing.")
    last_termination: datetime | None = Field(
        default=None,
        description="finishedAt of the newest termination read (newer is a new crash).",
    )


class PlanRecord(ApiModel):
    """A plan a pool ran: what rollback returns to and what Argo CD's health view shows."""

    hash: str = Field(description="The plan's hash (the pods' plan-hash annotation).")
    image: str = Field(description="The vLLM container image.")
    argv: list[str] = Field(default_factory=list, description="The engine's arguments.")
    when: datetime = Field(description="When the plan was first seen running healthy.")


class CanaryStatus(ApiModel):
    """A new plan tried on one pod (or group) before the rest of the pool gets it (#27)."""

    hash: str = Field(description="The plan being tried (or that failed).")
    image: str = Field(description="Its vLLM container image.")
    argv: list[str] = Field(default_factory=list, description="Its engine arguments.")
    phase: str = Field(
        description="Observing: the canary runs and is watched; Failed: it was rolled back and "
        "the plan is not retried until the spec or the planner's inputs change."
    )
    workload: str = Field(description="The canary's Deployment or LeaderWorkerSet (1 replica).")
    started_at: datetime = Field(description="When the canary was started.")
    pod: str | None = Field(default=None, description="The canary pod (the leader of a group).")
    pod_uid: str | None = Field(
        default=None,
        description="The UID of that pod when the operator last saw it: a group's leader "
        "replaced under the same name means LeaderWorkerSet recreated the group because one of "
        "its pods restarted, which the new pods no longer show.",
    )
    message: str = Field(default="", description="Why it failed, with the numbers; or progress.")
    in_place: bool = Field(
        default=False,
        description="The canary took the place of one of the pool's pods (maxSurge 0, or no "
        "free GPU of the pool's type for an extra pod when it started): the pool runs one "
        "replica fewer while the canary is watched.",
    )
    planned_kv_cache_tokens: int | None = Field(
        default=None,
        ge=0,
        description="The KV-cache tokens the tried plan counted on when the canary started (the "
        "memory model's prediction, or the measurement the plan already rested on); the "
        "canary's engine must measure within the PlanDeviation threshold of it.",
    )


class PoolStatus(ApiModel):
    """One Deployment serving the model on one GPU type."""

    gpu_type: str = Field(description="GPU Feature Discovery product label of the pool.")
    deployment: str | None = Field(default=None, description="Name of the pool's Deployment.")
    replicas: int = Field(default=0, ge=0, description="Desired replicas.")
    ready_replicas: int = Field(default=0, ge=0, description="Replicas passing readiness.")
    feasible: bool = Field(default=True, description="Whether the intent fits on this GPU type.")
    plan: PoolPlan | None = Field(default=None, description="The engine plan of the pool.")
    message: str | None = Field(default=None, description="Why the pool is not serving, if so.")
    observed: ObservedCapacity | None = Field(
        default=None, description="The engine's own KV-cache capacity and its deviation from plan."
    )
    failure: PoolFailure | None = Field(
        default=None, description="Why the pool's pods crash or stall; absent when they run clean."
    )
    last_good_plan: PlanRecord | None = Field(
        default=None,
        description="The newest plan every replica of the pool ran Ready without a failure: what "
        "a failed canary rolls back to.",
    )
    canary: CanaryStatus | None = Field(
        default=None, description="The new plan being tried on one pod, or the one that failed."
    )


class Override(ApiModel):
    """A remediation change applied on top of the plan."""

    pool: str = Field(description="GPU type of the pool the override applies to.")
    field: OverrideField = Field(
        description="vLLM engine field that is overridden, replicas (scale-out) or "
        "host_memory_gib (the container's memory request and limit, after OOMKilled)."
    )
    value: Any = Field(
        description="The value in force.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    reason: str = Field(description="CamelCase reason, for example BurstOOM or KVPressure.")
    since: datetime = Field(description="When the override was applied.")


class HistoryEntry(ApiModel):
    """One remediation step, kept in a bounded history."""

    time: datetime = Field(description="When the step happened.")
    pool: str = Field(description="GPU type of the pool.")
    field: str = Field(description="Engine field or action (for example evict) that changed.")
    from_value: Any = Field(
        default=None,
        alias="from",
        description="Value before the step.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    to_value: Any = Field(
        default=None,
        alias="to",
        description="Value after the step.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    reason: str = Field(description="CamelCase reason of the step.")
    message: str = Field(default="", description="Human-readable explanation.")
    recommended: bool = Field(
        default=False,
        description="True when the step was only recommended (remediation mode recommend): "
        "nothing changed.",
    )


class PlacementTypeStatus(ApiModel):
    """One GPU type under placement.strategy Preferred: its share of the total and why (#29)."""

    gpu_type: str = Field(description="The spec's gpuTypes entry (GPU product label or alias).")
    rank: int = Field(ge=0, description="Position in spec.placement.gpuTypes: 0 is preferred.")
    desired: int = Field(default=0, ge=0, description="Replicas the operator placed on this type.")
    ready: int = Field(default=0, ge=0, description="Of those, replicas passing readiness.")
    capacity: int = Field(
        default=0,
        ge=0,
        description="Replicas this type could hold now (running ones plus what the free "
        "allocatable GPUs of its schedulable nodes take).",
    )
    reason: str = Field(
        description="Why the replicas are here: Preferred, Spilled (a more preferred type has "
        "no room), NoRoom, Unavailable, Unschedulable, QuotaExceeded, Unplanned."
    )
    message: str = Field(default="", description="The numbers behind the reason.")
    room_since: datetime | None = Field(
        default=None,
        description="Since when this type has had room for another replica, continuously "
        "(hysteresis for moves back).",
    )
    blocked_since: datetime | None = Field(
        default=None,
        description="Since when pods of this type have been Unschedulable or refused by quota.",
    )


class PlacementMove(ApiModel):
    """A replica moving back to a more preferred type: started there before drained here."""

    from_type: str = Field(alias="from", description="The spilled type that gives a replica.")
    to_type: str = Field(alias="to", description="The more preferred type that takes it.")
    since: datetime = Field(description="When the replica on the preferred type was added.")


class PlacementStatus(ApiModel):
    """How spec.replicas is split across GPU types (placement.strategy Preferred)."""

    total: int = Field(default=0, ge=0, description="Replicas to serve across every type.")
    spilled: int = Field(
        default=0, ge=0, description="Replicas placed on a type other than the most preferred."
    )
    summary: str = Field(
        default="", description="The split for kubectl, e.g. H100-80GBx4,A100-80GBx2 (2 spilled)."
    )
    types: list[PlacementTypeStatus] = Field(
        default_factory=list,
        description="One entry per spec.placement.gpuTypes entry, in order of preference.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["gpuType"],
        },
    )
    move: PlacementMove | None = Field(
        default=None, description="The move back in progress (at most one per service)."
    )
    last_change: datetime | None = Field(
        default=None,
        description="When a running replica last moved (minDwellSeconds counts from here).",
    )


class RoutingStatus(ApiModel):
    """The InferencePool a gateway routes to and whether its Endpoint Picker can answer (#31)."""

    inference_pool: str = Field(description="Name of the InferencePool of the service.")
    endpoint_picker: str = Field(
        description="The Endpoint Picker Service the pool refers to (rendered or the user's)."
    )
    picker_ready: bool | None = Field(
        default=None,
        description="Whether the rendered picker's Deployment has a Ready replica; unset for a "
        "picker the user runs (the operator does not watch it).",
    )


class VLLMServiceStatus(ApiModel):
    """Observed state of a VLLMService."""

    observed_generation: int | None = Field(
        default=None, description="The .metadata.generation the status reflects."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Feasible, Progressing, Degraded, MemoryPressure, MetricsAvailable, "
        "TargetUnmet, PlanDeviation.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    gpu_pools: str | None = Field(
        default=None,
        alias="gpuPools",
        description="Summary of the pools for kubectl, e.g. L4x1,H100x2; a multi-node pool "
        "(LeaderWorkerSet) adds its nodes per replica, e.g. H100-80GBx1 [2 nodes].",
    )
    ready: str | None = Field(
        default=None, description="Ready replicas over desired replicas, all pools, e.g. 2/2."
    )
    plans: str | None = Field(
        default=None,
        description="Which plan each pool runs, tries and last ran healthy, for kubectl (-o "
        "wide) and Argo CD, e.g. `L4 runs 3f2a1b2c, trying 9b1c2d3e` or `L4 runs 3f2a1b2c, "
        "9b1c2d3e failed` (plan hashes, 8 characters; full ones in status.pools[]).",
    )
    replicas: int | None = Field(
        default=None,
        ge=0,
        description="The count the scale subresource reports, in spec.replicas' terms: under "
        "placement.strategy Preferred the total placed across the pools, else the most "
        "replicas any pool runs.",
    )
    selector: str | None = Field(
        default=None,
        description="Label selector of every pod of the service (all pools), for the scale "
        "subresource (an autoscaler averages its metrics over these pods).",
    )
    pools: list[PoolStatus] = Field(
        default_factory=list,
        description="One entry per GPU type the service may use.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["gpuType"],
        },
    )
    placement: PlacementStatus | None = Field(
        default=None,
        description="The split of spec.replicas across GPU types (placement.strategy Preferred).",
    )
    routing: "RoutingStatus | None" = Field(
        default=None,
        description="The InferencePool and its Endpoint Picker (spec.routing.mode inferencePool).",
    )
    overrides: list[Override] = Field(
        default_factory=list, description="Remediation overrides in force, rendered into the pools."
    )
    history: list[HistoryEntry] = Field(
        default_factory=list, max_length=50, description="The last remediation steps (at most 50)."
    )
    observations: list[Observation] = Field(
        default_factory=list,
        max_length=MAX_OBSERVATIONS,
        description="KV capacity the engines measured, one per configuration (key), newest "
        f"first, at most {MAX_OBSERVATIONS}; kept across plan changes and used by the planner "
        "when it plans the same configuration again.",
    )
