"""The controller on the watch cache (#21): a no-op reconcile and an idle evaluation read nothing
from the API server, and what the cache learns from writes is what the next reconcile sees."""

from datetime import timedelta

from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.cache import CachedGateway, WatchCache
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.triggers import owners_of
from vllm_operator.rendering.names import common_labels, pool_selector_labels

from ..kube.test_cache import ReadCounter
from .test_controller import OfflineHub, cluster, condition, example, make_ready, status_of
from .test_evaluate import T0, Clock

SERVICE = "llama-8b-chat"


def watch(fake: FakeGateway, cache: WatchCache) -> None:
    """What Kopf's watches deliver: every object and node as the fake holds it now."""
    for (kind, _, _), obj in sorted(fake.objects.items()):
        cache.observe(kind, "MODIFIED", obj)
    for node in fake.nodes:
        cache.observe(Kind.NODE, "MODIFIED", node)


def setup() -> tuple[FakeGateway, ReadCounter, Controller, Clock]:
    fake = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["remediation"] = {"mode": "auto"}
    fake.add(svc)
    fake.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{SERVICE}-l4-abc",
                "namespace": "default",
                "labels": {
                    **common_labels(SERVICE),
                    **pool_selector_labels(SERVICE, "NVIDIA-L4"),
                },
            },
            "status": {"containerStatuses": [{"name": "vllm", "ready": True, "restartCount": 0}]},
        }
    )
    counter = ReadCounter(fake)
    cache = WatchCache()
    watch(fake, cache)
    cache.mark_synced()
    clock = Clock()
    gw = CachedGateway(counter, cache)
    ctl = Controller(gw, HubArchitectureResolver(fake, OfflineHub()), clock=clock)
    ctl.reconcile("default", SERVICE)
    make_ready(fake, "default", f"{SERVICE}-l4")
    watch(fake, cache)  # the Deployment's status update arrives through the watch
    ctl.reconcile("default", SERVICE)
    return fake, counter, ctl, clock


def test_reconciles_on_a_synced_cache_read_nothing_from_the_api() -> None:
    fake, counter, ctl, _ = setup()
    assert counter.reads.total() == 0
    assert fake.writes["apply:Deployment"] == 1


def test_a_no_op_reconcile_costs_no_read_and_no_write() -> None:
    fake, counter, ctl, _ = setup()
    writes = fake.total_writes()
    outcome = ctl.reconcile("default", SERVICE)
    assert outcome.applied == [] and not outcome.status_written
    assert fake.total_writes() == writes
    assert counter.reads.total() == 0


def test_an_idle_evaluation_costs_no_read() -> None:
    fake, counter, ctl, clock = setup()
    for minutes in (1, 2):
        clock.now = T0 + timedelta(minutes=minutes)
        ctl.evaluate("default", SERVICE)
    assert counter.reads.total() == 0


def test_a_status_write_is_seen_by_the_next_reconcile_without_its_watch_event() -> None:
    fake, counter, ctl, _ = setup()
    written = fake.writes["status"]
    # No watch() here: the cache holds the status from the write's response.
    ctl.reconcile("default", SERVICE)
    assert fake.writes["status"] == written
    assert counter.reads.total() == 0


def test_triggers_join_a_waiting_key_and_one_during_a_run_costs_one_more_run() -> None:
    """Deployment events in a burst (#21, on the work queue since #32): triggers before a run
    starts are one run that reads the newest state for all; a trigger while the key is processed
    is one more run after it, never a second run at the same time."""
    fake = cluster()
    fake.add(example("llama-3.1-8b-l4.yaml"))
    counter = ReadCounter(fake)
    ctl = Controller(counter, HubArchitectureResolver(fake, OfflineHub()), clock=lambda: T0)
    key = ("default", SERVICE)
    for _ in range(5):
        ctl.enqueue(key)
    assert ctl.run_due() == [key]
    assert counter.reads["get:VLLMService"] == 1
    assert fake.writes["apply:Deployment"] == 1

    get = counter.get
    seen: list[object] = []

    def trigger_while_reading(kind: Kind, namespace: str, name: str) -> object:
        if not seen:  # the first read of the run: a Deployment event arrives meanwhile
            ctl.enqueue(key)
            seen.append(ctl.queue.get(timeout=0))  # no other worker can take the key now
        return get(kind, namespace, name)

    counter.get = trigger_while_reading  # type: ignore[method-assign,assignment]
    ctl.enqueue(key)
    assert ctl.run_due() == [key, key]
    assert seen == [None]
    assert counter.reads["get:VLLMService"] == 3
    assert ctl.run_due() == []


