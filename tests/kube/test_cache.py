"""The watch cache and its gateway: reads from memory, ordering, deletion, fallback, filtering."""

from collections import Counter
from typing import Any

import pytest

from vllm_operator.kube import cache as cache_module
from vllm_operator.kube.cache import CachedGateway, WatchCache
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import ConflictError, EventRecord, Kind, KubeGateway, Obj
from vllm_operator.rendering import names

MANAGED = {"app.kubernetes.io/managed-by": "vllm-operator", "app.kubernetes.io/instance": "a"}


def deployment(name: str, rv: str | None = "1", labels: dict[str, str] | None = None) -> Obj:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "labels": dict(MANAGED if labels is None else labels),
    }
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {}}


def service(name: str, rv: str = "1") -> Obj:
    meta = {"name": name, "namespace": "ns", "resourceVersion": rv}
    return {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": meta,
        "spec": {},
    }


class ReadCounter:
    """Passes every call to `inner` and counts the reads (what would reach the API server)."""

    def __init__(self, inner: KubeGateway) -> None:
        self.inner = inner
        self.reads: Counter[str] = Counter()

    def list_nodes(self) -> list[Obj]:
        self.reads["list:Node"] += 1
        return self.inner.list_nodes()

    def list_resource_slices(self) -> list[Obj]:
        self.reads["list:ResourceSlice"] += 1
        return self.inner.list_resource_slices()

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        self.reads[f"get:{kind}"] += 1
        return self.inner.get(kind, namespace, name)

    def list_owned(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj]:
        self.reads[f"list:{kind}"] += 1
        return self.inner.list_owned(kind, namespace, selector)

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        self.reads["list:Pod"] += 1
        return self.inner.list_pods(namespace, selector)

    def list_services(self, namespace: str | None = None, fleet_of: str | None = None) -> list[Obj]:
        self.reads["list:VLLMService"] += 1
        return self.inner.list_services(namespace, fleet_of)

    def gpu_requests_by_node(self) -> dict[str, dict[str, int]]:
        self.reads["list:BoundPods"] += 1
        return self.inner.gpu_requests_by_node()

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        self.reads["get:Secret"] += 1
        return self.inner.read_secret_key(namespace, name, key)

    def read_pod_log(
        self, namespace: str, pod: str, container: str, *, previous: bool, tail_lines: int
    ) -> str | None:
        self.reads["log:Pod"] += 1
        return self.inner.read_pod_log(
            namespace, pod, container, previous=previous, tail_lines=tail_lines
        )

    def apply(self, obj: Obj) -> Obj:
        return self.inner.apply(obj)

    def apply_unforced(self, obj: Obj, field_manager: str) -> Obj:
        return self.inner.apply_unforced(obj, field_manager)

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        self.inner.delete(kind, namespace, name)

    def apply_status(self, namespace: str, name: str, status: Obj) -> Obj | None:
        return self.inner.apply_status(namespace, name, status)

    def emit_event(self, event: EventRecord) -> None:
        self.inner.emit_event(event)

    def patch_pod_metadata(
        self, namespace: str, pod: str, labels: dict[str, str], annotations: dict[str, str]
    ) -> None:
        self.inner.patch_pod_metadata(namespace, pod, labels, annotations)

    def evict_pod(self, namespace: str, pod: str) -> bool:
        return self.inner.evict_pod(namespace, pod)

    def remove_service_finalizer(
        self, namespace: str, name: str, finalizer: str, index: int
    ) -> None:
        self.inner.remove_service_finalizer(namespace, name, finalizer, index)


def synced(*objs: tuple[Kind, Obj]) -> WatchCache:
    cache = WatchCache()
    for kind, obj in objs:
        cache.observe(kind, None, obj)
    cache.mark_synced()
    return cache


def test_labels_agree_with_rendering() -> None:
    assert cache_module.LABEL_MANAGED_BY == names.LABEL_MANAGED_BY
    assert cache_module.MANAGED_BY == names.MANAGED_BY


def test_an_older_event_never_replaces_a_newer_object() -> None:
    cache = synced((Kind.DEPLOYMENT, deployment("d", rv="10")))
    newer = deployment("d", rv="12")
    newer["spec"] = {"replicas": 3}
    cache.observe(Kind.DEPLOYMENT, "MODIFIED", newer)
    stale = deployment("d", rv="11")
    stale["spec"] = {"replicas": 1}
    cache.observe(Kind.DEPLOYMENT, "MODIFIED", stale)
    answered, obj = cache.lookup(Kind.DEPLOYMENT, "ns", "d")
    assert answered and obj is not None
    assert obj["spec"] == {"replicas": 3}
    assert obj["metadata"]["resourceVersion"] == "12"


