"""An idle remediation evaluation of an unchanged, calm service does no work (#32 steady CPU).

At 1000 services the idle operator spent 7.9 % of a core with no API traffic at all: every
evaluation decoded the service and its pods from the watch cache, validated them and ran the
policy, to find nothing to do, every 30 s per service. Now an evaluation whose last run found the
service calm (reconcile/evaluate.py `_is_calm`) first compares what it would read by
resourceVersion (`WatchCache.versions`, nothing decoded) and stops there when nothing changed.

These tests drive the controller on the watch cache over the fake API, with a stand-in for the
API server's resourceVersions (`Api.sync`: every object whose content changed gets a new one and
is delivered as a watch event), and count the work: cache decodes and `decide()` calls. They also
hold what must not be lost: a pod change, a spec change, a startup stall that comes due with no
change at all, a configured metrics source, and the periodic full evaluation.
"""

from datetime import datetime, timedelta
from typing import Any

import pytest

from vllm_operator import remediation
from vllm_operator.api.reasons import Reason
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube import cache as cache_module
from vllm_operator.kube.cache import CachedGateway, WatchCache
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind, Obj
from vllm_operator.metrics.signals import ServiceMetrics
from vllm_operator.reconcile import evaluate as evaluate_module
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.evaluate import FULL_EVALUATION_EVERY
from vllm_operator.remediation.health import startup_budget
from vllm_operator.rendering.names import common_labels, pool_selector_labels
from vllm_operator.rendering.workload import startup_budget_seconds

from .test_controller import OfflineHub, cluster, condition, example, make_ready, status_of
from .test_evaluate import T0, Clock

NS, NAME, POOL = "default", "llama-8b-chat", "NVIDIA-L4"
POD = f"{NAME}-l4-abc"
INTERVAL = timedelta(seconds=30)  # the default evaluationIntervalSeconds


class Api:
    """The fake gateway's objects as an API server and its watch would deliver them: each
    object whose content changed since the last `sync` gets the next resourceVersion."""

    def __init__(self, fake: FakeGateway, cache: WatchCache) -> None:
        self.fake = fake
        self.cache = cache
        self._seen: dict[Any, tuple[str, str]] = {}

    def sync(self) -> None:
        for key, obj in sorted(self.fake.objects.items()):
            meta = obj.setdefault("metadata", {})
            meta.pop("resourceVersion", None)
            text = repr(obj)
            if self._seen.get(key, ("", ""))[0] != text:
                self._seen[key] = (text, self.fake.next_resource_version())
            meta["resourceVersion"] = self._seen[key][1]
            self.cache.observe(key[0], "MODIFIED", obj)
        for node in self.fake.nodes:
            node["metadata"].setdefault("resourceVersion", "1")
            self.cache.observe(Kind.NODE, "MODIFIED", node)


def put_pod(
    fake: FakeGateway,
    *,
    ready: bool,
    restarts: int = 0,
    terminated: dict[str, Any] | None = None,
    running_since: datetime | None = None,
) -> None:
    """(Re)write the pool's pod as the kubelet reports it (managed-by label: the cache keeps it)."""
    container: dict[str, Any] = {
        "name": "vllm",
        "ready": ready,
        "restartCount": restarts,
        "state": {"running": {"startedAt": (running_since or T0 - timedelta(hours=1)).isoformat()}},
    }
    if terminated is not None:
        container["lastState"] = {"terminated": terminated}
    fake.objects[(Kind.POD, NS, POD)] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": POD,
            "namespace": NS,
            "labels": {**common_labels(NAME), **pool_selector_labels(NAME, POOL)},
        },
        "status": {"containerStatuses": [container]},
    }


