"""Pure remediation policy: observations and history in, a bounded, explained action out."""

from vllm_operator.remediation.decision import (
    Action,
    ActionKind,
    ConditionUpdate,
    Decision,
    EventRecord,
    Reason,
)
from vllm_operator.remediation.diagnosis import (
    Diagnosis,
    FailureClass,
    Numbers,
    Phase,
    PodHistory,
    diagnose,
    pod_history,
)
from vllm_operator.remediation.observations import (
    ContainerTermination,
    Observations,
    PodMetrics,
    PodObservation,
    PoolObservation,
    Sample,
)
from vllm_operator.remediation.overrides import HISTORY_LIMIT, append_history, effective_args
from vllm_operator.remediation.podstatus import fold_groups, observe_pod
from vllm_operator.remediation.policy import decide

__all__ = [
    "HISTORY_LIMIT",
    "Action",
    "ActionKind",
    "ConditionUpdate",
    "ContainerTermination",
    "Decision",
    "EventRecord",
    "Diagnosis",
    "FailureClass",
    "Numbers",
    "Observations",
    "Phase",
    "PodHistory",
    "PodMetrics",
    "PodObservation",
    "PoolObservation",
    "Reason",
    "Sample",
    "append_history",
    "decide",
    "diagnose",
    "effective_args",
    "fold_groups",
    "observe_pod",
    "pod_history",
]
