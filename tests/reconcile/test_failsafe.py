"""Fail-safe reconcile (issue #12 part 2) and retries that survive A -> B -> A (issue #20 part 6).

Whatever fails while gathering, planning, rendering or applying one service ends as a condition
on that service with one Warning Event per distinct cause, and a RetryableError whose delay grows
5, 10, 20, ... up to 5 minutes; other services are unaffected. Time is a fake monotonic clock.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from vllm_operator.api.service import VLLMService
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import GatewayError, Kind, Obj, UnavailableError
from vllm_operator.reconcile import pools
from vllm_operator.reconcile.controller import Controller, RetryableError, backoff_delay

from .test_controller import NOW, OfflineHub, cluster, condition, example, status_of

NAME = "llama-8b-chat"
CAUSE = (
    'Service "llama-8b-chat" is invalid: spec.ports[0].name: Invalid value: "x": '
    "a DNS-1123 label must consist of lower case alphanumeric characters"
)


class RefusingGateway(FakeGateway):
    """Refuses every apply of the named objects with a 422, as the API server would."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: set[tuple[str, str]] = set()
        self.status_down = False

    def apply(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        if (obj["kind"], meta["name"]) in self.refused:
            raise GatewayError(
                f"apply {obj['kind']} {meta['namespace']}/{meta['name']} failed: "
                f"422 Unprocessable Entity: {CAUSE}",
                422,
            )
        return super().apply(obj)

    def apply_status(self, namespace: str, name: str, status: Obj) -> None:
        if self.status_down:
            raise GatewayError("apply status failed: 404 Not Found", 404)
        super().apply_status(namespace, name, status)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _setup(refuse: bool = True) -> tuple[RefusingGateway, Controller, Clock]:
    gw = RefusingGateway()
    gw.nodes = cluster().nodes
    gw.add(example("llama-3.1-8b-l4.yaml"))
    if refuse:
        gw.refused.add(("Service", NAME))
    clock = Clock()
    ctl = Controller(
        gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW, monotonic=clock
    )
    return gw, ctl, clock


def _warnings(gw: FakeGateway, name: str = NAME) -> list[str]:
    return [e.reason for e in gw.events if e.type == "Warning" and e.name == name]


def _fail(ctl: Controller, name: str = NAME) -> RetryableError:
    with pytest.raises(RetryableError) as info:
        ctl.reconcile("default", name)
    return info.value


def test_backoff_doubles_from_5s_and_caps_at_5_minutes() -> None:
    assert [backoff_delay(n) for n in range(1, 10)] == [5, 10, 20, 40, 80, 160, 300, 300, 300]
    assert backoff_delay(10_000) == 300


def test_refused_apply_is_a_condition_one_warning_and_a_growing_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gw, ctl, clock = _setup()
    with caplog.at_level(logging.DEBUG):
        err = _fail(ctl)
    assert err.delay == 5
    status = status_of(gw, NAME)
    degraded = condition(status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ApplyRejected")
    assert "apply Service default/llama-8b-chat failed: 422" in degraded["message"]
    assert CAUSE in degraded["message"]  # the API server's own words
    assert condition(status, "Progressing")["reason"] == "ApplyRejected"
    assert degraded["observedGeneration"] == 1
    assert "observedGeneration" not in status  # not acted on: retried until it catches up
    assert _warnings(gw) == ["ApplyRejected"]
    assert not [r for r in caplog.records if r.exc_info]  # a user error: no traceback
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and "service=default/llama-8b-chat reason=ApplyRejected" in warning[0]

    delays = [err.delay]
    for _ in range(8):
        writes = gw.total_writes()
        # Any trigger before the backoff passed is deferred without touching the API.
        early = _fail(ctl)
        assert 1 <= early.delay <= delays[-1]
        assert gw.total_writes() == writes
        clock.now += delays[-1]
        delays.append(_fail(ctl).delay)
    assert delays == [5, 10, 20, 40, 80, 160, 300, 300, 300]
    assert _warnings(gw) == ["ApplyRejected"]  # the same cause is announced once


def test_recovery_clears_the_condition_and_resets_the_backoff() -> None:
    gw, ctl, clock = _setup()
    for delay in (5, 10, 20):
        assert _fail(ctl).delay == delay
        clock.now += delay
    gw.refused.clear()
    ctl.reconcile("default", NAME)
    status = status_of(gw, NAME)
    assert condition(status, "Degraded")["reason"] == "AsExpected"
    assert condition(status, "Progressing")["reason"] == "RollingOut"
    assert status["observedGeneration"] == 1
    assert gw.get(Kind.SERVICE, "default", NAME) is not None
    # A later failure starts again at 5 s and is announced again.
    gw.refused.add(("Service", NAME))
    gw.objects.pop((Kind.SERVICE, "default", NAME))
    assert _fail(ctl).delay == 5
    assert _warnings(gw) == ["ApplyRejected", "ApplyRejected"]


def test_a_new_cause_is_announced_once_more() -> None:
    gw, ctl, clock = _setup()
    _fail(ctl)
    gw.refused = {("Deployment", f"{NAME}-l4")}
    gw.objects.pop((Kind.DEPLOYMENT, "default", f"{NAME}-l4"))
    clock.now += 5
    _fail(ctl)
    assert _warnings(gw) == ["ApplyRejected", "ApplyRejected"]
    assert (
        "Deployment default/llama-8b-chat-l4"
        in condition(status_of(gw, NAME), "Degraded")["message"]
    )


def test_planner_exception_is_a_reconcile_error_with_one_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(pools, "plan_pool", broken)
    gw, ctl, clock = _setup(refuse=False)
    with caplog.at_level(logging.DEBUG):
        assert _fail(ctl).delay == 5
        clock.now += 5
        assert _fail(ctl).delay == 10
    degraded = condition(status_of(gw, NAME), "Degraded")
    assert degraded["reason"] == "ReconcileError"
    assert degraded["message"] == "Internal error ZeroDivisionError: division by zero"
    assert gw.get(Kind.DEPLOYMENT, "default", f"{NAME}-l4") is None
    assert _warnings(gw) == ["ReconcileError"]
    # A bug's traceback is logged once (to be fixable), not every backoff period.
    assert len([r for r in caplog.records if r.exc_info]) == 1
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_validation_error_inside_render_names_its_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        return VLLMService.model_validate({"kind": "VLLMService"})

    monkeypatch.setattr(pools, "render_workload", broken)
    gw, ctl, _ = _setup(refuse=False)
    _fail(ctl)
    message = condition(status_of(gw, NAME), "Degraded")["message"]
    assert message.startswith("Internal error ValidationError in VLLMService: ")
    assert "\n" not in message and "spec" in message


def test_a_failing_service_leaves_others_alone() -> None:
    gw, ctl, _ = _setup()
    other = example("llama-3.1-8b-l4.yaml")
    other["metadata"]["name"] = "other"
    gw.add(other)
    _fail(ctl)
    _fail(ctl)  # deferred
    outcome = ctl.reconcile("default", "other")
    assert "Service/other" in outcome.applied
    assert condition(status_of(gw, "other"), "Degraded")["reason"] == "AsExpected"
    assert _warnings(gw, "other") == []
    ctl.reconcile("default", "other")  # never held back by the other's backoff


def test_unreachable_api_writes_nothing_and_retries_after_5s() -> None:
    gw, ctl, _ = _setup(refuse=False)
    gw.fail_next = [UnavailableError("apply failed: API server unreachable: refused", None)]
    err = _fail(ctl)
    assert err.delay == 5 and "unreachable" in str(err)
    assert "status" not in gw.writes and gw.events == []


def test_a_failing_status_write_never_masks_the_cause() -> None:
    gw, ctl, _ = _setup()
    gw.status_down = True
    err = _fail(ctl)
    assert CAUSE in str(err) and err.delay == 5


def test_a_fixed_spec_is_reconciled_at_once_despite_the_backoff() -> None:
    gw, ctl, _ = _setup()
    for _ in range(3):
        _fail(ctl)  # first attempt, then deferred
    gw.refused.clear()
    svc = gw.objects[(Kind.VLLM_SERVICE, "default", NAME)]
    svc["spec"]["workload"]["concurrency"] = 4
    svc["metadata"]["generation"] = 2
    ctl.reconcile("default", NAME)
    assert status_of(gw, NAME)["observedGeneration"] == 2


def test_deleting_a_failing_service_drops_its_backoff() -> None:
    gw, ctl, _ = _setup()
    _fail(ctl)
    gw.objects.pop((Kind.VLLM_SERVICE, "default", NAME))
    gw.objects.pop((Kind.DEPLOYMENT, "default", f"{NAME}-l4"))  # garbage-collected
    assert ctl.reconcile("default", NAME).applied == []
    gw.add(example("llama-3.1-8b-l4.yaml"))
    assert _fail(ctl).delay == 5  # a fresh start, not a deferral


def _set_spec(gw: FakeGateway, spec: dict[str, Any], generation: int) -> None:
    svc = gw.objects[(Kind.VLLM_SERVICE, "default", NAME)]
    svc["spec"] = copy.deepcopy(spec)
    svc["metadata"]["generation"] = generation


def test_a_b_a_failed_reconcile_is_retried_until_observed() -> None:
    """Issue #20 part 6. Kopf diffs against its last-handled configuration (A); after a failed B
    and a return to A it sees no diff (cause NOOP in kopf/_core/intents/causes.py) and calls no
    handler, so Kopf's retry of B's failure is lost. The controller's queue retries it."""
    gw, ctl, clock = _setup(refuse=False)
    ctl.reconcile("default", NAME)
    spec_a = copy.deepcopy(gw.objects[(Kind.VLLM_SERVICE, "default", NAME)]["spec"])
    assert status_of(gw, NAME)["observedGeneration"] == 1

    spec_b = copy.deepcopy(spec_a)
    spec_b["workload"]["concurrency"] = 4
    _set_spec(gw, spec_b, 2)
    gw.refused.add(("Deployment", f"{NAME}-l4"))
    _fail(ctl)  # Kopf's update handler for B
    _set_spec(gw, spec_a, 3)  # back to A: Kopf calls no handler
    gw.refused.clear()
    assert status_of(gw, NAME)["observedGeneration"] == 1

    # The key comes back from the queue after its backoff and reconciles whatever the spec is.
    assert ctl.queue.pending() == {("default", NAME): clock.now + 5}
    writes = gw.total_writes()
    assert ctl.run_due() == []
    assert gw.total_writes() == writes
    clock.now += 5
    assert ctl.run_due() == [("default", NAME)]
    status = status_of(gw, NAME)
    assert status["observedGeneration"] == 3
    assert condition(status, "Degraded")["reason"] == "AsExpected"
    # Success ends the chain: only the next remediation evaluation is left.
    assert ctl.queue.pending() == {("default", NAME): 1000.0 + 30}


def test_the_retry_keeps_backing_off_until_it_succeeds() -> None:
    gw, ctl, clock = _setup()
    # Evaluations rarely, so the key's next time on the queue is the reconcile's backoff.
    gw.objects[(Kind.VLLM_SERVICE, "default", NAME)]["spec"]["remediation"] = {
        "evaluationIntervalSeconds": 3600
    }
    _fail(ctl)
    for delay in (5, 10, 20):
        assert ctl.queue.pending() == {("default", NAME): clock.now + delay}
        clock.now += delay - 1
        assert ctl.run_due() == []  # not a second sooner
        clock.now += 1
        assert ctl.run_due() == [("default", NAME)]
    gw.refused.clear()
    clock.now += 40
    assert ctl.run_due() == [("default", NAME)]
    assert status_of(gw, NAME)["observedGeneration"] == 1
    assert ctl.queue.pending() == {("default", NAME): 1000.0 + 3600}
    assert _warnings(gw) == ["ApplyRejected"]


def test_triggers_during_the_backoff_do_not_retry_sooner() -> None:
    """Its Deployment's events, nodes, Kopf's resume: a failing service is attempted at most once
    per backoff period for the same generation, whatever triggers arrive."""
    gw, ctl, clock = _setup()
    _fail(ctl)
    writes = gw.total_writes()
    for _ in range(3):
        clock.now += 1
        ctl.enqueue(("default", NAME))
        assert ctl.run_due() == [("default", NAME)]  # taken, and deferred at once
    assert gw.total_writes() == writes
    assert ctl.queue.pending() == {("default", NAME): 1005.0}


def test_a_failing_evaluation_backs_off_apart_from_the_reconcile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pod logs forbidden (a restricted RBAC) must not warn every evaluation, and a successful
    reconcile (the spec changed) must not reset the evaluation's backoff."""
    calls: list[str] = []

    def forbidden(self: Any, body: Obj) -> bool:
        calls.append(body["metadata"]["name"])
        raise GatewayError(
            "read log of default/p failed: 403 Forbidden: pods/log is forbidden", 403
        )

    gw, ctl, clock = _setup(refuse=False)
    ctl.reconcile("default", NAME)
    monkeypatch.setattr(type(ctl.evaluator), "evaluate", forbidden)
    (interval,) = ctl.evaluations.tracked().values()
    clock.now += interval
    ctl.run_due()
    assert len(calls) == 1
    assert condition(status_of(gw, NAME), "Degraded")["reason"] == "ApplyRejected"
    clock.now += 1
    ctl.enqueue(("default", NAME))  # some trigger; the reconcile itself succeeds
    ctl.run_due()
    assert len(calls) == 1  # backing off 5 s
    clock.now += 4
    ctl.run_due()
    assert len(calls) == 2
    clock.now += 5
    ctl.run_due()
    assert len(calls) == 2  # now 10 s
    assert _warnings(gw) == ["ApplyRejected"]
