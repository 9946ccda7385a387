"""Plan and render the pools of one VLLMService (no I/O beyond the injected resolver).

`prepare_service` runs the admission chain's service and model steps (reconcile.admission_chain:
a supported vLLM version, valid extra flags, a known architecture the release registers) and
raises ServiceRejected with a condition reason; its pure part, `check_service_rules`, is what the
CLI's `validate` shares with the controller. `plan_pools` plans every allowed GPU type present in
the cluster, runs the chain's pool steps on each plan and renders its Deployment.
The same two functions back the controller and `vllm-operator render`, so what a GitOps review
shows is what the operator applies.
"""

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.api.spec import GpuAllocation, ScalingMode
from vllm_operator.api.status import CanaryStatus, Observation, Override
from vllm_operator.api.status import PoolPlan as StatusPoolPlan
from vllm_operator.catalog.architectures import Architecture, UnknownModelError
from vllm_operator.catalog.gpus import GpuFacts, UnknownGpuError
from vllm_operator.catalog.vllm.values import extra_arg_fields, extra_arg_values
from vllm_operator.planning.alternatives import Infeasible
from vllm_operator.planning.host_memory import plan_host_memory
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.plan import PlanResult, PoolPlan, plan_pool
from vllm_operator.planning.user_overrides import OverriddenPlan, apply_user_values
from vllm_operator.reconcile.admission_chain import (
    PoolSubject,
    Refusal,
    ServiceRejected,
    check_model_steps,
    check_pool_steps,
    check_service_steps,
    engine_config_message,
    origins_of,
)
from vllm_operator.reconcile.gpu_claims import allocation_mode, pool_claim
from vllm_operator.reconcile.inventory import (
    GpuNodeGroup,
    canonical_label,
    gpu_facts,
    match_groups,
)
from vllm_operator.reconcile.observed import planner_observations
from vllm_operator.remediation.overrides import effective_args
from vllm_operator.rendering.args import (
    ArgsRejected,
    container_for,
    engine_argv,
    multinode_argv,
)
from vllm_operator.rendering.names import (
    ANNOTATION_GPU_TYPE,
    ANNOTATION_PLAN_HASH,
    deployment_name,
)
from vllm_operator.rendering.workload import (
    PoolRender,
    render_pool_claim_template,
    render_workload,
)

Obj = dict[str, Any]


class ArchitectureResolver(Protocol):
    """Finds a model's architecture (inline override, catalog, Hub)."""

    def resolve(self, service: VLLMService) -> Architecture: ...


@dataclass(frozen=True)
class PreparedService:
    """A service whose version, flags and architecture are known good."""

    service: VLLMService
    arch: Architecture
    intent: PlanIntent


@dataclass
class PoolOutcome:
    """One pool: its plan or why there is none, its desired Deployment and, later, the live one."""

    gpu_type: str
    product: str | None
    feasible: bool
    reason: Reason
    message: str = ""
    plan: StatusPoolPlan | None = None
    deployment: Obj | None = None
    deployment_name: str | None = None
    summary: str = ""
    applied_message: str = ""
    unavailable: str = ""
    live: Obj | None = field(default=None, repr=False)
    plan_note: str = ""
    """Why the plan no longer holds with the user's overrides (empty: it holds)."""
    canary: CanaryStatus | None = None
    """The new plan's canary as this reconcile left it (reconcile/canary.py)."""
    canary_decided: bool = False
    """Whether the canary gate ran for this pool (else status keeps the previous canary)."""
    claim_template: Obj | None = None
    """gpuAllocation dra: the pool's ResourceClaimTemplate, applied before its workload."""

    @property
    def has_capacity(self) -> bool:
        """Some node of the pool's GPU type can take pods now (Ready, not cordoned)."""
        return not self.unavailable


def check_service_rules(service: VLLMService) -> None:
    """The pure part of prepare_service: the admission chain's service steps (the pinned version
    is supported and accepts the extra flags, overrides the pod can run). `validate`, `plan` and
    `render` call it too, so they refuse what the operator would."""
    check_service_steps(service)


