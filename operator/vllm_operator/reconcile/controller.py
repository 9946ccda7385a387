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

Threading rule: the queue hands a key to one worker at a time, so the per-service maps below
(failures, conflicts warned, settle times, the evaluator's memory) are only touched by the worker
holding that service's key; the maps shared across services (`_wanted`, node and budget caches,
the trigger index) take their own lock.
"""

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from vllm_operator.api import GpuAllocation, ScalingMode, VLLMService, VLLMServiceStatus
from vllm_operator.api.groups import LWS_LABEL_GROUP_INDEX, LWS_LABEL_NAME
from vllm_operator.api.manifests import ServiceInvalid
from vllm_operator.api.probe import GPU_BUDGET_ANNOTATION
from vllm_operator.api.reasons import Reason
from vllm_operator.api.status import Observation
from vllm_operator.kube.gateway import (
    POOL_KINDS,
    ConflictError,
    GatewayError,
    Kind,
    KubeGateway,
    Obj,
)
from vllm_operator.metrics import operator_metrics as m
from vllm_operator.reconcile.admission import BoundedResolver, Verdict, review
from vllm_operator.reconcile.admission_chain import check_object
from vllm_operator.reconcile.budgets import BudgetCache, MeasuredBudgets, measured_budgets
from vllm_operator.reconcile.canary import gate as canary_gate
from vllm_operator.reconcile.diff import needs_apply
from vllm_operator.reconcile.dra_apply import (
    SliceMismatches,
    apply_claim_template,
    prune_claim_templates,
)
from vllm_operator.reconcile.evaluate import Evaluator, MetricsSource
from vllm_operator.reconcile.failures import (
    ACTIONS,
    Failure,
    FailureKey,
    RetryableError,
    backoff_delay,
    classify_failure,
    one_line,
)
from vllm_operator.reconcile.inventory import GpuNodeGroup, canonical_label, group_gpu_nodes
from vllm_operator.reconcile.observed import fleet_members, fleet_observations
from vllm_operator.reconcile.placement import PlacementDecision
from vllm_operator.reconcile.placement_inputs import place_replicas
from vllm_operator.reconcile.pools import (
    ArchitectureResolver,
    PlanCache,
    PoolOutcome,
    ServiceRejected,
    attach_live,
    plan_pools,
    prepare_service,
)
from vllm_operator.reconcile.queue import DEFAULT_WORKERS, Key, Workers, WorkQueue, drain
from vllm_operator.reconcile.replicas import hand_over_replicas
from vllm_operator.reconcile.routing import reconcile_routing, with_routing
from vllm_operator.reconcile.scheduler import EvaluationTimes
from vllm_operator.reconcile.settle import SettleTracker
from vllm_operator.reconcile.slices import merge_slices
from vllm_operator.reconcile.status import (
    budget_note,
    failed_status,
    name_conflict_status,
    parse_status,
    rejected_status,
    service_status,
    transition_events,
)
from vllm_operator.reconcile.triggers import Triggers, node_fingerprint
from vllm_operator.reconcile.writes import CountingGateway, node_event, service_event
from vllm_operator.rendering.names import (
    ANNOTATION_GPU_TYPE,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    selector_labels,
)
from vllm_operator.rendering.workload import render_pdb, render_service

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What one reconcile did, for tests and the operator's metrics."""

    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    status_written: bool = False
    events: list[str] = field(default_factory=list)
    requeue_after: float | None = None
    """Seconds until the key is handed back (settling, backoff, the next evaluation, a canary
    being watched); None: only a trigger brings it back."""


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
    ) -> None:
        # Every write goes through the counting wrapper (vllm_operator_api_writes_total).
        self.gw = CountingGateway(gateway)
        self.evaluator = Evaluator(self.gw, metrics, clock)
        # Reconciles in a burst (startup, a Deployment storm) share one node list for a moment;
        # node events that change anything relevant invalidate it at once.
        self._node_cache_seconds = node_cache_seconds
        self._node_cache: tuple[float, list[Obj]] | None = None
        self._node_cache_guard = threading.Lock()
        self.resolver = resolver
        self.clock = clock
        # One queue decides when each service runs (#32): triggers, settling, backoff and
        # remediation evaluations are all adds of the service's key.
        self.queue = WorkQueue(clock=monotonic)
        self.workers = Workers(self.queue, self.process, workers)
        # When a reconcile of each key is wanted (monotonic); a key without an entry needs none.
        self._wanted: dict[Key, float] = {}
        self._wanted_guard = threading.Lock()
        # Event -> keys (node events through each service's allowed GPU types).
        self.triggers = Triggers(on_nodes_changed=self._drop_node_cache)
        self._nodes_digested: tuple[list[Obj], str] | None = None
        # The cluster default for specs without spec.placement.gpuAllocation (chart value).
        self.gpu_allocation = gpu_allocation
        # DRA inventory (#30): one Warning per node and disagreement between GFD and slices.
        self._slice_mismatches = SliceMismatches()
        # Probe annotations: decoded once per change, one Warning per (node, problem) on the node.
        self._budget_cache = BudgetCache()
        self._budget_events: dict[str, str] = {}
        self._budget_events_guard = threading.Lock()
        self.pool_plans = m.PoolPlans()
        # Plan results by their inputs (#21): services sharing a model and GPU plan once.
        self.plans = PlanCache()
        self._conflicts_warned: dict[tuple[str, str], set[str]] = {}
        # Run-time remediation: delayed adds on the queue at each service's interval (no Kopf
        # timer, so no finalizer). Prometheus is asked once per signal for all services due
        # together (#21): the first of them fetches the batch, the others take their share.
        self.evaluations = EvaluationTimes(monotonic)
        self._batched: set[Key] = set()
        self._batch_guard = threading.Lock()
        # Bursts of edits roll pods once (reconcile/settle.py).
        self.settle = SettleTracker(settle_seconds, monotonic)
        self._monotonic = monotonic
        # Fail-safe reconcile (#12): per-service backoff, one Warning per distinct failure, one
        # traceback per distinct internal error (process-wide, bounded). Keyed by (namespace,
        # name, action): a failing evaluation (say, pod logs forbidden) backs off apart from the
        # reconcile, so neither's success resets the other's backoff.
        self._failures: dict[FailureKey, Failure] = {}
        self._failures_warned: dict[FailureKey, str] = {}
        self._tracebacks_logged: set[str] = set()
        # Admission reviews (#16): the Hub bounded; the inventory grouped once per node list.
        self.admission_resolver = BoundedResolver(resolver)
        self._admission_groups: tuple[list[Obj], dict[str, GpuNodeGroup]] | None = None

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
            self._prefetch_batch(key)
            # A failure is reported; the evaluation's backoff is its next due time.
            with contextlib.suppress(RetryableError):
                outcome = self.evaluate(namespace, name)
        with self._wanted_guard:
            at = self._wanted.get(key)
        if at is not None and at <= now:
            # A failure is reported; its backoff is in `_wanted`.
            with contextlib.suppress(RetryableError):
                outcome = self.reconcile(namespace, name)
        outcome.requeue_after = self._schedule(key)
        return outcome

    def wanted_at(self, key: Key) -> float | None:
        """When a reconcile of `key` is next wanted (monotonic seconds), None if none is: what
        a time-based rule (settle, backoff, placement recheck) asked for; tests and debugging."""
        with self._wanted_guard:
            return self._wanted.get(key)

    def _want(self, key: Key, at: float) -> None:
        """A reconcile of `key` is wanted at `at` (the earliest of all wishes counts)."""
        with self._wanted_guard:
            current = self._wanted.get(key)
            if current is None or at < current:
                self._wanted[key] = at

    def _schedule(self, key: Key) -> float | None:
        """Add `key` to the queue for its next due time (reconcile wanted, evaluation due);
        the delay, or None when nothing is due."""
        with self._wanted_guard:
            wanted = self._wanted.get(key)
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
        self._conflicts_warned.pop(key, None)
        self.evaluations.forget(key)
        self.evaluator.forget(key)
        self.settle.forget(key)
        self.queue.forget(key)
        with self._wanted_guard:
            self._wanted.pop(key, None)
        for action in ACTIONS:
            self._failures.pop((namespace, name, action), None)
            self._failures_warned.pop((namespace, name, action), None)

    # ------------------------------------------------------------------------------ reconcile

    def reconcile(self, namespace: str, name: str) -> Outcome:
        """Reconcile one service by name (reads the current object first); the caller holds the
        key (a queue worker, or a test on its own thread).

        Fail-safe (#12): whatever fails while gathering, planning, rendering or applying ends as
        a condition on this service only (see `_failed`) and a RetryableError with this service's
        backoff delay; the key comes back from the queue then until it succeeds, independent of
        Kopf's diff-base (#20). A failing service is attempted at most once per backoff period
        for the same generation, whatever triggers arrive (its Deployment's events, nodes).
        """
        key = (namespace, name)
        with self._wanted_guard:
            # Taken: a trigger from now on wants another run (the queue hands it back after).
            self._wanted.pop(key, None)
        try:
            outcome = self._reconcile_key(namespace, name)
        except RetryableError:
            self._schedule(key)
            raise
        outcome.requeue_after = self._schedule(key)
        return outcome

    def _reconcile_key(self, namespace: str, name: str) -> Outcome:
        started = time.perf_counter()
        key = (namespace, name)
        body: Obj | None = None
        try:
            for attempt in range(3):
                try:
                    body = self.gw.get(Kind.VLLM_SERVICE, namespace, name)
                    if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                        self.forget(namespace, name)
                        return Outcome()
                    self._defer_if_backing_off((*key, "reconcile"), body)
                    outcome = self.reconcile_body(body)
                    m.RECONCILES.labels("ok").inc()
                    self._recovered((*key, "reconcile"))
                    return outcome
                except ConflictError:
                    if attempt == 2:
                        raise
                    log.info("Retried after conflict service=%s/%s", namespace, name)
            raise AssertionError("unreachable")
        except RetryableError:
            raise
        except Exception as exc:  # every failure ends as a condition (#12)
            raise self._failed((*key, "reconcile"), body, exc) from exc
        finally:
            m.RECONCILE_SECONDS.observe(time.perf_counter() - started)

    def evaluate(self, namespace: str, name: str) -> Outcome:
        """Run-time remediation for one service; reconciles again when overrides or a pool's
        failure changed (re-rendered pools, Degraded re-derived).

        A failure is reported like a reconcile's (`_failed`) with its own backoff: the next
        evaluation is due after the RetryableError's delay instead of the interval.
        """
        key = (namespace, name)
        body: Obj | None = None
        delay: float | None = None
        try:
            body = self.gw.get(Kind.VLLM_SERVICE, namespace, name)
            if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                self.forget(namespace, name)
                return Outcome()
            changed = self.evaluator.evaluate(body)
            body = self.gw.get(Kind.VLLM_SERVICE, namespace, name) if changed else None
            outcome = self.reconcile_body(body) if body is not None else Outcome()
            self._recovered((*key, "evaluate"))
            return outcome
        except RetryableError as exc:
            delay = exc.delay
            raise
        except Exception as exc:  # every failure ends as a condition (#12)
            failed = self._failed((*key, "evaluate"), body, exc)
            delay = failed.delay
            raise failed from exc
        finally:
            self.evaluations.ran(key, delay)

    # ---------------------------------------------------------------------- failure handling

    def _due(self, key: FailureKey, body: Obj) -> bool:
        """No backoff holds this service back (none, it has passed, or the spec changed since)."""
        failure = self._failures.get(key)
        return (
            failure is None
            or failure.generation != (body.get("metadata") or {}).get("generation")
            or self._monotonic() >= failure.due
        )

    def _defer_if_backing_off(self, key: FailureKey, body: Obj) -> None:
        """Refuse a retry of the same generation before its backoff passed (no hot loop)."""
        failure = self._failures.get(key)
        if failure is None or self._due(key, body):
            return
        left = max(failure.due - self._monotonic(), 1.0)
        self._want(key[:2], self._monotonic() + left)
        log.debug("Deferred %s service=%s/%s retry_in=%.0fs", key[2], key[0], key[1], left)
        raise RetryableError(failure.message, delay=left)

    def _recovered(self, key: FailureKey) -> None:
        if self._failures.pop(key, None) is not None:
            log.info("Recovered %s service=%s/%s", key[2], key[0], key[1])
        self._failures_warned.pop(key, None)

    def _failed(self, key: FailureKey, body: Obj | None, exc: Exception) -> RetryableError:
        """Count, log, report and schedule the retry of a failed reconcile (or evaluation).

        The log line is one WARNING in k8s style without a traceback: an API refusal is the
        user's or the cluster's problem, and its cause is quoted. An internal error (a bug) logs
        its traceback once per distinct error per process (ERROR), so it can be fixed, and then
        only the WARNING line: a traceback every backoff period of every service would bury the
        log. Reporting (status, Event) is best effort and never masks the original error.
        """
        namespace, name, action = key
        m.RECONCILES.labels("error").inc()
        m.RECONCILE_ERRORS.labels(type(exc).__name__).inc()
        reason, message = classify_failure(exc)
        generation = ((body or {}).get("metadata") or {}).get("generation")
        previous = self._failures.get(key)
        attempts = previous.attempts + 1 if previous is not None else 1
        delay = backoff_delay(attempts)
        self._failures[key] = Failure(
            generation, attempts, delay, self._monotonic() + delay, message
        )
        log.warning(
            "Failed to %s service=%s/%s reason=%s retry_in=%.0fs error=%s",
            action,
            namespace,
            name,
            reason or "Unreachable",
            delay,
            message,
        )
        if reason == Reason.RECONCILE_ERROR:
            signature = f"{type(exc).__name__}: {exc}"
            if signature not in self._tracebacks_logged and len(self._tracebacks_logged) < 1000:
                self._tracebacks_logged.add(signature)
                log.error(
                    "Internal error in %s service=%s/%s", action, namespace, name, exc_info=exc
                )
        if reason is not None and body is not None:
            self._report_failure(key, body, reason, message)
        if action == "reconcile":
            # The retry is the queue's, not Kopf's: Kopf re-runs a handler only while the spec
            # differs from its last-handled configuration, so after A -> B (failing) -> A it
            # would call nothing and status would stay at B's generation (#20). A successful
            # retry ends the chain; a deferred one wants the key again at the backoff's end.
            self._want((namespace, name), self._monotonic() + delay)
        return RetryableError(message, delay=delay)

    def _report_failure(self, key: FailureKey, body: Obj, reason: Reason, message: str) -> None:
        """The failure's conditions (written when they change) and one Warning per message."""
        try:
            old = parse_status(body.get("status"))
            generation = (body.get("metadata") or {}).get("generation")
            new = failed_status(old, reason, message, self.clock(), generation)
            if new != old:
                meta = body["metadata"]
                self.gw.apply_status(
                    str(meta.get("namespace", "default")), str(meta["name"]), new.to_wire()
                )
            if self._failures_warned.get(key) != message:
                self.gw.emit_event(service_event(body, "Warning", reason, message))
                self._failures_warned[key] = message
        except Exception as exc:  # reporting must never mask the failure
            log.info(
                "Failed to record the failure service=%s/%s error=%s",
                key[0],
                key[1],
                one_line(str(exc)),
            )

    def _prefetch_batch(self, key: Key) -> None:
        """Before an evaluation: unless an earlier batch covered `key`, fetch the metrics of every
        service due now in one batch; the workers evaluating the others take their share.
        A failing prefetch only costs the batching: each evaluation then queries for itself."""
        if not self.evaluator.batches:
            return
        with self._batch_guard:
            if key in self._batched:
                self._batched.discard(key)
                return
            due = self.evaluations.due()
            self._batched = set(due) - {key}
            try:
                self._prefetch(due)
            except Exception:
                log.exception("Failed to prepare evaluations")

    def _prefetch(self, keys: list[tuple[str, str]]) -> None:
        """The due services' metrics in one batch (reads are cached).

        Without Prometheus nothing is read: decoding every due service here only to find no
        metrics source cost a third of the idle operator's CPU (#21, the steady-window profile).
        """
        if not self.evaluator.batches:
            return
        bodies = [self.gw.get(Kind.VLLM_SERVICE, namespace, name) for namespace, name in keys]
        self.evaluator.prefetch([b for b in bodies if b is not None])

    def reconcile_body(self, body: Obj) -> Outcome:
        """One pass over a VLLMService object as read from the API."""
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
        generation = meta.get("generation")
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
            self._write_status(body, old_status, status, outcome)
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
            self._write_status(body, old_status, status, outcome)
            return outcome

        nodes = self._nodes()
        self.settle.note_nodes((namespace, name), self._nodes_digest(nodes))
        groups = group_gpu_nodes(nodes)
        budgets = self._budgets(service, nodes, now, outcome)
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
        # placement.strategy Preferred (#29): each pool's share of the total.
        placement = place_replicas(
            self.gw, service, pools, nodes, old_status.placement, old_status.overrides, now
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
                live = self.gw.get(kind, namespace, pool.deployment["metadata"]["name"])
                if live is not None and not _owned_by(live, service):
                    conflicts.append(f"{kind} {namespace}/{pool.deployment['metadata']['name']}")
                    pool.deployment_name = None
                    continue
                # gpuAllocation dra: the claim template first, so the pods can claim from it.
                outcome.applied.extend(apply_claim_template(self.gw, pool.claim_template, live))
                # A new plan of a running pool is tried on one canary pod first (#27).
                step = canary_gate(self.gw, service, pool, live, old_status, now)
                outcome.applied.extend(step.applied)
                outcome.deleted.extend(step.deleted)
                for type_, reason, message in step.events:
                    self._event(service, type_, reason, message, outcome)
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
            self._plans_applied(service, applied, outcome)

        owned = [
            d
            for kind in POOL_KINDS
            for d in self.gw.list_owned(kind, namespace, selector_labels(name))
            if _owned_by(d, service)
        ]
        existing = self._prune(service, owned, desired_names, outcome)
        outcome.deleted.extend(prune_claim_templates(self.gw, service, pools))
        if existing:
            for obj in (render_service(service), render_pdb(service)):
                kind = Kind(obj["kind"])
                live_obj = self.gw.get(kind, namespace, obj["metadata"]["name"])
                if live_obj is not None and not _owned_by(live_obj, service):
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
        self._count_ready_groups(service, pools)

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
            self._placed(service, placement, outcome)
        self._warn_conflicts(service, conflicts, outcome)
        self._write_status(body, old_status, status, outcome, service)
        self.pool_plans.set((namespace, name), [(p.gpu_type, p.feasible) for p in pools])
        return outcome

    # ------------------------------------------------------------------------------ admission

    def review_admission(self, obj: Obj, old: Obj | None = None) -> Verdict:
        """The admission webhook's decision for one VLLMService (reconcile/admission.py)."""
        started = time.monotonic()
        try:
            if old is not None and old.get("spec") == obj.get("spec"):
                verdict = review(obj, {}, self.admission_resolver, old)  # no inventory needed
            else:
                verdict = review(obj, self.gpu_inventory(), self.admission_resolver, old)
        except Exception:
            m.ADMISSIONS.labels("error").inc()
            raise
        m.ADMISSIONS.labels(verdict.outcome).inc()
        m.ADMISSION_SECONDS.observe(time.monotonic() - started)
        return verdict

    def gpu_inventory(self) -> dict[str, GpuNodeGroup]:
        """The GPU node groups admission plans against: the reconcile's own node access
        (`_nodes`, a short-lived cache), grouped once per node list, so a burst of admission
        requests lists the nodes at most once per cache period, never once per request."""
        nodes = self._nodes()
        cached = self._admission_groups
        if cached is not None and cached[0] is nodes:
            m.ADMISSION_INVENTORY.labels("cache").inc()
            return cached[1]
        m.ADMISSION_INVENTORY.labels("api").inc()
        groups = group_gpu_nodes(nodes)
        self._admission_groups = (nodes, groups)
        return groups

    # ------------------------------------------------------------------------------- helpers

    def _nodes_digest(self, nodes: list[Obj]) -> str:
        """What of the nodes a plan reads (triggers.node_fingerprint), as one digest; computed
        once per node list (the short-lived node cache hands the same list to a burst)."""
        cached = self._nodes_digested
        if cached is not None and cached[0] is nodes:
            return cached[1]
        digest = hashlib.sha256(
            repr(
                sorted(
                    (
                        str((n.get("metadata") or {}).get("name", "")),
                        node_fingerprint(n, deleted=False),
                    )
                    for n in nodes
                )
            ).encode()
        ).hexdigest()
        self._nodes_digested = (nodes, digest)
        return digest

    def _count_ready_groups(self, service: VLLMService, pools: list[PoolOutcome]) -> None:
        """A multi-node pool's ready groups as its pods in the watch cache show them, never more
        than its LeaderWorkerSet reports: that status lags its pods (#32: a group whose worker
        was deleted while the LeaderWorkerSet controller was down, or Pending on a cordoned
        node, was reported Ready for 12-18 s). A group is ready when every one of its `size`
        pods is Ready and none is being deleted."""
        groups = [p for p in pools if (p.live or {}).get("kind") == Kind.LEADER_WORKER_SET.value]
        if not groups:
            return
        pods = self.gw.list_pods(service.namespace, selector_labels(service.name))
        for pool in groups:
            live = pool.live or {}
            lws_name = (live.get("metadata") or {}).get("name")
            template = (live.get("spec") or {}).get("leaderWorkerTemplate") or {}
            size = int(template.get("size") or 1)
            ready_pods: dict[str, int] = {}
            for pod in pods:
                meta = pod.get("metadata") or {}
                labels = meta.get("labels") or {}
                if labels.get(LWS_LABEL_NAME) != lws_name or meta.get("deletionTimestamp"):
                    continue
                if _pod_ready(pod):
                    index = str(labels.get(LWS_LABEL_GROUP_INDEX, ""))
                    ready_pods[index] = ready_pods.get(index, 0) + 1
            counted = sum(1 for n in ready_pods.values() if n >= size)
            status = dict(live.get("status") or {})
            if int(status.get("readyReplicas") or 0) > counted:
                status["readyReplicas"] = counted
                pool.live = {**live, "status": status}

    def _drop_node_cache(self) -> None:
        """A node changed something the planner reads: the next reconcile lists afresh."""
        self._node_cache = None

    def _fleet_observations(
        self, service: VLLMService, own: Sequence[Observation]
    ) -> list[Observation]:
        """The service's own measurements plus those of the cluster's other services with the
        same engine configuration (reconcile/observed.py fleet_observations). Sharing is an
        improvement, never a reason to fail: a list the API refuses plans from its own."""
        try:
            bodies = self.gw.list_services()
        except GatewayError as exc:
            log.debug("Skipped fleet observations service=%s error=%s", service.name, exc)
            return list(own)
        members = fleet_members(bodies, service.namespace, service.name, service.spec.model.name)
        return fleet_observations(service.spec, own, members)

    def _nodes(self) -> list[Obj]:
        if self._node_cache_seconds <= 0:
            return self._inventory_nodes()
        with self._node_cache_guard:
            cached = self._node_cache
            now = time.monotonic()
            if cached is not None and now - cached[0] < self._node_cache_seconds:
                return cached[1]
            nodes = self._inventory_nodes()
            self._node_cache = (now, nodes)
            return nodes

    def _inventory_nodes(self) -> list[Obj]:
        """Nodes as the inventory sees them: with what their DRA ResourceSlices describe
        (reconcile/slices.py; slices win over GFD labels, a disagreement is a node Warning)."""
        nodes, mismatches = merge_slices(self.gw.list_nodes(), self.gw.list_resource_slices())
        for event in self._slice_mismatches.new_events(mismatches):
            self.gw.emit_event(event)
        return nodes

    def _budgets(
        self, service: VLLMService, nodes: list[Obj], now: datetime, outcome: Outcome
    ) -> MeasuredBudgets:
        """Probe budgets from the node annotations (decoded once per change, never raising).

        An ignored annotation gets one Warning Event on its Node per (node, problem), however many
        services reconcile; the services that could use that GPU type carry a note in status.
        """
        if not any(
            GPU_BUDGET_ANNOTATION in ((n.get("metadata") or {}).get("annotations") or {})
            for n in nodes
        ):
            return MeasuredBudgets()
        pods = self.gw.list_pods(service.namespace, selector_labels(service.name))
        own = [str((p.get("metadata") or {}).get("uid", "")) for p in pods]
        budgets = measured_budgets(nodes, now, own, cache=self._budget_cache)
        names = [str((n.get("metadata") or {}).get("name", "")) for n in nodes]
        self._budget_cache.retain(names)
        uids = {
            str((n.get("metadata") or {}).get("name", "")): str(
                (n.get("metadata") or {}).get("uid", "")
            )
            for n in nodes
        }
        with self._budget_events_guard:
            fresh = {
                node: ignored
                for node, ignored in budgets.ignored.items()
                if self._budget_events.get(node) != ignored.rejection.problem
            }
            for node, ignored in fresh.items():
                self._budget_events[node] = ignored.rejection.problem
            for node in set(self._budget_events) - set(budgets.ignored):
                del self._budget_events[node]
        for node, ignored in sorted(fresh.items()):
            self._node_event(
                node,
                uids.get(node, ""),
                Reason.PROBE_BUDGET_IGNORED,
                f"Ignored the probe budget of node {node} ({ignored.rejection.problem}): "
                f"{ignored.rejection.message}",
                outcome,
            )
        return budgets

    def _warn_conflicts(self, service: VLLMService, conflicts: list[str], outcome: Outcome) -> None:
        """One Warning NameConflict Event per object and service (again only after it cleared)."""
        key = (service.namespace, service.name)
        warned = self._conflicts_warned.setdefault(key, set())
        for obj in conflicts:
            if obj not in warned:
                self._event(
                    service,
                    "Warning",
                    Reason.NAME_CONFLICT,
                    f"{obj} exists and is not owned by this VLLMService: left untouched",
                    outcome,
                )
        self._conflicts_warned[key] = set(conflicts)

    def _node_event(
        self, node: str, uid: str, reason: Reason, message: str, outcome: Outcome
    ) -> None:
        self.gw.emit_event(node_event(node, uid, reason, message))
        outcome.events.append(reason)

    def _prune(
        self,
        service: VLLMService,
        owned: list[Obj],
        desired: set[tuple[Kind, str]],
        outcome: Outcome,
    ) -> list[Obj]:
        """Delete pool workloads of GPU types the spec no longer allows, and a pool's workload of
        the other kind once the pool changed kind (a Deployment replaced by a LeaderWorkerSet of
        the same name when a replica now spans nodes, or back).

        A pool whose type is still allowed is kept even when it is not desired right now (its
        nodes vanished, or a new spec is infeasible): no churn of GPU-holding pods for a
        transient or a rejected change.
        """
        allowed = {canonical_label(g) for g in service.spec.placement.gpu_types}
        desired_names = {n for _, n in desired}
        kept: list[Obj] = []
        for dep in owned:
            meta = dep["metadata"]
            kind = Kind(dep.get("kind") or Kind.DEPLOYMENT)
            kept.append(dep)
            if (kind, meta["name"]) in desired:
                continue
            if (meta.get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
                continue
            gpu_type = (meta.get("annotations") or {}).get(ANNOTATION_GPU_TYPE, "")
            replaced = meta["name"] in desired_names
            if canonical_label(gpu_type) in allowed and not replaced:
                continue
            self.gw.delete(kind, service.namespace, meta["name"])
            kept.pop()
            outcome.deleted.append(f"{kind}/{meta['name']}")
            why = (
                f"the pool is now a {'Deployment' if kind is Kind.LEADER_WORKER_SET else 'LeaderWorkerSet'}"
                if replaced
                else f"GPU type {gpu_type} is no longer allowed"
            )
            self._event(
                service,
                "Normal",
                Reason.POOL_REMOVED,
                f"Deleted {kind} {meta['name']}: {why}",
                outcome,
            )
        return kept

    def _placed(self, service: VLLMService, decision: PlacementDecision, outcome: Outcome) -> None:
        """An Event per placement change; a later look when a time-based rule may fire (nothing
        the controller watches changes when a Pending pod turns Unschedulable or another
        workload's pods end): a wanted reconcile at that time on the work queue (the earliest
        wish of a key counts, so an earlier pending one is kept)."""
        for reason, message in decision.events:
            self._event(service, "Normal", reason, message, outcome)
        if decision.recheck_seconds is not None:
            key = (service.namespace, service.name)
            self._want(key, self._monotonic() + decision.recheck_seconds)

    def _plans_applied(self, service: VLLMService, applied: list[str], outcome: Outcome) -> None:
        """One PlanApplied Event for every pool a reconcile applied (#21: one Event per service
        and change, not one per Deployment; at most one Event write per service in a burst)."""
        if applied:
            self._event(service, "Normal", Reason.PLAN_APPLIED, "; ".join(applied), outcome)
            applied.clear()

    def _event(
        self, about: VLLMService | Obj, type_: str, reason: Reason, message: str, outcome: Outcome
    ) -> None:
        self.gw.emit_event(service_event(about, type_, reason, message))
        outcome.events.append(reason)

    def _write_status(
        self,
        body: Obj,
        old: VLLMServiceStatus,
        new: VLLMServiceStatus,
        outcome: Outcome,
        service: VLLMService | None = None,
    ) -> None:
        """Write status only if it changed; an Event per condition decision (not per message)."""
        if new == old:
            return
        meta = body["metadata"]
        self.gw.apply_status(meta.get("namespace", "default"), meta["name"], new.to_wire())
        outcome.status_written = True
        for type_, reason, message in transition_events(old, new):
            self._event(service or body, type_, reason, message, outcome)


def _pod_ready(pod: Obj) -> bool:
    """The pod's Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    )


def _owned_by(obj: Obj, service: VLLMService) -> bool:
    """Whether `obj` is controlled by this VLLMService (its controller ownerReference, by UID).

    Objects with a derived name that someone else created are never modified or adopted.
    """
    uid = str(service.metadata.get("uid", ""))
    return any(
        ref.get("kind") == "VLLMService"
        and ref.get("controller")
        and ref.get("name") == service.name
        and (not uid or ref.get("uid") == uid)
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
    )


__all__ = ["Controller", "Outcome", "RetryableError", "backoff_delay", "LABEL_INSTANCE"]
