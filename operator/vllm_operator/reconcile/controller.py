"""The level-based reconcile of one VLLMService: gather, plan, render, apply, status.

Every trigger (the service changed, an owned Deployment changed, a GPU node changed, the operator
restarted) adds the service's key to one work queue (reconcile/queue.py, reconcile/triggers.py),
and a worker holding the key runs the same function, which reads the world, computes what should
exist, applies only what differs and writes status once, only if it changed. So a reconcile with
nothing to change makes zero write calls, and a restart in the middle of a rollout simply
continues it.

When a key comes back is decided in one place (#32): each run ends with `_schedule`, which adds
the key after the earliest of what it waits for (a settling spec, a failure's backoff, the next
remediation evaluation), reported as `Outcome.requeue_after`.

Threading rule: the queue hands a key to one worker at a time, so the per-service maps
(failures, conflicts warned, settle times, the evaluator's memory) are only touched by the worker
holding that service's key; the maps shared across services (wanted-reconcile times, node and
budget caches, the trigger index) take their own lock.

This module holds only the run of one key (#32); what it calls lives in modules named for what
they do: failure_reports.py (backoff and failure conditions), node_view.py (nodes, their digest,
probe budgets), reporting.py (Events, status writes, name conflicts), ownership.py (owner check,
pruning), group_readiness.py (multi-node groups counted from pods), evaluation_batches.py
(batched metrics), admission_review.py (the webhook's decision), scheduler.py (when a reconcile
or an evaluation is due) and outcome.py.
"""

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from vllm_operator.api import GpuAllocation, ScalingMode, VLLMService
from vllm_operator.api.manifests import ServiceInvalid
from vllm_operator.api.reasons import Reason
from vllm_operator.api.status import Observation
from vllm_operator.kube.bodies import VLLMServiceBody
from vllm_operator.kube.gateway import (
    POOL_KINDS,
    ConflictError,
    GatewayError,
    Kind,
    KubeGateway,
    Obj,
)
from vllm_operator.metrics import operator_metrics as m
from vllm_operator.reconcile.admission import Verdict
from vllm_operator.reconcile.admission_chain import check_object
from vllm_operator.reconcile.admission_review import AdmissionReviews
from vllm_operator.reconcile.canary import gate as canary_gate
from vllm_operator.reconcile.canary import surge_room
from vllm_operator.reconcile.diff import needs_apply
from vllm_operator.reconcile.dra_apply import apply_claim_template, prune_claim_templates
from vllm_operator.reconcile.evaluate import Evaluator, MetricsSource
from vllm_operator.reconcile.evaluation_batches import EvaluationBatches
from vllm_operator.reconcile.failure_reports import FailureReports
from vllm_operator.reconcile.failures import RetryableError, backoff_delay
from vllm_operator.reconcile.group_readiness import count_ready_groups
from vllm_operator.reconcile.legacy import drop_legacy_finalizer
from vllm_operator.reconcile.node_view import NodeView
from vllm_operator.reconcile.observed import fleet_members, fleet_observations
from vllm_operator.reconcile.outcome import Outcome
from vllm_operator.reconcile.ownership import owned_by, prune
from vllm_operator.reconcile.placement import PlacementDecision
from vllm_operator.reconcile.placement_inputs import place_replicas
from vllm_operator.reconcile.pools import (
    ArchitectureResolver,
    PlanCache,
    ServiceRejected,
    attach_live,
    plan_pools,
    prepare_service,
)
from vllm_operator.reconcile.queue import DEFAULT_WORKERS, Key, Workers, WorkQueue, drain
from vllm_operator.reconcile.replicas import hand_over_replicas
from vllm_operator.reconcile.reporting import ConflictWarnings, emit, plans_applied, write_status
from vllm_operator.reconcile.routing import reconcile_routing, with_routing
from vllm_operator.reconcile.scheduler import EvaluationTimes, ReconcileTimes
from vllm_operator.reconcile.settle import SettleTracker
from vllm_operator.reconcile.status import (
    budget_note,
    name_conflict_status,
    parse_status,
    rejected_status,
    service_status,
)
from vllm_operator.reconcile.triggers import Triggers
from vllm_operator.reconcile.writes import CountingGateway
from vllm_operator.rendering.names import LABEL_INSTANCE, selector_labels
from vllm_operator.rendering.workload import render_pdb, render_service

