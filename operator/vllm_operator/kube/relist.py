"""The watch cache's periodic complete list: one paginated list per cached kind, every ~10 minutes.

Why: Kopf (1.45) lists each kind once and then resumes its watch from the last resourceVersion
whenever the server ends it, so nothing re-confirms an object that does not change. The cache's
backstop for a deletion no event reported was a per-entry expiry (12 minutes): once a cluster had
been quiet that long, every unchanged service's pods (and Deployments, ...) were read again, one
selection at a time, once per expiry: ~1.4 `list:Pod` a second at 1000 services
(docs/controller-benchmark.md, "Fourth round"). Here one task lists every cached kind completely
(label-selected to the operator's own objects where the cache keeps only those), in pages, once
per period (`RELIST_SECONDS`, jittered so that replicas of a restart do not list in step): the
reads per period are O(kinds x pages), not O(services).

What a list does to the cache (`WatchCache.relisted`, `end_relist`), the same as Kopf's re-list
after a 410: every listed object is stored (newer wins), which confirms it; one whose version
the cache did not hold (created or changed while no event reached it) is returned as drift;
what the list did not return, and nothing confirmed since it began, is no longer believed (its
next read goes to the API server, which returns it or answers 404, `read_missing`) and is
returned as gone. The caller (handlers/registrations.py) enqueues the services concerned. The
per-entry expiry stays, longer (`backstop_ttl`), for when the lists keep failing.

The list runs on one worker thread, never in a reconcile; the first one a period after the start
(the start's listing filled the cache).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from vllm_operator.kube.cache import (
    CACHED_KINDS,
    LABEL_MANAGED_BY,
    LABELLED_KINDS,
    MANAGED_BY,
    WatchCache,
)
from vllm_operator.kube.gateway import GatewayError, Kind, Obj

log = logging.getLogger(__name__)

RELIST_SECONDS = 600.0
"""How often every cached kind is listed completely (10 minutes, like controller-runtime's
default SyncPeriod order of magnitude; a deletion no watch event reported is noticed within it)."""

JITTER = 0.1
"""Each period is RELIST_SECONDS times a factor drawn from [1 - JITTER, 1 + JITTER]."""

RETRY_SECONDS = 60.0
"""After a failed list (the API server down, a 410 on a continue token), the next round."""

LIST_PAGE = 250
"""Objects per page: a page of Deployments is ~2 MB of JSON, decoded one page at a time."""

CLUSTER_SCOPED: frozenset[Kind] = frozenset({Kind.NODE, Kind.RESOURCE_SLICE})

RELIST_ORDER: tuple[Kind, ...] = tuple(sorted(CACHED_KINDS))
"""The kinds a round lists (every kind the watch cache keeps), in a fixed order."""


def backstop_ttl(period: float) -> float:
    """The watch cache's per-entry expiry beside a periodic list every `period`: three periods
    at their longest, so that no entry of a cluster listed in time ever expires (a failed list
    is retried after RETRY_SECONDS), and one no list confirmed for that long is read again."""
    return 3 * period * (1 + JITTER)


class PageLister(Protocol):
    """The one API call the periodic list makes (kube/client.py `ApiGateway`, kube/fake.py)."""

    def list_page(
        self,
        kind: Kind,
        namespace: str | None,
        label_selector: str,
        *,
        limit: int,
        continue_token: str | None,
    ) -> tuple[list[Obj], str | None]: ...


@dataclass(frozen=True)
class Drift:
    """An object a periodic list found different from the cache: `gone` (not returned), or
    created or changed behind it."""

    kind: Kind
    obj: Obj
    gone: bool


class PeriodicRelist:
    """Lists every cached kind once per period into `cache`; `run_due` does a due round."""

    def __init__(
        self,
        lister: PageLister,
        cache: WatchCache,
        namespaces: Iterable[str] = (),
        *,
        period: float = RELIST_SECONDS,
        rand: Callable[[], float] = random.random,
        count: Callable[[str], None] | None = None,
    ) -> None:
        self.lister = lister
        self.cache = cache
        self.namespaces = sorted(set(namespaces))
        self.period = period
        self._rand = rand
        # Called with "list:<Kind>" per page requested (the operator's API read counter).
        self._count = count
        self._next = cache.now() + self._interval()

    def _interval(self) -> float:
        return self.period * (1 + JITTER * (2 * self._rand() - 1))

    def seconds_until_due(self) -> float:
        return max(0.0, self._next - self.cache.now())

    def run_due(self) -> list[Drift]:
        """List every cached kind if a round is due (and the cache synced); the drift found."""
        if self.cache.now() < self._next:
            return []
        if not self.cache.synced:
            self._next = self.cache.now() + RETRY_SECONDS
            return []
        drifts: list[Drift] = []
        failed = False
        scopes = [
            (kind, namespace)
            for kind in RELIST_ORDER
            for namespace in (
                [None] if kind in CLUSTER_SCOPED or not self.namespaces else self.namespaces
            )
        ]
        for kind, namespace in scopes:
            try:
                drifts += self._list(kind, namespace)
            except GatewayError as exc:
                if exc.status in (403, 404):
                    # Not served (no LeaderWorkerSet CRD, no DRA) or not ours to list: Kopf
                    # cannot watch it either, so the cache holds none of it.
                    log.debug("Skipped a periodic list kind=%s status=%s", kind, exc.status)
                    continue
                # The rest of the round waits for the retry (an API server that is down
                # fails them all); what was listed until here has been judged.
                failed = True
                log.warning("Failed a periodic list kind=%s error=%s", kind, exc)
                break
        self._next = self.cache.now() + (RETRY_SECONDS if failed else self._interval())
        if drifts:
            log.info(
                "Found drift in a periodic list gone=%d changed=%d",
                sum(d.gone for d in drifts),
                sum(not d.gone for d in drifts),
            )
        return drifts

    def _list(self, kind: Kind, namespace: str | None) -> list[Drift]:
        """One complete list of `kind` in `namespace` (None: all), page by page."""
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY}" if kind in LABELLED_KINDS else ""
        started = self.cache.now()
        listed: set[tuple[str, str]] = set()
        drifts: list[Drift] = []
        token: str | None = None
        while True:
            if self._count is not None:
                self._count(f"list:{kind}")
            items, token = self.lister.list_page(
                kind, namespace, selector, limit=LIST_PAGE, continue_token=token
            )
            for obj in items:
                meta = obj.get("metadata") or {}
                listed.add((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
            drifts += [Drift(kind, obj, False) for obj in self.cache.relisted(kind, items)]
            if token is None:
                break
        gone = self.cache.end_relist(kind, namespace, listed, started)
        return drifts + [Drift(kind, obj, True) for obj in gone]


__all__ = ["Drift", "PageLister", "PeriodicRelist", "backstop_ttl"]
