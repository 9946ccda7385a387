"""What of a service's children the operator may touch, and pruning the pool workloads a spec no
longer wants.

Moved out of reconcile/controller.py (#32).
"""

from vllm_operator.api import VLLMService
from vllm_operator.api.reasons import Reason
from vllm_operator.kube.gateway import Kind, KubeGateway, Obj
from vllm_operator.reconcile.inventory import canonical_label
from vllm_operator.reconcile.outcome import Outcome
from vllm_operator.reconcile.reporting import emit
from vllm_operator.rendering.names import ANNOTATION_GPU_TYPE, LABEL_MANAGED_BY, MANAGED_BY


def owned_by(obj: Obj, service: VLLMService) -> bool:
    """Whether `obj` is controlled by this VLLMService (its controller ownerReference, by UID).

    Objects with a derived name that someone else created are never modified or adopted.
    """
    uid = str(service.metadata.get("uid", ""))
    return any(
        ref.get("kind") == "VLLMService"
        and ref.get("controller")
        and ref.get("name") == service.name
        and (not uid or ref.get("uid") == uid)
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
    )


def prune(
    gw: KubeGateway,
    service: VLLMService,
    owned: list[Obj],
    desired: set[tuple[Kind, str]],
    outcome: Outcome,
) -> list[Obj]:
    """Delete pool workloads of GPU types the spec no longer allows, and a pool's workload of
    the other kind once the pool changed kind (a Deployment replaced by a LeaderWorkerSet of
    the same name when a replica now spans nodes, or back); the workloads kept.

    A pool whose type is still allowed is kept even when it is not desired right now (its
    nodes vanished, or a new spec is infeasible): no churn of GPU-holding pods for a
    transient or a rejected change.
    """
    allowed = {canonical_label(g) for g in service.spec.placement.gpu_types}
    desired_names = {n for _, n in desired}
    kept: list[Obj] = []
    for dep in owned:
        meta = dep["metadata"]
        kind = Kind(dep.get("kind") or Kind.DEPLOYMENT)
        kept.append(dep)
        if (kind, meta["name"]) in desired:
            continue
        if (meta.get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
            continue
        gpu_type = (meta.get("annotations") or {}).get(ANNOTATION_GPU_TYPE, "")
        replaced = meta["name"] in desired_names
        if canonical_label(gpu_type) in allowed and not replaced:
            continue
        gw.delete(kind, service.namespace, meta["name"])
        kept.pop()
        outcome.deleted.append(f"{kind}/{meta['name']}")
        why = (
            f"the pool is now a {'Deployment' if kind is Kind.LEADER_WORKER_SET else 'LeaderWorkerSet'}"
            if replaced
            else f"GPU type {gpu_type} is no longer allowed"
        )
        emit(
            gw,
            service,
            "Normal",
            Reason.POOL_REMOVED,
            f"Deleted {kind} {meta['name']}: {why}",
            outcome,
        )
    return kept


__all__ = ["owned_by", "prune"]
