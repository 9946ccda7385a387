"""The remediation policy: observations, spec, overrides and history in; one bounded Decision out.

Classification per pool, most urgent first (domain.md §6; crashes are read by the one classifier,
remediation.diagnosis; classification.py, steps.py and guards.py hold the parts):

1. StartupOOM - a container failed during load/profiling/graph capture: re-plan with the capacity
   vLLM printed (max_model_len down to what fits, never below p99ContextTokens), lower
   max_num_batched_tokens when activations left no room, lower gpu_memory_utilization only when
   another process (startup-free-memory) or CUDA-graph capture is the cause.
2. BurstOOM - CUDA OOM in a forward pass after serving (runtime-cuda-oom): lower
   max_num_batched_tokens, then max_num_seqs, by stepFraction, down to their floors.
   HostOOM - OOMKilled (host RAM): raise the container's memory limit by a bounded step up to
   what the pool's nodes can allocate (TargetUnmet there); never a GPU argument. Kept like a
   StartupOOM override (a smaller limit would be killed again); a new plan above it clears it.
3. KVPressure - KV usage >= threshold for the whole window with a backed-up queue or preemptions:
   scale out when maxReplicas allows, else turn prefix caching off when its hit rate is below the
   floor (PrefixCacheWaste), else lower max_num_seqs down to the spec's concurrency.
4. ChronicFragmentation - a pod's GPU memory above the plan's reservation by memoryCreepFraction
   for the whole window: drain and evict that one pod.

Guards: a cooldown per pool, maxActionsPerHour per service, one step per pool per evaluation,
floors (a step that would go below the spec's concurrency or context becomes TargetUnmet instead),
metric-driven steps only with complete, fresh metrics, and stepwise restoration after a quiet
period that doubles each time the same override had to come back.

Pure: the clock is the `now` argument and every input is a value.
"""

from collections.abc import Mapping, Sequence
from datetime import datetime

from vllm_operator.api.spec import RemediationMode, VLLMServiceSpec
from vllm_operator.api.status import HistoryEntry, Override, PoolPlan
from vllm_operator.remediation.classification import Classifier
from vllm_operator.remediation.decision import (
    Action,
    ActionKind,
    ConditionUpdate,
    Decision,
    EventRecord,
    Reason,
)
from vllm_operator.remediation.guards import _Finding, _PoolResult, _Quiet
from vllm_operator.remediation.observations import Observations, PoolObservation
from vllm_operator.remediation.overrides import append_history, effective_args
from vllm_operator.remediation.steps import Steps


class _Policy(Classifier, Steps):
    """Classification and steps of one evaluation."""

    def evaluate_pool(self, pool: PoolObservation, metrics_ok: bool) -> _PoolResult:
        plan = self.plans[pool.pool]
        args = effective_args(plan.planned_args(), self.overrides, pool.pool).engine
        complete = metrics_ok and self.metrics_complete(pool)
        finding = self.classify_crash(pool)
        degraded = None
        if finding is not None:
            if finding.reason == Reason.HOST_OOM:
                step = self.host_memory_step(pool.pool, finding)
            elif finding.reason == Reason.STARTUP_OOM and finding.diagnosis is not None:
                step = self.startup_step(pool.pool, args, finding)
            else:
                step = self.burst_step(pool.pool, args, finding)
            degraded = finding.message
            return _PoolResult(finding, step, _Quiet.NO, complete, degraded)
        if complete:
            finding = self.classify_kv(pool)
            if finding is not None:
                return _PoolResult(finding, self.kv_step(pool, args, finding), _Quiet.NO, complete)
        if metrics_ok:
            # Memory creep needs only the pod's own GPU-memory series, which must cover the window.
            finding = self.classify_creep(pool, plan)
            if finding is not None:
                return _PoolResult(
                    finding, self.creep_step(pool.pool, pool.pods, finding), _Quiet.NO, complete
                )
        return _PoolResult(None, None, self.quiet(pool, complete), complete)


