"""GPU inventory from DRA ResourceSlices (resource.k8s.io/v1), merged into the node view.

Pure. On a cluster where GPUs are handed out by the NVIDIA DRA driver, nodes carry no GPU Feature
Discovery labels and no `nvidia.com/gpu` resource: what a node has is published by the driver as
ResourceSlices (`spec.driver: gpu.nvidia.com`, `spec.nodeName`, one device per GPU or MIG
partition with the attributes `type`, `productName`, `cudaComputeCapability`, `profile` and the
capacity `memory`; NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go).

Why merge into the node objects instead of a second inventory: planning, admission, the probe's
budgets and the node triggers all read one node view (reconcile/inventory.py); a node described by
its slices becomes a node with the labels GFD would have given it (product with spaces as hyphens,
memory in MiB, compute capability, GPU count) and the device count as its GPU capacity, so every
consumer works unchanged on a DRA-only cluster. When a node has both, the slices win (they are
what the scheduler allocates from) and each disagreement is reported as a `Mismatch`.

Only the newest generation of each driver pool counts (a driver replacing its slices publishes a
higher generation; older ones are about to go), and only slices bound to one node (`nodeName`).
A node's MIG devices make it a node of each of its profiles `<parent>-MIG-<profile>` (GFD's
single-strategy spelling; one in-memory copy of the node per GPU type, so a node cut into 3g.40gb
and 1g.10gb partitions serves pools of both), and every profile's memory is kept, so a dra-mode
MIG pool can claim the smallest partition that holds its plan.
"""

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from vllm_operator.reconcile.inventory import (
    ANNOTATION_MIG_PROFILES,
    LABEL_CC_MAJOR,
    LABEL_CC_MINOR,
    LABEL_COUNT,
    LABEL_MEMORY,
    LABEL_PRODUCT,
    RESOURCE_GPU,
    memory_quantity_mib,
)

Obj = dict[str, Any]

DRIVER = "gpu.nvidia.com"


@dataclass
class NodeDevices:
    """One node's GPUs as its DRA driver publishes them."""

    node: str
    product: str = ""
    gpus: int = 0
    memory_mib: int | None = None
    compute_capability: tuple[int, int] | None = None
    mig_profiles: dict[str, int] = field(default_factory=dict)
    mig_devices: Counter[str] = field(default_factory=Counter)
    mig_parent: str = ""

    @property
    def label(self) -> str:
        """The GFD-style product label of what the node offers (full GPUs first)."""
        if self.gpus or not self.mig_devices:
            return self.product
        profile = max(sorted(self.mig_devices), key=lambda p: self.mig_devices[p])
        return f"{self.mig_parent}-MIG-{profile}"

    @property
    def count(self) -> int:
        """Devices of the label's kind (full GPUs, or partitions of the label's profile)."""
        if self.gpus or not self.mig_devices:
            return self.gpus
        return self.mig_devices[self.label.rsplit("-MIG-", 1)[1]]

    @property
    def label_memory_mib(self) -> int | None:
        if self.gpus or not self.mig_devices:
            return self.memory_mib
        return self.mig_profiles.get(self.label.rsplit("-MIG-", 1)[1])


@dataclass(frozen=True)
class Mismatch:
    """A node whose GFD labels disagree with its ResourceSlices (the slices win)."""

    node: str
    uid: str
    message: str


def _attr(device: Obj, name: str) -> object:
    value = ((device.get("attributes") or {}).get(name)) or {}
    for kind in ("string", "version", "int", "bool"):
        if kind in value:
            return value[kind]
    return None


def _cc(version: object) -> tuple[int, int] | None:
    parts = str(version or "").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _current(slices: list[Obj]) -> list[Obj]:
    """The slices of each (driver, pool)'s newest generation."""
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        key = (str(spec.get("driver")), str((spec.get("pool") or {}).get("name")))
        generation = int((spec.get("pool") or {}).get("generation") or 0)
        newest[key] = max(newest.get(key, generation), generation)
    return [
        s
        for s in slices
        if int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0)
        == newest[(str(s["spec"].get("driver")), str((s["spec"].get("pool") or {}).get("name")))]
    ]