def test_a_deletion_leaves_a_tombstone_that_a_late_write_response_cannot_pass() -> None:
    cache = synced((Kind.DEPLOYMENT, deployment("d", rv="10")))
    cache.observe(Kind.DEPLOYMENT, "DELETED", deployment("d", rv="15"))
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "d") == (True, None)
    cache.store(Kind.DEPLOYMENT, deployment("d", rv="14"))  # a write answered before the delete
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "d") == (True, None)
    cache.store(Kind.DEPLOYMENT, deployment("d", rv="20"))  # re-created afterwards
    answered, obj = cache.lookup(Kind.DEPLOYMENT, "ns", "d")
    assert answered and obj is not None and obj["metadata"]["resourceVersion"] == "20"


def test_a_deletion_older_than_the_object_held_is_ignored() -> None:
    cache = synced((Kind.DEPLOYMENT, deployment("d", rv="30")))
    cache.observe(Kind.DEPLOYMENT, "DELETED", deployment("d", rv="25"))
    answered, obj = cache.lookup(Kind.DEPLOYMENT, "ns", "d")
    assert answered and obj is not None


def test_reads_go_to_the_api_until_the_initial_sync() -> None:
    fake = FakeGateway()
    fake.add(deployment("d", rv=None))
    counter = ReadCounter(fake)
    cache = WatchCache()
    gw = CachedGateway(counter, cache)
    assert gw.get(Kind.DEPLOYMENT, "ns", "d") is not None
    assert gw.list_owned(Kind.DEPLOYMENT, "ns", {}) != []
    gw.list_nodes()
    gw.list_pods("ns", {})
    assert counter.reads == Counter(
        {"get:Deployment": 1, "list:Deployment": 1, "list:Node": 1, "list:Pod": 1}
    )
    cache.mark_synced()
    assert gw.get(Kind.DEPLOYMENT, "ns", "d") is not None  # stored from the read above
    assert gw.get(Kind.DEPLOYMENT, "ns", "missing") is None  # a miss is authoritative now
    assert [d["metadata"]["name"] for d in gw.list_owned(Kind.DEPLOYMENT, "ns", {})] == ["d"]
    assert gw.list_nodes() == []
    assert counter.reads["get:Deployment"] == 1
    assert sum(counter.reads.values()) == 4


def test_only_managed_objects_are_stored_and_a_foreign_name_is_read_from_the_api() -> None:
    foreign = deployment("taken", labels={"app": "someone-else"})
    fake = FakeGateway()
    fake.add(foreign)
    counter = ReadCounter(fake)
    cache = synced((Kind.DEPLOYMENT, foreign), (Kind.DEPLOYMENT, deployment("ours")))
    gw = CachedGateway(counter, cache)
    assert [d["metadata"]["name"] for d in gw.list_owned(Kind.DEPLOYMENT, "ns", {})] == ["ours"]
    # A name conflict must be seen: the foreign object is read from the API server.
    got = gw.get(Kind.DEPLOYMENT, "ns", "taken")
    assert got is not None and got["metadata"]["labels"] == {"app": "someone-else"}
    assert counter.reads == Counter({"get:Deployment": 1})
    # An object that loses the managed-by label leaves the store.
    cache.observe(Kind.DEPLOYMENT, "MODIFIED", deployment("ours", rv="2", labels={"x": "y"}))
    assert gw.list_owned(Kind.DEPLOYMENT, "ns", {}) == []


def test_selector_and_namespace_filtering_and_unwatched_namespaces_fall_back() -> None:
    other = deployment("b", labels={**MANAGED, "app.kubernetes.io/instance": "b"})
    cache = WatchCache(namespaces=["ns"])
    cache.observe(Kind.DEPLOYMENT, None, deployment("a"))
    cache.observe(Kind.DEPLOYMENT, None, other)
    cache.mark_synced()
    fake = FakeGateway()
    counter = ReadCounter(fake)
    gw = CachedGateway(counter, cache)
    selected = gw.list_owned(Kind.DEPLOYMENT, "ns", {"app.kubernetes.io/instance": "b"})
    assert [d["metadata"]["name"] for d in selected] == ["b"]
    assert counter.reads == Counter()
    gw.list_owned(Kind.DEPLOYMENT, "elsewhere", {})  # not watched: the cache cannot know
    assert counter.reads == Counter({"list:Deployment": 1})


