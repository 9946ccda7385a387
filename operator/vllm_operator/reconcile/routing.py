"""The controller's routing step (#31): the InferencePool and the rendered Endpoint Picker
applied when spec.routing asks for them, deleted when it no longer does, and status.routing.

Kept apart from controller.py (like dra_apply.py) so the reconcile gains one call, not the logic.
A service in mode service that never had an InferencePool costs no read: the prune runs only when
the previous status says routing objects were rendered (status.routing), or when the mode is
inferencePool (an endpointPickerRef added later leaves a rendered picker to delete).
"""

from dataclasses import dataclass, field

from vllm_operator.api.routing import RoutingMode
from vllm_operator.api.service import VLLMService
from vllm_operator.api.status import RoutingStatus, VLLMServiceStatus
from vllm_operator.kube.gateway import Kind, KubeGateway, Obj
from vllm_operator.reconcile.diff import needs_apply
from vllm_operator.rendering.routing import (
    inference_pool_name,
    picker_name,
    picker_ref,
    render_endpoint_picker,
    render_inference_pool,
    render_routing,
)


@dataclass
class RoutingOutcome:
    """What the step wrote and the status.routing it observed (None: no InferencePool)."""

    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    status: RoutingStatus | None = None


def _owned(obj: Obj, service: VLLMService) -> bool:
    uid = service.metadata.get("uid")
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("uid") == uid for o in owners)


def _ready(deployment: Obj | None) -> bool:
    return int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0) >= 1


def _all_routing_objects(service: VLLMService) -> list[tuple[Kind, str]]:
    """Every (kind, name) the routing step can ever own for this service."""
    objs = [*render_endpoint_picker(service), render_inference_pool(service)]
    return [(Kind(o["kind"]), o["metadata"]["name"]) for o in objs]


def reconcile_routing(
    gw: KubeGateway, service: VLLMService, old_status: VLLMServiceStatus
) -> RoutingOutcome:
    """Apply what spec.routing asks for (only what differs), delete what it no longer asks for
    (only objects this service owns), and report the pool and the picker's readiness."""
    out = RoutingOutcome()
    desired = render_routing(service)
    mode = service.spec.routing.mode
    if not desired and old_status.routing is None:
        return out
    namespace = service.namespace
    live_by_key: dict[tuple[Kind, str], Obj | None] = {}
    for obj in desired:
        kind, name = Kind(obj["kind"]), obj["metadata"]["name"]
        live = gw.get(kind, namespace, name)
        if live is not None and not _owned(live, service):
            # Someone else's object of that name: never taken over (the controller's
            # name-conflict condition and Warning name it, as for a pool's Deployment).
            out.conflicts.append(f"{kind} {namespace}/{name}")
            continue
        if needs_apply(obj, live):
            live = gw.apply(obj)
            out.applied.append(f"{kind}/{name}")
        live_by_key[(kind, name)] = live
    wanted = {(Kind(o["kind"]), o["metadata"]["name"]) for o in desired}
    for kind, name in _all_routing_objects(service):
        if (kind, name) in wanted:
            continue
        live = gw.get(kind, namespace, name)
        if live is not None and _owned(live, service):
            gw.delete(kind, namespace, name)
            out.deleted.append(f"{kind}/{name}")
    if mode == RoutingMode.INFERENCE_POOL:
        picker, _ = picker_ref(service)
        rendered = service.spec.routing.endpoint_picker_ref is None
        picker_live = live_by_key.get((Kind.DEPLOYMENT, picker_name(service)))
        out.status = RoutingStatus(
            inference_pool=inference_pool_name(service),
            endpoint_picker=picker,
            picker_ready=_ready(picker_live) if rendered else None,
        )
    return out


def with_routing(status: VLLMServiceStatus, routing: RoutingOutcome) -> VLLMServiceStatus:
    """status.routing from the step's outcome."""
    return status.model_copy(update={"routing": routing.status})
