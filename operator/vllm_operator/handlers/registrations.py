"""Kopf registrations: the only module importing kopf.

Handlers register and delegate to `reconcile.Controller`; they hold no logic and return nothing
(Kopf would otherwise store return values in status). Kopf watches the nodes, LeaderWorkerSets and
DRA kinds and serves the admission webhook; the VLLMServices and the owned kinds are watched by
kube/informer.py, whose callbacks are here too (`service_watch_callbacks`,
`owned_watch_callbacks`). Resource handlers only map an event to
service keys (`reconcile/triggers.py`) and add them to the controller's work queue (#32): they
never reconcile on Kopf's threads and never raise, so Kopf does not retry anything of ours (the
queue's backoff is the only retry). Every resource handler is an index or event handler: Kopf
keeps no diff-base and no handler progress, so it writes nothing to any object (no
last-handled-configuration annotation, no finalizer; `configure`), and Kopf's per-handler Events
are turned off: the controller emits Events for its decisions only, so a reconcile with nothing
to change writes nothing.
"""

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Iterable
from typing import Any

import kopf

from vllm_operator.api.service import GROUP, LEGACY_FINALIZER, PLURAL, VERSION
from vllm_operator.handlers.kopf_essence import NoDiffBaseStorage
from vllm_operator.kube.bodies import VLLMServiceBody
from vllm_operator.kube.cache import WatchCache
from vllm_operator.kube.gateway import LWS_GROUP, LWS_PLURAL, LWS_VERSION, Kind, Obj
from vllm_operator.kube.relist import PeriodicRelist
from vllm_operator.kube.slim import shed
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.slices import slice_products
from vllm_operator.reconcile.triggers import (
    ServiceChanges,
    owners_of,
    services_of_found,
    services_of_owned_event,
)
from vllm_operator.rendering.names import LABEL_MANAGED_BY, MANAGED_BY

LIST_SWEEP_SECONDS = 1.0

# Kopf retries a failed API request (a watch included) with these pauses. Its default
# (1, 1, 2, 3, 5, 8, 13, 21) sleeps up to 21 s between attempts, so after an API-server outage a
# change could wait that long to be seen. A flat 2 s keeps the lag after recovery at about 2 s and
# retries for 30 minutes before Kopf gives up on the request.
API_ERROR_BACKOFFS = (0.5, 1.0, 1.0) + (2.0,) * 900
WATCH_CONNECT_TIMEOUT = 5.0


# The admission handler's id: Kopf serves it at https://<host>:<port>/<id>, the path the
# ValidatingWebhookConfiguration (chart, e2e) calls.
ADMISSION_HANDLER_ID = "validate-vllmservice"


def operator_memo(
    controller: Controller,
    connection: dict[str, Any] | None = None,
    in_cluster: bool = False,
    webhook_server: kopf.WebhookServer | None = None,
    cache: WatchCache | None = None,
    relist: PeriodicRelist | None = None,
    service_changes: ServiceChanges | None = None,
) -> kopf.Memo:
    """What every handler receives as `memo` (passed to `kopf.run(memo=...)`).

    Kopf hands each handler a shallow copy, so the controller and the VLLMService event filter
    (`service_changes`, shared with the VLLMService watches: `service_watch_callbacks`) are
    shared; no module-level state. Admission reviews run on two threads
    of their own, so they never queue behind reconciles in Kopf's handler pool.
    """
    return kopf.Memo(
        controller=controller,
        connection=connection,
        in_cluster=in_cluster,
        background_tasks=[],
        webhook_server=webhook_server,
        admission_pool=concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="webhook"),
        cache=cache,
        relist=relist,
        service_changes=service_changes if service_changes is not None else ServiceChanges(),
    )


def _controller(memo: kopf.Memo) -> Controller:
    controller: Controller = memo["controller"]
    return controller