def prepare_service(service: VLLMService, resolver: ArchitectureResolver) -> PreparedService:
    """The chain's service steps, the model's architecture, then the chain's model steps."""
    spec = service.spec
    check_service_rules(service)
    try:
        arch = resolver.resolve(service)
    except UnknownModelError as exc:
        raise ServiceRejected(Reason.UNKNOWN_MODEL, str(exc)) from exc
    check_model_steps(service, arch)
    return PreparedService(service=service, arch=arch, intent=PlanIntent.from_spec(spec))


__all__ = [
    "ArchitectureResolver",
    "PlanCache",
    "PoolOutcome",
    "PreparedService",
    "ServiceRejected",
    "attach_live",
    "check_service_rules",
    "engine_config_message",
    "plan_pools",
    "pool_refusal",
    "prepare_service",
    "user_values",
]


_PlanKey = tuple[PlanIntent, GpuFacts, Architecture, float | None, tuple[GpuFacts, ...]]


class PlanCache:
    """Plan results by their inputs, least recently used dropped first.

    Why: every reconcile re-plans every pool, and planning (the memory model, and for an
    infeasible pool the alternatives search) is most of a reconcile's CPU; 1000 services at
    startup plan the same few (intent, GPU) pairs over and over (#21). The planner is a pure
    function of (intent, GPU facts, architecture, measured budget, other GPU types), all frozen
    pydantic models, so its result can be shared. An input that cannot be hashed is planned
    without the cache. Results are shared: callers never modify them.
    """

    def __init__(self, maxsize: int = 1024) -> None:
        self.maxsize = maxsize
        self._results: OrderedDict[_PlanKey, PlanResult] = OrderedDict()
        # What `_plan_group` derives from the plan before rendering, by the JSON of everything it
        # reads (`pool_inputs`): exact string keys, so a hit is the same computation (#32).
        self._pools: OrderedDict[str, _PoolCore] = OrderedDict()
        self._guard = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.pool_hits = 0
        self.pool_misses = 0

    def plan(
        self,
        intent: PlanIntent,
        facts: GpuFacts,
        arch: Architecture,
        measured_free_mib: float | None,
        other_gpus: tuple[GpuFacts, ...],
    ) -> PlanResult:
        key = (intent, facts, arch, measured_free_mib, other_gpus)
        try:
            with self._guard:
                found = self._results.get(key)
                if found is not None:
                    self._results.move_to_end(key)
                    self.hits += 1
                    return found
        except TypeError:  # an unhashable field: plan without the cache
            return self._plan(intent, facts, arch, measured_free_mib, other_gpus)
        result = self._plan(intent, facts, arch, measured_free_mib, other_gpus)
        with self._guard:
            self.misses += 1
            self._results[key] = result
            while len(self._results) > self.maxsize:
                self._results.popitem(last=False)
        return result

    @staticmethod
    def _plan(
        intent: PlanIntent,
        facts: GpuFacts,
        arch: Architecture,
        measured_free_mib: float | None,
        other_gpus: tuple[GpuFacts, ...],
    ) -> PlanResult:
        return plan_pool(
            intent, facts, arch, measured_free_mib=measured_free_mib, other_gpus=other_gpus
        )

    def pool(self, inputs: str) -> "_PoolCore | None":
        """The pool computation recorded for exactly these inputs, if any."""
        with self._guard:
            found = self._pools.get(inputs)
            if found is not None:
                self._pools.move_to_end(inputs)
                self.pool_hits += 1
            return found

    def keep_pool(self, inputs: str, core: "_PoolCore") -> None:
        with self._guard:
            self.pool_misses += 1
            self._pools[inputs] = core
            while len(self._pools) > self.maxsize:
                self._pools.popitem(last=False)

    def clear(self) -> None:
        with self._guard:
            self._results.clear()
            self._pools.clear()
            self.hits = self.misses = 0
            self.pool_hits = self.pool_misses = 0


def _alternatives(result: Infeasible) -> str:
    if not result.alternatives:
        return ""
    return " Alternatives: " + "; ".join(a.description for a in result.alternatives) + "."


