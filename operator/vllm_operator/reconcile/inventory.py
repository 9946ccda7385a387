"""GPU node inventory: nodes grouped by GPU Feature Discovery product label.

The planner needs one set of GPU facts per pool. Nodes are grouped by `nvidia.com/gpu.product`;
memory comes from `nvidia.com/gpu.memory` (what the node really has), the catalog filling in
what the label lacks. MIG nodes under the mixed strategy expose `nvidia.com/mig-<profile>`
resources instead of `nvidia.com/gpu`, and the pool must request that resource.

Hardware and availability are kept apart (issue #20): what a node *has* (GPU count from capacity,
allocatable or the `nvidia.com/gpu.count` label, product, memory) decides the plan even while the
node is cordoned or NotReady, so a control-plane outage longer than the node lease or a cordon
never turns into a false "infeasible" or a re-plan; whether any node can take pods *now* is
reported separately (`schedulable_nodes`, `unavailable_nodes`).
"""

import json
from dataclasses import dataclass, field
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.catalog.gpus import (
    GpuFacts,
    UnknownGpuError,
    gfd_compute_capability,
    lookup_gpu,
    lookup_gpu_by_memory,
)

Obj = dict[str, object]

LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_CC_MAJOR = "nvidia.com/gpu.compute.major"
LABEL_CC_MINOR = "nvidia.com/gpu.compute.minor"
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_COUNT = "nvidia.com/gpu.count"
RESOURCE_GPU = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
ANNOTATION_MIG_PROFILES = "serving.vllm-operator.dev/dra-mig-profiles"
"""Set by reconcile/slices.py on its in-memory copy of a node described by ResourceSlices (never
written to the cluster): the node's MIG profiles, JSON profile -> MiB."""


class GpuNodeGroup(BaseModel):
    """All nodes carrying one GPU product label."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    product: str = Field(description="nvidia.com/gpu.product as the nodes carry it.")
    memory_mib: int | None = Field(default=None, description="nvidia.com/gpu.memory, if labelled.")
    compute_capability: tuple[int, int] | None = Field(
        default=None,
        description="From nvidia.com/gpu.compute.major/minor (else the lowest of gpu.family).",
    )
    resource: str = Field(default=RESOURCE_GPU, description="Extended resource pods request.")
    nodes: int = 0
    schedulable_nodes: int = Field(default=0, description="Ready and not cordoned.")
    max_gpus_per_node: int = Field(
        default=0, description="Largest allocatable count on one schedulable node."
    )
    hardware_gpus_per_node: int = Field(
        default=0,
        description="Largest GPU count a node of the product has, whatever its state (capacity, "
        "allocatable or the gpu.count label).",
    )
    allocatable_gpus: int = Field(default=0, description="Sum over schedulable nodes.")
    node_names: tuple[str, ...] = ()
    unavailable_nodes: tuple[str, ...] = Field(
        default=(), description='Nodes that cannot take pods now, as "name (why)".'
    )
    allocatable_memory_mib: int | None = Field(
        default=None,
        description="Smallest allocatable memory of the schedulable GPU nodes (of every node "
        "when none is schedulable), MiB; None when no node reports it. The host-memory limit of "
        "a replica must fit on any node the pool may land on.",
    )
    mig_profiles: dict[str, int] = Field(
        default_factory=dict,
        description="MIG profiles the nodes' DRA devices of this product offer, profile -> MiB "
        "(ResourceSlices; empty without them). A dra-mode MIG pool claims the smallest that "
        "holds its plan.",
    )

    @property
    def planning_gpus_per_node(self) -> int:
        """GPUs per node the plan may use: what a schedulable node offers while there is one (pods
        must fit it), else the hardware of any node (the plan stays what it was while they are
        cordoned or NotReady, so nothing is re-planned or called infeasible meanwhile).
        """
        return self.max_gpus_per_node or self.hardware_gpus_per_node


_QUANTITY_SUFFIX = {
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
}


def memory_quantity_mib(value: object) -> int | None:
    """A Kubernetes memory quantity ("512Gi", "131072000Ki", "64G", "1e9") in MiB, rounded down;
    None when absent or unparsable."""
    if not isinstance(value, str | int) or isinstance(value, bool):
        return None
    text = str(value).strip()
    for suffix in sorted(_QUANTITY_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            number, factor = text[: -len(suffix)], _QUANTITY_SUFFIX[suffix]
            break
    else:
        number, factor = text, 1
    try:
        amount = float(number) * factor
    except ValueError:
        return None
    return int(amount // (1 << 20)) if amount >= 0 else None


def _as_dict(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _int(value: object) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _node_ready(node: dict[str, object]) -> bool:
    conditions = _as_dict(node.get("status")).get("conditions") or []
    assert isinstance(conditions, list)
    return any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def _gpu_resource(allocatable: dict[str, object], product: str) -> tuple[str, int]:
    if "-MIG-" in product.upper():
        profile = product.upper().split("-MIG-", 1)[1].lower()
        mig = f"{MIG_RESOURCE_PREFIX}{profile}"
        if mig in allocatable:
            return mig, _int(allocatable[mig])
    return RESOURCE_GPU, _int(allocatable.get(RESOURCE_GPU, 0))


def _hardware_gpus(status: dict[str, object], labels: dict[str, object], resource: str) -> int:
    """GPUs the node has, independent of its state: a NotReady node keeps its last capacity, a
    restarting device plugin reports allocatable 0 while GFD's count label stays."""
    capacity = _as_dict(status.get("capacity"))
    allocatable = _as_dict(status.get("allocatable"))
    counts = [_int(capacity.get(resource)), _int(allocatable.get(resource))]
    if resource == RESOURCE_GPU:  # gpu.count counts physical GPUs, not MIG slices
        counts.append(_int(labels.get(LABEL_COUNT)))
    return max(counts)


