"""Kopf writes nothing to any object (#32), checked through Kopf's own reactor and registry.

The VLLMServices are not Kopf's any more (kube/informer.py watches them): no handler of Kopf's
registry selects them, so Kopf neither lists, watches nor patches one (the admission webhook is
served per request and needs no watch). The kinds Kopf still watches go through
`kopf._core.reactor.processing.process_resource_event` with the operator's registry and settings,
as `kopf.run` would hand them over; every PATCH Kopf would send is caught at
`kopf._cogs.clients.patching.patch_obj`. Before #32 the create/update/resume handlers made Kopf
patch its last-handled-configuration annotation on the first event and every spec change. The
finalizer older versions added is removed by the reconcile (tests/reconcile/test_legacy.py)."""

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

SERVICES = references.Resource(
    group=GROUP,
    version=VERSION,
    plural=PLURAL,
    kind=KIND,
    namespaced=True,
    verbs=frozenset({"list", "watch", "patch"}),
)
NODES = references.Resource(
    group="",
    version="v1",
    plural="nodes",
    kind="Node",
    namespaced=False,
    verbs=frozenset({"list", "watch", "patch"}),
)


def node(rv: int, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-1",
            "uid": "n1",
            "resourceVersion": str(rv),
            "labels": {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "1"},
            **meta,
        },
        "status": {"allocatable": {"nvidia.com/gpu": "1"}},
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
                resource=NODES,
                raw_event={"type": type_, "object": body},  # type: ignore[typeddict-item]
                event_queue=asyncio.Queue(),
                no_throttling=True,
            )
        )
        keys = self.controller.queue.ready()
        for key in keys:
            self.controller.queue.discard(key)
        return keys


def test_kopf_watches_no_vllmservice() -> None:
    """No index, event, change-detecting or spawning handler selects the VLLMService, so Kopf's
    orchestration (kopf/_core/reactor/observation.py `revise_resources`) never watches it."""
    registry = kopf.get_default_registry()
    watching = (
        registry._indexing.get_all_selectors()
        | registry._watching.get_all_selectors()
        | registry._spawning.get_all_selectors()
        | registry._changing.get_all_selectors()
    )
    assert watching, "the nodes, LeaderWorkerSets and DRA kinds stay Kopf's"
    assert not [s for s in watching if s.check(SERVICES)]
    assert [s for s in watching if s.check(NODES)]


def test_a_node_listed_changed_and_deleted_is_never_patched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reactor = Reactor(monkeypatch)
    reactor.event(None, node(1))
    reactor.event("MODIFIED", node(2, annotations={"a": "b"}))
    reactor.event("DELETED", node(3))
    assert reactor.patches == []
