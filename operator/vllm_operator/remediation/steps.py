"""Steps of the remediation policy: one bounded change per finding, or a floor that blocks it.

Lower max_num_batched_tokens, then max_num_seqs, by stepFraction, never below their floors (the
spec's concurrency and context); re-plan max_model_len with the capacity vLLM reported; lower
gpu_memory_utilization only for another tenant or CUDA-graph capture; raise the host-memory limit
after an OOMKilled container (never a GPU argument); scale out, turn prefix
caching off, or drain a creeping pod; restore a quiet pool stepwise towards its plan.
"""

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from vllm_operator.api.engine_args import (
    EngineArgValue,
    OverrideField,
    PlannedArgs,
    override_value,
)
from vllm_operator.api.spec import PrefixCaching
from vllm_operator.api.status import PoolPlan
from vllm_operator.remediation.actions import reported_capacity
from vllm_operator.remediation.decision import (
    EVICT_FIELD,
    METRIC_DRIVEN,
    REPLICAS_FIELD,
    RESTORABLE,
    Action,
    ActionKind,
    Reason,
)
from vllm_operator.remediation.diagnosis import FailureClass
from vllm_operator.remediation.guards import (
    BATCHED_TOKENS_MULTIPLE,
    DEFAULT_BLOCK_SIZE,
    HOST_MEMORY_STEP,
    HOST_MEMORY_STEP_MIN_GIB,
    HOST_MEMORY_UNKNOWN_CAP,
    MIN_BATCHED_TOKENS,
    MIN_GPU_MEMORY_UTILIZATION,
    TENANT_MARGIN_GIB,
    UTILIZATION_STEP,
    PolicyBase,
    _Finding,
    _Quiet,
    _round_down,
    _Step,
)
from vllm_operator.remediation.observations import PodObservation, PoolObservation
from vllm_operator.remediation.overrides import pool_overrides


