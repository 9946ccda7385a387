"""The engine's own KV-cache capacity per pool, next to the plan (status.pools[].observed), and
the observations the planner learns from (status.observations, PlanDeviation).

vLLM reports the KV cache it really allocated (`vllm:cache_config_info`: num_gpu_blocks x
block_size); the plan predicted `memory.kvCacheTokens`. Recording both with the deviation makes a
mispredicting memory model visible per model and GPU type, without anyone reading pod logs.
"""

import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from vllm_operator.api.conditions import ConditionStatus
from vllm_operator.api.engine_args import PlannedArgs
from vllm_operator.api.reasons import Reason
from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.api.status import (
    MAX_OBSERVATIONS,
    Observation,
    ObservationKey,
    ObservedCapacity,
    Override,
    PoolPlan,
    PoolStatus,
    VLLMServiceStatus,
)
from vllm_operator.planning.intent import ObservedKv
from vllm_operator.planning.versions import DEFAULT_VLLM_VERSION
from vllm_operator.remediation.overrides import effective_args


def observed_capacity(
    plan: PoolPlan | None, tokens: Iterable[int | None]
) -> ObservedCapacity | None:
    """The pool's observation from its pods' reported capacities (None when no pod reported).

    The smallest pod wins: a pool serves what its smallest engine holds.
    """
    reported = [t for t in tokens if t is not None and t > 0]
    if not reported:
        return None
    observed = min(reported)
    planned = plan.memory.kv_cache_tokens if plan is not None and plan.memory is not None else None
    deviation = (
        round((observed - planned) / planned * 100.0, 1) if planned else None  # planned > 0
    )
    return ObservedCapacity(
        kv_cache_tokens=observed,
        planned_kv_cache_tokens=planned,
        deviation_percent=deviation,
        pods=len(reported),
        plan_hash=plan_key(plan),
    )


def kept_observation(
    old: Iterable[PoolStatus], gpu_type: str, plan: PoolPlan | None
) -> ObservedCapacity | None:
    """The previous observation of this pool, kept while the plan it was taken under still runs."""
    for pool in old:
        if pool.gpu_type == gpu_type and pool.observed is not None:
            same = plan is not None and pool.observed.plan_hash == plan_key(plan)
            return pool.observed if same else None
    return None


