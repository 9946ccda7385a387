"""Degraded follows every crash class and a stalled startup, through the controller (#13 items 4-5).

Pods carry the container status a kubelet writes after a crash; the previous container's log is a
real vLLM log from tests/remediation/fixtures/logs (each file names its public source).
"""

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.remediation.logfixtures import LOGS, load
from vllm_operator.api.reasons import Reason
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.metrics.signals import ServiceMetrics
from vllm_operator.reconcile.evaluate import DRAIN_TIMEOUT
from vllm_operator.remediation import PodMetrics, Sample
from vllm_operator.remediation.health import PROBE_SHARE, startup_budget
from vllm_operator.rendering.names import ANNOTATION_DRAINING_SINCE, pool_selector_labels
from vllm_operator.rendering.workload import startup_budget_seconds

from .test_controller import condition, status_of
from .test_evaluate import T0, Clock, setup

NS, NAME, POOL = "default", "llama-8b-chat", "NVIDIA-L4"
POD = "llama-8b-chat-l4-abc"
INTERVAL = timedelta(seconds=60)  # beyond the default evaluation interval


def put_pod(
    gw: FakeGateway,
    *,
    ready: bool,
    restarts: int = 0,
    terminated: dict[str, Any] | None = None,
    waiting: str | None = None,
    running_since: datetime | None = None,
    log: str | None = None,
    name: str = POD,
    annotations: dict[str, str] | None = None,
) -> None:
    """(Re)write the pool's pod as the kubelet would report it."""
    gw.objects.pop((Kind.POD, NS, name), None)
    state: dict[str, Any] = (
        {"waiting": {"reason": waiting}}
        if waiting
        else {"running": {"startedAt": (running_since or T0 - timedelta(hours=1)).isoformat()}}
    )
    status: dict[str, Any] = {
        "name": "vllm",
        "ready": ready,
        "restartCount": restarts,
        "state": state,
    }
    if terminated is not None:
        status["lastState"] = {"terminated": terminated}
    gw.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": pool_selector_labels(NAME, POOL),
                "annotations": annotations or {},
            },
            "status": {"containerStatuses": [status]},
        }
    )
    if log is not None:
        gw.logs[(NS, name)] = log


def termination(reason: str, exit_code: int, finished: datetime) -> dict[str, Any]:
    return {
        "reason": reason,
        "exitCode": exit_code,
        "startedAt": (finished - timedelta(minutes=5)).isoformat(),
        "finishedAt": finished.isoformat(),
    }


def fixture_log(name: str) -> str:
    return load(LOGS / f"{name}.log").log


def degraded(gw: FakeGateway) -> dict[str, Any]:
    return condition(status_of(gw, NAME), "Degraded")


CASES = [
    # (id, log fixture or None, terminated reason, exit code, crash-looping, reason, in message)
    (
        "startup-kv-insufficient",
        "v0.8-kv-needed-1m-context",
        "Error",
        1,
        True,
        Reason.STARTUP_KV_INSUFFICIENT,
        ["startup-kv-insufficient", "max_model_len=1048576", "kv_needed_gib=24.0"],
    ),
    (
        "startup-free-memory",
        "v0.1x-free-memory-timestamps",
        "Error",
        1,
        True,
        Reason.STARTUP_FREE_MEMORY,
        ["startup-free-memory", "free_gib=19.77", "requested_gib=19.84"],
    ),
    (
        "startup-cuda-oom",
        "v0.2x-startup-cuda-oom-engine-failed-to-start",
        "Error",
        1,
        True,
        Reason.STARTUP_OOM,
        ["startup-cuda-oom", "tried_to_allocate_gib=1.19"],
    ),
    (
        "runtime-cuda-oom",
        "v0.2x-runtime-cuda-oom-output-handler",
        "Error",
        1,
        False,
        Reason.RUNTIME_OOM,
        ["runtime-cuda-oom", "gpu_capacity_gib=23.56"],
    ),
    (
        "host-oom-killed",
        None,
        "OOMKilled",
        137,
        True,
        Reason.HOST_OOM,
        ["host-oom", "exit 137 OOMKilled"],
    ),
    (
        "host-oom-exit-137-error",
        None,
        "Error",
        137,
        False,
        Reason.HOST_OOM,
        ["host-oom", "exit 137 Error", "SIGKILL"],
    ),
    (
        "unrecognized-arguments",
        "v0.15-unrecognized-arguments",
        "Error",
        2,
        True,
        Reason.UNRECOGNIZED_ARGUMENTS,
        ["unrecognized-arguments"],
    ),
    (
        "other-nccl",
        "v0.5-nccl-unhandled-system-error",
        "Error",
        1,
        True,
        Reason.CRASHING,
        ["other", "cause nccl", "CrashLoopBackOff"],
    ),
    (
        "unknown-crash-loop",
        None,
        "Completed",
        0,
        False,
        Reason.CRASHING,
        ["unknown", "exit 0 Completed"],
    ),
]


