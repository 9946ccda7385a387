"""One keyed work queue: when a service reconciles is decided here, in one place (#32).

Modelled on client-go's workqueue as controller-runtime and cert-manager use it
(`k8s.io/client-go/util/workqueue`: queue.go, delaying_queue.go, default_rate_limiters.go;
cert-manager `pkg/controller/controller.go`):

- Keys are `(namespace, name)` of VLLMServices. Adding a key that is already waiting does nothing
  (dedup): a burst of 50 events for one service costs one reconcile, and a reconcile reads the
  world when it starts, so it sees everything the events saw.
- A key is handed to at most one worker at a time. A key added while a worker processes it is
  marked dirty and handed out again after that worker calls `done`: no trigger is lost, and two
  reconciles of one service never overlap (this replaces the per-key lock map and the waiting set
  the controller kept before).
- `add_after(key, delay)` makes a key ready later (settling, backoff, the next remediation
  evaluation); of several pending delays for one key the earliest wins, as in client-go.
- `add_rate_limited(key)` waits the controller's own backoff policy (5 s doubling to 5 min,
  `reconcile/failures.py`) by the key's failure count; `forget` resets the count.
- `shut_down` wakes every waiting worker; `get` then returns None and workers end after their
  current key.
- With workers running, one delay thread (`start_timer`, client-go's `waitingLoop`) moves due
  delayed keys to the queue, at most every `TIMER_BATCH_SECONDS`, and the workers wait for keys
  without a timeout. Before, every idle worker waited with a timeout until the next delayed key:
  each one woke for each key due, and at 1000 services (a remediation evaluation per service
  every 30 s, 33 keys a second) the wake-ups alone cost about 1 % of a core at idle.

Time is an injected monotonic clock, so tests drive delays without sleeping: `get(timeout=0)`
promotes what is due at the clock's current reading and never blocks.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from vllm_operator.metrics import operator_metrics as m
from vllm_operator.reconcile.failures import backoff_delay

log = logging.getLogger(__name__)

Key = tuple[str, str]

DEFAULT_WORKERS = 2
"""Two: one reconcile's API round trip overlaps another's planning, and the GIL serialises the
planning either way, so more threads add no CPU but more requests in flight. Those cost the API
server and every other client (issue #32's twelfth round, 1000 services on one 2-core machine:
8 workers slowed the client's 1000 creates to 67.8 s and converged in 193.7 s with 54 ms of
operator CPU per service; 2 workers: 13.7 s, 84.1 s and 23 ms, and a restart of 12.3 CPU-s
instead of 19.0). Raise `--workers` where the API server is far away (high latency per write)
and the operator has CPU to spare."""

TIMER_BATCH_SECONDS = 0.5
"""The delay thread moves due keys to the queue at most this often, so keys due close together
are handed out in one batch (one wake-up of the thread, and of as many workers as the batch
needs) instead of one wake-up each. A delayed key is therefore up to this much late, never early:
every delay the controller asks for (settle windows, backoff, evaluations, placement rechecks,
canary windows) is seconds or more."""


class WorkQueue:
    """A deduplicating, delaying, rate-limited FIFO of keys. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # getters wait here for a ready key
        self._timer_cond = threading.Condition(lock)  # the delay thread waits here
        self._timer: threading.Thread | None = None
        self._queue: deque[Key] = deque()
        self._dirty: set[Key] = set()  # waiting to be handed out (in _queue, or after done)
        self._processing: set[Key] = set()
        # Delayed adds: a heap of (ready_at, seq, key); `_ready_at` holds each key's earliest, so
        # superseded heap entries are skipped when popped.
        self._waiting: list[tuple[float, int, Key]] = []
        self._ready_at: dict[Key, float] = {}
        self._seq = itertools.count()
        self._failures: dict[Key, int] = {}
        self._shutting_down = False
        self._wakeups = 0  # getters' returns from waiting (`wakeups`)

    # -- adding ----------------------------------------------------------------------------------

    def add(self, key: Key) -> None:
        """Make `key` ready now (no-op when it already waits; after `done` when it is processed)."""
        with self._cond:
            self._add(key)

    def _add(self, key: Key) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return  # handed out again by `done`
        self._queue.append(key)
        self._cond.notify()

    def add_after(self, key: Key, delay: float) -> None:
        """Make `key` ready `delay` seconds from now (at once when `delay` <= 0)."""
        with self._cond:
            if self._shutting_down:
                return
            if delay <= 0:
                self._add(key)
                return
            at = self._clock() + delay
            current = self._ready_at.get(key)
            if current is not None and current <= at:
                return
            head = self._waiting[0][0] if self._waiting else None
            self._ready_at[key] = at
            heapq.heappush(self._waiting, (at, next(self._seq), key))
            if self._timer is None:
                self._cond.notify()  # a waiting getter may need to wake sooner
            elif head is None or at < head:
                self._timer_cond.notify()  # the delay thread waits for a later key

    def add_rate_limited(self, key: Key) -> float:
        """Add `key` after its backoff (5 s, 10 s, ... 5 min by its failures since `forget`)."""
        with self._cond:
            attempts = self._failures.get(key, 0) + 1
            self._failures[key] = attempts
        delay = backoff_delay(attempts)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Key) -> None:
        """The key succeeded (or is gone): its next failure starts the backoff afresh."""
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: Key) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def discard(self, key: Key) -> None:
        """Drop every pending add of `key` (a deleted service). One being processed finishes."""
        with self._cond:
            self._failures.pop(key, None)
            self._ready_at.pop(key, None)
            if key in self._dirty:
                self._dirty.discard(key)
                if key not in self._processing:
                    self._queue.remove(key)

    # -- taking ----------------------------------------------------------------------------------

    def _promote(self) -> float | None:
        """Move due delayed keys to the queue (oldest first); seconds until the next is due."""
        now = self._clock()
        while self._waiting:
            at, _, key = self._waiting[0]
            if self._ready_at.get(key) != at:
                heapq.heappop(self._waiting)  # superseded by an earlier add_after, or discarded
                continue
            if at > now:
                return at - now
            heapq.heappop(self._waiting)
            del self._ready_at[key]
            self._add(key)
        return None

    def get(self, timeout: float | None = None) -> Key | None:
        """The next ready key, now owned by the caller until `done(key)`.

        Blocks until one is ready, for at most `timeout` seconds (None: until shutdown; 0: never
        blocks). None when the queue shut down or the timeout passed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._shutting_down:
                    return None
                next_due = self._promote()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                # With the delay thread running, it promotes due keys and notifies: no getter
                # waits for a delayed key itself (see TIMER_BATCH_SECONDS).
                wait = None if self._timer is not None else next_due
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)
                self._wakeups += 1

    def done(self, key: Key) -> None:
        """The caller finished `key`; if it was added meanwhile, it is ready again now."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty and not self._shutting_down:
                self._queue.append(key)
                self._cond.notify()

    # -- inspecting and stopping -----------------------------------------------------------------

    def pending(self) -> dict[Key, float]:
        """Delayed keys and when each is due (clock seconds), for tests and debugging."""
        with self._cond:
            return dict(self._ready_at)

    def ready(self) -> list[Key]:
        """Keys ready now, in hand-out order (not promoting delayed ones)."""
        with self._cond:
            return list(self._queue)

    def idle(self) -> bool:
        """Nothing ready and nothing being processed (delayed adds may wait)."""
        with self._cond:
            return not self._queue and not self._processing and not self._dirty

    def in_flight(self) -> int:
        """Keys a worker holds now (taken with `get`, not yet `done`)."""
        with self._cond:
            return len(self._processing)

    def wakeups(self) -> int:
        """How often a blocked `get` woke up (a key, a timeout or a spurious notify): what an
        idle operator's queue costs, for tests and debugging."""
        with self._cond:
            return self._wakeups

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def start_timer(self) -> None:
        """Start the delay thread (once): from now on it alone waits for delayed keys."""
        with self._cond:
            if self._timer is not None or self._shutting_down:
                return
            self._timer = threading.Thread(
                target=self._run_timer, name="workqueue-delays", daemon=True
            )
            self._timer.start()

    def _run_timer(self) -> None:
        with self._cond:
            while not self._shutting_down:
                next_due = self._promote()  # each promoted key notifies one getter
                wait = None if next_due is None else max(next_due, TIMER_BATCH_SECONDS)
                self._timer_cond.wait(wait)

    def shut_down(self) -> None:
        """Stop handing out keys; every blocked `get` returns None and the delay thread ends."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()
            self._timer_cond.notify_all()
            timer = self._timer
        if timer is not None and timer is not threading.current_thread():
            timer.join(5.0)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down


class Workers:
    """N threads taking keys from one queue and processing each with `process`.

    `process(key)` must handle its own failures (the controller turns them into conditions and
    a delayed add); an exception that escapes it is a bug: logged once per distinct error and the
    key added rate-limited, so a bug never stops the other keys or spins on one.
    """

    def __init__(
        self,
        queue: WorkQueue,
        process: Callable[[Key], object],
        workers: int = DEFAULT_WORKERS,
        name: str = "reconcile",
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.queue = queue
        self._process = process
        self._count = workers
        self._name = name
        self._threads: list[threading.Thread] = []
        self._errors: set[str] = set()

    def start(self, gate: threading.Event | None = None) -> None:
        """Start the threads; each takes keys only once `gate` is set (the watch caches synced),
        so no reconcile reads a half-filled cache."""
        # Scraped, not pushed: the gauges read the queue when /metrics is served, so they cost
        # nothing per key and cannot drift from the queue's own state.
        m.WORKQUEUE_DEPTH.set_function(lambda: float(len(self.queue)))
        m.WORKQUEUE_IN_FLIGHT.set_function(lambda: float(self.queue.in_flight()))
        self.queue.start_timer()
        for i in range(self._count):
            thread = threading.Thread(
                target=self._run, args=(gate,), name=f"{self._name}-{i}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        log.info("Started workers count=%d", self._count)

    def _run(self, gate: threading.Event | None) -> None:
        if gate is not None:
            while not gate.wait(0.5):
                if self.queue.shutting_down:
                    return
        while (key := self.queue.get()) is not None:
            self.process_one(key)

    def process_one(self, key: Key) -> None:
        """Process a key taken with `get` and release it (also for tests, on their own thread)."""
        try:
            self._process(key)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if text not in self._errors and len(self._errors) < 1000:
                self._errors.add(text)
                log.exception("Failed to process service=%s/%s", *key)
            self.queue.add_rate_limited(key)
        finally:
            self.queue.done(key)

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the queue down and wait for the current keys to finish."""
        self.queue.shut_down()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        log.info("Stopped workers count=%d", self._count)


def drain(queue: WorkQueue, process: Callable[[Key], object], limit: int = 100_000) -> list[Key]:
    """Process every key ready at the clock's current reading on the calling thread; the keys
    processed, in order. For tests and one-shot runs: deterministic, never blocks."""
    processed: list[Key] = []
    while len(processed) < limit and (key := queue.get(timeout=0)) is not None:
        try:
            process(key)
        finally:
            queue.done(key)
        processed.append(key)
    return processed


__all__ = ["DEFAULT_WORKERS", "Key", "WorkQueue", "Workers", "drain"]
