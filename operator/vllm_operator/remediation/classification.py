"""Classification of the remediation policy: which problem a pool shows now, most urgent first.

1. A crash newer than the pool's last step, classified by `remediation.diagnosis` (startup OOM,
   runtime OOM, host OOM, or a crash that is not a memory problem).
2. KV pressure: KV usage at or above the threshold for the whole window with a backed-up queue
   or preemptions.
3. Chronic fragmentation: a pod's GPU memory above the plan's reservation for the whole window.

And when none shows: how quiet the pool is (for restoring overrides).
"""

from datetime import timedelta

from vllm_operator.api.status import PoolPlan
from vllm_operator.remediation import signals
from vllm_operator.remediation.decision import Reason
from vllm_operator.remediation.diagnosis import FailureClass
from vllm_operator.remediation.guards import KV_HYSTERESIS, PolicyBase, _Finding, _Quiet
from vllm_operator.remediation.observations import PodObservation, PoolObservation


class Classifier(PolicyBase):
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
            d = term.diagnosis
            if d is None or not d.memory:
                continue  # not a memory problem: Degraded, never an OOM step
            where = f"pod {pod.name} (restarts={pod.restart_count}, exit {term.exit_code}, {term.reason})"
            if d.failure_class == FailureClass.HOST_OOM:
                return _Finding(
                    Reason.HOST_OOM,
                    f"{where} ran out of host memory ({d.failure_class}): {d.evidence}",
                    pod,
                    d,
                )
            if d.failure_class == FailureClass.RUNTIME_CUDA_OOM:
                return _Finding(
                    Reason.BURST_OOM,
                    f"{where} ran out of GPU memory while serving ({d.failure_class}): {d.evidence}",
                    pod,
                    d,
                )
            during = " during CUDA-graph capture" if d.graph_capture else ""
            return _Finding(
                Reason.STARTUP_OOM,
                f"{where} failed at startup{during} ({d.failure_class}): {d.evidence}",
                pod,
                d,
            )
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
