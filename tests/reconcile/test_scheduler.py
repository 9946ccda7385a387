"""Remediation evaluations: each service at its own interval, as delayed adds on the work queue
(#32; no scheduler thread)."""

from __future__ import annotations

from typing import Any

from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.scheduler import EvaluationTimes

from .test_controller import NOW, OfflineHub, cluster, controller, example


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[EvaluationTimes, Clock]:
    clock = Clock()
    return EvaluationTimes(clock), clock


def test_each_service_is_due_at_its_own_interval_and_not_before() -> None:
    times, clock = make()
    times.track(("ns", "fast"), 10)
    times.track(("ns", "slow"), 30)
    assert times.due() == []  # a new service is first due one interval on
    clock.now += 10
    assert times.due() == [("ns", "fast")]
    times.ran(("ns", "fast"))
    clock.now += 10
    assert times.due() == [("ns", "fast")]
    times.ran(("ns", "fast"))
    clock.now += 10
    assert sorted(times.due()) == [("ns", "fast"), ("ns", "slow")]
    assert times.is_due(("ns", "slow")) and not times.is_due(("ns", "other"))


def test_tracking_again_keeps_the_schedule_and_a_new_interval_restarts_it() -> None:
    times, clock = make()
    times.track(("ns", "a"), 30)
    clock.now += 20
    times.track(("ns", "a"), 30)  # every reconcile tracks again: no postponement
    clock.now += 10
    assert times.due() == [("ns", "a")]
    times.track(("ns", "a"), 60)
    clock.now += 30
    assert times.due() == []
    clock.now += 30
    assert times.due() == [("ns", "a")]


def test_a_failed_evaluation_is_due_after_its_backoff_not_its_interval() -> None:
    times, clock = make()
    times.track(("ns", "a"), 30)
    clock.now += 30
    times.ran(("ns", "a"), delay=5)
    assert times.next_at(("ns", "a")) == clock.now + 5


def test_forgotten_services_are_never_due_even_if_they_were_running() -> None:
    times, clock = make()
    times.track(("ns", "a"), 10)
    times.forget(("ns", "a"))
    times.ran(("ns", "a"))  # an evaluation that ended after the service was deleted
    clock.now += 100
    assert times.due() == [] and times.tracked() == {} and times.next_at(("ns", "a")) is None


def test_evaluations_are_delayed_adds_on_the_queue_each_at_its_interval() -> None:
    gw = cluster()
    mono = Clock()
    ctl = Controller(
        gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW, monotonic=mono
    )
    evaluated: list[tuple[str, str]] = []
    evaluate = ctl.evaluator.evaluate

    def counted(body: dict[str, Any]) -> bool:
        evaluated.append((body["metadata"]["namespace"], body["metadata"]["name"]))
        return evaluate(body)

    ctl.evaluator.evaluate = counted  # type: ignore[method-assign]
    for name, interval in (("fast", 10), ("slow", 30)):
        obj = example("llama-3.1-8b-l4.yaml")
        obj["metadata"]["name"] = name
        obj["spec"]["remediation"] = {"evaluationIntervalSeconds": interval}
        gw.add(obj)
        ctl.enqueue(("default", name))
    assert sorted(ctl.run_due()) == [("default", "fast"), ("default", "slow")]
    assert evaluated == []
    assert ctl.queue.pending() == {("default", "fast"): 1010.0, ("default", "slow"): 1030.0}
    for _ in range(3):
        mono.now += 10
        ctl.run_due()
    assert evaluated.count(("default", "fast")) == 3
    assert evaluated.count(("default", "slow")) == 1


def test_controller_tracks_services_at_their_interval_and_forgets_them() -> None:
    gw = cluster()
    obj = example("llama-3.1-8b-l4.yaml")
    obj["spec"]["remediation"] = {"evaluationIntervalSeconds": 45}
    gw.add(obj)
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    assert ctl.evaluations.tracked() == {("default", "llama-8b-chat"): 45}

    obj["spec"]["remediation"] = {"mode": "off"}  # observed all the same (Degraded), no step
    gw.add(obj)
    ctl.reconcile("default", "llama-8b-chat")
    assert ctl.evaluations.tracked() == {("default", "llama-8b-chat"): 30}

    obj["spec"]["remediation"] = {}
    gw.add(obj)
    ctl.reconcile("default", "llama-8b-chat")
    assert ctl.evaluations.tracked() == {("default", "llama-8b-chat"): 30}
    del gw.objects[(Kind.VLLM_SERVICE, "default", "llama-8b-chat")]
    ctl.evaluate("default", "llama-8b-chat")  # its evaluation found it gone
    assert ctl.evaluations.tracked() == {}