def _service_changes(memo: kopf.Memo) -> ServiceChanges:
    changes: ServiceChanges = memo["service_changes"]
    return changes


def _enqueue(memo: kopf.Memo, keys: Iterable[tuple[str, str]]) -> None:
    """Add service keys to the controller's queue (every resource handler's only action).

    The sync gate: Kopf runs no resource handler but index handlers until the initial list of
    every indexed resource has gone through the index handlers below (its "operator indexed"
    toggle, kopf/_core/reactor/orchestration.py and processing.py), so the first resource
    handler to run proves the watch cache holds every object that existed at start. It opens the
    cache's gate here, explicitly; the workers wait for that gate before taking any key, so no
    reconcile reads a half-filled cache. (Startup and cleanup activities run outside the gate.)
    """
    cache: WatchCache | None = memo.get("cache")
    if cache is not None:
        cache.mark_synced()
    controller = _controller(memo)
    for key in keys:
        controller.enqueue(key)


def owned_watch_callbacks(
    controller: Controller,
) -> tuple[Callable[[Kind, str, Obj], None], Callable[[Kind, Obj, bool], None]]:
    """What kube/informer.py's watches of the owned kinds call (on their own threads, #32): a
    watch event, and an object a re-list found changed or gone, each enqueues the services it
    concerns (`reconcile/triggers.py`). No Kopf gate to open: those watches hold the cache's
    sync back themselves (`WatchCache.expect_listing`)."""

    def on_event(kind: Kind, _type: str, obj: Obj) -> None:
        for key in services_of_owned_event(kind, obj):
            controller.enqueue(key)

    def on_found(kind: Kind, obj: Obj, _gone: bool) -> None:
        for key in services_of_found(kind, obj):
            controller.enqueue(key)

    return on_event, on_found


def service_watch_callbacks(
    controller: Controller, changes: ServiceChanges
) -> tuple[Callable[[Kind, str, Obj], None], Callable[[Kind, Obj, bool], None]]:
    """What kube/informer.py's VLLMService watches call (#32): an event enqueues its service when
    it was created, deleted, or changed in what a reconcile reads of it (`ServiceChanges`); the
    operator's own status writes change none of that and enqueue nothing. A listed service (the
    first list, where every service is new to the filter, or a re-list after 410 Gone) enqueues
    the same way; one a complete list no longer returned (deleted while no watch was open) is
    forgotten and enqueued. The reconcile is level-based (it compares the generation and what its
    status recorded), so no diff is kept.

    A deleted service is enqueued: its worker finds it gone and forgets it (only the worker
    holding a key touches that service's state). No finalizer: deleting a VLLMService never
    waits for the operator (children go by owner references); the one older versions added is
    removed by the reconcile (`Controller`)."""

    def on_event(_kind: Kind, event_type: str, obj: Obj) -> None:
        if changes.wants(event_type, obj):
            controller.enqueue(VLLMServiceBody(obj).key)

    def on_found(_kind: Kind, obj: Obj, gone: bool) -> None:
        key = VLLMServiceBody(obj).key
        if gone:
            changes.forget(key)
            controller.enqueue(key)
        elif changes.wants(None, obj):
            controller.enqueue(key)

    return on_event, on_found


# -- watch caches (#21): index handlers feed the cache, before any other handler runs ------------
# VLLMServices, Deployments, Services, PDBs and pods are not Kopf's (#32): kube/informer.py lists
# and watches them straight into the cache (Kopf's per-object pipeline cost ~3 ms of the GIL per
# object). The workers' gate also waits for Kopf's index gate: handlers/kopf_gate.py
# `notify_when_indexed` (main.py) and, as before, the first resource handler (`_enqueue`).
# Index handlers run for the initial listing and every change (not for deletions: the event
# handlers below forward those). They return None, so Kopf's own indices stay empty; what they
# buy is Kopf's gate. No label filter here: the cache stores only managed-by objects and
# remembers the names of others, so that a miss is authoritative (see kube/cache.py).


