"""Typed, read-only views of the Kubernetes objects the reconcile reads (#32 item 4).

In the style of kopf's `structs/bodies.py`: a thin wrapper over the object as the API (or the
watch cache) returned it, never a copy and never a model that could reject a field it does not
know. Each accessor is the one place a nested lookup is spelled, with the defaults the API server
leaves out (an object without labels has no `labels` key, a pod not yet scheduled no `nodeName`),
so the reconcile reads `PodBody(pod).ready` instead of re-spelling
`any(c.get("type") == "Ready" ... for c in (pod.get("status") or {}).get("conditions") or [])`.

Views: `Meta` (any object's metadata), `Body` (any object), and `PodBody`, `NodeBody`,
`DeploymentBody`, `LeaderWorkerSetBody`, `VLLMServiceBody` for the kinds the reconcile reads.
"""

from collections.abc import Mapping
from typing import Any

from vllm_operator.kube.gateway import Obj

_EMPTY: Mapping[str, Any] = {}


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


class Meta:
    """`metadata` of any object."""

    __slots__ = ("raw",)

    def __init__(self, raw: object) -> None:
        self.raw = _mapping(raw)

    @property
    def name(self) -> str:
        return str(self.raw.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.raw.get("namespace", ""))

    @property
    def uid(self) -> str:
        return str(self.raw.get("uid", ""))

    @property
    def generation(self) -> Any:
        """As the API server wrote it (None for kinds without one, like a Service)."""
        return self.raw.get("generation")

    @property
    def labels(self) -> Mapping[str, str]:
        return _mapping(self.raw.get("labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        return _mapping(self.raw.get("annotations"))

    @property
    def deleting(self) -> bool:
        """A deletionTimestamp is set: the object is going (finalizers may keep it a while)."""
        return bool(self.raw.get("deletionTimestamp"))

    @property
    def finalizers(self) -> list[str]:
        return [str(f) for f in self.raw.get("finalizers") or []]

    @property
    def owner_references(self) -> list[Mapping[str, Any]]:
        return [r for r in self.raw.get("ownerReferences") or [] if isinstance(r, Mapping)]


class Body:
    """Any object: its metadata, spec and status as read-only mappings."""

    __slots__ = ("raw",)

    def __init__(self, raw: Obj) -> None:
        self.raw = raw

    @property
    def kind(self) -> str:
        return str(self.raw.get("kind", ""))

    @property
    def meta(self) -> Meta:
        return Meta(self.raw.get("metadata"))

    @property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self.raw.get("spec"))

    @property
    def status(self) -> Mapping[str, Any]:
        return _mapping(self.raw.get("status"))

    def conditions(self) -> list[Mapping[str, Any]]:
        """status.conditions, skipping anything that is not an object."""
        return [c for c in self.status.get("conditions") or [] if isinstance(c, Mapping)]

    def condition_status(self, type_: str) -> str | None:
        """The status ("True", "False", "Unknown") of the condition `type_`, None if absent."""
        for c in self.conditions():
            if c.get("type") == type_:
                status = c.get("status")
                return None if status is None else str(status)
        return None


class PodBody(Body):
    """A Pod."""

    __slots__ = ()

    @property
    def ready(self) -> bool:
        """The pod's Ready condition is True."""
        return self.condition_status("Ready") == "True"

    @property
    def node_name(self) -> str:
        return str(self.spec.get("nodeName") or "")

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or "")


class NodeBody(Body):
    """A Node."""

    __slots__ = ()

    @property
    def allocatable(self) -> Mapping[str, Any]:
        return _mapping(self.status.get("allocatable"))

    @property
    def unschedulable(self) -> bool:
        return bool(self.spec.get("unschedulable"))

    @property
    def ready(self) -> str | None:
        """The Ready condition's status, None when the kubelet has not reported one."""
        return self.condition_status("Ready")


class DeploymentBody(Body):
    """A Deployment."""

    __slots__ = ()

    @property
    def replicas(self) -> int | None:
        """spec.replicas; None when unset (an external autoscaler may own it)."""
        value = self.spec.get("replicas")
        return None if value is None else int(value)

    @property
    def ready_replicas(self) -> int:
        return int(self.status.get("readyReplicas") or 0)


class LeaderWorkerSetBody(DeploymentBody):
    """A LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): replicas are groups of `size` pods."""

    __slots__ = ()

    @property
    def size(self) -> int:
        """Pods per group (leader included); 1 when unset, as the LeaderWorkerSet API defaults."""
        template = _mapping(self.spec.get("leaderWorkerTemplate"))
        return int(template.get("size") or 1)


class VLLMServiceBody(Body):
    """A VLLMService as read from the API (before admission parses it into `api.VLLMService`)."""

    __slots__ = ()

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name), the work queue's key; namespace "default" when absent."""
        meta = self.meta
        return (meta.namespace or "default", meta.name)

    @property
    def gone(self) -> bool:
        """Deleted, or being deleted: nothing to reconcile, everything to forget."""
        return self.meta.deleting


__all__ = [
    "Body",
    "DeploymentBody",
    "LeaderWorkerSetBody",
    "Meta",
    "NodeBody",
    "PodBody",
    "VLLMServiceBody",
]