def plan_pools(
    prepared: PreparedService,
    groups: dict[str, GpuNodeGroup],
    measured_free_mib: dict[str, float] | None = None,
    overrides: Sequence[Override] = (),
    plans: PlanCache | None = None,
    observations: Sequence[Observation] = (),
    gpu_allocation: GpuAllocation = GpuAllocation.DEVICE_PLUGIN,
) -> list[PoolOutcome]:
    """Plan every allowed GPU type; types without nodes become NoMatchingNodes pools.

    `plans`: the controller's PlanCache (the CLI plans once and needs none).
    `observations`: status.observations, the KV capacities the engines measured; each pool's
    planner gets those of its GPU type and the service's model (learning from the fleet).
    `gpu_allocation`: the cluster default for specs without spec.placement.gpuAllocation.

    A type whose nodes are all cordoned or NotReady is still planned from their hardware: it
    is unavailable (`PoolOutcome.unavailable`), never infeasible.
    """
    service = prepared.service
    spec = service.spec
    outcomes: list[PoolOutcome] = []
    matched: list[tuple[str, GpuNodeGroup]] = []
    for gpu_type in spec.placement.gpu_types:
        found = match_groups(gpu_type, groups)
        known = [g for g in found if g.planning_gpus_per_node > 0]
        if not known:
            # No node, or nodes that advertise no GPU at all yet (device plugin starting).
            message = f"no node has nvidia.com/gpu.product={gpu_type}"
            if found:
                message = f"no node with nvidia.com/gpu.product={gpu_type} advertises a GPU: " + (
                    ", ".join(n for g in found for n in g.unavailable_nodes)
                )
            outcomes.append(
                PoolOutcome(
                    gpu_type=gpu_type,
                    product=None,
                    feasible=True,
                    reason=Reason.NO_MATCHING_NODES,
                    message=message,
                    unavailable=message,
                )
            )
        found = known
        matched.extend((gpu_type, g) for g in found if (gpu_type, g) not in matched)

    facts: dict[str, GpuFacts] = {}
    for _gpu_type, group in matched:
        try:
            facts[group.product] = gpu_facts(group)
        except UnknownGpuError as exc:
            outcomes.append(
                PoolOutcome(
                    gpu_type=group.product,
                    product=group.product,
                    feasible=False,
                    reason=Reason.UNKNOWN_GPU,
                    message=str(exc),
                )
            )
    all_facts = tuple(facts.values())
    for _, group in matched:
        if group.product not in facts:
            continue
        outcomes.append(
            _plan_group(
                prepared,
                group,
                facts[group.product],
                all_facts,
                measured_free_mib,
                overrides,
                plans or PlanCache(maxsize=0),
                observations,
                allocation_mode(spec, gpu_allocation),
            )
        )
    order = {g: i for i, g in enumerate(spec.placement.gpu_types)}
    return sorted(outcomes, key=lambda o: (order.get(o.gpu_type, len(order)), o.gpu_type))


@dataclass(frozen=True)
class _PoolCore:
    """What `_plan_group` derives before rendering: the same for every service with the same
    inputs (`pool_inputs`), whatever its name. `outcome` has no name, Deployment or plan hash."""

    outcome: PoolOutcome
    render: PoolRender | None = None
    applied_overrides: str = ""
    digest: str = ""
    """`inputs_digest` of the inputs it was computed from, kept with it: hashing ~5 KB releases
    the GIL (hashlib does above 2 KiB), and on the restart the workers then waited to take it
    back, 10 % of the restart's samples at 300 services (#32 no-op reconcile)."""
    plan_fields: dict[str, Any] | None = None
    """`outcome.plan` as field values, to build each service's copy from: validating them is
    about a fifth of the cost of a deep copy of the model (#32 no-op reconcile). None when the
    values do not rebuild the same plan, serialised alike (then the plan is deep-copied)."""


def _plan_fields(plan: StatusPoolPlan | None) -> dict[str, Any] | None:
    """`plan`'s field values if validating them rebuilds it exactly (equal, and the same JSON
    text, since that is what status records); else None."""
    if plan is None:
        return None
    fields = plan.model_dump()
    rebuilt = StatusPoolPlan.model_validate(fields)
    if rebuilt != plan or rebuilt.model_dump_json() != plan.model_dump_json():
        return None
    return fields


