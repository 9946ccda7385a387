"""An in-memory KubeGateway for fast reconcile tests.

It keeps objects by (kind, namespace, name) and counts every write, so tests can assert that a
no-op reconcile makes zero write calls. Where the reconcile loop depends on what the API server
does, the fake does the same, and tests/kube/contract.py runs one suite against both gateways to
keep it so:

- only the kinds the real gateway has calls for (gateway.APPLIED_KINDS, ...) are accepted;
- names (per kind), label keys and values, annotation keys are validated as the API server does
  (422);
- `metadata.generation` is 1 on create and bumped only by a spec change (for a Deployment also an
  annotation change), never by labels or status, as the registry strategies do;
- server-side apply is modelled by field ownership: each field manager owns the leaf fields (and
  keyed list entries) of its last applied object; an apply sets its fields, takes over those whose
  value it changes, and removes the fields it owned before and no longer applies unless another
  manager owns them. `managedFields` carries one Apply entry per manager in the fieldsV1 form that
  reconcile.diff reads.
"""

import copy
import itertools
import json
import re
from collections import Counter
from typing import Any

from vllm_operator.api.service import FIELD_MANAGER
from vllm_operator.kube.dra_validation import (
    claim_template_problems,
    claim_template_update_problems,
    resource_slice_problems,
)
from vllm_operator.kube.gateway import (
    API_VERSIONS,
    APPLIED_KINDS,
    DELETED_KINDS,
    LISTED_KINDS,
    READ_KINDS,
    RELISTED_KINDS,
    ConflictError,
    EventRecord,
    GatewayError,
    Kind,
    Obj,
    require_kind,
)
from vllm_operator.kube.pods import add_claims, gpu_claim

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

# Kinds whose names are DNS-1035 labels (a Service name becomes a DNS label and an env var prefix;
# the VLLMService CRD refuses other names by its own rule; a LeaderWorkerSet's is checked apart, see
# _validate). A PodDisruptionBudget name is only
# checked as a path segment (kube-apiserver 1.35 accepts "UPPER", "a b", 254 characters: measured
# by e2e/test_gateway_contract.py). Every other kind takes a DNS-1123 subdomain.
_DNS1035_NAMED = frozenset({Kind.SERVICE, Kind.VLLM_SERVICE})
_PATH_SEGMENT_NAMED = frozenset({Kind.PDB})

# Key fields of the associative lists the operator renders (containers, env, volumes by name;
# volumeMounts by mountPath; ports by containerPort or port). Any other list is atomic, as
# args, command and tolerations are on the real server.
_LIST_KEYS = ("name", "mountPath", "containerPort", "port")

# Identity and server-owned fields: never part of an applied configuration.
_SYSTEM_METADATA = frozenset(
    {"name", "namespace", "uid", "generation", "resourceVersion", "managedFields"}
)

Path = tuple[str, ...]


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


# -- validation (apimachinery's validation.IsDNS1123Subdomain, IsQualifiedName, ...) --------------


def _name_problem(kind: Kind, name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return "metadata.name: Required value"
    if kind in _PATH_SEGMENT_NAMED:
        if name in (".", "..") or "/" in name or "%" in name:
            return f"metadata.name: Invalid value: {name!r}: may not contain '/' or '%'"
    elif kind in _DNS1035_NAMED:
        if len(name) > 63 or not _DNS1035_LABEL.fullmatch(name):
            return (
                f"metadata.name: Invalid value: {name!r}: a DNS-1035 label (at most 63 characters)"
            )
    elif len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        return f"metadata.name: Invalid value: {name!r}: a DNS-1123 subdomain"
    return None


def _qualified_name_problem(key: Any) -> str | None:
    if not isinstance(key, str):
        return "a string"
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (
        key.count("/") == 1
        and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix))
    ):
        return "a DNS-1123 subdomain prefix"
    if len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        return "a qualified name (at most 63 characters)"
    return None


def _metadata_problems(kind: Kind, meta: Obj) -> list[str]:
    problems = [p for p in [_name_problem(kind, meta.get("name"))] if p]
    for key, value in (meta.get("labels") or {}).items():
        if (why := _qualified_name_problem(key)) is not None:
            problems.append(f"metadata.labels: Invalid value: {key!r}: {why}")
        if (
            not isinstance(value, str)
            or len(value) > 63
            or (value and not _QUALIFIED_NAME.fullmatch(value))
        ):
            problems.append(
                f"metadata.labels: Invalid value: {value!r}: a label value (at most 63 characters)"
            )
    for key in meta.get("annotations") or {}:
        if (why := _qualified_name_problem(key)) is not None:
            problems.append(f"metadata.annotations: Invalid value: {key!r}: {why}")
    return problems


