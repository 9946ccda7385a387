"""Turn a Pod object (as the API server returns it, a plain dict) into a PodObservation.

Pure parsing, no I/O: the kube gateway lists the pods and reads the previous container's log tail
(`GET .../log?container=vllm&previous=true&tailLines=N`), this module reads the facts the policy
needs: readiness, restartCount, CrashLoopBackOff, and the last termination with its classified log.
"""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from vllm_operator.remediation.logs import classify_log
from vllm_operator.remediation.observations import ContainerTermination, PodMetrics, PodObservation

VLLM_CONTAINER = "vllm"


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _container_status(pod: Mapping[str, Any], container: str) -> Mapping[str, Any]:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    for status in statuses:
        if status.get("name") == container:
            return dict(status)
    return dict(statuses[0]) if statuses else {}


def observe_pod(
    pod: Mapping[str, Any],
    *,
    container: str = VLLM_CONTAINER,
    previous_log: str | None = None,
    metrics: PodMetrics | None = None,
) -> PodObservation:
    """The policy's view of one pod; `previous_log` is the last lines of the previous container."""
    status = _container_status(pod, container)
    state = status.get("state") or {}
    terminated = (status.get("lastState") or {}).get("terminated") or state.get("terminated")
    termination = None
    if terminated:
        finished = _time(terminated.get("finishedAt"))
        if finished is not None:
            termination = ContainerTermination(
                reason=str(terminated.get("reason") or "Error"),
                exit_code=int(terminated.get("exitCode") or 0),
                started_at=_time(terminated.get("startedAt")),
                finished_at=finished,
                log_error=classify_log(previous_log) if previous_log else None,
            )
    waiting = (state.get("waiting") or {}).get("reason")
    return PodObservation(
        name=str(pod.get("metadata", {}).get("name", "")) or "unknown",
        ready=bool(status.get("ready", False)),
        restart_count=int(status.get("restartCount") or 0),
        waiting_reason=str(waiting) if waiting else None,
        last_termination=termination,
        metrics=metrics,
    )
