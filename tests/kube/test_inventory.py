"""The watch of the GPU pods outside the watched namespaces (kube/inventory.py, #32): list, watch
from the list's version, bookmarks, 410 Gone, a denial, and the field selector it asks for."""

import json
from collections.abc import Iterator

from vllm_operator.kube.cache import OUTSIDE_DENIED, OUTSIDE_LISTED, WatchCache
from vllm_operator.kube.gateway import GatewayError, Kind, Obj
from vllm_operator.kube.inventory import Gone, OutsidePodWatch, outside_selector

from .scripted import run_until_used_up
from .test_cache import gpu_pod


class Source:
    """Scripted API answers: each list / watch call takes the next step (an answer or an error)
    and records what it was asked."""

    def __init__(self, steps: list[object]) -> None:
        self.steps = steps
        self.calls: list[tuple[str, str, str | None]] = []

    def _next(self) -> object:
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def list(self, field_selector: str) -> tuple[list[Obj], str]:
        self.calls.append(("list", field_selector, None))
        answer = self._next()
        assert isinstance(answer, tuple), answer
        return answer

    def watch(self, field_selector: str, resource_version: str) -> Iterator[tuple[str, Obj]]:
        self.calls.append(("watch", field_selector, resource_version))
        answer = self._next()
        assert isinstance(answer, list), answer
        yield from answer


def bookmark(rv: str) -> tuple[str, Obj]:
    return "BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": rv}}


def run(source: Source, cache: WatchCache, waits: list[float]) -> None:
    """Run until the script is used up (the next wait stops it, or a step is missing)."""

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return not source.steps

    watch = OutsidePodWatch(source, cache, ["team-b", "team-a"], wait=wait)
    run_until_used_up(source, watch)


def synced_cache() -> WatchCache:
    cache = WatchCache(namespaces=["team-a", "team-b"])
    cache.mark_synced()
    return cache


def test_the_selector_asks_for_bound_unended_pods_outside_the_watched_namespaces() -> None:
    assert outside_selector(["team-b", "team-a", "team-a"]) == (
        "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed,"
        "metadata.namespace!=team-a,metadata.namespace!=team-b"
    )


def test_lists_then_follows_the_watch_from_the_last_version() -> None:
    cache = synced_cache()
    watch_rounds: list[object] = [
        ([gpu_pod("train", "n1", 4, rv="5")], "10"),
        [("ADDED", gpu_pod("job", "n2", 2, rv="11")), bookmark("15")],
        # The server ended the watch; the next one resumes from the bookmark.
        [("DELETED", gpu_pod("train", "n1", 4, rv="16"))],
    ]
    source = Source(watch_rounds)
    waits: list[float] = []
    seen: list[dict[str, dict[str, int]] | None] = []
    original = cache.observe_outside_pod

    def observe(event_type: str, pod: Obj) -> None:
        original(event_type, pod)
        seen.append(cache.gpu_requests_by_node())

    cache.observe_outside_pod = observe  # type: ignore[method-assign]
    run(source, cache, waits)
    assert cache.outside_pods == OUTSIDE_LISTED and cache.synced_event.is_set()
    assert seen == [
        {"n1": {"nvidia.com/gpu": 4}, "n2": {"nvidia.com/gpu": 2}},
        {"n2": {"nvidia.com/gpu": 2}},
    ]
    assert [(c[0], c[2]) for c in source.calls] == [
        ("list", None),
        ("watch", "10"),
        ("watch", "15"),
        ("watch", "16"),
    ]
    assert {c[1] for c in source.calls} == {outside_selector(["team-a", "team-b"])}
    assert waits == []


def test_gone_lists_again_and_the_new_list_replaces_what_was_held() -> None:
    cache = synced_cache()
    source = Source(
        [
            ([gpu_pod("train", "n1", 4)], "10"),
            [("ERROR", {"kind": "Status", "code": 410, "message": "too old"})],
            ([gpu_pod("job", "n2", 1)], "40"),  # train ended while no watch was open
            Gone(),  # a 410 answered to the watch request itself
            ([gpu_pod("job", "n2", 1)], "50"),
            [],
        ]
    )
    run(source, cache, [])
    assert [(c[0], c[2]) for c in source.calls] == [
        ("list", None),
        ("watch", "10"),
        ("list", None),
        ("watch", "40"),
        ("list", None),
        ("watch", "50"),
        ("watch", "50"),
    ]
    assert cache.gpu_requests_by_node() == {"n2": {"nvidia.com/gpu": 1}}


def test_a_denial_counts_the_watched_namespaces_only_and_is_tried_again_later() -> None:
    cache = WatchCache(namespaces=["team-a", "team-b"])
    ours = gpu_pod("ours", "n1", 2, namespace="team-a", labels={"app": "x"})
    cache.observe(Kind.POD, None, ours)
    source = Source([GatewayError("list bound pods failed: 403 Forbidden", 403)])
    waits: list[float] = []
    run(source, cache, waits)
    assert cache.outside_pods == OUTSIDE_DENIED
    assert waits == [300.0]
    cache.mark_synced()
    # The workers do not wait for a watch that cannot run; the watched namespace still counts.
    assert cache.synced_event.is_set()
    assert cache.gpu_requests_by_node() == {"n1": {"nvidia.com/gpu": 2}}


def test_a_failed_watch_waits_and_resumes_from_its_version() -> None:
    cache = synced_cache()
    source = Source(
        [
            ([], "10"),
            GatewayError("watch bound pods failed: 500", 500),
            [("ADDED", gpu_pod("job", "n2", 1, rv="12"))],
        ]
    )
    waits: list[float] = []
    run(source, cache, waits)
    assert [(c[0], c[2]) for c in source.calls][:3] == [
        ("list", None),
        ("watch", "10"),
        ("watch", "10"),
    ]
    assert waits == [2.0]
    assert cache.gpu_requests_by_node() == {"n2": {"nvidia.com/gpu": 1}}


class PagedCore:
    """CoreV1Api.list_pod_for_all_namespaces answering a list in pages, as the API server does."""

    def __init__(self, pods: list[Obj], page: int) -> None:
        self.pods, self.page = pods, page
        self.calls: list[dict[str, object]] = []

    def list_pod_for_all_namespaces(self, **kwargs: object) -> object:
        self.calls.append(kwargs)
        start = int(str(kwargs.get("_continue") or 0))
        end = start + self.page
        meta: Obj = {"resourceVersion": "77"}
        if end < len(self.pods):
            meta["continue"] = str(end)
        body = {"metadata": meta, "items": self.pods[start:end]}
        return type("Response", (), {"data": json.dumps(body).encode()})()


def test_the_api_list_reads_every_page_and_keeps_only_gpu_pods() -> None:
    from vllm_operator.kube.inventory import ApiBoundPods

    cpu_only = gpu_pod("web", "n1", 0)
    del cpu_only["spec"]["initContainers"]
    pods = [gpu_pod(f"p{i}", "n1", 1) for i in range(5)] + [cpu_only]
    source = ApiBoundPods.__new__(ApiBoundPods)
    source.core = PagedCore(pods, page=2)  # type: ignore[assignment]
    items, version = source.list("spec.nodeName!=")
    assert [p["metadata"]["name"] for p in items] == [f"p{i}" for i in range(5)]
    assert version == "77"
    calls = source.core.calls  # type: ignore[attr-defined]
    assert [c["_continue"] for c in calls] == [None, "2", "4"]
    assert {c["field_selector"] for c in calls} == {"spec.nodeName!="}
