"""Every CamelCase reason the operator writes into a condition, an Event or a remediation step.

Why one enum: the reasons are an API. The Argo CD health check (deploy/argocd) and alerts match
them, users grep Events for them, and `docs/crd-reference.md` lists them (generated from this
enum). A bare string that drifts from this list would silently break those consumers, so every
writer spells a reason through `Reason`, and the packaging tests check the Lua script and its
fixtures against it.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """A condition / Event / remediation reason, with what it means (`Reason.X.doc`)."""

    doc: str

    def __new__(cls, value: str, doc: str = "") -> Reason:
        member = str.__new__(cls, value)
        member._value_ = value
        member.doc = doc
        return member

    # The spec cannot be acted on (Feasible=False, Degraded=True; nothing is created or changed).
    INVALID_SPEC = "InvalidSpec", "The spec fails validation; the message names each problem."
    UNKNOWN_MODEL = "UnknownModel", "Neither the spec, the catalog nor the Hub knows the model."
    UNSUPPORTED_VERSION = "UnsupportedVersion", "spec.vllm.version is not in the version catalog."
    INVALID_EXTRA_ARGS = (
        "InvalidExtraArgs",
        "spec.vllm.extraArgs holds flags or values the pinned vLLM version rejects.",
    )
    UNSUPPORTED_ENGINE_ARGS = (
        "UnsupportedEngineArgs",
        "The planned engine arguments are not accepted by the pinned vLLM version.",
    )
    UNSUPPORTED_ARCHITECTURE = (
        "UnsupportedArchitecture",
        "The model's architecture is not registered in the pinned vLLM release's model registry; "
        "the message names the first release that has it.",
    )
    INVALID_ENGINE_CONFIG = (
        "InvalidEngineConfig",
        "The effective engine arguments (plan and spec.vllm.extraArgs together) break a rule "
        "vLLM's engine configuration enforces at startup; the message quotes vLLM's rule and "
        "cites where vLLM raises it. Nothing is rendered for the pool.",
    )

    # Feasible
    ALL_POOLS_PLANNED = "AllPoolsPlanned", "Every GPU type with nodes has an engine plan."
    SOME_POOLS_INFEASIBLE = (
        "SomePoolsInfeasible",
        "At least one pool is planned; the intent does not fit some other GPU types.",
    )
    INFEASIBLE = "Infeasible", "The intent fits no GPU type; the message lists alternatives."
    AWAITING_NODES = (
        "AwaitingNodes",
        "No allowed GPU type has nodes yet (cordoned or NotReady nodes still count: their "
        "hardware is planned, their absence is reported as NoMatchingNodes / PoolsUnavailable).",
    )
    UNKNOWN_GPU = "UnknownGpu", "A pool's GPU is neither in the catalog nor labelled with memory."
    PLAN_OVERRIDDEN = (
        "PlanOverridden",
        "Feasible=True, but the plan no longer holds for some pool: spec.vllm.extraArgs overrides "
        "planner-owned values (allowPlannerOverride) with which the memory model predicts the "
        "target is missed or vLLM does not start, or that it cannot account for. The pools run "
        "the user's values; the message says which and why.",
    )

    # Progressing
    NO_MATCHING_NODES = (
        "NoMatchingNodes",
        "No schedulable node has an allowed GPU type (none labelled, or all cordoned / "
        "NotReady); pools roll out by themselves when one appears.",
    )
    ROLLING_OUT = "RollingOut", "A pool's Deployment is rolling out its current plan."
    ROLLOUT_COMPLETE = "RolloutComplete", "Every pool runs its current plan."
    CANARY_OBSERVING = (
        "CanaryObserving",
        "A new plan runs on one canary pod (or group) and is watched before the rest of its pool "
        "gets it (spec.rollout.canary).",
    )

    # Ready
    ALL_POOLS_READY = "AllPoolsReady", "Every desired replica passes readiness."
    SCALED_TO_ZERO = (
        "ScaledToZero",
        "spec.replicas is 0 on purpose (scaling.mode external: the autoscaler set every pool to 0).",
    )
    PODS_NOT_READY = "PodsNotReady", "Some desired replicas are not ready yet."

    # Degraded
    POOLS_UNAVAILABLE = (
        "PoolsUnavailable",
        "Some allowed GPU types cannot serve (infeasible, unknown GPU, no nodes, or a pool "
        "wanting replicas has none ready and no schedulable node).",
    )
    REPLICA_FAILURE = (
        "ReplicaFailure",
        "A pool's Deployment cannot create pods (ReplicaFailure FailedCreate: quota, Pod "
        "Security, ...) or exceeded its progress deadline; the message quotes the Deployment "
        "controller.",
    )
    AS_EXPECTED = "AsExpected", "Nothing is degraded."
    # Degraded reasons of a crashing or stalled pool, one per diagnosis class (docs/operations.md,
    # "Diagnosis"); StartupOOM, RuntimeOOM and HostOOM below are Degraded reasons too.
    STARTUP_KV_INSUFFICIENT = (
        "StartupKVInsufficient",
        "Degraded: a pod stopped at startup because its KV cache cannot hold one request of "
        "max_model_len (class startup-kv-insufficient); the message quotes vLLM's numbers.",
    )
    STARTUP_FREE_MEMORY = (
        "StartupFreeMemory",
        "Degraded: a pod stopped at startup because another process holds GPU memory (class "
        "startup-free-memory); the message quotes free vs requested GiB.",
    )
    RUNTIME_OOM = (
        "RuntimeOOM",
        "Degraded: a pod ran out of GPU memory while serving (class runtime-cuda-oom); the "
        "remediation step is recorded as BurstOOM.",
    )
    UNRECOGNIZED_ARGUMENTS = (
        "UnrecognizedArguments",
        "Degraded: vLLM refused the rendered command line (class unrecognized-arguments): the "
        "image does not match spec.vllm.version.",
    )
    CRASHING = (
        "Crashing",
        "Degraded: pods crash or crash-loop for a reason that is not a memory problem (class "
        "other: NCCL, illegal memory access, missing or gated model, ...; or unknown).",
    )
    STARTUP_STALLED = (
        "StartupStalled",
        "Degraded: a pod has run past its predicted startup budget without becoming Ready or "
        "crashing (weights over the load bandwidth + profiling + graph capture).",
    )
    NAME_CONFLICT = (
        "NameConflict",
        "An object with a derived name exists and is not owned by this VLLMService: it is left "
        "untouched (condition Degraded and a Warning Event name it).",
    )

    # Degraded (and Progressing=False): a reconcile that could not finish, retried with
    # exponential backoff; status.observedGeneration stays behind until one succeeds.
    APPLY_REJECTED = (
        "ApplyRejected",
        "The API server refused a request of the reconcile (an invalid object, a quota, RBAC, an "
        "admission webhook): the message names the object and quotes the API server's cause. "
        "Retried with exponential backoff (5 s doubling to 5 min).",
    )
    API_REQUEST_FAILED = (
        "ApiRequestFailed",
        "The API server failed or throttled a request (5xx, 429) or kept reporting conflicts; "
        "the message quotes it. Retried with exponential backoff (5 s doubling to 5 min).",
    )
    RECONCILE_ERROR = (
        "ReconcileError",
        "An internal error of the operator while planning or rendering this service (a bug: "
        "please report it with the message, which names the exception). Retried with "
        "exponential backoff (5 s doubling to 5 min).",
    )

    # MemoryPressure and remediation steps (overrides, history, Events)
    STARTUP_OOM = (
        "StartupOOM",
        "vLLM ran out of GPU memory while starting (loading, profiling, graph capture; class "
        "startup-cuda-oom).",
    )
    BURST_OOM = "BurstOOM", "vLLM ran out of GPU memory under load after it had started."
    HOST_OOM = "HostOOM", "The container was OOMKilled: host (CPU) memory, not GPU memory."
    CHRONIC_FRAGMENTATION = (
        "ChronicFragmentation",
        "Memory creeps up over time on some pods; they are drained and replaced.",
    )
    KV_PRESSURE = "KVPressure", "The KV cache stays nearly full and requests are preempted."
    PREFIX_CACHE_WASTE = (
        "PrefixCacheWaste",
        "Prefix caching holds memory while its hit rate stays low.",
    )
    RESTORED = "Restored", "An override was stepped back after a quiet period."
    WITHIN_LIMITS = "WithinLimits", "No memory pressure was observed."

    # TargetUnmet
    TARGET_UNMET = "TargetUnmet", "The served concurrency or context is below the intent."
    TARGET_MET = "TargetMet", "The intent is served."

    # PlanDeviation: the engine's measured KV capacity against the memory model's prediction
    KV_CAPACITY_BELOW_PLAN = (
        "KVCapacityBelowPlan",
        "PlanDeviation=True: an engine holds fewer KV-cache tokens than the memory model "
        "predicted, beyond the threshold; the pool is re-planned from the measured capacity "
        "(a Warning Event when it turns True).",
    )
    KV_CAPACITY_ABOVE_PLAN = (
        "KVCapacityAbovePlan",
        "PlanDeviation=True: an engine holds more KV-cache tokens than predicted, beyond the "
        "threshold; the plan uses the measured capacity.",
    )
    KV_CAPACITY_AS_PLANNED = (
        "KVCapacityAsPlanned",
        "PlanDeviation=False: every measured KV capacity is within the threshold of the "
        "prediction.",
    )

    # MetricsAvailable
    METRICS_OK = "MetricsOK", "Fresh vLLM metrics for every pool."
    METRICS_UNAVAILABLE = "MetricsUnavailable", "No Prometheus, or no fresh vLLM series at all."
    METRICS_INCOMPLETE = "MetricsIncomplete", "Missing or stale series for some pools."
    METRICS_INVALID = (
        "MetricsInvalid",
        "vLLM reported values out of range (KV-cache usage below 0 or above 1): no metric-driven "
        "action on those pools.",
    )

    # Remediation decisions that change nothing
    REMEDIATION_OFF = "RemediationOff", "spec.remediation.mode is off."
    HEALTHY = "Healthy", "Nothing to remediate."
    NO_ACTION = "NoAction", "Findings, but no step is allowed now (guards, budget, mode)."

    # Pool outcomes (printed by `vllm-operator render`)
    PLANNED = "Planned", "The pool has an engine plan and a rendered Deployment."

    # Events only (never a condition reason)
    PLAN_APPLIED = (
        "PlanApplied",
        "Event: pools' Deployments were applied with a new plan (one Event per reconcile, naming "
        "each Deployment).",
    )
    POOL_REMOVED = (
        "PoolRemoved",
        "Event: the Deployment of a GPU type no longer allowed was deleted.",
    )
    POD_EVICTED = "PodEvicted", "Event: a drained pod was evicted through the Eviction API."
    CANARY_FAILED = (
        "CanaryFailed",
        "Degraded=True and Event: a new plan's canary pod did not become Ready, restarted, or "
        "measured a KV capacity beyond the plan's threshold; the pool stays on its last good plan "
        "and the plan is not retried until the spec or the planner's inputs change.",
    )
    CANARY_STARTED = "CanaryStarted", "Event: a new plan was started on one canary pod (or group)."
    CANARY_PROMOTED = (
        "CanaryPromoted",
        "Event: a canary ran its observation window Ready, without restarts and with the planned "
        "KV capacity; the plan rolls out to the rest of the pool.",
    )
    PROBE_BUDGET_IGNORED = (
        "ProbeBudgetIgnored",
        "Event on a Node: its probe budget annotation is stale, malformed or inconsistent.",
    )
    # Placement (placement.strategy Preferred, #29): Events only
    REPLICAS_SPILLED = (
        "ReplicasSpilled",
        "Event: replicas that a GPU type cannot take (no room, Unschedulable, cordoned or "
        "NotReady nodes, a quota refusal) were placed on the next type with room, planned for it.",
    )
    REPLICA_MOVING_BACK = (
        "ReplicaMovingBack",
        "Event: a more preferred type has had room long enough; one replica was added there and "
        "the spilled one is drained once it is Ready.",
    )
    REPLICA_MOVED_BACK = (
        "ReplicaMovedBack",
        "Event: the replica added on the preferred type is Ready; one spilled replica was removed.",
    )
    REPLICA_MOVE_CANCELLED = (
        "ReplicaMoveCancelled",
        "Event: the replica added on the preferred type could not be scheduled (or the room "
        "went); it was removed and the spilled replica kept.",
    )
    PLACEMENT_SCALED = (
        "PlacementScaled",
        "Event: the total changed (spec.replicas or scale-out); replicas were added on the most "
        "preferred type with room, or removed from the least preferred first.",
    )
    GPU_INVENTORY_MISMATCH = (
        "GpuInventoryMismatch",
        "Event on a Node: its GPU Feature Discovery labels disagree with its DRA ResourceSlices "
        "(product, memory or GPU count); the operator plans from the slices.",
    )


def reasons_table() -> str:
    """Markdown table of every reason, for the generated API reference."""
    lines = ["| Reason | Meaning |", "|---|---|"]
    lines += [f"| `{r.value}` | {r.doc} |" for r in Reason]
    return "\n".join(lines) + "\n"


__all__ = ["Reason", "reasons_table"]
