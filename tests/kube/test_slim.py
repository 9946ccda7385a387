"""What kube/slim.py sheds from Kopf's bodies is exactly what the watch cache drops (#32 peak
RSS): nothing a reader of the cache or of Kopf's body uses goes."""

import copy
import json
from typing import Any, cast

import kopf
import pytest

from vllm_operator.api.service import FIELD_MANAGER
from vllm_operator.kube import cache as cache_module
from vllm_operator.kube.gateway import Kind
from vllm_operator.kube.slim import shed

OURS = {"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}}
THEIRS = {
    "manager": "kube-controller-manager",
    "operation": "Update",
    "subresource": "status",
    "fieldsV1": {"f:status": {"f:readyReplicas": {}}},
}


def body(kind: Kind, managed: list[Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": kind.value,
        "metadata": {
            "name": "x",
            "namespace": "" if kind is Kind.NODE else "ml",
            "resourceVersion": "7",
            "labels": {"app.kubernetes.io/managed-by": "vllm-operator"},
            "annotations": {"a": "b"},
            "ownerReferences": [{"kind": "VLLMService", "name": "chat", "controller": True}],
        },
        "spec": {"replicas": 2, "containers": [{"name": "vllm", "args": ["--x"]}]},
        "status": {
            "readyReplicas": 2,
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"nvidia.com/gpu": "8"},
            "images": [{"names": ["registry/vllm:1"], "sizeBytes": 1}],
        },
    }
    if managed is not None:
        obj["metadata"]["managedFields"] = managed
    return obj


CASES = [
    (kind, managed)
    for kind in sorted(cache_module.CACHED_KINDS, key=lambda k: k.value)
    for managed in ([OURS, THEIRS], [THEIRS], [OURS], [], None)
]


@pytest.mark.parametrize(("kind", "managed"), CASES)
def test_shedding_removes_exactly_what_the_cache_drops(kind: Kind, managed: list[Any]) -> None:
    obj = body(kind, copy.deepcopy(managed))
    stored = json.loads(cache_module._Entry(kind, copy.deepcopy(obj)).text)
    shed(kind, obj)
    assert obj == stored
    # Shedding again changes nothing, and the cache stores a shed body as it stored the full one.
    again = copy.deepcopy(obj)
    shed(kind, again)
    assert again == obj
    assert json.loads(cache_module._Entry(kind, obj).text) == stored


def test_kopf_body_is_shed_where_kopf_keeps_it() -> None:
    """Kopf's Body is a read-only view; its items are the parsed dicts, which change in place."""
    raw = body(Kind.DEPLOYMENT, [OURS, THEIRS])
    shed(Kind.DEPLOYMENT, kopf.Body(cast(Any, raw)))
    assert raw["metadata"]["managedFields"] == [OURS]
    assert raw["spec"]["replicas"] == 2 and raw["status"]["readyReplicas"] == 2
    pod = body(Kind.POD, [THEIRS])
    shed(Kind.POD, kopf.Body(cast(Any, pod)))
    assert "managedFields" not in pod["metadata"]
    assert pod["metadata"]["ownerReferences"] and pod["status"]["conditions"]
    node = body(Kind.NODE, [THEIRS])
    shed(Kind.NODE, kopf.Body(cast(Any, node)))
    assert "images" not in node["status"] and node["status"]["allocatable"]


def test_an_unexpected_body_shape_is_left_alone() -> None:
    odd: dict[str, Any] = {"metadata": "not a mapping", "status": ["not", "a", "mapping"]}
    shed(Kind.NODE, odd)
    assert odd == {"metadata": "not a mapping", "status": ["not", "a", "mapping"]}
    shed(Kind.POD, {})


def test_the_cache_keeps_only_the_operators_field_sets_of_what_it_applies() -> None:
    """A cached Deployment keeps the operator's entry (reconcile/diff.py compares against it); a
    cached pod, node or VLLMService keeps none (no reader compares their field sets)."""
    cache = cache_module.WatchCache()
    for kind in (Kind.DEPLOYMENT, Kind.POD, Kind.NODE, Kind.VLLM_SERVICE):
        cache.store(kind, body(kind, [OURS, THEIRS]))
    cache.mark_synced()
    kept = {}
    for kind in (Kind.DEPLOYMENT, Kind.POD, Kind.NODE, Kind.VLLM_SERVICE):
        _, obj = cache.lookup(kind, "" if kind is Kind.NODE else "ml", "x")
        assert obj is not None and obj["spec"]["replicas"] == 2
        kept[kind] = obj["metadata"].get("managedFields")
    assert kept == {
        Kind.DEPLOYMENT: [OURS],
        Kind.POD: None,
        Kind.NODE: None,
        Kind.VLLM_SERVICE: None,
    }
