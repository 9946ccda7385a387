"""Overrides on top of a plan: the effective engine arguments and the bounded history.

Pure helpers shared by the policy and by the reconcile (which renders a pool's plan with its
overrides applied).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vllm_operator.api.engine_args import (
    LOWERED_FIELDS,
    RAISED_FIELDS,
    OverrideField,
    PlannedArgs,
    override_value,
)
from vllm_operator.api.status import HistoryEntry, Override

HISTORY_LIMIT = 50
"""status.history keeps the last 50 steps (VLLMServiceStatus.history max_length)."""


def pool_overrides(overrides: Iterable[Override], pool: str) -> dict[OverrideField, Override]:
    """The overrides of one pool by field (the last one wins if a field appears twice)."""
    return {o.field: o for o in overrides if o.pool == pool}


@dataclass(frozen=True)
class EffectiveArgs:
    """A pool's plan with its overrides applied: the engine arguments, and replicas apart."""

    engine: PlannedArgs
    replicas: int | None = None
    """The replicas override (scale-out), or None: the spec's replicas."""
    host_memory_gib: int | None = None
    """The host-memory override (after OOMKilled) when above the plan's limit, or None: the
    plan's own request and limit."""


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def effective_args(
    planned: PlannedArgs,
    overrides: Iterable[Override],
    pool: str,
    planned_host_memory_gib: int | None = None,
) -> EffectiveArgs:
    """The plan's engine arguments with the pool's overrides applied (what the renderer renders).

    For the fields remediation lowers, the smaller of plan and override wins, so an override left
    over from an older, larger plan never raises a limit. For the host-memory limit, which
    remediation only raises, the larger wins (a new plan above the override makes it moot).
    """
    replicas: int | None = None
    host_memory: int | None = None
    values: dict[OverrideField, object] = {}
    for field, override in pool_overrides(overrides, pool).items():
        value = override_value(field, override.value)
        if field == OverrideField.REPLICAS:
            replicas = int(value) if isinstance(value, int) else None
            continue
        if field in RAISED_FIELDS:
            raised = int(value) if isinstance(value, int) else None
            if raised is not None and (
                planned_host_memory_gib is None or raised > planned_host_memory_gib
            ):
                host_memory = raised
            continue
        current = _number(planned.value(field))
        if field in LOWERED_FIELDS and current is not None and current < (_number(value) or 0):
            continue
        values[field] = value
    return EffectiveArgs(
        engine=planned.with_values(values), replicas=replicas, host_memory_gib=host_memory
    )


def append_history(
    history: Sequence[HistoryEntry], entries: Iterable[HistoryEntry]
) -> tuple[HistoryEntry, ...]:
    """Append and keep the last HISTORY_LIMIT entries, oldest first."""
    merged = [*history, *entries]
    return tuple(merged[-HISTORY_LIMIT:])
