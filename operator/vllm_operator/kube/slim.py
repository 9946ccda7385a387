"""Shedding, from the bodies Kopf holds, what the watch cache drops anyway (#32 peak RSS).

Why: on a restart Kopf lists every watched kind and keeps each listed object's parsed body in its
per-object task until its start gate opens, i.e. until the last object of every indexed kind has
gone through the index handlers (kopf/_core/reactor/processing.py, handlers/kopf_gate.py). At
1000 services that is ~6,000 bodies held as Python dicts at once: the operator's peak RSS after a
restart was about twice its converged peak (docs/controller-benchmark.md "Memory"). The largest
part no reader uses: `metadata.managedFields` (per field-manager field sets, about half of a pod's
or a node's JSON) and a node's image list.

`shed` removes from the body in place exactly what `kube/cache.py`'s `_slim` leaves out of a
stored object: other managers' managedFields entries (the operator's own stay: reconcile/diff.py
and replicas.py read them), all of a pod's, a node's and a VLLMService's, and a node's
`status.images`; the cache's `_slim` asks `kept_managed_fields` for the entries it keeps. It runs in
the index handlers right after the body went into the watch cache, before Kopf's gate, so the
bodies waiting there are the slim ones. What runs after the gate sees nothing it reads removed:
Kopf builds no diff base (handlers/kopf_essence.py), the event handlers read labels,
annotations, owner references, names, a VLLMService's generation, uid and deletionTimestamp and a
node's labels, capacity and conditions (reconcile/triggers.py), and a body the
event handlers hand to the cache again (`WatchCache.listed`) is stored as it would have been.

Kopf's `Body` is a read-only view, but its items are the parsed dicts themselves
(kopf/_cogs/structs/dicts.py `MappingView.__getitem__` resolves into the source), so the
nested `metadata` and `status` are changed where Kopf keeps them; a body whose items are not
mutable mappings is left as it is.
"""

from collections.abc import Mapping, MutableMapping
from typing import Any

from vllm_operator.api.service import FIELD_MANAGER
from vllm_operator.kube.gateway import Kind

UNMANAGED_KINDS: frozenset[Kind] = frozenset({Kind.POD, Kind.NODE, Kind.VLLM_SERVICE})
"""Kinds whose managedFields no reader uses at all: the operator applies no pod or node, and
writes a VLLMService's status without comparing field sets (reconcile/diff.py `owned_fields`
is read for the workloads it applies and for a Deployment's replicas only)."""


def kept_managed_fields(kind: Kind, entries: object) -> list[Any]:
    """The managedFields entries kept of an object of `kind`: the operator's own, or none."""
    if kind in UNMANAGED_KINDS or not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, Mapping) and e.get("manager") == FIELD_MANAGER]


def shed(kind: Kind, body: Mapping[str, Any]) -> None:
    """Remove in place what no reader of `body` uses (see the module docstring)."""
    meta = body.get("metadata")
    if isinstance(meta, MutableMapping) and "managedFields" in meta:
        kept = kept_managed_fields(kind, meta["managedFields"])
        if kept:
            if len(kept) != len(meta["managedFields"]):
                meta["managedFields"] = kept
        else:
            del meta["managedFields"]
    status = body.get("status")
    if kind is Kind.NODE and isinstance(status, MutableMapping) and "images" in status:
        del status["images"]


__all__ = ["UNMANAGED_KINDS", "kept_managed_fields", "shed"]