def _validate(kind: Kind, obj: Obj, what: str) -> None:
    meta = obj.get("metadata") or {}
    problems = _metadata_problems(kind, meta)
    if kind is Kind.LEADER_WORKER_SET and len(str(meta.get("name", ""))) > 63:
        problems.append("metadata.name: Invalid value: must be no more than 63 characters")
    if problems:
        raise GatewayError(f"{what} failed: 422 Unprocessable Entity: {'; '.join(problems)}", 422)
    name = meta.get("name")
    if kind is Kind.LEADER_WORKER_SET and not _DNS1035_LABEL.fullmatch(str(name)):
        # The API server accepts the name; the LeaderWorkerSet controller's validating webhook
        # denies it (403), because the set's name names its headless Service.
        raise GatewayError(
            f'{what} failed: 403 Forbidden: admission webhook "vleaderworkerset.kb.io" denied the '
            f"request: metadata.name: Invalid value: {name!r}: a DNS-1035 label",
            403,
        )


# -- generation (the registry strategies' PrepareForUpdate) --------------------------------------


def _generation_input(kind: Kind, obj: Obj) -> Any:
    """What bumps `metadata.generation` when it changes; None for kinds without a generation."""
    if kind is Kind.DEPLOYMENT:
        # Annotations too: they are copied to the ReplicaSets.
        return (obj.get("spec"), (obj.get("metadata") or {}).get("annotations") or {})
    if kind in (Kind.PDB, Kind.VLLM_SERVICE, Kind.LEADER_WORKER_SET):
        # A custom resource with a status subresource: only spec changes bump it.
        return obj.get("spec")
    return None


# -- server-side apply by field ownership ----------------------------------------------------------


def _item_key(item: Any) -> str | None:
    """An associative list entry's key as fieldsV1 spells it (`k:{"name":"vllm"}`), or None."""
    if not isinstance(item, dict):
        return None
    for field in _LIST_KEYS:
        if field in item:
            return "k:" + json.dumps({field: item[field]}, separators=(",", ":"))
    return None


def _is_keyed(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_item_key(v) is not None for v in value)


def _field_paths(value: Any, prefix: Path = ()) -> set[Path]:
    """The fields an applied configuration sets: leaves, and each keyed list entry itself."""
    paths: set[Path] = set()
    if isinstance(value, dict) and value:
        for k, v in value.items():
            paths |= _field_paths(v, (*prefix, f"f:{k}"))
    elif _is_keyed(value):
        for item in value:
            entry = (*prefix, str(_item_key(item)))
            paths.add(entry)
            paths |= _field_paths(item, entry)
    elif prefix:
        paths.add(prefix)
    return paths


def _applied_paths(obj: Obj) -> set[Path]:
    config = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
    meta = {k: v for k, v in (config.get("metadata") or {}).items() if k not in _SYSTEM_METADATA}
    if meta:
        config["metadata"] = meta
    else:
        config.pop("metadata", None)
    return _field_paths(config)


def _lookup(obj: Any, path: Path) -> tuple[bool, Any]:
    """(found, value) at `path` in an object."""
    node = obj
    for step in path:
        if step.startswith("f:") and isinstance(node, dict) and step[2:] in node:
            node = node[step[2:]]
        elif step.startswith("k:") and isinstance(node, list):
            found = [v for v in node if _item_key(v) == step]
            if not found:
                return False, None
            node = found[0]
        else:
            return False, None
    return True, node


def _remove(obj: Obj, path: Path) -> None:
    """Remove the field or list entry at `path` (and maps or lists it leaves empty)."""
    parents: list[tuple[Any, str]] = []
    node: Any = obj
    for step in path:
        parents.append((node, step))
        found, node = _lookup(node, (step,))
        if not found:
            return
    for parent, step in reversed(parents):
        if step.startswith("f:"):
            parent.pop(step[2:], None)
        else:
            parent[:] = [v for v in parent if _item_key(v) != step]
        if parent or parent is obj:
            return
        # An emptied map or list goes too: continue one level up.


def _merge(live: Any, config: Any) -> Any:
    """`config` applied over `live`: maps merged, keyed lists merged by key, the rest replaced."""
    if isinstance(config, dict) and config and isinstance(live, dict):
        merged = dict(live)
        for k, v in config.items():
            merged[k] = _merge(live[k], v) if k in live else copy.deepcopy(v)
        return merged
    if _is_keyed(config) and isinstance(live, list):
        merged_list = list(live)
        for item in config:
            key = _item_key(item)
            at = next((i for i, v in enumerate(merged_list) if _item_key(v) == key), None)
            if at is None:
                merged_list.append(copy.deepcopy(item))
            else:
                merged_list[at] = _merge(merged_list[at], item)
        return merged_list
    return copy.deepcopy(config)