def _entry(action: Action, now: datetime, recommend: bool) -> HistoryEntry:
    """The history record of a step; a recommended one is marked by its field, not its text."""
    return HistoryEntry(
        time=now,
        pool=action.pool,
        field=action.field,
        from_value=action.from_value,
        to_value=action.to_value,
        reason=action.reason.value,
        message=action.message,
        recommended=recommend,
    )


def _apply(overrides: list[Override], action: Action, now: datetime) -> list[Override]:
    kept = [o for o in overrides if not (o.pool == action.pool and o.field == action.field)]
    if action.kind == ActionKind.CLEAR_OVERRIDE:
        return kept
    if action.kind == ActionKind.EVICT_POD:
        return overrides
    previous = next(
        (o for o in overrides if o.pool == action.pool and o.field == action.field), None
    )
    reason = action.reason.value
    if action.reason == Reason.RESTORED and previous is not None:
        reason = previous.reason  # a partial restore keeps the cause it still answers
    return [
        *kept,
        Override(
            pool=action.pool, field=action.field, value=action.to_value, reason=reason, since=now
        ),
    ]


def decide(
    observations: Observations,
    spec: VLLMServiceSpec,
    overrides: Sequence[Override],
    history: Sequence[HistoryEntry],
    plans: Mapping[str, PoolPlan],
    now: datetime,
) -> Decision:
    """Evaluate one VLLMService once and return what to change, why, and how to explain it.

    `plans` maps pool (GPU type) to its planned PoolPlan (status.pools[].plan); pools without a
    plan are skipped. `overrides`/`history` are status.overrides/status.history as stored.
    `now` must be timezone-aware and comparable with the observations' timestamps.
    """
    mode = spec.remediation.mode
    if mode == RemediationMode.OFF:
        return Decision(
            mode=mode,
            now=now,
            applied=False,
            overrides=tuple(overrides),
            history=tuple(history),
            reason=Reason.REMEDIATION_OFF,
            message="remediation.mode is off",
        )
    policy = _Policy(spec, overrides, history, plans, now)
    recommend = mode == RemediationMode.RECOMMEND
    budget = spec.remediation.max_actions_per_hour - policy.actions_last_hour()
    metrics_ok = observations.metrics_available

    actions: list[Action] = []
    notes: list[HistoryEntry] = []
    events: list[EventRecord] = []
    findings: list[_Finding] = []
    unmet: list[str] = []
    degraded: list[str] = []
    incomplete: list[str] = []
    invalid: list[str] = []
    new_overrides = list(overrides)

    for pool in sorted(observations.pools, key=lambda p: p.pool):
        if pool.pool not in plans:
            continue
        result = policy.evaluate_pool(pool, metrics_ok)
        if metrics_ok and not result.metrics_complete and any(p.ready for p in pool.pods):
            incomplete.append(pool.pool)
            invalid.extend(
                f"{pool.pool} pod {p.name}: {p.metrics.invalid}"
                for p in pool.pods
                if p.ready and p.metrics is not None and p.metrics.invalid
            )
        if result.degraded:
            degraded.append(result.degraded)
        if result.finding is not None:
            findings.append(result.finding)
        step = result.step
        if step is not None and step.target_unmet:
            unmet.append(f"{pool.pool}: {step.target_unmet}")
        cooling = policy.in_cooldown(pool.pool)
        noted = policy.in_cooldown(pool.pool, notes=True)
        if step is not None and step.action is None and step.target_unmet and not noted:
            # Blocked by a floor: record it once per cooldown so the Event is not repeated.
            notes.append(
                HistoryEntry(
                    time=now,
                    pool=pool.pool,
                    field="target",
                    reason=Reason.TARGET_UNMET.value,
                    message=step.target_unmet,
                )
            )
            events.append(
                EventRecord(
                    type="Warning",
                    reason=Reason.TARGET_UNMET.value,
                    message=f"{pool.pool}: {step.target_unmet}",
                )
            )
        action = step.action if step is not None else None
        if action is None and result.finding is None and result.quiet != _Quiet.NO:
            action = policy.restore_step(pool, plans[pool.pool], result.quiet)
        if action is None or cooling or budget <= 0:
            continue
        budget -= 1
        actions.append(action)
        events.append(
            EventRecord(
                type="Normal" if action.reason == Reason.RESTORED else "Warning",
                reason=action.reason.value,
                message=("Recommended: " if recommend else "") + f"{action.pool}: {action.message}",
            )
        )
        if not recommend:
            new_overrides = _apply(new_overrides, action, now)

    conditions = _conditions(observations, findings, unmet, degraded, incomplete, invalid)
    new_history = append_history(history, [*notes, *(_entry(a, now, recommend) for a in actions)])
    top = actions[0] if actions else None
    return Decision(
        mode=mode,
        now=now,
        actions=tuple(actions),
        applied=not recommend,
        overrides=tuple(overrides) if recommend else tuple(new_overrides),
        history=new_history,
        evictions=()
        if recommend
        else tuple(a.pod for a in actions if a.kind == ActionKind.EVICT_POD and a.pod),
        conditions=conditions,
        events=tuple(events),
        reason=top.reason if top else (findings[0].reason if findings else Reason.NO_ACTION),
        message=top.message if top else (findings[0].message if findings else ""),
    )


