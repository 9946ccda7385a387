"""The watch handlers only map events to service keys on the controller's queue (#32): Kopf's
resource handlers (the first of them opens the watch cache's sync gate) and the callbacks of
kube/informer.py's watches (VLLMServices and the owned kinds) reconcile nothing themselves."""

import asyncio
from typing import Any, cast

import kopf

from tests.reconcile.test_controller import OfflineHub, cluster
from vllm_operator.api.groups import LWS_LABEL_NAME
from vllm_operator.handlers import registrations
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.cache import WatchCache
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.triggers import ServiceChanges
from vllm_operator.rendering.names import common_labels

# Kopf's decorators type the handlers as its callback protocols; they are plain functions.
handlers: Any = registrations


def setup() -> tuple[Controller, WatchCache, kopf.Memo, Any]:
    gw = cluster()
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()))
    cache = WatchCache()
    return ctl, cache, kopf.Memo(controller=ctl, cache=cache, service_changes=ServiceChanges()), gw


def owned(kind: str, name: str, owner: str) -> Any:
    return kopf.Body(
        cast(
            Any,
            {
                "kind": kind,
                "metadata": {
                    "name": name,
                    "namespace": "ml",
                    "labels": common_labels(owner),
                    "ownerReferences": [{"kind": "VLLMService", "name": owner, "controller": True}],
                },
            },
        )
    )


def service(name: str = "chat", status: Any = None, **meta: Any) -> Any:
    """A VLLMService as the watch delivers it; `meta` updates its metadata."""
    body: dict[str, Any] = {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": name, "namespace": "ml", "uid": "u1", "generation": 1, **meta},
        "spec": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
    }
    if status is not None:
        body["status"] = status
    return kopf.Body(cast(Any, body))


def event(memo: kopf.Memo, type_: str | None, body: Any) -> None:
    """What the VLLMService watch hands over: an event, or (type None) a listed service."""
    on_event, on_found = registrations.service_watch_callbacks(
        memo["controller"], memo["service_changes"]
    )
    if type_ is None:
        on_found(Kind.VLLM_SERVICE, dict(body), False)
    else:
        on_event(Kind.VLLM_SERVICE, type_, dict(body))


def test_handlers_enqueue_keys_and_reconcile_nothing() -> None:
    ctl, cache, memo, gw = setup()
    assert not cache.synced_event.is_set()
    asyncio.run(
        handlers.on_owned_leader_worker_set(memo=memo, body=owned("LeaderWorkerSet", "x", "lws"))
    )
    assert cache.synced_event.is_set()  # the first resource handler passed Kopf's index gate
    event(memo, "ADDED", service())
    event(memo, "ADDED", service())
    # The owned kinds' watches (kube/informer.py) call these on their own threads.
    on_event, on_found = registrations.owned_watch_callbacks(ctl)
    on_event(Kind.DEPLOYMENT, "MODIFIED", dict(owned("Deployment", "x-l4", "other")))
    group_pod = dict(owned("Pod", "big-0-1", "big"))
    group_pod["metadata"]["labels"][LWS_LABEL_NAME] = "big-h100"
    on_event(Kind.POD, "MODIFIED", group_pod)
    single_pod = owned("Pod", "small-abc", "small")  # a Deployment's pod: its Deployment reports
    on_event(Kind.POD, "MODIFIED", dict(single_pod))
    on_event(Kind.SERVICE, "DELETED", dict(owned("Service", "small", "small")))
    foreign = {"kind": "Deployment", "metadata": {"name": "web", "namespace": "ml"}}
    on_event(Kind.DEPLOYMENT, "MODIFIED", foreign)
    on_found(Kind.POD, dict(single_pod), True)  # a re-list: gone pods do concern their service
    assert ctl.queue.ready() == [
        ("ml", "lws"),
        ("ml", "chat"),
        ("ml", "other"),
        ("ml", "big"),
        ("ml", "small"),
    ]
    assert gw.total_writes() == 0 and gw.events == []


def test_a_deleted_service_leaves_the_cache_and_is_enqueued_for_its_worker_to_forget() -> None:
    """The VLLMService watch (kube/informer.py) with the handlers' callbacks: its first list
    enqueues every service, a DELETED event drops the service from the cache and the event
    filter and enqueues it, and a re-list that no longer returns a service does the same."""
    from tests.kube.scripted import run_until_used_up
    from tests.kube.test_informer import Source
    from vllm_operator.kube.informer import Gone, KindWatch

    ctl, cache, memo, _ = setup()
    changes: ServiceChanges = memo["service_changes"]
    on_event, on_found = registrations.service_watch_callbacks(ctl, changes)
    chat, web = (dict(service(n, resourceVersion=rv)) for n, rv in (("chat", "5"), ("web", "6")))
    source = Source([([chat, web], "10"), [("DELETED", chat)], Gone(), ([], "20")])
    watch = KindWatch(
        source, cache, Kind.VLLM_SERVICE, None, on_event, on_found, report_first_list=True
    )
    cache.mark_synced()
    run_until_used_up(source, watch)
    assert ctl.queue.ready() == [("ml", "chat"), ("ml", "web")]
    assert cache.lookup(Kind.VLLM_SERVICE, "ml", "chat") == (True, None)
    assert cache.lookup(Kind.VLLM_SERVICE, "ml", "web") == (False, None)  # read again now
    assert len(changes) == 0


