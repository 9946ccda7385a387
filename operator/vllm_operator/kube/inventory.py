"""The GPU pods of the namespaces the operator does not watch, kept from one cluster-wide watch.

Why: placement (`spec.placement.strategy: Preferred`) and the canary's surge room count the free
GPUs of a node as the scheduler does: allocatable minus the requests of *every* pod bound there,
whatever its namespace (#29). An operator watching every namespace has them all from its pod
watch (`WatchCache._gpu_claims`). One restricted to some namespaces (`run --namespace`, the
chart's `watchNamespaces`) sees only their pods, and used to list every bound pod of the cluster
on each placement decision and each surge-room check (~35 lists per 2 idle minutes in the 1000
service benchmark, #32). Here one list and watch of the bound pods *outside* the watched
namespaces (`fieldSelector spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed,
metadata.namespace!=<each watched namespace>`) keeps their GPU requests per pod in the watch
cache (`WatchCache.replace_outside_pods`, `observe_outside_pod`), so a reconcile reads the
inventory from memory. The watched namespaces' pods still come from Kopf's pod watch only: no
pod is decoded twice.

What it keeps: a pod's node and GPU requests (`kube/pods.py:gpu_claim`), nothing else, and
nothing for pods without GPUs. The API server cannot trim a pod's fields, so each event is decoded
once and dropped.

How it follows the informer pattern (client-go's reflector): a list gives the full truth and a
resourceVersion, a watch from there delivers changes (a pod that ends or is deleted arrives as
DELETED: it no longer matches the field selector), bookmarks advance the resourceVersion, and
410 Gone (the version was compacted) lists again. A transport error or another error status
waits `RETRY_SECONDS` and resumes. It needs cluster-wide `list`/`watch` on pods (the chart's
`podInventory` rules); when the API server refuses it (403), the cache counts the watched
namespaces' pods only (`WatchCache.outside_pods_denied`, logged once) and the list is tried again
every `DENIED_RETRY_SECONDS`, so granting the role later needs no restart.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vllm_operator.kube.cache import OUTSIDE_DENIED, WatchCache
from vllm_operator.kube.gateway import GatewayError, Obj
from vllm_operator.kube.informer import Gone, stream_events
from vllm_operator.kube.pods import gpu_claim

log = logging.getLogger(__name__)

BOUND_NOT_ENDED = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""The pods that hold a node's GPUs: bound and not ended (kube/pods.py)."""

LIST_PAGE = 500
"""Pods per list page (client-go's reflector pages its lists by 500 too)."""

WATCH_SECONDS = 300
"""The server ends each watch after this long (like Kopf's `server_timeout`); it resumes from the
last resourceVersion."""
WATCH_READ_TIMEOUT = 330.0
RETRY_SECONDS = 2.0
DENIED_RETRY_SECONDS = 300.0


def outside_selector(namespaces: Iterable[str]) -> str:
    """The field selector of the bound, not-ended pods outside `namespaces`."""
    return ",".join(
        [BOUND_NOT_ENDED, *(f"metadata.namespace!={ns}" for ns in sorted(set(namespaces)))]
    )


class BoundPodSource(Protocol):
    """The two API calls the watch makes (the API server's, or a test's)."""

    def list(self, field_selector: str) -> tuple[list[Obj], str]:
        """(the pods, the list's resourceVersion). Raises GatewayError."""
        ...

    def watch(self, field_selector: str, resource_version: str) -> Iterator[tuple[str, Obj]]:
        """(event type, object) until the server ends the watch. Raises GatewayError, Gone."""
        ...


