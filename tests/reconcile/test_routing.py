"""spec.routing inferencePool in the reconcile (#31): applied, observed, pruned, never taken over."""

import copy
from typing import Any

from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.cache import CACHED_KINDS, CachedGateway, WatchCache
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller

from .test_controller import OfflineHub, cluster, controller, example, status_of

PICKER = [
    "ServiceAccount/qwen-14b-epp",
    "Role/qwen-14b-epp",
    "RoleBinding/qwen-14b-epp",
    "Service/qwen-14b-epp",
    "Deployment/qwen-14b-epp",
]


def gateway_example() -> dict[str, Any]:
    doc = example("gateway/qwen2.5-14b-h100-a100-inference-pool.yaml")
    doc["metadata"]["uid"] = "svc-uid"
    return doc


def set_routing(gw: FakeGateway, routing: dict[str, Any]) -> None:
    key = (Kind.VLLM_SERVICE, "default", "qwen-14b")
    obj = copy.deepcopy(gw.objects[key])
    obj["spec"]["routing"] = routing
    obj["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
    gw.objects[key] = obj


def test_inference_pool_spans_both_pools_and_picker_is_applied_once() -> None:
    gw = cluster()
    gw.add(gateway_example())
    ctl = controller(gw)
    outcome = ctl.reconcile("default", "qwen-14b")
    for item in [*PICKER, "InferencePool/qwen-14b"]:
        assert item in outcome.applied
    pool = gw.get(Kind.INFERENCE_POOL, "default", "qwen-14b")
    assert pool is not None
    selector = pool["spec"]["selector"]["matchLabels"]
    pods = [
        gw.objects[(Kind.DEPLOYMENT, "default", n)]["spec"]["template"]["metadata"]["labels"]
        for n in ("qwen-14b-h100-80gb", "qwen-14b-a100-40gb")
    ]
    assert all(all(p.get(k) == v for k, v in selector.items()) for p in pods)
    routing = status_of(gw, "qwen-14b")["routing"]
    assert routing == {
        "inferencePool": "qwen-14b",
        "endpointPicker": "qwen-14b-epp",
        "pickerReady": False,
    }
    # Level-based and quiet: nothing to change, no write.
    again = ctl.reconcile("default", "qwen-14b")
    assert not [a for a in again.applied if "epp" in a or "InferencePool" in a]


def test_picker_readiness_reaches_status() -> None:
    gw = cluster()
    gw.add(gateway_example())
    ctl = controller(gw)
    ctl.reconcile("default", "qwen-14b")
    gw.objects[(Kind.DEPLOYMENT, "default", "qwen-14b-epp")]["status"] = {"readyReplicas": 1}
    ctl.reconcile("default", "qwen-14b")
    assert status_of(gw, "qwen-14b")["routing"]["pickerReady"] is True


def test_back_to_service_deletes_pool_and_picker_and_clears_status() -> None:
    gw = cluster()
    gw.add(gateway_example())
    ctl = controller(gw)
    ctl.reconcile("default", "qwen-14b")
    set_routing(gw, {"mode": "service"})
    outcome = ctl.reconcile("default", "qwen-14b")
    assert sorted(outcome.deleted) == sorted([*PICKER, "InferencePool/qwen-14b"])
    assert gw.get(Kind.INFERENCE_POOL, "default", "qwen-14b") is None
    assert gw.get(Kind.DEPLOYMENT, "default", "qwen-14b-epp") is None
    # The service's own Service and its GPU pools stay.
    assert gw.get(Kind.SERVICE, "default", "qwen-14b") is not None
    assert gw.get(Kind.DEPLOYMENT, "default", "qwen-14b-h100-80gb") is not None
    assert "routing" not in status_of(gw, "qwen-14b")
    # And then no routing reads or writes at all.
    before = gw.total_writes()
    ctl.reconcile("default", "qwen-14b")
    assert gw.total_writes() == before


def test_named_picker_replaces_the_rendered_one() -> None:
    gw = cluster()
    gw.add(gateway_example())
    ctl = controller(gw)
    ctl.reconcile("default", "qwen-14b")
    set_routing(gw, {"mode": "inferencePool", "endpointPickerRef": {"name": "shared-epp"}})
    outcome = ctl.reconcile("default", "qwen-14b")
    assert sorted(outcome.deleted) == sorted(PICKER)
    pool = gw.get(Kind.INFERENCE_POOL, "default", "qwen-14b")
    assert pool is not None and pool["spec"]["endpointPickerRef"]["name"] == "shared-epp"
    routing = status_of(gw, "qwen-14b")["routing"]
    assert routing == {"inferencePool": "qwen-14b", "endpointPicker": "shared-epp"}


def test_someone_elses_inference_pool_is_never_taken_over() -> None:
    gw = cluster()
    gw.add(gateway_example())
    gw.add(
        {
            "apiVersion": "inference.networking.k8s.io/v1",
            "kind": "InferencePool",
            "metadata": {"name": "qwen-14b", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "other"}}},
        }
    )
    outcome = controller(gw).reconcile("default", "qwen-14b")
    assert "InferencePool/qwen-14b" not in outcome.applied
    pool = gw.get(Kind.INFERENCE_POOL, "default", "qwen-14b")
    assert pool is not None and pool["spec"]["selector"]["matchLabels"] == {"app": "other"}
    reasons = {c["reason"] for c in status_of(gw, "qwen-14b")["conditions"]}
    assert "NameConflict" in reasons or any("Conflict" in r for r in reasons)


