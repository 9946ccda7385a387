"""The canary decision (remediation/canary.py, issue #27): when a new plan may roll out."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vllm_operator.remediation.canary import (
    FAILED,
    KV_GRACE_S,
    OBSERVING,
    CanaryInputs,
    CanaryPod,
    CanaryState,
    KvMeasurement,
    Verdict,
    canary_enabled,
    decide_canary,
)

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def inputs(**changes: Any) -> CanaryInputs:
    base: dict[str, Any] = {
        "enabled": True,
        "observation_seconds": 120,
        "startup_budget_seconds": 600,
        "kv_threshold_percent": 5.0,
        "desired_hash": "new",
        "live_hash": "old",
        "replicas": 3,
        "previous": CanaryState(hash="new", phase=OBSERVING, started_at=T0),
        "pod": CanaryPod(name="p-canary-1", ready=True, ready_since=T0 + timedelta(seconds=60)),
        "now": T0 + timedelta(seconds=300),
    }
    base.update(changes)
    return CanaryInputs(**base)


def kv(deviation: float) -> KvMeasurement:
    return KvMeasurement(
        measured_tokens=int(10_000 * (1 + deviation / 100)),
        predicted_tokens=10_000,
        deviation_percent=deviation,
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"live_hash": None},  # first creation
        {"live_hash": "new"},  # replica-only change, or the plan already runs
        {"enabled": False},
        {"replicas": 0},
        # nothing of the running plan serves: nothing to protect
        {"live_ready": 0, "previous": None, "pod": None},
    ],
)
def test_no_canary_is_needed(changes: dict[str, Any]) -> None:
    assert decide_canary(inputs(**changes)).verdict is Verdict.APPLY


def test_a_new_plan_starts_a_canary() -> None:
    decision = decide_canary(inputs(previous=None, pod=None))
    assert decision.verdict is Verdict.START
    assert decision.requeue_after is not None


def test_a_serving_pool_gets_a_canary_and_an_unknown_readiness_too() -> None:
    for ready in (1, None):
        fresh = inputs(live_ready=ready, previous=None, pod=None)
        assert decide_canary(fresh).verdict is Verdict.START


def test_a_plan_changed_while_its_canary_ran_starts_over() -> None:
    previous = CanaryState(hash="older", phase=OBSERVING, started_at=T0)
    assert decide_canary(inputs(previous=previous)).verdict is Verdict.START


def test_a_failed_plan_is_not_retried_until_it_changes() -> None:
    failed = CanaryState(hash="new", phase=FAILED, started_at=T0)
    assert decide_canary(inputs(previous=failed)).verdict is Verdict.HOLD
    # A new spec or new planner inputs give a new hash: a new canary.
    assert decide_canary(inputs(previous=failed, desired_hash="newer")).verdict is Verdict.START


def test_a_ready_canary_is_watched_for_the_whole_window() -> None:
    decision = decide_canary(inputs(now=T0 + timedelta(seconds=100), kv=kv(1.0)))
    assert decision.verdict is Verdict.OBSERVE
    assert decision.requeue_after == pytest.approx(30.0)  # at most POLL_S: restarts are seen
    late = decide_canary(inputs(now=T0 + timedelta(seconds=170), kv=kv(1.0)))
    assert late.requeue_after == pytest.approx(10.0)  # the window's end


def test_a_canary_that_held_the_window_with_the_planned_kv_is_promoted() -> None:
    decision = decide_canary(inputs(kv=kv(-2.0), metrics_available=True))
    assert decision.verdict is Verdict.PROMOTE
    assert "-2.0 %" in decision.message


def test_a_canary_whose_kv_capacity_misses_the_plan_is_rolled_back() -> None:
    decision = decide_canary(inputs(kv=kv(-12.5), metrics_available=True))
    assert decision.verdict is Verdict.ROLLBACK
    assert "-12.5 %" in decision.message and "10000" in decision.message


def test_a_restarted_canary_is_rolled_back_even_when_ready_again() -> None:
    pod = CanaryPod(name="p-canary-1", ready=True, ready_since=T0, restarts=1)
    decision = decide_canary(inputs(pod=pod, kv=kv(0.0)))
    assert decision.verdict is Verdict.ROLLBACK
    assert "restarted 1 time" in decision.message


@pytest.mark.parametrize("group", [True, False])
def test_a_canary_group_recreated_under_the_same_name_is_rolled_back(group: bool) -> None:
    """LeaderWorkerSet recreates a group whose worker restarted (RecreateGroupOnPodRestart):
    the new leader, same name, new UID, shows no restart. For a group that is the failure; a
    Deployment's pod is never replaced under its own name, so there the UID decides nothing."""
    seen = CanaryState(hash="new", phase=OBSERVING, started_at=T0, pod_uid="uid-1")
    leader = CanaryPod(name="p-canary-0", uid="uid-2", ready=False)
    decision = decide_canary(inputs(previous=seen, pod=leader, group=group))
    if group:
        assert decision.verdict is Verdict.ROLLBACK
        assert "group was recreated" in decision.message and "p-canary-0" in decision.message
    else:
        assert decision.verdict is Verdict.OBSERVE
    same = CanaryPod(name="p-canary-0", uid="uid-1", ready=False)
    assert decide_canary(inputs(previous=seen, pod=same, group=group)).verdict is Verdict.OBSERVE
    first = CanaryState(hash="new", phase=OBSERVING, started_at=T0)  # no pod seen before
    assert decide_canary(inputs(previous=first, pod=leader, group=group)).verdict is Verdict.OBSERVE


