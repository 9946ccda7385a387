"""Turn a Pod object (as the API server returns it, a plain dict) into a PodObservation.

Pure parsing, no I/O: the kube gateway lists the pods and reads the previous container's log tail
(`GET .../log?container=vllm&previous=true&tailLines=N`); this module reads the facts the policy
needs (readiness, restartCount, CrashLoopBackOff, the last termination) and hands the termination
with its log to the one classifier, `remediation.diagnosis`.
"""

from collections.abc import Mapping
from typing import Any

from vllm_operator.remediation.diagnosis import (
    VLLM_CONTAINER,
    container_status,
    diagnose,
    parse_time,
    pod_history,
)
from vllm_operator.remediation.observations import ContainerTermination, PodMetrics, PodObservation


def observe_pod(
    pod: Mapping[str, Any],
    *,
    container: str = VLLM_CONTAINER,
    previous_log: str | None = None,
    metrics: PodMetrics | None = None,
) -> PodObservation:
    """The policy's view of one pod; `previous_log` is the last lines of the previous container."""
    status = container_status(pod, container)
    state = status.get("state") or {}
    terminated = (status.get("lastState") or {}).get("terminated") or state.get("terminated")
    termination = None
    if terminated:
        finished = parse_time(terminated.get("finishedAt"))
        if finished is not None:
            termination = ContainerTermination(
                reason=str(terminated.get("reason") or "Error"),
                exit_code=int(terminated.get("exitCode") or 0),
                started_at=parse_time(terminated.get("startedAt")),
                finished_at=finished,
                diagnosis=diagnose(previous_log, pod_history(pod, container)),
            )
    waiting = (state.get("waiting") or {}).get("reason")
    running = state.get("running")
    return PodObservation(
        name=str(pod.get("metadata", {}).get("name", "")) or "unknown",
        ready=bool(status.get("ready", False)),
        restart_count=int(status.get("restartCount") or 0),
        waiting_reason=str(waiting) if waiting else None,
        last_termination=termination,
        running_since=parse_time(running.get("startedAt")) if isinstance(running, dict) else None,
        metrics=metrics,
    )
