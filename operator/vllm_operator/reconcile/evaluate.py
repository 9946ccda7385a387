"""The run-time half of the controller: observe a running service, let the policy decide, act.

Called by the controller's remediation scheduler, once per evaluation interval of each service. It gathers pod status (OOMKilled, restarts, CrashLoopBackOff,
the crashed container's last log lines) and Prometheus signals, asks the pure remediation policy
for a decision, and applies it: overrides and history go to status (never to spec), Events explain
each step, creeping pods are drained from the Service and then evicted through the Eviction API
once idle, and a changed override re-renders the pool through the normal reconcile.

It also keeps each pool's failure (remediation.health: a crash of any class, or a startup past its
budget) in status.pools[].failure until the pool runs clean; the reconcile folds it into Degraded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from vllm_operator.api import VLLMService, set_condition
from vllm_operator.api.conditions import Condition, ConditionType, find_condition
from vllm_operator.api.reasons import Reason
from vllm_operator.api.status import Observation, PoolPlan, PoolStatus, VLLMServiceStatus
from vllm_operator.kube.gateway import Kind, KubeGateway, Obj
from vllm_operator.metrics import operator_metrics as m
from vllm_operator.metrics.signals import MetricsRequest, ServiceMetrics
from vllm_operator.reconcile.observed import (
    measured_observation,
    observed_capacity,
    plan_deviation,
    record_observation,
)
from vllm_operator.reconcile.reporting import status_changes
from vllm_operator.reconcile.writes import CountingGateway, service_event
from vllm_operator.remediation import (
    Observations,
    PoolObservation,
    decide,
    fold_groups,
    observe_pod,
)
from vllm_operator.remediation.diagnosis import parse_time
from vllm_operator.remediation.health import StartupBudget, pool_failure, startup_budget
from vllm_operator.rendering import workload
from vllm_operator.rendering.names import (
    ANNOTATION_DRAINING_SINCE,
    ANNOTATION_PLAN_HASH,
    LABEL_SERVING,
    pool_selector_labels,
)

log = logging.getLogger(__name__)

CONTAINER = "vllm"
LOG_TAIL_LINES = 100
DRAIN_TIMEOUT = timedelta(seconds=60)
"""The longest a drained pod waits for its running requests to finish before it is evicted."""
# The scheduler (reconcile/scheduler.py) decides the cadence; the evaluator's own gate only stops
# evaluations that come much earlier than the interval. The slack absorbs the difference between
# the scheduler's monotonic clock and this clock, which drops sub-second parts.
GATE_SLACK = timedelta(seconds=2)
FULL_EVALUATION_EVERY = timedelta(minutes=10)
"""The longest a calm service whose inputs did not change goes without a full evaluation: a
backstop only (such an evaluation is shown below to change nothing), like a controller's resync
period."""

Versions = tuple[tuple[str, int], ...]
"""(name, resourceVersion) pairs, sorted by name: what a read would return, compared unread."""


@dataclass(frozen=True)
class _Calm:
    """A full evaluation that found the service calm (`_is_calm`): what it read, and when."""

    service: Versions
    pods: tuple[tuple[dict[str, str], Versions], ...]
    """Each pool's pod selector and the pods it selected."""
    at: datetime


class MetricsSource(Protocol):
    """What the evaluator needs from Prometheus (metrics.signals.PrometheusSignals)."""

    def observe(
        self, *, namespace: str, pods: Any, vllm_version: str, window_s: int, now: datetime
    ) -> ServiceMetrics: ...


@runtime_checkable
class BatchMetricsSource(Protocol):
    """A MetricsSource that answers many services at once (PrometheusSignals.observe_many)."""

    def observe_many(
        self, requests: list[MetricsRequest], now: datetime
    ) -> list[ServiceMetrics]: ...