def pool_inputs(
    prepared: PreparedService,
    group: GpuNodeGroup,
    facts: GpuFacts,
    all_facts: tuple[GpuFacts, ...],
    measured_free_mib: dict[str, float] | None,
    overrides: Sequence[Override],
    observations: Sequence[Observation],
    allocation: GpuAllocation,
) -> str:
    """Everything the planning of one pool reads, as canonical JSON (#32).

    Why exact text and not only a digest: a hit must be the same computation. `_plan_core` is
    handed exactly these values (a service without metadata, a group reduced to `_GroupView`),
    so what it cannot see cannot change its result. The memo lives in the process, so the code
    is the same for every entry; the digest of this text is recorded in status
    (`PoolPlan.inputs`) and leaves the operator's version out, so an upgrade alone does not
    rewrite every service's status.
    """
    measured = (measured_free_mib or {}).get(group.product)
    view = _GroupView.of(group)
    others = tuple(f for f in all_facts if f.label != facts.label)
    try:
        fixed = _fixed_inputs(
            prepared.arch, prepared.intent, view, facts, others, measured, allocation
        )
    except TypeError:  # an unhashable field: serialised without the memo
        fixed = _fixed_inputs.__wrapped__(
            prepared.arch, prepared.intent, view, facts, others, measured, allocation
        )
    parts = {
        **fixed,
        "spec": _canonical(prepared.service.spec.model_dump(mode="json", by_alias=True)),
        "overrides": _canonical([o.model_dump(mode="json", by_alias=True) for o in overrides]),
        "observations": _canonical(
            [
                o.model_dump(mode="json")
                for o in planner_observations(prepared.service.spec, group.product, observations)
            ]
        ),
    }
    # The same text as json.dumps of the whole object with sorted keys: its digest is in every
    # service's status, so a different spelling would rewrite them all.
    return "{" + ",".join(f"{_key_text(k)}:{parts[k]}" for k in sorted(parts)) + "}"


@lru_cache(maxsize=64)
def _key_text(key: str) -> str:
    """A key of `pool_inputs` as JSON (the same ten keys each time: one encoding each)."""
    return json.dumps(key)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=256)
def _fixed_inputs(
    arch: Architecture,
    intent: PlanIntent,
    group: "_GroupView",
    facts: GpuFacts,
    others: tuple[GpuFacts, ...],
    measured: float | None,
    allocation: GpuAllocation,
) -> dict[str, str]:
    """The serialised parts of `pool_inputs` that services of one model on one GPU type share
    (frozen values, so they key a memo): serialising them was most of the cost of `pool_inputs`
    in every reconcile (#32 no-op reconcile). Callers do not modify the result."""
    return {
        "arch": _canonical(arch.model_dump(mode="json")),
        "intent": _canonical(intent.model_dump(mode="json")),
        "group": _canonical(dataclasses.asdict(group)),
        "facts": _canonical(facts.model_dump(mode="json")),
        "others": _canonical([f.model_dump(mode="json") for f in others]),
        "measured": _canonical(measured),
        "allocation": _canonical(allocation.value),
    }


def inputs_digest(inputs: str) -> str:
    """The short digest of `pool_inputs` that status records."""
    return hashlib.sha256(inputs.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _GroupView:
    """The facts of a node group that planning a pool reads (not node names or counts, so a
    node added to a pool that can already take pods changes nothing)."""

    product: str
    resource: str
    planning_gpus_per_node: int
    schedulable: bool
    unavailable_nodes: tuple[str, ...]
    allocatable_memory_mib: int | None
    mig_profiles: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, group: GpuNodeGroup) -> "_GroupView":
        schedulable = bool(group.schedulable_nodes)
        return cls(
            product=group.product,
            resource=group.resource,
            planning_gpus_per_node=group.planning_gpus_per_node,
            schedulable=schedulable,
            unavailable_nodes=() if schedulable else tuple(group.unavailable_nodes),
            allocatable_memory_mib=group.allocatable_memory_mib,
            mig_profiles=tuple(sorted(group.mig_profiles.items())),
        )