def _observe(memo: kopf.Memo, kind: Kind, event_type: str | None, body: kopf.Body) -> None:
    """Store the body, then shed from Kopf's own copy what the cache dropped (kube/slim.py): the
    bodies Kopf holds at its start gate are the restart's peak RSS."""
    cache: WatchCache | None = memo.get("cache")
    if cache is not None:
        cache.observe(kind, event_type, dict(body))
        shed(kind, body)


def _watched(memo: kopf.Memo, kind: Kind, event_type: str | None, body: kopf.Body) -> None:
    """An event handler's part in the cache: a deletion leaves it; an object of a (re-)listing
    (type None) is counted, so that what a complete list did not return is dropped."""
    cache: WatchCache | None = memo.get("cache")
    if cache is None:
        return
    cache.mark_synced()  # a resource handler: past Kopf's index gate (see `_enqueue`)
    if event_type == "DELETED":
        cache.observe(kind, event_type, dict(body))
    elif event_type is None:
        cache.listed(kind, dict(body))


def _keys_of_gone(
    memo: kopf.Memo, kind: Kind, obj: dict[str, Any], gone: bool = True
) -> list[tuple[str, str]]:
    """The services concerned by an object a complete list no longer returned (or, `gone`
    False, returned at a version the cache did not hold: kube/relist.py)."""
    meta = obj.get("metadata") or {}
    if kind is Kind.VLLM_SERVICE:
        return [(str(meta.get("namespace") or "default"), str(meta.get("name", "")))]
    if kind is Kind.NODE:
        return _controller(memo).triggers.services_affected_by_node(obj, deleted=gone)
    if kind is Kind.RESOURCE_SLICE:
        return _controller(memo).triggers.services_affected_by_products(slice_products(obj))
    return services_of_found(kind, obj)


def _enqueue_found(memo: kopf.Memo, kind: Kind, obj: dict[str, Any], gone: bool = True) -> None:
    """Enqueue the services concerned by what a complete list found; a VLLMService it no longer
    returned (deleted while a watch was down: no DELETED event) also leaves the event filter's
    memory."""
    keys = _keys_of_gone(memo, kind, obj, gone)
    if kind is Kind.VLLM_SERVICE and gone:
        for key in keys:
            _service_changes(memo).forget(key)
    _enqueue(memo, keys)


async def _end_lists(memo: kopf.Memo, cache: WatchCache) -> None:
    """Once a second: finish quiet (re-)listings and enqueue the services whose objects a
    complete list no longer returned. On the event loop, like the node handler (one writer of
    the node fingerprints and of the VLLMService event filter)."""
    while True:
        await asyncio.sleep(LIST_SWEEP_SECONDS)
        try:
            for kind, obj in cache.end_lists():
                _enqueue_found(memo, kind, obj)
        except Exception:  # never end the loop
            logging.getLogger(__name__).exception("Failed to finish a listing")


async def _relist(memo: kopf.Memo, relist: PeriodicRelist) -> None:
    """The watch cache's periodic complete list (kube/relist.py): the lists on a worker thread,
    the services concerned by what they found enqueued on the event loop (like `_end_lists`)."""
    while True:
        await asyncio.sleep(max(relist.seconds_until_due(), LIST_SWEEP_SECONDS))
        try:
            for drift in await asyncio.to_thread(relist.run_due):
                _enqueue_found(memo, drift.kind, drift.obj, drift.gone)
        except Exception:  # never end the loop
            logging.getLogger(__name__).exception("Failed a periodic list")


@kopf.on.startup()
async def start_list_sweeper(memo: kopf.Memo, **_: Any) -> None:
    cache: WatchCache | None = memo.get("cache")
    if cache is not None:
        memo["background_tasks"].append(
            asyncio.get_running_loop().create_task(_end_lists(memo, cache))
        )
    relist: PeriodicRelist | None = memo.get("relist")
    if relist is not None:
        memo["background_tasks"].append(
            asyncio.get_running_loop().create_task(_relist(memo, relist))
        )


