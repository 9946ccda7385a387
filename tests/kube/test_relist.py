"""The watch cache's periodic complete list (kube/relist.py, #32): a quiet cluster costs O(kinds)
lists per period instead of O(services) reads per cache expiry, and drift made behind the cache
(an object changed or deleted with no event) is still found within one period."""

from collections import Counter
from typing import Any

import pytest

from vllm_operator.kube import relist as relist_module
from vllm_operator.kube.cache import DEFAULT_TTL_SECONDS, CachedGateway, WatchCache
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import GatewayError, Kind, Obj
from vllm_operator.kube.relist import (
    RELIST_ORDER,
    RELIST_SECONDS,
    RETRY_SECONDS,
    PeriodicRelist,
    backstop_ttl,
)

from .test_cache import Clock, ReadCounter

MANAGED_BY = {"app.kubernetes.io/managed-by": "vllm-operator"}
INSTANCE = "app.kubernetes.io/instance"
EVALUATION = 30.0  # the default remediation evaluation interval: each service reads this often


def obj(kind: Kind, name: str, instance: str, rv: int, namespace: str = "ns") -> Obj:
    api = {
        Kind.DEPLOYMENT: "apps/v1",
        Kind.POD: "v1",
        Kind.SERVICE: "v1",
        Kind.PDB: "policy/v1",
        Kind.VLLM_SERVICE: "serving.vllm-operator.dev/v1alpha1",
    }[kind]
    labels = {} if kind is Kind.VLLM_SERVICE else {**MANAGED_BY, INSTANCE: instance}
    return {
        "apiVersion": api,
        "kind": str(kind),
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "resourceVersion": str(rv),
        },
        "spec": {},
    }


def quiet_cluster(
    services: int, *, ttl: float, namespaces: tuple[str, ...] = ("ns",)
) -> tuple[FakeGateway, WatchCache, Clock]:
    """`services` converged services (the VLLMService, its Deployment, Service, PDB and two pods)
    in each namespace, delivered to a synced cache as Kopf's start listing delivers them."""
    fake = FakeGateway()
    rv = 0
    for namespace in namespaces:
        for i in range(services):
            name = f"s{i}"
            for kind, child in [
                (Kind.VLLM_SERVICE, name),
                (Kind.DEPLOYMENT, f"{name}-l4"),
                (Kind.SERVICE, name),
                (Kind.PDB, name),
                (Kind.POD, f"{name}-l4-a"),
                (Kind.POD, f"{name}-l4-b"),
            ]:
                rv += 1
                fake.add(obj(kind, child, name, rv, namespace))
    fake.nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0", "resourceVersion": "1"}}
    ]
    clock = Clock()
    cache = WatchCache(namespaces if namespaces != ("ns",) else (), ttl=ttl, clock=clock)
    for (kind, _, _), o in sorted(fake.objects.items()):
        cache.observe(kind, None, o)
    for node in fake.nodes:
        cache.observe(Kind.NODE, None, node)
    cache.mark_synced()
    return fake, cache, clock


def idle_reads(gw: CachedGateway, services: int, namespace: str = "ns") -> None:
    """What a no-op reconcile and an idle evaluation of each service read."""
    for i in range(services):
        name = f"s{i}"
        assert gw.get(Kind.VLLM_SERVICE, namespace, name) is not None
        assert gw.get(Kind.DEPLOYMENT, namespace, f"{name}-l4") is not None
        assert len(gw.list_pods(namespace, {INSTANCE: name})) == 2
    assert gw.list_nodes()


def run_quiet(
    fake: FakeGateway,
    cache: WatchCache,
    clock: Clock,
    services: int,
    minutes: float,
    relist: PeriodicRelist | None,
) -> Counter[str]:
    """`minutes` of a quiet cluster: every service reads every EVALUATION seconds, the periodic
    list runs when due; returns the per-service reads that reached the API."""
    counter = ReadCounter(fake)
    gw = CachedGateway(counter, cache)
    end = clock.now + minutes * 60
    while clock.now < end:
        if relist is not None:
            assert relist.run_due() == []  # quiet: nothing changed behind the cache
        idle_reads(gw, services)
        clock.now += EVALUATION
    return counter.reads


