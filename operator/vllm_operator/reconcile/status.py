"""Derive a VLLMService's status from what one reconcile planned and observed (pure).

Why apart from the controller: status is the operator's API (Argo CD's health check, alerts and
users read it), so the rules that turn pools into conditions, ready counts, rollout state and the
plan summary are kept in one pure module, tested without a gateway. The controller only decides
*whether* to write the result (when it differs) and which Events the transitions deserve.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from vllm_operator.api.conditions import (
    Condition,
    ConditionStatus,
    ConditionType,
    find_condition,
    set_condition,
)
from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.api.spec import ScalingMode
from vllm_operator.api.status import PoolFailure, PoolPlan, PoolStatus, VLLMServiceStatus
from vllm_operator.reconcile.budgets import MeasuredBudgets
from vllm_operator.reconcile.canary import last_good_plan
from vllm_operator.reconcile.inventory import canonical_label
from vllm_operator.reconcile.observed import kept_observation
from vllm_operator.reconcile.pools import PoolOutcome
from vllm_operator.remediation.canary import FAILED, OBSERVING
from vllm_operator.rendering.names import ANNOTATION_PLAN_HASH, gpu_short_name, selector_labels

log = logging.getLogger(__name__)

ConditionUpdate = tuple[ConditionType, ConditionStatus, Reason, str]
_Verdict = tuple[ConditionStatus, Reason, str]


def parse_status(raw: Any) -> VLLMServiceStatus:
    """The status as read from the API; an unreadable one is treated as empty (and rewritten)."""
    if not isinstance(raw, dict):
        return VLLMServiceStatus()
    try:
        return VLLMServiceStatus.model_validate(raw)
    except ValidationError:
        log.warning("Ignored unreadable status; it will be rewritten")
        return VLLMServiceStatus()


def _generation(generation: Any) -> int | None:
    return generation if isinstance(generation, int) else None


def apply_conditions(
    old: list[Condition],
    updates: Iterable[ConditionUpdate],
    now: datetime,
    generation: Any,
) -> list[Condition]:
    """Set each condition (lastTransitionTime moves only when its status changes)."""
    conds = list(old)
    for type_, status, reason, message in updates:
        conds = set_condition(
            conds,
            type_=type_,
            status=status,
            reason=reason,
            message=message,
            now=now,
            observed_generation=_generation(generation),
        )
    return conds


def rejected_status(
    old: VLLMServiceStatus, reason: Reason, message: str, now: datetime, generation: Any
) -> VLLMServiceStatus:
    """Status for a spec the operator cannot act on: nothing is created or changed."""
    conds = apply_conditions(
        old.conditions,
        [
            (ConditionType.FEASIBLE, "False", reason, message),
            (ConditionType.PROGRESSING, "False", reason, "Waiting for a valid spec"),
            (ConditionType.DEGRADED, "True", reason, message),
        ],
        now,
        generation,
    )
    if find_condition(old.conditions, ConditionType.READY) is None:
        conds = apply_conditions(
            conds, [(ConditionType.READY, "False", reason, "Nothing is deployed")], now, generation
        )
    return old.model_copy(
        update={"observed_generation": _generation(generation), "conditions": conds}
    )


def failed_status(
    old: VLLMServiceStatus, reason: Reason, message: str, now: datetime, generation: Any
) -> VLLMServiceStatus:
    """Status for a reconcile that could not finish (an API refusal or an internal error).

    Degraded=True and Progressing=False carry the cause; the conditions name the generation they
    were computed from, but `observedGeneration` stays where the last complete reconcile left it:
    the operator has not acted on this generation yet and keeps retrying until it catches up
    (issue #20). Feasible, Ready and the pools keep their last observation, which still
    describes what runs.
    """
    conds = apply_conditions(
        old.conditions,
        [
            (ConditionType.DEGRADED, "True", reason, message),
            (
                ConditionType.PROGRESSING,
                "False",
                reason,
                "The reconcile failed; retrying with exponential backoff",
            ),
        ],
        now,
        generation,
    )
    return old.model_copy(update={"conditions": conds})


def ready_counts(pool: PoolOutcome) -> tuple[int, int]:
    """(desired, ready) replicas of the pool's live Deployment (groups of a LeaderWorkerSet: its
    controller counts a group ready when all of its pods are)."""
    live = pool.live or {}
    spec_replicas = int((live.get("spec") or {}).get("replicas") or 0)
    ready = int((live.get("status") or {}).get("readyReplicas") or 0)
    # Scaling down, the surplus pods still count as ready until they are gone: never "3/2".
    return spec_replicas, min(ready, spec_replicas)


def _nodes_note(pool: PoolOutcome) -> str:
    """` [N nodes]` for a multi-node pool (each replica a group of N pods on N nodes), else ''."""
    obj = pool.deployment or pool.live or {}
    if obj.get("kind") != "LeaderWorkerSet":
        return ""
    size = ((obj.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size") or 1
    return f" [{size} nodes]"


def workload_kind(pool: PoolOutcome) -> str:
    """Deployment, or LeaderWorkerSet for a multi-node pool (for messages)."""
    obj = pool.deployment or pool.live or {}
    return str(obj.get("kind") or "Deployment")


def replica_failure(pool: PoolOutcome) -> str:
    """Why the pool's Deployment cannot make pods, as the Deployment controller says it.

    The Deployment controller copies its ReplicaSets' `ReplicaFailure` condition (reason
    FailedCreate: quota, Pod Security, a webhook) onto the Deployment and sets
    `Progressing=False ProgressDeadlineExceeded` when a rollout stalls; both are quoted so that
    the cause is in the service's status, not only in the ReplicaSet's Events.
    """
    found = []
    for cond in ((pool.live or {}).get("status") or {}).get("conditions") or []:
        if not isinstance(cond, dict):
            continue
        type_, status, reason = cond.get("type"), cond.get("status"), cond.get("reason")
        if (type_ == "ReplicaFailure" and status == "True") or (
            type_ == "Progressing" and status == "False" and reason == "ProgressDeadlineExceeded"
        ):
            found.append(f"{type_} {reason or 'Unknown'}: {cond.get('message') or ''}".rstrip(": "))
    return "; ".join(found)


def starved(pool: PoolOutcome) -> bool:
    """The pool's Deployment wants replicas, none is ready and no node can take a pod now."""
    desired, ready = ready_counts(pool)
    return desired > 0 and ready == 0 and not pool.has_capacity


