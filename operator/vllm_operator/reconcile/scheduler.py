"""When each service's next run-time remediation evaluation is due (a timetable, no thread).

Evaluations are delayed adds on the controller's one work queue (reconcile/queue.py, #32): after
each run of a service the controller asks the queue to hand the service back at its next due
time, and a worker evaluates it then, holding the service's key, so an evaluation never overlaps
a reconcile of the same service. This module only remembers each service's interval and next due
time.

Why not a Kopf timer per VLLMService: Kopf puts a finalizer on every object that has a timer or
daemon, so a VLLMService deleted while the operator is down (or uninstalled) stays Terminating
forever, and its namespace and the CRD with it.

The timetable holds no Kubernetes state of its own: after a restart Kopf's resume handlers
enqueue every service, whose reconcile tracks it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

Key = tuple[str, str]


@dataclass
class _Entry:
    interval: float
    next_at: float


class EvaluationTimes:
    """(namespace, name) -> evaluation interval and next due time (monotonic seconds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[Key, _Entry] = {}
        self._guard = threading.Lock()

    def track(self, key: Key, interval: float) -> None:
        """Evaluate `key` every `interval` seconds; a new service is first due one interval on.

        Re-tracking with the same interval keeps its schedule (reconciles happen often); a changed
        interval takes effect from now.
        """
        with self._guard:
            entry = self._entries.get(key)
            if entry is not None and entry.interval == interval:
                return
            self._entries[key] = _Entry(interval=interval, next_at=self._clock() + interval)

    def forget(self, key: Key) -> None:
        """The service is gone."""
        with self._guard:
            self._entries.pop(key, None)

    def ran(self, key: Key, delay: float | None = None) -> None:
        """An evaluation of `key` finished: next due one interval on, or after `delay` (a failed
        evaluation's backoff). A service forgotten while it ran stays forgotten."""
        with self._guard:
            entry = self._entries.get(key)
            if entry is not None:
                entry.next_at = self._clock() + (entry.interval if delay is None else delay)

    def next_at(self, key: Key) -> float | None:
        with self._guard:
            entry = self._entries.get(key)
            return None if entry is None else entry.next_at

    def is_due(self, key: Key) -> bool:
        at = self.next_at(key)
        return at is not None and at <= self._clock()

    def due(self) -> list[Key]:
        """Every service whose evaluation is due now, oldest first (one metrics batch)."""
        now = self._clock()
        with self._guard:
            ready = [(e.next_at, k) for k, e in self._entries.items() if e.next_at <= now]
        return [k for _, k in sorted(ready)]

    def tracked(self) -> dict[Key, float]:
        """Every tracked service with its interval (for tests and debugging)."""
        with self._guard:
            return {k: e.interval for k, e in self._entries.items()}


class ReconcileTimes:
    """(namespace, name) -> when a reconcile of it is wanted (monotonic seconds); a key without
    an entry needs none. The earliest of all wishes counts (a trigger: now; settling, backoff, a
    placement recheck, a canary being watched: later). Shared across workers: one lock.
    Moved out of reconcile/controller.py (#32)."""

    def __init__(self) -> None:
        self._at: dict[Key, float] = {}
        self._guard = threading.Lock()

    def want(self, key: Key, at: float) -> None:
        """A reconcile of `key` is wanted at `at` (the earliest of all wishes counts)."""
        with self._guard:
            current = self._at.get(key)
            if current is None or at < current:
                self._at[key] = at

    def at(self, key: Key) -> float | None:
        """When a reconcile of `key` is next wanted, None if none is."""
        with self._guard:
            return self._at.get(key)

    def take(self, key: Key) -> None:
        """A reconcile of `key` starts: a wish from now on wants another run."""
        with self._guard:
            self._at.pop(key, None)

    forget = take


__all__ = ["EvaluationTimes", "ReconcileTimes"]
