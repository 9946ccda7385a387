"""Hand a pool's replica count to an autoscaler without resetting it (scaling.mode external).

Why this needs care: under server-side apply, a field that a manager stops applying is removed from
the live object when no other manager owns it, and for a Deployment's `spec.replicas` that means
the default, 1 replica. So an operator that simply stopped rendering `spec.replicas` would scale a
running pool to 1 (and a new pool would start at 1, not at spec.replicas) before any autoscaler
wrote the field.

Kubernetes documents the safe transfer ("Server-Side Apply: Transferring ownership", the
`handover-to-hpa` example): apply a configuration holding only `spec.replicas`, at its current
value, under a separate field manager (not forced: a conflict means the autoscaler already owns
the field, which is just as good), then apply the main configuration without `spec.replicas`. The
two managers shared the field, so the release leaves the value alone; the next write of the
autoscaler (an Update of the scale subresource) takes the field and the handover manager's entry
disappears on its own.

A new pool is created with spec.replicas under the operator's manager, then handed over the same
way in the same reconcile (three writes, once per pool): creating without the field would start 1
replica (a GPU pod loading a model) even when spec.replicas is 0 or larger.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from vllm_operator.kube.gateway import ConflictError, Obj
from vllm_operator.reconcile.diff import owned_fields

log = logging.getLogger(__name__)

HANDOVER_MANAGER = "vllm-operator-replicas-handover"
"""The field manager that holds spec.replicas between the operator's release and the
autoscaler's first write (the role of `handover-to-hpa` in the Kubernetes documentation)."""


class _Applier(Protocol):
    def apply(self, obj: Obj) -> Obj: ...

    def apply_unforced(self, obj: Obj, field_manager: str) -> Obj: ...


def owns_replicas(live: Obj) -> bool:
    """Whether the operator's field manager owns the live Deployment's spec.replicas."""
    owned = owned_fields(live) or {}
    spec: Any = owned.get("f:spec") or {}
    return isinstance(spec, dict) and "f:replicas" in spec


def _identity(desired: Obj) -> Obj:
    meta = desired["metadata"]
    return {
        "apiVersion": desired["apiVersion"],
        "kind": desired["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }


def replicas_only(desired: Obj, replicas: int) -> Obj:
    """The handover configuration: the Deployment's identity and spec.replicas, nothing else."""
    return {**_identity(desired), "spec": {"replicas": replicas}}


def with_replicas(desired: Obj, replicas: int) -> Obj:
    """The desired Deployment with a replica count (what a new pool is created with)."""
    return {**desired, "spec": {"replicas": replicas, **desired["spec"]}}


def hand_over_replicas(
    gw: _Applier, desired: Obj, live: Obj | None, initial: int
) -> tuple[Obj, list[str]]:
    """Create the pool with `initial` replicas if needed, and let a handover manager share
    spec.replicas while the operator owns it; the caller's next apply of `desired` (rendered
    without replicas) then releases the field and the live count stays.

    Returns the live object and a description of each write made.
    """
    name = desired["metadata"]["name"]
    writes: list[str] = []
    if live is None:
        live = gw.apply(with_replicas(desired, initial))
        writes.append(f"Deployment/{name}")
    if not owns_replicas(live):
        return live, writes
    count = int((live.get("spec") or {}).get("replicas") or 0)
    namespace = desired["metadata"]["namespace"]
    try:
        gw.apply_unforced(replicas_only(desired, count), HANDOVER_MANAGER)
    except ConflictError:
        # Another manager (the autoscaler) already owns spec.replicas at another value: the
        # release cannot reset it either.
        log.info(
            "Skipped replicas handover deployment=%s/%s: owned by another manager",
            namespace,
            name,
        )
        return live, writes
    writes.append(f"Deployment/{name} replicas handover")
    log.info("Handed over replicas deployment=%s/%s replicas=%d", namespace, name, count)
    return live, writes
