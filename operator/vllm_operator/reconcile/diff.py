"""Decide whether a desired object must be applied: the zero-write rule, with SSA semantics.

The API server adds defaults (strategy fields, probe schemes, termination paths, ...) to what the
operator applies, and other field managers add their own entries (an env var injected by a
webhook, a sidecar, a toleration, an annotation). Server-side apply merges by ownership: applying
the same desired object again changes nothing as long as (a) every field of `desired` is present
with the same value and (b) nothing the operator owns (its `managedFields` entry) is missing from
`desired` — an owned field left out would be removed by the apply.

So the comparison walks `desired`, the live object and the operator's own `fieldsV1` together.
List entries are matched by their key (`k:{"name":"vllm"}` in fieldsV1, or `name`/`mountPath`/...
when the live object carries no managedFields), so entries added by other managers are ignored:
they never cause an apply. Before this, lists had to be equal in length, and every foreign
entry made every reconcile re-apply and post `PlanApplied` (issue #20, defect 3).
"""

import json
from functools import lru_cache
from typing import Any

from vllm_operator.api.service import FIELD_MANAGER

# Key fields of the associative lists the operator renders (core/v1, apps/v1, policy/v1), used
# when the live object has no managedFields entry of ours (an object created before SSA, a fake).
_LIST_KEYS = ("name", "mountPath", "containerPort", "port", "key")

Fields = dict[str, Any]


def _same_scalar(desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    # Quantities and int-or-string fields may come back in the other spelling ("1" vs 1).
    if isinstance(desired, int | str) and isinstance(live, int | str):
        return str(desired) == str(live)
    return False


def owned_fields(live: dict[str, Any], manager: str = FIELD_MANAGER) -> Fields | None:
    """The fieldsV1 tree `manager` owns through Apply on `live` (None: no such entry)."""
    meta = live.get("metadata") or {}
    for entry in meta.get("managedFields") or []:
        if (
            entry.get("manager") == manager
            and entry.get("operation") == "Apply"
            and not entry.get("subresource")
        ):
            fields: Fields = entry.get("fieldsV1") or {}
            return fields
    return None


@lru_cache(maxsize=4096)
def _entry_key(owned_key: str) -> dict[str, Any] | None:
    """The key of an associative list entry in fieldsV1 (`k:{"name":"x"}`), or None.

    Memoised (callers only read the result): every comparison of a workload parses the same
    few keys (`k:{"name":"vllm"}`, a port, a volume), ~14 % of `needs_apply` (#32 no-op
    reconcile)."""
    if not owned_key.startswith("k:"):
        return None
    try:
        parsed = json.loads(owned_key[2:])
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _matches_key(entry: Any, key: dict[str, Any]) -> bool:
    if not isinstance(entry, dict):
        return False
    for k, v in key.items():
        if k not in entry:
            return False
        found = entry[k]
        if found != v and not _same_scalar(v, found):
            return False
    return True


def _fallback_key(entry: Any) -> dict[str, Any] | None:
    if not isinstance(entry, dict):
        return None
    for field in _LIST_KEYS:
        if field in entry:
            return {field: entry[field]}
    return None


_SCALARS = (str, int, float, bool, type(None))
_EXACT = (str, int, bool, type(None))  # no float: NaN is unequal to itself


def _list_subset(desired: list[Any], live: list[Any], owned: Fields | None) -> bool:
    keyed = {k: v for k, v in (owned or {}).items() if k.startswith("k:")}
    atomic = owned is not None and not keyed and not any(k.startswith("v:") for k in owned)
    unkeyed = not keyed and any(_fallback_key(d) is None for d in desired)
    if atomic or unkeyed or not desired:
        # An atomic list (or scalars): the operator owns it whole, so it must be equal.
        if len(desired) != len(live):
            return False
        if desired == live and all(type(d) in _EXACT for d in desired):
            return True  # equal scalars (args, commands): what the walk below finds, at C speed
        return all(is_subset(d, v) for d, v in zip(desired, live, strict=True))
    owned_keys = [(_entry_key(k), child) for k, child in keyed.items()]
    matched: set[int] = set()
    for entry in desired:
        child: Fields | None = None
        key = None
        for i, (candidate, candidate_child) in enumerate(owned_keys):
            if candidate is not None and _matches_key(entry, candidate):
                key, child = candidate, candidate_child
                matched.add(i)
                break
        key = key or _fallback_key(entry)
        if key is None:
            return False
        found = None
        for v in live:
            if _matches_key(v, key):
                if found is not None:
                    return False  # two live entries under one key
                found = v
        if found is None or not is_subset(entry, found, child):
            return False
    # An entry the operator owns but no longer desires: the apply would remove it. (A key
    # matched above is desired; only the others are looked for.)
    for i, (candidate, _) in enumerate(owned_keys):
        if (
            i not in matched
            and candidate is not None
            and not any(_matches_key(d, candidate) for d in desired)
        ):
            return False
    return True


def is_subset(desired: Any, live: Any, owned: Fields | None = None) -> bool:
    """True when applying `desired` over `live` would change nothing.

    `owned` is the operator's fieldsV1 at this level (None when unknown): a field owned but not
    desired means the apply would remove it.

    Written for speed (#32 no-op reconcile: this walk was a quarter of an unchanged service's
    reconcile): scalar children are compared in place instead of through a call each; the
    result is the same as walking every child.
    """
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        for k, v in desired.items():
            if k not in live:
                return False
            found = live[k]
            if type(v) in _SCALARS:
                if v != found and not _same_scalar(v, found):
                    return False
                continue
            child = owned.get("f:" + k) if owned is not None else None
            if not is_subset(v, found, child):
                return False
        if owned is not None:
            for field in owned:
                if field.startswith("f:") and field[2:] not in desired and field[2:] in live:
                    return False
        # An empty desired map (e.g. emptyDir: {}) matches whatever the server filled in.
        return True
    if isinstance(desired, list):
        if not isinstance(live, list):
            return False
        return _list_subset(desired, live, owned)
    return _same_scalar(desired, live)


def needs_apply(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """Whether server-side apply of `desired` would change anything in `live`."""
    if live is None:
        return True
    fields = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind")}
    owned = owned_fields(live)
    if owned is not None:
        owned = {k: v for k, v in owned.items() if k not in ("f:apiVersion", "f:kind")}
    return not is_subset(fields, live, owned)


def rolls_pods(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """Whether applying the Deployment `desired` over `live` changes its pod template.

    A changed template replaces every pod (on GPUs: every replica reloads its model), while a
    replica count or metadata change does not; only the first kind waits for a settled spec.
    """
    if live is None:
        return False
    template = (desired.get("spec") or {}).get("template")
    if template is None:
        return False
    owned = owned_fields(live)
    if owned is not None:
        owned = ((owned.get("f:spec") or {}).get("f:template")) or {}
    return not is_subset(template, (live.get("spec") or {}).get("template"), owned)
