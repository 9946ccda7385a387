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

    `inner` is the real or the in-memory gateway. Reads pass through, counted only with
    `count_reads` (`vllm_operator_api_reads_total`): the operator wraps the real gateway in a
    read-counting one *below* its watch cache, so the metric counts what reaches the API server,
    not what the cache answers.
    """

    def __init__(
        self, inner: KubeGateway, *, count_reads: bool = False, count_writes: bool = True
    ) -> None:
        self.inner = inner
        self._count_reads = count_reads
        self._count_writes = count_writes
        self._writes = 0

    @property
    def writes(self) -> int:
        """Writes made through this gateway so far (any thread): a caller compares two readings
        to learn whether anything was written between them (another thread's write only makes
        it look written, never the other way)."""
        return self._writes

    def _wrote(self, what: str) -> None:
        self._writes += 1
        if self._count_writes:
            m.API_WRITES.labels(what).inc()

    def _read(self, what: str) -> None:
        if self._count_reads:
            m.API_READS.labels(what).inc()

    # -- reads ---------------------------------------------------------------------------------

    def list_nodes(self) -> list[Obj]:
        self._read("list:Node")
        return self.inner.list_nodes()

    def list_resource_slices(self) -> list[Obj]:
        self._read("list:ResourceSlice")
        return self.inner.list_resource_slices()

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        self._read(f"get:{kind}")
        return self.inner.get(kind, namespace, name)

    def list_owned(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj]:
        self._read(f"list:{kind}")
        return self.inner.list_owned(kind, namespace, selector)

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        self._read("list:Pod")
        return self.inner.list_pods(namespace, selector)

    def list_services(self, namespace: str | None = None, fleet_of: str | None = None) -> list[Obj]:
        self._read("list:VLLMService")
        return self.inner.list_services(namespace, fleet_of)

    def gpu_requests_by_node(self) -> dict[str, dict[str, int]]:
        self._read("list:Pod")
        return self.inner.gpu_requests_by_node()

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        self._read("get:Secret")
        return self.inner.read_secret_key(namespace, name, key)

    def read_pod_log(
        self, namespace: str, pod: str, container: str, *, previous: bool, tail_lines: int
    ) -> str | None:
        self._read("log:Pod")
        return self.inner.read_pod_log(
            namespace, pod, container, previous=previous, tail_lines=tail_lines
        )

    def versions(
        self,
        kind: Kind,
        namespace: str,
        *,
        name: str | None = None,
        selector: dict[str, str] | None = None,
    ) -> tuple[tuple[str, int], ...] | None:
        """The watch cache's (name, resourceVersion) pairs of what `get` / `list_pods` would
        return (kube/cache.py `CachedGateway.versions`), not a read of the API server: None when
        `inner` keeps no cache or the cache cannot answer from memory."""
        versions = getattr(self.inner, "versions", None)
        if versions is None:
            return None
        found: tuple[tuple[str, int], ...] | None = versions(
            kind, namespace, name=name, selector=selector
        )
        return found

    # -- writes (each counted once, after the call succeeded) -----------------------------------

    def apply(self, obj: Obj) -> Obj:
        live = self.inner.apply(obj)
        self._wrote("apply")
        return live

    def apply_unforced(self, obj: Obj, field_manager: str) -> Obj:
        live = self.inner.apply_unforced(obj, field_manager)
        self._wrote("apply")
        return live

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        self.inner.delete(kind, namespace, name)
        self._wrote("delete")

    def apply_status(self, namespace: str, name: str, status: Obj) -> Obj | None:
        live = self.inner.apply_status(namespace, name, status)
        self._wrote("status")
        return live

    def emit_event(self, event: EventRecord) -> None:
        self.inner.emit_event(event)
        self._wrote("event")

    def patch_pod_metadata(
        self, namespace: str, pod: str, labels: dict[str, str], annotations: dict[str, str]
    ) -> None:
        self.inner.patch_pod_metadata(namespace, pod, labels, annotations)
        self._wrote("pod")

    def remove_service_finalizer(
        self, namespace: str, name: str, finalizer: str, index: int
    ) -> None:
        self.inner.remove_service_finalizer(namespace, name, finalizer, index)
        self._wrote("finalizer")

    def evict_pod(self, namespace: str, pod: str) -> bool:
        evicted = self.inner.evict_pod(namespace, pod)
        if evicted:
            self._wrote("eviction")
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