@pytest.mark.parametrize(
    ("log", "reason", "code", "looping", "expected", "words"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_each_crash_class_is_degraded_with_its_reason_until_the_pool_runs_clean(
    log: str | None,
    reason: str,
    code: int,
    looping: bool,
    expected: Reason,
    words: list[str],
) -> None:
    gw, ctl, clock = setup()
    assert degraded(gw)["status"] == "False"
    crashed = T0 - timedelta(seconds=30)
    put_pod(
        gw,
        ready=False,
        restarts=2,
        terminated=termination(reason, code, crashed),
        waiting="CrashLoopBackOff" if looping else None,
        log=fixture_log(log) if log else None,
    )
    ctl.evaluate(NS, NAME)
    cond = degraded(gw)
    assert (cond["status"], cond["reason"]) == ("True", expected.value), cond
    for word in [f"pool {POOL}", f"pod {POD}", *words]:
        assert word in cond["message"], (word, cond["message"])
    assert any(e.reason == expected.value and e.type == "Warning" for e in gw.events)
    (pool,) = status_of(gw, NAME)["pools"]
    assert pool["failure"]["reason"] == expected.value

    # Whatever remediation did, the pod has not come back: Degraded stays, and a reconcile
    # triggered by anything else keeps it too.
    clock.now += INTERVAL
    put_pod(gw, ready=False, restarts=2, terminated=termination(reason, code, crashed))
    ctl.evaluate(NS, NAME)
    ctl.reconcile(NS, NAME)
    assert degraded(gw)["reason"] == expected.value

    # Ready again, no termination since: the pool runs clean, but the crash is still inside
    # the window (300 s by default), where it would count as new again: Degraded stays (#32).
    clock.now += INTERVAL
    put_pod(gw, ready=True, restarts=2, terminated=termination(reason, code, crashed))
    ctl.evaluate(NS, NAME)
    assert degraded(gw)["reason"] == expected.value
    # Once the crash has left the window, Degraded clears.
    clock.now = crashed + timedelta(seconds=301)
    ctl.evaluate(NS, NAME)
    cond = degraded(gw)
    assert (cond["status"], cond["reason"]) == ("False", Reason.AS_EXPECTED.value), cond
    assert "failure" not in status_of(gw, NAME)["pools"][0]


def test_a_new_crash_of_another_class_replaces_the_finding() -> None:
    gw, ctl, clock = setup()
    first = T0 - timedelta(seconds=30)
    put_pod(gw, ready=False, restarts=1, terminated=termination("OOMKilled", 137, first))
    ctl.evaluate(NS, NAME)
    assert degraded(gw)["reason"] == Reason.HOST_OOM
    since = status_of(gw, NAME)["pools"][0]["failure"]["since"]
    clock.now += INTERVAL
    put_pod(
        gw,
        ready=False,
        restarts=2,
        terminated=termination("Error", 1, clock.now - timedelta(seconds=5)),
        waiting="CrashLoopBackOff",
        log=fixture_log("v0.5-nccl-unhandled-system-error"),
    )
    ctl.evaluate(NS, NAME)
    assert degraded(gw)["reason"] == Reason.CRASHING
    # The pool has been failing since the first crash.
    assert status_of(gw, NAME)["pools"][0]["failure"]["since"] == since


def test_an_old_restart_of_a_healthy_pod_is_not_degraded() -> None:
    gw, ctl, _ = setup()
    put_pod(
        gw,
        ready=True,
        restarts=1,
        terminated=termination("Error", 1, T0 - timedelta(days=2)),
    )
    ctl.evaluate(NS, NAME)
    assert degraded(gw)["status"] == "False"


def test_startup_stalled_past_the_budget_then_cleared_when_ready() -> None:
    gw, ctl, clock = setup()
    plan = status_of(gw, NAME)["pools"][0]["plan"]
    weights = plan["memory"]["weightsGiB"] * plan["engineArgs"]["tensor_parallel_size"]
    budget = startup_budget(weights, probe_budget_s=startup_budget_seconds(weights)).limit
    started = T0 - budget + timedelta(seconds=30)
    put_pod(gw, ready=False, running_since=started)
    ctl.evaluate(NS, NAME)
    assert degraded(gw)["status"] == "False"  # still within its budget

    clock.now += INTERVAL  # now 30 s past the budget
    ctl.evaluate(NS, NAME)
    cond = degraded(gw)
    assert (cond["status"], cond["reason"]) == ("True", Reason.STARTUP_STALLED.value), cond
    assert f"pod {POD}" in cond["message"]
    assert f"startup budget {int(budget.total_seconds())}s" in cond["message"]
    assert "GiB / 0.125 GiB/s" in cond["message"]
    assert any(e.reason == Reason.STARTUP_STALLED for e in gw.events)

    clock.now += INTERVAL
    put_pod(gw, ready=True, running_since=started)
    ctl.evaluate(NS, NAME)
    assert degraded(gw)["status"] == "False"


@pytest.mark.parametrize("weights_gib", [0.5, 16.0, 140.0, 400.0, 1300.0])
def test_stall_is_reported_before_the_startup_probe_restarts_the_pod(weights_gib: float) -> None:
    probe = startup_budget_seconds(weights_gib)
    budget = startup_budget(weights_gib, probe_budget_s=probe).limit.total_seconds()
    assert budget <= PROBE_SHARE * probe + 1 < probe
    assert budget >= min(300, PROBE_SHARE * probe)
    eager = startup_budget(weights_gib, enforce_eager=True, probe_budget_s=probe)
    assert eager.limit.total_seconds() <= budget


class RunningRequests:
    """A metrics source whose only news is each pod's running-request count now."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.running: dict[str, float] = {}

    def observe(
        self, *, namespace: str, pods: Any, vllm_version: str, window_s: int, now: datetime
    ) -> ServiceMetrics:
        return ServiceMetrics(
            available=True,
            pods={
                p: PodMetrics(
                    complete=False,
                    requests_running=[Sample(t=self.clock.now, v=self.running[p])],
                )
                for p in pods
                if p in self.running
            },
        )


def test_drain_waits_for_running_requests_then_evicts() -> None:
    gw, ctl, clock = setup()
    source = RunningRequests(clock)
    ctl.evaluator.metrics = source
    drained = {ANNOTATION_DRAINING_SINCE: T0.isoformat()}
    put_pod(gw, ready=True, annotations=drained)
    source.running[POD] = 3
    clock.now += timedelta(seconds=30)  # one evaluation interval (the default)
    ctl.evaluate(NS, NAME)
    assert gw.evictions == []  # still serving its last requests, within the timeout

    source.running[POD] = 0
    clock.now += timedelta(seconds=28)  # the next evaluation, before DRAIN_TIMEOUT
    assert clock.now - T0 < DRAIN_TIMEOUT
    ctl.evaluate(NS, NAME)
    assert gw.evictions == [(NS, POD)]
    assert any("no running requests" in e.message for e in gw.events)


def test_drain_timeout_bounds_the_wait() -> None:
    gw, ctl, clock = setup()
    source = RunningRequests(clock)
    ctl.evaluator.metrics = source
    put_pod(gw, ready=True, annotations={ANNOTATION_DRAINING_SINCE: T0.isoformat()})
    source.running[POD] = 5
    clock.now += DRAIN_TIMEOUT - timedelta(seconds=1)
    ctl.evaluate(NS, NAME)
    assert gw.evictions == []
    clock.now += INTERVAL
    ctl.evaluate(NS, NAME)
    assert gw.evictions == [(NS, POD)]
    assert any("drain timeout" in e.message for e in gw.events)


@pytest.mark.parametrize("mode", ["off", "recommend"])
def test_degraded_reports_crashes_whatever_the_remediation_mode(mode: str) -> None:
    """Off and recommend change nothing, but Degraded still tells the truth about the pods."""
    gw, ctl, _ = setup(mode)
    args = gw.objects[(Kind.DEPLOYMENT, NS, "llama-8b-chat-l4")]["spec"]["template"]
    put_pod(
        gw,
        ready=False,
        restarts=1,
        terminated=termination("OOMKilled", 137, T0 - timedelta(seconds=30)),
        waiting="CrashLoopBackOff",
    )
    ctl.evaluate(NS, NAME)
    cond = degraded(gw)
    assert (cond["status"], cond["reason"]) == ("True", Reason.HOST_OOM.value), cond
    assert status_of(gw, NAME).get("overrides", []) == []
    assert gw.objects[(Kind.DEPLOYMENT, NS, "llama-8b-chat-l4")]["spec"]["template"] == args


def test_a_restart_of_a_ready_pod_inside_the_window_does_not_flap_degraded() -> None:
    """#32 fault: a Ready pod whose container restarted inside `windowSeconds` made Degraded
    flip True/False on successive evaluations (the finding was cleared because the pool ran
    clean, and the next evaluation, with no finding to compare against, took the same
    termination for a new crash), with a Warning Event and a status write each time. Degraded
    is True while the restart is inside the window and False once it has left it: one transition
    each way, one Event for the crash, no write while nothing changes."""
    gw, ctl, clock = setup()
    window = timedelta(seconds=300)  # the default windowSeconds
    crashed = T0 - timedelta(seconds=20)
    put_pod(gw, ready=True, restarts=1, terminated=termination("Error", 1, crashed))
    seen: list[str] = []
    writes: list[int] = []
    step = timedelta(seconds=30)  # the default evaluation interval
    while clock.now <= crashed + window + 4 * step:
        before = gw.writes["status"]
        ctl.evaluate(NS, NAME)
        writes.append(gw.writes["status"] - before)
        seen.append(degraded(gw)["status"])
        clock.now += step
    # True from the first evaluation while the restart is inside the window, then False.
    inside = [s for s in seen if s == "True"]
    assert seen == ["True"] * len(inside) + ["False"] * (len(seen) - len(inside)), seen
    assert 0 < len(inside) < len(seen)
    warnings = [e for e in gw.events if e.type == "Warning"]
    assert [e.reason for e in warnings] == [Reason.CRASHING.value], warnings
    # Status is written at the two transitions only (the evaluation's finding and the
    # reconcile's condition), never while nothing changes.
    assert [i for i, n in enumerate(writes) if n] == [0, len(inside)], writes
    # The last "True" evaluation was inside the window, the first "False" one outside.
    last_true = T0 + step * (len(inside) - 1)
    assert last_true - crashed <= window < last_true + step - crashed
