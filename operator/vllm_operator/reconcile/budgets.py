"""Measured GPU budgets from the NVML probe's node annotations, per GPU product.

The probe publishes what is really free on each GPU (other tenants, display servers, driver
reserve). For planning, a pool needs the free memory of a GPU its pod could be given: GPUs held by
other pods are not candidates (the device plugin hands out whole GPUs), unless the product is
time-sliced (-SHARED), where every tenant shares every GPU. The pool then plans for the tightest
candidate over all fresh nodes of its product. Stale or malformed annotations are ignored, and the
reason is reported so the controller can emit an Event; they never fail a reconcile.
"""

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from vllm_operator.api.probe import (
    GPU_BUDGET_ANNOTATION,
    BudgetReading,
    GpuDevice,
    parse_budget,
    planning_budget,
)
from vllm_operator.reconcile.inventory import LABEL_PRODUCT


@dataclass
class MeasuredBudgets:
    """Usable MiB per GPU product, and the annotations that had to be ignored (node -> reason)."""

    usable_mib: dict[str, float] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)


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
) -> MeasuredBudgets:
    """The tightest usable GPU memory per product over nodes with a fresh probe budget."""
    out = MeasuredBudgets()
    for node in nodes:
        meta = node.get("metadata")
        if not isinstance(meta, Mapping):
            continue
        annotations = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        assert isinstance(annotations, Mapping) and isinstance(labels, Mapping)
        text = annotations.get(GPU_BUDGET_ANNOTATION)
        product = labels.get(LABEL_PRODUCT)
        if text is None or not isinstance(product, str):
            continue
        reading = parse_budget(str(text), now)
        name = str(meta.get("name", ""))
        if isinstance(reading, str):
            out.ignored[name] = reading
            continue
        usable = _node_usable(reading, product.upper().endswith("-SHARED"), own_pod_uids)
        if usable is None:
            continue
        current = out.usable_mib.get(product)
        out.usable_mib[product] = usable if current is None else min(current, usable)
    return out
