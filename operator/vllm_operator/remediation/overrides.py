"""Overrides on top of a plan: the effective engine arguments and the bounded history.

Pure helpers shared by the policy and by the renderer (which renders a pool's plan with its
overrides applied).
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vllm_operator.api.status import HistoryEntry, Override

HISTORY_LIMIT = 50
"""status.history keeps the last 50 steps (VLLMServiceStatus.history max_length)."""


def pool_overrides(overrides: Iterable[Override], pool: str) -> dict[str, Override]:
    """The overrides of one pool by field (the last one wins if a field appears twice)."""
    return {o.field: o for o in overrides if o.pool == pool}


LOWERED_FIELDS = frozenset(
    {"max_num_batched_tokens", "max_num_seqs", "gpu_memory_utilization", "max_model_len"}
)
"""Fields remediation only ever lowers: an override above a (new, lower) plan is moot."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def effective_args(
    engine_args: Mapping[str, Any], overrides: Iterable[Override], pool: str
) -> dict[str, Any]:
    """The plan's engine arguments with the pool's overrides applied (what the renderer renders).

    For the fields remediation lowers, the smaller of plan and override wins, so an override left
    over from an older, larger plan never raises a limit. Non-engine overrides (`replicas`) appear
    in the result too; the renderer takes them out.
    """
    args = dict(engine_args)
    for field, override in pool_overrides(overrides, pool).items():
        planned, value = _number(args.get(field)), _number(override.value)
        if (
            field in LOWERED_FIELDS
            and planned is not None
            and value is not None
            and planned < value
        ):
            continue
        args[field] = override.value
    return args


def append_history(
    history: Sequence[HistoryEntry], entries: Iterable[HistoryEntry]
) -> tuple[HistoryEntry, ...]:
    """Append and keep the last HISTORY_LIMIT entries, oldest first."""
    merged = [*history, *entries]
    return tuple(merged[-HISTORY_LIMIT:])
