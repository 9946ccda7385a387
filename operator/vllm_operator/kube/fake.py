"""An in-memory KubeGateway for fast reconcile tests.

It keeps objects by (kind, namespace, name), imitates server-side apply closely enough for the
reconcile loop (the applied object replaces the stored one, metadata.uid and generation are kept),
and counts every write so tests can assert that a no-op reconcile makes zero write calls.
"""

import copy
import itertools
from collections import Counter
from typing import Any

from vllm_operator.kube.gateway import (
    API_VERSIONS,
    EventRecord,
    GatewayError,
    Kind,
    Obj,
)


def _without_nulls(value: Any) -> Any:
    """What the API server stores: null map values are dropped (as for preserve-unknown maps)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _labels_match(obj: Obj, selector: dict[str, str]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


class FakeGateway:
    """KubeGateway in memory. Not thread-safe; one test, one instance."""

    def __init__(self) -> None:
        self.objects: dict[tuple[Kind, str, str], Obj] = {}
        self.nodes: list[Obj] = []
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.events: list[EventRecord] = []
        self.writes: Counter[str] = Counter()
        self.fail_next: list[GatewayError] = []
        self.logs: dict[tuple[str, str], str] = {}
        self.evictions: list[tuple[str, str]] = []
        self.refuse_evictions = False
        self._uids = itertools.count(1)

    # -- test helpers -------------------------------------------------------------------------

    def add(self, obj: Obj) -> Obj:
        """Store an object as if a user created it (not counted as an operator write)."""
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        meta.setdefault("generation", 1)
        self.objects[(Kind(stored["kind"]), meta["namespace"], meta["name"])] = stored
        return stored

    def total_writes(self) -> int:
        return sum(self.writes.values())

    def _maybe_fail(self) -> None:
        if self.fail_next:
            raise self.fail_next.pop(0)

    # -- KubeGateway --------------------------------------------------------------------------

    def list_nodes(self) -> list[Obj]:
        return copy.deepcopy(self.nodes)

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        obj = self.objects.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list_owned(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj]:
        return [
            copy.deepcopy(o)
            for (k, ns, _), o in sorted(self.objects.items())
            if k == kind and ns == namespace and _labels_match(o, selector)
        ]

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        return self.list_owned(Kind.POD, namespace, selector)

    def apply(self, obj: Obj) -> Obj:
        self._maybe_fail()
        kind = Kind(obj["kind"])
        if obj.get("apiVersion") != API_VERSIONS[kind]:
            raise GatewayError(f"wrong apiVersion {obj.get('apiVersion')} for {kind}", 400)
        meta = obj["metadata"]
        key = (kind, meta["namespace"], meta["name"])
        old = self.objects.get(key)
        stored = copy.deepcopy(obj)
        if old is not None:
            stored["metadata"]["uid"] = old["metadata"]["uid"]
            if "status" in old:
                stored["status"] = old["status"]
        else:
            stored["metadata"]["uid"] = f"uid-{next(self._uids)}"
        self.objects[key] = stored
        self.writes[f"apply:{kind}"] += 1
        return copy.deepcopy(stored)

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        self._maybe_fail()
        if self.objects.pop((kind, namespace, name), None) is not None:
            self.writes[f"delete:{kind}"] += 1

    def apply_status(self, namespace: str, name: str, status: Obj) -> None:
        self._maybe_fail()
        key = (Kind.VLLM_SERVICE, namespace, name)
        if key not in self.objects:
            raise GatewayError(f"vllmservices {namespace}/{name} not found", 404)
        self.objects[key]["status"] = _without_nulls(copy.deepcopy(status))
        self.writes["status"] += 1

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return self.secrets.get((namespace, name), {}).get(key)

    def emit_event(self, event: EventRecord) -> None:
        self.events.append(event)
        self.writes["event"] += 1

    def read_pod_log(
        self, namespace: str, pod: str, container: str, *, previous: bool, tail_lines: int
    ) -> str | None:
        text = self.logs.get((namespace, pod))
        return None if text is None else "\n".join(text.splitlines()[-tail_lines:])

    def patch_pod_metadata(
        self, namespace: str, pod: str, labels: dict[str, str], annotations: dict[str, str]
    ) -> None:
        self._maybe_fail()
        obj = self.objects.get((Kind.POD, namespace, pod))
        if obj is None:
            raise GatewayError(f"pods {namespace}/{pod} not found", 404)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("labels", {}).update(labels)
        meta.setdefault("annotations", {}).update(annotations)
        self.writes["pod"] += 1

    def evict_pod(self, namespace: str, pod: str) -> bool:
        self._maybe_fail()
        if self.refuse_evictions:
            return False
        self.objects.pop((Kind.POD, namespace, pod), None)
        self.evictions.append((namespace, pod))
        self.writes["eviction"] += 1
        return True