def test_reads_are_copies() -> None:
    cache = synced((Kind.DEPLOYMENT, deployment("d")))
    _, first = cache.lookup(Kind.DEPLOYMENT, "ns", "d")
    assert first is not None
    first["spec"]["replicas"] = 99
    _, second = cache.lookup(Kind.DEPLOYMENT, "ns", "d")
    assert second is not None and second["spec"] == {}


def test_writes_update_the_store_and_a_conflict_sends_the_next_read_to_the_api() -> None:
    fake = FakeGateway()
    counter = ReadCounter(fake)
    cache = synced()
    gw = CachedGateway(counter, cache)
    applied = gw.apply(deployment("d", rv=None))
    assert gw.get(Kind.DEPLOYMENT, "ns", "d") == applied
    assert counter.reads == Counter()

    fake.fail_next.append(ConflictError("conflict", 409))
    with pytest.raises(ConflictError):
        gw.apply(deployment("d", rv=None))
    assert gw.get(Kind.DEPLOYMENT, "ns", "d") is not None
    assert counter.reads == Counter({"get:Deployment": 1})
    assert gw.get(Kind.DEPLOYMENT, "ns", "d") is not None  # stored again by that read
    assert counter.reads == Counter({"get:Deployment": 1})

    gw.delete(Kind.DEPLOYMENT, "ns", "d")
    assert gw.get(Kind.DEPLOYMENT, "ns", "d") is None
    assert counter.reads == Counter({"get:Deployment": 1})


def test_a_status_write_is_visible_to_the_next_read() -> None:
    service: Obj = {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {},
    }
    fake = FakeGateway()
    fake.add(service)
    cache = synced((Kind.VLLM_SERVICE, service))
    gw = CachedGateway(ReadCounter(fake), cache)
    gw.apply_status("ns", "s", {"phase": "Ready"})
    got = gw.get(Kind.VLLM_SERVICE, "ns", "s")
    assert got is not None and got["status"] == {"phase": "Ready"}


def test_nodes_and_pods_are_stored_without_what_no_reader_uses() -> None:
    node: Obj = {
        "kind": "Node",
        "metadata": {"name": "n", "managedFields": [{"manager": "kubelet"}]},
        "status": {"images": [{"names": ["x"]}], "allocatable": {"cpu": "1"}},
    }
    cache = synced((Kind.NODE, node))
    (stored,) = cache.all_of(Kind.NODE) or []
    assert stored == {
        "kind": "Node",
        "metadata": {"name": "n"},
        "status": {"allocatable": {"cpu": "1"}},
    }
    assert "managedFields" in node["metadata"]  # the watched body itself is left alone


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_no_relist_confirmed_is_read_again_and_a_list_drops_what_is_gone() -> None:
    """An object deleted while no watch was open gets no DELETED event: it expires."""
    clock = Clock()
    cache = WatchCache(ttl=100, clock=clock)
    cache.observe(Kind.DEPLOYMENT, None, deployment("a"))
    cache.observe(Kind.DEPLOYMENT, None, deployment("b"))
    cache.mark_synced()
    fake = FakeGateway()
    fake.add(deployment("a", rv=None))  # "b" was deleted during a watch gap
    counter = ReadCounter(fake)
    gw = CachedGateway(counter, cache)
    clock.now = 60
    cache.observe(Kind.DEPLOYMENT, None, deployment("a"))  # a re-list confirms "a" only
    assert len(gw.list_owned(Kind.DEPLOYMENT, "ns", {})) == 2  # nothing expired yet
    assert counter.reads.total() == 0
    clock.now = 120
    assert [d["metadata"]["name"] for d in gw.list_owned(Kind.DEPLOYMENT, "ns", {})] == ["a"]
    assert counter.reads == Counter({"list:Deployment": 1})
    # The API's answer replaced the selection: later reads are from memory again.
    assert [d["metadata"]["name"] for d in gw.list_owned(Kind.DEPLOYMENT, "ns", {})] == ["a"]
    assert gw.get(Kind.DEPLOYMENT, "ns", "b") is None
    assert counter.reads == Counter({"list:Deployment": 1})


