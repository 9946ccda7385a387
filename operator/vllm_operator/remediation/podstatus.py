"""Turn a Pod object (as the API server returns it, a plain dict) into a PodObservation.

Pure parsing, no I/O: the kube gateway lists the pods and reads the previous container's log tail
(`GET .../log?container=vllm&previous=true&tailLines=N`); this module reads the facts the policy
needs (readiness, restartCount, CrashLoopBackOff, the last termination) and hands the termination
with its log to the one classifier, `remediation.diagnosis`.
"""

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_operator.api.groups import pod_group, worker_index
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


def _crash_rank(pod: Mapping[str, Any], container: str) -> tuple[int, str]:
    """How strongly a pod shows a crash: crash-looping, then the latest termination, then not
    ready; the termination time breaks ties."""
    status = container_status(pod, container)
    state = status.get("state") or {}
    terminated = (status.get("lastState") or {}).get("terminated") or state.get("terminated")
    waiting = (state.get("waiting") or {}).get("reason")
    finished = str((terminated or {}).get("finishedAt") or "")
    if waiting == "CrashLoopBackOff":
        return 3, finished
    if terminated:
        return 2, finished
    if not status.get("ready", False):
        return 1, ""
    return 0, ""


def fold_groups(
    pods: Sequence[dict[str, Any]], *, container: str = VLLM_CONTAINER
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """One (observed pod, crashed pod) per replica: a pod of a single-node pool is both.

    The pods of a multi-node replica (a LeaderWorkerSet group) crash, restart and move together
    and only the leader serves and reports metrics, so the policy sees the group as one pod: the
    leader's object (its name, metrics, drain and eviction act on the whole group) carrying the
    vLLM container status of the group's worst pod (a crash in worker 1 is the group's crash),
    ready only when every pod of the group is. The second element is the pod whose previous log
    explains the crash (read from that pod, the worker).
    """
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        key = pod_group((pod.get("metadata") or {}).get("labels") or {})
        if key is None:
            out.append((pod, pod))
        else:
            groups.setdefault(key, []).append(pod)
    for members in groups.values():
        members = sorted(
            members, key=lambda p: worker_index((p.get("metadata") or {}).get("labels") or {})
        )
        leader = members[0]
        worst = max(members, key=lambda p: _crash_rank(p, container))
        if _crash_rank(worst, container) <= _crash_rank(leader, container):
            worst = leader
        folded = copy.deepcopy(leader)
        merged = {**container_status(worst, container), "name": container}
        merged["ready"] = all(
            bool(container_status(p, container).get("ready", False)) for p in members
        )
        statuses = [
            s
            for s in (folded.get("status") or {}).get("containerStatuses") or []
            if s.get("name") != container
        ]
        folded.setdefault("status", {})["containerStatuses"] = [*statuses, merged]
        out.append((folded, worst))
    return out