class ApiBoundPods:
    """`BoundPodSource` on the kubernetes client: raw JSON, no model objects (a cluster's pods
    are many, and only two fields of each are read)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api_client)

    def list(self, field_selector: str) -> tuple[list[Obj], str]:
        """In pages of `LIST_PAGE` (one snapshot: every page has the first page's version), so a
        large cluster's pods are never one response in memory; only GPU pods are kept."""
        items: list[Obj] = []
        token: str | None = None
        while True:
            try:
                raw: Any = self.core.list_pod_for_all_namespaces(
                    field_selector=field_selector,
                    limit=LIST_PAGE,
                    _continue=token,
                    _preload_content=False,
                )
            except ApiException as exc:
                if exc.status == 410:  # the continue token expired: list again from the start
                    raise Gone from exc
                raise GatewayError(
                    f"list bound pods failed: {exc.status} {exc.reason}", exc.status
                ) from exc
            body: Obj = json.loads(raw.data)
            items += [p for p in body.get("items") or [] if gpu_claim(p) is not None]
            token = (body.get("metadata") or {}).get("continue") or None
            if token is None:
                return items, str(body["metadata"]["resourceVersion"])

    def watch(self, field_selector: str, resource_version: str) -> Iterator[tuple[str, Obj]]:
        try:
            response: Any = self.core.list_pod_for_all_namespaces(
                field_selector=field_selector,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                watch=True,
                timeout_seconds=WATCH_SECONDS,
                _preload_content=False,
                _request_timeout=(5.0, WATCH_READ_TIMEOUT),
            )
        except ApiException as exc:
            if exc.status == 410:
                raise Gone from exc
            raise GatewayError(
                f"watch bound pods failed: {exc.status} {exc.reason}", exc.status
            ) from exc
        return stream_events(response)


class OutsidePodWatch:
    """Feeds `cache` with the GPU pods bound outside `namespaces`; `start` runs it on a daemon
    thread until `stop`."""

    def __init__(
        self,
        source: BoundPodSource,
        cache: WatchCache,
        namespaces: Sequence[str],
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        self.source = source
        self.cache = cache
        self.selector = outside_selector(namespaces)
        self._stop = threading.Event()
        # Waits that long unless stopped; True when stopped (tests pass their own).
        self._wait = wait or self._stop.wait
        self._thread: threading.Thread | None = None
        cache.expect_outside_pods()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="outside-pods", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """List, then watch from the list's version, for as long as the process runs."""
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    pods, version = self.source.list(self.selector)
                    self.cache.replace_outside_pods(pods)
                version = self._follow(version)
            except Gone:
                version = None  # compacted: the next list is the full truth again
            except GatewayError as exc:
                if exc.status == 403:
                    if self.cache.outside_pods != OUTSIDE_DENIED:
                        log.warning(
                            "Denied watching pods outside the watched namespaces; the GPU "
                            "inventory counts only the watched namespaces' pods error=%s",
                            exc,
                        )
                        self.cache.outside_pods_denied()
                    version = None
                    if self._wait(DENIED_RETRY_SECONDS):
                        return
                    continue
                log.warning("Failed watching pods outside the watched namespaces error=%s", exc)
                if self._wait(RETRY_SECONDS):
                    return
            except Exception as exc:  # a transport error mid-stream, a bad line: resume
                log.warning("Failed watching pods outside the watched namespaces error=%r", exc)
                if self._wait(RETRY_SECONDS):
                    return

    def _follow(self, version: str) -> str:
        """One watch, until the server ends it; returns the last resourceVersion seen."""
        for event_type, obj in self.source.watch(self.selector, version):
            if self._stop.is_set():
                break
            meta = obj.get("metadata") or {}
            if event_type == "ERROR":
                if obj.get("code") == 410:
                    raise Gone
                raise GatewayError(
                    f"watch bound pods failed: {obj.get('message', '')}", obj.get("code")
                )
            version = str(meta.get("resourceVersion") or version)
            if event_type in ("ADDED", "MODIFIED", "DELETED"):
                self.cache.observe_outside_pod(event_type, obj)
        return version


__all__ = ["ApiBoundPods", "Gone", "OutsidePodWatch", "outside_selector"]