@pytest.mark.parametrize("services", [20, 80])
def test_a_quiet_cluster_costs_a_few_lists_per_period_not_reads_per_service(
    services: int,
) -> None:
    """#32: with the per-entry expiry as the backstop (12 minutes), every unchanged service's
    objects were read again once per expiry (~1.4 pod lists a second at 1000 services). Over
    40 quiet minutes (more than three expiries) the periodic list reads each kind once per
    round, whatever the number of services, and nothing else reaches the API server."""
    fake, cache, clock = quiet_cluster(services, ttl=DEFAULT_TTL_SECONDS)
    before = run_quiet(fake, cache, clock, services, 40, None)
    assert before["list:Pod"] >= 3 * services  # the defect: reads per service per expiry

    fake, cache, clock = quiet_cluster(services, ttl=backstop_ttl(RELIST_SECONDS))
    relist = PeriodicRelist(fake, cache, rand=lambda: 1.0)  # the longest period: 660 s
    reads = run_quiet(fake, cache, clock, services, 40, relist)
    assert reads == Counter(), reads
    rounds = int(40 * 60 // (RELIST_SECONDS * (1 + relist_module.JITTER)))
    assert rounds == 3
    # One page per kind per round (80 services' 160 pods fit one page of 250).
    assert fake.pages == Counter({kind: rounds for kind in RELIST_ORDER}), fake.pages


def test_lists_are_paginated_and_every_page_confirms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relist_module, "LIST_PAGE", 7)
    fake, cache, clock = quiet_cluster(20, ttl=backstop_ttl(RELIST_SECONDS))
    relist = PeriodicRelist(fake, cache, rand=lambda: 1.0)
    reads = run_quiet(fake, cache, clock, 20, 40, relist)
    assert reads == Counter()
    assert fake.pages[Kind.POD] == 3 * 6  # 40 pods in pages of 7, three rounds
    assert fake.pages[Kind.NODE] == 3


def test_drift_made_while_quiet_is_found_within_one_period() -> None:
    """An object deleted with no event (the watch was reconnecting), and one changed with no
    event: the next periodic list hands both back (their services reconcile), the changed one
    is held at its new version, and the deleted one's next read asks the API server, whose 404
    makes the miss authoritative again."""
    fake, cache, clock = quiet_cluster(10, ttl=backstop_ttl(RELIST_SECONDS))
    relist = PeriodicRelist(fake, cache, rand=lambda: 0.0)  # the shortest period: 540 s
    counter = ReadCounter(fake)
    gw = CachedGateway(counter, cache)
    clock.now = 60
    del fake.objects[(Kind.DEPLOYMENT, "ns", "s3-l4")]
    del fake.objects[(Kind.POD, "ns", "s4-l4-a")]
    changed = fake.objects[(Kind.VLLM_SERVICE, "ns", "s5")]
    changed["spec"] = {"replicas": 2}
    changed["metadata"]["resourceVersion"] = "1000"
    clock.now = 500
    assert relist.run_due() == []  # not due yet
    assert gw.get(Kind.DEPLOYMENT, "ns", "s3-l4") is not None  # still believed: no event came
    clock.now = 541
    drifts = relist.run_due()
    found = sorted((d.kind, d.obj["metadata"]["name"], d.gone) for d in drifts)
    assert found == [
        (Kind.DEPLOYMENT, "s3-l4", True),
        (Kind.POD, "s4-l4-a", True),
        (Kind.VLLM_SERVICE, "s5", False),
    ]
    assert counter.reads == Counter()
    service = gw.get(Kind.VLLM_SERVICE, "ns", "s5")
    assert service is not None and service["spec"] == {"replicas": 2}  # from memory
    assert counter.reads == Counter()
    # What the reconciles of the owners read: the API answers, and the cache follows it.
    assert gw.get(Kind.DEPLOYMENT, "ns", "s3-l4") is None
    assert [p["metadata"]["name"] for p in gw.list_pods("ns", {INSTANCE: "s4"})] == ["s4-l4-b"]
    assert counter.reads == Counter({"get:Deployment": 1, "list:Pod": 1})
    assert gw.get(Kind.DEPLOYMENT, "ns", "s3-l4") is None
    assert len(gw.list_pods("ns", {INSTANCE: "s4"})) == 1
    assert counter.reads == Counter({"get:Deployment": 1, "list:Pod": 1})  # memory again
    # The next round finds nothing more.
    clock.now = 541 + 541
    assert relist.run_due() == []


