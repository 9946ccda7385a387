"""What the policy returns: actions with reasons, the new status overrides/history, conditions and
Events, so the controller applies a decision without interpreting it."""

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.reasons import Reason as Reason  # re-exported: the one enum lives in api
from vllm_operator.api.spec import RemediationMode
from vllm_operator.api.status import HistoryEntry, Override

RESTORABLE = frozenset({Reason.BURST_OOM, Reason.KV_PRESSURE, Reason.PREFIX_CACHE_WASTE})
"""Overrides stepped back after a quiet period. StartupOOM overrides are kept: they carry what
vLLM itself measured, and undoing them would crash the pod again (they go when the plan changes).
HostOOM overrides (a larger host-memory limit) are kept for the same reason: the container was
killed at the smaller limit, and a larger limit costs no throughput."""

METRIC_DRIVEN = frozenset(
    {Reason.KV_PRESSURE, Reason.PREFIX_CACHE_WASTE, Reason.CHRONIC_FRAGMENTATION}
)

EVICT_FIELD = "evict"
REPLICAS_FIELD = "replicas"


class ActionKind(StrEnum):
    """What the controller does for one action."""

    SET_OVERRIDE = "setOverride"
    """Put `field = to_value` into status.overrides for the pool (re-render, rollout)."""
    CLEAR_OVERRIDE = "clearOverride"
    """Remove the pool's override of `field`: back to the plan."""
    EVICT_POD = "evictPod"
    """Drain `pod` (take it out of the Service), then evict it through the Eviction API."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Action(_Model):
    """One step on one pool."""

    kind: ActionKind
    pool: str
    field: str = Field(description="Engine field, `replicas`, or `evict`.")
    from_value: Any = None
    to_value: Any = None
    pod: str | None = None
    reason: Reason
    message: str


class ConditionUpdate(_Model):
    """A condition the controller sets with api.conditions.set_condition (it adds time/generation)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: Reason
    message: str = ""


class EventRecord(_Model):
    """A Kubernetes Event to emit on the VLLMService."""

    type: Literal["Normal", "Warning"]
    reason: Reason
    message: str


class Decision(_Model):
    """The outcome of one evaluation.

    In `auto` mode `overrides`/`history` already include the actions and `evictions` lists the pods
    to drain and evict. In `recommend` mode `overrides` are unchanged, `evictions` is empty, and the
    actions appear in `history` (entries with `recommended` set) and Events (message prefixed
    "Recommended:") only. In `off` mode
    nothing changes and no conditions are proposed.
    """

    mode: RemediationMode
    now: datetime
    actions: tuple[Action, ...] = ()
    applied: bool = Field(description="True when the actions take effect (mode auto).")
    overrides: tuple[Override, ...] = ()
    history: tuple[HistoryEntry, ...] = ()
    evictions: tuple[str, ...] = ()
    conditions: tuple[ConditionUpdate, ...] = ()
    events: tuple[EventRecord, ...] = ()
    reason: Reason = Reason.NO_ACTION
    message: str = ""
