"""The remediation scheduler: one loop, each service at its own interval, failures contained."""

from __future__ import annotations

import logging

import pytest

from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.scheduler import EvaluationScheduler, RetryLater

from .test_controller import cluster, controller, example


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(
    fail: dict[tuple[str, str], Exception] | None = None,
) -> tuple[EvaluationScheduler, Clock, list[tuple[str, str]]]:
    clock = Clock()
    calls: list[tuple[str, str]] = []

    def evaluate(namespace: str, name: str) -> None:
        calls.append((namespace, name))
        if fail and (namespace, name) in fail:
            raise fail[(namespace, name)]

    return EvaluationScheduler(evaluate, clock=clock), clock, calls


def test_each_service_runs_at_its_own_interval_and_not_before() -> None:
    sched, clock, calls = make()
    sched.track(("ns", "fast"), 10)
    sched.track(("ns", "slow"), 30)
    assert sched.run_once() == []  # a new service is first due one interval on
    clock.now += 10
    assert sched.run_once() == [("ns", "fast")]
    clock.now += 10
    assert sched.run_once() == [("ns", "fast")]
    clock.now += 10
    assert sorted(sched.run_once()) == [("ns", "fast"), ("ns", "slow")]
    assert calls.count(("ns", "fast")) == 3 and calls.count(("ns", "slow")) == 1


def test_tracking_again_keeps_the_schedule_and_a_new_interval_restarts_it() -> None:
    sched, clock, _ = make()
    sched.track(("ns", "a"), 30)
    clock.now += 20
    sched.track(("ns", "a"), 30)  # every reconcile tracks again: no postponement
    clock.now += 10
    assert sched.run_once() == [("ns", "a")]
    sched.track(("ns", "a"), 60)
    clock.now += 30
    assert sched.run_once() == []
    clock.now += 30
    assert sched.run_once() == [("ns", "a")]


def test_forgotten_services_are_never_evaluated() -> None:
    sched, clock, calls = make()
    sched.track(("ns", "a"), 10)
    sched.forget(("ns", "a"))
    clock.now += 100
    assert sched.run_once() == [] and calls == []
    assert sched.tracked() == {}


def test_retry_later_uses_its_delay_and_errors_do_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sched, clock, calls = make(
        {("ns", "flaky"): RetryLater("API unavailable", delay=5), ("ns", "bug"): KeyError("x")}
    )
    for name in ("flaky", "bug", "ok"):
        sched.track(("ns", name), 30)
    clock.now += 30
    with caplog.at_level(logging.INFO):
        assert len(sched.run_once()) == 3
        clock.now += 5
        assert sched.run_once() == [("ns", "flaky")]  # retried after its delay, not its interval
        clock.now += 25
        sched.run_once()
    # The same error is logged with its traceback once, not every interval.
    failures = [r for r in caplog.records if r.getMessage().startswith("Failed to evaluate")]
    assert len(failures) == 1 and "service=ns/bug" in failures[0].getMessage()
    assert calls.count(("ns", "ok")) == 2 and calls.count(("ns", "bug")) == 2


def test_controller_tracks_services_at_their_interval_and_forgets_them() -> None:
    gw = cluster()
    obj = example("llama-3.1-8b-l4.yaml")
    obj["spec"]["remediation"] = {"evaluationIntervalSeconds": 45}
    gw.add(obj)
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    assert ctl.scheduler.tracked() == {("default", "llama-8b-chat"): 45}

    obj["spec"]["remediation"] = {"mode": "off"}  # observed all the same (Degraded), no step
    gw.add(obj)
    ctl.reconcile("default", "llama-8b-chat")
    assert ctl.scheduler.tracked() == {("default", "llama-8b-chat"): 30}

    obj["spec"]["remediation"] = {}
    gw.add(obj)
    ctl.reconcile("default", "llama-8b-chat")
    assert ctl.scheduler.tracked() == {("default", "llama-8b-chat"): 30}
    del gw.objects[(Kind.VLLM_SERVICE, "default", "llama-8b-chat")]
    ctl.evaluate("default", "llama-8b-chat")  # the scheduler found it gone
    assert ctl.scheduler.tracked() == {}
