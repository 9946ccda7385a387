"""The canary of a pool's new plan, as one reconcile applies it (issue #27).

The decision is pure (remediation/canary.py); this module gathers its inputs (the canary pod,
the pool's failure diagnosis and the engines' KV measurements from status) and carries it out:

- the canary is a copy of the pool's rendered workload named `<workload>-canary`, 1 replica (one
  group for a LeaderWorkerSet), its pods labelled `serving.vllm-operator.dev/canary: "true"` (in
  its selector too, so the pool's own workload never counts them). Its pods carry the pool's
  labels, so the Service sends them traffic once Ready, and the run-time evaluation measures and
  diagnoses them like any pod of the pool (plan-hash tells the plans apart);
- while the canary runs, and after it failed, the pool's workload is *held*: applied as rendered
  except its pod template (and plan-hash), which stay what runs — the last good plan, unchanged
  pods. With `spec.rollout.maxSurge` 0, or when the pool's GPU type has no free GPUs for one more
  pod when the canary starts (the inventory, reconcile/placement_inputs.py pool_room), the held
  workload runs one replica fewer while the canary runs, so the canary takes the place of one pod
  instead of surging into a pod the scheduler cannot place (one pod at a time: what the
  service's PodDisruptionBudget, maxUnavailable 1, allows). The choice is made once, at the start,
  and kept in status (`canary.inPlace`): once the canary runs it holds the GPUs a surge needed;
- promotion applies the rendered workload (a normal rolling update, every stopping pod drained)
  and deletes the canary; rollback deletes the canary and keeps holding.
"""

import copy
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vllm_operator.api.conditions import ConditionType, find_condition
from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import ANNOTATION_PREFIX, VLLMService
from vllm_operator.api.status import CanaryStatus, PlanRecord, PoolStatus, VLLMServiceStatus
from vllm_operator.kube.gateway import Kind, KubeGateway
from vllm_operator.reconcile.diff import needs_apply
from vllm_operator.reconcile.observed import PLAN_DEVIATION_THRESHOLD_PERCENT, observation_key
from vllm_operator.reconcile.placement_inputs import pool_room
from vllm_operator.reconcile.pools import PoolOutcome
from vllm_operator.remediation.canary import (
    FAILED,
    OBSERVING,
    CanaryInputs,
    CanaryPod,
    CanaryState,
    KvMeasurement,
    Verdict,
    canary_enabled,
    decide_canary,
)
from vllm_operator.remediation.overrides import effective_args
from vllm_operator.rendering.names import (
    ANNOTATION_PLAN_HASH,
    LABEL_SERVING,
    pool_selector_labels,
)

Obj = dict[str, Any]
log = logging.getLogger(__name__)

LABEL_CANARY = f"{ANNOTATION_PREFIX}/canary"
CANARY_SUFFIX = "-canary"
STARTUP_MARGIN_S = 60
"""Added to the pod's startup-probe budget before a canary that is not Ready counts as failed."""


@dataclass
class CanaryStep:
    """What the gate did for one pool; the controller reports it."""

    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    events: list[tuple[str, Reason, str]] = field(default_factory=list)
    requeue_after: float | None = None


def canary_name(workload_name: str) -> str:
    return workload_name + CANARY_SUFFIX


def _hash(obj: Obj | None) -> str | None:
    if obj is None:
        return None
    found = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PLAN_HASH)
    return str(found) if found else None


def _template_key(obj: Obj) -> str:
    return "leaderWorkerTemplate" if obj.get("kind") == "LeaderWorkerSet" else "template"


def _pod_templates(obj: Obj) -> list[Obj]:
    spec = obj["spec"]
    if obj.get("kind") == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        return [t for t in (lwt.get("leaderTemplate"), lwt.get("workerTemplate")) if t]
    return [spec["template"]]


def _main_container(obj: Obj) -> Obj:
    containers = _pod_templates(obj)[0]["spec"]["containers"]
    return dict(containers[0]) if containers else {}


def render_canary(desired: Obj) -> Obj:
    """The pool's rendered workload as a 1-replica canary with its own selector."""
    canary = copy.deepcopy(desired)
    meta = canary["metadata"]
    meta["name"] = canary_name(meta["name"])
    meta["labels"] = {**meta.get("labels", {}), LABEL_CANARY: "true"}
    canary["spec"]["replicas"] = 1
    if "selector" in canary["spec"]:
        match = canary["spec"]["selector"]["matchLabels"]
        canary["spec"]["selector"]["matchLabels"] = {**match, LABEL_CANARY: "true"}
    for template in _pod_templates(canary):
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**tmeta.get("labels", {}), LABEL_CANARY: "true"}
    return canary


