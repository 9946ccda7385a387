"""What the placement decision reads, gathered from the watch caches (#29).

`place_replicas` is the controller's one call for placement.strategy Preferred: it reads the
nodes, the GPUs every bound pod requests (`KubeGateway.gpu_requests_by_node`, answered from the
pod watch the operator runs anyway, so no reconcile lists all pods), the service's own pods and
its live Deployments, turns them into `TypeState`s (`type_states`, pure), lets
reconcile/placement.py decide, and renders each pool's Deployment with its share of the total.
Under `All` it does nothing: every pool keeps spec.replicas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from vllm_operator.api.engine_args import OverrideField
from vllm_operator.api.service import VLLMService
from vllm_operator.api.spec import PlacementStrategy
from vllm_operator.api.status import Override, PlacementStatus
from vllm_operator.kube.gateway import Kind, KubeGateway
from vllm_operator.reconcile.inventory import LABEL_PRODUCT, canonical_label
from vllm_operator.reconcile.placement import (
    PlacementDecision,
    PlacementInput,
    TypeState,
    decide,
)
from vllm_operator.reconcile.pools import PoolOutcome
from vllm_operator.remediation.diagnosis import parse_time
from vllm_operator.rendering.names import LABEL_POOL, gpu_short_name, selector_labels

Obj = dict[str, Any]


def placement_total(spec_replicas: int, overrides: Sequence[Override]) -> int:
    """The total to serve: spec.replicas, or a KV-pressure scale-out above it (remediation keeps
    one replicas override per pool it scaled; under Preferred each names the new total)."""
    scaled = [
        int(o.value)
        for o in overrides
        if o.field == OverrideField.REPLICAS and isinstance(o.value, int)
    ]
    return max([spec_replicas, *scaled])


def _ready_node(node: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def _gpus_per_replica(deployment: Obj) -> tuple[str, int]:
    """The GPU resource and count one replica of the pool's Deployment requests."""
    containers = deployment["spec"]["template"]["spec"].get("containers") or []
    for container in containers:
        limits = (container.get("resources") or {}).get("limits") or {}
        for name, value in limits.items():
            if str(name).startswith("nvidia.com/"):
                return str(name), max(1, int(str(value)))
    return "nvidia.com/gpu", 1


def _quota_refused(live: Obj | None) -> bool:
    """The Deployment's ReplicaFailure condition: the ReplicaSet could not create pods because a
    ResourceQuota (or a LimitRange) refused them."""
    for cond in ((live or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            message = str(cond.get("message", "")).lower()
            if "quota" in message or "forbidden" in message:
                return True
    return False


def pool_room(
    deployment: Obj,
    product: str,
    nodes: Sequence[Obj],
    requested: dict[str, dict[str, int]],
    node_selector: dict[str, str],
) -> int:
    """More replicas of the pool's workload the free allocatable GPUs of its schedulable, Ready
    nodes take (allocatable minus what bound pods request, whole replicas per node). Pure."""
    resource, per_replica = _gpus_per_replica(deployment)
    room = 0
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        if canonical_label(str(labels.get(LABEL_PRODUCT, ""))) != canonical_label(product):
            continue
        if any(labels.get(k) != v for k, v in node_selector.items()):
            continue
        if (node.get("spec") or {}).get("unschedulable") or not _ready_node(node):
            continue
        allocatable = int(
            str(((node.get("status") or {}).get("allocatable") or {}).get(resource, 0) or 0)
        )
        used = requested.get(str(meta.get("name", "")), {}).get(resource, 0)
        room += max(0, allocatable - used) // per_replica
    return room


def type_states(
    pools: Sequence[PoolOutcome],
    nodes: Sequence[Obj],
    requested: dict[str, dict[str, int]],
    pods: Sequence[Obj],
    lives: dict[str, Obj | None],
    node_selector: dict[str, str],
) -> list[TypeState]:
    """One TypeState per pool, in the pools' order (most preferred first). Pure."""
    ready_nodes = {str((n.get("metadata") or {}).get("name", "")) for n in nodes if _ready_node(n)}
    states: list[TypeState] = []
    for pool in pools:
        product = pool.product or pool.gpu_type
        short = gpu_short_name(product)
        live = lives.get(pool.gpu_type)
        current = int(((live or {}).get("spec") or {}).get("replicas") or 0)
        mine = [
            p
            for p in pods
            if ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_POOL) == short
            and not (p.get("metadata") or {}).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        running = sum(1 for p in mine if (p.get("spec") or {}).get("nodeName") in ready_nodes)
        ready = sum(
            1
            for p in mine
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        )
        stuck = [
            parse_time(c.get("lastTransitionTime"))
            for p in mine
            if not (p.get("spec") or {}).get("nodeName")
            for c in (p.get("status") or {}).get("conditions") or []
            if c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ]
        since = min((t for t in stuck if t is not None), default=None)
        if pool.deployment is None:
            states.append(
                TypeState(
                    gpu_type=pool.gpu_type,
                    short=short,
                    plannable=False,
                    current=current,
                    running=running,
                    ready=ready,
                    note=pool.message,
                )
            )
            continue
        room = pool_room(pool.deployment, product, nodes, requested, node_selector)
        states.append(
            TypeState(
                gpu_type=pool.gpu_type,
                short=short,
                plannable=True,
                current=current,
                running=running,
                ready=ready,
                room=room,
                unschedulable_since=since,
                quota_refused=_quota_refused(live),
                unavailable=pool.unavailable,
            )
        )
    return states


def place_replicas(
    gw: KubeGateway,
    service: VLLMService,
    pools: Sequence[PoolOutcome],
    nodes: Sequence[Obj],
    previous: PlacementStatus | None,
    overrides: Sequence[Override],
    now: datetime,
    listed: Mapping[str, Obj] | None = None,
) -> PlacementDecision | None:
    """Under Preferred: decide the split and set each pool Deployment's spec.replicas to its
    share (the plan hash is untouched, so a move never rolls pods). None under All.

    `listed`: the service's labelled Deployments by name as the caller listed them; a pool's
    Deployment found there is not read again (#32 no-op reconcile)."""
    spec = service.spec
    if spec.placement.strategy != PlacementStrategy.PREFERRED:
        return None
    lives = {
        pool.gpu_type: (
            (listed or {}).get(pool.deployment_name)
            or gw.get(Kind.DEPLOYMENT, service.namespace, pool.deployment_name)
        )
        if pool.deployment_name
        else None
        for pool in pools
    }
    pods = gw.list_pods(service.namespace, selector_labels(service.name))
    states = type_states(
        pools,
        nodes,
        gw.gpu_requests_by_node(),
        pods,
        lives,
        dict(spec.placement.node_selector),
    )
    decision = decide(
        PlacementInput(
            total=placement_total(spec.replicas, overrides),
            types=tuple(states),
            previous=previous,
            now=now,
            spill_after_seconds=spec.placement.spill_after_seconds,
            min_dwell_seconds=spec.placement.min_dwell_seconds,
        )
    )
    for pool in pools:
        if pool.deployment is not None:
            pool.deployment["spec"]["replicas"] = decision.desired.get(pool.gpu_type, 0)
    return decision
