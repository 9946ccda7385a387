"""The owned kinds' list-then-watch (kube/informer.py, #32): the workers' gate waits for every
first list, a list is the full truth (what it no longer returns is handed back), a watch resumes
from the last version it delivered, and 410 Gone lists again."""

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from vllm_operator.kube.cache import WatchCache
from vllm_operator.kube.gateway import GatewayError, Kind, Obj
from vllm_operator.kube.informer import (
    DENIED_RETRY_SECONDS,
    RETRY_SECONDS,
    ApiKindSource,
    Gone,
    KindWatch,
    owned_watches,
    service_watches,
)

from .scripted import run_until_used_up
from .test_cache import deployment


class Source:
    """Scripted API answers: each list page / watch call takes the next step (an answer or an
    error) and records what it was asked."""

    def __init__(self, steps: list[object]) -> None:
        self.steps = steps
        self.calls: list[tuple[str, str | None]] = []

    def _next(self) -> object:
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def list_page(
        self, kind: Kind, namespace: str | None, continue_token: str | None
    ) -> tuple[list[Obj], str | None, str]:
        self.calls.append(("list", continue_token))
        answer = self._next()
        assert isinstance(answer, tuple), answer
        if len(answer) == 2:  # (items, version): a list of one page
            return answer[0], None, answer[1]
        return answer

    def watch(
        self, kind: Kind, namespace: str | None, resource_version: str
    ) -> Iterator[tuple[str, Obj]]:
        self.calls.append(("watch", resource_version))
        answer = self._next()
        assert isinstance(answer, list), answer
        for item in answer:
            if isinstance(item, Exception):
                raise item
            yield item


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.found: list[tuple[str, bool]] = []

    def on_event(self, kind: Kind, event_type: str, obj: Obj) -> None:
        self.events.append((event_type, obj["metadata"]["name"]))

    def on_found(self, kind: Kind, obj: Obj, gone: bool) -> None:
        self.found.append((obj["metadata"]["name"], gone))


def run(source: Source, cache: WatchCache, waits: list[float], seen: Recorder) -> KindWatch:
    """Run one Deployment watch until the script is used up."""

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return not source.steps

    watch = KindWatch(source, cache, Kind.DEPLOYMENT, None, seen.on_event, seen.on_found, wait=wait)
    run_until_used_up(source, watch)
    return watch


def bookmark(rv: str) -> tuple[str, Obj]:
    return "BOOKMARK", {"kind": "Deployment", "metadata": {"resourceVersion": rv}}


def test_the_gate_waits_for_kopf_and_every_first_list_and_the_first_list_reports_nothing() -> None:
    cache = WatchCache()
    seen = Recorder()
    pods = KindWatch(Source([]), cache, Kind.POD, None, seen.on_event, seen.on_found)
    source = Source([([deployment("a", rv="5")], "10"), []])
    run(source, cache, [], seen)
    cache.mark_synced()  # Kopf's index gate passed, the pods' first list not in yet
    assert not cache.synced and not cache.synced_event.is_set()
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "a") == (False, None)  # not authoritative yet
    cache.listed_first(Kind.POD, None)
    assert cache.synced and cache.synced_event.is_set()
    answered, held = cache.lookup(Kind.DEPLOYMENT, "ns", "a")
    assert answered and held is not None and held["metadata"]["resourceVersion"] == "5"
    assert seen.events == [] and seen.found == []  # the services' own listing enqueues them
    assert pods.scope == "all namespaces"


def test_events_are_stored_and_handed_on_and_the_watch_resumes_from_the_last_version() -> None:
    cache = WatchCache()
    cache.mark_synced()
    seen = Recorder()
    source = Source(
        [
            ([deployment("a", rv="5")], "10"),
            [("ADDED", deployment("b", rv="11")), bookmark("15")],
            # The server ended the watch; the next one resumes from the bookmark.
            [("MODIFIED", deployment("a", rv="16")), ("DELETED", deployment("b", rv="17"))],
        ]
    )
    waits: list[float] = []
    run(source, cache, waits, seen)
    assert source.calls == [("list", None), ("watch", "10"), ("watch", "15"), ("watch", "17")]
    assert seen.events == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "b") == (True, None)
    held = cache.lookup(Kind.DEPLOYMENT, "ns", "a")[1]
    assert held is not None and held["metadata"]["resourceVersion"] == "16"
    assert waits == []