def test_objects_a_relist_no_longer_returned_map_to_their_services() -> None:
    ctl, _, memo, _ = setup()
    keys = handlers._keys_of_gone
    assert keys(memo, Kind.DEPLOYMENT, dict(owned("Deployment", "chat-l4", "chat"))) == [
        ("ml", "chat")
    ]
    assert keys(memo, Kind.POD, dict(owned("Pod", "chat-l4-abc", "chat"))) == [("ml", "chat")]
    service = {"metadata": {"name": "chat", "namespace": "ml"}}
    assert keys(memo, Kind.VLLM_SERVICE, service) == [("ml", "chat")]
    foreign = {"metadata": {"name": "web", "namespace": "ml"}}
    assert keys(memo, Kind.DEPLOYMENT, foreign) == []


def test_the_periodic_list_task_enqueues_the_services_of_what_it_found(
    monkeypatch: Any,
) -> None:
    """kube/relist.py's drift reaches the queue through the handlers' task: a Deployment gone
    behind the cache enqueues its owner, a VLLMService changed behind it enqueues itself."""
    from tests.kube.test_cache import Clock
    from vllm_operator.kube.fake import FakeGateway
    from vllm_operator.kube.relist import PeriodicRelist

    monkeypatch.setattr(registrations, "LIST_SWEEP_SECONDS", 0.01)
    ctl, _, _, _ = setup()
    clock = Clock()
    cache = WatchCache(clock=clock)
    fake = FakeGateway()
    service = {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": "edited", "namespace": "ml", "resourceVersion": "1"},
    }
    fake.add(service)
    cache.observe(Kind.VLLM_SERVICE, None, service)
    cache.observe(Kind.DEPLOYMENT, None, dict(owned("Deployment", "chat-l4", "chat")))
    cache.mark_synced()
    fake.objects[(Kind.VLLM_SERVICE, "ml", "edited")]["metadata"]["resourceVersion"] = "2"
    relist = PeriodicRelist(fake, cache, rand=lambda: 0.5)
    memo = kopf.Memo(controller=ctl, cache=cache, relist=relist)
    clock.now = 601

    async def one_round() -> list[tuple[str, str]]:
        task = asyncio.get_running_loop().create_task(handlers._relist(memo, relist))
        try:
            for _ in range(500):  # bounded: 5 s
                if len(ctl.queue.ready()) == 2:
                    break
                await asyncio.sleep(0.01)
            return sorted(ctl.queue.ready())
        finally:
            task.cancel()

    assert asyncio.run(one_round()) == [("ml", "chat"), ("ml", "edited")]


def test_a_status_write_enqueues_nothing_and_what_the_reconcile_reads_does() -> None:
    """Issue #32: the VLLMService's event handler decides what to enqueue (no Kopf
    create/update/resume handlers, hence no diff-base PATCH). The operator's own status write
    (status and resourceVersion change) must not cause a no-op reconcile; a spec edit (generation),
    a label or annotation edit, and a deletion that waits on another finalizer must."""
    ctl, _, memo, _ = setup()

    def enqueued(type_: str | None, body: Any) -> bool:
        event(memo, type_, body)
        keys = ctl.queue.ready()
        ctl.queue.discard(("ml", "chat"))
        return keys == [("ml", "chat")]

    assert enqueued("ADDED", service(resourceVersion="1"))
    status = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}
    assert not enqueued("MODIFIED", service(resourceVersion="2", status=status))
    assert enqueued("MODIFIED", service(resourceVersion="3", generation=2))
    assert not enqueued("MODIFIED", service(resourceVersion="4", generation=2))
    labelled: dict[str, Any] = {"generation": 2, "labels": {"team": "a"}}
    assert enqueued("MODIFIED", service(**labelled))
    assert enqueued("MODIFIED", service(**labelled, annotations={"x": "1"}))
    assert enqueued("MODIFIED", service(**labelled, annotations={"x": "2"}))
    assert not enqueued("MODIFIED", service(**labelled, annotations={"x": "2"}, status=status))
    going = service(**labelled, annotations={"x": "2"}, deletionTimestamp="2026-11-27T13:00:00Z")
    assert enqueued("MODIFIED", going)
    assert enqueued("DELETED", going)
    assert len(memo["service_changes"]) == 0  # forgotten: no growth with deleted services


def test_a_listing_enqueues_every_service_once_and_a_relisting_what_changed() -> None:
    """A start (the watch's first list hands every service over) reconciles every service once;
    a re-listing after a watch's 410 Gone enqueues only the services changed meanwhile."""
    ctl, _, memo, _ = setup()
    for name in ("a", "b"):
        event(memo, None, service(name))
    assert ctl.queue.ready() == [("ml", "a"), ("ml", "b")]
    ctl.queue.discard(("ml", "a"))
    ctl.queue.discard(("ml", "b"))
    event(memo, None, service("a"))
    event(memo, None, service("b", generation=2))
    assert ctl.queue.ready() == [("ml", "b")]


def test_a_service_a_complete_list_no_longer_returned_leaves_the_filter() -> None:
    """Deleted while the watch was down: no DELETED event, the list sweep forgets it."""
    ctl, _, memo, _ = setup()
    event(memo, None, service("a"))
    assert len(memo["service_changes"]) == 1
    handlers._enqueue_found(memo, Kind.VLLM_SERVICE, dict(service("a")))
    assert len(memo["service_changes"]) == 0
    assert ctl.queue.ready() == [("ml", "a")]
