"""Measured GPU budgets from the NVML probe's node annotations, per GPU product.

The probe publishes what is really free on each GPU (other tenants, display servers, driver
reserve). For planning, a pool needs the free memory of a GPU its pod could be given: GPUs held by
other pods are not candidates (the device plugin hands out whole GPUs), unless the product is
time-sliced (-SHARED), where every tenant shares every GPU. The pool then plans for the tightest
candidate over all fresh nodes of its product. Stale or malformed annotations are ignored, and the
reason is reported so the controller can emit an Event; they never fail a reconcile.
"""

import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from vllm_operator.api.probe import (
    GPU_BUDGET_ANNOTATION,
    BudgetReading,
    BudgetRejection,
    GpuBudget,
    GpuDevice,
    check_budget,
    decode_budget,
    planning_budget,
)
from vllm_operator.reconcile.inventory import LABEL_PRODUCT


@dataclass(frozen=True)
class IgnoredBudget:
    """A node whose annotation the planner ignored, with its GPU product (to scope the note)."""

    product: str
    rejection: BudgetRejection


@dataclass
class MeasuredBudgets:
    """Usable MiB per GPU product, and the annotations that had to be ignored (node -> why)."""

    usable_mib: dict[str, float] = field(default_factory=dict)
    ignored: dict[str, IgnoredBudget] = field(default_factory=dict)


class BudgetCache:
    """Decoded budget annotations per node, parsed once per change of the annotation's text.

    Why: every reconcile of every service reads every GPU node; re-parsing a large annotation each
    time multiplied its cost by the number of services. The key is the text itself (a string
    comparison, cheaper than any parse); freshness depends on the clock and is checked per call.
    Thread-safe: Kopf runs reconciles on a worker pool.
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[str, GpuBudget | BudgetRejection]] = {}
        self._guard = threading.Lock()
        self.decodes = 0

    def decode(self, node: str, text: str) -> GpuBudget | BudgetRejection:
        with self._guard:
            cached = self._entries.get(node)
            if cached is not None and cached[0] == text:
                return cached[1]
        decoded = decode_budget(text)
        with self._guard:
            self._entries[node] = (text, decoded)
            self.decodes += 1
        return decoded

    def retain(self, nodes: Iterable[str]) -> None:
        """Forget nodes that are gone (the cache never outgrows the node list)."""
        keep = set(nodes)
        with self._guard:
            for name in set(self._entries) - keep:
                del self._entries[name]


def _held_by_other_pod(gpu: GpuDevice, own_pod_uids: Collection[str]) -> bool:
    return any(p.pod_uid and p.pod_uid not in own_pod_uids for p in gpu.processes)


def _node_usable(reading: BudgetReading, shared: bool, own: Collection[str]) -> float | None:
    best: float | None = None
    for gpu in reading.budget.gpus:
        if gpu.mig_enabled or gpu.error is not None:
            continue
        if not shared and _held_by_other_pod(gpu, own):
            continue
        result = planning_budget(reading, gpu_index=gpu.index, own_pod_uids=own)
        if isinstance(result, str):
            continue
        best = result.usable_mib if best is None else min(best, result.usable_mib)
    return best


def measured_budgets(
    nodes: list[dict[str, object]],
    now: datetime,
    own_pod_uids: Collection[str] = (),
    cache: BudgetCache | None = None,
) -> MeasuredBudgets:
    """The tightest usable GPU memory per product over nodes with a fresh probe budget."""
    out = MeasuredBudgets()
    decoder = cache if cache is not None else BudgetCache()
    for node in nodes:
        meta = node.get("metadata")
        if not isinstance(meta, Mapping):
            continue
        annotations = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        if not isinstance(annotations, Mapping) or not isinstance(labels, Mapping):
            continue
        text = annotations.get(GPU_BUDGET_ANNOTATION)
        product = labels.get(LABEL_PRODUCT)
        if text is None or not isinstance(product, str):
            continue
        name = str(meta.get("name", ""))
        decoded = decoder.decode(name, str(text))
        reading = decoded if isinstance(decoded, BudgetRejection) else check_budget(decoded, now)
        if isinstance(reading, BudgetRejection):
            out.ignored[name] = IgnoredBudget(product=product, rejection=reading)
            continue
        usable = _node_usable(reading, product.upper().endswith("-SHARED"), own_pod_uids)
        if usable is None:
            continue
        current = out.usable_mib.get(product)
        out.usable_mib[product] = usable if current is None else min(current, usable)
    return out
