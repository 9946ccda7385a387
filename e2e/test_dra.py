"""Dynamic Resource Allocation end to end (#30): a simulated NVIDIA DRA driver, the real scheduler.

The harness plays the driver: it creates the driver's DeviceClasses (`gpu.nvidia.com`,
`mig.nvidia.com`, as its Helm chart installs them) and publishes ResourceSlices of the driver's
shape (tests/reconcile/dra_slices.py, from NVIDIA/k8s-dra-driver-gpu deviceinfo.go) for two kwok
nodes that carry no GPU Feature Discovery label and no nvidia.com/gpu resource: a DRA-only
cluster. The operator plans from the slices, renders a ResourceClaimTemplate per pool, the
resource-claim controller (kube-controller-manager) creates each pod's claim, kube-scheduler's
DRA plugin allocates devices that match the CEL selector and binds the pod to their node, and kwok
runs it. The GPU types (H200, A100 80GB MIG) are ones no other e2e test uses, so these nodes do
not change what the other tests' services see.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.reconcile.dra_slices import gpu_slice, mig_slice

from e2e.conftest import Cluster
from e2e.kube import Kube, load_manifests, wait_for
from e2e.localcluster import KWOK_ANNOTATION
from e2e.operator_process import OperatorProcess
from e2e.test_controller import wait_condition

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "dra"
TIMEOUT = 90
H200_NODE = "dra-h200-0"
MIG_NODE = "dra-a100-mig-0"
MIG_PARTITIONS = [("3g.40gb", 40192), ("3g.40gb", 40192), ("1g.10gb", 9728), ("1g.10gb", 9728)]

pytestmark = pytest.mark.usefixtures("crd")


def device_class(name: str, device_type: str) -> dict[str, Any]:
    """The driver chart's DeviceClass: the driver's devices of one type."""
    expression = (
        f"device.driver == 'gpu.nvidia.com' && "
        f"device.attributes['gpu.nvidia.com'].type == '{device_type}'"
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def bare_kwok_node(name: str) -> dict[str, Any]:
    """A GPU node of a DRA-only cluster: kwok-managed, no GFD labels, no nvidia.com/gpu."""
    resources = {"cpu": "128", "memory": "1000Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


@pytest.fixture(scope="module")
def dra_nodes(cluster: Cluster) -> Iterator[None]:
    if cluster.local is None:
        pytest.skip("needs the local control plane (it adds kwok nodes)")
    kube = cluster.kube
    kube.wait_served("resource.k8s.io/v1", "ResourceSlice")
    for obj in (device_class("gpu.nvidia.com", "gpu"), device_class("mig.nvidia.com", "mig")):
        kube.apply(obj)
    cluster.local.add_nodes([bare_kwok_node(H200_NODE), bare_kwok_node(MIG_NODE)])
    slices = [
        gpu_slice(H200_NODE, product="NVIDIA H200", memory_mib=143771, gpus=8),
        mig_slice(MIG_NODE, MIG_PARTITIONS),
    ]
    for obj in slices:
        kube.apply(obj)
    yield
    for obj in slices:
        kube.delete(f"/apis/resource.k8s.io/v1/resourceslices/{obj['metadata']['name']}")
    for node in (H200_NODE, MIG_NODE):
        kube.delete(f"/api/v1/nodes/{node}")


def spec(namespace: str, example: str, **placement: Any) -> dict[str, Any]:
    (obj,) = load_manifests(EXAMPLES / example)
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["placement"].update(placement)
    return obj


def claim_templates(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return kube.list(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates")


def planned(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The service once its pool has a plan (Feasible=True also means "awaiting nodes")."""

    def check() -> dict[str, Any] | None:
        live = wait_condition(kube, namespace, name, "Feasible", "True")
        pools = (live.get("status") or {}).get("pools") or []
        return live if pools and all(p.get("plan") for p in pools) else None

    return wait_for(check, timeout=TIMEOUT, what=f"{name} planned")


def allocated_pods(kube: Kube, namespace: str, count: int) -> list[dict[str, Any]]:
    """The service's pods once `count` are bound, each with its claim (allocated by then: the
    scheduler allocates before it binds)."""

    def check() -> list[dict[str, Any]] | None:
        pods = kube.list(f"/api/v1/namespaces/{namespace}/pods")
        if len(pods) != count:
            return None
        for pod in pods:
            if not pod["spec"].get("nodeName"):
                return None
            statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
            if len(statuses) != 1 or not statuses[0].get("resourceClaimName"):
                return None
        return pods

    return wait_for(check, timeout=TIMEOUT, what=f"{count} pods with allocated claims")


def allocation(kube: Kube, namespace: str, pod: dict[str, Any]) -> list[dict[str, Any]]:
    claim = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    live = kube.get(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{claim}")
    results: list[dict[str, Any]] = live["status"]["allocation"]["devices"]["results"]
    return results


@pytest.mark.usefixtures("dra_nodes")
def test_a_dra_service_on_a_dra_only_node_claims_the_planned_gpus_and_is_scheduled_there(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    obj = spec(namespace, "llama-3.1-70b-h100-dra.yaml", gpuTypes=["NVIDIA-H200"])
    name = obj["metadata"]["name"]
    kube.apply(obj)
    live = planned(kube, namespace, name)
    (pool,) = live["status"]["pools"]
    tp = pool["plan"]["engineArgs"]["tensor_parallel_size"]
    # Planned from the slice's memory: the node has no GFD memory label.
    assert pool["plan"]["memory"]["gpuTotalGiB"] > 130
    (template,) = claim_templates(kube, namespace)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["count"] == tp
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    expression = request["exactly"]["selectors"][0]["cel"]["expression"]
    assert "productName.replace(' ', '-') == 'NVIDIA-H200'" in expression
    assert "quantity('143771Mi')" in expression
    (pod,) = allocated_pods(kube, namespace, 1)
    assert pod["spec"]["nodeName"] == H200_NODE
    results = allocation(kube, namespace, pod)
    assert len(results) == tp
    assert {r["driver"] for r in results} == {"gpu.nvidia.com"}
    assert {r["pool"] for r in results} == {H200_NODE}
    # kwok runs the pod: the service becomes Ready on a node without any GFD label.
    wait_condition(kube, namespace, name, "Ready", "True")


@pytest.mark.usefixtures("dra_nodes")
def test_a_mig_pool_gets_a_partition_of_the_planned_memory(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    obj = spec(namespace, "llama-3.1-8b-a100-mig-dra.yaml")
    name = obj["metadata"]["name"]
    kube.apply(obj)
    planned(kube, namespace, name)
    (template,) = claim_templates(kube, namespace)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
    (pod,) = allocated_pods(kube, namespace, 1)
    assert pod["spec"]["nodeName"] == MIG_NODE
    (result,) = allocation(kube, namespace, pod)
    # Devices 0 and 1 of the slice are the 3g.40gb partitions; 2 and 3 the 1g.10gb ones.
    assert result["device"] in ("gpu-0-mig-0-0-1", "gpu-0-mig-1-1-1")
    wait_condition(kube, namespace, name, "Ready", "True")