def test_an_object_created_during_a_list_is_not_judged_by_it() -> None:
    """What the watch delivered after a list began is newer than the list: not unbelieved."""
    fake, cache, clock = quiet_cluster(2, ttl=backstop_ttl(RELIST_SECONDS))

    class Late(FakeGateway):
        def list_page(self, kind: Kind, *args: Any, **kwargs: Any) -> Any:
            page = fake.list_page(kind, *args, **kwargs)
            if kind is Kind.DEPLOYMENT:  # created after the list's snapshot, seen by the watch
                clock.now += 1
                cache.observe(Kind.DEPLOYMENT, "ADDED", obj(Kind.DEPLOYMENT, "new", "s0", 999))
            return page

    relist = PeriodicRelist(Late(), cache, rand=lambda: 0.5)
    clock.now = 700
    assert relist.run_due() == []
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "new")[1] is not None


def test_a_failed_list_judges_nothing_and_is_retried_sooner() -> None:
    fake, cache, clock = quiet_cluster(2, ttl=backstop_ttl(RELIST_SECONDS))

    class Down(FakeGateway):
        def list_page(self, kind: Kind, *args: Any, **kwargs: Any) -> Any:
            if kind is Kind.POD:
                raise GatewayError("list Pod failed: API server unreachable", None)
            if kind is Kind.LEADER_WORKER_SET:
                raise GatewayError("list LeaderWorkerSet failed: 404 Not Found", 404)
            return fake.list_page(kind, *args, **kwargs)

    del fake.objects[(Kind.POD, "ns", "s0-l4-a")]
    relist = PeriodicRelist(Down(), cache, rand=lambda: 0.5)
    clock.now = 601
    assert relist.run_due() == []  # the pod list failed: nothing judged
    assert cache.lookup(Kind.POD, "ns", "s0-l4-a")[1] is not None
    assert relist.seconds_until_due() == pytest.approx(RETRY_SECONDS)
    relist.lister = fake
    clock.now += RETRY_SECONDS
    assert [(d.kind, d.gone) for d in relist.run_due()] == [(Kind.POD, True)]
    assert relist.seconds_until_due() == pytest.approx(RELIST_SECONDS)


def test_a_namespace_restricted_operator_lists_each_watched_namespace() -> None:
    fake, cache, clock = quiet_cluster(3, ttl=backstop_ttl(RELIST_SECONDS), namespaces=("a", "b"))
    relist = PeriodicRelist(fake, cache, ["a", "b"], rand=lambda: 0.5)
    del fake.objects[(Kind.DEPLOYMENT, "b", "s1-l4")]
    clock.now = 601
    drifts = relist.run_due()
    assert [(d.obj["metadata"]["namespace"], d.obj["metadata"]["name"]) for d in drifts] == [
        ("b", "s1-l4")
    ]
    # Namespaced kinds once per namespace, nodes and ResourceSlices once.
    assert fake.pages[Kind.POD] == 2 and fake.pages[Kind.NODE] == 1


def test_nothing_is_listed_before_the_sync() -> None:
    fake = FakeGateway()
    clock = Clock()
    cache = WatchCache(clock=clock)
    relist = PeriodicRelist(fake, cache, rand=lambda: 0.5)
    clock.now = 601
    assert relist.run_due() == []
    assert fake.pages == Counter()
    assert relist.seconds_until_due() == pytest.approx(RETRY_SECONDS)
