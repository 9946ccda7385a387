"""Watch caches: the objects the operator reads, kept in memory from the watch streams (Kopf's for
VLLMServices, nodes, LeaderWorkerSets and the DRA kinds; kube/informer.py's own for Deployments,
Services, PDBs and pods, #32).

Why: every reconcile and every remediation evaluation read the VLLMService, its Deployments,
Service, PDB, pods and all nodes from the API server. At 1000 services an operator with nothing
to do sent ~225 GETs and lists per second (#21). Kopf already watches these kinds; its events feed
`WatchCache` (handlers only forward bodies), and `CachedGateway` answers the KubeGateway reads
from memory, so a no-op reconcile and an idle evaluation cost no API call.

Rules that keep the memory view correct:

- Only what the operator owns is stored whole: Deployments, Services, PDBs and pods carrying the
  managed-by label (`app.kubernetes.io/managed-by=vllm-operator`), and every VLLMService and Node.
  Other objects of a cached kind are remembered by name only, so that a cache miss is
  authoritative ("does not exist") and a name taken by someone else's object (a name conflict the
  controller must see) is read from the API server.
- Newer wins: an event or a write response never replaces an object with a higher
  resourceVersion, and a deletion leaves a tombstone so a late write response cannot resurrect it.
- Until the initial list has been seen (`mark_synced`) every read goes to the API server. Kopf
  runs no handler except index handlers before every indexed resource's initial list was indexed
  (its "operator indexed" gate), so the first resource handler that runs opens the gate
  (handlers/registrations.py `_enqueue`, explicitly; no getter has that side effect), and the
  cache is synced once every watch of kube/informer.py has stored its first list too
  (`expect_listing`, `listed_first`). The queue's
  workers wait on `synced_event` before taking any key (#32); with a namespace-restricted watch
  and kube/inventory.py's watch of the other namespaces' GPU pods, also for its first list.
- A write that conflicted drops the object: the next read goes to the API server (a conflict
  means our view was wrong).
- Kopf (1.45, kopf/_cogs/clients/watching.py `continuous_watch`) lists a kind once and then
  resumes its watch from the last resourceVersion each time the server ends it (every
  `settings.watching.server_timeout`): a resumed watch delivers every change, deletions
  included, so nothing is missed, but nothing re-confirms an object that did not change either.
  It lists again only when the watch cannot resume (410 Gone) or the stream fails; then the
  sweep below applies. So every cached kind is also listed completely once per ~10 minutes by
  one task (kube/relist.py, `relisted` and `end_relist`, #32): what it returns is confirmed (and
  what it returns at a version the cache did not hold is handed back as drift), what it does
  not return is no longer believed, as after a re-list below. A quiet cluster so costs a few
  paginated lists per period, not a read per service.
- Every entry expires `ttl` seconds after it was last confirmed by an event, a write or a
  listing: a read that meets an expired entry goes to the API server, and a list answered there
  replaces what the cache holds for that selection (what it does not return is gone). Beside
  the periodic list this is only the backstop for lists that keep failing
  (kube/relist.py `backstop_ttl`, three periods); without it (the per-entry expiry alone, 12
  minutes) each unchanged service's objects were read again once per expiry, ~1.4 pod lists a
  second at 1000 services (docs/controller-benchmark.md "Fourth round").
- A complete list is the full truth (#32). Kopf re-lists a kind when its watch cannot resume
  (410 Gone, e.g. after an API-server restart) and delivers every listed object as an event of
  type None; an object deleted while no watch was open gets no DELETED event. The handlers pass
  those events to `listed`; once a kind's listing has been quiet for `RELIST_QUIET_SECONDS`,
  `end_lists` drops what the listing did not return (and was not confirmed by a write since it
  began) and hands it back, so that the services owning it reconcile (a Deployment deleted
  while the watches were reconnecting is recreated, and status does not report readiness from
  an object that no longer exists). Only the namespaces the listing covered are swept; a
  listing that returns nothing sends no event, and there the periodic list (above) finds it.
- Reads return copies: callers may modify what they get without touching the cache.
- Objects are kept as compact JSON text (with their labels and resourceVersion beside it) and
  decoded on read: a Deployment is ~9 KB of JSON but ~50 KB as Python dicts, and a read needs a
  fresh copy anyway (decoding one costs about what a deep copy does). managedFields entries of
  other managers are dropped (diff.py reads only the operator's own), and so are pods' and
  nodes' entirely and a node's image list.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from vllm_operator.kube import jsontext
from vllm_operator.kube.gateway import (
    APPLIED_KINDS,
    ConflictError,
    EventRecord,
    Kind,
    KubeGateway,
    Obj,
)
from vllm_operator.kube.pods import add_claims, gpu_claim
from vllm_operator.kube.slim import kept_managed_fields

log = logging.getLogger(__name__)

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "vllm-operator"
LABEL_INSTANCE = "app.kubernetes.io/instance"
# (The same values as rendering.names; kube sits below rendering in the layers, and a test checks
# that the two agree.)

LABELLED_KINDS: frozenset[Kind] = frozenset(
    {
        Kind.DEPLOYMENT,
        Kind.LEADER_WORKER_SET,
        Kind.SERVICE,
        Kind.PDB,
        Kind.POD,
        Kind.RESOURCE_CLAIM_TEMPLATE,
    }
)
"""Kinds stored only when they carry the managed-by label."""

CACHED_KINDS: frozenset[Kind] = LABELLED_KINDS | {
    Kind.NODE,
    Kind.VLLM_SERVICE,
    Kind.RESOURCE_SLICE,
}

_TOMBSTONES_MAX = 10_000

DEFAULT_TTL_SECONDS = 720.0
"""Twice the watch's client timeout (330 s, handlers/registrations.py) plus a minute: an entry no
event, write or listing confirmed for that long is read again from the API server (the backstop
for a deletion no watch or listing reported; see the module docstring). The operator sets a
longer one beside its periodic list (kube/relist.py `backstop_ttl`, handlers/main.py)."""

Key = tuple[str, str]  # namespace ("" for nodes), name

OUTSIDE_NONE = "none"
OUTSIDE_PENDING = "pending"
OUTSIDE_LISTED = "listed"
OUTSIDE_DENIED = "denied"

RELIST_QUIET_SECONDS = 5.0
"""A kind's (re-)listing is over when no listed object arrived for this long. Kopf hands the
listing to its per-object workers at once, so its events come in one burst."""


class _Listing:
    """One (re-)listing of a kind in progress: when it began, its last object, what it held."""

    __slots__ = ("started", "last", "keys", "namespaces")

    def __init__(self, now: float) -> None:
        self.started = now
        self.last = now
        self.keys: set[Key] = set()
        self.namespaces: set[str] = set()


def _rv(obj: Obj) -> int | None:
    """The resourceVersion as an integer, or None when absent or not numeric.

    resourceVersions are opaque to clients in principle; every API server in practice (etcd
    revisions) issues increasing integers, and ordering is only applied when both sides parse.
    """
    value = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _older(candidate: int | None, than: int | None) -> bool:
    return candidate is not None and than is not None and candidate < than


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _slim(kind: Kind, obj: Obj) -> Obj:
    """What is kept of an object (a shallow copy; `obj` is left alone): no reader uses other
    managers' managedFields entries (diff.py and replicas.py read the operator's own), pods',
    nodes' and VLLMServices' entries (kube/slim.py) or a node's image list, which are most of
    their size."""
    slim = dict(obj)
    meta = slim.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        ours = kept_managed_fields(kind, obj["metadata"]["managedFields"])  # kube/slim.py
        if ours:
            meta["managedFields"] = ours
        slim["metadata"] = meta
    status = slim.get("status")
    if kind is Kind.NODE and isinstance(status, dict) and "images" in status:
        slim["status"] = {k: v for k, v in status.items() if k != "images"}
    return slim


class _Entry:
    """One stored object: its JSON text, and what the cache itself needs without decoding it."""

    __slots__ = ("rv", "labels", "text")

    def __init__(self, kind: Kind, obj: Obj) -> None:
        self.rv = _rv(obj)
        labels = (obj.get("metadata") or {}).get("labels") or {}
        self.labels: dict[str, str] = dict(labels) if isinstance(labels, dict) else {}
        self.text = jsontext.dumps(_slim(kind, obj))

    def decode(self) -> Obj:
        obj: Obj = jsontext.loads(self.text)
        return obj


_OBSERVATIONS_TEXT = '"observations":[{'
"""How a non-empty status.observations list starts in an entry's compact JSON text."""