class Work:
    """Counts what an evaluation costs: objects decoded from the cache, policy decisions."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.decodes = 0
        self.decides = 0
        decode = cache_module._Entry.decode
        decide = remediation.decide

        def counted_decode(entry: Any) -> Obj:
            self.decodes += 1
            return decode(entry)

        def counted_decide(*args: Any, **kwargs: Any) -> Any:
            self.decides += 1
            return decide(*args, **kwargs)

        monkeypatch.setattr(cache_module._Entry, "decode", counted_decode)
        monkeypatch.setattr(evaluate_module, "decide", counted_decide)

    def take(self) -> tuple[int, int]:
        """(decodes, decides) since the last take."""
        found = (self.decodes, self.decides)
        self.decodes = self.decides = 0
        return found


def setup(
    monkeypatch: pytest.MonkeyPatch, *, ready: bool = True, running_since: datetime | None = None
) -> tuple[FakeGateway, Api, Controller, Clock, Work]:
    fake = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["remediation"] = {"mode": "auto"}
    fake.add(svc)
    cache = WatchCache()
    api = Api(fake, cache)
    api.sync()
    cache.mark_synced()
    clock = Clock()
    ctl = Controller(
        CachedGateway(fake, cache), HubArchitectureResolver(fake, OfflineHub()), clock=clock
    )
    ctl.reconcile(NS, NAME)
    make_ready(fake, NS, f"{NAME}-l4")
    put_pod(fake, ready=ready, running_since=running_since)
    api.sync()
    ctl.reconcile(NS, NAME)
    api.sync()
    return fake, api, ctl, clock, Work(monkeypatch)


def evaluate(api: Api, ctl: Controller, clock: Clock) -> None:
    """One interval on: the evaluation, then what it wrote arrives through the watch."""
    clock.now += INTERVAL
    ctl.evaluate(NS, NAME)
    api.sync()


def test_an_idle_evaluation_of_an_unchanged_calm_service_decodes_and_decides_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, api, ctl, clock, work = setup(monkeypatch)
    for _ in range(2):  # the first one writes its conditions; the second finds all as it was
        evaluate(api, ctl, clock)
    decodes, decides = work.take()
    assert decides == 2 and decodes > 0
    writes = fake.total_writes()

    for _ in range(6):
        evaluate(api, ctl, clock)
    assert work.take() == (0, 0)
    assert fake.total_writes() == writes


def test_a_changed_pod_makes_the_next_evaluation_run_in_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, api, ctl, clock, work = setup(monkeypatch)
    for _ in range(3):
        evaluate(api, ctl, clock)
    work.take()

    # The kubelet reports an OOM kill: the pod's resourceVersion changes, nothing else does.
    crashed = clock.now + timedelta(seconds=10)
    put_pod(
        fake,
        ready=False,
        restarts=1,
        terminated={
            "reason": "OOMKilled",
            "exitCode": 137,
            "startedAt": (crashed - timedelta(hours=1)).isoformat(),
            "finishedAt": crashed.isoformat(),
        },
    )
    api.sync()
    evaluate(api, ctl, clock)  # the next due evaluation, at the same interval as before
    assert work.take()[1] == 1
    cond = condition(status_of(fake, NAME), "Degraded")
    assert (cond["status"], cond["reason"]) == ("True", Reason.HOST_OOM.value), cond
    assert any(e.reason == Reason.HOST_OOM for e in fake.events)


def test_a_spec_change_makes_the_next_evaluation_run_in_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, api, ctl, clock, work = setup(monkeypatch)
    for _ in range(3):
        evaluate(api, ctl, clock)
    work.take()
    live = fake.objects[(Kind.VLLM_SERVICE, NS, NAME)]
    live["spec"]["remediation"] = {"mode": "recommend"}
    live["metadata"]["generation"] += 1
    api.sync()
    evaluate(api, ctl, clock)
    assert work.take()[1] == 1


def test_a_startup_stall_comes_due_without_any_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod Running but not Ready changes nothing while it loads; only the clock says when it
    has outlived its startup budget. Such a service is not calm: every evaluation runs."""
    fake, api, ctl, clock, work = setup(monkeypatch)
    plan = status_of(fake, NAME)["pools"][0]["plan"]
    weights = plan["memory"]["weightsGiB"] * plan["engineArgs"]["tensor_parallel_size"]
    budget = startup_budget(weights, probe_budget_s=startup_budget_seconds(weights)).limit
    put_pod(fake, ready=False, running_since=clock.now - budget + 4 * INTERVAL)
    api.sync()
    for _ in range(3):
        evaluate(api, ctl, clock)
        assert condition(status_of(fake, NAME), "Degraded")["status"] == "False"
    for _ in range(2):
        evaluate(api, ctl, clock)
    cond = condition(status_of(fake, NAME), "Degraded")
    assert (cond["status"], cond["reason"]) == ("True", Reason.STARTUP_STALLED.value), cond
    assert work.take()[1] == 5


