"""The keyed work queue (#32): ordering, dedup, one worker per key, delayed and rate-limited adds,
shutdown. Time is a fake clock; nothing sleeps (the threaded tests wait on conditions)."""

from __future__ import annotations

import logging
import threading

import pytest

from vllm_operator.metrics import operator_metrics as m
from vllm_operator.reconcile.queue import Workers, WorkQueue, drain

A, B, C = ("ns", "a"), ("ns", "b"), ("ns", "c")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[WorkQueue, Clock]:
    clock = Clock()
    return WorkQueue(clock=clock), clock


def take(queue: WorkQueue) -> list[tuple[str, str]]:
    """Every key ready now, each marked done at once."""
    return drain(queue, lambda _: None)


def test_keys_come_out_in_the_order_they_were_added_each_once() -> None:
    queue, _ = make()
    for key in (B, A, B, C, A, B):
        queue.add(key)
    assert len(queue) == 3
    assert take(queue) == [B, A, C]
    assert queue.get(timeout=0) is None


def test_a_key_is_handed_to_one_worker_at_a_time_and_again_after_done() -> None:
    queue, _ = make()
    queue.add(A)
    assert queue.get(timeout=0) == A
    queue.add(A)  # a trigger while A is processed
    queue.add(A)
    queue.add(B)
    assert queue.get(timeout=0) == B  # A is not handed out twice
    assert queue.get(timeout=0) is None
    queue.done(B)
    queue.done(A)
    assert queue.get(timeout=0) == A  # processed again, once, after the first run
    queue.done(A)
    assert queue.get(timeout=0) is None


def test_a_delayed_add_is_ready_when_due_not_before() -> None:
    queue, clock = make()
    queue.add_after(A, 5)
    queue.add_after(B, 2)
    assert queue.pending() == {A: 105.0, B: 102.0}
    assert take(queue) == []
    clock.now += 2
    assert take(queue) == [B]
    clock.now += 3
    assert take(queue) == [A]
    assert queue.pending() == {}


def test_of_several_delays_for_one_key_the_earliest_wins() -> None:
    queue, clock = make()
    queue.add_after(A, 30)
    queue.add_after(A, 3)
    queue.add_after(A, 10)
    assert queue.pending() == {A: 103.0}
    clock.now += 3
    assert take(queue) == [A]
    clock.now += 30
    assert take(queue) == []  # the superseded 30 s entry does not come back


def test_a_delayed_key_already_waiting_is_not_duplicated() -> None:
    queue, clock = make()
    queue.add(A)
    queue.add_after(A, 1)
    clock.now += 1
    assert take(queue) == [A]
    queue.add_after(A, 0)  # no delay: ready at once
    assert take(queue) == [A]


def test_delayed_keys_due_together_come_out_oldest_first() -> None:
    queue, clock = make()
    queue.add_after(C, 3)
    queue.add_after(A, 1)
    queue.add_after(B, 2)
    queue.add(("ns", "now"))
    clock.now += 10
    assert take(queue) == [("ns", "now"), A, B, C]


def test_rate_limited_adds_back_off_5_10_20_until_forgotten() -> None:
    queue, clock = make()
    delays = []
    for _ in range(3):
        delays.append(queue.add_rate_limited(A))
        clock.now += delays[-1] - 0.5
        assert take(queue) == []
        clock.now += 0.5
        assert take(queue) == [A]
    assert delays == [5.0, 10.0, 20.0]
    assert queue.num_requeues(A) == 3
    queue.forget(A)
    assert queue.num_requeues(A) == 0
    assert queue.add_rate_limited(A) == 5.0


def test_rate_limiting_is_per_key_and_capped_at_5_minutes() -> None:
    queue, _ = make()
    for _ in range(20):
        delay = queue.add_rate_limited(A)
    assert delay == 300.0
    assert queue.add_rate_limited(B) == 5.0


def test_discard_drops_ready_and_delayed_adds() -> None:
    queue, clock = make()
    queue.add(A)
    queue.add_after(B, 1)
    queue.add_rate_limited(C)
    for key in (A, B, C):
        queue.discard(key)
    clock.now += 1000
    assert take(queue) == []
    assert queue.num_requeues(C) == 0


def test_shutdown_wakes_blocked_getters_and_refuses_new_keys() -> None:
    queue, _ = make()
    got: list[object] = []
    waiting = [threading.Thread(target=lambda: got.append(queue.get())) for _ in range(3)]
    for thread in waiting:
        thread.start()
    queue.shut_down()
    for thread in waiting:
        thread.join(10)
    assert got == [None, None, None]
    queue.add(A)
    queue.add_after(B, 0)
    assert queue.get(timeout=0) is None


def test_a_blocked_getter_wakes_for_a_key_added_from_another_thread() -> None:
    queue = WorkQueue()
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(queue.get(timeout=30)))
    thread.start()
    queue.add(A)
    thread.join(30)
    assert got == [A]