def _unavailable_because(node: dict[str, object], gpus: int, resource: str) -> str:
    """Why a node cannot take GPU pods now, or "" when it can."""
    why = []
    if _as_dict(node.get("spec")).get("unschedulable"):
        why.append("cordoned")
    if not _node_ready(node):
        why.append("NotReady")
    if not why and gpus <= 0:
        why.append(f"no allocatable {resource}")
    return ", ".join(why)


@dataclass
class _Acc:
    resource: str
    memory_mib: int | None = None
    compute_capability: tuple[int, int] | None = None
    nodes: int = 0
    schedulable_nodes: int = 0
    max_gpus_per_node: int = 0
    hardware_gpus_per_node: int = 0
    allocatable_gpus: int = 0
    node_names: list[str] = field(default_factory=list)
    unavailable_nodes: list[str] = field(default_factory=list)
    memory_all: list[int] = field(default_factory=list)
    memory_schedulable: list[int] = field(default_factory=list)
    mig_profiles: dict[str, int] = field(default_factory=dict)


def _mig_profiles(meta: dict[str, object]) -> dict[str, int]:
    raw = _as_dict(meta.get("annotations")).get(ANNOTATION_MIG_PROFILES)
    try:
        value = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    return {str(k): _int(v) for k, v in value.items()} if isinstance(value, dict) else {}


