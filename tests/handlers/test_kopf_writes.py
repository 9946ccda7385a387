"""Kopf writes nothing to a VLLMService (#32), checked through Kopf's own reactor.

Each watch event goes through `kopf._core.reactor.processing.process_resource_event` with the
operator's registry and settings, as `kopf.run` would hand it over; every PATCH Kopf would send
is caught at `kopf._cogs.clients.patching.patch_obj`. Before #32 the create/update/resume handlers
made Kopf patch its last-handled-configuration annotation on the first event and every spec
change."""

import asyncio
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import patching
from kopf._cogs.structs import ephemera, references
from kopf._core.actions import lifecycles
from kopf._core.engines import indexing
from kopf._core.reactor import inventory, processing

from tests.reconcile.test_controller import OfflineHub, cluster
from vllm_operator.api.service import GROUP, KIND, PLURAL, VERSION
from vllm_operator.handlers import registrations
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.cache import WatchCache
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.triggers import ServiceChanges

# Kopf's decorators type the handlers as its callback protocols; they are plain functions.
handlers: Any = registrations

RESOURCE = references.Resource(
    group=GROUP,
    version=VERSION,
    plural=PLURAL,
    kind=KIND,
    namespaced=True,
    verbs=frozenset({"list", "watch", "patch"}),
)
OLD_FINALIZER = f"{GROUP}/kopf-finalizer"


def service(rv: int, generation: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": "chat",
            "namespace": "ml",
            "uid": "u1",
            "generation": generation,
            "resourceVersion": str(rv),
            **meta,
        },
        "spec": {"model": "meta-llama/Llama-3.1-8B-Instruct", "replicas": generation},
    }


class Reactor:
    """Kopf's per-event processing with the operator's registry, settings and memo."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.patches: list[list[Any]] = []
        self.settings = kopf.OperatorSettings()
        handlers.configure(settings=self.settings, memo=kopf.Memo())
        self.registry = kopf.get_default_registry()
        self.indexers = indexing.OperatorIndexers()
        self.indexers.ensure(self.registry._indexing.get_all_handlers())
        self.memories = inventory.ResourceMemories()
        gw = cluster()
        self.controller = Controller(gw, HubArchitectureResolver(gw, OfflineHub()))
        self.memo = kopf.Memo(
            controller=self.controller, cache=WatchCache(), service_changes=ServiceChanges()
        )

        async def patch_obj(*, patch: Any, **_: Any) -> tuple[Any, Any]:
            self.patches.append(patch.as_json_patch())
            return None, None

        monkeypatch.setattr(patching, "patch_obj", patch_obj)

    def event(self, type_: str | None, body: dict[str, Any]) -> list[tuple[str, str]]:
        """Process one event; the keys it enqueued."""
        asyncio.run(
            processing.process_resource_event(
                lifecycle=lifecycles.all_at_once,
                indexers=self.indexers,
                registry=self.registry,
                settings=self.settings,
                memories=self.memories,
                memobase=ephemera.AnyMemo(self.memo),
                resource=RESOURCE,
                raw_event={"type": type_, "object": body},  # type: ignore[typeddict-item]
                event_queue=asyncio.Queue(),
                no_throttling=True,
            )
        )
        keys = self.controller.queue.ready()
        for key in keys:
            self.controller.queue.discard(key)
        return keys


def test_a_service_created_edited_and_listed_again_is_never_patched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reactor = Reactor(monkeypatch)
    key = ("ml", "chat")
    assert reactor.event("ADDED", service(1)) == [key]
    status = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}
    assert reactor.event("MODIFIED", {**service(2), "status": status}) == []  # our status write
    assert reactor.event("MODIFIED", service(3, generation=2)) == [key]  # a spec edit
    assert reactor.event("MODIFIED", service(4, generation=2, labels={"a": "b"})) == [key]
    assert reactor.event(None, service(4, generation=2, labels={"a": "b"})) == []  # re-listed
    assert reactor.event("DELETED", service(5, generation=2, labels={"a": "b"})) == [key]
    assert reactor.patches == []


def test_a_restart_lists_every_service_once_and_patches_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reactor = Reactor(monkeypatch)
    stored = service(9, annotations={f"{GROUP}/last-handled-configuration": '{"spec": {}}'})
    assert reactor.event(None, stored) == [("ml", "chat")]
    assert reactor.patches == []  # an older operator's annotation is left as it is


def test_only_the_finalizer_older_versions_added_is_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reactor = Reactor(monkeypatch)
    reactor.event(None, service(1, finalizers=["example.com/keep", OLD_FINALIZER]))
    assert reactor.patches == [[{"op": "remove", "path": "/metadata/finalizers/1"}]]