def test_workers_never_process_one_key_concurrently_and_lose_no_add() -> None:
    """Eight workers, three keys added 300 times from four threads while being processed: each
    key's runs never overlap, and every add made after a run started is followed by a run."""
    queue = WorkQueue()
    active: set[tuple[str, str]] = set()
    overlaps: list[tuple[str, str]] = []
    guard = threading.Lock()
    # Per key: how many adds happened, and how many adds the latest finished run had seen.
    adds: dict[tuple[str, str], int] = {A: 0, B: 0, C: 0}
    seen: dict[tuple[str, str], int] = {A: 0, B: 0, C: 0}
    settled = threading.Condition(guard)

    def process(key: tuple[str, str]) -> None:
        with guard:
            if key in active:
                overlaps.append(key)
            active.add(key)
            upto = adds[key]  # a run sees every add made before it started
        with guard:
            active.discard(key)
            seen[key] = max(seen[key], upto)
            settled.notify_all()

    workers = Workers(queue, process, workers=8)
    workers.start()

    def hammer(keys: tuple[tuple[str, str], ...]) -> None:
        for _ in range(300):
            for key in keys:
                with guard:
                    adds[key] += 1
                queue.add(key)

    threads = [threading.Thread(target=hammer, args=((A, B, C),)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    with settled:
        assert settled.wait_for(lambda: seen == adds, timeout=60), (seen, adds)
    workers.stop()
    assert overlaps == []


def test_running_workers_take_delayed_keys_when_due_without_waking_for_each() -> None:
    """With workers running, the delay thread alone waits for delayed keys: 40 keys due within
    0.3 s are each processed once, none before its time, and the eight idle workers wake about
    once per key handed out. Before the delay thread every idle worker waited with a timeout for
    the next due key, so each of the eight woke for each key (hundreds of wake-ups here; about
    1 % of a core at 1000 services' evaluations)."""
    queue = WorkQueue()
    due: dict[tuple[str, str], float] = {}
    late: dict[tuple[str, str], float] = {}
    guard = threading.Condition()

    def process(key: tuple[str, str]) -> None:
        with guard:
            late[key] = queue._clock() - due[key]
            guard.notify_all()

    workers = Workers(queue, process, workers=8)
    workers.start()
    keys = [("ns", f"k{i}") for i in range(40)]
    for i, key in enumerate(keys):
        delay = 0.05 + 0.25 * i / len(keys)
        with guard:
            due[key] = queue._clock() + delay
        queue.add_after(key, delay)
    with guard:
        assert guard.wait_for(lambda: len(late) == len(keys), timeout=30), late
    workers.stop()
    assert all(seconds >= 0 for seconds in late.values()), late
    assert queue.wakeups() <= len(keys) + 8 * 2, queue.wakeups()


def test_shut_down_ends_the_delay_thread() -> None:
    queue = WorkQueue()
    workers = Workers(queue, lambda _: None, workers=2)
    workers.start()
    queue.add_after(A, 3600)
    timer = queue._timer
    assert timer is not None and timer.is_alive()
    workers.stop()
    assert not timer.is_alive()


def test_workers_wait_for_the_gate_before_taking_keys() -> None:
    queue = WorkQueue()
    gate = threading.Event()
    processed: list[tuple[str, str]] = []
    done = threading.Event()

    def process(key: tuple[str, str]) -> None:
        processed.append(key)
        done.set()

    workers = Workers(queue, process, workers=2)
    workers.start(gate)
    queue.add(A)
    assert not done.wait(0.2)  # bounded: proves nothing ran before the gate
    assert processed == []
    gate.set()
    assert done.wait(30)
    workers.stop()
    assert processed == [A]


def test_an_escaping_exception_is_logged_once_and_the_key_rate_limited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue, clock = make()

    def process(key: tuple[str, str]) -> None:
        raise KeyError("bug")

    workers = Workers(queue, process, workers=1)
    queue.add(A)
    with caplog.at_level(logging.ERROR):
        for delay in (5.0, 10.0, 20.0):
            key = queue.get(timeout=0)
            assert key == A
            workers.process_one(key)
            assert queue.pending() == {A: clock.now + delay}
            clock.now += delay
    assert [r.getMessage() for r in caplog.records] == ["Failed to process service=ns/a"]


def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError):
        Workers(WorkQueue(), lambda _: None, workers=0)


def test_the_queue_gauges_show_a_key_being_processed_until_it_is_done() -> None:
    """`vllm_operator_workqueue_{depth,in_flight}` read the queue when scraped: e2e waits on
    both at 0 to know every write so far is counted (a reconcile writes status, then Events)."""

    def sample(name: str) -> float:
        value = m.REGISTRY.get_sample_value(name)
        assert value is not None
        return value

    queue = WorkQueue()
    inside, release = threading.Event(), threading.Event()

    def process(key: tuple[str, str]) -> None:
        inside.set()
        assert release.wait(30)

    workers = Workers(queue, process, workers=1)
    workers.start()
    queue.add(A)
    assert inside.wait(30)
    queue.add(B)
    assert (
        sample("vllm_operator_workqueue_in_flight"),
        sample("vllm_operator_workqueue_depth"),
    ) == (
        1.0,
        1.0,
    )
    release.set()
    deadline = threading.Event()
    for _ in range(300):  # bounded wait on the condition, not a sleep
        if queue.idle():
            break
        deadline.wait(0.1)
    assert (
        sample("vllm_operator_workqueue_in_flight"),
        sample("vllm_operator_workqueue_depth"),
    ) == (
        0.0,
        0.0,
    )
    workers.stop()
