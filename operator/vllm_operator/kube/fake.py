"""An in-memory KubeGateway for fast reconcile tests.

It keeps objects by (kind, namespace, name), imitates server-side apply closely enough for the
reconcile loop (the applied object replaces the stored one, metadata.uid and generation are kept),
and counts every write so tests can assert that a no-op reconcile makes zero write calls.

Field ownership is imitated for one field only, a Deployment's `spec.replicas`, because the
reconcile hands exactly that field to autoscalers (scaling.mode external): `managedFields` entries
record who owns it, a forced apply takes it, an apply that leaves it out keeps the stored count
only while another manager owns it (else the API default, 1), and `scale` writes it as the HPA
does through the scale subresource.
"""

import copy
import itertools
from collections import Counter
from typing import Any

from vllm_operator.api.service import FIELD_MANAGER
from vllm_operator.kube.gateway import (
    API_VERSIONS,
    ConflictError,
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


DEPLOYMENT_DEFAULT_REPLICAS = 1
"""What the API server sets when no manager owns a Deployment's spec.replicas any more."""

_REPLICAS_FIELDS: Obj = {"f:spec": {"f:replicas": {}}}


def _replicas_entries(obj: Obj) -> list[Obj]:
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def _replicas_entry(manager: str, operation: str = "Apply", subresource: str = "") -> Obj:
    entry: Obj = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "apps/v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": copy.deepcopy(_REPLICAS_FIELDS),
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _is_ours(entry: Obj) -> bool:
    return (
        entry.get("manager") == FIELD_MANAGER
        and entry.get("operation") == "Apply"
        and not entry.get("subresource")
    )


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
        if kind is Kind.DEPLOYMENT:
            self._apply_replicas(stored, old)
        self.objects[key] = stored
        self.writes[f"apply:{kind}"] += 1
        return copy.deepcopy(stored)

    @staticmethod
    def _apply_replicas(stored: Obj, old: Obj | None) -> None:
        """spec.replicas ownership after a forced apply of the operator's field manager."""
        others = [e for e in _replicas_entries(old or {}) if not _is_ours(e)]
        spec = stored.setdefault("spec", {})
        if "replicas" in spec:
            # force=True: the operator takes the field from everyone else.
            stored["metadata"]["managedFields"] = [_replicas_entry(FIELD_MANAGER)]
            return
        stored["metadata"]["managedFields"] = others
        if others and old is not None:
            spec["replicas"] = (old.get("spec") or {}).get("replicas")
        else:
            spec["replicas"] = DEPLOYMENT_DEFAULT_REPLICAS

    def apply_as(self, obj: Obj, field_manager: str) -> Obj:
        """Unforced apply of a Deployment's spec.replicas under another manager (a handover)."""
        self._maybe_fail()
        meta = obj["metadata"]
        key = (Kind(obj["kind"]), meta["namespace"], meta["name"])
        old = self.objects.get(key)
        if key[0] is not Kind.DEPLOYMENT or old is None:
            raise GatewayError(f"the fake applies as {field_manager} to Deployments only", 422)
        replicas = obj["spec"]["replicas"]
        entries = _replicas_entries(old)
        if old["spec"].get("replicas") != replicas and any(
            e.get("manager") != field_manager for e in entries
        ):
            raise ConflictError(f"conflict with the owner of spec.replicas of {meta['name']}", 409)
        old["spec"]["replicas"] = replicas
        if not any(e.get("manager") == field_manager for e in entries):
            entries.append(_replicas_entry(field_manager))
        old["metadata"]["managedFields"] = entries
        self.writes[f"apply_as:{key[0]}"] += 1
        return copy.deepcopy(old)

    def scale(
        self, namespace: str, name: str, replicas: int, manager: str = "kube-controller-manager"
    ) -> None:
        """What an HPA or `kubectl scale` does (an Update of the scale subresource); not counted.

        A changed value moves ownership of spec.replicas to `manager`, as the API server does."""
        obj = self.objects[(Kind.DEPLOYMENT, namespace, name)]
        if obj["spec"].get("replicas") == replicas:
            return
        obj["spec"]["replicas"] = replicas
        obj["metadata"]["managedFields"] = [_replicas_entry(manager, "Update", "scale")]

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