@kopf.on.cleanup()
async def stop_list_sweeper(memo: kopf.Memo, **_: Any) -> None:
    for task in memo["background_tasks"]:
        task.cancel()


# LeaderWorkerSets (multi-node pools): a cluster without the LeaderWorkerSet CRD leaves this
# resource unresolved, which Kopf only warns about; nothing waits for it.
@kopf.index(LWS_GROUP, LWS_VERSION, LWS_PLURAL)
async def cache_leader_worker_set(memo: kopf.Memo, body: kopf.Body, **_: Any) -> None:
    _observe(memo, Kind.LEADER_WORKER_SET, None, body)


@kopf.index("", "v1", "nodes")
async def cache_node(memo: kopf.Memo, body: kopf.Body, **_: Any) -> None:
    _observe(memo, Kind.NODE, None, body)


@kopf.on.event(LWS_GROUP, LWS_VERSION, LWS_PLURAL)
async def forget_leader_worker_set(
    memo: kopf.Memo, type: str | None, body: kopf.Body, **_: Any
) -> None:
    _watched(memo, Kind.LEADER_WORKER_SET, type, body)


# DRA (#30): the claim templates the operator owns, and the drivers' ResourceSlices (the GPU
# inventory of a DRA-only cluster). A cluster without resource.k8s.io/v1 leaves both unresolved,
# which Kopf only warns about.
@kopf.index("resource.k8s.io", "v1", "resourceclaimtemplates")
async def cache_claim_template(memo: kopf.Memo, body: kopf.Body, **_: Any) -> None:
    _observe(memo, Kind.RESOURCE_CLAIM_TEMPLATE, None, body)


@kopf.on.event("resource.k8s.io", "v1", "resourceclaimtemplates")
async def forget_claim_template(
    memo: kopf.Memo, type: str | None, body: kopf.Body, **_: Any
) -> None:
    if type == "DELETED":
        _observe(memo, Kind.RESOURCE_CLAIM_TEMPLATE, type, body)


@kopf.index("resource.k8s.io", "v1", "resourceslices")
async def cache_resource_slice(memo: kopf.Memo, body: kopf.Body, **_: Any) -> None:
    _observe(memo, Kind.RESOURCE_SLICE, None, body)


@kopf.on.event("resource.k8s.io", "v1", "resourceslices")
async def on_resource_slice(memo: kopf.Memo, body: kopf.Body, type: str | None, **_: Any) -> None:
    """A driver publishing, changing or withdrawing GPUs re-plans the services they can serve."""
    if type == "DELETED":
        _observe(memo, Kind.RESOURCE_SLICE, type, body)
    triggers = _controller(memo).triggers
    _enqueue(memo, triggers.services_affected_by_products(slice_products(dict(body))))