def _plan_group(
    prepared: PreparedService,
    group: GpuNodeGroup,
    facts: GpuFacts,
    all_facts: tuple[GpuFacts, ...],
    measured_free_mib: dict[str, float] | None,
    overrides: Sequence[Override],
    plans: PlanCache,
    observations: Sequence[Observation] = (),
    allocation: GpuAllocation = GpuAllocation.DEVICE_PLUGIN,
) -> PoolOutcome:
    """Plan one pool (through the plans' memo of identical inputs), then render it for this
    service. A restart or a reconcile that changes nothing the planning reads computes nothing
    again but the service's own objects (#32)."""
    inputs = pool_inputs(
        prepared, group, facts, all_facts, measured_free_mib, overrides, observations, allocation
    )
    core = plans.pool(inputs)
    if core is None:
        core = _plan_core(
            PreparedService(
                service=prepared.service.model_copy(update={"metadata": {}}),
                arch=prepared.arch,
                intent=prepared.intent,
            ),
            _GroupView.of(group),
            facts,
            all_facts,
            (measured_free_mib or {}).get(group.product),
            overrides,
            plans,
            observations,
            allocation,
        )
        core = dataclasses.replace(
            core, digest=inputs_digest(inputs), plan_fields=_plan_fields(core.outcome.plan)
        )
        plans.keep_pool(inputs, core)
    service = prepared.service
    name = deployment_name(service.name, group.product)
    if core.render is None or core.outcome.plan is None:
        return dataclasses.replace(core.outcome, deployment_name=name)
    deployment = render_workload(service, core.render)
    own = {
        "hash": deployment["metadata"]["annotations"][ANNOTATION_PLAN_HASH],
        "inputs": core.digest,
    }
    # A copy of its own: callers may change what they are handed (validation builds new lists).
    status_plan = (
        StatusPoolPlan.model_validate({**core.plan_fields, **own})
        if core.plan_fields is not None
        else core.outcome.plan.model_copy(update=own, deep=True)
    )
    return dataclasses.replace(
        core.outcome,
        plan=status_plan,
        deployment=deployment,
        claim_template=render_pool_claim_template(service, core.render),
        deployment_name=name,
        applied_message=(
            f"Applied plan {status_plan.hash} to {deployment['kind']} {name}"
            f"{core.applied_overrides}: {core.outcome.summary}"
        ),
    )


