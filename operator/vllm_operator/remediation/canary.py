"""Whether a pool's new plan may roll out: the canary decision (pure, issue #27).

A change of an existing pool's engine arguments or image is tried on one pod first (a 1-replica
copy of the pool's workload; a group for a multi-node pool). The decision reads what that pod did
and answers one of:

- APPLY: no canary is needed (the pool is new, only its replica count changed, the plan is back
  to what runs, canaries are off, or no pod of the running plan is Ready, so there is nothing
  to protect) — the workload is applied as rendered;
- START: a new plan appeared: start the canary, keep the pool on the plan it runs;
- OBSERVE: the canary runs; keep watching (`requeue_after` says when to look again);
- PROMOTE: the canary stayed Ready for the observation window without a restart and its engine
  measured the KV capacity the plan predicted (within the PlanDeviation threshold): roll it out;
- ROLLBACK: the canary failed (crashed, restarted, not Ready within its startup budget, or KV
  capacity off the plan): remove it, keep the pool on its last good plan, say why;
- HOLD: this very plan failed before; nothing changed since, so it is not retried (a new spec or
  new planner inputs give a new plan hash, and a new canary).

Why the KV check: a plan that starts but holds fewer KV tokens than planned serves fewer
concurrent requests than promised (or preempts); the memory model's own error bound decides
(reconcile/observed.py PLAN_DEVIATION_THRESHOLD_PERCENT). Without a measurement (no Prometheus)
the canary is promoted on readiness alone, and the message says so.
"""

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

OBSERVING = "Observing"
FAILED = "Failed"
POLL_S = 30.0
"""Longest wait between two looks at a running canary: pod restarts wake no reconcile (the
operator watches workloads, not pods), so this bounds how late a failure is seen."""
KV_GRACE_S = 300.0
"""How long after the observation window a canary waits for its first KV measurement when
metrics are available (the evaluator measures at its own interval) before it is promoted
without one."""


class Verdict(StrEnum):
    APPLY = "Apply"
    START = "Start"
    OBSERVE = "Observe"
    PROMOTE = "Promote"
    ROLLBACK = "Rollback"
    HOLD = "Hold"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CanaryState(_Frozen):
    """What status.pools[].canary recorded last time."""

    hash: str
    phase: str
    started_at: datetime
    pod_uid: str | None = Field(
        default=None,
        description="The UID of the canary's serving pod when it was last seen (status.pools[]."
        "canary.podUid).",
    )


class CanaryPod(_Frozen):
    """The canary's pod (a group's leader) as the API server reports it."""

    name: str
    uid: str | None = None
    ready: bool
    ready_since: datetime | None = None
    restarts: int = Field(default=0, ge=0)
    restarted: str | None = Field(
        default=None,
        description="The pod whose containers restarted when it is not `name`: a multi-node "
        "canary's worker (the group is the unit: any of its pods failing fails it).",
    )


class KvMeasurement(_Frozen):
    """The canary's configuration as its engine measured it (status.observations)."""

    measured_tokens: int
    predicted_tokens: int | None
    deviation_percent: float | None


class CanaryInputs(_Frozen):
    enabled: bool
    observation_seconds: int = Field(ge=0)
    startup_budget_seconds: int = Field(ge=0)
    kv_threshold_percent: float = Field(gt=0)
    desired_hash: str
    live_hash: str | None = Field(description="The hash the pool's workload runs; None: new pool.")
    replicas: int | None = Field(description="The pool's desired replicas (None: autoscaled).")
    live_ready: int | None = Field(
        default=None,
        description="Ready pods (groups) of the plan the pool runs; None: unknown. 0: nothing "
        "serves, so a canary has nothing to protect and would only delay the change (a "
        "remediation fixing a crash-looping pool, an upgrade of a pool that never started).",
    )
    previous: CanaryState | None = None
    pod: CanaryPod | None = None
    failure: str | None = Field(default=None, description="The canary pod's crash diagnosis.")
    group: bool = Field(
        default=False,
        description="The canary is a LeaderWorkerSet group: LeaderWorkerSet recreates the whole "
        "group when one of its pods restarts (RecreateGroupOnPodRestart), so a leader replaced "
        "under the same name is a restart the pods themselves no longer show.",
    )
    kv: KvMeasurement | None = None
    metrics_available: bool = False
    now: datetime


class CanaryDecision(_Frozen):
    verdict: Verdict
    message: str = ""
    requeue_after: float | None = None


def canary_enabled(spec_enabled: bool | None, cluster_default: bool) -> bool:
    """Whether a pool's new plans get a canary: the spec's `rollout.canary.enabled` where it says,
    else the operator's cluster default (`vllm-operator run --canary/--no-canary`, chart value
    `canary.enabled`). A cluster turning canaries on covers every service that did not choose;
    a service that chose keeps its choice either way."""
    return cluster_default if spec_enabled is None else spec_enabled


