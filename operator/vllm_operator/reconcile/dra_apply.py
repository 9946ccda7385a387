"""The controller's DRA steps (#30): claim templates applied and pruned, slice mismatches reported.

Kept apart from controller.py so the reconcile there gains three calls, not the logic.
"""

import threading
from collections.abc import Iterable, Sequence

from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.kube.gateway import POOL_KINDS, EventRecord, Kind, KubeGateway, Obj
from vllm_operator.reconcile.diff import needs_apply
from vllm_operator.reconcile.pools import PoolOutcome
from vllm_operator.reconcile.slices import Mismatch
from vllm_operator.reconcile.writes import node_event
from vllm_operator.rendering.names import selector_labels


def apply_claim_template(gw: KubeGateway, template: Obj | None, workload: Obj | None) -> list[str]:
    """Apply a pool's ResourceClaimTemplate when it is missing or differs; what was applied.

    `workload` (the live Deployment or LeaderWorkerSet) is unused today: the template's name
    carries a hash of its claim, so a new claim is a new template and a live one never changes
    (its spec is immutable on the server).
    """
    del workload
    if template is None:
        return []
    meta = template["metadata"]
    live = gw.get(Kind.RESOURCE_CLAIM_TEMPLATE, meta["namespace"], meta["name"])
    if not needs_apply(template, live):
        return []
    gw.apply(template)
    return [f"{Kind.RESOURCE_CLAIM_TEMPLATE}/{meta['name']}"]


def _referenced(workload: Obj) -> set[str]:
    spec = workload.get("spec") or {}
    pods = [((spec.get("template") or {}).get("spec")) or {}]
    group = spec.get("leaderWorkerTemplate") or {}
    for key in ("leaderTemplate", "workerTemplate"):
        pods.append(((group.get(key) or {}).get("spec")) or {})
    return {
        str(claim.get("resourceClaimTemplateName"))
        for pod in pods
        for claim in pod.get("resourceClaims") or []
        if claim.get("resourceClaimTemplateName")
    }


def prune_claim_templates(
    gw: KubeGateway, service: VLLMService, pools: Sequence[PoolOutcome]
) -> list[str]:
    """Delete the service's claim templates that neither a desired pool nor a live workload of
    the service refers to (a new plan's claim got a new template; the pods of the old one are
    gone or going). What was deleted."""
    namespace, selector = service.namespace, selector_labels(service.name)
    templates = gw.list_owned(Kind.RESOURCE_CLAIM_TEMPLATE, namespace, selector)
    if not templates:
        return []
    keep = {p.claim_template["metadata"]["name"] for p in pools if p.claim_template is not None}
    for kind in POOL_KINDS:
        for workload in gw.list_owned(kind, namespace, selector):
            keep |= _referenced(workload)
    deleted = []
    for template in templates:
        meta = template.get("metadata") or {}
        owners = meta.get("ownerReferences") or []
        ours = any(o.get("uid") == service.metadata.get("uid") for o in owners)
        if ours and meta.get("name") not in keep:
            gw.delete(Kind.RESOURCE_CLAIM_TEMPLATE, namespace, str(meta["name"]))
            deleted.append(f"{Kind.RESOURCE_CLAIM_TEMPLATE}/{meta['name']}")
    return deleted


class SliceMismatches:
    """One Warning Event per node and distinct disagreement (not one per reconcile)."""

    def __init__(self) -> None:
        self._warned: dict[str, str] = {}
        self._guard = threading.Lock()

    def new_events(self, mismatches: Iterable[Mismatch]) -> list[EventRecord]:
        events = []
        with self._guard:
            for mismatch in mismatches:
                if self._warned.get(mismatch.node) == mismatch.message:
                    continue
                self._warned[mismatch.node] = mismatch.message
                events.append(
                    node_event(
                        mismatch.node,
                        mismatch.uid,
                        Reason.GPU_INVENTORY_MISMATCH,
                        f"Planned from the DRA ResourceSlices: {mismatch.message}",
                    )
                )
        return events