def test_an_expired_get_is_answered_by_the_api_and_stored_again() -> None:
    clock = Clock()
    cache = WatchCache(ttl=100, clock=clock)
    cache.observe(Kind.DEPLOYMENT, None, deployment("a"))
    cache.mark_synced()
    fake = FakeGateway()
    fake.add(deployment("a", rv=None))
    counter = ReadCounter(fake)
    gw = CachedGateway(counter, cache)
    clock.now = 150
    assert gw.get(Kind.DEPLOYMENT, "ns", "a") is not None
    assert gw.get(Kind.DEPLOYMENT, "ns", "a") is not None
    assert counter.reads == Counter({"get:Deployment": 1})


def test_a_selection_by_instance_follows_label_changes_and_deletions() -> None:
    cache = synced((Kind.POD, deployment("p", rv="1")))
    instance = "app.kubernetes.io/instance"
    assert [o["metadata"]["name"] for o in cache.select(Kind.POD, "ns", {instance: "a"}) or []] == [
        "p"
    ]
    cache.observe(Kind.POD, "MODIFIED", deployment("p", rv="2", labels={**MANAGED, instance: "b"}))
    assert cache.select(Kind.POD, "ns", {instance: "a"}) == []
    assert len(cache.select(Kind.POD, "ns", {instance: "b"}) or []) == 1
    cache.observe(Kind.POD, "DELETED", deployment("p", rv="3"))
    assert cache.select(Kind.POD, "ns", {instance: "b"}) == []
    assert cache.select(Kind.POD, "ns", {}) == []


def test_only_the_operators_own_managed_fields_entry_is_kept() -> None:
    dep = deployment("d")
    ours = {"manager": "vllm-operator", "operation": "Apply", "fieldsV1": {"f:spec": {}}}
    theirs = {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"}
    dep["metadata"]["managedFields"] = [ours, theirs]
    cache = synced((Kind.DEPLOYMENT, dep))
    _, stored = cache.lookup(Kind.DEPLOYMENT, "ns", "d")
    assert stored is not None and stored["metadata"]["managedFields"] == [ours]
    assert dep["metadata"]["managedFields"] == [ours, theirs]


def test_a_complete_relist_stops_believing_what_it_did_not_return_once_it_is_quiet() -> None:
    """#32 fault: a Deployment deleted while the watches were reconnecting (no DELETED event)
    stayed in the cache until the 12-minute expiry. What a complete list did not return is read
    from the API server again: it answers that the object is gone, and the entry goes."""
    clock = Clock()
    cache = WatchCache(clock=clock)
    for name in ("a", "b", "c"):
        cache.observe(Kind.DEPLOYMENT, None, deployment(name))
    cache.observe(Kind.DEPLOYMENT, None, deployment("d"))
    other = deployment("x")
    other["metadata"]["namespace"] = "elsewhere"
    cache.observe(Kind.DEPLOYMENT, None, other)
    cache.mark_synced()
    for name in ("a", "b", "c", "d"):  # the start's listing, as the event handlers see it
        cache.listed(Kind.DEPLOYMENT, deployment(name))
    clock.now = 10
    assert cache.end_lists() == []
    clock.now = 100
    cache.listed(Kind.DEPLOYMENT, deployment("a", rv="2"))  # the re-list of "ns": "a" only...
    clock.now = 101
    cache.store(Kind.DEPLOYMENT, deployment("c", rv="3"))  # ...and "c" is written meanwhile
    clock.now = 103
    cache.listed(Kind.DEPLOYMENT, deployment("d", rv="2"))
    clock.now = 107
    assert cache.end_lists() == []  # not quiet for 5 s yet
    clock.now = 108
    (gone,) = cache.end_lists()
    assert gone[0] is Kind.DEPLOYMENT and gone[1]["metadata"]["name"] == "b"
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "b") == (False, None)  # ask the API server
    assert cache.select(Kind.DEPLOYMENT, "ns", {}) is None  # so is a list that would hold it
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "c")[1] is not None
    # Another namespace's objects are not judged by this namespace's listing.
    assert cache.lookup(Kind.DEPLOYMENT, "elsewhere", "x")[1] is not None
    assert cache.end_lists() == []
    # The API server says it is gone: the entry goes, and the miss is authoritative again.
    cache.read_missing(Kind.DEPLOYMENT, "ns", "b")
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "b") == (True, None)
    assert [o["metadata"]["name"] for o in cache.select(Kind.DEPLOYMENT, "ns", {}) or []] == [
        "a",
        "c",
        "d",
    ]
    # A re-created object with the same name is stored again.
    cache.observe(Kind.DEPLOYMENT, "ADDED", deployment("b", rv="9"))
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "b")[1] is not None


