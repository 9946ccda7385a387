"""ResourceSlices shaped as the NVIDIA DRA driver publishes them, for reconcile tests.

Source of the shape: NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go
(`GpuInfo.GetDevice`, `MigDeviceInfo.GetDevice`; resource.k8s.io/v1 API): device names
`gpu-<minor>` and `gpu-<minor>-mig-<giProfileId>-<start>-<size>`, attributes `type`, `uuid`,
`productName` (NVML's name, e.g. "NVIDIA H100 80GB HBM3"), `brand`, `architecture`,
`cudaComputeCapability` and `driverVersion` (versions), MIG `profile` and `parentUUID`, capacity
`memory` (NVML memory.Total in bytes as a BinarySI quantity; MIG: the GPU instance profile's
MemorySizeMB in MiB). Memory totals as nvidia-smi reports them (the repo's GPU catalog).
"""

from typing import Any

DRIVER = "gpu.nvidia.com"


def _device(name: str, attrs: dict[str, Any], memory_mib: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for key, value in attrs.items():
        kind = "version" if key in ("cudaComputeCapability", "driverVersion") else "string"
        attributes[key] = {kind: value}
    return {
        "name": name,
        "attributes": attributes,
        "capacity": {"memory": {"value": f"{memory_mib}Mi"}},
    }


def gpu_slice(
    node: str,
    product: str = "NVIDIA H100 80GB HBM3",
    gpus: int = 8,
    memory_mib: int = 81559,
    cc: str = "9.0.0",
    architecture: str = "Hopper",
    generation: int = 1,
) -> dict[str, Any]:
    devices = [
        _device(
            f"gpu-{i}",
            {
                "type": "gpu",
                "uuid": f"GPU-{node}-{i}",
                "productName": product,
                "brand": "Nvidia",
                "architecture": architecture,
                "cudaComputeCapability": cc,
                "driverVersion": "570.158.1",
            },
            memory_mib,
        )
        for i in range(gpus)
    ]
    return _slice(node, devices, generation)


def mig_slice(
    node: str,
    partitions: list[tuple[str, int]],
    product: str = "NVIDIA A100-SXM4-80GB",
    cc: str = "8.0.0",
) -> dict[str, Any]:
    """One GPU cut into MIG partitions: (profile, MiB) each."""
    devices = [
        _device(
            f"gpu-0-mig-{i}-{i}-1",
            {
                "type": "mig",
                "uuid": f"MIG-{node}-{i}",
                "parentUUID": f"GPU-{node}-0",
                "profile": profile,
                "productName": product,
                "brand": "Nvidia",
                "architecture": "Ampere",
                "cudaComputeCapability": cc,
                "driverVersion": "570.158.1",
            },
            mib,
        )
        for i, (profile, mib) in enumerate(partitions)
    ]
    return _slice(node, devices, 1)


def _slice(node: str, devices: list[dict[str, Any]], generation: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}-{generation}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def bare_node(name: str, host_memory: str = "512Gi") -> dict[str, Any]:
    """A GPU node of a DRA-only cluster: no GFD labels, no nvidia.com/gpu resource."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "64", "memory": host_memory},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
