"""The owned kinds' list-then-watch, straight into the watch cache (#32).

Why: Kopf passes every object of every watched kind through its per-object pipeline (a worker
task per object, the index handlers, the event handlers), about 3 ms of the GIL per listed
object on this project's benchmark machine. A restart of an operator with 1000 services lists
~6,000 objects, most of them the Deployments, Services, PDBs and pods the operator owns, and
spent most of its 31.6 CPU-seconds there (docs/controller-benchmark.md, "Where the restart's CPU
goes now"), against the < 10 CPU-s target. The cache needs none of Kopf's machinery for those
kinds: no handler progress, no diff, no per-object serialisation. So they are watched here,
the way client-go's reflector does it. The VLLMServices too (`service_watches`): ~3 events per
service in a creation burst (its creation, the operator's status writes) each cost Kopf's pipeline
while the event filter (reconcile/triggers.py `ServiceChanges`) discards most of them. Kopf keeps
the nodes, LeaderWorkerSets and the DRA kinds (and serves the admission webhook, which needs no
watch).

What a watch does (one thread per kind and watched namespace, or per kind cluster-wide):

- List in pages (`LIST_PAGE`, one snapshot), store every object (`WatchCache.relisted`: newer
  wins) and judge what the list did not return (`WatchCache.end_relist`: no longer believed,
  read again from the API server). A complete list is the full truth, so an object deleted while
  no watch was open is noticed here, not after a quiet-window guess. The first list of a watch
  judges nothing (the cache is not synced yet) and reports nothing of the owned kinds; the
  VLLMServices' first list hands every service to `on_found` (a start reconciles each once). A later list (after 410 Gone) hands what it found changed or
  gone to `on_found`, so that the services owning it reconcile.
- Watch from the list's resourceVersion, with bookmarks: each ADDED, MODIFIED or DELETED event is
  stored (`WatchCache.observe`) and handed to `on_event`. The server ends a watch every
  `WATCH_SECONDS`; it resumes from the last resourceVersion seen. A transport error (the API
  server restarting) waits `RETRY_SECONDS` and resumes from there too, so the deletions of the
  outage arrive as events; 410 Gone (the version was compacted) lists again.
- The workers' gate (`WatchCache.expect_listing`, `listed_first`): no reconcile reads the cache
  before every watch here has stored its first list, as with Kopf's index gate.
- Not served (404: a kind's API missing) or not allowed (403): logged, retried every
  `DENIED_RETRY_SECONDS`; the gate does not wait for it (reads of that kind then go to the API
  server, which answers the same).

Nothing is filtered by label: the cache remembers the names of objects that are not ours, so that
a miss is authoritative (kube/cache.py), and counts every watched pod's GPUs (placement), as it did
from Kopf's watches. The bodies are decoded with orjson (`jsontext`), one page or event at a time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from vllm_operator.kube import jsontext
from vllm_operator.kube.cache import WatchCache
from vllm_operator.kube.client import ApiGateway, api_error
from vllm_operator.kube.gateway import GatewayError, Kind, Obj

log = logging.getLogger(__name__)

INFORMED_KINDS: tuple[Kind, ...] = (Kind.DEPLOYMENT, Kind.SERVICE, Kind.PDB, Kind.POD)
"""The kinds watched here rather than by Kopf: the operator's own objects, the bulk of a
restart's listing."""

LIST_PAGE = 500
"""Objects per list page (client-go's reflector pages by 500 too)."""

WATCH_SECONDS = 300
"""The server ends each watch after this long (Kopf's `server_timeout` in registrations.py)."""
WATCH_READ_TIMEOUT = 330.0
CONNECT_TIMEOUT = 5.0
RETRY_SECONDS = 1.0
"""After a transport error or a failed list: about Kopf's reconnect pause (registrations.py
`API_ERROR_BACKOFFS`), so that a change after an API-server outage is seen within seconds."""
DENIED_RETRY_SECONDS = 300.0


class Gone(Exception):
    """The resourceVersion (or a list's continue token) is too old (410): list again."""


