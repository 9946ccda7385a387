"""The finalizer older versions added is removed by the reconcile (#32): the VLLMServices are no
longer Kopf's, whose resume used to remove it. Only that entry goes, tested in place, and a
deleting service that only it held goes with it."""

from typing import Any

import pytest

from tests.reconcile.test_controller import cluster, controller, example
from vllm_operator.api.service import LEGACY_FINALIZER
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import ConflictError, Kind
from vllm_operator.reconcile.legacy import drop_legacy_finalizer

NAME = "llama-8b-chat"


def stored(gw: FakeGateway, finalizers: list[str], **meta: Any) -> dict[str, Any]:
    obj = example("llama-3.1-8b-l4.yaml")
    obj["metadata"].update(finalizers=finalizers, resourceVersion="1", **meta)
    gw.add(obj)
    live = gw.get(Kind.VLLM_SERVICE, "default", NAME)
    assert live is not None
    return live


def test_the_reconcile_removes_only_the_old_finalizer_and_plans_as_usual() -> None:
    gw = cluster()
    stored(gw, ["example.com/keep", LEGACY_FINALIZER])
    outcome = controller(gw).reconcile("default", NAME)
    live = gw.get(Kind.VLLM_SERVICE, "default", NAME)
    assert live is not None and live["metadata"]["finalizers"] == ["example.com/keep"]
    assert gw.writes["finalizer"] == 1
    assert "Deployment/llama-8b-chat-l4" in outcome.applied
    controller(gw).reconcile("default", NAME)
    assert gw.writes["finalizer"] == 1  # gone: nothing more to remove


def test_a_deleting_service_held_only_by_the_old_finalizer_goes() -> None:
    gw = cluster()
    stored(gw, [LEGACY_FINALIZER], deletionTimestamp="2026-11-29T09:00:00Z")
    outcome = controller(gw).reconcile("default", NAME)
    assert gw.get(Kind.VLLM_SERVICE, "default", NAME) is None
    assert outcome.applied == []  # a deleting service is only forgotten


def test_a_service_without_it_is_not_patched() -> None:
    gw = cluster()
    live = stored(gw, ["example.com/keep"])
    assert not drop_legacy_finalizer(gw, live)
    assert gw.writes["finalizer"] == 0


def test_a_list_that_moved_since_it_was_read_is_a_conflict_not_a_wrong_removal() -> None:
    gw = cluster()
    live = stored(gw, ["example.com/keep", LEGACY_FINALIZER])
    current = gw.objects[(Kind.VLLM_SERVICE, "default", NAME)]
    current["metadata"]["finalizers"] = [LEGACY_FINALIZER]  # another controller removed its own
    with pytest.raises(ConflictError):
        drop_legacy_finalizer(gw, live)
    assert current["metadata"]["finalizers"] == [LEGACY_FINALIZER]