def test_a_listing_split_by_a_pause_loses_no_object_that_exists() -> None:
    """#32: on a loaded machine Kopf's per-object workers hand a listing to the event handlers
    with pauses longer than RELIST_QUIET_SECONDS; the second half was judged as a listing of its
    own and dropped the first half's objects (102 existing VLLMServices, forgotten, in a
    1000-service bench run). Now such objects are only read again, and a read that finds them
    keeps them."""
    clock = Clock()
    inner = FakeGateway()
    cache = WatchCache(clock=clock)
    names = [f"s{i}" for i in range(6)]
    for name in names:
        cache.observe(Kind.VLLM_SERVICE, None, service(name))
        inner.add(service(name))
    cache.mark_synced()
    cache.listed(Kind.VLLM_SERVICE, service(names[0]))  # the start's listing
    clock.now = 10
    assert cache.end_lists() == []
    clock.now = 50
    for name in names[:3]:  # the first half of a re-listing...
        cache.listed(Kind.VLLM_SERVICE, service(name))
    clock.now = 56
    cache.end_lists()  # judged alone, the first half does not hold s3-s5
    clock.now = 60  # ...a pause of 10 s...
    for name in names[3:]:
        cache.listed(Kind.VLLM_SERVICE, service(name))
    clock.now = 66
    gone = cache.end_lists()  # ...and the second half does not hold s0-s2
    gateway = CachedGateway(inner, cache)
    for name in names:
        assert gateway.get(Kind.VLLM_SERVICE, "ns", name) is not None, name
    assert cache.lookup(Kind.VLLM_SERVICE, "ns", "s0")[0]  # believed again after the read
    assert {o["metadata"]["name"] for _, o in gone} == set(names[:3])


def test_the_start_listing_judges_nothing_created_while_it_was_delivered() -> None:
    """#32: the 1000-service bench created services while the operator started: Kopf listed
    234, the rest came as ADDED events before the event handlers' turn for the listed ones, and
    the sweep took them for objects the listing did not return. The start's listing judges
    nothing; a later one does."""
    clock = Clock()
    cache = WatchCache(clock=clock)
    cache.observe(Kind.VLLM_SERVICE, None, service("listed"))
    cache.observe(Kind.VLLM_SERVICE, "ADDED", service("created"))  # after Kopf's list
    cache.mark_synced()
    clock.now = 5
    cache.listed(Kind.VLLM_SERVICE, service("listed"))  # the event handler's turn
    clock.now = 11
    assert cache.end_lists() == []
    assert cache.lookup(Kind.VLLM_SERVICE, "ns", "created")[1] is not None
    clock.now = 100
    cache.listed(Kind.VLLM_SERVICE, service("listed"))  # a re-list (410) that misses one
    clock.now = 106
    assert [o["metadata"]["name"] for _, o in cache.end_lists()] == ["created"]


def test_the_initial_listing_drops_nothing_it_returned() -> None:
    clock = Clock()
    cache = WatchCache(clock=clock)
    cache.observe(Kind.DEPLOYMENT, None, deployment("a"))
    cache.mark_synced()
    cache.listed(Kind.DEPLOYMENT, deployment("a"))
    clock.now = 10
    assert cache.end_lists() == []
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "a")[1] is not None


# -- the placement inventory (#29): GPUs requested per node, every pod's ---------------------------