class KindSource(Protocol):
    """The two API calls a watch makes (the API server's, or a test's)."""

    def list_page(
        self, kind: Kind, namespace: str | None, continue_token: str | None
    ) -> tuple[list[Obj], str | None, str]:
        """(items, the next page's continue token or None, the list's resourceVersion).
        Raises GatewayError, Gone."""
        ...

    def watch(
        self, kind: Kind, namespace: str | None, resource_version: str
    ) -> Iterator[tuple[str, Obj]]:
        """(event type, object) until the server ends the watch. Raises GatewayError, Gone."""
        ...


EventCallback = Callable[[Kind, str, Obj], None]
FoundCallback = Callable[[Kind, Obj, bool], None]


def stream_events(response: Any) -> Iterator[tuple[str, Obj]]:
    """(event type, object) of a watch response (`_preload_content=False`), decoded with orjson
    line by line, until the server ends it; the connection goes back to the pool after. Shared
    with kube/inventory.py's watch."""
    try:
        for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
            if line:
                event = jsontext.loads(line)
                yield str(event.get("type")), event.get("object") or {}
    finally:
        response.release_conn()


class ApiKindSource:
    """`KindSource` on the kubernetes client (kube/client.py's table of list calls): raw JSON,
    no model objects."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.gateway = ApiGateway(api_client)

    def _call(self, kind: Kind, namespace: str | None, **kwargs: Any) -> Any:
        try:
            return self.gateway.list_raw(kind, namespace, **kwargs)
        except ApiException as exc:
            if exc.status == 410:
                raise Gone from exc
            verb = "watch" if kwargs.get("watch") else "list"
            where = namespace or "all namespaces"
            # With the API server's own words, as every other call's error: a 403 then names
            # the verb, resource and scope the ServiceAccount lacks ("cannot list resource ...").
            raise api_error(exc, f"{verb} {kind} in {where}") from exc

    def list_page(
        self, kind: Kind, namespace: str | None, continue_token: str | None
    ) -> tuple[list[Obj], str | None, str]:
        raw = self._call(
            kind,
            namespace,
            limit=LIST_PAGE,
            _continue=continue_token,
            _request_timeout=(CONNECT_TIMEOUT, 60.0),
        )
        body: Obj = jsontext.loads(raw.data)
        meta = body.get("metadata") or {}
        items: list[Obj] = body.get("items") or []
        return items, meta.get("continue") or None, str(meta.get("resourceVersion") or "")

    def watch(
        self, kind: Kind, namespace: str | None, resource_version: str
    ) -> Iterator[tuple[str, Obj]]:
        response = self._call(
            kind,
            namespace,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            watch=True,
            timeout_seconds=WATCH_SECONDS,
            _request_timeout=(CONNECT_TIMEOUT, WATCH_READ_TIMEOUT),
        )
        return stream_events(response)


class KindWatch:
    """Feeds `cache` with one kind in one namespace (None: all); `start` runs it on a daemon
    thread until `stop`."""

    def __init__(
        self,
        source: KindSource,
        cache: WatchCache,
        kind: Kind,
        namespace: str | None,
        on_event: EventCallback,
        on_found: FoundCallback,
        wait: Callable[[float], bool] | None = None,
        *,
        report_first_list: bool = False,
    ) -> None:
        self.source = source
        self.cache = cache
        self.kind = kind
        self.namespace = namespace
        self.on_event = on_event
        self.on_found = on_found
        self._stop = threading.Event()
        # Waits that long unless stopped; True when stopped (tests pass their own).
        self._wait = wait or self._stop.wait
        self._thread: threading.Thread | None = None
        self._first = True
        # The first list hands every object to `on_found` too (the VLLMServices: a start
        # reconciles every service once); otherwise it reports nothing.
        self._report_first = report_first_list
        cache.expect_listing(kind, namespace)

    @property
    def scope(self) -> str:
        return self.namespace or "all namespaces"

    def start(self) -> None:
        name = f"watch-{self.kind}-{self.namespace or 'all'}"
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """List, then watch from the list's version, for as long as the process runs."""
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                version = self._follow(version)
            except Gone:
                version = None  # compacted: the next list is the full truth again
            except _Broken as exc:
                version = exc.version
                log.warning(
                    "Failed watching kind=%s namespace=%s error=%r",
                    self.kind,
                    self.scope,
                    exc.__cause__,
                )
                if self._wait(RETRY_SECONDS):
                    return
            except GatewayError as exc:
                if exc.status in (403, 404):
                    log.warning(
                        "Failed watching a kind; its reads go to the API server kind=%s "
                        "namespace=%s error=%s",
                        self.kind,
                        self.scope,
                        exc,
                    )
                    self.cache.listed_first(self.kind, self.namespace)  # the gate won't wait
                    version = None
                    if self._wait(DENIED_RETRY_SECONDS):
                        return
                    continue
                log.warning(
                    "Failed watching kind=%s namespace=%s error=%s", self.kind, self.scope, exc
                )
                if self._wait(RETRY_SECONDS):
                    return
            except Exception as exc:  # a transport error mid-stream, a bad line: resume
                log.warning(
                    "Failed watching kind=%s namespace=%s error=%r", self.kind, self.scope, exc
                )
                if self._wait(RETRY_SECONDS):
                    return

    def _list(self) -> str:
        """One complete list, page by page; returns its resourceVersion."""
        started = self.cache.now()
        listed: set[tuple[str, str]] = set()
        changed: list[Obj] = []
        everything: list[Obj] = []
        token: str | None = None
        version = ""
        while True:
            items, token, version = self.source.list_page(self.kind, self.namespace, token)
            for obj in items:
                meta = obj.get("metadata") or {}
                listed.add((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
            changed += self.cache.relisted(self.kind, items)
            if self._first and self._report_first:
                everything += items
            if token is None:
                break
        gone = self.cache.end_relist(self.kind, self.namespace, listed, started)
        if self._first:
            self._first = False
            log.info("Listed kind=%s namespace=%s objects=%d", self.kind, self.scope, len(listed))
            self.cache.listed_first(self.kind, self.namespace)
            for obj in everything:
                self.on_found(self.kind, obj, False)
            return version
        for obj in changed:
            self.on_found(self.kind, obj, False)
        for obj in gone:
            self.on_found(self.kind, obj, True)
        return version

    def _follow(self, version: str) -> str:
        """One watch, until the server ends it; returns the last resourceVersion seen."""
        try:
            for event_type, obj in self.source.watch(self.kind, self.namespace, version):
                if self._stop.is_set():
                    break
                if event_type == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone
                    raise GatewayError(
                        f"watch {self.kind} failed: {obj.get('message', '')}", obj.get("code")
                    )
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    self.cache.observe(self.kind, event_type, obj)
                    self.on_event(self.kind, event_type, obj)
        except (GatewayError, Gone):
            raise
        except Exception as exc:
            # The stream broke after events were stored: resume from the last version seen
            # (raised again with it, so `run` waits and does not list everything again).
            raise _Broken(version) from exc
        return version


class _Broken(Exception):
    """A watch stream failed mid-way; `version` is the last resourceVersion it delivered."""

    def __init__(self, version: str) -> None:
        super().__init__(version)
        self.version = version


def _scopes(namespaces: Iterable[str]) -> list[str | None]:
    """The watched namespaces in order, or [None]: every namespace, one cluster-wide watch."""
    return list(sorted(set(namespaces))) or [None]


def owned_watches(
    source: KindSource,
    cache: WatchCache,
    namespaces: Iterable[str],
    on_event: EventCallback,
    on_found: FoundCallback,
) -> list[KindWatch]:
    """One watch per informed kind and watched namespace (one per kind when every namespace is
    watched), not started."""
    return [
        KindWatch(source, cache, kind, namespace, on_event, on_found)
        for kind in INFORMED_KINDS
        for namespace in _scopes(namespaces)
    ]


def service_watches(
    source: KindSource,
    cache: WatchCache,
    namespaces: Iterable[str],
    on_event: EventCallback,
    on_found: FoundCallback,
) -> list[KindWatch]:
    """One VLLMService watch per watched namespace (one when every namespace is watched), not
    started; the first list of each reports every service."""
    return [
        KindWatch(
            source, cache, Kind.VLLM_SERVICE, namespace, on_event, on_found, report_first_list=True
        )
        for namespace in _scopes(namespaces)
    ]


__all__ = [
    "INFORMED_KINDS",
    "ApiKindSource",
    "KindWatch",
    "owned_watches",
    "service_watches",
    "stream_events",
]