class Steps(PolicyBase):
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

    def lower_batched(self, pool: str, args: PlannedArgs, reason: Reason, why: str) -> _Step | None:
        current = args.max_num_batched_tokens
        if current is None:
            return None
        floor = max(MIN_BATCHED_TOKENS, args.max_num_seqs)
        if current <= floor:
            return None
        new = _round_down(current * (1 - self.r.step_fraction), BATCHED_TOKENS_MULTIPLE)
        new = max(floor, min(new, current - 1))
        return _Step(self.action(pool, "max_num_batched_tokens", current, new, reason, why))

    def lower_seqs(self, pool: str, args: PlannedArgs, reason: Reason, why: str) -> _Step:
        current = args.max_num_seqs
        floor = self.spec.workload.concurrency
        if current <= floor:
            return _Step(
                None,
                f"{why}; max_num_seqs is at the spec's concurrency ({floor}) and is not lowered "
                f"further: scale out (remediation.maxReplicas), add tensor parallelism, quantise, "
                f"use an fp8 KV cache or a larger GPU type",
            )
        new = max(floor, min(math.floor(current * (1 - self.r.step_fraction)), current - 1))
        return _Step(self.action(pool, "max_num_seqs", current, new, reason, why))

    def lower_utilization(
        self, pool: str, args: PlannedArgs, target: float, reason: Reason, why: str
    ) -> _Step:
        current = args.gpu_memory_utilization
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

    def startup_step(self, pool: str, args: PlannedArgs, f: _Finding) -> _Step:
        d = f.diagnosis
        assert d is not None
        err = d.numbers
        p99 = self.spec.workload.p99_context_tokens
        if d.failure_class == FailureClass.STARTUP_FREE_MEMORY:
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
        if d.failure_class == FailureClass.STARTUP_CUDA_OOM and d.graph_capture:
            return self.lower_utilization(
                pool,
                args,
                args.gpu_memory_utilization - UTILIZATION_STEP,
                Reason.STARTUP_OOM,
                f"{f.message}; CUDA graphs did not fit beside the KV cache",
            )
        if d.failure_class == FailureClass.STARTUP_KV_INSUFFICIENT:
            capacity = reported_capacity(d)
            current_len = args.max_model_len
            block = args.block_size or DEFAULT_BLOCK_SIZE
            if capacity is not None:
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
        if d.failure_class == FailureClass.STARTUP_KV_INSUFFICIENT:
            lowered.target_unmet = unmet
        return lowered

    def host_memory_step(self, pool: str, f: _Finding) -> _Step | None:
        """Host RAM ran out (OOMKilled): raise the container's memory limit one bounded step.

        No GPU argument can help, so none is touched. The step is the larger of
        HOST_MEMORY_STEP_FRACTION and HOST_MEMORY_STEP_MIN_GIB, up to the most the pool's nodes
        can allocate (status plan hostMemory.maxLimitGiB); where the nodes' allocatable memory is
        unknown, up to HOST_MEMORY_UNKNOWN_CAP x the planned limit. At the cap: TargetUnmet.
        """
        plan = self.plans[pool].host_memory
        if plan is None:
            return None  # a status written before host memory was planned: re-plan first
        field_ = OverrideField.HOST_MEMORY_GIB
        override = pool_overrides(self.overrides, pool).get(field_)
        current = plan.limit_gib
        if override is not None:
            value = override_value(field_, override.value)
            if isinstance(value, int) and value > current:
                current = value
        if plan.max_limit_gib is not None:
            cap = max(plan.limit_gib, plan.max_limit_gib)
            where = (
                f"the most the pool's nodes can allocate ({plan.node_allocatable_gib:g} GiB "
                "allocatable on the smallest, less a reserve)"
            )
        else:
            cap = HOST_MEMORY_UNKNOWN_CAP * plan.limit_gib
            where = (
                f"{HOST_MEMORY_UNKNOWN_CAP} x the planned {plan.limit_gib} GiB (the nodes do not "
                "report allocatable memory)"
            )
        if current >= cap:
            return _Step(
                None,
                f"{f.message}; the host-memory limit is already {current} GiB, {where}: use nodes "
                "with more memory, or lower what the container holds in host memory (swap, CPU "
                "offload, eager loading in spec.vllm.extraArgs)",
            )
        new = min(
            cap,
            max(current + HOST_MEMORY_STEP_MIN_GIB, math.ceil(current * (1 + HOST_MEMORY_STEP))),
        )
        return _Step(
            self.action(
                pool,
                field_.value,
                current,
                new,
                Reason.HOST_OOM,
                f"{f.message}; raising the container's host-memory limit (GPU arguments unchanged)",
            )
        )

    def burst_step(self, pool: str, args: PlannedArgs, f: _Finding) -> _Step:
        return self.lower_batched(pool, args, Reason.BURST_OOM, f.message) or self.lower_seqs(
            pool, args, Reason.BURST_OOM, f.message
        )

    def kv_step(self, pool: PoolObservation, args: PlannedArgs, f: _Finding) -> _Step:
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
        prefix_on = args.enable_prefix_caching is not False
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
                    prefix_on,
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
            base = (
                self.spec.replicas
                if field_ == OverrideField.REPLICAS
                else plan.planned_args().value(field_)
            )
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

    def step_back(self, field_: OverrideField, value: Any, base: EngineArgValue) -> EngineArgValue:
        """The next value towards `base`, or None when the next step reaches it (clear)."""
        cur = override_value(field_, value)
        if not isinstance(cur, int) or isinstance(cur, bool):
            return None
        planned = base if isinstance(base, int) and not isinstance(base, bool) else None
        if field_ == OverrideField.REPLICAS and planned is not None:
            return cur - 1 if cur - 1 > planned else None
        if field_ in {OverrideField.MAX_NUM_BATCHED_TOKENS, OverrideField.MAX_NUM_SEQS} and planned:
            multiple = (
                BATCHED_TOKENS_MULTIPLE if field_ == OverrideField.MAX_NUM_BATCHED_TOKENS else 1
            )
            up = math.ceil(cur / (1 - self.r.step_fraction) / multiple) * multiple
            up = max(up, cur + 1)
            return up if up < planned else None
        return None
