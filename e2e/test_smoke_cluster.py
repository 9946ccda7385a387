"""The simulated cluster behaves like a real one where the operator depends on it: scheduling
on nvidia.com/gpu with product selectors, Deployments reaching Ready, garbage collection of
owned objects, and kubelet-written container statuses (OOMKilled) visible through the API."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from e2e.conftest import Cluster
from e2e.kube import ApiError, Kube, wait_for
from e2e.localcluster import set_container_status
from e2e.test_smoke_crd import VALID

PRODUCT = "nvidia.com/gpu.product"


def gpu_deployment(
    name: str, namespace: str, product: str, gpus: int, replicas: int
) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {PRODUCT: product},
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.11.0",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


def pods_of(kube: Kube, namespace: str, app: str) -> list[dict[str, Any]]:
    return kube.list(f"/api/v1/namespaces/{namespace}/pods", label_selector=f"app={app}")


def ready(pod: dict[str, Any]) -> bool:
    return pod["status"].get("phase") == "Running" and Kube.condition(pod, "Ready") == "True"


def node_product(kube: Kube, node: str) -> str | None:
    labels: dict[str, str] = kube.get(f"/api/v1/nodes/{node}")["metadata"]["labels"]
    return labels.get(PRODUCT)


def test_simulated_nodes_carry_gfd_labels_and_gpu_capacity(
    cluster: Cluster, gpu_nodes: None
) -> None:
    nodes = cluster.kube.list("/api/v1/nodes", label_selector=PRODUCT)
    products = {n["metadata"]["labels"][PRODUCT] for n in nodes}
    assert {"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB", "NVIDIA-L4", "Tesla-T4"} <= products
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert Kube.condition(node, "Ready") == "True"
        assert int(labels["nvidia.com/gpu.memory"]) > 0
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == labels["nvidia.com/gpu.count"]
    h100 = [n for n in nodes if n["metadata"]["labels"][PRODUCT] == "NVIDIA-H100-80GB-HBM3"]
    assert len(h100) >= 2 and h100[0]["metadata"]["labels"]["nvidia.com/gpu.memory"] == "81559"


def test_a_node_kwok_makes_ready_again_keeps_its_address(
    cluster: Cluster, kube: Kube, gpu_nodes: None
) -> None:
    """kwok's node-initialize Stage runs again whenever a node is not Ready (the node lifecycle
    controller marks it Unknown when kwok's lease renewals lag on a busy host). Its upstream
    template then patched an empty ``addresses:`` (null: delete) onto a node that has its
    InternalIP and no Hostname, and pods/log failed with "no preferred addresses found" until the
    next heartbeat, 10-20 min later (hack/kwok/stages.yaml)."""
    if cluster.local is None:
        pytest.skip("the Stages are the local control plane's kwok")
    name = "gpu-t4-1"
    before = kube.get(f"/api/v1/nodes/{name}")
    assert before["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    now = before["metadata"]["creationTimestamp"]
    kube.patch(
        f"/api/v1/nodes/{name}",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "Unknown",
                        "reason": "NodeStatusUnknown",
                        "message": "e2e: as the node lifecycle controller writes it",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ]
            }
        },
        kind="strategic",
        subresource="status",
    )

    def made_ready() -> dict[str, Any] | None:
        node = kube.get(f"/api/v1/nodes/{name}")
        return node if Kube.condition(node, "Ready") == "True" else None

    again = wait_for(made_ready, timeout=30, what=f"kwok to make {name} Ready again")
    assert again["status"]["addresses"] == before["status"]["addresses"]


def test_gpu_deployment_lands_only_on_matching_nodes_and_becomes_ready(
    kube: Kube, gpu_nodes: None, namespace: str
) -> None:
    kube.create(gpu_deployment("l4", namespace, "NVIDIA-L4", gpus=1, replicas=3))
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/l4"
    wait_for(
        lambda: kube.get(path).get("status", {}).get("readyReplicas") == 3,
        timeout=60,
        what="Deployment l4 readyReplicas=3",
    )
    pods = pods_of(kube, namespace, "l4")
    assert len(pods) == 3 and all(ready(p) for p in pods)
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 3, "each L4 node has one GPU, so three pods need three nodes"
    assert all(node_product(kube, n) == "NVIDIA-L4" for n in nodes)
    # ExtendedResourceToleration admission let the pods onto the tainted GPU nodes.
    tolerations = pods[0]["spec"].get("tolerations", [])
    assert any(t.get("key") == "nvidia.com/gpu" for t in tolerations)


def test_gpu_requests_beyond_capacity_stay_pending(
    kube: Kube, gpu_nodes: None, namespace: str
) -> None:
    a100_nodes = kube.list("/api/v1/nodes", label_selector=f"{PRODUCT}=NVIDIA-A100-SXM4-40GB")
    want = len(a100_nodes) + 1
    kube.create(gpu_deployment("a100", namespace, "NVIDIA-A100-SXM4-40GB", gpus=8, replicas=want))

    def placed() -> list[dict[str, Any]] | None:
        pods = pods_of(kube, namespace, "a100")
        running = [p for p in pods if ready(p)]
        unschedulable = [
            p
            for p in pods
            for c in p["status"].get("conditions", [])
            if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
        ]
        return pods if len(running) == len(a100_nodes) and unschedulable else None

    pods = wait_for(placed, timeout=60, what="A100 pods placed, one unschedulable")
    nodes = [p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")]
    assert sorted(nodes) == sorted(n["metadata"]["name"] for n in a100_nodes)
    pending = [p for p in pods if not p["spec"].get("nodeName")]
    (cond,) = [c for c in pending[0]["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert "nvidia.com/gpu" in cond["message"]


def test_cpu_pod_avoids_tainted_gpu_nodes(kube: Kube, gpu_nodes: None, namespace: str) -> None:
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "cpu-only", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
    )
    path = f"/api/v1/namespaces/{namespace}/pods/cpu-only"

    def scheduled_and_ready() -> dict[str, Any] | None:
        pod = kube.get(path)
        return pod if ready(pod) else None

    pod = wait_for(scheduled_and_ready, timeout=60, what="pod cpu-only Ready")
    assert node_product(kube, pod["spec"]["nodeName"]) is None


def test_deleting_a_deployment_garbage_collects_replicasets_and_pods(
    kube: Kube, gpu_nodes: None, namespace: str
) -> None:
    kube.create(gpu_deployment("gc", namespace, "Tesla-T4", gpus=1, replicas=2))
    wait_for(
        lambda: len([p for p in pods_of(kube, namespace, "gc") if ready(p)]) == 2,
        timeout=60,
        what="two gc pods Ready",
    )
    rs_path = f"/apis/apps/v1/namespaces/{namespace}/replicasets"
    assert kube.list(rs_path, label_selector="app=gc")
    kube.delete(f"/apis/apps/v1/namespaces/{namespace}/deployments/gc")
    wait_for(
        lambda: (
            not kube.list(rs_path, label_selector="app=gc") and not pods_of(kube, namespace, "gc")
        ),
        timeout=60,
        what="ReplicaSets and pods of gc garbage-collected",
    )


def test_deleting_a_vllmservice_garbage_collects_owned_objects(
    kube: Kube, crd: dict[str, Any], namespace: str
) -> None:
    svc = copy.deepcopy(VALID)
    svc["metadata"] = {"name": "owner", "namespace": namespace}
    owner = kube.create(svc)
    child = kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "owned",
                "namespace": namespace,
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": "VLLMService",
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "data": {"plan": "{}"},
        }
    )
    child_path = kube.path_of(child)
    kube.delete(kube.path_of(owner))
    kube.wait_gone(child_path, timeout=60)


@pytest.mark.parametrize("waiting", ["CrashLoopBackOff", None])
def test_simulated_oomkilled_status_is_visible_through_the_api(
    kube: Kube, gpu_nodes: None, namespace: str, waiting: str | None
) -> None:
    kube.create(gpu_deployment("oom", namespace, "NVIDIA-L4", gpus=1, replicas=1))
    (pod,) = wait_for(
        lambda: [p for p in pods_of(kube, namespace, "oom") if ready(p)],
        timeout=60,
        what="oom pod Ready",
    )
    name = pod["metadata"]["name"]
    set_container_status(kube, namespace, name, restart_count=3, waiting_reason=waiting)
    got = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    (status,) = got["status"]["containerStatuses"]
    assert status["restartCount"] == 3
    assert status["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert status["lastState"]["terminated"]["exitCode"] == 137
    dep = f"/apis/apps/v1/namespaces/{namespace}/deployments/oom"
    if waiting:
        assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert Kube.condition(got, "Ready") == "False"
        # The controllers see it too: the Deployment loses its ready replica.
        wait_for(
            lambda: not kube.get(dep).get("status", {}).get("readyReplicas"),
            timeout=30,
            what="Deployment oom readyReplicas=0",
        )
    else:
        assert "running" in status["state"] and Kube.condition(got, "Ready") == "True"
    # kwok's Stages do not overwrite a status a kubelet wrote on a Running pod.
    again = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    assert again["status"]["containerStatuses"][0]["restartCount"] == 3


def test_pod_logs_registered_with_kwok_are_served_through_the_api_server(
    cluster: Cluster, kube: Kube, gpu_nodes: None, namespace: str
) -> None:
    """The API server proxies pods/log to the node's kubelet endpoint, which is kwok's server on
    127.0.0.1 (cert checked against the cluster CA); kwok reads the files a Logs object names."""
    if cluster.local is None:
        pytest.skip("pod logs are registered through the local control plane's kwok")
    kube.create(gpu_deployment("logs", namespace, "NVIDIA-L4", gpus=1, replicas=1))
    (pod,) = wait_for(
        lambda: [p for p in pods_of(kube, namespace, "logs") if ready(p)],
        timeout=60,
        what="logs pod Ready",
    )
    name = pod["metadata"]["name"]
    node = kube.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
    log_path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
    previous = {"container": "vllm", "previous": "true"}
    with pytest.raises(ApiError) as unregistered:
        kube.read_text(log_path, previous)
    assert unregistered.value.status == 400 and "no logs found" in str(unregistered.value)

    served = cluster.local.set_pod_log(
        namespace, name, "vllm", "first\nsecond\nthird\n", previous=True
    )
    assert served == "first\nsecond\nthird\n"
    assert kube.read_text(log_path, previous) == served  # served through the API server
    assert kube.read_text(log_path, {**previous, "tailLines": "1"}) == "third\n"
    assert kube.read_text(log_path, {"container": "vllm"}) == ""  # the current run: nothing yet
    assert cluster.local.set_pod_log(namespace, name, "vllm", "serving\n") == "serving\n"
    assert kube.read_text(log_path, previous) == "first\nsecond\nthird\n"  # untouched
