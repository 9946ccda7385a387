"""Status conditions following the Kubernetes API conventions (metav1.Condition).

`set_condition` is pure: the caller passes the current time, and `lastTransitionTime` only moves
when the status value changes, so a reconcile that observes nothing new writes nothing new.
"""

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from vllm_operator.api.base import ApiModel


class ConditionType(StrEnum):
    """Condition types the operator maintains on a VLLMService."""

    READY = "Ready"
    FEASIBLE = "Feasible"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    MEMORY_PRESSURE = "MemoryPressure"
    METRICS_AVAILABLE = "MetricsAvailable"
    TARGET_UNMET = "TargetUnmet"
    PLAN_DEVIATION = "PlanDeviation"


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(ApiModel):
    """One observation about the service, in the shape of metav1.Condition."""

    type: str = Field(
        min_length=1,
        max_length=316,
        description="Type of the condition, for example Ready, Feasible, Progressing, Degraded, "
        "MemoryPressure or MetricsAvailable.",
    )
    status: ConditionStatus = Field(description="Status of the condition: True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="Machine-readable CamelCase reason for the condition's last transition.",
    )
    message: str = Field(
        default="",
        max_length=32768,
        description="Human-readable explanation of the transition.",
    )
    last_transition_time: datetime = Field(
        description="When the condition last changed from one status to another (RFC 3339).",
    )
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="The .metadata.generation the condition was computed from.",
    )


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    """Return the condition of the given type, or None."""
    return next((c for c in conditions if c.type == type_), None)


def set_condition(
    conditions: list[Condition],
    *,
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None,
) -> list[Condition]:
    """Upsert a condition by type, keeping lastTransitionTime when the status is unchanged.

    Returns a new list (sorted by type for a stable status) and leaves the input untouched.
    """
    old = find_condition(conditions, type_)
    transition = now if old is None or old.status != status else old.last_transition_time
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=transition,
        observed_generation=observed_generation,
    )
    rest = [c for c in conditions if c.type != type_]
    return sorted([*rest, new], key=lambda c: c.type)