class Seconds:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_deployment_deleted_while_the_watches_reconnected_is_recreated() -> None:
    """#32 fault: deleted while the API server restarted (no DELETED event), the Deployment was
    never recreated and status kept saying Ready until the 12-minute cache expiry. The re-list
    that follows did not return it: the cache drops it, its service reconciles."""
    fake = cluster()
    fake.add(example("llama-3.1-8b-l4.yaml"))
    # Someone else's Deployment in the namespace: the re-list of Deployments is not empty (an
    # empty listing sends no event; there the 12-minute expiry stays the backstop).
    fake.add(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {},
        }
    )
    seconds = Seconds()
    cache = WatchCache(clock=seconds)
    watch(fake, cache)
    cache.mark_synced()
    ctl = Controller(
        CachedGateway(fake, cache), HubArchitectureResolver(fake, OfflineHub()), clock=lambda: T0
    )
    ctl.reconcile("default", SERVICE)
    make_ready(fake, "default", f"{SERVICE}-l4")
    watch(fake, cache)
    ctl.reconcile("default", SERVICE)
    assert condition(status_of(fake, SERVICE), "Ready")["status"] == "True"

    for (kind, _, _), obj in sorted(fake.objects.items()):  # the start's listing
        cache.listed(kind, obj)
    seconds.now = 10
    assert cache.end_lists() == []
    del fake.objects[(Kind.DEPLOYMENT, "default", f"{SERVICE}-l4")]  # no event reaches us
    seconds.now = 100
    for (kind, _, _), obj in sorted(fake.objects.items()):  # the re-list after the reconnect
        cache.listed(kind, obj)
    seconds.now = 106
    for _, obj in cache.end_lists():  # what the handlers' sweeper does
        for key in owners_of(obj):
            ctl.enqueue(key)
    assert ctl.run_due() == [("default", SERVICE)]
    assert (Kind.DEPLOYMENT, "default", f"{SERVICE}-l4") in fake.objects  # recreated
    ready = condition(status_of(fake, SERVICE), "Ready")
    assert (ready["status"], ready["message"]) == ("False", "0/1 replicas ready")


def test_a_deployment_deleted_behind_a_quiet_cache_is_recreated_by_the_periodic_list() -> None:
    """#32: with no re-list by Kopf (its watches resume), an object deleted with no event was
    noticed only by the 12-minute expiry, which also re-read every unchanged service once per
    expiry. The periodic complete list (kube/relist.py) finds it within one period; the
    service owning it reconciles and recreates it, and nothing else is read."""
    from vllm_operator.kube.relist import PeriodicRelist, backstop_ttl

    fake = cluster()
    fake.add(example("llama-3.1-8b-l4.yaml"))
    seconds = Seconds()
    cache = WatchCache(ttl=backstop_ttl(600), clock=seconds)
    watch(fake, cache)
    cache.mark_synced()
    counter = ReadCounter(fake)
    ctl = Controller(
        CachedGateway(counter, cache),
        HubArchitectureResolver(fake, OfflineHub()),
        clock=lambda: T0,
    )
    ctl.reconcile("default", SERVICE)
    make_ready(fake, "default", f"{SERVICE}-l4")
    watch(fake, cache)
    ctl.reconcile("default", SERVICE)
    assert condition(status_of(fake, SERVICE), "Ready")["status"] == "True"
    relist = PeriodicRelist(fake, cache, rand=lambda: 0.5)
    reads = counter.reads.total()

    del fake.objects[(Kind.DEPLOYMENT, "default", f"{SERVICE}-l4")]  # no event reaches us
    seconds.now = 601
    drifts = relist.run_due()
    assert [(d.kind, d.gone) for d in drifts] == [(Kind.DEPLOYMENT, True)]
    for drift in drifts:  # what the handlers' periodic-list task does
        for key in owners_of(drift.obj):
            ctl.enqueue(key)
    assert ctl.run_due() == [("default", SERVICE)]
    assert (Kind.DEPLOYMENT, "default", f"{SERVICE}-l4") in fake.objects  # recreated
    ready = condition(status_of(fake, SERVICE), "Ready")
    assert (ready["status"], ready["message"]) == ("False", "0/1 replicas ready")
    assert counter.reads.total() - reads == 1  # the one re-read of the unbelieved Deployment


def test_placement_in_a_namespace_restricted_operator_lists_no_pods() -> None:
    """#32: with `run --namespace` the watch cache could not answer the GPU inventory (other
    namespaces' pods hold GPUs too), so every Preferred reconcile and evaluation listed every
    bound pod of the cluster (~35 lists per 2 idle minutes in the 1000-service bench). The other
    namespaces' GPU pods now come from one watch (kube/inventory.py): placement reads memory, and
    still sees the training job that fills the H100 node."""
    from .test_placement_reconcile import foreign_pod, replicas, settle_pods
    from .test_placement_reconcile import setup as placement_setup

    fake, _, clock = placement_setup(replicas=3)
    training = foreign_pod("train-0", "h100-0", 8)  # namespace training, not watched
    fake.add(training)
    counter = ReadCounter(fake)
    cache = WatchCache(namespaces=["default"])
    cache.expect_outside_pods()

    def kopf_watch() -> None:  # Kopf delivers the watched namespace's objects only
        for (kind, namespace, _), obj in sorted(fake.objects.items()):
            if namespace == "default":
                cache.observe(kind, "MODIFIED", obj)
        for node in fake.nodes:
            cache.observe(Kind.NODE, "MODIFIED", node)

    kopf_watch()
    cache.mark_synced()
    cache.replace_outside_pods([training])  # the outside watch's first list
    ctl = Controller(
        CachedGateway(counter, cache), HubArchitectureResolver(fake, OfflineHub()), clock=clock
    )
    for _ in range(4):
        ctl.reconcile("default", "qwen-14b")
        settle_pods(fake, clock.now)
        kopf_watch()
        clock.now += timedelta(seconds=30)
        ctl.evaluate("default", "qwen-14b")
    assert replicas(fake) == {"qwen-14b-a100-40gb": 3, "qwen-14b-h100-80gb": 0}
    assert counter.reads["list:BoundPods"] == 0
    assert counter.reads.total() == 0
