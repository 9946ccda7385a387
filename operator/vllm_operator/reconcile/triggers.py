"""Which services a watch event concerns: event -> keys for the work queue (#32).

The watch handlers (Kopf's, and the callbacks of kube/informer.py's watches) only translate an
event into `(namespace, name)` keys with these functions and add them to the controller's queue; whether and when a key is reconciled is the queue's and the
controller's business. Mapping rules:

- a VLLMService event: the service itself, when something a reconcile reads of it other than its
  status changed (`ServiceChanges`; a deleted one too: its worker finds it gone and drops
  everything the controller remembers about it);
- an owned Deployment or LeaderWorkerSet: its controlling VLLMService (owner reference); the
  Deployments and pods come from kube/informer.py's watches, not Kopf's
  (`services_of_owned_event`, `services_of_found`);
- a pod of a multi-node group: its service (instance label), since a group's readiness is counted
  from its pods;
- a Node: every service that allows the node's GPU type, and only when something the planner or
  the status reads changed (heartbeats change nothing and map to no key).

Threading rule: `services_affected_by_node` is called from Kopf's event loop only (the node
handler is async), so the node fingerprints have one writer; `ServiceChanges` takes its own lock
(the VLLMService watches' threads and the periodic list write it); the GPU-type index is written by
queue workers (`index`) and read here, both under `_guard`, and read from a snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from vllm_operator.api.groups import LWS_LABEL_NAME
from vllm_operator.kube.bodies import Meta, NodeBody, PodBody, VLLMServiceBody
from vllm_operator.kube.gateway import Kind, Obj
from vllm_operator.reconcile.inventory import canonical_label
from vllm_operator.rendering.names import LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY

Key = tuple[str, str]

NODE_FIELDS = ("nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.count")


def owners_of(obj: Obj) -> list[Key]:
    """The VLLMService(s) controlling an object, from its owner references."""
    meta = Meta(obj.get("metadata"))
    return [
        (meta.namespace, str(ref.get("name")))
        for ref in meta.owner_references
        if ref.get("kind") == "VLLMService" and ref.get("controller")
    ]


def service_of_group_pod(pod: Obj) -> list[Key]:
    """The service of a pod in a multi-node group (a LeaderWorkerSet pool); other pods: none.

    Single-node pools need no pod trigger: their Deployment's status changes with its pods'
    readiness. A LeaderWorkerSet's status lags its pods (#32), so its pods are watched directly.
    """
    meta = PodBody(pod).meta
    labels = meta.labels
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or LWS_LABEL_NAME not in labels:
        return []
    instance = labels.get(LABEL_INSTANCE)
    return [(meta.namespace, str(instance))] if instance else []


def services_of_owned_event(kind: Kind, obj: Obj) -> list[Key]:
    """The services a watch event of an owned kind concerns (kube/informer.py's watches, #32):
    an owned Deployment's (readiness, drift), a multi-node group's pod's; a Service's, a PDB's and
    a single-node pool's pod's events none (the Deployment's status follows its pods; the other
    two are read by the reconcile their service has anyway, and a deletion is found by the
    periodic list)."""
    if kind is Kind.DEPLOYMENT:
        labels = Meta(obj.get("metadata")).labels
        return owners_of(obj) if labels.get(LABEL_MANAGED_BY) == MANAGED_BY else []
    if kind is Kind.POD:
        return service_of_group_pod(obj)
    return []


def services_of_found(kind: Kind, obj: Obj) -> list[Key]:
    """The services concerned by an object of an owned kind that a complete list found gone or
    changed behind the cache's back: its pods' by the instance label, the others' by owner."""
    meta = Meta(obj.get("metadata"))
    if kind is Kind.POD:
        instance = meta.labels.get(LABEL_INSTANCE)
        return [(meta.namespace, str(instance))] if instance else []
    return owners_of(obj)


def node_fingerprint(node: Obj, *, deleted: bool) -> tuple[Any, ...]:
    """What of a node the planner and status read; equal fingerprints: nothing to re-plan."""
    view = NodeBody(node)
    labels = view.meta.labels
    allocatable = view.allocatable
    ready = view.ready
    annotations = {k: v for k, v in view.meta.annotations.items() if k.startswith("serving.")}
    return (
        tuple(labels.get(k) for k in NODE_FIELDS),
        tuple(
            sorted(
                (k, v)
                for k, v in allocatable.items()
                if k.startswith("nvidia.com/") or k == "memory"  # memory: host-memory cap
            )
        ),
        ready,
        view.unschedulable,
        tuple(sorted(annotations.items())),
        deleted,
    )


def service_fingerprint(service: Obj) -> tuple[Any, ...]:
    """What a reconcile reads of a VLLMService besides its status: equal fingerprints, nothing
    to reconcile again.

    The reconcile reads the spec (its changes bump `metadata.generation`: the CRD has a status
    subresource, so status writes never do), the uid (owner references), the deletionTimestamp
    (`VLLMServiceBody.gone`) and the status it wrote itself. Labels and annotations are in too:
    the reconcile reads none of them today, but an edit of them is rare and a user's
    `kubectl annotate` is then a way to ask for a reconcile (Kopf's diff-base, which decided
    before #32, held them too). Hashed, since the last-applied annotation can be kilobytes.
    """
    meta = VLLMServiceBody(service).meta
    return (
        meta.uid,
        meta.generation,
        meta.raw.get("deletionTimestamp"),
        hash(tuple(sorted((str(k), str(v)) for k, v in meta.labels.items()))),
        hash(tuple(sorted((str(k), str(v)) for k, v in meta.annotations.items()))),
    )


class ServiceChanges:
    """Which VLLMService watch events need a reconcile (#32): its creation, its deletion, a
    change of its fingerprint, and the first sight of it in a listing (a restart reconciles every
    service once). A status write, the operator's own every reconcile that changes anything, has
    the fingerprint of the event before it and enqueues nothing, so a reconcile does not cause a
    no-op one. A re-listing (Kopf lists again after a watch's 410 Gone) enqueues what changed
    while the watch was down, not every service.

    Memory: one fingerprint per existing service, dropped on DELETED and when a complete list no
    longer returns the service (`forget`). Writers: the VLLMService watches (kube/informer.py, one
    thread per watched namespace, so each key has one) and the periodic list on Kopf's event loop
    (`forget`); the lock makes each read-and-replace one step.
    """

    def __init__(self) -> None:
        self._seen: dict[Key, tuple[Any, ...]] = {}
        self._guard = threading.Lock()

    def wants(self, event_type: str | None, service: Obj) -> bool:
        """Whether this event (type None: a listing) needs a reconcile of its service."""
        key = VLLMServiceBody(service).key
        if event_type == "DELETED":
            self.forget(key)
            return True
        fingerprint = service_fingerprint(service)
        with self._guard:
            previous = self._seen.get(key)
            self._seen[key] = fingerprint
        return event_type == "ADDED" or previous != fingerprint

    def forget(self, key: Key) -> None:
        with self._guard:
            self._seen.pop(key, None)

    def __len__(self) -> int:
        return len(self._seen)


class Triggers:
    """The state event mapping needs: each service's allowed GPU types, each node's last
    fingerprint."""

    def __init__(self, on_nodes_changed: Callable[[], object] = lambda: None) -> None:
        self._on_nodes_changed = on_nodes_changed
        self._gpu_index: dict[Key, frozenset[str]] = {}
        self._node_fingerprints: dict[str, tuple[Any, ...]] = {}
        self._guard = threading.Lock()

    def index(self, key: Key, gpu_types: list[str]) -> None:
        """A reconcile learnt which GPU types the service allows (for node events)."""
        allowed = frozenset(canonical_label(g) for g in gpu_types)
        with self._guard:
            self._gpu_index[key] = allowed

    def forget(self, key: Key) -> None:
        with self._guard:
            self._gpu_index.pop(key, None)

    def services_affected_by_node(self, node: Obj, *, deleted: bool) -> list[Key]:
        """Services to re-plan after a node event; heartbeats and unrelated nodes yield none."""
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        labels = meta.get("labels") or {}
        fingerprint = node_fingerprint(node, deleted=deleted)
        with self._guard:
            previous = self._node_fingerprints.get(name)
            if deleted:
                self._node_fingerprints.pop(name, None)
            else:
                self._node_fingerprints[name] = fingerprint
            if previous == fingerprint:
                return []
            index = list(self._gpu_index.items())  # a snapshot: workers write the index
        self._on_nodes_changed()
        products = {labels.get("nvidia.com/gpu.product")}
        if previous is not None:
            products.add(previous[0][0])
        wanted = {canonical_label(p) for p in products if p}
        if not wanted:
            return []
        return sorted(k for k, allowed in index if allowed & wanted)

    def services_affected_by_products(self, products: set[str]) -> list[Key]:
        """Services to re-plan after a DRA ResourceSlice event (#30): those allowing a GPU type
        the slice publishes; the node view is rebuilt on the next read."""
        with self._guard:
            index = list(self._gpu_index.items())  # a snapshot: workers write the index
        self._on_nodes_changed()
        wanted = {canonical_label(p) for p in products if p}
        return sorted(k for k, allowed in index if allowed & wanted)


__all__ = [
    "NODE_FIELDS",
    "ServiceChanges",
    "Triggers",
    "node_fingerprint",
    "owners_of",
    "service_fingerprint",
    "service_of_group_pod",
    "services_of_found",
    "services_of_owned_event",
]