def test_a_crashing_canary_is_rolled_back_with_its_diagnosis() -> None:
    pod = CanaryPod(name="p-canary-1", ready=False)
    decision = decide_canary(
        inputs(pod=pod, failure="p-canary-1: StartupOOM: CUDA out of memory (tried 2.00 GiB)")
    )
    assert decision.verdict is Verdict.ROLLBACK
    assert "CUDA out of memory" in decision.message


def test_a_canary_not_ready_within_its_startup_budget_is_rolled_back() -> None:
    pod = CanaryPod(name="p-canary-1", ready=False)
    waiting = decide_canary(inputs(pod=pod, now=T0 + timedelta(seconds=599)))
    assert waiting.verdict is Verdict.OBSERVE
    late = decide_canary(inputs(pod=pod, now=T0 + timedelta(seconds=601)))
    assert late.verdict is Verdict.ROLLBACK
    assert "startup budget of 600s" in late.message


def test_with_metrics_a_canary_waits_for_its_kv_measurement_then_goes_without() -> None:
    waiting = decide_canary(inputs(metrics_available=True))
    assert waiting.verdict is Verdict.OBSERVE
    late = T0 + timedelta(seconds=60 + 120 + KV_GRACE_S + 1)
    decision = decide_canary(inputs(metrics_available=True, now=late))
    assert decision.verdict is Verdict.PROMOTE
    assert "not measured" in decision.message


def test_without_metrics_readiness_alone_promotes() -> None:
    decision = decide_canary(inputs(metrics_available=False))
    assert decision.verdict is Verdict.PROMOTE
    assert "not measured" in decision.message


@pytest.mark.parametrize(
    ("spec_enabled", "cluster_default", "expected"),
    [
        (None, True, True),  # the spec did not choose: the cluster default (on unless set)
        (None, False, False),
        (False, True, False),  # a spec that turns it off keeps it off
        (True, False, True),  # a spec that turns it on keeps it on
        (True, True, True),
        (False, False, False),
    ],
)
def test_the_spec_chooses_else_the_cluster_default(
    spec_enabled: bool | None, cluster_default: bool, expected: bool
) -> None:
    assert canary_enabled(spec_enabled, cluster_default) is expected