def test_gone_lists_again_and_hands_back_what_changed_or_vanished_meanwhile() -> None:
    """An object deleted while no watch was open (no DELETED event) is found by the re-list:
    its services reconcile, and the cache no longer answers for it from memory."""
    ticks = itertools.count()
    cache = WatchCache(clock=lambda: float(next(ticks)))  # every reading of the clock is later
    cache.mark_synced()
    seen = Recorder()
    source = Source(
        [
            ([deployment("a", rv="5"), deployment("b", rv="6"), deployment("c", rv="7")], "10"),
            [("ERROR", {"kind": "Status", "code": 410, "message": "too old"})],
            ([deployment("a", rv="5")], "token", "30"),  # one page, then its continuation
            ([deployment("c", rv="25")], None, "40"),  # b deleted, c changed while down
            Gone(),  # a 410 answered to the watch request itself
            ([deployment("a", rv="5"), deployment("c", rv="25")], "50"),
            [],
        ]
    )
    run(source, cache, [], seen)
    assert source.calls == [
        ("list", None),
        ("watch", "10"),
        ("list", None),
        ("list", "token"),
        ("watch", "40"),
        ("list", None),
        ("watch", "50"),
        ("watch", "50"),
    ]
    assert seen.found == [("c", False), ("b", True)]
    assert cache.lookup(Kind.DEPLOYMENT, "ns", "b") == (False, None)  # read from the API now


def test_a_broken_stream_waits_and_resumes_from_the_last_version_it_delivered() -> None:
    cache = WatchCache()
    cache.mark_synced()
    seen = Recorder()
    source = Source(
        [
            ([], "10"),
            [("ADDED", deployment("a", rv="12")), ConnectionResetError("reset by peer")],
            GatewayError("watch failed: 500", 500),
            [("ADDED", deployment("b", rv="14"))],
        ]
    )
    waits: list[float] = []
    run(source, cache, waits, seen)
    assert source.calls[:4] == [("list", None), ("watch", "10"), ("watch", "12"), ("watch", "12")]
    assert waits == [RETRY_SECONDS, RETRY_SECONDS]
    assert seen.events == [("ADDED", "a"), ("ADDED", "b")]


def test_a_kind_not_served_does_not_hold_the_gate_and_is_tried_again_later() -> None:
    cache = WatchCache()
    seen = Recorder()
    source = Source([GatewayError("list Deployment failed: 403 Forbidden", 403)])
    waits: list[float] = []
    run(source, cache, waits, seen)
    assert waits == [DENIED_RETRY_SECONDS]
    cache.mark_synced()
    assert cache.synced_event.is_set()


def test_one_watch_per_kind_and_watched_namespace() -> None:
    seen = Recorder()
    every = owned_watches(Source([]), WatchCache(), [], seen.on_event, seen.on_found)
    assert [(w.kind, w.namespace) for w in every] == [
        (Kind.DEPLOYMENT, None),
        (Kind.SERVICE, None),
        (Kind.PDB, None),
        (Kind.POD, None),
    ]
    some = owned_watches(
        Source([]), WatchCache(["b", "a"]), ["b", "a"], seen.on_event, seen.on_found
    )
    assert [(w.kind, w.namespace) for w in some][:2] == [
        (Kind.DEPLOYMENT, "a"),
        (Kind.DEPLOYMENT, "b"),
    ]
    assert len(some) == 8


class Response:
    def __init__(self, data: bytes = b"", lines: list[bytes] | None = None) -> None:
        self.data = data
        self.lines = lines or []
        self.released = False

    def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
        yield from self.lines

    def release_conn(self) -> None:
        self.released = True


