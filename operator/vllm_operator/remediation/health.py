"""Whether a pool runs clean: its crashes (every diagnosis class) and a stalled startup.

Why apart from the policy: the policy decides *steps* and only acts on memory failures, and a
step makes the crash that caused it old news (the next evaluation sees nothing new). Degraded must
say what the pods do, not what the operator last did: it is True for every crash class and for a
startup that outlived its budget, and stays True until the pool runs clean again (every desired
replica Ready, none crash-looping, no termination since the finding) and the finding's
termination has left the window. The evaluator keeps the finding in status.pools[].failure; the
reconcile folds it into the Degraded condition.

Why the window holds a finding: a termination within the window is what makes a crash new when
there is no finding, so clearing the finding while it is still inside made the next evaluation
find it again: a Ready pod that restarted once flipped Degraded on every evaluation for
`windowSeconds`, with an Event and a status write each time (#32). With the same rule for
setting and for clearing, Degraded is a function of what the pods report and the clock.

Pure: the clock is the `now` argument and every input is a value.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from vllm_operator.api.reasons import Reason
from vllm_operator.api.status import PoolFailure
from vllm_operator.remediation.diagnosis import Diagnosis, FailureClass
from vllm_operator.remediation.observations import PodObservation, PoolObservation

DEGRADED_REASONS: Mapping[FailureClass, Reason] = {
    FailureClass.STARTUP_KV_INSUFFICIENT: Reason.STARTUP_KV_INSUFFICIENT,
    FailureClass.STARTUP_FREE_MEMORY: Reason.STARTUP_FREE_MEMORY,
    FailureClass.STARTUP_CUDA_OOM: Reason.STARTUP_OOM,
    FailureClass.RUNTIME_CUDA_OOM: Reason.RUNTIME_OOM,
    FailureClass.HOST_OOM: Reason.HOST_OOM,
    FailureClass.UNRECOGNIZED_ARGUMENTS: Reason.UNRECOGNIZED_ARGUMENTS,
    FailureClass.OTHER: Reason.CRASHING,
    FailureClass.UNKNOWN: Reason.CRASHING,
}
"""The Degraded reason of each diagnosis class (docs/operations.md, "Diagnosis")."""

# Startup budget (docs/operations.md, "Status"): how long a pod may run without becoming Ready.
LOAD_GIB_PER_S = 0.125
"""Weights read from the model volume into GPU memory, GiB/s. 125 MiB/s is the baseline
throughput of an AWS gp3 volume (and of most network block storage defaults): a pod on faster
local NVMe or a warm page cache loads several times faster, so this is a slow-but-healthy disk,
not a typical one. A download from the Hub (no cache volume) is slower still and not budgeted."""
PROFILE_S = 60
"""The profiling run (one max_num_batched_tokens forward pass, sampler warm-up, KV allocation);
vLLM logs it at 5-30 s on one GPU."""
GRAPH_CAPTURE_S = 120
"""torch.compile (V1, first start without a compile cache) plus CUDA-graph capture of every batch
size; vLLM logs 20-90 s and 5-30 s. Not budgeted with enforce_eager."""
STARTUP_FLOOR_S = 300
"""No pod is called stalled earlier: image pulls that finished late, Python imports and the API
server's own start take a while even for a tiny model."""
PROBE_SHARE = 0.8
"""The stall is reported within this share of the rendered startup probe's budget, so it always
comes before the kubelet restarts the pod (rendering.workload.startup_budget_seconds)."""


@dataclass(frozen=True)
class StartupBudget:
    """How long a pod may start, and the formula's terms for the message."""

    limit: timedelta
    explanation: str


def startup_budget(
    weights_gib_total: float, *, enforce_eager: bool = False, probe_budget_s: int | None = None
) -> StartupBudget:
    """How long a pod of the plan may run without becoming Ready before it is called stalled.

    weights over LOAD_GIB_PER_S + PROFILE_S + GRAPH_CAPTURE_S (none with enforce_eager), at least
    STARTUP_FLOOR_S, and below PROBE_SHARE of the startup probe's budget when one is given: the
    probe (300 s + 20 s per GiB, which also allows a download) fires later, so the stall is
    reported while the pod still has time, instead of the pod silently restarting.
    """
    load = weights_gib_total / LOAD_GIB_PER_S
    terms = [f"{weights_gib_total:.1f} GiB / {LOAD_GIB_PER_S:g} GiB/s", f"{PROFILE_S}s profiling"]
    seconds = load + PROFILE_S
    if not enforce_eager:
        seconds += GRAPH_CAPTURE_S
        terms.append(f"{GRAPH_CAPTURE_S}s compile and graph capture")
    explanation = " + ".join(terms)
    if seconds < STARTUP_FLOOR_S:
        seconds = float(STARTUP_FLOOR_S)
        explanation += f", floor {STARTUP_FLOOR_S}s"
    if probe_budget_s is not None and seconds > PROBE_SHARE * probe_budget_s:
        seconds = PROBE_SHARE * probe_budget_s
        explanation += f", capped at {PROBE_SHARE:g} x the {probe_budget_s}s startup probe"
    return StartupBudget(timedelta(seconds=math.ceil(seconds)), explanation)


