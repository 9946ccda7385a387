"""The pods of one replica of a multi-node pool: a LeaderWorkerSet group.

Why in api: rendering writes LeaderWorkerSets, remediation attributes what happens to a pod to its
group and reconcile acts on whole groups; the labels the LeaderWorkerSet controller puts on a
group's pods are the one vocabulary all three read.
"""

from collections.abc import Mapping

LWS_LABEL_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_LABEL_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_LABEL_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
"""Worker index 0 is the group's leader (it owns the group: deleting it recreates the group)."""


def pod_group(pod_labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(LeaderWorkerSet name, group index) of a pod of a multi-node pool; None for other pods.

    Why: the pods of a group fail, restart and move together, so whatever is attributed to one of
    them (a crash, an eviction, a fragmentation roll) is attributed to its group.
    """
    name, index = pod_labels.get(LWS_LABEL_NAME), pod_labels.get(LWS_LABEL_GROUP_INDEX)
    if name is None or index is None:
        return None
    return name, index


def worker_index(pod_labels: Mapping[str, str]) -> int:
    """The pod's index in its group (0: the leader); pods outside a group count as leaders."""
    raw = pod_labels.get(LWS_LABEL_WORKER_INDEX, "0")
    return int(raw) if raw.isdigit() else 0


__all__ = [
    "LWS_LABEL_GROUP_INDEX",
    "LWS_LABEL_NAME",
    "LWS_LABEL_WORKER_INDEX",
    "pod_group",
    "worker_index",
]