def hold(desired: Obj, live: Obj, replicas_less: int = 0) -> Obj:
    """The rendered workload with the pod template (and plan-hash) of what runs now."""
    held = copy.deepcopy(desired)
    key = _template_key(desired)
    held["spec"][key] = copy.deepcopy(live["spec"][key])
    running = _hash(live)
    if running is not None:
        held["metadata"].setdefault("annotations", {})[ANNOTATION_PLAN_HASH] = running
    if replicas_less and "replicas" in held["spec"]:
        held["spec"]["replicas"] = max(0, int(held["spec"]["replicas"]) - replicas_less)
    return held


def _startup_budget(desired: Obj) -> int:
    probe = _main_container(desired).get("startupProbe") or {}
    period = int(probe.get("periodSeconds") or 10)
    return period * int(probe.get("failureThreshold") or 30) + STARTUP_MARGIN_S


def _restarts(pod: Obj) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(c.get("restartCount") or 0) for c in statuses)


def _canary_pod(pods: list[Obj], desired_hash: str | None = None) -> CanaryPod | None:
    """The canary's serving pod (a group's leader), newest first; its restarts count those of
    every pod of the canary running the tried plan (a multi-node group's workers too: the group
    is the unit). Pods going away, or of another plan (a canary whose plan changed while it
    ran), do not count."""
    current = [
        p
        for p in pods
        if not (p.get("metadata") or {}).get("deletionTimestamp")
        and ((p.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PLAN_HASH)
        in (None, desired_hash)
    ]
    serving = [
        p for p in current if ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_SERVING)
    ]
    if not serving:
        return None
    pod = max(serving, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
    status = pod.get("status") or {}
    ready: Obj = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"),
        {},
    )
    since = ready.get("lastTransitionTime")
    restarts = _restarts(pod)
    restarted: str | None = None
    for other in current:
        if other is not pod and _restarts(other) > 0:
            restarts += _restarts(other)
            restarted = restarted or str(other["metadata"]["name"])
    return CanaryPod(
        name=str(pod["metadata"]["name"]),
        uid=str(pod["metadata"]["uid"]) if pod["metadata"].get("uid") else None,
        ready=ready.get("status") == "True",
        ready_since=datetime.fromisoformat(str(since).replace("Z", "+00:00")) if since else None,
        restarts=restarts,
        restarted=restarted if _restarts(pod) == 0 else None,
    )


def _kv(
    service: VLLMService, pool: PoolOutcome, old: VLLMServiceStatus, planned: int | None
) -> KvMeasurement | None:
    """What the engines measured for the tried plan's configuration, against `planned`: the KV
    capacity the plan counted on when its canary started. Not against the memory model's
    prediction alone: a plan that already rests on a measurement of this configuration (a
    re-plan from the fleet, PlanDeviation True) promised the measured capacity, and the canary
    must only show that it holds."""
    if pool.plan is None:
        return None
    running = effective_args(pool.plan.planned_args(), old.overrides, pool.gpu_type).engine
    key = observation_key(service.spec, pool.gpu_type, running)
    obs = next((o for o in old.observations if o.key == key), None)
    if obs is None:
        return None
    if not planned:
        return KvMeasurement(
            measured_tokens=obs.kv_cache_tokens,
            predicted_tokens=obs.predicted_kv_cache_tokens,
            deviation_percent=obs.deviation_percent,
        )
    return KvMeasurement(
        measured_tokens=obs.kv_cache_tokens,
        predicted_tokens=planned,
        deviation_percent=round((obs.kv_cache_tokens - planned) / planned * 100.0, 1),
    )


def _plan_kv(pool: PoolOutcome) -> int | None:
    memory = pool.plan.memory if pool.plan is not None else None
    return memory.kv_cache_tokens if memory is not None else None


def _old_pool(old: VLLMServiceStatus, gpu_type: str) -> PoolStatus | None:
    return next((p for p in old.pools if p.gpu_type == gpu_type), None)