@kopf.on.login()
def login(memo: kopf.Memo, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod, re-read the rotating service-account token; outside, use the loaded kubeconfig."""
    if memo.get("in_cluster"):
        return kopf.login_with_service_account(**kwargs)
    connection = memo.get("connection")
    if not connection:
        return kopf.login_with_kubeconfig(**kwargs)
    return kopf.ConnectionInfo(**connection)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Nothing persisted (#32): with index and event handlers only, Kopf stores no diff-base and
    # no progress (kopf/_core/reactor/processing.py: both only for change-detecting handlers,
    # daemons and timers) and patches an object only to drop a finalizer it no longer needs.
    # The diff-base is not even built (handlers/kopf_essence.py). The progress storage stays
    # Kopf's annotations one under our prefix, unused. The finalizer name is the one older
    # versions added to VLLMServices, which Kopf no longer watches (the reconcile removes it);
    # Kopf's kinds never carried it, so Kopf has nothing to remove.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = NoDiffBaseStorage()
    settings.persistence.finalizer = LEGACY_FINALIZER
    settings.posting.enabled = False
    settings.execution.max_workers = 16
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = WATCH_CONNECT_TIMEOUT
    settings.watching.reconnect_backoff = 0.5
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = WATCH_CONNECT_TIMEOUT
    settings.networking.error_backoffs = API_ERROR_BACKOFFS
    # The webhook configuration is the chart's (failurePolicy, selectors, timeout); Kopf's
    # managed mode would rewrite those and delete it on exit, so it stays off.
    settings.admission.server = memo.get("webhook_server")
    settings.admission.managed = None


@kopf.on.startup()
def start_workers(memo: kopf.Memo, **_: Any) -> None:
    """Start the queue's workers (threads: reconciles call the blocking gateways). They take keys
    only after the watch caches synced (`_enqueue`); without a cache (tests) at once."""
    cache: WatchCache | None = memo.get("cache")
    _controller(memo).start(cache.synced_event if cache is not None else None)


@kopf.on.cleanup()
def stop_workers(memo: kopf.Memo, **_: Any) -> None:
    _controller(memo).stop()


@kopf.on.event(LWS_GROUP, LWS_VERSION, LWS_PLURAL, labels={LABEL_MANAGED_BY: MANAGED_BY})
async def on_owned_leader_worker_set(memo: kopf.Memo, body: kopf.Body, **_: Any) -> None:
    """A change to an owned LeaderWorkerSet (readiness, drift) re-reconciles its VLLMService
    (owned Deployments: kube/informer.py's watch, `owned_watch_callbacks`)."""
    _enqueue(memo, owners_of(dict(body)))


@kopf.on.event("", "v1", "nodes")
async def on_node(memo: kopf.Memo, body: kopf.Body, type: str | None, **_: Any) -> None:
    """GPU nodes appearing, changing labels or capacity re-plan the services they can serve.
    Async on purpose: the node fingerprints then have one writer, Kopf's event loop."""
    _watched(memo, Kind.NODE, type, body)
    triggers = _controller(memo).triggers
    _enqueue(memo, triggers.services_affected_by_node(dict(body), deleted=type == "DELETED"))


async def validate_service(
    memo: kopf.Memo,
    body: kopf.Body,
    warnings: list[str],
    **kwargs: Any,
) -> None:
    """Translate the controller's admission verdict: warnings to the client, a denial as an
    AdmissionError (HTTP 403 with the planner's message). Kopf passes `old` on updates."""
    old = kwargs.get("old")
    loop = asyncio.get_running_loop()
    verdict = await loop.run_in_executor(
        memo["admission_pool"],
        _controller(memo).review_admission,
        dict(body),
        dict(old) if old is not None else None,
    )
    warnings.extend(verdict.warnings)
    if not verdict.allowed:
        meta = body.get("metadata") or {}
        logging.getLogger(__name__).info(
            "Denied admission service=%s/%s reason=%s",
            meta.get("namespace", ""),
            meta.get("name", ""),
            verdict.reason,
        )
        raise kopf.AdmissionError(verdict.message, code=403)


class _AdmissionDenialFilter(logging.Filter):
    """Kopf logs every AdmissionError as an ERROR "failed permanently"; a denial is the webhook
    working, not an operator error (the line above and the admission metrics record it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(f"Webhook {ADMISSION_HANDLER_ID!r} failed")


def register_admission() -> None:
    """Serve the fit check (`run --webhook-port`); without a webhook server it is not registered,
    since Kopf refuses to start with admission handlers and no server."""
    logging.getLogger("kopf.objects").addFilter(_AdmissionDenialFilter())
    kopf.on.validate(
        GROUP,
        VERSION,
        PLURAL,
        id=ADMISSION_HANDLER_ID,
        operations=["CREATE", "UPDATE"],
        side_effects=False,
        persistent=True,
    )(validate_service)