log = logging.getLogger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class Controller:
    """Reconciles VLLMServices through a KubeGateway, one key at a time per service."""

    def __init__(
        self,
        gateway: KubeGateway,
        resolver: ArchitectureResolver,
        clock: Callable[[], datetime] = _utcnow,
        node_cache_seconds: float = 0.0,
        metrics: MetricsSource | None = None,
        settle_seconds: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
        workers: int = DEFAULT_WORKERS,
        gpu_allocation: GpuAllocation = GpuAllocation.DEVICE_PLUGIN,
        canary_default: bool = False,
    ) -> None:
        # Every write goes through the counting wrapper (vllm_operator_api_writes_total).
        self.gw = CountingGateway(gateway)
        self.evaluator = Evaluator(self.gw, metrics, clock)
        # Nodes (shared for a moment by a burst; node events that change anything relevant drop
        # them at once), their digest and the probe budgets (reconcile/node_view.py).
        self.node_view = NodeView(self.gw, node_cache_seconds)
        self.resolver = resolver
        self.clock = clock
        self._monotonic = monotonic
        # One queue decides when each service runs (#32): triggers, settling, backoff and
        # remediation evaluations are all adds of the service's key.
        self.queue = WorkQueue(clock=monotonic)
        self.workers = Workers(self.queue, self.process, workers)
        # When a reconcile of each key is wanted (monotonic); a key without an entry needs none.
        self.wanted = ReconcileTimes()
        # Event -> keys (node events through each service's allowed GPU types).
        self.triggers = Triggers(on_nodes_changed=self.node_view.drop)
        # The cluster default for specs without spec.placement.gpuAllocation (chart value).
        self.gpu_allocation = gpu_allocation
        # The cluster default for specs without spec.rollout.canary.enabled (`run --canary`, on
        # there; off here so that a bare Controller rolls new plans at once, as unit tests expect).
        self.canary_default = canary_default
        self.pool_plans = m.PoolPlans()
        # Plan results by their inputs (#21): services sharing a model and GPU plan once.
        self.plans = PlanCache()
        self.conflicts = ConflictWarnings()
        # Run-time remediation: delayed adds on the queue at each service's interval (no Kopf
        # timer, so no finalizer). Prometheus is asked once per signal for all services due
        # together (#21): the first of them fetches the batch, the others take their share.
        self.evaluations = EvaluationTimes(monotonic)
        self.batches = EvaluationBatches(self.gw, self.evaluator, self.evaluations)
        # Bursts of edits roll pods once (reconcile/settle.py).
        self.settle = SettleTracker(settle_seconds, monotonic)
        # Fail-safe reconcile (#12): per-service backoff and reports (reconcile/failure_reports.py).
        self.failures = FailureReports(self.gw, clock, monotonic, self._want)
        # Admission reviews (#16), sharing the reconcile's node access.
        self.admission = AdmissionReviews(resolver, self.node_view.nodes)

    # ------------------------------------------------------------------------ queue and keys

    def enqueue(self, key: Key) -> None:
        """A trigger: reconcile `key` as soon as a worker is free (the Kopf handlers' only call)."""
        self._want(key, self._monotonic())
        self.queue.add(key)

    def start(self, gate: threading.Event | None = None) -> None:
        """Start the workers; they take keys once `gate` is set (the watch caches synced)."""
        self.workers.start(gate)

    def stop(self) -> None:
        """Stop taking keys and wait for the running ones (the operator's cleanup)."""
        self.workers.stop()

    def run_due(self) -> list[Key]:
        """Process every key due now on the calling thread (tests, with a fake clock)."""
        return drain(self.queue, self.process)

    def process(self, key: Key) -> Outcome:
        """A worker's run of one key: the evaluation if due, the reconcile if wanted, then the
        key's next time on the queue. Failures end as conditions and a delayed add (never an
        exception: the queue's own rate limiting is for bugs that escape this)."""
        namespace, name = key
        now = self._monotonic()
        outcome = Outcome()
        if self.evaluations.is_due(key):
            self.batches.prefetch_for(key)
            # A failure is reported; the evaluation's backoff is its next due time.
            with contextlib.suppress(RetryableError):
                outcome = self.evaluate(namespace, name)
        at = self.wanted.at(key)
        if at is not None and at <= now:
            # A failure is reported; its backoff is in `wanted`.
            with contextlib.suppress(RetryableError):
                outcome = self.reconcile(namespace, name)
        outcome.requeue_after = self._schedule(key)
        return outcome

    def wanted_at(self, key: Key) -> float | None:
        """When a reconcile of `key` is next wanted (monotonic seconds), None if none is: what
        a time-based rule (settle, backoff, placement recheck) asked for; tests and debugging."""
        return self.wanted.at(key)

    def _want(self, key: Key, at: float) -> None:
        """A reconcile of `key` is wanted at `at` (the earliest of all wishes counts)."""
        self.wanted.want(key, at)

    def _schedule(self, key: Key) -> float | None:
        """Add `key` to the queue for its next due time (reconcile wanted, evaluation due);
        the delay, or None when nothing is due."""
        wanted = self.wanted.at(key)
        times = [t for t in (wanted, self.evaluations.next_at(key)) if t is not None]
        if not times:
            return None
        delay = max(0.0, min(times) - self._monotonic())
        self.queue.add_after(key, delay)
        return delay

    def forget(self, namespace: str, name: str) -> None:
        """The service is gone; its children go through owner references."""
        key = (namespace, name)
        self.triggers.forget(key)
        self.pool_plans.forget(key)
        self.conflicts.forget(key)
        self.evaluations.forget(key)
        self.evaluator.forget(key)
        self.settle.forget(key)
        self.queue.forget(key)
        self.wanted.forget(key)
        self.failures.forget(namespace, name)

    def review_admission(self, obj: Obj, old: Obj | None = None) -> Verdict:
        """The admission webhook's decision for one VLLMService (reconcile/admission_review.py)."""
        return self.admission.review(obj, old)

    # ------------------------------------------------------------------------------ reconcile

    def reconcile(self, namespace: str, name: str) -> Outcome:
        """Reconcile one service by name (reads the current object first); the caller holds the
        key (a queue worker, or a test on its own thread).

        Fail-safe (#12): whatever fails while gathering, planning, rendering or applying ends as
        a condition on this service only (`FailureReports.failed`) and a RetryableError with this service's
        backoff delay; the key comes back from the queue then until it succeeds, independent of
        any watch event (#20). A failing service is attempted at most once per backoff period
        for the same generation, whatever triggers arrive (its Deployment's events, nodes).
        """
        key = (namespace, name)
        # Taken: a trigger from now on wants another run (the queue hands it back after).
        self.wanted.take(key)
        try:
            outcome = self._reconcile_key(namespace, name)
        except RetryableError:
            self._schedule(key)
            raise
        outcome.requeue_after = self._schedule(key)
        if outcome.wrote():
            log.info("Reconciled with writes service=%s/%s %s", namespace, name, outcome.summary())
        return outcome

    def _reconcile_key(self, namespace: str, name: str) -> Outcome:
        started = time.perf_counter()
        key = (namespace, name)
        body: Obj | None = None
        try:
            for attempt in range(3):
                try:
                    body = self.gw.get(Kind.VLLM_SERVICE, namespace, name)
                    if body is not None:
                        drop_legacy_finalizer(self.gw, body)
                    if body is None or VLLMServiceBody(body).gone:
                        self.forget(namespace, name)
                        return Outcome()
                    self.failures.defer_if_backing_off((*key, "reconcile"), body)
                    outcome = self.reconcile_body(body)
                    m.RECONCILES.labels("ok").inc()
                    self.failures.recovered((*key, "reconcile"))
                    return outcome
                except ConflictError:
                    if attempt == 2:
                        raise
                    log.info("Retried after conflict service=%s/%s", namespace, name)
            raise AssertionError("unreachable")
        except RetryableError:
            raise
        except Exception as exc:  # every failure ends as a condition (#12)
            raise self.failures.failed((*key, "reconcile"), body, exc) from exc
        finally:
            m.RECONCILE_SECONDS.observe(time.perf_counter() - started)

    def evaluate(self, namespace: str, name: str) -> Outcome:
        """Run-time remediation for one service; reconciles again when overrides or a pool's
        failure changed (re-rendered pools, Degraded re-derived).

        A failure is reported like a reconcile's (`FailureReports.failed`) with its own backoff: the next
        evaluation is due after the RetryableError's delay instead of the interval.
        """
        key = (namespace, name)
        body: Obj | None = None
        delay: float | None = None
        try:
            if self.evaluator.unchanged(key):
                return Outcome()  # nothing it reads changed since a calm evaluation (#32)
            body = self.gw.get(Kind.VLLM_SERVICE, namespace, name)
            if body is None or VLLMServiceBody(body).gone:
                self.forget(namespace, name)
                return Outcome()
            changed = self.evaluator.evaluate(body)
            body = self.gw.get(Kind.VLLM_SERVICE, namespace, name) if changed else None
            outcome = self.reconcile_body(body) if body is not None else Outcome()
            self.failures.recovered((*key, "evaluate"))
            if outcome.wrote():
                log.info(
                    "Reconciled after evaluation with writes service=%s/%s %s",
                    namespace,
                    name,
                    outcome.summary(),
                )
            return outcome
        except RetryableError as exc:
            delay = exc.delay
            raise
        except Exception as exc:  # every failure ends as a condition (#12)
            failed = self.failures.failed((*key, "evaluate"), body, exc)
            delay = failed.delay
            raise failed from exc
        finally:
            self.evaluations.ran(key, delay)

    def reconcile_body(self, body: Obj) -> Outcome:
        """One pass over a VLLMService object as read from the API."""
        view = VLLMServiceBody(body)
        namespace, name = view.key
        generation = view.meta.generation
        old_status = parse_status(body.get("status"))
        outcome = Outcome()
        now = self.clock()
        self.settle.note((namespace, name), generation)

        try:
            # The validation `validate`, `plan` and `render` use (strict, as the API server's
            # decoder types values); status is the operator's own and parsed apart.
            service = check_object({k: v for k, v in body.items() if k != "status"})
        except ServiceInvalid as exc:
            problems = "; ".join(str(p) for p in exc.problems)
            status = rejected_status(old_status, Reason.INVALID_SPEC, problems, now, generation)
            write_status(self.gw, body, old_status, status, outcome)
            return outcome
        self.triggers.index((namespace, name), service.spec.placement.gpu_types)
        # Every mode is observed (off only takes no step), so every service is scheduled.
        self.evaluations.track(
            (namespace, name), service.spec.remediation.evaluation_interval_seconds
        )

        try:
            prepared = prepare_service(service, self.resolver)
        except ServiceRejected as exc:
            status = rejected_status(old_status, exc.reason, exc.message, now, generation)
            write_status(self.gw, body, old_status, status, outcome)
            return outcome

        nodes = self.node_view.nodes()
        self.settle.note_nodes((namespace, name), self.node_view.digest(nodes))
        groups = self.node_view.groups(nodes)
        budgets = self.node_view.budgets(service, nodes, now, outcome)
        pools = plan_pools(
            prepared,
            groups,
            budgets.usable_mib,
            old_status.overrides,
            plans=self.plans,
            observations=self._fleet_observations(service, old_status.observations),
            gpu_allocation=self.gpu_allocation,
        )
        note = budget_note(service, budgets)
        # The service's labelled workloads, read once (#32 no-op reconcile): placement and each
        # pool take their live object from this listing, and the prune pass below reuses it
        # unless a write came in between. A name the listing lacks is read by name, as before:
        # an object someone else created under that name carries no labels of ours (a name
        # conflict).
        listed = self._list_workloads(namespace, name)
        writes_before = self.gw.writes
        # placement.strategy Preferred (#29): each pool's share of the total.
        placement = place_replicas(
            self.gw,
            service,
            pools,
            nodes,
            old_status.placement,
            old_status.overrides,
            now,
            listed=listed[Kind.DEPLOYMENT],
        )

        desired_names: set[tuple[Kind, str]] = set()
        conflicts: list[str] = []
        settling = 0.0
        applied: list[str] = []
        try:
            for pool in pools:
                if pool.deployment is None:
                    continue
                # A pool's workload: a Deployment, or a LeaderWorkerSet for a multi-node pool.
                kind = Kind(pool.deployment["kind"])
                desired_names.add((kind, pool.deployment["metadata"]["name"]))
                live = listed[kind].get(pool.deployment["metadata"]["name"])
                if live is None:
                    live = self.gw.get(kind, namespace, pool.deployment["metadata"]["name"])
                if live is not None and not owned_by(live, service):
                    conflicts.append(f"{kind} {namespace}/{pool.deployment['metadata']['name']}")
                    pool.deployment_name = None
                    continue
                # gpuAllocation dra: the claim template first, so the pods can claim from it.
                outcome.applied.extend(apply_claim_template(self.gw, pool.claim_template, live))
                # A new plan of a running pool is tried on one canary pod first (#27).
                room = surge_room(self.gw, service, pool, live, nodes, self.canary_default)
                step = canary_gate(
                    self.gw, service, pool, live, old_status, now, room, self.canary_default
                )
                outcome.applied.extend(step.applied)
                outcome.deleted.extend(step.deleted)
                for type_, reason, message in step.events:
                    emit(self.gw, service, type_, reason, message, outcome)
                if step.requeue_after is not None:
                    # A canary being watched: look again then (a wanted reconcile on the queue).
                    self._want((namespace, name), self._monotonic() + step.requeue_after)
                if service.spec.scaling.mode == ScalingMode.EXTERNAL:
                    live, writes = hand_over_replicas(
                        self.gw, pool.deployment, live, service.spec.replicas
                    )
                    outcome.applied.extend(writes)
                if needs_apply(pool.deployment, live):
                    wait = self.settle.wait((namespace, name), generation, pool.deployment, live)
                    if wait > 0:
                        settling = max(settling, wait)
                        pool.live = live
                        continue
                    live = self.gw.apply(pool.deployment)
                    outcome.applied.append(f"{kind}/{pool.deployment['metadata']['name']}")
                    applied.append(pool.applied_message)
                pool.live = live
        finally:
            # Even when a later pool failed: the pools applied before it are reported.
            plans_applied(self.gw, service, applied, outcome)

        if self.gw.writes != writes_before:
            listed = self._list_workloads(namespace, name)  # what the writes left
        owned = [d for kind in POOL_KINDS for d in listed[kind].values() if owned_by(d, service)]
        existing = prune(self.gw, service, owned, desired_names, outcome)
        outcome.deleted.extend(prune_claim_templates(self.gw, service, pools))
        if existing:
            for obj in (render_service(service), render_pdb(service)):
                kind = Kind(obj["kind"])
                live_obj = self.gw.get(kind, namespace, obj["metadata"]["name"])
                if live_obj is not None and not owned_by(live_obj, service):
                    conflicts.append(f"{kind} {namespace}/{obj['metadata']['name']}")
                    continue
                if needs_apply(obj, live_obj):
                    self.gw.apply(obj)
                    outcome.applied.append(f"{kind}/{obj['metadata']['name']}")
        routing = reconcile_routing(self.gw, service, old_status)  # spec.routing (#31)
        outcome.applied.extend(routing.applied)
        outcome.deleted.extend(routing.deleted)
        conflicts.extend(routing.conflicts)
        attach_live(pools, existing)
        count_ready_groups(self.gw, service, pools)

        if settling > 0:
            # Status stays at the previous generation until the new plan is really rolled.
            log.info(
                "Deferred rollout until the spec settles service=%s/%s generation=%s wait=%.1fs",
                namespace,
                name,
                generation,
                settling,
            )
            self._want((namespace, name), self._monotonic() + settling)
            return outcome
        status = service_status(service, old_status, pools, now, generation, note)
        status = name_conflict_status(with_routing(status, routing), conflicts, now, generation)
        status = status.model_copy(update={"placement": placement and placement.status})
        if placement is not None:
            # The scale subresource reports the total under Preferred (what an autoscaler scales).
            status = status.model_copy(update={"replicas": placement.status.total})
            self._placed(service, placement, outcome)
        self.conflicts.warn(self.gw, service, conflicts, outcome)
        write_status(self.gw, body, old_status, status, outcome, service)
        self.pool_plans.set((namespace, name), [(p.gpu_type, p.feasible) for p in pools])
        return outcome

    def _list_workloads(self, namespace: str, name: str) -> dict[Kind, dict[str, Obj]]:
        """The service's labelled pool workloads of each kind by name (the watch cache, or the
        API), in the listing's order."""
        return {
            kind: {
                str((d.get("metadata") or {}).get("name")): d
                for d in self.gw.list_owned(kind, namespace, selector_labels(name))
            }
            for kind in POOL_KINDS
        }

    def _fleet_observations(
        self, service: VLLMService, own: Sequence[Observation]
    ) -> list[Observation]:
        """The service's own measurements plus those of the cluster's other services with the
        same engine configuration (reconcile/observed.py fleet_observations). Sharing is an
        improvement, never a reason to fail: a list the API refuses plans from its own."""
        try:
            bodies = self.gw.list_services(fleet_of=service.spec.model.name)
        except GatewayError as exc:
            log.debug("Skipped fleet observations service=%s error=%s", service.name, exc)
            return list(own)
        members = fleet_members(bodies, service.namespace, service.name, service.spec.model.name)
        return fleet_observations(service.spec, own, members)

    def _placed(self, service: VLLMService, decision: PlacementDecision, outcome: Outcome) -> None:
        """An Event per placement change; a later look when a time-based rule may fire (nothing
        the controller watches changes when a Pending pod turns Unschedulable or another
        workload's pods end): a wanted reconcile at that time on the work queue (the earliest
        wish of a key counts, so an earlier pending one is kept)."""
        for reason, message in decision.events:
            emit(self.gw, service, "Normal", reason, message, outcome)
        if decision.recheck_seconds is not None:
            key = (service.namespace, service.name)
            self._want(key, self._monotonic() + decision.recheck_seconds)


__all__ = [
    "Controller",
    "Outcome",
    "RetryableError",
    "backoff_delay",
    "LABEL_INSTANCE",
    "owned_by",
]
