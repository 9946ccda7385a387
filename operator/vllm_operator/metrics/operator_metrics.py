"""The operator's own Prometheus metrics (reconciles, durations, errors, plans, API writes).

Served by `vllm-operator run` on its metrics port; the PrometheusRule's reconcile-error alert and
the dashboard read these names.
"""

import threading
from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILES = Counter(
    "vllm_operator_reconciles",
    "Reconciles of VLLMServices by result (ok, error, invalid).",
    ["result"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "vllm_operator_reconcile_duration_seconds",
    "Wall time of one reconcile of one VLLMService.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "vllm_operator_reconcile_errors",
    "Reconciles that failed and will be retried, by reason.",
    ["reason"],
    registry=REGISTRY,
)
API_WRITES = Counter(
    "vllm_operator_api_writes",
    "Write calls to the Kubernetes API by kind (apply, delete, status, event, pod, eviction, "
    "finalizer).",
    ["kind"],
    registry=REGISTRY,
)
API_READS = Counter(
    "vllm_operator_api_reads",
    "Read calls that reached the Kubernetes API (the watch caches answer the rest), by verb and "
    "kind (get:Deployment, list:Pod, ...).",
    ["kind"],
    registry=REGISTRY,
)
WORKQUEUE_DEPTH = Gauge(
    "vllm_operator_workqueue_depth",
    "Service keys ready on the work queue, waiting for a worker (delayed adds not counted).",
    registry=REGISTRY,
)
WORKQUEUE_IN_FLIGHT = Gauge(
    "vllm_operator_workqueue_in_flight",
    "Service keys a worker is reconciling now; with the depth at 0 too, every write of the "
    "reconciles so far is counted.",
    registry=REGISTRY,
)
PLANS = Gauge(
    "vllm_operator_pool_plans",
    "Pools of all VLLMServices by GPU type and feasibility (the latest plan of each service).",
    ["gpu_type", "feasible"],
    registry=REGISTRY,
)


class PoolPlans:
    """Keeps `vllm_operator_pool_plans` a count of the *current* pools of every service.

    Why: setting a label set to 1 and never clearing it left feasible and infeasible both at 1
    forever after a plan changed. Each service's latest pools are kept with a running count per
    label set; a label set no service has any more is removed (no stale series).

    The counts change by what one service's pools changed, not recomputed over every service:
    recounting all of them made each reconcile O(services), a restart resync of 1000 unchanged
    services O(N^2) (#32 no-op reconcile); an unchanged service touches no series.
    """

    def __init__(self, gauge: Gauge = PLANS) -> None:
        self._gauge = gauge
        self._by_service: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._counts: Tally[tuple[str, str]] = Tally()
        self._guard = threading.Lock()

    def set(self, service: tuple[str, str], pools: Iterable[tuple[str, bool]]) -> None:
        new = [(gpu, str(feasible).lower()) for gpu, feasible in pools]
        with self._guard:
            old = self._by_service.get(service)
            if old == new:
                return
            self._by_service[service] = new
            self._update(old or [], new)

    def forget(self, service: tuple[str, str]) -> None:
        with self._guard:
            old = self._by_service.pop(service, None)
            if old is not None:
                self._update(old, [])

    def _update(self, old: list[tuple[str, str]], new: list[tuple[str, str]]) -> None:
        """Move the counts of the label sets in `old` and `new` (under the guard)."""
        for labels in old:
            self._counts[labels] -= 1
        for labels in new:
            self._counts[labels] += 1
        for labels in {*old, *new}:
            count = self._counts[labels]
            if count > 0:
                self._gauge.labels(*labels).set(count)
            else:
                del self._counts[labels]
                self._gauge.remove(*labels)


REMEDIATIONS = Counter(
    "vllm_operator_remediation_actions",
    "Remediation actions by kind and mode (auto applies, recommend only reports).",
    ["action", "mode"],
    registry=REGISTRY,
)

ADMISSIONS = Counter(
    "vllm_operator_admission_reviews",
    "Admission reviews of VLLMServices by outcome (allowed, warned, denied, error).",
    ["outcome"],
    registry=REGISTRY,
)
ADMISSION_SECONDS = Histogram(
    "vllm_operator_admission_duration_seconds",
    "Wall time of one admission review in the operator (validation, inventory, planner).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    registry=REGISTRY,
)
ADMISSION_INVENTORY = Counter(
    "vllm_operator_admission_inventory_reads",
    "GPU inventories admission reviews used, by source: cache (no API call) or api (the "
    "node cache had expired and the review listed the nodes).",
    ["source"],
    registry=REGISTRY,
)
