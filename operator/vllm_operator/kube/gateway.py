"""The Kubernetes I/O seam of the reconcile loop.

Reconcile code talks to the cluster only through `KubeGateway`, a small Protocol with two
implementations: `ApiGateway` (the real client, exercised against a real kube-apiserver in e2e)
and `FakeGateway` (in memory, for millisecond reconcile tests that count write calls). Objects
cross the seam as plain JSON-like dicts in the wire format, the same shape server-side apply takes.
"""

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

Obj = dict[str, Any]


class Kind(StrEnum):
    """The object kinds the operator reads or writes."""

    DEPLOYMENT = "Deployment"
    LEADER_WORKER_SET = "LeaderWorkerSet"
    SERVICE = "Service"
    PDB = "PodDisruptionBudget"
    VLLM_SERVICE = "VLLMService"
    POD = "Pod"
    NODE = "Node"
    SECRET = "Secret"
    EVENT = "Event"
    RESOURCE_CLAIM_TEMPLATE = "ResourceClaimTemplate"
    RESOURCE_SLICE = "ResourceSlice"
    INFERENCE_POOL = "InferencePool"
    SERVICE_ACCOUNT = "ServiceAccount"
    ROLE = "Role"
    ROLE_BINDING = "RoleBinding"


LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
"""The LeaderWorkerSet custom resource (sigs.k8s.io/lws) that runs multi-node pools."""

GIE_GROUP, GIE_VERSION, GIE_PLURAL = "inference.networking.k8s.io", "v1", "inferencepools"
"""The Gateway API Inference Extension's InferencePool (spec.routing inferencePool, #31)."""

API_VERSIONS: dict[Kind, str] = {
    Kind.DEPLOYMENT: "apps/v1",
    Kind.LEADER_WORKER_SET: f"{LWS_GROUP}/{LWS_VERSION}",
    Kind.SERVICE: "v1",
    Kind.PDB: "policy/v1",
    Kind.VLLM_SERVICE: "serving.vllm-operator.dev/v1alpha1",
    Kind.POD: "v1",
    Kind.NODE: "v1",
    Kind.SECRET: "v1",
    Kind.EVENT: "v1",
    Kind.RESOURCE_CLAIM_TEMPLATE: "resource.k8s.io/v1",
    Kind.RESOURCE_SLICE: "resource.k8s.io/v1",
    Kind.INFERENCE_POOL: f"{GIE_GROUP}/{GIE_VERSION}",
    Kind.SERVICE_ACCOUNT: "v1",
    Kind.ROLE: "rbac.authorization.k8s.io/v1",
    Kind.ROLE_BINDING: "rbac.authorization.k8s.io/v1",
}


POOL_KINDS: tuple[Kind, ...] = (Kind.DEPLOYMENT, Kind.LEADER_WORKER_SET)
"""The workload of a pool: a Deployment, or a LeaderWorkerSet when a replica spans nodes."""

ROUTING_KINDS: tuple[Kind, ...] = (
    Kind.SERVICE_ACCOUNT,
    Kind.ROLE,
    Kind.ROLE_BINDING,
    Kind.INFERENCE_POOL,
)
"""What spec.routing inferencePool adds beside Deployments and Services (#31): the InferencePool
and the rendered Endpoint Picker's identity; applied, and deleted when routing goes back."""

APPLIED_KINDS: frozenset[Kind] = frozenset(
    {*POOL_KINDS, Kind.SERVICE, Kind.PDB, Kind.RESOURCE_CLAIM_TEMPLATE, *ROUTING_KINDS}
)
"""What `apply` accepts: the objects the operator renders (status goes through `apply_status`)."""

READ_KINDS: frozenset[Kind] = APPLIED_KINDS | {Kind.VLLM_SERVICE}
"""What `get` reads (pods, nodes and Secrets have their own methods)."""

LISTED_KINDS: frozenset[Kind] = frozenset({*POOL_KINDS, Kind.POD, Kind.RESOURCE_CLAIM_TEMPLATE})
"""What `list_owned` lists: owned pools and claim templates to prune, and their pods."""

RELISTED_KINDS: frozenset[Kind] = frozenset(
    {
        *POOL_KINDS,
        Kind.SERVICE,
        Kind.PDB,
        Kind.POD,
        Kind.RESOURCE_CLAIM_TEMPLATE,
        Kind.VLLM_SERVICE,
        Kind.NODE,
        Kind.RESOURCE_SLICE,
    }
)
"""What `list_page` lists: every kind the watch cache keeps (kube/cache.py CACHED_KINDS), for its
periodic complete list (kube/relist.py)."""

DELETED_KINDS: frozenset[Kind] = frozenset(
    {*POOL_KINDS, Kind.RESOURCE_CLAIM_TEMPLATE, Kind.SERVICE, *ROUTING_KINDS}
)
"""What `delete` removes: only pools of a GPU type the spec no longer allows, claim templates
no pool refers to any more, and the InferencePool and rendered picker (its Deployment, Service,
ServiceAccount, Role, RoleBinding) when spec.routing no longer asks for them (the service's own
Service and PDB go with the VLLMService through owner references)."""