def _describe(pool: str, pod: PodObservation, d: Diagnosis | None) -> str:
    term = pod.last_termination
    parts = [f"pool {pool}: pod {pod.name}"]
    if d is not None:
        phase = f" at {d.phase}" if d.phase else ""
        parts.append(f" {d.failure_class}{phase}")
    facts = [f"restarts={pod.restart_count}"]
    if term is not None:
        facts.append(f"exit {term.exit_code} {term.reason}")
    if pod.crash_looping:
        facts.append("CrashLoopBackOff")
    parts.append(" (" + ", ".join(facts) + ")")
    if d is not None:
        numbers = d.numbers.model_dump(exclude_none=True, exclude={"exit_code"})
        if numbers:
            parts.append(": " + " ".join(f"{k}={v}" for k, v in numbers.items()))
        if d.cause:
            parts.append(f"; cause {d.cause}")
        if d.evidence:
            parts.append(f"; {d.evidence}")
    return "".join(parts)


def _crash_failure(
    pool: str, pod: PodObservation, previous: PoolFailure | None, now: datetime
) -> PoolFailure:
    term = pod.last_termination
    d = term.diagnosis if term is not None else None
    cls = d.failure_class if d is not None else FailureClass.UNKNOWN
    return PoolFailure(
        reason=DEGRADED_REASONS[cls].value,
        failure_class=cls.value,
        pod=pod.name,
        message=_describe(pool, pod, d),
        since=previous.since if previous is not None else now,
        last_termination=term.finished_at if term is not None else None,
    )


def _is_new_crash(
    pod: PodObservation, previous: PoolFailure | None, now: datetime, window: timedelta
) -> bool:
    term = pod.last_termination
    if term is None:
        # CrashLoopBackOff with the termination already gone from the status: still a crash.
        return pod.crash_looping and previous is None
    if term.finished_at > now:
        return False
    if previous is not None and previous.last_termination is not None:
        return term.finished_at > previous.last_termination
    return pod.crash_looping or now - term.finished_at <= window


def runs_clean(pool: PoolObservation) -> bool:
    """Every desired replica Ready and none crash-looping (terminations are checked apart)."""
    if pool.replicas == 0:
        return True
    ready = [p for p in pool.pods if p.ready and not p.crash_looping]
    return len(ready) >= pool.replicas and len(ready) == len(pool.pods)


def stalled(pod: PodObservation, budget: timedelta, now: datetime) -> bool:
    """Running, never restarted, not Ready, for longer than the startup budget."""
    return (
        not pod.ready
        and pod.restart_count == 0
        and pod.running_since is not None
        and now - pod.running_since > budget
    )


def pool_failure(
    pool: PoolObservation,
    previous: PoolFailure | None,
    now: datetime,
    *,
    window: timedelta,
    budget: StartupBudget | None,
) -> PoolFailure | None:
    """The pool's failure after this observation: a new crash, a stall, the previous one, or None.

    A crash is new when it finished after the previous finding's termination (without one: within
    `window`, or the pod is in CrashLoopBackOff); the newest new crash wins. A stall is reported
    for the longest-running stalled pod. Otherwise the previous finding stands until the pool runs
    clean and its termination is older than `window` (a crash still inside it would be new again
    without the finding); a stall also ends when no pod is stalled any more (the pod became Ready
    or restarted).
    """
    crashes = [p for p in pool.pods if _is_new_crash(p, previous, now, window)]
    if crashes:
        newest = max(
            crashes,
            key=lambda p: (p.last_termination.finished_at if p.last_termination else now, p.name),
        )
        return _crash_failure(pool.pool, newest, previous, now)
    if budget is not None:
        slow = [p for p in pool.pods if stalled(p, budget.limit, now)]
        if slow:
            pod = min(slow, key=lambda p: (p.running_since or now, p.name))
            running = now - (pod.running_since or now)
            return PoolFailure(
                reason=Reason.STARTUP_STALLED.value,
                pod=pod.name,
                message=(
                    f"pool {pool.pool}: pod {pod.name} has run {int(running.total_seconds())}s "
                    f"without becoming Ready or crashing (startup budget "
                    f"{int(budget.limit.total_seconds())}s = {budget.explanation})"
                ),
                since=previous.since
                if previous is not None and previous.reason == Reason.STARTUP_STALLED
                else now,
                last_termination=previous.last_termination if previous is not None else None,
            )
    if previous is None or previous.reason == Reason.STARTUP_STALLED:
        return None
    recent = previous.last_termination is not None and now - previous.last_termination <= window
    if runs_clean(pool) and not recent:
        return None
    return previous


__all__ = [
    "DEGRADED_REASONS",
    "GRAPH_CAPTURE_S",
    "LOAD_GIB_PER_S",
    "PROBE_SHARE",
    "PROFILE_S",
    "STARTUP_FLOOR_S",
    "StartupBudget",
    "pool_failure",
    "runs_clean",
    "stalled",
    "startup_budget",
]