def slice_inventory(slices: list[Obj]) -> dict[str, NodeDevices]:
    """Per node, the GPUs and MIG partitions the NVIDIA DRA driver publishes."""
    nodes: dict[str, NodeDevices] = {}
    for s in _current([s for s in slices if isinstance(s.get("spec"), dict)]):
        spec = s["spec"]
        node = spec.get("nodeName")
        if spec.get("driver") != DRIVER or not isinstance(node, str) or not node:
            continue
        inv = nodes.setdefault(node, NodeDevices(node=node))
        for device in spec.get("devices") or []:
            product = str(_attr(device, "productName") or "").strip()
            if not product:
                continue
            label = "-".join(product.split())
            capacity = ((device.get("capacity") or {}).get("memory") or {}).get("value")
            memory = memory_quantity_mib(capacity)
            cc = _cc(_attr(device, "cudaComputeCapability"))
            if cc is not None:
                inv.compute_capability = (
                    cc if inv.compute_capability is None else min(inv.compute_capability, cc)
                )
            kind = _attr(device, "type")
            if kind == "mig":
                profile = str(_attr(device, "profile") or "")
                if not profile:
                    continue
                inv.mig_parent = label
                inv.mig_devices[profile] += 1
                if memory is not None:
                    known = inv.mig_profiles.get(profile)
                    inv.mig_profiles[profile] = memory if known is None else min(known, memory)
            elif kind == "gpu":
                inv.product = label
                inv.gpus += 1
                if memory is not None:
                    inv.memory_mib = (
                        memory if inv.memory_mib is None else min(inv.memory_mib, memory)
                    )
    return {n: inv for n, inv in nodes.items() if inv.label}


def _disagreements(labels: dict[str, object], devices: NodeDevices) -> list[str]:
    wanted = {
        LABEL_PRODUCT: devices.label,
        LABEL_MEMORY: str(devices.label_memory_mib) if devices.label_memory_mib else None,
        LABEL_COUNT: str(devices.count) if devices.gpus else None,
    }
    return [
        f"{key}={labels[key]} but the ResourceSlices say {value}"
        for key, value in wanted.items()
        if value is not None and key in labels and str(labels[key]) != value
    ]


def _views(found: NodeDevices) -> list[tuple[str, int, int | None, str]]:
    """(product label, devices, memory MiB, resource) of each GPU type the node offers: its full
    GPUs, and each MIG profile apart (a node cut into 3g.40gb and 1g.10gb partitions serves a
    pool of either; GFD's one product label per node cannot say that)."""
    views = []
    if found.gpus:
        views.append((found.product, found.gpus, found.memory_mib, RESOURCE_GPU))
    for profile in sorted(found.mig_devices):
        views.append(
            (
                f"{found.mig_parent}-MIG-{profile}",
                found.mig_devices[profile],
                found.mig_profiles.get(profile),
                f"nvidia.com/mig-{profile.lower()}",
            )
        )
    return views


def merge_slices(nodes: list[Obj], slices: list[Obj]) -> tuple[list[Obj], list[Mismatch]]:
    """The nodes as the inventory should see them: each node with driver slices carries the
    labels and GPU capacity its slices describe (copies; `nodes` are not modified), one copy per
    GPU type it offers (full GPUs, each MIG profile), and what disagreed with its own GFD
    labels."""
    devices = slice_inventory(slices)
    if not devices:
        return nodes, []
    merged: list[Obj] = []
    mismatches: list[Mismatch] = []
    for node in nodes:
        meta = node.get("metadata") or {}
        found = devices.get(str(meta.get("name", "")))
        if found is None:
            merged.append(node)
            continue
        problems = _disagreements(dict(meta.get("labels") or {}), found)
        if problems:
            mismatches.append(
                Mismatch(str(meta.get("name", "")), str(meta.get("uid", "")), "; ".join(problems))
            )
        for product, count, memory, resource in _views(found):
            labels = dict(meta.get("labels") or {})
            labels[LABEL_PRODUCT] = product
            labels.pop(LABEL_MEMORY, None)
            if memory:
                labels[LABEL_MEMORY] = str(memory)
            if found.compute_capability is not None:
                labels[LABEL_CC_MAJOR] = str(found.compute_capability[0])
                labels[LABEL_CC_MINOR] = str(found.compute_capability[1])
            labels.pop(LABEL_COUNT, None)
            if resource == RESOURCE_GPU:
                labels[LABEL_COUNT] = str(count)
            annotations = dict(meta.get("annotations") or {})
            if found.mig_profiles:
                annotations[ANNOTATION_MIG_PROFILES] = json.dumps(
                    found.mig_profiles, sort_keys=True
                )
            status = dict(node.get("status") or {})
            for section in ("capacity", "allocatable"):
                values = dict(status.get(section) or {})
                values[resource] = str(count)
                status[section] = values
            merged.append(
                {
                    **node,
                    "metadata": {**meta, "labels": labels, "annotations": annotations},
                    "status": status,
                }
            )
    return merged, mismatches


def slice_products(slice_: Obj) -> set[str]:
    """The GFD-style product labels one slice's devices stand for (full GPUs and MIG)."""
    spec = slice_.get("spec") or {}
    if spec.get("driver") != DRIVER:
        return set()
    products: set[str] = set()
    for device in spec.get("devices") or []:
        label = "-".join(str(_attr(device, "productName") or "").split())
        if not label:
            continue
        profile = _attr(device, "profile")
        products.add(f"{label}-MIG-{profile}" if _attr(device, "type") == "mig" else label)
    return products
