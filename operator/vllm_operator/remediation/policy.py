"""The remediation policy: observations, spec, overrides and history in; one bounded Decision out.

Classification per pool, most urgent first (domain.md §6):

1. StartupOOM - a container failed during load/profiling/graph capture: re-plan with the capacity
   vLLM printed (max_model_len down to what fits, never below p99ContextTokens), lower
   max_num_batched_tokens when activations left no room, lower gpu_memory_utilization only when
   another process (FreeMemoryBelowUtilization) or CUDA-graph capture is the cause.
2. BurstOOM - CUDA OOM in a forward pass after serving, or OOMKilled: lower
   max_num_batched_tokens, then max_num_seqs, by stepFraction, down to their floors.
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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from vllm_operator.api.spec import PrefixCaching, RemediationMode, VLLMServiceSpec
from vllm_operator.api.status import HistoryEntry, Override, PoolPlan
from vllm_operator.remediation import signals
from vllm_operator.remediation.decision import (
    EVICT_FIELD,
    METRIC_DRIVEN,
    REPLICAS_FIELD,
    RESTORABLE,
    Action,
    ActionKind,
    ConditionUpdate,
    Decision,
    EventRecord,
    Reason,
)
from vllm_operator.remediation.logs import LogError, LogErrorKind, OomPhase
from vllm_operator.remediation.observations import (
    Observations,
    PodObservation,
    PoolObservation,
)
from vllm_operator.remediation.overrides import append_history, effective_args, pool_overrides

MIN_BATCHED_TOKENS = 512
"""Floor of max_num_batched_tokens (the planner's own minimum)."""
BATCHED_TOKENS_MULTIPLE = 64
MIN_GPU_MEMORY_UTILIZATION = 0.5
"""Below this the policy stops chasing another tenant and reports TargetUnmet instead."""
UTILIZATION_STEP = 0.02
"""One step of gpu_memory_utilization when CUDA-graph capture ran out of memory."""
TENANT_MARGIN_GIB = 0.5
"""Kept free below the free memory vLLM reported when another process holds memory."""
KV_HYSTERESIS = 0.05
"""KV usage must stay this far below the threshold for the pool to count as quiet."""
DEFAULT_BLOCK_SIZE = 16
MAX_RELAPSE_DOUBLINGS = 5
HOUR = timedelta(hours=1)
NOT_COUNTED = frozenset({Reason.TARGET_UNMET.value})
"""History reasons that are not actions (excluded from maxActionsPerHour)."""


class _Quiet(Enum):
    NO = 0
    PODS = 1
    FULL = 2


@dataclass
class _Finding:
    reason: Reason
    message: str
    pod: PodObservation | None = None
    log_error: LogError | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Step:
    """A proposed step, or a floor that blocks one (target_unmet set, action None)."""

    action: Action | None
    target_unmet: str | None = None


@dataclass
class _PoolResult:
    finding: _Finding | None
    step: _Step | None
    quiet: _Quiet
    metrics_complete: bool
    degraded: str | None = None


def _round_down(value: float, multiple: int) -> int:
    return int(value // multiple) * multiple


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class _Policy:
    def __init__(
        self,
        spec: VLLMServiceSpec,
        overrides: Sequence[Override],
        history: Sequence[HistoryEntry],
        plans: Mapping[str, PoolPlan],
        now: datetime,
    ) -> None:
        self.spec = spec
        self.r = spec.remediation
        self.overrides = list(overrides)
        self.history = sorted(history, key=lambda h: h.time)
        self.plans = plans
        self.now = now

    # -------------------------------------------------------------------- history helpers

    def last_action(self, pool: str, *, notes: bool = False) -> datetime | None:
        """Time of the pool's last step (notes=True: of its last TargetUnmet note instead)."""
        times = [
            h.time for h in self.history if h.pool == pool and (h.reason in NOT_COUNTED) == notes
        ]
        return max(times) if times else None

    def actions_last_hour(self) -> int:
        return sum(
            1 for h in self.history if h.time > self.now - HOUR and h.reason not in NOT_COUNTED
        )

    def in_cooldown(self, pool: str, *, notes: bool = False) -> bool:
        last = self.last_action(pool, notes=notes)
        return last is not None and self.now - last < timedelta(seconds=self.r.cooldown_seconds)

    def relapses(self, pool: str, field_: str) -> int:
        """How often (pool, field) was lowered again after a restoration."""
        count, restored = 0, False
        for h in self.history:
            if h.pool != pool or h.field != field_:
                continue
            if h.reason == Reason.RESTORED:
                restored = True
            elif restored and h.reason != Reason.TARGET_UNMET:
                count, restored = count + 1, False
        return min(count, MAX_RELAPSE_DOUBLINGS)

    # -------------------------------------------------------------------- classification

    def new_crash(self, pod: PodObservation, pool: str) -> bool:
        """A termination newer than the pool's last step, still relevant now."""
        term = pod.last_termination
        if term is None or term.finished_at > self.now:
            return False
        last = self.last_action(pool)
        if last is not None and term.finished_at <= last:
            return False
        recent = self.now - term.finished_at <= timedelta(seconds=self.r.window_seconds)
        return pod.crash_looping or recent

    def classify_crash(self, pool: PoolObservation) -> _Finding | None:
        crashes = [p for p in pool.pods if self.new_crash(p, pool.pool)]
        crashes.sort(
            key=lambda p: (
                p.last_termination.finished_at if p.last_termination else self.now,
                p.name,
            )
        )
        for pod in reversed(crashes):
            term = pod.last_termination
            assert term is not None
            err = term.log_error
            where = f"pod {pod.name} (restarts={pod.restart_count}, exit {term.exit_code}, {term.reason})"
            if err is not None and err.kind in {
                LogErrorKind.KV_CACHE_TOO_SMALL,
                LogErrorKind.NO_CACHE_MEMORY,
                LogErrorKind.FREE_MEMORY_BELOW_UTILIZATION,
            }:
                return _Finding(
                    Reason.STARTUP_OOM, f"{where} failed at startup: {err.line}", pod, err
                )
            if err is not None and err.kind == LogErrorKind.CUDA_OOM:
                if err.phase == OomPhase.SERVING:
                    return _Finding(
                        Reason.BURST_OOM,
                        f"{where} ran out of GPU memory while serving: {err.line}",
                        pod,
                        err,
                    )
                return _Finding(
                    Reason.STARTUP_OOM,
                    f"{where} ran out of GPU memory during {err.phase.value}: {err.line}",
                    pod,
                    err,
                )
            if term.reason == "OOMKilled":
                return _Finding(Reason.BURST_OOM, f"{where} was OOMKilled", pod, err)
        return None

    def metrics_complete(self, pool: PoolObservation) -> bool:
        ready = [p for p in pool.pods if p.ready]
        return bool(ready) and all(p.metrics is not None and p.metrics.complete for p in ready)

    def classify_kv(self, pool: PoolObservation) -> _Finding | None:
        w, now = self.r.window_seconds, self.now
        hot: list[str] = []
        hit_rates: list[float] = []
        for pod in pool.pods:
            m = pod.metrics
            if not pod.ready or m is None:
                continue
            if m.prefix_cache_hit_rate is not None:
                hit_rates.append(m.prefix_cache_hit_rate)
            if not signals.sustained_at_least(
                m.kv_cache_usage, self.r.kv_cache_usage_threshold, now, w
            ):
                continue
            waiting = signals.window_mean(m.requests_waiting, now, w) or 0.0
            running = signals.window_mean(m.requests_running, now, w) or 0.0
            queued = waiting >= 1.0 and waiting > self.r.queue_ratio * running
            preempting = (m.preemptions_per_minute or 0.0) > self.r.preemptions_per_minute
            if queued or preempting:
                hot.append(
                    f"{pod.name}: KV usage >= {self.r.kv_cache_usage_threshold:g} for {w}s, "
                    f"waiting {waiting:.1f} vs running {running:.1f}, "
                    f"{m.preemptions_per_minute or 0.0:.1f} preemptions/min"
                )
        if not hot:
            return None
        hit = sum(hit_rates) / len(hit_rates) if hit_rates else None
        return _Finding(Reason.KV_PRESSURE, "; ".join(hot), extra={"hit_rate": hit})

    def reserved_gib(self, plan: PoolPlan) -> float | None:
        mem = plan.memory
        if mem is None:
            return None
        return mem.budget_gib + mem.cuda_graph_gib

    def classify_creep(self, pool: PoolObservation, plan: PoolPlan) -> _Finding | None:
        reserved = self.reserved_gib(plan)
        if reserved is None or reserved <= 0:
            return None
        limit = reserved * (1 + self.r.memory_creep_fraction)
        worst: tuple[float, PodObservation] | None = None
        for pod in pool.pods:
            series = pod.metrics.gpu_memory_used_gib if pod.metrics else None
            if not pod.ready or not series:
                continue
            if signals.sustained_at_least(series, limit, self.now, self.r.window_seconds):
                peak = signals.window_max(series, self.now, self.r.window_seconds) or 0.0
                if worst is None or peak > worst[0]:
                    worst = (peak, pod)
        if worst is None:
            return None
        peak, pod = worst
        return _Finding(
            Reason.CHRONIC_FRAGMENTATION,
            f"pod {pod.name} held {peak:.2f} GiB of GPU memory for {self.r.window_seconds}s, above the "
            f"{reserved:.2f} GiB the plan reserved (+{self.r.memory_creep_fraction:.0%})",
            pod,
        )

    def quiet(self, pool: PoolObservation, complete: bool) -> _Quiet:
        """How quiet the pool is: NO, PODS (no crash, every pod ready, metrics unknown) or FULL
        (also complete metrics with KV usage below threshold - hysteresis and no preemptions)."""
        if not pool.pods or any(not p.ready or p.crash_looping for p in pool.pods):
            return _Quiet.NO
        if any(
            p.last_termination is not None
            and self.now - p.last_termination.finished_at < timedelta(seconds=self.r.window_seconds)
            for p in pool.pods
        ):
            return _Quiet.NO
        if not complete:
            return _Quiet.PODS
        w = self.r.window_seconds
        for pod in pool.pods:
            m = pod.metrics
            if m is None or not signals.covers(m.kv_cache_usage, self.now, w):
                return _Quiet.PODS
            peak = signals.window_max(m.kv_cache_usage, self.now, w) or 0.0
            if peak >= self.r.kv_cache_usage_threshold - KV_HYSTERESIS:
                return _Quiet.NO
            if (m.preemptions_per_minute or 0.0) > 0.0:
                return _Quiet.NO
        return _Quiet.FULL

    # -------------------------------------------------------------------- steps

    def action(
        self, pool: str, field_: str, old: Any, new: Any, reason: Reason, why: str
    ) -> Action:
        return Action(
            kind=ActionKind.SET_OVERRIDE,
            pool=pool,
            field=field_,
            from_value=old,
            to_value=new,
            reason=reason,
            message=f"{why}; {field_} {old} -> {new}",
        )

    def lower_batched(
        self, pool: str, args: Mapping[str, Any], reason: Reason, why: str
    ) -> _Step | None:
        current = _as_int(args.get("max_num_batched_tokens"))
        if current is None:
            return None
        seqs = _as_int(args.get("max_num_seqs")) or 0
        floor = max(MIN_BATCHED_TOKENS, seqs)
        if current <= floor:
            return None
        new = _round_down(current * (1 - self.r.step_fraction), BATCHED_TOKENS_MULTIPLE)
        new = max(floor, min(new, current - 1))
        return _Step(self.action(pool, "max_num_batched_tokens", current, new, reason, why))

    def lower_seqs(self, pool: str, args: Mapping[str, Any], reason: Reason, why: str) -> _Step:
        current = _as_int(args.get("max_num_seqs"))
        floor = self.spec.workload.concurrency
        if current is None or current <= floor:
            return _Step(
                None,
                f"{why}; max_num_seqs is at the spec's concurrency ({floor}) and is not lowered "
                f"further: scale out (remediation.maxReplicas), add tensor parallelism, quantise, "
                f"use an fp8 KV cache or a larger GPU type",
            )
        new = max(floor, min(math.floor(current * (1 - self.r.step_fraction)), current - 1))
        return _Step(self.action(pool, "max_num_seqs", current, new, reason, why))

    def lower_utilization(
        self, pool: str, args: Mapping[str, Any], target: float, reason: Reason, why: str
    ) -> _Step:
        current = _as_float(args.get("gpu_memory_utilization"))
        if current is None:
            current = 0.90
        new = math.floor(min(target, current - 0.01) * 100) / 100
        if new < MIN_GPU_MEMORY_UTILIZATION:
            return _Step(
                None,
                f"{why}; gpu_memory_utilization would fall below {MIN_GPU_MEMORY_UTILIZATION}: "
                f"free the GPU from other processes or use another GPU type",
            )
        step = _Step(self.action(pool, "gpu_memory_utilization", current, new, reason, why))
        plan = self.plans[pool]
        if plan.memory is not None and plan.memory.kv_cache_gib > 0:
            kv_after = plan.memory.kv_cache_gib - (current - new) * plan.memory.gpu_total_gib
            fits = plan.memory.concurrency_at_p99 * max(kv_after, 0.0) / plan.memory.kv_cache_gib
            if fits < self.spec.workload.concurrency:
                step.target_unmet = (
                    f"{why}; at gpu_memory_utilization {new} about {fits:.1f} sequences of "
                    f"{self.spec.workload.p99_context_tokens} tokens fit (concurrency "
                    f"{self.spec.workload.concurrency})"
                )
        return step

    def startup_step(self, pool: str, args: Mapping[str, Any], f: _Finding) -> _Step:
        err = f.log_error
        assert err is not None
        p99 = self.spec.workload.p99_context_tokens
        if err.kind == LogErrorKind.FREE_MEMORY_BELOW_UTILIZATION:
            if err.free_gib is None or not err.total_gib:
                return _Step(None, f.message)
            target = (err.free_gib - TENANT_MARGIN_GIB) / err.total_gib
            return self.lower_utilization(
                pool,
                args,
                target,
                Reason.STARTUP_OOM,
                f"{f.message}; another process holds {err.total_gib - err.free_gib:.2f} GiB",
            )
        if err.kind == LogErrorKind.CUDA_OOM and err.phase == OomPhase.GRAPH_CAPTURE:
            current = _as_float(args.get("gpu_memory_utilization")) or 0.90
            return self.lower_utilization(
                pool,
                args,
                current - UTILIZATION_STEP,
                Reason.STARTUP_OOM,
                f"{f.message}; CUDA graphs did not fit beside the KV cache",
            )
        if err.kind == LogErrorKind.KV_CACHE_TOO_SMALL:
            capacity = self.reported_capacity(err)
            current_len = _as_int(args.get("max_model_len")) or err.max_model_len
            block = _as_int(args.get("block_size")) or DEFAULT_BLOCK_SIZE
            if capacity is not None and current_len is not None:
                new_len = _round_down(min(capacity, current_len - 1), block)
                fits = capacity / p99
                unmet = None
                if fits < self.spec.workload.concurrency:
                    unmet = (
                        f"vLLM reported room for {capacity} tokens: {fits:.1f} sequences of {p99} "
                        f"tokens fit, the spec asks for {self.spec.workload.concurrency}"
                    )
                if new_len >= p99:
                    return _Step(
                        self.action(
                            pool,
                            "max_model_len",
                            current_len,
                            new_len,
                            Reason.STARTUP_OOM,
                            f"{f.message}; vLLM reported room for {capacity} tokens",
                        ),
                        unmet,
                    )
        # No usable number, or the P99 context itself does not fit: free activation memory.
        lowered = self.lower_batched(pool, args, Reason.STARTUP_OOM, f.message)
        unmet = (
            f"{f.message}; the P99 context ({p99} tokens) does not fit on {pool}: use tensor "
            f"parallelism, quantisation, an fp8 KV cache or another GPU type"
        )
        if lowered is None:
            return _Step(None, unmet)
        if err.kind == LogErrorKind.KV_CACHE_TOO_SMALL:
            lowered.target_unmet = unmet
        return lowered

    @staticmethod
    def reported_capacity(err: LogError) -> int | None:
        """Tokens vLLM says fit: V0 prints them; V1 0.9.2+ the estimated length; else the ratio."""
        if err.kv_cache_tokens is not None:
            return err.kv_cache_tokens
        if err.estimated_max_model_len is not None:
            return err.estimated_max_model_len
        if err.max_model_len and err.kv_needed_gib and err.kv_available_gib is not None:
            return math.floor(err.max_model_len * err.kv_available_gib / err.kv_needed_gib)
        return None

    def burst_step(self, pool: str, args: Mapping[str, Any], f: _Finding) -> _Step:
        return self.lower_batched(pool, args, Reason.BURST_OOM, f.message) or self.lower_seqs(
            pool, args, Reason.BURST_OOM, f.message
        )

    def kv_step(self, pool: PoolObservation, args: Mapping[str, Any], f: _Finding) -> _Step:
        limit = self.r.max_replicas
        if limit is not None and pool.replicas < limit:
            return _Step(
                self.action(
                    pool.pool,
                    REPLICAS_FIELD,
                    pool.replicas,
                    pool.replicas + 1,
                    Reason.KV_PRESSURE,
                    f"{f.message}; scaling out (maxReplicas {limit})",
                )
            )
        hit = f.extra.get("hit_rate")
        prefix_on = args.get("enable_prefix_caching") is not False
        if (
            prefix_on
            and hit is not None
            and hit < self.r.prefix_cache_hit_rate_floor
            and self.spec.workload.prefix_caching != PrefixCaching.ENABLED
        ):
            return _Step(
                self.action(
                    pool.pool,
                    "enable_prefix_caching",
                    args.get("enable_prefix_caching", True),
                    False,
                    Reason.PREFIX_CACHE_WASTE,
                    f"{f.message}; prefix-cache hit rate {hit:.2f} < "
                    f"{self.r.prefix_cache_hit_rate_floor:g}",
                )
            )
        return self.lower_seqs(pool.pool, args, Reason.KV_PRESSURE, f.message)

    def creep_step(self, pool: str, pods: Sequence[PodObservation], f: _Finding) -> _Step:
        assert f.pod is not None
        others_ready = all(p.ready for p in pods if p.name != f.pod.name)
        if not others_ready:
            return _Step(None)  # another pod is down: evicting now would reduce capacity twice
        return _Step(
            Action(
                kind=ActionKind.EVICT_POD,
                pool=pool,
                field=EVICT_FIELD,
                from_value=f.pod.name,
                pod=f.pod.name,
                reason=Reason.CHRONIC_FRAGMENTATION,
                message=f"{f.message}; draining and evicting it",
            )
        )

    def restore_step(self, pool: PoolObservation, plan: PoolPlan, quiet: _Quiet) -> Action | None:
        """Step one restorable override of a quiet pool back towards the plan (never past it)."""
        for field_, override in sorted(pool_overrides(self.overrides, pool.pool).items()):
            if override.reason not in RESTORABLE:
                continue
            if override.reason in METRIC_DRIVEN and quiet != _Quiet.FULL:
                continue  # a metric-driven override comes back only on fresh, calm metrics
            quiet_for = timedelta(seconds=self.r.restore_after_seconds) * (
                2 ** self.relapses(pool.pool, field_)
            )
            since = max(override.since, self.last_action(pool.pool) or override.since)
            if self.now - since < quiet_for:
                continue
            base = self.spec.replicas if field_ == REPLICAS_FIELD else plan.engine_args.get(field_)
            new = self.step_back(field_, override.value, base)
            why = (
                f"{pool.pool} quiet for {int((self.now - since).total_seconds())}s since the "
                f"{override.reason} override"
            )
            if new is None:
                return Action(
                    kind=ActionKind.CLEAR_OVERRIDE,
                    pool=pool.pool,
                    field=field_,
                    from_value=override.value,
                    to_value=base,
                    reason=Reason.RESTORED,
                    message=f"{why}; {field_} {override.value} -> {base} (planned)",
                )
            return self.action(pool.pool, field_, override.value, new, Reason.RESTORED, why)
        return None

    def step_back(self, field_: str, value: Any, base: Any) -> Any:
        """The next value towards `base`, or None when the next step reaches it (clear)."""
        cur, planned = _as_int(value), _as_int(base)
        if field_ == REPLICAS_FIELD and cur is not None and planned is not None:
            return cur - 1 if cur - 1 > planned else None
        if field_ in {"max_num_batched_tokens", "max_num_seqs"} and cur is not None and planned:
            multiple = BATCHED_TOKENS_MULTIPLE if field_ == "max_num_batched_tokens" else 1
            up = math.ceil(cur / (1 - self.r.step_fraction) / multiple) * multiple
            up = max(up, cur + 1)
            return up if up < planned else None
        return None

    # -------------------------------------------------------------------- evaluation

    def evaluate_pool(self, pool: PoolObservation, metrics_ok: bool) -> _PoolResult:
        plan = self.plans[pool.pool]
        args = effective_args(plan.engine_args, self.overrides, pool.pool)
        complete = metrics_ok and self.metrics_complete(pool)
        finding = self.classify_crash(pool)
        degraded = None
        if finding is not None:
            step = (
                self.startup_step(pool.pool, args, finding)
                if finding.reason == Reason.STARTUP_OOM and finding.log_error is not None
                else self.burst_step(pool.pool, args, finding)
            )
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
    prefix = "Recommended: " if recommend else ""
    return HistoryEntry(
        time=now,
        pool=action.pool,
        field=action.field,
        from_value=action.from_value,
        to_value=action.to_value,
        reason=action.reason.value,
        message=prefix + action.message,
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
    new_overrides = list(overrides)

    for pool in sorted(observations.pools, key=lambda p: p.pool):
        if pool.pool not in plans:
            continue
        result = policy.evaluate_pool(pool, metrics_ok)
        if metrics_ok and not result.metrics_complete and any(p.ready for p in pool.pods):
            incomplete.append(pool.pool)
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

    conditions = _conditions(observations, findings, unmet, degraded, incomplete)
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
) -> tuple[ConditionUpdate, ...]:
    conds: list[ConditionUpdate] = []
    if not obs.metrics_available:
        conds.append(
            ConditionUpdate(
                type="MetricsAvailable",
                status="False",
                reason=Reason.METRICS_UNAVAILABLE.value,
                message=obs.metrics_message or "no fresh vLLM metrics: no metric-driven action",
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
                reason=findings[0].reason.value if findings else "Crashing",
                message="; ".join(degraded),
            )
        )
    return tuple(conds)
