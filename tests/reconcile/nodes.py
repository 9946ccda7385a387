"""Node objects shaped like GPU Feature Discovery labels them, for reconcile tests."""

import copy
from typing import Any

GPU_MEMORY_MIB = {
    "NVIDIA-H100-80GB-HBM3": 81559,
    "NVIDIA-A100-SXM4-40GB": 40960,
    "NVIDIA-L4": 23034,
    "Tesla-T4": 15360,
}


def gpu_node(
    name: str,
    product: str,
    gpus: int = 8,
    *,
    ready: bool = True,
    unschedulable: bool = False,
    memory_mib: int | None = None,
    extra_resources: dict[str, str] | None = None,
    host_memory: str = "512Gi",
) -> dict[str, Any]:
    memory = memory_mib if memory_mib is not None else GPU_MEMORY_MIB.get(product)
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.present": "true"}
    if memory is not None:
        labels["nvidia.com/gpu.memory"] = str(memory)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": {
                "cpu": "64",
                "memory": host_memory,
                "nvidia.com/gpu": str(gpus),
                **(extra_resources or {}),
            },
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def cpu_node(name: str = "cpu-0") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {}},
        "status": {
            "allocatable": {"cpu": "32"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def cordoned(node: dict[str, Any]) -> dict[str, Any]:
    """`kubectl cordon`: spec.unschedulable, everything else as it was."""
    out = copy.deepcopy(node)
    out["spec"] = {**out.get("spec", {}), "unschedulable": True}
    return out


def not_ready(node: dict[str, Any], *, device_plugin_gone: bool = False) -> dict[str, Any]:
    """The kubelet stopped posting (node lease expired): Ready=Unknown, the node.kubernetes.io/
    unreachable taint; allocatable keeps its last value unless the device plugin went away too
    (then allocatable GPUs read 0 while capacity and GFD's gpu.count label keep the hardware)."""
    out = copy.deepcopy(node)
    out["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    out["spec"] = {
        **out.get("spec", {}),
        "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}],
    }
    if device_plugin_gone:
        gpus = out["status"]["allocatable"]["nvidia.com/gpu"]
        out["status"]["capacity"] = {"nvidia.com/gpu": gpus}
        out["status"]["allocatable"]["nvidia.com/gpu"] = "0"
        out["metadata"]["labels"]["nvidia.com/gpu.count"] = gpus
    return out