def _plan_core(
    prepared: PreparedService,
    group: _GroupView,
    facts: GpuFacts,
    all_facts: tuple[GpuFacts, ...],
    measured: float | None,
    overrides: Sequence[Override],
    plans: PlanCache,
    observations: Sequence[Observation] = (),
    allocation: GpuAllocation = GpuAllocation.DEVICE_PLUGIN,
) -> _PoolCore:
    service, spec = prepared.service, prepared.service.spec
    # Tensor parallelism must fit on one node of the pool: its hardware decides, not whether it
    # is cordoned or NotReady right now (that is availability, reported apart).
    cap = min(spec.placement.max_gpus_per_replica, max(1, group.planning_gpus_per_node))
    unavailable = (
        ""
        if group.schedulable
        else f"no schedulable node of {group.product}: " + ", ".join(group.unavailable_nodes)
    )
    # The observations are part of the intent, hence of the plan cache's key.
    intent = prepared.intent.model_copy(
        update={
            "max_gpus_per_replica": cap,
            "observations": planner_observations(spec, group.product, observations),
        }
    )
    result = plans.plan(
        intent,
        facts,
        prepared.arch,
        measured,
        tuple(f for f in all_facts if f.label != facts.label),
    )
    if isinstance(result, Infeasible):
        return _PoolCore(
            PoolOutcome(
                gpu_type=group.product,
                product=group.product,
                feasible=False,
                reason=Reason.INFEASIBLE,
                message="; ".join(r.rstrip(".") for r in result.reasons)
                + "."
                + _alternatives(result),
                unavailable=unavailable,
            )
        )
    # The user's values for planner-owned flags (allowPlannerOverride) replace the planner's,
    # and the memory figures are recomputed with them (planning.user_overrides).
    overridden = user_values(prepared, result, intent, facts, measured)
    result = overridden.plan
    allocatable = group.allocatable_memory_mib
    host = plan_host_memory(
        prepared.arch,
        tensor_parallel_size=result.engine_args.tensor_parallel_size,
        engine=result.engine,
        vllm_version=result.vllm_version,
        weights_gib_per_gpu=result.memory.weights_gib,
        enforce_eager=result.engine_args.enforce_eager,
        extra_args=spec.vllm.extra_args,
        node_allocatable_gib=allocatable / 1024 if allocatable is not None else None,
    )
    # Remediation overrides (status.overrides) apply on top of the plan; the status keeps the
    # plan itself, so the policy always measures its steps against what was planned.
    effective = effective_args(result.engine_args, overrides, group.product, host.limit_gib)
    args = effective.engine
    host_limit = effective.host_memory_gib or host.limit_gib
    if host.max_limit_gib is not None:
        host_limit = min(host_limit, max(host.limit_gib, host.max_limit_gib))
    # With an external autoscaler the replica count is not ours to render (nor remediation's:
    # maxReplicas is refused with it); the controller hands the field over on the first apply.
    external = spec.scaling.mode == ScalingMode.EXTERNAL
    replicas = None if external else (effective.replicas or spec.replicas)
    # A user value the plan cannot hold (--max-model-len auto) is rendered from extraArgs.
    rendered = {k: None if k in overridden.unplanned else v for k, v in args.rendered().items()}
    # Pipeline stages across nodes: one pod per node of a LeaderWorkerSet group.
    nodes = args.pipeline_parallel_size or 1
    # The admission chain's pool steps: never render an engine known not to start.
    refusal = pool_refusal(prepared, group.product, overridden, rendered, result.engine)
    if refusal is not None:
        return _PoolCore(
            PoolOutcome(
                gpu_type=group.product,
                product=group.product,
                feasible=False,
                reason=refusal.reason,
                message=refusal.message,
                unavailable=unavailable,
            )
        )
    try:
        argv = engine_argv(
            spec.vllm.version,
            rendered,
            spec.vllm.extra_args,
            allow_override=spec.vllm.allow_planner_override,
            served_model_name=spec.model.name if spec.model.source.pvc is not None else None,
        )
        leader_argv, worker_argv = (
            multinode_argv(spec.vllm.version, nodes) if nodes > 1 else ([], [])
        )
    except ArgsRejected as exc:
        return _PoolCore(
            PoolOutcome(
                gpu_type=group.product,
                product=group.product,
                feasible=False,
                reason=exc.reason,
                message=str(exc),
                unavailable=unavailable,
            )
        )
    image, command, model_args = container_for(service)
    tp = args.tensor_parallel_size
    render = PoolRender(
        gpu_type=group.product,
        gpu_resource=group.resource,
        gpus_per_replica=tp,
        nodes_per_replica=nodes,
        leader_argv=leader_argv,
        worker_argv=worker_argv,
        replicas=replicas,
        image=image,
        command=command,
        model_args=model_args,
        engine_argv=argv,
        weights_gib_total=result.memory.weights_gib * tp,
        host_memory_gib=host_limit,
        shm_gib=host.shm_gib,
        gpu_claim=(
            pool_claim(group.product, facts, tp, dict(group.mig_profiles))
            if allocation == GpuAllocation.DRA
            else None
        ),
    )
    planned_status = result.to_status()
    status_plan = planned_status.model_copy(
        update={
            "host_memory": host.to_status(),
            "user_overrides": list(overridden.overrides),
            "reasons": [*planned_status.reasons, *host.reasons],
        }
    )
    mem = result.memory
    planned = result.engine_args.rendered()
    changed: dict[str, object] = {k: v for k, v in args.rendered().items() if planned[k] != v}
    if host_limit != host.limit_gib:
        changed["host_memory_gib"] = host_limit
    applied_overrides = (
        " with overrides " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items()))
        if changed
        else ""
    )
    layout = f"TP={tp} PP={nodes}" if nodes > 1 else f"TP={tp}"
    summary = (
        f"{group.product} {layout} max_num_seqs={args.max_num_seqs} "
        f"KV {mem.kv_cache_tokens} tokens ({mem.concurrency_at_p99:.1f} x P99)"
    )
    plan_note = ""
    if not overridden.holds:
        plan_note = "plan no longer holds with spec.vllm.extraArgs: " + "; ".join(
            overridden.problems
        )
    outcome = PoolOutcome(
        gpu_type=group.product,
        product=group.product,
        feasible=True,
        reason=Reason.PLANNED,
        message="; ".join(m for m in (unavailable, plan_note) if m),
        plan_note=plan_note,
        unavailable=unavailable,
        plan=status_plan,
        summary=summary,
    )
    return _PoolCore(outcome, render, applied_overrides)


