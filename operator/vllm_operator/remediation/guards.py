"""Guards of the remediation policy and the state every part of it shares.

What keeps remediation bounded: a cooldown per pool, maxActionsPerHour per service, the relapse
count that doubles the quiet period before a restore. `PolicyBase` holds the inputs of one
evaluation (spec, overrides, history, plans, now); classification and steps build on it.

Pure: the clock is the `now` argument.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.api.status import HistoryEntry, Override, PoolPlan
from vllm_operator.remediation.decision import Action, Reason
from vllm_operator.remediation.diagnosis import Diagnosis
from vllm_operator.remediation.observations import PodObservation

MIN_BATCHED_TOKENS = 512
"""Floor of max_num_batched_tokens (the planner's own minimum)."""
BATCHED_TOKENS_MULTIPLE = 64
MIN_GPU_MEMORY_UTILIZATION = 0.5
"""Below this the policy stops chasing another tenant and reports TargetUnmet instead."""
UTILIZATION_STEP = 0.02
"""One step of gpu_memory_utilization when CUDA-graph capture ran out of memory."""
TENANT_MARGIN_GIB = 0.5
"""Kept free below the free memory vLLM reported when another process holds memory."""
HOST_MEMORY_STEP = 0.25
"""One HostOOM step raises the container's memory limit by this fraction ..."""
HOST_MEMORY_STEP_MIN_GIB = 4
"""... or by this many GiB, whichever is larger."""
HOST_MEMORY_UNKNOWN_CAP = 2
"""Without the nodes' allocatable memory, HostOOM steps stop at this multiple of the plan."""
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
    diagnosis: Diagnosis | None = None
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


class PolicyBase:
    """The inputs of one evaluation and the history guards."""

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