def surge_room(
    gw: KubeGateway,
    service: VLLMService,
    pool: PoolOutcome,
    live: Obj | None,
    nodes: list[Obj],
    canary_default: bool = False,
) -> int | None:
    """How many more pods of the pool the free GPUs of its type take now, read only when a canary
    could surge into them (canaries on, maxSurge > 0, a running Deployment pool whose plan
    changes); None otherwise or when the inventory cannot tell (DRA claims, LeaderWorkerSets:
    the spec's maxSurge decides alone)."""
    desired = pool.deployment
    rollout = service.spec.rollout
    if (
        desired is None
        or live is None
        or not canary_enabled(rollout.canary.enabled, canary_default)
        or rollout.max_surge == 0
        or desired.get("kind") != "Deployment"
        or pool.claim_template is not None
        or _hash(desired) == _hash(live)
    ):
        return None
    return pool_room(
        desired,
        pool.product or pool.gpu_type,
        nodes,
        gw.gpu_requests_by_node(),
        dict(service.spec.placement.node_selector),
    )


def _ready(live: Obj | None) -> int | None:
    """Ready pods (a LeaderWorkerSet: groups) of the running workload, as its status says."""
    if live is None or "status" not in live:
        return None
    return int((live.get("status") or {}).get("readyReplicas") or 0)


def _all_ready(live: Obj) -> bool:
    """Every replica of the running workload is Ready. When one is not, running one replica
    fewer removes that one (the ReplicaSet controller deletes not-Ready pods first:
    kubernetes pkg/controller/replicaset getPodsToDelete, ActivePodsWithRanks), so an in-place
    canary takes its place without taking a serving pod away."""
    ready = _ready(live)
    wanted = live["spec"].get("replicas")
    return ready is None or wanted is None or ready >= int(wanted)


def may_disrupt_one(gw: KubeGateway, service: VLLMService) -> bool:
    """Whether the service's PodDisruptionBudget allows one more pod down now.

    An in-place canary removes one running pod of the pool (the held workload runs one replica
    fewer); like a drain it must stay within the budget the eviction API enforces, so while a pod
    of the service is already down (disruptionsAllowed 0) it waits. A budget the disruption
    controller has not reported yet (no status) or that is missing does not block: the pool's own
    readiness then decides, as for a first rollout.
    """
    pdb = gw.get(Kind.PDB, service.namespace, service.name)
    if pdb is None:
        return True
    status = pdb.get("status") or {}
    if "disruptionsAllowed" not in status:
        return True
    return int(status["disruptionsAllowed"]) >= 1


