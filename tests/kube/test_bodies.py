"""The typed views (kube/bodies.py) read what the API server writes, with its defaults for what it leaves out."""

from typing import Any

from vllm_operator.kube.bodies import (
    DeploymentBody,
    LeaderWorkerSetBody,
    Meta,
    NodeBody,
    PodBody,
    VLLMServiceBody,
)


def test_missing_fields_read_as_the_api_server_defaults() -> None:
    pod = PodBody({"kind": "Pod", "metadata": {"name": "p"}})
    assert pod.meta.labels == {} and pod.meta.annotations == {}
    assert pod.meta.namespace == "" and pod.meta.generation is None
    assert not pod.ready and pod.node_name == "" and pod.phase == ""
    assert not pod.meta.deleting and pod.meta.owner_references == []
    assert Meta(None).name == "" and Meta("not a mapping").labels == {}
    lws = LeaderWorkerSetBody({"spec": {"leaderWorkerTemplate": {}}})
    assert lws.size == 1 and lws.replicas is None and lws.ready_replicas == 0


def test_views_read_the_object_in_place() -> None:
    raw: dict[str, Any] = {
        "metadata": {
            "name": "n",
            "labels": {"a": "b"},
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"unschedulable": True},
        "status": {
            "allocatable": {"nvidia.com/gpu": "4"},
            "conditions": ["junk", {"type": "Ready", "status": "False"}],
        },
    }
    node = NodeBody(raw)
    assert node.meta.labels == {"a": "b"} and node.meta.deleting
    assert node.unschedulable and node.allocatable == {"nvidia.com/gpu": "4"}
    assert node.ready == "False"
    raw["status"] = {"conditions": [{"type": "Ready"}]}
    assert node.ready is None  # a condition without a status is not "None"


def test_pod_ready_and_workload_counts() -> None:
    ready = {
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        "spec": {"nodeName": "x"},
    }
    assert PodBody(ready).ready and PodBody(ready).node_name == "x"
    dep = DeploymentBody({"spec": {"replicas": 3}, "status": {"readyReplicas": 2}})
    assert dep.replicas == 3 and dep.ready_replicas == 2
    assert LeaderWorkerSetBody({"spec": {"leaderWorkerTemplate": {"size": 4}}}).size == 4


def test_service_key_and_gone() -> None:
    svc = VLLMServiceBody({"metadata": {"name": "chat"}})
    assert svc.key == ("default", "chat") and not svc.gone
    gone = VLLMServiceBody(
        {"metadata": {"name": "chat", "namespace": "ml", "deletionTimestamp": "t"}}
    )
    assert gone.key == ("ml", "chat") and gone.gone