def group_gpu_nodes(nodes: list[dict[str, object]]) -> dict[str, GpuNodeGroup]:
    """Group nodes by GPU product label; nodes without the label are not GPU nodes."""
    groups: dict[str, _Acc] = {}
    for node in nodes:
        meta = _as_dict(node.get("metadata"))
        labels = _as_dict(meta.get("labels"))
        product = labels.get(LABEL_PRODUCT)
        if not isinstance(product, str) or not product:
            continue
        status = _as_dict(node.get("status"))
        allocatable = _as_dict(status.get("allocatable"))
        resource, gpus = _gpu_resource(allocatable, product)
        hardware = max(gpus, _hardware_gpus(status, labels, resource))
        unavailable = _unavailable_because(node, gpus, resource)
        acc = groups.setdefault(product, _Acc(resource=resource))
        acc.nodes += 1
        node_name = str(meta.get("name", ""))
        acc.node_names.append(node_name)
        for profile, mib in _mig_profiles(meta).items():
            # Several nodes: the smallest memory each profile has on any of them.
            acc.mig_profiles[profile] = min(acc.mig_profiles.get(profile, mib), mib)
        acc.hardware_gpus_per_node = max(acc.hardware_gpus_per_node, hardware)
        memory = _int(labels.get(LABEL_MEMORY))
        if memory > 0:
            # Mixed memory labels under one product (driver differences): plan for the smallest.
            acc.memory_mib = memory if acc.memory_mib is None else min(acc.memory_mib, memory)
        cc = gfd_compute_capability(
            labels.get(LABEL_CC_MAJOR), labels.get(LABEL_CC_MINOR), labels.get(LABEL_FAMILY)
        )
        if cc is not None:
            # One product, differing labels: plan for the lowest (fewest capabilities).
            acc.compute_capability = (
                cc if acc.compute_capability is None else min(acc.compute_capability, cc)
            )
        host_mib = memory_quantity_mib(allocatable.get("memory"))
        if host_mib is not None:
            acc.memory_all.append(host_mib)
            if not unavailable:
                acc.memory_schedulable.append(host_mib)
        if unavailable:
            acc.unavailable_nodes.append(f"{node_name} ({unavailable})")
        else:
            acc.schedulable_nodes += 1
            acc.allocatable_gpus += gpus
            acc.max_gpus_per_node = max(acc.max_gpus_per_node, gpus)
    return {
        product: GpuNodeGroup(
            product=product,
            memory_mib=acc.memory_mib,
            compute_capability=acc.compute_capability,
            resource=acc.resource,
            nodes=acc.nodes,
            schedulable_nodes=acc.schedulable_nodes,
            max_gpus_per_node=acc.max_gpus_per_node,
            hardware_gpus_per_node=acc.hardware_gpus_per_node,
            allocatable_gpus=acc.allocatable_gpus,
            node_names=tuple(sorted(acc.node_names)),
            unavailable_nodes=tuple(sorted(acc.unavailable_nodes)),
            allocatable_memory_mib=min(acc.memory_schedulable or acc.memory_all, default=None),
            mig_profiles=dict(sorted(acc.mig_profiles.items())),
        )
        for product, acc in sorted(groups.items())
    }


@lru_cache(maxsize=1024)
def canonical_label(label: str) -> str:
    """The catalog's canonical spelling of a product label or alias, or the label itself.

    Memoised: the catalog is fixed for the process (`catalog.gpus._rows` is cached), and every
    reconcile matches each of its gpuTypes against every node group's product; a label the
    catalog does not know computed its closest known labels (difflib) each time, for an error
    this function drops (#32 no-op reconcile)."""
    try:
        return lookup_gpu(label).label
    except UnknownGpuError:
        return label


def match_groups(gpu_type: str, groups: dict[str, GpuNodeGroup]) -> list[GpuNodeGroup]:
    """Node groups serving a spec's gpuTypes entry (exact label, older spelling or alias)."""
    if gpu_type in groups:
        return [groups[gpu_type]]
    wanted = canonical_label(gpu_type)
    return [g for p, g in groups.items() if canonical_label(p) == wanted]


def gpu_facts(group: GpuNodeGroup) -> GpuFacts:
    """GPU facts for a node group: the node's memory label wins over the catalog.

    A product the catalog does not know is still planned from its memory label, with the
    capabilities of its GFD compute-capability labels (bf16 from 8.0) or, without those,
    conservatively (no bf16, no fp8); without memory, UnknownGpuError says what is missing.
    """
    try:
        return lookup_gpu(group.product, memory_mib=group.memory_mib)
    except UnknownGpuError:
        if group.memory_mib is None:
            raise
        return lookup_gpu_by_memory(group.memory_mib, compute_capability=group.compute_capability)