def user_values(
    prepared: PreparedService,
    plan: PoolPlan,
    intent: PlanIntent,
    facts: GpuFacts,
    measured_free_mib: float | None = None,
) -> OverriddenPlan:
    """`plan` with the spec's allowPlannerOverride values, as rendered: shared by `plan_pools`
    and `vllm-operator plan`, so the plan printed is the one that runs."""
    spec = prepared.service.spec
    version = spec.vllm.version
    values = extra_arg_values(version, spec.vllm.extra_args)
    fields = {name: flag for flag, name in extra_arg_fields(version, spec.vllm.extra_args).items()}
    return apply_user_values(
        plan,
        values,
        fields,
        intent=intent,
        arch=prepared.arch,
        gpu=facts,
        measured_free_mib=measured_free_mib,
    )


def pool_refusal(
    prepared: PreparedService,
    gpu_type: str,
    overridden: OverriddenPlan,
    rendered: Mapping[str, object],
    engine: Any,
) -> Refusal | None:
    """The admission chain's pool steps for one plan: `rendered` is every planned engine field
    as it would be rendered (None: left to extraArgs), with the user's and remediation's values."""
    spec = prepared.service.spec
    version = spec.vllm.version
    values = extra_arg_values(version, spec.vllm.extra_args)
    config = {**values, **{k: v for k, v in rendered.items() if v is not None}}
    origins = origins_of(spec.vllm.extra_args, version)
    origins.update({k: "the plan" for k in rendered if k not in origins})
    pp = rendered.get("pipeline_parallel_size")
    return check_pool_steps(
        PoolSubject(
            service=prepared.service,
            arch=prepared.arch,
            gpu_type=gpu_type,
            overridden=overridden,
            config=config,
            origins=origins,
            engine=engine,
            nodes=pp if isinstance(pp, int) and pp > 1 else 1,
            rendered={
                **rendered,
                **({"served_model_name": spec.model.name} if spec.model.source.pvc else {}),
            },
        )
    )


def attach_live(pools: Sequence[PoolOutcome], existing: Sequence[Obj]) -> None:
    """Give each pool without a live Deployment the existing owned one of its GPU type.

    Why by GPU type and not only by name: a pool whose nodes are gone has no plan and hence no
    derived name, yet its Deployment still exists and wants replicas; status must show it (issue
    #20: `ready 0/0` and `deployment: null` hid a service without capacity).
    """
    claimed = {id(p.live) for p in pools if p.live is not None}
    for pool in pools:
        if pool.live is not None:
            continue
        for dep in existing:
            meta = dep.get("metadata") or {}
            if id(dep) in claimed:
                continue
            by_name = pool.deployment_name is not None and meta.get("name") == pool.deployment_name
            gpu = str((meta.get("annotations") or {}).get(ANNOTATION_GPU_TYPE, ""))
            by_type = pool.deployment_name is None and pool.reason == Reason.NO_MATCHING_NODES
            if by_name or (
                by_type and gpu and canonical_label(gpu) == canonical_label(pool.gpu_type)
            ):
                pool.live = dep
                pool.deployment_name = str(meta.get("name"))
                claimed.add(id(dep))
                break