def plan_key(plan: PoolPlan | None) -> str | None:
    """The plan's hash, or one of its engine arguments when the plan carries none."""
    if plan is None:
        return None
    if plan.hash:
        return plan.hash
    text = json.dumps(plan.engine_args, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ----------------------------------------------------------------- learning from the fleet (#15)

PLAN_DEVIATION_THRESHOLD_PERCENT = 5.0
"""|measured - predicted| / predicted above this turns PlanDeviation True.

Why 5 %: the memory model's measured error in its calibrated region is p90 2 % (0.17-0.19) and
its era margins (planning/fidelity.py) are 2-12 %; a deviation beyond 5 % is a mispredicting
model for this configuration, not noise (vLLM's block rounding is far below 1 %).
"""


def observation_key(spec: VLLMServiceSpec, gpu_type: str, args: PlannedArgs) -> ObservationKey:
    """The key of what a pool's engine runs: the model, the GPU type, the version, the args."""
    return ObservationKey(
        model=spec.model.name,
        revision=spec.model.revision,
        gpu_type=gpu_type,
        vllm_version=spec.vllm.version or DEFAULT_VLLM_VERSION,
        tensor_parallel_size=args.tensor_parallel_size,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        block_size=args.block_size,
        kv_cache_dtype=args.kv_cache_dtype,
        dtype=args.dtype,
        quantization=args.quantization,
        enforce_eager=args.enforce_eager,
    )


def measured_observation(
    spec: VLLMServiceSpec,
    pool: PoolStatus,
    overrides: Sequence[Override],
    tokens: Iterable[int | None],
    now: datetime,
) -> Observation | None:
    """The observation the pool's current pods make (None: none reported, or no plan).

    `tokens`: what the engines of the pods running the pool's current plan (plan-hash) report;
    the smallest wins. The key is of the arguments rendered, overrides included; the memory
    model's prediction is recorded only when no override changed a memory-relevant argument.
    """
    plan = pool.plan
    reported = [t for t in tokens if t is not None and t > 0]
    if plan is None or not reported:
        return None
    planned = plan.planned_args()
    running = effective_args(planned, overrides, pool.gpu_type).engine
    key = observation_key(spec, pool.gpu_type, running)
    predicted: int | None = None
    if plan.memory is not None and key == observation_key(spec, pool.gpu_type, planned):
        predicted = plan.memory.predicted_kv_cache_tokens or plan.memory.kv_cache_tokens
    observed = min(reported)
    return Observation(
        key=key,
        max_num_seqs=running.max_num_seqs,
        max_num_batched_tokens=running.max_num_batched_tokens,
        kv_cache_tokens=observed,
        predicted_kv_cache_tokens=predicted,
        deviation_percent=_deviation(observed, predicted),
        observed_at=now,
        pods=len(reported),
    )


def record_observation(old: Sequence[Observation], new: Observation) -> list[Observation]:
    """One entry per key, the changed one first, at most MAX_OBSERVATIONS (the oldest dropped).

    Per key the entry covers the most sequences and the largest prefill chunk measured: its
    capacity is a lower bound for any run with less of either, so a pool re-planned to fewer
    sequences still matches it (a plan that lowered max_num_seqs never flips back). A new
    measurement at least as general replaces the capacity; a narrower one can only lower it.
    An entry whose numbers did not change is kept as it was (its first time, its pod count):
    a steady fleet writes nothing.
    """
    before = next((o for o in old if o.key == new.key), None)
    merged = new
    if before is not None:
        general = new.max_num_seqs >= before.max_num_seqs and _chunk(new) >= _chunk(before)
        merged = new.model_copy(
            update={
                "max_num_seqs": max(new.max_num_seqs, before.max_num_seqs),
                "max_num_batched_tokens": None
                if new.max_num_batched_tokens is None or before.max_num_batched_tokens is None
                else max(new.max_num_batched_tokens, before.max_num_batched_tokens),
                "kv_cache_tokens": new.kv_cache_tokens
                if general
                else min(new.kv_cache_tokens, before.kv_cache_tokens),
            }
        )
        if not general:
            merged = merged.model_copy(
                update={
                    "predicted_kv_cache_tokens": before.predicted_kv_cache_tokens,
                    "deviation_percent": _deviation(
                        merged.kv_cache_tokens, before.predicted_kv_cache_tokens
                    ),
                }
            )
        numbers = ("kv_cache_tokens", "max_num_seqs", "max_num_batched_tokens")
        if all(getattr(merged, f) == getattr(before, f) for f in numbers):
            return list(old)
    rest = [o for o in old if o.key != new.key]
    return [merged, *rest][:MAX_OBSERVATIONS]


def _chunk(obs: Observation) -> float:
    return float("inf") if obs.max_num_batched_tokens is None else obs.max_num_batched_tokens


def _deviation(observed: int, predicted: int | None) -> float | None:
    return round((observed - predicted) / predicted * 100.0, 1) if predicted else None


def planner_observations(
    spec: VLLMServiceSpec, gpu_type: str, observations: Iterable[Observation]
) -> tuple[ObservedKv, ...]:
    """The observations of this service's model (and revision) on one GPU type, as the
    planner's typed input (planning never reads status)."""
    return tuple(
        ObservedKv(
            vllm_version=o.key.vllm_version,
            tensor_parallel_size=o.key.tensor_parallel_size,
            max_model_len=o.key.max_model_len,
            gpu_memory_utilization=o.key.gpu_memory_utilization,
            block_size=o.key.block_size,
            kv_cache_dtype=o.key.kv_cache_dtype,
            dtype=o.key.dtype,
            quantization=o.key.quantization,
            enforce_eager=o.key.enforce_eager,
            max_num_seqs=o.max_num_seqs,
            max_num_batched_tokens=o.max_num_batched_tokens,
            kv_cache_tokens=o.kv_cache_tokens,
            observed_at=o.observed_at,
            source=o.source,
        )
        for o in observations
        if o.key.model == spec.model.name
        and o.key.revision == spec.model.revision
        and o.key.gpu_type == gpu_type
    )


def plan_deviation(
    spec: VLLMServiceSpec,
    pools: Iterable[PoolStatus],
    overrides: Sequence[Override],
    observations: Sequence[Observation],
    threshold: float = PLAN_DEVIATION_THRESHOLD_PERCENT,
) -> tuple[ConditionStatus, Reason, str] | None:
    """PlanDeviation from the observations of what the pools run now (None: nothing measured).

    True when a measured capacity is more than `threshold` % away from the memory model's
    prediction for that configuration; it stays True after the re-plan (the plan then rests on
    the measurement, the model is still wrong for this key), and turns False when the model's
    prediction for what runs is within the threshold.
    """
    found: list[tuple[str, Observation]] = []
    for pool in pools:
        if pool.plan is None or not pool.feasible:
            continue
        running = effective_args(pool.plan.planned_args(), overrides, pool.gpu_type).engine
        key = observation_key(spec, pool.gpu_type, running)
        obs = next((o for o in observations if o.key == key), None)
        if obs is not None and obs.deviation_percent is not None:
            found.append((pool.gpu_type, obs))
    if not found:
        return None
    off = [(g, o) for g, o in found if abs(o.deviation_percent or 0.0) > threshold]
    if not off:
        text = ", ".join(f"{g} {o.deviation_percent:+.1f} %" for g, o in found)
        return (
            "False",
            Reason.KV_CAPACITY_AS_PLANNED,
            f"Measured KV capacity within {threshold:g} % of the prediction: {text}",
        )
    below = any((o.deviation_percent or 0.0) < 0 for _, o in off)
    text = "; ".join(
        f"{g}: vLLM {o.key.vllm_version} measured {o.kv_cache_tokens} KV-cache tokens at TP="
        f"{o.key.tensor_parallel_size} max_model_len={o.key.max_model_len} "
        f"gpu_memory_utilization={o.key.gpu_memory_utilization}, the memory model predicted "
        f"{o.predicted_kv_cache_tokens} ({o.deviation_percent:+.1f} %)"
        for g, o in off
    )
    return (
        "True",
        Reason.KV_CAPACITY_BELOW_PLAN if below else Reason.KV_CAPACITY_ABOVE_PLAN,
        f"{text}; beyond the {threshold:g} % threshold: the plan uses the measured capacity",
    )


# ------------------------------------------------------- sharing across the cluster's services (#28)

SHARED_SOURCE_SUFFIX = " of VLLMService "
"""Appended to an observation's source when it was measured by another service's engines: the
plan's reason then names the service it learned from."""


class FleetMember:
    """Another VLLMService of the cluster as far as sharing its measurements is concerned."""

    __slots__ = ("namespace", "name", "spec", "observations")

    def __init__(
        self, namespace: str, name: str, spec: VLLMServiceSpec, observations: Sequence[Observation]
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.spec = spec
        self.observations = tuple(observations)


def same_engine_configuration(a: VLLMServiceSpec, b: VLLMServiceSpec) -> bool:
    """Whether two services' engines run the same memory-relevant configuration beyond the
    observation key (model, revision, GPU type, version, TP, context, utilisation, block size,
    KV-cache dtype, dtype, quantization, eager): the same extra flags (LoRA, speculative
    decoding, CPU offload, a compilation config all move the KV budget), the same environment
    (an attention backend or allocator setting does too) and the same image."""
    return (
        a.model.name == b.model.name
        and a.model.revision == b.model.revision
        and a.vllm.extra_args == b.vllm.extra_args
        and sorted((e.name, e.value) for e in a.vllm.env)
        == sorted((e.name, e.value) for e in b.vllm.env)
        and a.vllm.image == b.vllm.image
    )


def fleet_observations(
    spec: VLLMServiceSpec, own: Sequence[Observation], others: Iterable[FleetMember]
) -> list[Observation]:
    """The observations a service plans from: its own, then those other services of the cluster
    measured for keys it has not measured itself, when their engine configuration is the same
    (`same_engine_configuration`). A shared entry's source names the service that measured it;
    of several services with the same key, the smallest capacity is taken (the safe one). Only
    the planner's input: a service's status keeps its own measurements."""
    shared: list[Observation] = []  # keys are pydantic models: compared, not hashed
    for member in sorted(others, key=lambda m: (m.namespace, m.name)):
        if not same_engine_configuration(spec, member.spec):
            continue
        for obs in member.observations:
            if any(o.key == obs.key for o in own) or SHARED_SOURCE_SUFFIX in obs.source:
                continue
            source = f"{obs.source}{SHARED_SOURCE_SUFFIX}{member.namespace}/{member.name}"
            entry = obs.model_copy(update={"source": source})
            before = next((i for i, o in enumerate(shared) if o.key == obs.key), None)
            if before is None:
                shared.append(entry)
            elif obs.kv_cache_tokens < shared[before].kv_cache_tokens:
                shared[before] = entry
    return [*own, *shared]


def fleet_members(
    bodies: Iterable[dict[str, Any]], namespace: str, name: str, model: str | None = None
) -> list[FleetMember]:
    """The cluster's other VLLMServices (listed objects) with their specs and measurements;
    objects whose spec or status does not parse, and the service itself, are left out.

    `model`: only services of this model are parsed (a reconcile reads every listed service;
    most measured none of its model, and skipping them before validation keeps it cheap)."""
    members: list[FleetMember] = []
    for body in bodies:
        meta = body.get("metadata") or {}
        ns, nm = str(meta.get("namespace", "")), str(meta.get("name", ""))
        raw = (body.get("status") or {}).get("observations")
        if (ns, nm) == (namespace, name) or not raw:
            continue
        if model is not None and _model_name(body) != model:
            continue
        try:
            spec = VLLMServiceSpec.model_validate(body.get("spec") or {})
            status = VLLMServiceStatus.model_validate(body.get("status") or {})
        except ValidationError:
            continue
        members.append(FleetMember(ns, nm, spec, status.observations))
    return members


def _model_name(body: dict[str, Any]) -> Any:
    """spec.model.name of a listed object, None when the object is not shaped like one."""
    spec = body.get("spec")
    found = spec.get("model") if isinstance(spec, dict) else None
    return found.get("name") if isinstance(found, dict) else None