def _matches(labels: dict[str, str], selector: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _log_unlisted(gone: list[tuple[Kind, Obj]]) -> None:
    for kind, obj in gone:
        meta = obj.get("metadata") or {}
        log.info(
            "Marked an object a complete list did not return for a re-read kind=%s object=%s/%s",
            kind,
            meta.get("namespace", ""),
            meta.get("name", ""),
        )


class WatchCache:
    """The in-memory store, keyed by (kind, namespace, name). Thread-safe.

    Fed by the Kopf handlers (`observe`, from the event loop) and by `CachedGateway` with write
    responses (from worker threads).
    """

    def __init__(
        self,
        namespaces: Iterable[str] = (),
        ttl: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Empty: the operator watches every namespace.
        self.namespaces = frozenset(namespaces)
        self.ttl = ttl
        self._clock = clock
        self._objects: dict[Kind, dict[Key, _Entry]] = {k: {} for k in CACHED_KINDS}
        # Label selectors always name a service's instance label: (kind, namespace, instance) ->
        # keys, so a selection looks at one service's objects, not at every object of the kind.
        self._groups: dict[tuple[Kind, str, str], set[Key]] = {}
        # When each entry (ours or foreign) was last confirmed by an event or a write.
        self._seen: dict[tuple[Kind, Key], float] = {}
        # Objects of a cached kind that are not ours: name -> resourceVersion.
        self._foreign: dict[Kind, dict[Key, int | None]] = {k: {} for k in CACHED_KINDS}
        self._tombstones: dict[tuple[Kind, Key], int | None] = {}
        self._stale: set[tuple[Kind, Key]] = set()
        # Entries a complete (re-)listing did not return: read again, like expired ones, until
        # an event, a write or a read confirms or removes them (see `end_lists`).
        self._unconfirmed: set[tuple[Kind, Key]] = set()
        # Every watched pod's (node, GPUs) while it is bound and not ended, ours or not
        # (kube/pods.py): the placement inventory without a list of all pods (#29).
        self._gpu_claims: dict[Key, tuple[str, dict[str, int]]] = {}
        # With a namespace-restricted watch, the claims of GPU pods bound in every other
        # namespace (kube/inventory.py's cluster-wide watch of bound pods), and where that
        # watch stands: OUTSIDE_NONE (no such watch: only the watched namespaces' pods count),
        # OUTSIDE_PENDING (not listed yet), OUTSIDE_LISTED, or OUTSIDE_DENIED (RBAC refused it).
        self._outside_claims: dict[Key, tuple[str, dict[str, int]]] = {}
        self._outside = OUTSIDE_NONE
        self._synced = False
        # Kopf's index gate passed (`mark_synced`); the cache is synced once, besides, every
        # watch of kube/informer.py has stored its first list (`expect_listing`).
        self._kopf_synced = False
        self._pending_lists: set[tuple[Kind, str | None]] = set()
        self._synced_event = threading.Event()
        self._listings: dict[Kind, _Listing] = {}
        # Kinds whose first (the start's) listing is over: only later ones judge (`end_lists`).
        self._listed_before: set[Kind] = set()
        # `all_of`'s pre-selection by text (#32): (kind, string) -> the keys of the stored objects
        # whose text contains it, kept from the first listing that asks for that string on (the
        # fleet listing asks for one constant, `_OBSERVATIONS_TEXT`), so that a listing looks at
        # the few objects that hold it, not at every object of the kind.
        self._text_keys: dict[tuple[Kind, str], set[Key]] = {}
        # A lower bound of the oldest confirmation among each kind's stored objects (#32):
        # confirmations only move forward, so while it has not expired nothing of the kind has,
        # and a listing need not look at every entry to know.
        self._oldest_seen: dict[Kind, float] = {}
        self._guard = threading.Lock()

    # -- feeding ---------------------------------------------------------------------------------

    def observe(self, kind: Kind, event_type: str | None, body: Obj) -> None:
        """A watch event (type None for the initial listing, ADDED, MODIFIED or DELETED)."""
        if event_type == "DELETED":
            self.remove(kind, body)
        else:
            self.store(kind, body)

    def store(self, kind: Kind, obj: Obj) -> bool:
        """Keep `obj` unless a newer version (or its deletion) was seen; True when kept.

        A new version is encoded outside the guard (#32 no-op reconcile): on a restart the
        event loop stores every listed object while the workers read theirs, and encoding under
        the guard made the workers wait for it (the restart profile's `WatchCache.lookup` and
        `select` waits). The guard is then taken again and every rule checked afresh, so the
        outcome is the one a single pass under the guard gives; the encoding is wasted only
        when another thread stored a newer version in between."""
        if kind not in CACHED_KINDS:
            return False  # not watched (the InferencePool, the picker's RBAC): always read
        key = _key(obj)
        rv = _rv(obj)
        labels = (obj.get("metadata") or {}).get("labels") or {}
        foreign = kind in LABELLED_KINDS and labels.get(LABEL_MANAGED_BY) != MANAGED_BY
        if not foreign:
            with self._guard:
                if self._settled(kind, key, rv):
                    return self._store(kind, key, rv, obj, None)
            entry: _Entry | None = _Entry(kind, obj)
        else:
            entry = None  # remembered by name only: nothing to encode
        with self._guard:
            return self._store(kind, key, rv, obj, entry)

    def _settled(self, kind: Kind, key: Key, rv: int | None) -> bool:
        """Whether `_store` decides about this version without a new entry (under the guard):
        older than a deletion or than the held version, or the held version itself."""
        current = self._objects[kind].get(key)
        return (
            _older(rv, self._tombstones.get((kind, key)))
            or (current is not None and _older(rv, current.rv))
            or (current is not None and rv is not None and rv == current.rv)
        )

    def _store(self, kind: Kind, key: Key, rv: int | None, obj: Obj, entry: _Entry | None) -> bool:
        """`store` under the guard; `entry`: `obj` encoded already (None: encoded here if kept)."""
        if _older(rv, self._tombstones.get((kind, key))):
            return False
        current = self._objects[kind].get(key)
        if current is not None and _older(rv, current.rv):
            return False
        self._tombstones.pop((kind, key), None)
        self._stale.discard((kind, key))
        self._unconfirmed.discard((kind, key))
        self._seen[(kind, key)] = self._clock()
        if current is not None and rv is not None and rv == current.rv:
            # The version held (Kopf hands each event to the index handler and the event
            # handler): confirmed above, nothing to encode again (#32).
            return True
        if kind is Kind.POD:
            claim = gpu_claim(obj)
            if claim is None:
                self._gpu_claims.pop(key, None)
            else:
                self._gpu_claims[key] = claim
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if kind in LABELLED_KINDS and labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
            self._drop(kind, key)
            self._foreign[kind][key] = rv
            return True
        self._foreign[kind].pop(key, None)
        self._drop(kind, key)
        entry = self._objects[kind][key] = entry if entry is not None else _Entry(kind, obj)
        for (indexed, text), keys in self._text_keys.items():
            if indexed is kind and text in entry.text:
                keys.add(key)
        group = (kind, key[0], str(labels.get(LABEL_INSTANCE, "")))
        self._groups.setdefault(group, set()).add(key)
        return True

    def _drop(self, kind: Kind, key: Key) -> None:
        """Forget a stored object and its index entry (under the guard)."""
        self._unconfirmed.discard((kind, key))
        old = self._objects[kind].pop(key, None)
        if old is None:
            return
        for (indexed, _), keys in self._text_keys.items():
            if indexed is kind:
                keys.discard(key)
        group = (kind, key[0], str(old.labels.get(LABEL_INSTANCE, "")))
        members = self._groups.get(group)
        if members is not None:
            members.discard(key)
            if not members:
                del self._groups[group]

    def remove(self, kind: Kind, obj: Obj) -> None:
        """A deletion: forget the object and remember its resourceVersion (tombstone)."""
        if kind not in CACHED_KINDS:
            return
        key = _key(obj)
        rv = _rv(obj)
        with self._guard:
            current = self._objects[kind].get(key)
            if current is not None and _older(rv, current.rv):
                return  # a deletion older than what we hold: the object was re-created since
            self._drop(kind, key)
            self._foreign[kind].pop(key, None)
            self._seen.pop((kind, key), None)
            if kind is Kind.POD:
                self._gpu_claims.pop(key, None)
            if len(self._tombstones) >= _TOMBSTONES_MAX:
                self._tombstones.pop(next(iter(self._tombstones)))
            self._tombstones[(kind, key)] = rv

    def listed(self, kind: Kind, obj: Obj) -> None:
        """An object delivered by a (re-)list of its kind (a watch event of type None)."""
        key = _key(obj)
        now = self._clock()
        with self._guard:
            listing = self._listings.get(kind)
            if listing is None or now - listing.last > RELIST_QUIET_SECONDS:
                listing = self._listings[kind] = _Listing(now)
            listing.last = now
            listing.keys.add(key)
            listing.namespaces.add(key[0])
        self.store(kind, obj)

    def end_lists(self) -> list[tuple[Kind, Obj]]:
        """Finish every listing quiet for `RELIST_QUIET_SECONDS`: what it did not return (and
        nothing confirmed since it began) is no longer believed; returns those objects, so that
        the services owning them reconcile.

        Not believed, not dropped: the next read of such an object goes to the API server, which
        either returns it (it is stored again) or does not (it is removed), like an expired
        entry. Dropping it outright made the cache claim that it did not exist, and the quiet
        rule cannot tell a listing's end from a pause in its delivery: Kopf hands each listed
        object to the event handlers (which call `listed`) from its per-object workers, and on
        a loaded machine a gap of more than RELIST_QUIET_SECONDS splits one listing in two, the
        second judging the objects of the first as unlisted. A bench run at 1000 services under
        load average 5-9 so dropped 102 existing VLLMServices 8 s after the caches synced, and
        they were forgotten (#32). Another namespace's objects are not judged by a listing of
        this one, and the names of others' objects (always read from the API) are left as
        they are. The first listing of each kind (the operator's start) judges nothing: the
        cache holds only what that listing and the watch after it delivered, and an object
        created between Kopf's list and the first event handler's turn (an ADDED event, not
        part of the listing) would otherwise be judged unlisted."""
        now = self._clock()
        gone: list[tuple[Kind, Obj]] = []
        with self._guard:
            for kind, listing in list(self._listings.items()):
                if now - listing.last < RELIST_QUIET_SECONDS:
                    continue
                del self._listings[kind]
                first = kind not in self._listed_before
                self._listed_before.add(kind)
                if first or not self._synced:
                    continue  # the start's listing filled the cache: nothing there is old
                covered = listing.namespaces.__contains__
                gone += [
                    (kind, obj)
                    for obj in self._unbelieve(kind, covered, listing.keys, listing.started)
                ]
        _log_unlisted(gone)
        return gone

    def _unbelieve(
        self, kind: Kind, covered: Callable[[str], bool], listed: set[Key], started: float
    ) -> list[Obj]:
        """Mark what a complete list of `kind` (over the namespaces `covered` accepts) did not
        return, and nothing confirmed since the list began, as unconfirmed (under the guard);
        returns those objects."""
        gone: list[Obj] = []
        for key, entry in self._objects[kind].items():
            if (
                covered(key[0])
                and key not in listed
                and self._seen.get((kind, key), started) < started
                and (kind, key) not in self._unconfirmed
            ):
                self._unconfirmed.add((kind, key))
                gone.append(entry.decode())
        return gone

    # -- the periodic complete list (kube/relist.py) ---------------------------------------------

    def now(self) -> float:
        """The cache's clock: a periodic list notes when it began by it."""
        return self._clock()

    def relisted(self, kind: Kind, objs: Iterable[Obj]) -> list[Obj]:
        """A page of a periodic complete list: each object is stored (newer wins), which
        confirms it; returns those whose version the cache did not hold (created or changed
        while no event reached it), so that their services reconcile. In a quiet cluster the
        watch has delivered everything and this returns nothing."""
        drifted: list[Obj] = []
        for obj in objs:
            key = _key(obj)
            with self._guard:
                current = self._objects[kind].get(key)
                held = key in self._foreign[kind] or current is not None
                held_rv = current.rv if current is not None else self._foreign[kind].get(key)
            if self.store(kind, obj) and (not held or _rv(obj) != held_rv):
                drifted.append(obj)
        return drifted

    def end_relist(
        self, kind: Kind, namespace: str | None, listed: set[Key], started: float
    ) -> list[Obj]:
        """A periodic complete list of `kind` in `namespace` (None: every namespace) that began
        at `started` (`now`) returned `listed`: what it did not return is no longer believed,
        as after a re-list (`end_lists`): read again via the API server (`read_missing`
        removes it on a 404), and returned so that the services owning it reconcile."""
        if not self._synced:
            return []
        with self._guard:
            gone = self._unbelieve(
                kind, lambda ns: namespace is None or ns == namespace, listed, started
            )
        _log_unlisted([(kind, obj) for obj in gone])
        return gone

    def read_missing(self, kind: Kind, namespace: str, name: str) -> None:
        """The API server answered that the object does not exist: remove an entry no longer
        believed (unconfirmed by a listing, or expired); a fresher one stays (it was stored
        after the read was sent)."""
        if kind not in CACHED_KINDS:
            return
        key = (namespace, name)
        now = self._clock()
        with self._guard:
            if key in self._objects[kind] and self._expired(kind, key, now):
                self._drop(kind, key)
                self._seen.pop((kind, key), None)
                if kind is Kind.POD:
                    self._gpu_claims.pop(key, None)

    def invalidate(self, kind: Kind, namespace: str, name: str) -> None:
        """Our view of this object proved wrong (a conflict): read it from the API next time."""
        key = (namespace, name)
        with self._guard:
            self._drop(kind, key)
            self._foreign[kind].pop(key, None)
            self._seen.pop((kind, key), None)
            self._stale.add((kind, key))

    def mark_synced(self) -> None:
        """Kopf's kinds' initial lists have been stored; once the own watches' first lists are
        too (`listed_first`), misses are authoritative. (Every Kopf handler calls it: once set,
        nothing to do.)"""
        if self._kopf_synced:
            return
        with self._guard:
            self._kopf_synced = True
        self._sync_if_listed()

    def expect_listing(self, kind: Kind, namespace: str | None) -> None:
        """A watch of kube/informer.py will feed `kind` in `namespace` (None: all): the cache is
        not synced before its first list is stored."""
        with self._guard:
            self._pending_lists.add((kind, namespace))

    def listed_first(self, kind: Kind, namespace: str | None) -> None:
        """That watch's first list is stored (or it cannot list: its reads go to the API)."""
        with self._guard:
            self._pending_lists.discard((kind, namespace))
        self._sync_if_listed()

    def _sync_if_listed(self) -> None:
        with self._guard:
            ready = not self._synced and self._kopf_synced and not self._pending_lists
            if ready:
                self._synced = True
        if ready:
            log.info("Synced watch caches objects=%d", self.size())
            self._open_gate()

    def _open_gate(self) -> None:
        """The workers' gate opens once Kopf's lists are in and, where a watch of the pods
        outside the watched namespaces runs, its first list too (or its denial): a reconcile
        never meets an inventory that cannot answer."""
        if self._synced and self._outside != OUTSIDE_PENDING:
            self._synced_event.set()

    # -- the pods outside the watched namespaces (kube/inventory.py) -----------------------------

    def expect_outside_pods(self) -> None:
        """A watch of the bound pods outside the watched namespaces will feed this cache: the
        GPU inventory waits for its first list (and so does the workers' gate)."""
        with self._guard:
            self._outside = OUTSIDE_PENDING

    def replace_outside_pods(self, pods: Iterable[Obj]) -> None:
        """A complete list of the bound pods outside the watched namespaces: it replaces every
        claim held for them (a pod deleted while no watch was open is gone)."""
        claims = {}
        for pod in pods:
            claim = gpu_claim(pod)
            if claim is not None:
                claims[_key(pod)] = claim
        with self._guard:
            self._outside_claims = claims
            first = self._outside == OUTSIDE_PENDING
            self._outside = OUTSIDE_LISTED
        if first:
            log.info("Listed GPU pods outside the watched namespaces pods=%d", len(claims))
        self._open_gate()

    def observe_outside_pod(self, event_type: str, pod: Obj) -> None:
        """A watch event of a bound pod outside the watched namespaces (DELETED also when the
        pod ended or stopped matching the watch's field selector)."""
        key = _key(pod)
        claim = None if event_type == "DELETED" else gpu_claim(pod)
        with self._guard:
            if claim is None:
                self._outside_claims.pop(key, None)
            else:
                self._outside_claims[key] = claim

    def outside_pods_denied(self) -> None:
        """The API server refused the cluster-wide pod watch (RBAC): the inventory counts the
        watched namespaces' pods only, and the gate does not wait for it."""
        with self._guard:
            self._outside_claims = {}
            self._outside = OUTSIDE_DENIED
        self._open_gate()

    @property
    def outside_pods(self) -> str:
        """Where the inventory of pods outside the watched namespaces stands (OUTSIDE_*)."""
        return self._outside

    @property
    def synced(self) -> bool:
        return self._synced

    @property
    def synced_event(self) -> threading.Event:
        """Set once the initial lists are stored (the workers' start gate)."""
        return self._synced_event

    def size(self) -> int:
        with self._guard:
            return sum(len(v) for v in self._objects.values())

    def replace_selection(
        self, kind: Kind, namespace: str | None, selector: dict[str, str], listed: list[Obj]
    ) -> None:
        """A list the API server answered (namespace None: all): store what it returned and drop
        the cached objects of that selection it did not return (deleted unseen)."""
        names = {_key(o) for o in listed}
        now = self._clock()
        with self._guard:
            # Only expired entries: one stored after the list was taken is newer than the list.
            gone = [
                key
                for key, entry in self._objects[kind].items()
                if (namespace is None or key[0] == namespace)
                and key not in names
                and _matches(entry.labels, selector)
                and self._expired(kind, key, now)
            ]
        for key in gone:
            self.remove(kind, {"metadata": {"namespace": key[0], "name": key[1]}})
        for obj in listed:
            self.store(kind, obj)

    def _expired(self, kind: Kind, key: Key, now: float) -> bool:
        if (kind, key) in self._unconfirmed:
            return True
        seen = self._seen.get((kind, key))
        return self.ttl > 0 and seen is not None and now - seen > self.ttl

    # -- reading ---------------------------------------------------------------------------------

    def covers(self, namespace: str) -> bool:
        """Whether reads in `namespace` can be answered from memory."""
        return self._synced and (not self.namespaces or namespace in self.namespaces)

    def lookup(self, kind: Kind, namespace: str, name: str) -> tuple[bool, Obj | None]:
        """(answered, copy of the object or None). Not answered: ask the API server (not synced,
        a namespace not watched, an object invalidated or someone else's object)."""
        if kind not in CACHED_KINDS or not self.covers(namespace):
            return False, None
        key = (namespace, name)
        now = self._clock()
        with self._guard:
            if (
                (kind, key) in self._stale
                or key in self._foreign[kind]
                or self._expired(kind, key, now)
            ):
                return False, None
            entry = self._objects[kind].get(key)
        # Decoded outside the guard: entries are replaced, never modified in place.
        return True, entry.decode() if entry is not None else None

    def select(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj] | None:
        """Copies of the objects in `namespace` whose labels match; None when not answered."""
        if kind not in CACHED_KINDS or not self.covers(namespace):
            return None
        now = self._clock()
        objects = self._objects[kind]
        with self._guard:
            if LABEL_INSTANCE in selector:
                keys: Iterable[Key] = self._groups.get(
                    (kind, namespace, selector[LABEL_INSTANCE]), ()
                )
            else:
                keys = [k for k in objects if k[0] == namespace]
            selected = [
                (key, objects[key]) for key in keys if _matches(objects[key].labels, selector)
            ]
            if any(self._expired(kind, key, now) for key, _ in selected):
                return None
        return [entry.decode() for _, entry in sorted(selected, key=lambda ke: ke[0])]

    def gpu_requests_by_node(self) -> dict[str, dict[str, int]] | None:
        """GPUs requested per node by every pod that holds them; None when the cache cannot
        answer (not synced, or the watch of the pods outside the watched namespaces has not
        listed yet). The watched namespaces' pods come from the pod watch, the others' from
        kube/inventory.py's cluster-wide watch of bound pods; a namespace-restricted operator
        without that watch (OUTSIDE_NONE, OUTSIDE_DENIED) counts its own namespaces' pods only.
        A claim not confirmed within the TTL is left out, like an expired entry."""
        if not self._synced or self._outside == OUTSIDE_PENDING:
            return None
        now = self._clock()
        with self._guard:
            claims = [
                claim
                for key, claim in self._gpu_claims.items()
                if not self._expired(Kind.POD, key, now)
            ]
            claims += self._outside_claims.values()
        return add_claims(claims, {})

    def all_of(self, kind: Kind, having: Sequence[str] = ()) -> list[Obj] | None:
        """Copies of every cached object of a kind (nodes); None when not synced.

        `having`: only objects whose stored JSON text contains each of these strings are
        decoded and returned (a cheap pre-selection before the decode, which is the cost)."""
        if not self._synced:
            return None
        now = self._clock()
        objects = self._objects[kind]
        with self._guard:
            if self._any_expired(kind, now):
                return None
            if having:
                found = [(key, objects[key]) for key in self._containing(kind, having[0])]
            else:
                found = list(objects.items())
        return [
            entry.decode()
            for _, entry in sorted(found, key=lambda ke: ke[0])
            if all(text in entry.text for text in having)
        ]

    def _containing(self, kind: Kind, text: str) -> set[Key]:
        """The keys of the stored objects whose text contains `text` (under the guard); the
        first call for a string looks at every object, later ones are kept current by
        `store` and `_drop`."""
        keys = self._text_keys.get((kind, text))
        if keys is None:
            keys = {key for key, entry in self._objects[kind].items() if text in entry.text}
            self._text_keys[(kind, text)] = keys
        return keys

    def _any_expired(self, kind: Kind, now: float) -> bool:
        """Whether any stored object of `kind` expired (under the guard). Amortised O(1): the
        kept lower bound of the oldest confirmation is checked first, and the entries only when
        it has expired (then the bound is brought up to date)."""
        if self._unconfirmed and any(k is kind for k, _ in self._unconfirmed):
            return True
        if self.ttl <= 0:
            return False
        oldest = self._oldest_seen.get(kind)
        if oldest is not None and now - oldest <= self.ttl:
            return False
        seen = [self._seen.get((kind, key)) for key in self._objects[kind]]
        known = [t for t in seen if t is not None]
        self._oldest_seen[kind] = min(known, default=now)
        return any(now - t > self.ttl for t in known)

    def versions(
        self,
        kind: Kind,
        namespace: str,
        *,
        name: str | None = None,
        selector: dict[str, str] | None = None,
    ) -> tuple[tuple[str, int], ...] | None:
        """(name, resourceVersion) of the object `name`, or of those `selector` matches (sorted),
        as `lookup` / `select` would return them, without decoding anything; None where those
        would not answer from memory, or an entry has no numeric resourceVersion.

        An object's content changes only with its resourceVersion, so equal answers mean that a
        read would return equal objects: an idle remediation evaluation compares them instead of
        decoding the service and its pods (reconcile/evaluate.py, #32 steady CPU)."""
        if kind not in CACHED_KINDS or not self.covers(namespace):
            return None
        now = self._clock()
        objects = self._objects[kind]
        with self._guard:
            if name is not None:
                key = (namespace, name)
                if (
                    (kind, key) in self._stale
                    or key in self._foreign[kind]
                    or self._expired(kind, key, now)
                ):
                    return None
                entry = objects.get(key)
                selected = [(key, entry)] if entry is not None else []
            else:
                wanted = selector or {}
                if LABEL_INSTANCE not in wanted:
                    return None  # only a service's own objects are compared (its index)
                keys = self._groups.get((kind, namespace, wanted[LABEL_INSTANCE]), ())
                selected = [(k, objects[k]) for k in keys if _matches(objects[k].labels, wanted)]
                if any(self._expired(kind, k, now) for k, _ in selected):
                    return None
        found: list[tuple[str, int]] = []
        for (_, found_name), entry in sorted(selected, key=lambda ke: ke[0]):
            if entry.rv is None:
                return None
            found.append((found_name, entry.rv))
        return tuple(found)


class CachedGateway:
    """A KubeGateway whose reads come from a `WatchCache` (writes pass through and update it).

    A read the cache cannot answer goes to `inner` (and a Deployment/Service/PDB read that way is
    stored, so an object the operator just created is not read twice).
    """

    def __init__(self, inner: KubeGateway, cache: WatchCache) -> None:
        self.inner = inner
        self.cache = cache

    # -- reads -----------------------------------------------------------------------------------

    def list_nodes(self) -> list[Obj]:
        nodes = self.cache.all_of(Kind.NODE)
        if nodes is not None:
            return nodes
        nodes = self.inner.list_nodes()
        if self.cache.synced:
            self.cache.replace_selection(Kind.NODE, None, {}, nodes)
        return nodes

    def list_resource_slices(self) -> list[Obj]:
        slices = self.cache.all_of(Kind.RESOURCE_SLICE)
        if slices is not None:
            return slices
        slices = self.inner.list_resource_slices()
        if self.cache.synced:
            self.cache.replace_selection(Kind.RESOURCE_SLICE, None, {}, slices)
        return slices

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        answered, obj = self.cache.lookup(kind, namespace, name)
        if answered:
            return obj
        obj = self.inner.get(kind, namespace, name)
        if obj is not None:
            self.cache.store(kind, obj)
        elif self.cache.covers(namespace):
            self.cache.read_missing(kind, namespace, name)
        return obj

    def list_owned(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj]:
        found = self.cache.select(kind, namespace, selector)
        if found is not None:
            return found
        return self._refreshed(
            kind, namespace, selector, self.inner.list_owned(kind, namespace, selector)
        )

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        found = self.cache.select(Kind.POD, namespace, selector)
        if found is not None:
            return found
        return self._refreshed(
            Kind.POD, namespace, selector, self.inner.list_pods(namespace, selector)
        )

    def gpu_requests_by_node(self) -> dict[str, dict[str, int]]:
        found = self.cache.gpu_requests_by_node()
        return found if found is not None else self.inner.gpu_requests_by_node()

    def _refreshed(
        self, kind: Kind, namespace: str, selector: dict[str, str], listed: list[Obj]
    ) -> list[Obj]:
        """An API list of a watched namespace replaces the cache's view of that selection."""
        if self.cache.covers(namespace):
            self.cache.replace_selection(kind, namespace, selector, listed)
        return listed

    def list_services(self, namespace: str | None = None, fleet_of: str | None = None) -> list[Obj]:
        """From the watch cache once synced (the services of the watched namespaces); else the
        API, per watched namespace when the operator watches only some (a cluster-wide list
        would be forbidden), and what it lists refreshes the cache.

        `fleet_of`: only the services whose text names this model and holds a non-empty
        status.observations list are decoded (a superset of what `fleet_members` keeps; the
        entries are compact JSON, `_Entry`)."""
        having = (_OBSERVATIONS_TEXT, jsontext.dumps(fleet_of)) if fleet_of is not None else ()
        services = self.cache.all_of(Kind.VLLM_SERVICE, having)
        if services is not None:
            return [
                s
                for s in services
                if namespace is None or (s.get("metadata") or {}).get("namespace") == namespace
            ]
        if namespace is None and self.cache.namespaces:
            listed = [
                s for ns in sorted(self.cache.namespaces) for s in self.inner.list_services(ns)
            ]
        else:
            listed = self.inner.list_services(namespace)
        if self.cache.synced:
            if namespace is None and not self.cache.namespaces:
                self.cache.replace_selection(Kind.VLLM_SERVICE, None, {}, listed)
            else:
                for ns in [namespace] if namespace is not None else sorted(self.cache.namespaces):
                    if self.cache.covers(ns):
                        mine = [
                            o for o in listed if (o.get("metadata") or {}).get("namespace") == ns
                        ]
                        self.cache.replace_selection(Kind.VLLM_SERVICE, ns, {}, mine)
        return listed

    def versions(
        self,
        kind: Kind,
        namespace: str,
        *,
        name: str | None = None,
        selector: dict[str, str] | None = None,
    ) -> tuple[tuple[str, int], ...] | None:
        """The cache's resourceVersions of what `get` / `list_pods` would return (no API call;
        None: compare by reading). See `WatchCache.versions`."""
        return self.cache.versions(kind, namespace, name=name, selector=selector)

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return self.inner.read_secret_key(namespace, name, key)

    def read_pod_log(
        self, namespace: str, pod: str, container: str, *, previous: bool, tail_lines: int
    ) -> str | None:
        return self.inner.read_pod_log(
            namespace, pod, container, previous=previous, tail_lines=tail_lines
        )

    # -- writes ----------------------------------------------------------------------------------

    def apply(self, obj: Obj) -> Obj:
        return self._applied(obj, lambda: self.inner.apply(obj))

    def apply_unforced(self, obj: Obj, field_manager: str) -> Obj:
        return self._applied(obj, lambda: self.inner.apply_unforced(obj, field_manager))

    def _applied(self, obj: Obj, write: Any) -> Obj:
        kind = Kind(obj["kind"])
        meta = obj.get("metadata") or {}
        try:
            live: Obj = write()
        except ConflictError:
            self.cache.invalidate(kind, str(meta.get("namespace", "")), str(meta.get("name", "")))
            raise
        if kind in APPLIED_KINDS and isinstance(live, dict):
            self.cache.store(kind, live)
        return live

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        self.inner.delete(kind, namespace, name)
        self.cache.remove(kind, {"metadata": {"namespace": namespace, "name": name}})

    def apply_status(self, namespace: str, name: str, status: Obj) -> Obj | None:
        live = self.inner.apply_status(namespace, name, status)
        if isinstance(live, dict):
            self.cache.store(Kind.VLLM_SERVICE, live)
        return live

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


__all__ = ["CACHED_KINDS", "CachedGateway", "WatchCache"]