def gpu_pod(
    name: str,
    node: str | None,
    gpus: int,
    *,
    namespace: str = "other",
    phase: str = "Running",
    rv: str = "1",
    labels: dict[str, str] | None = None,
) -> Obj:
    spec: Obj = {
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}},
            {"name": "b", "resources": {"requests": {"cpu": "1"}}},
        ],
        "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": rv,
            "labels": labels or {"app": "training"},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def test_gpu_requests_count_every_bound_pod_that_has_not_ended() -> None:
    cache = synced(
        (Kind.POD, gpu_pod("train", "n1", 4)),
        (Kind.POD, gpu_pod("ours", "n1", 2, namespace="ns", labels=MANAGED)),
        (Kind.POD, gpu_pod("pending", None, 8)),
        (Kind.POD, gpu_pod("done", "n2", 8, phase="Succeeded")),
        (Kind.POD, gpu_pod("n2-job", "n2", 1)),
    )
    assert cache.gpu_requests_by_node() == {
        "n1": {"nvidia.com/gpu": 6},
        "n2": {"nvidia.com/gpu": 1},
    }
    # Bound later, then deleted: the claim follows the pod.
    cache.observe(Kind.POD, "MODIFIED", gpu_pod("pending", "n2", 8, rv="2"))
    assert cache.gpu_requests_by_node() == {
        "n1": {"nvidia.com/gpu": 6},
        "n2": {"nvidia.com/gpu": 9},
    }
    cache.observe(Kind.POD, "DELETED", gpu_pod("train", "n1", 4, rv="3"))
    assert cache.gpu_requests_by_node() == {
        "n1": {"nvidia.com/gpu": 2},
        "n2": {"nvidia.com/gpu": 9},
    }


def test_gpu_requests_go_to_the_api_only_before_the_sync() -> None:
    fake = FakeGateway()
    fake.add(gpu_pod("train", "n1", 4))
    counter = ReadCounter(fake)
    assert CachedGateway(counter, WatchCache()).gpu_requests_by_node() == {
        "n1": {"nvidia.com/gpu": 4}
    }
    assert counter.reads["list:BoundPods"] == 1
    full = synced((Kind.POD, gpu_pod("train", "n1", 4)))
    assert CachedGateway(counter, full).gpu_requests_by_node() == {"n1": {"nvidia.com/gpu": 4}}
    assert counter.reads["list:BoundPods"] == 1


def test_a_namespace_restricted_cache_adds_the_outside_pods_and_lists_nothing() -> None:
    """#32: a namespace-restricted operator listed every bound pod of the cluster on each
    placement decision; the GPU pods of the other namespaces now come from one watch
    (kube/inventory.py) and the watched namespace's from the pod watch."""
    fake = FakeGateway()
    fake.add(gpu_pod("train", "n1", 4))
    fake.add(gpu_pod("ours", "n1", 2, namespace="ns", labels=MANAGED))
    counter = ReadCounter(fake)
    cache = WatchCache(namespaces=["ns"])
    cache.expect_outside_pods()
    cache.observe(Kind.POD, None, gpu_pod("ours", "n1", 2, namespace="ns", labels=MANAGED))
    cache.mark_synced()
    # Kopf's lists are in, the outside watch's is not: the gate stays shut, the cache declines.
    assert not cache.synced_event.is_set()
    assert cache.gpu_requests_by_node() is None
    cpu_only = gpu_pod("cpu-only", "n2", 0)
    del cpu_only["spec"]["initContainers"]
    cache.replace_outside_pods([gpu_pod("train", "n1", 4), cpu_only, gpu_pod("job", "n2", 1)])
    assert cache.synced_event.is_set()
    gw = CachedGateway(counter, cache)
    assert gw.gpu_requests_by_node() == {"n1": {"nvidia.com/gpu": 6}, "n2": {"nvidia.com/gpu": 1}}
    cache.observe_outside_pod("DELETED", gpu_pod("job", "n2", 1))
    cache.observe_outside_pod("ADDED", gpu_pod("infer", "n2", 3, namespace="other"))
    cache.observe_outside_pod("MODIFIED", gpu_pod("train", "n1", 4, phase="Succeeded"))
    assert gw.gpu_requests_by_node() == {"n1": {"nvidia.com/gpu": 2}, "n2": {"nvidia.com/gpu": 3}}
    # A re-list is the full truth: what it does not return is gone.
    cache.replace_outside_pods([gpu_pod("train", "n1", 4)])
    assert gw.gpu_requests_by_node() == {"n1": {"nvidia.com/gpu": 6}}
    assert counter.reads.total() == 0