def _fields_v1(paths: set[Path]) -> Obj:
    """The fieldsV1 tree of a set of paths (`.` marks an owned list entry, as on the server)."""
    tree: Obj = {}
    for path in paths:
        node = tree
        for step in path:
            node = node.setdefault(step, {})
        if path[-1].startswith("k:"):
            node["."] = {}
    return tree


class FakeGateway:
    """KubeGateway in memory. Not thread-safe; one test, one instance."""

    def __init__(self) -> None:
        self.objects: dict[tuple[Kind, str, str], Obj] = {}
        self.nodes: list[Obj] = []
        self.resource_slices: list[Obj] = []
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.events: list[EventRecord] = []
        self.writes: Counter[str] = Counter()
        self.fail_next: list[GatewayError] = []
        self.logs: dict[tuple[str, str], str] = {}
        self.evictions: list[tuple[str, str]] = []
        # `list_page` calls per kind (the periodic re-list's reads, kube/relist.py).
        self.pages: Counter[Kind] = Counter()
        self.refuse_evictions = False
        self._uids = itertools.count(1)
        self._versions = itertools.count(1)
        # Field ownership by object uid: manager -> paths it owns through Apply.
        self._owners: dict[str, dict[str, set[Path]]] = {}

    # -- test helpers -------------------------------------------------------------------------

    def next_resource_version(self) -> str:
        """A resourceVersion newer than every one this fake handed out (a test's watch stand-in
        numbers the objects it delivers from here, so that the fake's writes and its versions
        are ordered as the API server orders them)."""
        return str(next(self._versions))

    def _bump(self, obj: Obj, old: Obj | None) -> None:
        """What the API server does on a write that changes an object: a new resourceVersion.
        Only for an object that carries one (most tests' objects do not, and the watch cache
        then compares nothing); an unchanged object keeps it, as a no-op apply does."""
        meta = obj.setdefault("metadata", {})
        held = (old or {}).get("metadata", {}).get("resourceVersion")
        if held is None:
            return
        before = {k: v for k, v in (old or {}).items() if k != "metadata"}
        after = {k: v for k, v in obj.items() if k != "metadata"}
        same_meta = {k: v for k, v in meta.items() if k != "resourceVersion"} == {
            k: v for k, v in (old or {}).get("metadata", {}).items() if k != "resourceVersion"
        }
        meta["resourceVersion"] = (
            held if before == after and same_meta else self.next_resource_version()
        )

    def add(self, obj: Obj) -> Obj:
        """Store an object as if a user created it (not counted as an operator write).

        Its name and labels are validated as the API server would; nothing else is checked, and
        `metadata.generation` is taken as given (default 1).
        """
        stored = copy.deepcopy(obj)
        kind = Kind(stored["kind"])
        _validate(kind, stored, f"create {kind}")
        meta = stored.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        meta.setdefault("generation", 1)
        self.objects[(kind, meta["namespace"], meta["name"])] = stored
        return stored

    def apply_as(self, obj: Obj, manager: str) -> Obj:
        """Server-side apply (forced) by another field manager, as a webhook or a person would."""
        kind = Kind(obj["kind"])
        require_kind(kind, APPLIED_KINDS, "apply")
        return self._apply(kind, obj, manager)

    def scale(
        self, namespace: str, name: str, replicas: int, manager: str = "kube-controller-manager"
    ) -> None:
        """What an HPA or `kubectl scale` does to a Deployment (not counted as an operator write).

        The scale subresource is an update: a changed value moves ownership of spec.replicas to
        `manager` (modelled as its forced apply); an unchanged one claims nothing.
        """
        live = self.objects[(Kind.DEPLOYMENT, namespace, name)]
        if (live.get("spec") or {}).get("replicas") == replicas:
            return
        self.apply_as(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"replicas": replicas},
            },
            manager,
        )

    def add_resource_slice(self, obj: Obj) -> Obj:
        """Publish a ResourceSlice as a DRA driver would, refused (422) as the server refuses it."""
        stored = copy.deepcopy(obj)
        _validate(Kind.RESOURCE_SLICE, stored, "create ResourceSlice")
        problems = resource_slice_problems(stored)
        if problems:
            raise GatewayError(
                f"create ResourceSlice failed: 422 Unprocessable Entity: {'; '.join(problems)}",
                422,
            )
        self.resource_slices.append(stored)
        return stored

    def total_writes(self) -> int:
        return sum(self.writes.values())

    def _maybe_fail(self) -> None:
        if self.fail_next:
            raise self.fail_next.pop(0)

    # -- KubeGateway --------------------------------------------------------------------------

    def list_nodes(self) -> list[Obj]:
        return copy.deepcopy(self.nodes)

    def list_resource_slices(self) -> list[Obj]:
        return copy.deepcopy(self.resource_slices)

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        require_kind(kind, READ_KINDS, "get")
        obj = self.objects.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list_owned(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj]:
        require_kind(kind, LISTED_KINDS, "list")
        return self._list(kind, namespace, selector)

    def _list(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj]:
        return [
            copy.deepcopy(o)
            for (k, ns, _), o in sorted(self.objects.items())
            if k == kind and ns == namespace and _labels_match(o, selector)
        ]

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        return self._list(Kind.POD, namespace, selector)

    def list_services(self, namespace: str | None = None, fleet_of: str | None = None) -> list[Obj]:
        return [
            copy.deepcopy(o)
            for (k, ns, _), o in sorted(self.objects.items())
            if k == Kind.VLLM_SERVICE and namespace in (None, ns)
        ]

    def list_page(
        self,
        kind: Kind,
        namespace: str | None,
        label_selector: str,
        *,
        limit: int,
        continue_token: str | None,
    ) -> tuple[list[Obj], str | None]:
        """`ApiGateway.list_page` in memory: the continue token is the next item's index (no
        snapshot: a test changes nothing between the pages of one list)."""
        require_kind(kind, RELISTED_KINDS, "list pages of")
        self.pages[kind] += 1
        selector = dict(part.split("=", 1) for part in label_selector.split(",") if part)
        if kind is Kind.NODE:
            found = list(self.nodes)
        elif kind is Kind.RESOURCE_SLICE:
            found = list(self.resource_slices)
        else:
            found = [
                o
                for (k, ns, _), o in sorted(self.objects.items())
                if k == kind and namespace in (None, ns)
            ]
        found = [o for o in found if _labels_match(o, selector)]
        start = int(continue_token or 0)
        page = found[start : start + limit]
        more = start + limit < len(found)
        return copy.deepcopy(page), str(start + limit) if more else None

    def gpu_requests_by_node(self) -> dict[str, dict[str, int]]:
        pods = [o for (k, _, _), o in sorted(self.objects.items()) if k is Kind.POD]
        return add_claims((gpu_claim(p) for p in pods), {})

    def apply(self, obj: Obj) -> Obj:
        kind = Kind(obj["kind"])
        require_kind(kind, APPLIED_KINDS, "apply")
        self._maybe_fail()
        live = self._apply(kind, obj, FIELD_MANAGER)
        self.writes[f"apply:{kind}"] += 1
        return live

    def apply_unforced(self, obj: Obj, field_manager: str) -> Obj:
        kind = Kind(obj["kind"])
        require_kind(kind, APPLIED_KINDS, "apply")
        self._maybe_fail()
        meta = obj["metadata"]
        old = self.objects.get((kind, meta["namespace"], meta["name"]))
        if old is not None:
            owners = self._owners.get(old["metadata"]["uid"], {})
            others = set().union(*(p for m, p in owners.items() if m != field_manager))
            conflicts = sorted(
                "/".join(p)
                for p in _applied_paths(obj) & others
                if _lookup(old, p) != _lookup(obj, p)
            )
            if conflicts:
                raise ConflictError(
                    f"apply {kind} {meta['namespace']}/{meta['name']} failed: 409 conflict on "
                    + ", ".join(conflicts),
                    409,
                )
        live = self._apply(kind, obj, field_manager)
        self.writes[f"apply_unforced:{kind}"] += 1
        return live

    def _apply(self, kind: Kind, obj: Obj, manager: str) -> Obj:
        meta = obj["metadata"]
        what = f"apply {kind} {meta['namespace']}/{meta.get('name')}"
        if obj.get("apiVersion") != API_VERSIONS[kind]:
            raise GatewayError(f"{what} failed: wrong apiVersion {obj.get('apiVersion')}", 400)
        _validate(kind, obj, what)
        key = (kind, meta["namespace"], meta["name"])
        old = self.objects.get(key)
        if kind is Kind.RESOURCE_CLAIM_TEMPLATE:
            problems = claim_template_problems(obj)
            if old is not None:
                problems += claim_template_update_problems(old, obj)
            if problems:
                raise GatewayError(
                    f"{what} failed: 422 Unprocessable Entity: {'; '.join(problems)}", 422
                )
        if old is None:
            uid = f"uid-{next(self._uids)}"
            live: Obj = {"apiVersion": obj["apiVersion"], "kind": kind.value, "metadata": {}}
        else:
            uid = old["metadata"]["uid"]
            live = copy.deepcopy(old)
            live.pop("status", None)
        owners = self._owners.setdefault(uid, {})
        applied = _applied_paths(obj)
        # A forced apply takes over every field whose value it changes; equal values are shared,
        # and so is a list entry (its fields are owned one by one).
        taken = {
            p for p in applied if p[-1].startswith("f:") and _lookup(live, p) != _lookup(obj, p)
        }
        for other, paths in owners.items():
            if other != manager:
                paths -= taken
        kept = set().union(*(p for m, p in owners.items() if m != manager))
        for path in sorted(owners.get(manager, set()) - applied - kept, key=len):
            _remove(live, path)
        config = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
        live = _merge(live, config)
        owners.pop(manager, None)
        owners[manager] = applied  # the latest writer last, as the server lists them
        self._finish(kind, live, old, uid, owners)
        self._bump(live, old)
        self.objects[key] = live
        return copy.deepcopy(live)

    def _finish(
        self, kind: Kind, live: Obj, old: Obj | None, uid: str, owners: dict[str, set[Path]]
    ) -> None:
        """Set what the server sets: uid, generation, managedFields, the old status."""
        meta = live["metadata"]
        meta["uid"] = uid
        meta.pop("generation", None)
        if (now := _generation_input(kind, live)) is not None:
            if old is None:
                meta["generation"] = 1
            else:
                generation = int(old["metadata"].get("generation") or 1)
                changed = now != _generation_input(kind, old)
                meta["generation"] = generation + 1 if changed else generation
        meta["managedFields"] = [
            {
                "manager": m,
                "operation": "Apply",
                "apiVersion": live["apiVersion"],
                "fieldsType": "FieldsV1",
                "fieldsV1": _fields_v1(paths),
            }
            for m, paths in owners.items()
            if paths
        ]
        if old is not None and "status" in old:
            live["status"] = old["status"]

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        require_kind(kind, DELETED_KINDS, "delete")
        self._maybe_fail()
        gone = self.objects.pop((kind, namespace, name), None)
        if gone is not None:
            self._owners.pop(gone["metadata"]["uid"], None)
            self.writes[f"delete:{kind}"] += 1

    def apply_status(self, namespace: str, name: str, status: Obj) -> Obj | None:
        self._maybe_fail()
        key = (Kind.VLLM_SERVICE, namespace, name)
        if key not in self.objects:
            raise GatewayError(f"apply status of {namespace}/{name} failed: 404 Not Found", 404)
        old = copy.deepcopy(self.objects[key])
        self.objects[key]["status"] = _without_nulls(copy.deepcopy(status))
        self._bump(self.objects[key], old)
        self.writes["status"] += 1
        return copy.deepcopy(self.objects[key])

    def remove_service_finalizer(
        self, namespace: str, name: str, finalizer: str, index: int
    ) -> None:
        """As the API server's JSON patch (test, remove): a failed test is a 422, which the real
        gateway reports as a ConflictError; the last finalizer of a deleting object removed, the
        object goes."""
        self._maybe_fail()
        key = (Kind.VLLM_SERVICE, namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            return
        meta = obj.setdefault("metadata", {})
        finalizers = list(meta.get("finalizers") or [])
        if index >= len(finalizers) or finalizers[index] != finalizer:
            raise ConflictError(
                f"remove finalizer {finalizer} of {namespace}/{name} failed: 422 test failed", 422
            )
        old = copy.deepcopy(obj)
        del finalizers[index]
        if finalizers:
            meta["finalizers"] = finalizers
        else:
            meta.pop("finalizers", None)
        self.writes["finalizer"] += 1
        if meta.get("deletionTimestamp") and not finalizers:
            self.objects.pop(key)
            return
        self._bump(obj, old)

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
        old = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("labels", {}).update(labels)
        meta.setdefault("annotations", {}).update(annotations)
        self._bump(obj, old)
        self.writes["pod"] += 1

    def evict_pod(self, namespace: str, pod: str) -> bool:
        self._maybe_fail()
        if self.refuse_evictions:
            return False
        self.objects.pop((Kind.POD, namespace, pod), None)
        self.evictions.append((namespace, pod))
        self.writes["eviction"] += 1
        return True