def test_a_termination_stamped_ahead_of_the_operator_clock_is_found_once_the_clock_passes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node's clock ahead of the operator's: a termination "in the future" is not counted yet
    (remediation/health.py), and nothing changes when the clock passes it."""
    fake, api, ctl, clock, _ = setup(monkeypatch)
    for _ in range(2):
        evaluate(api, ctl, clock)
    finished = clock.now + 2 * INTERVAL + timedelta(seconds=15)
    put_pod(
        fake,
        ready=True,
        restarts=1,
        terminated={
            "reason": "OOMKilled",
            "exitCode": 137,
            "startedAt": (finished - timedelta(hours=1)).isoformat(),
            "finishedAt": finished.isoformat(),
        },
    )
    api.sync()
    for _ in range(2):
        evaluate(api, ctl, clock)
        assert condition(status_of(fake, NAME), "Degraded")["status"] == "False"
    evaluate(api, ctl, clock)  # the first evaluation after it
    cond = condition(status_of(fake, NAME), "Degraded")
    assert (cond["status"], cond["reason"]) == ("True", Reason.HOST_OOM.value), cond


def test_a_calm_service_is_evaluated_in_full_at_least_every_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, api, ctl, clock, work = setup(monkeypatch)
    for _ in range(2):
        evaluate(api, ctl, clock)
    work.take()
    period = int(FULL_EVALUATION_EVERY / INTERVAL)
    for _ in range(2 * period):
        evaluate(api, ctl, clock)
    assert work.take()[1] == 2


class Unavailable:
    """A metrics source that has no samples (metrics change without any object changing)."""

    def __init__(self) -> None:
        self.queries = 0

    def observe(
        self, *, namespace: str, pods: Any, vllm_version: str, window_s: int, now: datetime
    ) -> ServiceMetrics:
        self.queries += 1
        return ServiceMetrics(available=False, message="no samples")


def test_with_a_metrics_source_every_evaluation_queries_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, api, ctl, clock, work = setup(monkeypatch)
    source = Unavailable()
    ctl.evaluator.metrics = source
    for _ in range(5):
        evaluate(api, ctl, clock)
    assert source.queries == 5
    assert work.take()[1] == 5


def test_without_a_watch_cache_every_evaluation_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = cluster()
    fake.add(example("llama-3.1-8b-l4.yaml"))
    clock = Clock()
    ctl = Controller(fake, HubArchitectureResolver(fake, OfflineHub()), clock=clock)
    ctl.reconcile(NS, NAME)
    make_ready(fake, NS, f"{NAME}-l4")
    put_pod(fake, ready=True)
    ctl.reconcile(NS, NAME)
    work = Work(monkeypatch)
    for _ in range(4):
        clock.now += INTERVAL
        ctl.evaluate(NS, NAME)
    assert work.take()[1] == 4


# -- WatchCache.versions -------------------------------------------------------------------------


def pod(name: str, rv: str, instance: str = NAME) -> Obj:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "resourceVersion": rv,
            "labels": {**common_labels(instance), **pool_selector_labels(instance, POOL)},
        },
    }


def test_versions_name_what_a_read_would_return_without_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = WatchCache()
    selector = pool_selector_labels(NAME, POOL)
    assert cache.versions(Kind.POD, NS, selector=selector) is None  # not synced: not answered
    for obj in (pod("b", "7"), pod("a", "5"), pod("other", "9", instance="other")):
        cache.observe(Kind.POD, "ADDED", obj)
    cache.observe(
        Kind.VLLM_SERVICE,
        "ADDED",
        example("llama-3.1-8b-l4.yaml")
        | {"metadata": {"name": NAME, "namespace": NS, "resourceVersion": "3"}},
    )
    cache.mark_synced()
    work = Work(monkeypatch)
    assert cache.versions(Kind.POD, NS, selector=selector) == (("a", 5), ("b", 7))
    assert cache.versions(Kind.VLLM_SERVICE, NS, name=NAME) == ((NAME, 3),)
    assert cache.versions(Kind.VLLM_SERVICE, NS, name="absent") == ()
    assert cache.versions(Kind.POD, NS, selector={"app": "x"}) is None  # no instance: no index
    assert work.take() == (0, 0)

    cache.observe(Kind.POD, "MODIFIED", pod("a", "8"))
    cache.observe(Kind.POD, "DELETED", pod("b", "10"))
    assert cache.versions(Kind.POD, NS, selector=selector) == (("a", 8),)
    cache.invalidate(Kind.VLLM_SERVICE, NS, NAME)  # a conflict: the next read asks the API
    assert cache.versions(Kind.VLLM_SERVICE, NS, name=NAME) is None


def test_versions_are_not_answered_for_an_expired_entry() -> None:
    now = [0.0]
    cache = WatchCache(ttl=60, clock=lambda: now[0])
    cache.observe(Kind.POD, "ADDED", pod("a", "5"))
    cache.mark_synced()
    selector = pool_selector_labels(NAME, POOL)
    assert cache.versions(Kind.POD, NS, selector=selector) == (("a", 5),)
    now[0] = 61.0
    assert cache.versions(Kind.POD, NS, selector=selector) is None