def test_without_the_outside_watch_only_the_watched_namespaces_count() -> None:
    """`run --no-cluster-pod-inventory`, or the API server refusing the cluster-wide watch: the
    watched namespaces' pods only, still without a list, and the gate does not wait."""
    for denied in (False, True):
        counter = ReadCounter(FakeGateway())
        cache = WatchCache(namespaces=["ns"])
        if denied:
            cache.expect_outside_pods()
            cache.replace_outside_pods([gpu_pod("train", "n1", 4)])
            cache.outside_pods_denied()
        cache.observe(Kind.POD, None, gpu_pod("ours", "n1", 2, namespace="ns", labels=MANAGED))
        cache.mark_synced()
        assert cache.synced_event.is_set()
        gw = CachedGateway(counter, cache)
        assert gw.gpu_requests_by_node() == {"n1": {"nvidia.com/gpu": 2}}
        assert counter.reads.total() == 0


def test_resource_slices_are_read_from_the_watch_once_synced() -> None:
    """DRA inventory (#30): slices are watched like nodes; a synced cache answers without a list,
    and a slice the driver withdrew is gone from the next read."""
    fake = FakeGateway()
    counter = ReadCounter(fake)
    cache = WatchCache()
    gw = CachedGateway(counter, cache)
    assert gw.list_resource_slices() == []
    assert counter.reads["list:ResourceSlice"] == 1
    published = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "gpu-0-gpu.nvidia.com", "resourceVersion": "5"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-0"},
    }
    cache.observe(Kind.RESOURCE_SLICE, None, published)
    cache.mark_synced()
    assert [s["metadata"]["name"] for s in gw.list_resource_slices()] == ["gpu-0-gpu.nvidia.com"]
    cache.observe(
        Kind.RESOURCE_SLICE,
        "DELETED",
        {**published, "metadata": {"name": "gpu-0-gpu.nvidia.com", "resourceVersion": "6"}},
    )
    assert gw.list_resource_slices() == []
    assert counter.reads["list:ResourceSlice"] == 1


def test_a_fleet_listing_decodes_only_services_of_the_model_with_observations() -> None:
    def service(name: str, model: str, observations: list[Obj] | None) -> Obj:
        obj: Obj = {
            "apiVersion": "serving.vllm-operator.dev/v1alpha1",
            "kind": "VLLMService",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
            "spec": {"model": {"name": model}},
        }
        if observations is not None:
            obj["status"] = {"observations": observations}
        return obj

    measured = [{"gpuProduct": "NVIDIA-L4", "kvCacheTokens": 1000}]
    cache = synced(
        (Kind.VLLM_SERVICE, service("a", "org/m-1", measured)),
        (Kind.VLLM_SERVICE, service("b", "org/m-1", [])),
        (Kind.VLLM_SERVICE, service("c", "org/m-2", measured)),
        (Kind.VLLM_SERVICE, service("d", "org/m-1", None)),
        (Kind.VLLM_SERVICE, service("e", "org/m-1é", measured)),
    )
    counter = ReadCounter(FakeGateway())
    gw = CachedGateway(counter, cache)
    assert [s["metadata"]["name"] for s in gw.list_services()] == ["a", "b", "c", "d", "e"]
    assert [s["metadata"]["name"] for s in gw.list_services(fleet_of="org/m-1")] == ["a"]
    assert [s["metadata"]["name"] for s in gw.list_services(fleet_of="org/m-1é")] == ["e"]
    assert counter.reads == Counter()


class _CountingText(str):
    """An entry's text that counts how often a listing searches it."""

    searches = 0

    def __contains__(self, key: object) -> bool:
        _CountingText.searches += 1
        return super().__contains__(key)  # type: ignore[operator]


