"""The probe loop: read NVML every interval, publish the budget on change, rate-limited.

Why these rules: a node annotation write wakes every watcher of Node objects (the scheduler, the
kubelet's own node status manager, this operator), so the probe writes only when the budget
changed *meaningfully* (a GPU, process or MIG change, or a memory figure moving by `jitter_mib`),
never more often than `min_publish_interval`, and otherwise only a heartbeat that keeps
`observedAt` fresh for the controller's staleness rule (api.probe.DEFAULT_MAX_AGE).
A change seen too early is not lost: every tick compares against the last *published* budget, so
it goes out on the first tick the rate limit allows. A failed write is retried on the next tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from vllm_operator.api.probe import (
    GPU_BUDGET_ANNOTATION,
    JITTER_MIB,
    GpuBudget,
    significant_change,
)
from vllm_operator.nvml.metrics import ProbeMetrics
from vllm_operator.nvml.reader import NvmlReader

log = logging.getLogger(__name__)


class AnnotationPublisher(Protocol):
    """Writes one annotation on one node (kube.node_annotations.NodeAnnotations in production)."""

    def publish(self, node_name: str, key: str, value: str) -> None: ...


@dataclass(frozen=True)
class ProbeSettings:
    node_name: str
    interval_s: float = 30.0
    min_publish_interval_s: float = 60.0
    heartbeat_s: float = 300.0
    jitter_mib: int = JITTER_MIB


@dataclass(frozen=True)
class TickResult:
    budget: GpuBudget
    published: bool
    reason: str | None  # why it was (or would have been) published; None when unchanged


def publish_reason(
    last: GpuBudget | None,
    last_at: float | None,
    new: GpuBudget,
    now: float,
    settings: ProbeSettings,
) -> tuple[bool, str | None]:
    """(publish now?, why). `last_at`/`now` are monotonic seconds."""
    change = significant_change(last, new, settings.jitter_mib)
    if last_at is None:
        return True, change or "first budget"
    since = now - last_at
    if change is not None:
        return since >= settings.min_publish_interval_s, change
    if since >= settings.heartbeat_s:
        return True, "heartbeat"
    return False, None


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class Probe:
    """One node's probe. Everything it touches is injected: NVML (inside the reader), the
    publisher (None: read and serve metrics only), the metrics, and both clocks."""

    def __init__(
        self,
        reader: NvmlReader,
        settings: ProbeSettings,
        *,
        publisher: AnnotationPublisher | None,
        metrics: ProbeMetrics | None = None,
        clock: Callable[[], datetime] = _utcnow,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.settings = settings
        self.publisher = publisher
        self.metrics = metrics or ProbeMetrics()
        self.clock = clock
        self.monotonic = monotonic
        self.last_published: GpuBudget | None = None
        self.last_published_at: float | None = None

    def tick(self) -> TickResult:
        """Read once, update metrics, publish if the rules say so."""
        result = self.reader.read(self.settings.node_name, self.clock())
        self.metrics.observe(result.budget, result.errors)
        if result.budget.error:
            log.warning(
                "Read NVML failed node=%s error=%r", self.settings.node_name, result.budget.error
            )
        if self.publisher is None:
            return TickResult(result.budget, False, None)
        now = self.monotonic()
        due, reason = publish_reason(
            self.last_published, self.last_published_at, result.budget, now, self.settings
        )
        if not due:
            return TickResult(result.budget, False, reason)
        try:
            self.publisher.publish(
                self.settings.node_name, GPU_BUDGET_ANNOTATION, result.budget.to_annotation()
            )
        except Exception as exc:
            self.metrics.publishes.labels(result="error").inc()
            self.metrics.errors.labels(reason="publish").inc()
            log.warning(
                "Published GPU budget failed node=%s reason=%r error=%s",
                self.settings.node_name,
                reason,
                exc,
            )
            return TickResult(result.budget, False, reason)
        self.last_published, self.last_published_at = result.budget, now
        self.metrics.publishes.labels(result="ok").inc()
        self.metrics.last_publish.set(time.time())
        log.info(
            "Published GPU budget node=%s gpus=%d reason=%r",
            self.settings.node_name,
            len(result.budget.gpus),
            reason,
        )
        return TickResult(result.budget, True, reason)

    def run(self, stop: threading.Event) -> None:
        """Tick every interval until `stop` is set (SIGTERM in the CLI); never dies of a read."""
        try:
            while not stop.is_set():
                started = self.monotonic()
                try:
                    self.tick()
                except Exception:  # a bug must not kill a DaemonSet pod into CrashLoopBackOff
                    self.metrics.errors.labels(reason="tick").inc()
                    log.exception("Probe tick failed node=%s", self.settings.node_name)
                elapsed = self.monotonic() - started
                stop.wait(max(0.0, self.settings.interval_s - elapsed))
        finally:
            self.reader.close()
