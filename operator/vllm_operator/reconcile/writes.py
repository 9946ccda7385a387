"""Every write the operator makes to the API server, counted in one place, and the one Event helper.

Why a wrapper and not a counter call next to each write: the steady-state promise ("a reconcile with
nothing to change makes zero writes") is checked with `vllm_operator_api_writes_total{kind}`; a
write added somewhere without its counter line would make that metric lie. The controller and the
evaluator both hold a `CountingGateway`, so no write can bypass the count.
"""

from __future__ import annotations

from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.kube.gateway import EventRecord, Kind, KubeGateway, Obj
from vllm_operator.metrics import operator_metrics as m


class CountingGateway:
    """A KubeGateway that counts each write by kind (apply, delete, status, event, pod, eviction).

    Reads pass through unchanged; `inner` is the real or the in-memory gateway.
    """

    def __init__(self, inner: KubeGateway) -> None:
        self.inner = inner

    # -- reads ---------------------------------------------------------------------------------

    def list_nodes(self) -> list[Obj]:
        return self.inner.list_nodes()

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        return self.inner.get(kind, namespace, name)

    def list_owned(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj]:
        return self.inner.list_owned(kind, namespace, selector)

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        return self.inner.list_pods(namespace, selector)

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return self.inner.read_secret_key(namespace, name, key)

    def read_pod_log(
        self, namespace: str, pod: str, container: str, *, previous: bool, tail_lines: int
    ) -> str | None:
        return self.inner.read_pod_log(
            namespace, pod, container, previous=previous, tail_lines=tail_lines
        )

    # -- writes (each counted once, after the call succeeded) -----------------------------------

    def apply(self, obj: Obj) -> Obj:
        live = self.inner.apply(obj)
        m.API_WRITES.labels("apply").inc()
        return live

    def apply_unforced(self, obj: Obj, field_manager: str) -> Obj:
        live = self.inner.apply_unforced(obj, field_manager)
        m.API_WRITES.labels("apply").inc()
        return live

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        self.inner.delete(kind, namespace, name)
        m.API_WRITES.labels("delete").inc()

    def apply_status(self, namespace: str, name: str, status: Obj) -> None:
        self.inner.apply_status(namespace, name, status)
        m.API_WRITES.labels("status").inc()

    def emit_event(self, event: EventRecord) -> None:
        self.inner.emit_event(event)
        m.API_WRITES.labels("event").inc()

    def patch_pod_metadata(
        self, namespace: str, pod: str, labels: dict[str, str], annotations: dict[str, str]
    ) -> None:
        self.inner.patch_pod_metadata(namespace, pod, labels, annotations)
        m.API_WRITES.labels("pod").inc()

    def evict_pod(self, namespace: str, pod: str) -> bool:
        evicted = self.inner.evict_pod(namespace, pod)
        if evicted:
            m.API_WRITES.labels("eviction").inc()
        return evicted


def service_event(
    about: VLLMService | Obj, type_: str, reason: Reason, message: str
) -> EventRecord:
    """An Event about a VLLMService (the parsed model or the raw object as read)."""
    meta = about.metadata if isinstance(about, VLLMService) else about.get("metadata") or {}
    return EventRecord(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        type=type_,
        reason=str(reason),
        message=message,
    )


def node_event(node: str, uid: str, reason: Reason, message: str) -> EventRecord:
    """A Warning Event about a Node (cluster-scoped: the Event lives in `default`)."""
    return EventRecord(
        namespace="",
        name=node,
        uid=uid,
        type="Warning",
        reason=str(reason),
        message=message,
        kind=Kind.NODE,
    )


__all__ = ["CountingGateway", "node_event", "service_event"]
