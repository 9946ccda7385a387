"""One loop that runs run-time remediation for every known service when it is due.

Why not a Kopf timer per VLLMService: Kopf puts a finalizer on every object that has a timer or
daemon, so a VLLMService deleted while the operator is down (or uninstalled) stays Terminating
forever, and its namespace and the CRD with it. A timer also wakes once per service every few
seconds and reads the service from the API server only to find that its evaluation interval has
not passed. Here the controller tells the scheduler which services exist and how often each wants
evaluating (it learns both on every reconcile), and one loop wakes once a tick, picks the services
that are due and evaluates them; a service that is not due costs nothing.

The scheduler holds no Kubernetes state of its own: after a restart Kopf's resume handlers
reconcile every service, which tracks it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

Key = tuple[str, str]

# How often the loop looks for due services. Evaluation intervals are whole seconds (>= 5), so a
# 1 s tick keeps every service within a second of its interval.
TICK_SECONDS = 1.0


class RetryLater(Exception):
    """Raised by the evaluate callback for a transient failure: try this service after `delay`."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


@dataclass
class _Entry:
    interval: float
    next_at: float


class EvaluationScheduler:
    """Tracks (namespace, name) -> interval and evaluates the services that are due.

    `evaluate(namespace, name)` is called from the scheduler's thread, one service at a time; it
    may raise `RetryLater` (the service is tried again after its delay) or anything else (logged
    once per distinct error, tried again after its interval). A failing service never delays the
    others beyond its own evaluation.
    """

    def __init__(
        self,
        evaluate: Callable[[str, str], object],
        clock: Callable[[], float] = time.monotonic,
        tick: float = TICK_SECONDS,
        before: Callable[[list[Key]], object] | None = None,
        after: Callable[[], object] | None = None,
    ) -> None:
        self._evaluate = evaluate
        # Called with every key due in a tick before the first is evaluated, and once after the
        # last: the controller fetches the tick's Prometheus signals in one batch (#21).
        self._before = before
        self._after = after
        self._clock = clock
        self.tick = tick
        self._entries: dict[Key, _Entry] = {}
        self._later: dict[Key, tuple[float, Callable[[], object]]] = {}
        self._guard = threading.Lock()
        self._last_error: dict[Key, str] = {}

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
        """The service is gone, or its remediation is off."""
        with self._guard:
            self._entries.pop(key, None)
            self._last_error.pop(key, None)

    def call_later(self, key: Key, delay: float, action: Callable[[], object]) -> None:
        """Run `action` once, `delay` seconds from now (a deferred rollout's reconcile).

        One pending action per service: a later call replaces an earlier one, so a burst of
        edits leaves exactly one reconcile waiting.
        """
        with self._guard:
            self._later[key] = (self._clock() + delay, action)

    def pending(self) -> dict[Key, float]:
        """Services with a one-shot action waiting, and when it is due."""
        with self._guard:
            return {k: at for k, (at, _) in self._later.items()}

    def tracked(self) -> dict[Key, float]:
        """Every tracked service with its interval (for tests and debugging)."""
        with self._guard:
            return {k: e.interval for k, e in self._entries.items()}

    def due(self) -> list[Key]:
        """The services whose next evaluation time has come, oldest first."""
        now = self._clock()
        with self._guard:
            ready = [(e.next_at, k) for k, e in self._entries.items() if e.next_at <= now]
        return [k for _, k in sorted(ready)]

    def run_once(self) -> list[Key]:
        """Run due one-shot actions, then evaluate every due service once; returns the keys
        evaluated."""
        now = self._clock()
        with self._guard:
            ripe = [(k, a) for k, (at, a) in self._later.items() if at <= now]
            for k, _ in ripe:
                del self._later[k]
        for key, action in ripe:
            try:
                action()
            except Exception:  # the action's own error handling reports; never stop the loop
                log.exception("Failed to run deferred action service=%s/%s", *key)
        keys = self.due()
        if not keys:
            return keys
        self._hook("prepare", self._before, keys)
        try:
            for key in keys:
                delay = self._run(key)
                with self._guard:
                    entry = self._entries.get(key)
                    if entry is not None:  # forgotten while it ran: stays forgotten
                        entry.next_at = self._clock() + (entry.interval if delay is None else delay)
        finally:
            self._hook("finish", self._after)
        return keys

    def _hook(self, what: str, hook: Callable[..., object] | None, *args: object) -> None:
        """A failing hook only costs its optimisation: each evaluation still runs on its own."""
        if hook is None:
            return
        try:
            hook(*args)
        except Exception:
            log.exception("Failed to %s evaluations", what)

    def _run(self, key: Key) -> float | None:
        """Evaluate one service; the delay until its next try when it should come sooner/later."""
        try:
            self._evaluate(*key)
        except RetryLater as exc:
            log.info("Deferred evaluation service=%s/%s delay=%.0fs", *key, exc.delay)
            return exc.delay
        except Exception as exc:  # a bug must not stop remediation of every other service
            text = f"{type(exc).__name__}: {exc}"
            if self._last_error.get(key) != text:
                self._last_error[key] = text
                log.exception("Failed to evaluate service=%s/%s", *key)
            return None
        self._last_error.pop(key, None)
        return None

    def run(self, stop: threading.Event) -> None:
        """Loop until `stop` is set (the operator's cleanup sets it)."""
        log.info("Started remediation scheduler tick=%.1fs", self.tick)
        while not stop.wait(self.tick):
            self.run_once()
        log.info("Stopped remediation scheduler")


__all__ = ["EvaluationScheduler", "RetryLater", "TICK_SECONDS"]