@dataclass(frozen=True)
class EventRecord:
    """A Kubernetes Event about a VLLMService (or, with `kind`, another object such as a Node).

    For a cluster-scoped object `namespace` is empty: the Event itself is stored in `default`.
    """

    namespace: str
    name: str
    uid: str
    type: str  # Normal | Warning
    reason: str
    message: str
    kind: str = "VLLMService"


class GatewayError(Exception):
    """An API call failed; `status` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ConflictError(GatewayError):
    """Optimistic-concurrency or field-manager conflict: retry with a fresh read."""


class UnavailableError(GatewayError):
    """The API server could not answer: connection refused or reset, a timeout, a TLS failure, a
    5xx or 429. Always transient from the operator's point of view: retry after the backoff."""


class UnsupportedKindError(ValueError):
    """A gateway method was called with a kind it has no API call for: a programming error, never
    retried. Both gateways raise it before any I/O, so a reconcile test against the fake fails
    where the real gateway would (instead of the fake quietly storing any kind)."""


def require_kind(kind: Kind, allowed: frozenset[Kind], verb: str) -> None:
    """Raise UnsupportedKindError unless `kind` is one `verb` handles."""
    if kind not in allowed:
        supported = ", ".join(sorted(allowed))
        raise UnsupportedKindError(f"Cannot {verb} kind={kind}: only {supported}")


class KubeGateway(Protocol):
    """What the reconcile loop needs from the Kubernetes API."""

    def list_nodes(self) -> list[Obj]:
        """All nodes (the inventory groups those with GPUs)."""
        ...

    def list_resource_slices(self) -> list[Obj]:
        """All resource.k8s.io/v1 ResourceSlices (the DRA drivers' devices per node); empty when
        the API server does not serve the group (a cluster without DRA)."""
        ...

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        """One namespaced object of a READ_KINDS kind, or None when it does not exist."""
        ...

    def list_owned(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj]:
        """Objects of a LISTED_KINDS kind in `namespace` whose labels match `selector`."""
        ...

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        """Pods matching a label selector (status, restarts, OOMKilled)."""
        ...

    def list_services(self, namespace: str | None = None, fleet_of: str | None = None) -> list[Obj]:
        """Every VLLMService in `namespace` (None: every namespace the caller may list), status
        included: the fleet's measurements (status.observations) are shared across services.

        `fleet_of`: a hint that only services of this model with observations are needed; an
        implementation may return more (the API and the fake return all). The watch cache
        decodes only those: decoding every service on every reconcile was O(N^2) and most of
        the operator's CPU at 1000 services (#32, docs/controller-benchmark.md)."""
        ...

    def gpu_requests_by_node(self) -> dict[str, dict[str, int]]:
        """GPUs (`nvidia.com/*` resources) requested by the pods bound to each node that have not
        ended, every namespace and owner (kube/pods.py counts them as the scheduler does): what
        placement.strategy Preferred subtracts from allocatable. The watch cache answers it from
        the pod watch the operator already runs; without it, one list of bound pods."""
        ...

    def apply(self, obj: Obj) -> Obj:
        """Server-side apply of an APPLIED_KINDS object with the operator's field manager (force: we
        own these fields). An invalid name or label is a GatewayError with status 422."""
        ...

    def apply_unforced(self, obj: Obj, field_manager: str) -> Obj:
        """Server-side apply under another field manager, never forced.

        Used to hand a field over (the replicas of a Deployment given to an autoscaler): the
        manager shares ownership of the value it sets, and ConflictError means another manager
        already owns that field with a different value.
        """
        ...

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        """Delete a DELETED_KINDS object (missing is fine)."""
        ...

    def apply_status(self, namespace: str, name: str, status: Obj) -> Obj | None:
        """Server-side apply of the VLLMService status subresource (404 when it is missing).

        Returns the VLLMService as written when the implementation has it (the watch cache keeps
        it, so the next read sees this status before the watch event arrives)."""
        ...

    def remove_service_finalizer(
        self, namespace: str, name: str, finalizer: str, index: int
    ) -> None:
        """Remove `finalizer`, found at `index` of the VLLMService's finalizers as last read, with
        a JSON patch that tests it is still there (ConflictError when the list moved meanwhile;
        a missing service is fine)."""
        ...

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        """A decoded Secret value, or None when the Secret or key is missing."""
        ...

    def emit_event(self, event: EventRecord) -> None:
        """Record an Event on the VLLMService."""
        ...

    def read_pod_log(
        self, namespace: str, pod: str, container: str, *, previous: bool, tail_lines: int
    ) -> str | None:
        """The last lines of a container's log (the previous instance's with `previous`)."""
        ...

    def patch_pod_metadata(
        self, namespace: str, pod: str, labels: dict[str, str], annotations: dict[str, str]
    ) -> None:
        """Merge labels and annotations into a pod (used to drain it from the Service)."""
        ...

    def evict_pod(self, namespace: str, pod: str) -> bool:
        """Evict through the Eviction API; False when a PodDisruptionBudget refuses it now."""
        ...