def test_the_service_watches_first_list_reports_every_service_and_later_lists_what_changed() -> (
    None
):
    """A start reconciles every VLLMService once (its watch's first list hands each over, after
    the gate's part is done), a re-list after 410 only what changed or vanished."""
    cache = WatchCache(["ml"])
    cache.mark_synced()
    seen = Recorder()
    (watch,) = service_watches(Source([]), cache, ["ml"], seen.on_event, seen.on_found)
    assert (watch.kind, watch.namespace) == (Kind.VLLM_SERVICE, "ml")
    a, b = (
        {"kind": "VLLMService", "metadata": {"name": n, "namespace": "ml", "resourceVersion": rv}}
        for n, rv in (("a", "5"), ("b", "6"))
    )
    source = Source([([a, b], "10"), Gone(), ([a], "20"), []])
    watch.source = source
    run_until_used_up(source, watch)
    assert cache.synced
    assert seen.found == [("a", False), ("b", False), ("b", True)]


def test_the_api_source_pages_decodes_and_streams_raw_json() -> None:
    asked: list[dict[str, Any]] = []
    watch_response = Response(
        lines=[
            json.dumps({"type": "ADDED", "object": deployment("a", rv="12")}).encode() + b"\n",
            json.dumps(
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "13"}}}
            ).encode()
            + b"\n",
        ]
    )

    class Gateway:
        """kube/client.py `ApiGateway.list_raw`: the client's list call, unparsed."""

        def list_raw(self, kind: Kind, namespace: str | None, **kwargs: Any) -> Response:
            assert (kind, namespace) == (Kind.DEPLOYMENT, None)
            asked.append(kwargs)
            if kwargs.get("watch"):
                return watch_response
            meta = {"resourceVersion": "10", "continue": "t"}
            return Response(json.dumps({"metadata": meta, "items": [deployment("a")]}).encode())

    source = ApiKindSource.__new__(ApiKindSource)
    source.gateway = Gateway()  # type: ignore[assignment]
    items, token, version = source.list_page(Kind.DEPLOYMENT, None, None)
    assert [i["metadata"]["name"] for i in items] == ["a"] and (token, version) == ("t", "10")
    assert asked[0]["limit"] == 500
    events = list(source.watch(Kind.DEPLOYMENT, None, "10"))
    assert [e[0] for e in events] == ["ADDED", "BOOKMARK"] and watch_response.released
    assert asked[1]["resource_version"] == "10" and asked[1]["allow_watch_bookmarks"] is True


def test_a_denied_list_names_what_the_service_account_lacks() -> None:
    """A 403 carries the API server's "cannot list resource ..." text, which the log shows and
    the chart test's RBAC check looks for (as for every other call's error)."""
    denied = ApiException(status=403, reason="Forbidden")
    denied.body = json.dumps(
        {
            "kind": "Status",
            "message": 'deployments.apps is forbidden: User "system:serviceaccount:ops:op" '
            'cannot list resource "deployments" in API group "apps" at the cluster scope',
            "code": 403,
        }
    )

    class Gateway:
        def __init__(self, error: ApiException) -> None:
            self.error = error

        def list_raw(self, kind: Kind, namespace: str | None, **kwargs: Any) -> Any:
            raise self.error

    source = ApiKindSource.__new__(ApiKindSource)
    source.gateway = Gateway(denied)  # type: ignore[assignment]
    with pytest.raises(GatewayError) as caught:
        source.list_page(Kind.DEPLOYMENT, None, None)
    assert caught.value.status == 403
    assert str(caught.value).startswith("list Deployment in all namespaces failed: 403 Forbidden: ")
    assert 'cannot list resource "deployments" in API group "apps"' in str(caught.value)
    source.gateway = Gateway(ApiException(status=410, reason="Gone"))  # type: ignore[assignment]
    with pytest.raises(Gone):
        source.list_page(Kind.DEPLOYMENT, None, None)