def _conditions(
    obs: Observations,
    findings: Sequence[_Finding],
    unmet: Sequence[str],
    degraded: Sequence[str],
    incomplete: Sequence[str],
    invalid: Sequence[str] = (),
) -> tuple[ConditionUpdate, ...]:
    conds: list[ConditionUpdate] = []
    if not obs.metrics_available:
        conds.append(
            ConditionUpdate(
                type="MetricsAvailable",
                status="False",
                reason=(obs.metrics_unavailable_reason or Reason.METRICS_UNAVAILABLE).value,
                message=obs.metrics_message or "no fresh vLLM metrics: no metric-driven action",
            )
        )
    elif invalid:
        conds.append(
            ConditionUpdate(
                type="MetricsAvailable",
                status="False",
                reason=Reason.METRICS_INVALID.value,
                message="invalid data from vLLM ("
                + "; ".join(invalid)
                + "): no metric-driven action on pools "
                + ", ".join(incomplete),
            )
        )
    elif incomplete:
        conds.append(
            ConditionUpdate(
                type="MetricsAvailable",
                status="False",
                reason=Reason.METRICS_INCOMPLETE.value,
                message="missing or stale series for pools "
                + ", ".join(incomplete)
                + ": no metric-driven action there",
            )
        )
    else:
        conds.append(
            ConditionUpdate(
                type="MetricsAvailable",
                status="True",
                reason=Reason.METRICS_OK.value,
                message=obs.metrics_message,
            )
        )
    if findings:
        f = findings[0]
        conds.append(
            ConditionUpdate(
                type="MemoryPressure", status="True", reason=f.reason.value, message=f.message
            )
        )
    elif not obs.metrics_available:
        conds.append(
            ConditionUpdate(
                type="MemoryPressure",
                status="Unknown",
                reason=Reason.METRICS_UNAVAILABLE.value,
                message="no fresh vLLM metrics",
            )
        )
    else:
        conds.append(
            ConditionUpdate(
                type="MemoryPressure", status="False", reason=Reason.WITHIN_LIMITS.value
            )
        )
    if unmet:
        conds.append(
            ConditionUpdate(
                type="TargetUnmet",
                status="True",
                reason=Reason.TARGET_UNMET.value,
                message="; ".join(unmet),
            )
        )
    else:
        conds.append(
            ConditionUpdate(type="TargetUnmet", status="False", reason=Reason.TARGET_MET.value)
        )
    if degraded:
        conds.append(
            ConditionUpdate(
                type="Degraded",
                status="True",
                reason=findings[0].reason.value if findings else Reason.CRASHING.value,
                message="; ".join(degraded),
            )
        )
    return tuple(conds)
