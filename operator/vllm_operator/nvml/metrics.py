"""Prometheus metrics of `vllm-operator probe`, on their own CollectorRegistry.

Why a collector for the GPU figures instead of labelled Gauges: processes come and go, and a Gauge
keeps serving the last value of a PID that exited. The collector renders the latest budget at
scrape time, so a series exists exactly while NVML reports it. The per-process series carry pod,
namespace and container labels when the probe could map the PID, which is what the remediation
loop needs to see one vLLM pod's memory creeping.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from vllm_operator.api.probe import GpuBudget, GpuProcess

MIB = 1024 * 1024
PREFIX = "vllm_operator_probe"

GPU_LABELS = ["gpu", "uuid", "name", "mig_device"]
PROCESS_LABELS = [*GPU_LABELS, "pid", "pod_uid", "namespace", "pod", "container"]


class _BudgetCollector(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._budget: GpuBudget | None = None

    def set(self, budget: GpuBudget) -> None:
        with self._lock:
            self._budget = budget

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            budget = self._budget
        families = {
            key: GaugeMetricFamily(
                f"{PREFIX}_gpu_memory_{key}_bytes",
                f"GPU memory {key} as NVML reports it (MIG slices with mig_device set).",
                labels=GPU_LABELS,
            )
            for key in ("total", "free", "used", "reserved")
        }
        process = GaugeMetricFamily(
            f"{PREFIX}_gpu_process_memory_used_bytes",
            "GPU memory used by one process (pod labels when the PID maps to a pod).",
            labels=PROCESS_LABELS,
        )
        if budget is not None:
            for gpu in budget.gpus:
                slices = [(gpu, "")] + [(m, str(m.index)) for m in gpu.mig_devices]
                for dev, mig in slices:
                    labels = [str(gpu.index), dev.uuid, dev.name, mig]
                    for key in ("total", "free", "used", "reserved"):
                        value = getattr(dev, f"{key}_mib")
                        if value is not None:
                            families[key].add_metric(labels, value * MIB)
                    for proc in dev.processes:
                        if proc.used_mib is not None:
                            process.add_metric(labels + _process_labels(proc), proc.used_mib * MIB)
        yield from families.values()
        yield process


def _process_labels(proc: GpuProcess) -> list[str]:
    return [
        str(proc.pid),
        proc.pod_uid or "",
        proc.namespace or "",
        proc.pod or "",
        proc.container or "",
    ]


class ProbeMetrics:
    """The probe's registry: GPU and process memory, nvml_up, errors, publishes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._budget = _BudgetCollector()
        self.registry.register(self._budget)
        self.nvml_up = Gauge(
            f"{PREFIX}_nvml_up",
            "1 when the last NVML read succeeded, 0 when the library is missing or failing.",
            registry=self.registry,
        )
        self.gpus = Gauge(
            f"{PREFIX}_gpus", "GPUs NVML reported in the last read.", registry=self.registry
        )
        self.errors = Counter(
            f"{PREFIX}_errors",
            "NVML and publishing failures by reason (init, system, gpu_lost, processes, publish, ...).",
            ["reason"],
            registry=self.registry,
        )
        self.publishes = Counter(
            f"{PREFIX}_annotation_publishes",
            "Node annotation writes by result (ok, error).",
            ["result"],
            registry=self.registry,
        )
        self.last_read = Gauge(
            f"{PREFIX}_last_read_timestamp_seconds",
            "Unix time of the last NVML read.",
            registry=self.registry,
        )
        self.last_publish = Gauge(
            f"{PREFIX}_last_publish_timestamp_seconds",
            "Unix time of the last successful annotation write.",
            registry=self.registry,
        )

    def observe(self, budget: GpuBudget, errors: list[str]) -> None:
        """Record one read (the budget replaces the previous one wholesale)."""
        self._budget.set(budget)
        self.nvml_up.set(0 if budget.error else 1)
        self.gpus.set(len(budget.gpus))
        self.last_read.set(budget.observed_at.timestamp())
        for reason in errors:
            self.errors.labels(reason=reason).inc()