def test_service_mode_makes_no_routing_call() -> None:
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    outcome = controller(gw).reconcile("default", "llama-8b-chat")
    assert not [a for a in outcome.applied if "InferencePool" in a or "epp" in a]
    assert not [k for k in gw.objects if k[0] is Kind.INFERENCE_POOL]


def test_through_the_watch_cache_pool_and_picker_apply_and_prune() -> None:
    """The controller's gateway is the cached one: kinds it does not watch (the InferencePool,
    the picker's RBAC) pass through to the API server, in both directions."""
    fake = cluster()
    fake.add(gateway_example())
    cache = WatchCache()
    for (kind, _, _), obj in sorted(fake.objects.items()):
        if kind in CACHED_KINDS:
            cache.observe(kind, "MODIFIED", obj)
    for node in fake.nodes:
        cache.observe(Kind.NODE, "MODIFIED", node)
    cache.mark_synced()
    ctl = Controller(CachedGateway(fake, cache), HubArchitectureResolver(fake, OfflineHub()))
    outcome = ctl.reconcile("default", "qwen-14b")
    assert "InferencePool/qwen-14b" in outcome.applied
    assert fake.get(Kind.INFERENCE_POOL, "default", "qwen-14b") is not None
    set_routing(fake, {"mode": "service"})
    cache.observe(
        Kind.VLLM_SERVICE, "MODIFIED", fake.objects[(Kind.VLLM_SERVICE, "default", "qwen-14b")]
    )
    outcome = ctl.reconcile("default", "qwen-14b")
    assert "InferencePool/qwen-14b" in outcome.deleted
    assert fake.get(Kind.ROLE, "default", "qwen-14b-epp") is None


def test_a_draining_pod_leaves_the_inference_pool_before_it_stops() -> None:
    """Remediation drains a pod by setting serving=false (reconcile/evaluate.py _start_drain)
    before it evicts it; the InferencePool selects serving=true, so the picker (whose pod
    reconciler drops pods whose labels stop matching, that are not Ready or are terminating) has
    dropped it before the eviction's preStop and SIGTERM. Same label, same moment as the Service."""
    gw = cluster()
    gw.add(gateway_example())
    controller(gw).reconcile("default", "qwen-14b")
    pool = gw.get(Kind.INFERENCE_POOL, "default", "qwen-14b")
    service = gw.get(Kind.SERVICE, "default", "qwen-14b")
    assert pool is not None and service is not None
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selector == service["spec"]["selector"]
    template = gw.objects[(Kind.DEPLOYMENT, "default", "qwen-14b-a100-40gb")]["spec"]["template"]
    gw.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "qwen-14b-a100-40gb-abc",
                "namespace": "default",
                "labels": dict(template["metadata"]["labels"]),
            },
        }
    )
    assert [p["metadata"]["name"] for p in gw.list_pods("default", selector)] == [
        "qwen-14b-a100-40gb-abc"
    ]
    gw.patch_pod_metadata(
        "default",
        "qwen-14b-a100-40gb-abc",
        labels={"serving.vllm-operator.dev/serving": "false"},
        annotations={},
    )
    assert gw.list_pods("default", selector) == []