class Evaluator:
    """Observe-decide-act for one service at a time (the controller serialises per service)."""

    def __init__(
        self,
        gateway: KubeGateway,
        metrics: MetricsSource | None,
        clock: Callable[[], datetime],
    ) -> None:
        # Writes are counted by the wrapper (the controller passes its own, already wrapped).
        self.gw = gateway if isinstance(gateway, CountingGateway) else CountingGateway(gateway)
        self.metrics = metrics
        self.clock = clock
        self._last: dict[tuple[str, str], datetime] = {}
        # A tick's metrics, fetched in one batch by `prefetch`: key -> (pods asked for, answer).
        self._prefetched: dict[tuple[str, str], tuple[tuple[str, ...], ServiceMetrics]] = {}
        # Services whose last full evaluation found them calm, with what it read (#32: an idle
        # evaluation of 1000 services was most of the steady CPU). The worker holding a key is
        # the only one touching its entry.
        self._calm: dict[tuple[str, str], _Calm] = {}

    @property
    def batches(self) -> bool:
        """Whether `prefetch` can fetch anything (a batching metrics source is configured)."""
        # The None test first: a Protocol isinstance check costs ~40 us, paid per evaluation.
        return self.metrics is not None and isinstance(self.metrics, BatchMetricsSource)

    def prefetch(self, bodies: list[Obj]) -> None:
        """Fetch the metrics of every service about to be evaluated with one query per signal.

        The scheduler calls this with the services due in a tick; each `evaluate` then takes its
        share, provided its pods are still the ones asked for (otherwise it queries alone).
        """
        self._prefetched = {}
        if not isinstance(self.metrics, BatchMetricsSource):
            return
        now = self.clock()
        requests: list[tuple[tuple[str, str], MetricsRequest]] = []
        for body in bodies:
            subject = self._subject(body, now)
            if subject is None:
                continue
            service, _, plans = subject
            pods = tuple(sorted(_pod_names(self._pods_by_pool(service, plans))))
            request = MetricsRequest(
                namespace=service.namespace,
                pods=pods,
                vllm_version=service.spec.vllm.version,
                window_s=service.spec.remediation.window_seconds,
            )
            requests.append(((service.namespace, service.name), request))
        if not requests:
            return
        answers = self.metrics.observe_many([r for _, r in requests], now)
        self._prefetched = {
            key: (request.pods, answer)
            for (key, request), answer in zip(requests, answers, strict=True)
        }

    def forget(self, key: tuple[str, str]) -> None:
        """The service is gone: drop what this evaluator remembers of it."""
        self._last.pop(key, None)
        self._prefetched.pop(key, None)
        self._calm.pop(key, None)

    def unchanged(self, key: tuple[str, str]) -> bool:
        """Whether an evaluation of `key` now would repeat the last one, which changed nothing:
        that one found the service calm, and the service and each pool's pods are, by
        resourceVersion, what it read (the watch cache answers without decoding them); then the
        evaluation is skipped. At most FULL_EVALUATION_EVERY after the last full evaluation, and
        whenever anything cannot be compared (no watch cache, an expired entry), it runs in full.

        Why a skipped evaluation is the full one's result: with no metrics source, an
        evaluation's inputs are the service object, its pods (and the crashed containers' logs,
        read only for terminations), and the clock. A calm service has no overrides (no restore
        can come due), no pool failure, no draining pod (no drain timeout), no pod running
        without being Ready (no startup stall can come due), none in CrashLoopBackOff and no
        termination newer than windowSeconds (none can become a crash), and the evaluation
        wrote, emitted and evicted nothing: the same inputs at a later time decide the same.
        Any change of a pod (a restart, readiness, an OOM kill) or of the service (spec, status,
        its plans) changes a resourceVersion, so the next evaluation runs in full, at the same
        interval as before."""
        calm = self._calm.get(key)
        if calm is None or self.metrics is not None:
            return False
        if self.clock() - calm.at >= FULL_EVALUATION_EVERY:
            return False
        namespace, name = key
        if self.gw.versions(Kind.VLLM_SERVICE, namespace, name=name) != calm.service:
            return False
        return all(
            self.gw.versions(Kind.POD, namespace, selector=selector) == pods
            for selector, pods in calm.pods
        )

    def end_tick(self) -> None:
        """Drop what a tick prefetched: a later evaluation must not see old metrics."""
        self._prefetched = {}

    def _subject(
        self, body: Obj, now: datetime
    ) -> tuple[VLLMService, VLLMServiceStatus, dict[str, PoolPlan]] | None:
        """The service, its status and its feasible plans when an evaluation is due; else None."""
        try:
            service = VLLMService.model_validate(body)
        except ValidationError:
            return None  # the reconcile reports invalid specs
        if not self._gate_open(service, now):
            return None
        status = _status(body)
        plans = {p.gpu_type: p.plan for p in status.pools if p.plan is not None and p.feasible}
        return (service, status, plans) if plans else None

    def _gate_open(self, service: VLLMService, now: datetime) -> bool:
        last = self._last.get((service.namespace, service.name))
        interval = timedelta(seconds=service.spec.remediation.evaluation_interval_seconds)
        return last is None or now - last >= interval - GATE_SLACK

    def _pods_by_pool(
        self, service: VLLMService, plans: dict[str, PoolPlan]
    ) -> dict[str, list[Obj]]:
        return {
            pool: self.gw.list_pods(service.namespace, pool_selector_labels(service.name, pool))
            for pool in plans
        }

    def evaluate(self, body: Obj) -> bool:
        """One evaluation; True when the reconcile must run: overrides changed (re-render the
        pools) or a pool's failure changed (re-derive Degraded)."""
        try:
            service = VLLMService.model_validate(body)
        except ValidationError:
            return False  # the reconcile reports invalid specs
        spec = service.spec
        # Mode off takes no step (decide() returns none), but the pods are still observed:
        # Degraded must say that a pool crashes whatever the remediation mode (#13).
        key = (service.namespace, service.name)
        now = self.clock()
        if not self._gate_open(service, now):
            return False
        self._last[key] = now
        self._calm.pop(key, None)
        status = _status(body)
        plans = {p.gpu_type: p.plan for p in status.pools if p.plan is not None and p.feasible}
        if not plans:
            # Nothing to observe until the service's status gains a feasible plan.
            self._remember_calm(key, body, {}, now)
            return False

        pods_by_pool = self._pods_by_pool(service, plans)
        read = {pool: list(pods) for pool, pods in pods_by_pool.items()}  # before any eviction
        names = _pod_names(pods_by_pool)
        metrics = self._metrics(service, names, now)
        self._finish_drains(service, pods_by_pool, metrics, now)
        # Under placement.strategy Preferred a scale-out grows the total, placed on the most
        # preferred type with room (reconcile/placement.py): each pool sees the total.
        total = (
            status.placement.total
            if status.placement is not None and service.spec.placement.strategy == "Preferred"
            else None
        )
        observations = Observations(
            metrics_available=metrics.available,
            metrics_message=metrics.message,
            metrics_unavailable_reason=metrics.reason,
            pools=[
                PoolObservation(
                    pool=pool,
                    replicas=total
                    if total is not None
                    else next((p.replicas for p in status.pools if p.gpu_type == pool), 0),
                    # A multi-node replica (LeaderWorkerSet group) is observed as one pod.
                    pods=[
                        observe_pod(
                            pod,
                            previous_log=self._previous_log(service, status, pool, crashed),
                            metrics=metrics.pods.get(pod["metadata"]["name"]),
                        )
                        for pod, crashed in fold_groups(pods)
                    ],
                )
                for pool, pods in pods_by_pool.items()
            ],
        )
        decision = decide(observations, spec, status.overrides, status.history, plans, now)
        generation = (body.get("metadata") or {}).get("generation")
        conditions = list(status.conditions)
        for update in decision.conditions:
            if update.type == ConditionType.DEGRADED:
                continue  # the reconcile owns Degraded and folds pools[].failure into it
            conditions = set_condition(
                conditions,
                type_=update.type,
                status=update.status,
                reason=update.reason,
                message=update.message,
                now=now,
                observed_generation=generation if isinstance(generation, int) else None,
            )
        by_pool = {p.pool: p for p in observations.pools}
        window = timedelta(seconds=spec.remediation.window_seconds)
        pools = [
            pool.model_copy(
                update={
                    "observed": observed_capacity(
                        pool.plan,
                        _capacities(
                            metrics,
                            [p for p, _ in fold_groups(pods_by_pool.get(pool.gpu_type, []))],
                        ),
                    )
                    or pool.observed,
                    "failure": pool_failure(
                        by_pool[pool.gpu_type],
                        pool.failure,
                        now,
                        window=window,
                        budget=_startup_budget(plans[pool.gpu_type]),
                    )
                    if pool.gpu_type in by_pool
                    else pool.failure,
                }
            )
            for pool in status.pools
        ]
        learned, conditions, deviated = self._learn(
            service, status, pools, pods_by_pool, metrics, conditions, now, generation
        )
        new_status = status.model_copy(
            update={
                "pools": pools,
                "overrides": list(decision.overrides),
                "history": list(decision.history),
                "conditions": conditions,
                "observations": learned,
            }
        )
        if new_status != status:
            self.gw.apply_status(service.namespace, service.name, new_status.to_wire())
            log.info(
                "Wrote evaluation status service=%s/%s status=%s",
                service.namespace,
                service.name,
                ",".join(status_changes(status, new_status)),
            )
        for event in decision.events:
            self.gw.emit_event(service_event(service, event.type, event.reason, event.message))
        if deviated is not None:
            self.gw.emit_event(service_event(service, "Warning", deviated[0], deviated[1]))
        failures_changed = False
        for old, new in zip(status.pools, pools, strict=True):
            before, after = old.failure, new.failure
            if before != after:
                failures_changed = True
            if after is not None and (
                before is None or (before.reason, before.pod) != (after.reason, after.pod)
            ):
                self.gw.emit_event(
                    service_event(service, "Warning", Reason(after.reason), after.message)
                )
            elif after is None and before is not None:
                log.info(
                    "Cleared failure service=%s/%s pool=%s reason=%s",
                    service.namespace,
                    service.name,
                    old.gpu_type,
                    before.reason,
                )
        for action in decision.actions:
            m.REMEDIATIONS.labels(action.kind.value, decision.mode.value).inc()
        for pod in decision.evictions:
            self._start_drain(service, pod, now)
        # A new measurement re-plans the pools from it (the reconcile reads status.observations).
        changed = (
            failures_changed
            or list(new_status.overrides) != list(status.overrides)
            or learned != list(status.observations)
        )
        if (
            not changed
            and new_status == status
            and not decision.events
            and not decision.actions
            and deviated is None
            and _is_calm(new_status, observations, read, now, window)
        ):
            self._remember_calm(key, body, read, now)
        return changed

    # ------------------------------------------------------------------------------- helpers

    def _remember_calm(
        self, key: tuple[str, str], body: Obj, pods_by_pool: dict[str, list[Obj]], now: datetime
    ) -> None:
        """Keep what a calm evaluation read (without a metrics source only: metrics change
        without any object changing, so every evaluation with one queries them)."""
        if self.metrics is not None:
            return
        service = _versions([body])
        pods = []
        for pool, found in sorted(pods_by_pool.items()):
            versions = _versions(found)
            if versions is None:
                return
            pods.append((pool_selector_labels(key[1], pool), versions))
        if service is not None:
            self._calm[key] = _Calm(service=service, pods=tuple(pods), at=now)

    def _learn(
        self,
        service: VLLMService,
        status: VLLMServiceStatus,
        pools: list[PoolStatus],
        pods_by_pool: dict[str, list[Obj]],
        metrics: ServiceMetrics,
        conditions: list[Condition],
        now: datetime,
        generation: Any,
    ) -> tuple[list[Observation], list[Condition], tuple[Reason, str] | None]:
        """Record what the engines of each pool's current plan measured (status.observations)
        and derive PlanDeviation; the Warning to emit when it turns True (or changes reason).

        Only pods of the current plan (their plan-hash) count: during a rollout the old pods
        measured the old configuration.
        """
        observations = list(status.observations)
        for pool in pools:
            if pool.plan is None or not pool.feasible or pool.plan.hash is None:
                continue
            current = [
                p
                for p in pods_by_pool.get(pool.gpu_type, [])
                if ((p.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PLAN_HASH)
                == pool.plan.hash
            ]
            found = measured_observation(
                service.spec, pool, status.overrides, _capacities(metrics, current), now
            )
            if found is not None:
                observations = record_observation(observations, found)
        verdict = plan_deviation(service.spec, pools, status.overrides, observations)
        if verdict is None:
            return observations, conditions, None
        state, reason, message = verdict
        before = find_condition(conditions, ConditionType.PLAN_DEVIATION)
        conditions = set_condition(
            conditions,
            type_=ConditionType.PLAN_DEVIATION,
            status=state,
            reason=reason,
            message=message,
            now=now,
            observed_generation=generation if isinstance(generation, int) else None,
        )
        turned = state == "True" and (
            before is None or (before.status, before.reason) != (state, reason)
        )
        if before is None or (before.status, before.reason) != (state, reason):
            log.info(
                "Set PlanDeviation=%s service=%s/%s reason=%s",
                state,
                service.namespace,
                service.name,
                reason,
            )
        return observations, conditions, (reason, message) if turned else None

    def _metrics(self, service: VLLMService, pods: list[str], now: datetime) -> ServiceMetrics:
        if self.metrics is None:
            return ServiceMetrics(
                available=False, message="no Prometheus configured (--prometheus-url)"
            )
        fetched = self._prefetched.pop((service.namespace, service.name), None)
        if fetched is not None and fetched[0] == tuple(sorted(pods)):
            return fetched[1]
        return self.metrics.observe(
            namespace=service.namespace,
            pods=pods,
            vllm_version=service.spec.vllm.version,
            window_s=service.spec.remediation.window_seconds,
            now=now,
        )

    def _previous_log(
        self, service: VLLMService, status: VLLMServiceStatus, pool: str, pod: Obj
    ) -> str | None:
        """The crashed container's last lines, read only for a termination not yet acted on."""
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        mine = next((s for s in statuses if s.get("name") == CONTAINER), None)
        terminated = ((mine or {}).get("lastState") or {}).get("terminated") or {}
        finished = parse_time(terminated.get("finishedAt"))
        if finished is None:
            return None
        last_step = max((h.time for h in status.history if h.pool == pool), default=None)
        if last_step is not None and finished <= last_step:
            return None
        return self.gw.read_pod_log(
            service.namespace,
            pod["metadata"]["name"],
            CONTAINER,
            previous=True,
            tail_lines=LOG_TAIL_LINES,
        )

    def _start_drain(self, service: VLLMService, pod: str, now: datetime) -> None:
        """Take the pod out of the Service; it is evicted once idle or after DRAIN_TIMEOUT."""
        self.gw.patch_pod_metadata(
            service.namespace,
            pod,
            labels={LABEL_SERVING: "false"},
            annotations={ANNOTATION_DRAINING_SINCE: now.isoformat()},
        )
        log.info("Drained pod=%s/%s before eviction", service.namespace, pod)

    def _finish_drains(
        self,
        service: VLLMService,
        pods_by_pool: dict[str, list[Obj]],
        metrics: ServiceMetrics,
        now: datetime,
    ) -> None:
        """Evict each drained pod once it is idle, or after DRAIN_TIMEOUT whatever it reports.

        Idle: its newest vllm:num_requests_running sample (the version's name, read through the
        metrics gateway) is 0 and was taken after the drain began, so a request that arrived
        before the Service dropped the pod has finished. Without metrics only the timeout ends
        the drain: it bounds the wait either way.
        """
        for pods in pods_by_pool.values():
            for pod in list(pods):
                annotations = (pod.get("metadata") or {}).get("annotations") or {}
                since = parse_time(annotations.get(ANNOTATION_DRAINING_SINCE))
                if since is None:
                    continue
                name = pod["metadata"]["name"]
                idle = _idle_since(metrics, name, since)
                if not idle and now - since < DRAIN_TIMEOUT:
                    log.info("Deferred eviction until idle pod=%s/%s", service.namespace, name)
                    continue
                if self.gw.evict_pod(service.namespace, name):
                    pods.remove(pod)
                    self.gw.emit_event(
                        service_event(
                            service,
                            "Normal",
                            Reason.POD_EVICTED,
                            f"Evicted drained pod {name} through the Eviction API ("
                            + ("no running requests" if idle else "drain timeout")
                            + ")",
                        )
                    )
                else:
                    log.info("Deferred eviction by PodDisruptionBudget pod=%s", name)


def _versions(objects: list[Obj]) -> Versions | None:
    """(name, resourceVersion) of each object, sorted by name; None when one has no numeric
    resourceVersion (kube/cache.py compares the same integers)."""
    found = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        try:
            found.append((str(meta.get("name")), int(str(meta.get("resourceVersion")))))
        except ValueError:
            return None
    return tuple(sorted(found))


def _is_calm(
    status: VLLMServiceStatus,
    observations: Observations,
    pods_by_pool: dict[str, list[Obj]],
    now: datetime,
    window: timedelta,
) -> bool:
    """Nothing in this evaluation's result can change with time alone (Evaluator.unchanged):
    no override to restore, no pool failure, no draining pod, no pod Running but not Ready (a
    stall to come due), none crash-looping, no termination within the window or after `now`."""
    if status.overrides or any(p.failure is not None for p in status.pools):
        return False
    for pods in pods_by_pool.values():
        for pod in pods:
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            if ANNOTATION_DRAINING_SINCE in annotations:
                return False
    for pool in observations.pools:
        for seen in pool.pods:
            if seen.crash_looping or (not seen.ready and seen.running_since is not None):
                return False
            term = seen.last_termination
            if term is not None and term.finished_at >= now - window:
                return False
    return True


def _pod_names(pods_by_pool: dict[str, list[Obj]]) -> list[str]:
    return [p["metadata"]["name"] for pods in pods_by_pool.values() for p in pods]


def _idle_since(metrics: ServiceMetrics, pod: str, since: datetime) -> bool:
    """The pod's newest running-requests sample is 0 and newer than `since`."""
    found = metrics.pods.get(pod)
    if found is None or not found.requests_running:
        return False
    newest = max(found.requests_running, key=lambda s: s.t)
    return newest.t > since and newest.v == 0


def _startup_budget(plan: PoolPlan) -> StartupBudget | None:
    """The plan's startup budget, kept below the rendered startup probe's (it fires first)."""
    if plan.memory is None:
        return None
    args = plan.planned_args()
    total = plan.memory.weights_gib * args.tensor_parallel_size
    return startup_budget(
        total,
        enforce_eager=args.enforce_eager,
        probe_budget_s=workload.startup_budget_seconds(total),
    )


def _capacities(metrics: ServiceMetrics, pods: list[Obj]) -> list[int | None]:
    """The KV-cache tokens each pod's engine reported (None where it did not)."""
    found = (metrics.pods.get(p["metadata"]["name"]) for p in pods)
    return [m.kv_cache_tokens if m is not None else None for m in found]


def _status(body: Obj) -> VLLMServiceStatus:
    try:
        return VLLMServiceStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return VLLMServiceStatus()


__all__ = ["BatchMetricsSource", "Evaluator", "MetricsSource", "Kind"]
