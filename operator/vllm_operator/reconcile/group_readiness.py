"""How many groups of a multi-node pool are ready, counted from the pods in the watch cache.

Moved out of reconcile/controller.py (#32).
"""

from vllm_operator.api import VLLMService
from vllm_operator.api.groups import LWS_LABEL_GROUP_INDEX, LWS_LABEL_NAME
from vllm_operator.kube.bodies import LeaderWorkerSetBody, PodBody
from vllm_operator.kube.gateway import Kind, KubeGateway, Obj
from vllm_operator.reconcile.pools import PoolOutcome
from vllm_operator.rendering.names import selector_labels


def pod_ready(pod: Obj) -> bool:
    """The pod's Ready condition is True."""
    return PodBody(pod).ready


def count_ready_groups(gw: KubeGateway, service: VLLMService, pools: list[PoolOutcome]) -> None:
    """A multi-node pool's ready groups as its pods in the watch cache show them, never more
    than its LeaderWorkerSet reports: that status lags its pods (#32: a group whose worker
    was deleted while the LeaderWorkerSet controller was down, or Pending on a cordoned
    node, was reported Ready for 12-18 s). A group is ready when every one of its `size`
    pods is Ready and none is being deleted."""
    groups = [p for p in pools if (p.live or {}).get("kind") == Kind.LEADER_WORKER_SET.value]
    if not groups:
        return
    pods = gw.list_pods(service.namespace, selector_labels(service.name))
    for pool in groups:
        live = pool.live or {}
        lws = LeaderWorkerSetBody(live)
        lws_name = lws.meta.name
        size = lws.size
        ready_pods: dict[str, int] = {}
        for raw in pods:
            pod = PodBody(raw)
            labels = pod.meta.labels
            if labels.get(LWS_LABEL_NAME) != lws_name or pod.meta.deleting:
                continue
            if pod.ready:
                index = str(labels.get(LWS_LABEL_GROUP_INDEX, ""))
                ready_pods[index] = ready_pods.get(index, 0) + 1
        counted = sum(1 for n in ready_pods.values() if n >= size)
        status = dict(lws.status)
        if lws.ready_replicas > counted:
            status["readyReplicas"] = counted
            pool.live = {**live, "status": status}


__all__ = ["count_ready_groups", "pod_ready"]
