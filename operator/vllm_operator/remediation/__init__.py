"""Pure remediation policy: observations and history in, a bounded, explained action out."""

from vllm_operator.remediation.decision import (
    Action,
    ActionKind,
    ConditionUpdate,
    Decision,
    EventRecord,
    Reason,
)
from vllm_operator.remediation.logs import LogError, LogErrorKind, OomPhase, classify_log
from vllm_operator.remediation.observations import (
    ContainerTermination,
    Observations,
    PodMetrics,
    PodObservation,
    PoolObservation,
    Sample,
)
from vllm_operator.remediation.overrides import HISTORY_LIMIT, append_history, effective_args
from vllm_operator.remediation.podstatus import observe_pod
from vllm_operator.remediation.policy import decide

__all__ = [
    "HISTORY_LIMIT",
    "Action",
    "ActionKind",
    "ConditionUpdate",
    "ContainerTermination",
    "Decision",
    "EventRecord",
    "LogError",
    "LogErrorKind",
    "Observations",
    "OomPhase",
    "PodMetrics",
    "PodObservation",
    "PoolObservation",
    "Reason",
    "Sample",
    "append_history",
    "classify_log",
    "decide",
    "effective_args",
    "observe_pod",
]
