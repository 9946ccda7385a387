"""What a pod takes from its node's GPUs, as the scheduler counts it (#29, the placement inventory).

The scheduler fits a pod by its resource requests; an extended resource (`nvidia.com/gpu`,
`nvidia.com/mig-*`) is requested by its limit when no request is given, and a pod takes the
larger of the sum of its containers and its largest init container. A pod holds its node's GPUs
from the moment it is bound (`spec.nodeName`) until it ends (phase Succeeded or Failed). Every
gateway counts the same way through `gpu_claim`, so the fake, the watch cache and the API list
agree.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

GPU_RESOURCE_PREFIX = "nvidia.com/"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def _count(value: object) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _container_gpus(container: object) -> dict[str, int]:
    if not isinstance(container, dict):
        return {}
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    out: dict[str, int] = {}
    for name in {*requests, *limits}:
        if isinstance(name, str) and name.startswith(GPU_RESOURCE_PREFIX):
            amount = _count(requests.get(name, limits.get(name)))
            if amount > 0:
                out[name] = amount
    return out


def gpu_claim(pod: Obj) -> tuple[str, dict[str, int]] | None:
    """(node, GPUs by resource) a bound, running or starting pod takes; None when it takes none."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    if not node or phase in TERMINAL_PHASES:
        return None
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in _container_gpus(container).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _container_gpus(container).items():
            total[name] = max(total.get(name, 0), amount)
    return (str(node), total) if total else None


def add_claims(claims: Any, into: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Sum (node, GPUs) claims per node and resource into `into`."""
    for claim in claims:
        if claim is None:
            continue
        node, gpus = claim
        per_node = into.setdefault(node, {})
        for name, amount in gpus.items():
            per_node[name] = per_node.get(name, 0) + amount
    return into