@pytest.mark.parametrize("fleet", [1000])
def test_repeated_fleet_listings_look_only_at_services_with_observations(fleet: int) -> None:
    """#32: every reconcile lists its model's fleet; a restart resyncs every service, so a
    listing that searched every cached service's text cost O(N) per reconcile, O(N²) per resync
    (1000 services: ~10⁶ text searches). Searches per listing are bounded by the services that
    hold observations, plus one pass over all for the first listing."""
    measured = [{"gpuProduct": "NVIDIA-L4", "kvCacheTokens": 1000}]
    services: list[tuple[Kind, Obj]] = [
        (
            Kind.VLLM_SERVICE,
            {
                "apiVersion": "serving.vllm-operator.dev/v1alpha1",
                "kind": "VLLMService",
                "metadata": {"name": f"s-{i:04d}", "namespace": "ns", "resourceVersion": "1"},
                "spec": {"model": {"name": f"org/m-{i % 4}"}},
                **({"status": {"observations": measured}} if i % 100 == 0 else {}),
            },
        )
        for i in range(fleet)
    ]
    cache = synced(*services)
    for entry in cache._objects[Kind.VLLM_SERVICE].values():
        entry.text = _CountingText(entry.text)
    gw = CachedGateway(FakeGateway(), cache)
    _CountingText.searches = 0
    listings = 50
    for i in range(listings):
        found = gw.list_services(fleet_of=f"org/m-{i % 4}")
        assert {s["spec"]["model"]["name"] for s in found} <= {f"org/m-{i % 4}"}
    assert len(gw.list_services(fleet_of="org/m-0")) == fleet // 100
    holding = fleet // 100
    assert _CountingText.searches <= fleet + (listings + 1) * holding * 2
    # A service that gains observations joins its fleet; one that loses them leaves it.
    first = services[1][1]
    cache.observe(
        Kind.VLLM_SERVICE,
        None,
        {
            **first,
            "metadata": {**first["metadata"], "resourceVersion": "2"},
            "status": {"observations": measured},
        },
    )
    assert "s-0001" in {s["metadata"]["name"] for s in gw.list_services(fleet_of="org/m-1")}
    zero = services[0][1]
    unmeasured = {k: v for k, v in zero.items() if k != "status"}
    cache.observe(
        Kind.VLLM_SERVICE,
        None,
        {**unmeasured, "metadata": {**zero["metadata"], "resourceVersion": "2"}},
    )
    assert "s-0000" not in {s["metadata"]["name"] for s in gw.list_services(fleet_of="org/m-0")}


def test_an_object_seen_again_at_the_same_version_is_confirmed_not_encoded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kopf hands every listed or changed object to the index handler and the event handler; the
    second copy of a version the cache holds only confirms it (#32: a restart lists ~6000)."""
    encoded: list[str] = []

    class Counted(cache_module._Entry):
        def __init__(self, kind: Kind, obj: Obj) -> None:
            encoded.append(obj["metadata"]["name"])
            super().__init__(kind, obj)

    monkeypatch.setattr(cache_module, "_Entry", Counted)
    clock = Clock()
    cache = WatchCache(ttl=100, clock=clock)
    cache.observe(Kind.DEPLOYMENT, None, deployment("a", rv="5"))
    cache.mark_synced()
    clock.now = 90
    cache.listed(Kind.DEPLOYMENT, deployment("a", rv="5"))  # the same version again
    assert encoded == ["a"]
    clock.now = 150  # 60 s after the confirmation, 150 s after the first store: not expired
    assert [d["metadata"]["name"] for d in cache.select(Kind.DEPLOYMENT, "ns", {}) or []] == ["a"]
    changed = deployment("a", rv="6")
    changed["spec"]["replicas"] = 3
    cache.observe(Kind.DEPLOYMENT, None, changed)
    assert encoded == ["a", "a"]
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "a")[1]["spec"]["replicas"] == 3  # type: ignore[index]


def test_a_new_version_is_encoded_outside_the_guard_and_checked_again_under_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """#32 no-op reconcile: encoding a stored object under the guard made the workers' reads
    wait for the event loop's listing on a restart. The encoding now runs without the guard,
    and a newer version stored meanwhile by another thread still wins."""
    cache = WatchCache()
    guarded: list[bool] = []
    racing: list[Obj] = []

    class Watched(cache_module._Entry):
        def __init__(self, kind: Kind, obj: Obj) -> None:
            guarded.append(cache._guard.locked())
            if racing and not guarded[-1]:
                cache.store(Kind.DEPLOYMENT, racing.pop())  # another thread, in between
            super().__init__(kind, obj)

    monkeypatch.setattr(cache_module, "_Entry", Watched)
    cache.observe(Kind.DEPLOYMENT, None, deployment("a", rv="5"))
    cache.mark_synced()
    newer = deployment("a", rv="7")
    newer["spec"]["replicas"] = 7
    racing.append(newer)
    cache.observe(Kind.DEPLOYMENT, None, deployment("a", rv="6"))  # loses to rv 7
    assert guarded == [False, False, False]
    found = cache.lookup(Kind.DEPLOYMENT, "ns", "a")[1] or {}
    assert found["metadata"]["resourceVersion"] == "7" and found["spec"]["replicas"] == 7