def gate(
    gw: KubeGateway,
    service: VLLMService,
    pool: PoolOutcome,
    live: Obj | None,
    old: VLLMServiceStatus,
    now: datetime,
    room: int | None = None,
    canary_default: bool = False,
) -> CanaryStep:
    """Decide the pool's canary and carry it out; `pool.deployment` becomes what to apply.

    `room`: more pods of the pool the free GPUs of its type take now (None: unknown, the spec's
    maxSurge decides alone); 0 makes a starting canary take one pod's place. `canary_default`:
    the operator's cluster default for specs that leave `rollout.canary.enabled` out.
    """
    step = CanaryStep()
    desired = pool.deployment
    desired_hash = _hash(desired)
    if desired is None or desired_hash is None or pool.plan is None:
        return step
    namespace = service.namespace
    kind = Kind(desired["kind"])
    name = canary_name(desired["metadata"]["name"])
    before = _old_pool(old, pool.gpu_type)
    previous = before.canary if before is not None else None
    pods: list[Obj] = []
    if previous is not None and previous.phase == OBSERVING and previous.hash == desired_hash:
        selector = {**pool_selector_labels(service.name, pool.gpu_type), LABEL_CANARY: "true"}
        pods = gw.list_pods(namespace, selector)
    pod = _canary_pod(pods, desired_hash)
    failure = before.failure if before is not None else None
    diagnosis = (
        failure.message
        if failure is not None and pod is not None and failure.pod.startswith(name)
        else None
    )
    # What the plan counted on when its canary started (kept while the same plan is watched).
    planned_kv = (
        previous.planned_kv_cache_tokens
        if previous is not None and previous.hash == desired_hash
        else _plan_kv(pool)
    )
    metrics = find_condition(old.conditions, ConditionType.METRICS_AVAILABLE)
    rollout = service.spec.rollout
    spec_replicas = desired["spec"].get("replicas")
    decision = decide_canary(
        CanaryInputs(
            enabled=canary_enabled(rollout.canary.enabled, canary_default),
            observation_seconds=rollout.canary.observation_seconds,
            startup_budget_seconds=_startup_budget(desired),
            kv_threshold_percent=PLAN_DEVIATION_THRESHOLD_PERCENT,
            desired_hash=desired_hash,
            live_hash=_hash(live),
            live_ready=_ready(live),
            replicas=spec_replicas,
            previous=(
                CanaryState(
                    hash=previous.hash,
                    phase=previous.phase,
                    started_at=previous.started_at,
                    pod_uid=previous.pod_uid,
                )
                if previous is not None
                else None
            ),
            pod=pod,
            failure=diagnosis,
            group=kind is Kind.LEADER_WORKER_SET,
            kv=_kv(service, pool, old, planned_kv),
            metrics_available=metrics is not None and metrics.status == "True",
            now=now,
        )
    )
    pool.canary_decided = True
    verdict = decision.verdict
    step.requeue_after = decision.requeue_after
    existing = gw.get(kind, namespace, name)
    if verdict in (Verdict.START, Verdict.OBSERVE):
        # No spare GPUs (no surge, or none free for one): the canary takes one pod's place.
        if verdict is Verdict.START or previous is None:
            in_place = rollout.max_surge == 0 or (room is not None and room < 1)
        else:
            in_place = previous.in_place or rollout.max_surge == 0
        less = 1 if in_place and spec_replicas is not None else 0
        assert live is not None  # a canary only replaces a running plan
        if less and existing is None and _all_ready(live) and not may_disrupt_one(gw, service):
            # Taking a pod's place is a voluntary disruption: only within the service's PDB.
            pool.deployment = hold(desired, live)
            step.requeue_after = decision.requeue_after
            log.info(
                "Deferred canary: service=%s/%s pool=%s reason=%s",
                namespace,
                service.name,
                pool.gpu_type,
                "PodDisruptionBudget allows no disruption now",
            )
            return step
        canary = render_canary(desired)
        if needs_apply(canary, existing):
            gw.apply(canary)
            step.applied.append(f"{kind}/{name}")
        pool.deployment = hold(desired, live, less)
        container = _main_container(desired)
        started = now if verdict is Verdict.START or previous is None else previous.started_at
        seen = previous if verdict is Verdict.OBSERVE else None
        pool.canary = CanaryStatus(
            hash=desired_hash,
            image=str(container.get("image", "")),
            argv=[str(a) for a in container.get("args") or []],
            phase=OBSERVING,
            workload=name,
            started_at=started,
            pod=pod.name if pod is not None else seen.pod if seen is not None else None,
            # Kept while no pod is seen (a group being recreated): the next leader is compared.
            pod_uid=pod.uid if pod is not None else seen.pod_uid if seen is not None else None,
            message=decision.message,
            in_place=in_place,
            planned_kv_cache_tokens=planned_kv,
        )
        if verdict is Verdict.START:
            step.events.append(("Normal", Reason.CANARY_STARTED, decision.message))
        return step
    if existing is not None:
        gw.delete(kind, namespace, name)
        step.deleted.append(f"{kind}/{name}")
    if verdict is Verdict.ROLLBACK:
        assert live is not None and previous is not None
        pool.deployment = hold(desired, live)
        pool.canary = previous.model_copy(
            update={"phase": FAILED, "message": decision.message, "pod": previous.pod}
        )
        step.events.append(("Warning", Reason.CANARY_FAILED, decision.message))
    elif verdict is Verdict.HOLD:
        assert live is not None and previous is not None
        pool.deployment = hold(desired, live)
        pool.canary = previous
    else:
        pool.canary = None
        if verdict is Verdict.PROMOTE:
            step.events.append(("Normal", Reason.CANARY_PROMOTED, decision.message))
    return step


def last_good_plan(
    before: PoolStatus | None, live: Obj | None, healthy: bool, now: datetime
) -> PlanRecord | None:
    """The plan the pool's workload runs, once every replica ran it Ready without a failure."""
    kept = before.last_good_plan if before is not None else None
    running = _hash(live)
    if live is None or running is None or not healthy:
        return kept
    if kept is not None and kept.hash == running:
        return kept
    container = _main_container(live)
    return PlanRecord(
        hash=running,
        image=str(container.get("image", "")),
        argv=[str(a) for a in container.get("args") or []],
        when=now,
    )