def decide_canary(i: CanaryInputs) -> CanaryDecision:
    """The canary verdict for one pool (see the module docstring)."""
    if i.live_hash is None or i.live_hash == i.desired_hash:
        return CanaryDecision(verdict=Verdict.APPLY)
    if not i.enabled or i.replicas == 0:
        return CanaryDecision(verdict=Verdict.APPLY)
    prev = i.previous
    if prev is not None and prev.hash == i.desired_hash and prev.phase == FAILED:
        return CanaryDecision(verdict=Verdict.HOLD)
    if prev is None or prev.hash != i.desired_hash:
        if i.live_ready == 0:
            return CanaryDecision(verdict=Verdict.APPLY)
        return CanaryDecision(
            verdict=Verdict.START,
            message=_trying(i),
            requeue_after=POLL_S,
        )
    age = (i.now - prev.started_at).total_seconds()
    pod = i.pod
    if i.failure:
        return _rollback(i, f"the canary pod failed: {i.failure}")
    if pod is not None and pod.restarts > 0:
        which = pod.restarted or pod.name
        return _rollback(i, f"the canary pod {which} restarted {pod.restarts} time(s)")
    if i.group and pod is not None and prev.pod_uid and pod.uid and pod.uid != prev.pod_uid:
        # The group was recreated between two looks: the restarted pod is gone with its count.
        return _rollback(
            i,
            f"the canary group was recreated (its leader {pod.name} was replaced: "
            "LeaderWorkerSet recreates a group when one of its pods restarts or is lost)",
        )
    if pod is None or not pod.ready or pod.ready_since is None:
        if age > i.startup_budget_seconds:
            what = f"pod {pod.name}" if pod is not None else "no canary pod"
            return _rollback(
                i, f"{what} not Ready within its startup budget of {i.startup_budget_seconds}s"
            )
        left = i.startup_budget_seconds - age
        return CanaryDecision(
            verdict=Verdict.OBSERVE,
            # The same text as at the start: watching a canary that is not Ready yet writes no
            # status (a no-op reconcile writes nothing).
            message=_trying(i),
            requeue_after=max(1.0, min(POLL_S, left)),
        )
    ready_for = (i.now - pod.ready_since).total_seconds()
    if ready_for < i.observation_seconds:
        return CanaryDecision(
            verdict=Verdict.OBSERVE,
            # Stable while nothing changes, so watching a canary writes no status.
            message=f"Canary {pod.name} of plan {i.desired_hash} Ready since "
            f"{pod.ready_since.isoformat()}; promoted after {i.observation_seconds}s",
            # Looked at again within POLL_S: a restart must not wait for the window's end.
            requeue_after=max(1.0, min(POLL_S, i.observation_seconds - ready_for)),
        )
    kv = i.kv
    if kv is not None and kv.deviation_percent is not None:
        if abs(kv.deviation_percent) > i.kv_threshold_percent:
            return _rollback(
                i,
                f"the canary's engine measured {kv.measured_tokens} KV-cache tokens, the plan "
                f"predicted {kv.predicted_tokens} ({kv.deviation_percent:+.1f} %, beyond the "
                f"{i.kv_threshold_percent:g} % threshold)",
            )
        note = (
            f"KV capacity {kv.measured_tokens} tokens ({kv.deviation_percent:+.1f} % of the plan)"
        )
    elif i.metrics_available and ready_for < i.observation_seconds + KV_GRACE_S:
        return CanaryDecision(
            verdict=Verdict.OBSERVE,
            message=f"Canary {pod.name} of plan {i.desired_hash} Ready; waiting for its KV "
            "capacity to be measured",
            requeue_after=POLL_S,
        )
    else:
        note = "KV capacity not measured (no metrics)"
    return CanaryDecision(
        verdict=Verdict.PROMOTE,
        message=f"Promoted plan {i.desired_hash}: canary {pod.name} Ready for {ready_for:.0f}s "
        f"without restarts, {note}",
    )


def _trying(i: CanaryInputs) -> str:
    return (
        f"Trying plan {i.desired_hash} on one canary pod (pool runs {i.live_hash}); waiting for "
        "it to become Ready"
    )


def _rollback(i: CanaryInputs, why: str) -> CanaryDecision:
    return CanaryDecision(
        verdict=Verdict.ROLLBACK,
        message=f"Rolled back plan {i.desired_hash} to {i.live_hash}: {why}; the plan is not "
        "retried until the spec or the planner's inputs change",
    )