def _kept_plan(old: list[PoolStatus], pool: PoolOutcome) -> PoolPlan | None:
    """The plan its live Deployment still runs when the pool cannot be planned now (no nodes)."""
    if pool.plan is not None or pool.live is None:
        return pool.plan
    running = ((pool.live.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PLAN_HASH)
    before = next((p for p in old if p.gpu_type == pool.gpu_type), None)
    if before is not None and before.plan is not None and before.plan.hash == running:
        return before.plan
    return None


def rollout_done(pool: PoolOutcome, external: bool = False) -> bool:
    """The Deployment controller has observed the current generation and fully rolled it out.

    A LeaderWorkerSet (multi-node pool) reports no observedGeneration: its rollout is done when
    its controller no longer reports UpdateInProgress and every group is updated and ready (the
    counts are groups).

    With `external` (scaling.mode external) the replica count is the autoscaler's, and a replica
    change is not a rollout (#32: every autoscaler step flipped Progressing and sent two Events).
    A rollout is then pods of an older template still running (updated < current replicas), or a
    pool with no ready replica yet; pods being added or removed by a scale are not.
    """
    live = pool.live or {}
    meta, status = live.get("metadata") or {}, live.get("status") or {}
    desired = int((live.get("spec") or {}).get("replicas") or 0)
    if live.get("kind") == "LeaderWorkerSet":
        observed = not any(
            isinstance(c, dict)
            and c.get("type") == "UpdateInProgress"
            and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
    else:
        observed = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
    if external:
        # A generation not yet observed may be the autoscaler's scale: judged by what runs.
        running = int(status.get("replicas") or 0)
        return (
            (observed or live.get("kind") != "LeaderWorkerSet")
            and int(status.get("updatedReplicas") or 0) >= running
            and (desired == 0 or int(status.get("readyReplicas") or 0) > 0)
        )
    return (
        observed
        and int(status.get("updatedReplicas") or 0) >= desired
        and int(status.get("readyReplicas") or 0) >= desired
        and int(status.get("replicas") or 0) <= desired
    )


def kept_failure(old: list[PoolStatus], gpu_type: str) -> PoolFailure | None:
    """The pool's failure as the run-time evaluation left it (only it sets and clears one)."""
    return next((p.failure for p in old if p.gpu_type == gpu_type), None)


def budget_note(service: VLLMService, budgets: MeasuredBudgets) -> str:
    """A stable note for the Feasible condition: ignored probe budgets of GPU types it allows."""
    allowed = {canonical_label(g) for g in service.spec.placement.gpu_types}
    hit = sorted(
        f"{node} ({ignored.rejection.problem})"
        for node, ignored in budgets.ignored.items()
        if canonical_label(ignored.product) in allowed
    )
    if not hit:
        return ""
    return "; probe budget ignored on " + ", ".join(hit) + ", planned from node labels"


def plan_summary(service: VLLMService, planned: list[PoolOutcome]) -> str:
    """What the planned pools serve, for the Feasible message."""
    w = service.spec.workload
    return (
        f"{len(planned)} pool(s) serve {w.concurrency} x {w.p99_context_tokens} tokens: "
        + ", ".join(p.summary for p in planned)
    )


_ARGS_REASONS = frozenset(
    {Reason.INVALID_ENGINE_CONFIG, Reason.UNSUPPORTED_ENGINE_ARGS, Reason.INVALID_EXTRA_ARGS}
)


def _infeasible_reason(pools: list[PoolOutcome]) -> Reason:
    """Infeasible, or the arguments' own reason when every pool fails on its arguments."""
    reasons = {p.reason for p in pools}
    if len(reasons) == 1 and (only := next(iter(reasons))) in _ARGS_REASONS:
        return only
    return Reason.INFEASIBLE


def _join(pools: list[PoolOutcome]) -> str:
    return "; ".join(f"{p.gpu_type}: {p.message}" for p in pools)


def _starved_message(pool: PoolOutcome) -> str:
    desired, _ = ready_counts(pool)
    return (
        f"{pool.gpu_type}: {workload_kind(pool)} {pool.deployment_name} wants {desired} "
        "replica(s), "
        f"no ready replicas and no schedulable nodes ({pool.unavailable})"
    )


def service_status(
    service: VLLMService,
    old: VLLMServiceStatus,
    pools: list[PoolOutcome],
    now: datetime,
    generation: Any,
    note: str = "",
) -> VLLMServiceStatus:
    """Conditions Feasible / Progressing / Ready / Degraded, pools and summaries of one reconcile.

    Remediation's conditions and the overrides/history are carried over from `old` unchanged;
    so is each pool's failure (set and cleared by the run-time evaluation), which makes Degraded
    True with the failure's reason (a crash class or StartupStalled) while it stands.
    """
    pool_status: list[PoolStatus] = []
    desired_total = ready_total = 0
    failures: dict[str, str] = {}
    for pool in pools:
        replicas, ready = ready_counts(pool)
        desired_total += replicas
        ready_total += ready
        failure = replica_failure(pool)
        if failure:
            failures[pool.gpu_type] = (
                f"{pool.gpu_type}: {workload_kind(pool)} {pool.deployment_name} {failure}"
            )
        plan = _kept_plan(old.pools, pool)
        before = next((p for p in old.pools if p.gpu_type == pool.gpu_type), None)
        pool_status.append(
            PoolStatus(
                gpu_type=pool.gpu_type,
                deployment=pool.deployment_name,
                replicas=replicas,
                ready_replicas=ready,
                feasible=pool.feasible,
                plan=plan,
                message="; ".join(m for m in (pool.message, failure) if m) or None,
                observed=kept_observation(old.pools, pool.gpu_type, plan),
                failure=kept_failure(old.pools, pool.gpu_type),
                last_good_plan=last_good_plan(
                    before,
                    pool.live,
                    rollout_done(pool)
                    and ready > 0
                    and kept_failure(old.pools, pool.gpu_type) is None,
                    now,
                ),
                canary=pool.canary if pool.canary_decided else (before.canary if before else None),
            )
        )
    planned = [p for p in pools if p.feasible and p.deployment is not None]
    # With scaling.mode external the replica counts above are the live Deployments' (what the
    # autoscaler set), never spec.replicas.
    external = service.spec.scaling.mode == ScalingMode.EXTERNAL
    infeasible = [p for p in pools if not p.feasible]
    no_nodes = [p for p in pools if p.reason == Reason.NO_MATCHING_NODES]
    rolling = [p for p in planned if not rollout_done(p, external)]

    feasible: _Verdict
    progressing: _Verdict
    ready_cond: _Verdict
    degraded: _Verdict
    # Feasibility is judged on the GPU types' hardware (cordoned / NotReady nodes are planned);
    # availability (schedulable nodes now) only ever shows in Progressing, Ready and Degraded.
    overridden = [p for p in planned if p.plan_note]
    if planned and not infeasible and overridden:
        # The user's overrides replaced the plan; it is rendered as asked, but the figures no
        # longer promise the target (#19).
        notes = "; ".join(f"{p.gpu_type}: {p.plan_note}" for p in overridden)
        feasible = (
            "True",
            Reason.PLAN_OVERRIDDEN,
            plan_summary(service, planned) + "; " + notes + note,
        )
    elif planned and not infeasible:
        feasible = ("True", Reason.ALL_POOLS_PLANNED, plan_summary(service, planned) + note)
    elif planned:
        feasible = (
            "True",
            Reason.SOME_POOLS_INFEASIBLE,
            plan_summary(service, planned) + "; " + _join(infeasible) + note,
        )
    elif infeasible:
        feasible = ("False", _infeasible_reason(infeasible), _join(infeasible) + note)
    else:
        feasible = ("True", Reason.AWAITING_NODES, "No allowed GPU type has nodes yet")

    trying = [p for p in pool_status if p.canary is not None and p.canary.phase == OBSERVING]
    failed_canaries = [p for p in pool_status if p.canary is not None and p.canary.phase == FAILED]
    if not planned and no_nodes:
        progressing = ("False", Reason.NO_MATCHING_NODES, _join(no_nodes))
    elif trying:
        progressing = (
            "True",
            Reason.CANARY_OBSERVING,
            "; ".join(f"{p.gpu_type}: {p.canary.message}" for p in trying if p.canary),
        )
    elif rolling and not any(p.has_capacity for p in rolling):
        # Nothing can progress until a node of the type is uncordoned or Ready again.
        progressing = ("False", Reason.NO_MATCHING_NODES, _join(rolling))
    elif rolling:
        progressing = (
            "True",
            Reason.ROLLING_OUT,
            "; ".join(
                [f"{ready_total}/{desired_total} replicas ready on the current plan"]
                + [failures[p.gpu_type] for p in rolling if p.gpu_type in failures]
            ),
        )
    elif planned:
        progressing = ("False", Reason.ROLLOUT_COMPLETE, "Every pool runs its current plan")
    else:
        progressing = ("False", Reason.INFEASIBLE, "No pool can be planned")

    if desired_total > 0 and ready_total >= desired_total and planned:
        ready_cond = (
            "True",
            Reason.ALL_POOLS_READY,
            f"{ready_total}/{desired_total} replicas ready",
        )
    elif service.spec.replicas == 0 and planned and not external:
        ready_cond = ("True", Reason.SCALED_TO_ZERO, "spec.replicas is 0")
    elif external and planned and desired_total == 0:
        # An autoscaler (KEDA's minReplicaCount 0) parked every pool: idle on purpose.
        ready_cond = ("True", Reason.SCALED_TO_ZERO, "the autoscaler scaled every pool to 0")
    else:
        ready_cond = (
            "False",
            Reason.PODS_NOT_READY,
            f"{ready_total}/{desired_total} replicas ready",
        )

    unavailable = {id(p) for p in infeasible + (no_nodes if planned else [])}
    problems = list(failures.values()) + [
        _starved_message(p) if starved(p) else f"{p.gpu_type}: {p.message}"
        for p in pools
        if id(p) in unavailable or starved(p)
    ]
    crashes = [p.failure for p in pool_status if p.failure is not None]
    problems += [c.message for c in crashes]
    if failed_canaries:
        # The pool serves its last good plan; the message names the failed plan and why.
        degraded = (
            "True",
            Reason.CANARY_FAILED,
            "; ".join(
                [f"{p.gpu_type}: {p.canary.message}" for p in failed_canaries if p.canary]
                + problems
            ),
        )
    elif failures:
        degraded = ("True", Reason.REPLICA_FAILURE, "; ".join(problems))
    elif crashes:
        # The pods' own failure is the most specific cause (a crash class or a stalled start).
        degraded = ("True", Reason(crashes[0].reason), "; ".join(problems))
    elif problems:
        degraded = ("True", Reason.POOLS_UNAVAILABLE, "; ".join(problems))
    else:
        degraded = ("False", Reason.AS_EXPECTED, "")
    conds = apply_conditions(
        old.conditions,
        [
            (ConditionType.FEASIBLE, *feasible),
            (ConditionType.PROGRESSING, *progressing),
            (ConditionType.READY, *ready_cond),
            (ConditionType.DEGRADED, *degraded),
        ],
        now,
        generation,
    )
    summary = ",".join(
        f"{gpu_short_name(p.product or p.gpu_type).upper()}x{ready_counts(p)[0]}{_nodes_note(p)}"
        for p in pools
        if (p.feasible and p.deployment is not None) or p.live is not None
    )
    return old.model_copy(
        update={
            "observed_generation": _generation(generation),
            "conditions": conds,
            "pools": pool_status,
            "gpu_pools": summary or None,
            "ready": f"{ready_total}/{desired_total}",
            "plans": plans_summary(pools, pool_status),
            "replicas": max((ready_counts(p)[0] for p in pools), default=0),
            "selector": ",".join(f"{k}={v}" for k, v in selector_labels(service.name).items()),
        }
    )


def plans_summary(pools: list[PoolOutcome], pool_status: list[PoolStatus]) -> str | None:
    """status.plans: per pool the plan its pods run, the one tried on a canary or that failed,
    and the last good one when it is not what runs (#27: which plan runs, is tried, was good)."""
    parts: list[str] = []
    for pool, entry in zip(pools, pool_status, strict=True):
        running = (
            ((pool.live or {}).get("metadata") or {})
            .get("annotations", {})
            .get(ANNOTATION_PLAN_HASH)
        )
        if not running:
            continue
        text = f"{gpu_short_name(pool.product or pool.gpu_type).upper()} runs {running[:8]}"
        canary = entry.canary
        if canary is not None and canary.phase == OBSERVING:
            text += f", trying {canary.hash[:8]}"
        elif canary is not None and canary.phase == FAILED:
            text += f", {canary.hash[:8]} failed"
        good = entry.last_good_plan
        if good is not None and good.hash != running:
            text += f", last good {good.hash[:8]}"
        parts.append(text)
    return "; ".join(parts) or None


def name_conflict_status(
    status: VLLMServiceStatus, conflicts: list[str], now: datetime, generation: Any
) -> VLLMServiceStatus:
    """Degraded=True NameConflict when objects with derived names belong to someone else.

    The operator never modifies or adopts such an object (issue #20): the user renames the
    service or removes the object; the condition says which.
    """
    if not conflicts:
        return status
    message = (
        "; ".join(conflicts)
        + " exist(s) and are not owned by this VLLMService: left untouched; delete or rename"
        " them, or rename the VLLMService"
    )
    conds = apply_conditions(
        status.conditions,
        [(ConditionType.DEGRADED, "True", Reason.NAME_CONFLICT, message)],
        now,
        generation,
    )
    return status.model_copy(update={"conditions": conds})


def transition_events(
    old: VLLMServiceStatus, new: VLLMServiceStatus
) -> list[tuple[str, Reason, str]]:
    """(type, reason, message) of the Events a status change deserves: one per decision.

    Only Feasible and Progressing transitions are announced (the others follow from them or are
    remediation's own Events); a new status or reason is a decision, a new message alone is
    progress and gets none. A first condition is announced only when it is a warning.
    """
    events: list[tuple[str, Reason, str]] = []
    for cond in new.conditions:
        if cond.type not in (ConditionType.FEASIBLE, ConditionType.PROGRESSING):
            continue
        before = find_condition(old.conditions, cond.type)
        if before is not None and (before.status, before.reason) == (cond.status, cond.reason):
            continue
        warning = (cond.type == ConditionType.FEASIBLE and cond.status == "False") or (
            cond.reason in (Reason.NO_MATCHING_NODES, Reason.PLAN_OVERRIDDEN)
        )
        if before is None and not warning:
            continue
        events.append(("Warning" if warning else "Normal", Reason(cond.reason), cond.message))
    return events


__all__ = [
    "apply_conditions",
    "budget_note",
    "failed_status",
    "kept_failure",
    "name_conflict_status",
    "parse_status",
    "plan_summary",
    "ready_counts",
    "rejected_status",
    "replica_failure",
    "rollout_done",
    "service_status",
    "starved",
    "transition_events",
]
