"""Node annotations for the NVML probe: write this node's budget, name the pods on this node.

Why a JSON merge patch: it touches only `metadata.annotations[key]` (no read-modify-write race
with the kubelet, GFD or the node-feature-discovery labeller on the same Node), and it needs only
`patch` on nodes. The kubernetes client would otherwise pick `application/json-patch+json` for a
dict body, so the content type is set explicitly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vllm_operator.api.probe import ContainerRef
from vllm_operator.kube.client import guard_transport, load_config
from vllm_operator.kube.gateway import GatewayError

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class NodeAnnotations:
    """AnnotationPublisher on the API server (RBAC: get + patch on nodes)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.core = client.CoreV1Api(guard_transport(api_client))

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None) -> NodeAnnotations:
        """In-cluster service account first, then the kubeconfig file (or the default one)."""
        return cls(load_config(kubeconfig))

    def publish(self, node_name: str, key: str, value: str) -> None:
        body = {"metadata": {"annotations": {key: value}}}
        try:
            self.core.patch_node(node_name, body, _content_type=MERGE_PATCH)
        except ApiException as exc:
            raise GatewayError(
                f"patch node {node_name} annotation {key} failed: {exc.status} {exc.reason}",
                int(exc.status) if exc.status else None,
            ) from exc

    def read(self, node_name: str, key: str) -> str | None:
        try:
            node = self.core.read_node(node_name)
        except ApiException as exc:
            raise GatewayError(
                f"get node {node_name} failed: {exc.status} {exc.reason}",
                int(exc.status) if exc.status else None,
            ) from exc
        annotations: dict[str, str] = (node.metadata and node.metadata.annotations) or {}
        return annotations.get(key)


class NodePods:
    """PodLookup (nvml.reader) for one node: container ID -> namespace/pod/container.

    Lists pods with `spec.nodeName=<node>` only when the probe meets a container ID it does not
    know (and caches the answer). Needs `list pods` cluster-wide; without that RBAC the probe
    still publishes pod UIDs from the cgroups, just not names.
    """

    def __init__(self, api_client: client.ApiClient, node_name: str) -> None:
        self.core = client.CoreV1Api(guard_transport(api_client))
        self.node_name = node_name
        self._lock = threading.Lock()
        self._known: dict[str, ContainerRef] = {}

    def containers(self, refresh: bool) -> Mapping[str, ContainerRef]:
        with self._lock:
            if refresh or not self._known:
                try:
                    pods = self.core.list_pod_for_all_namespaces(
                        field_selector=f"spec.nodeName={self.node_name}"
                    ).items
                except ApiException as exc:
                    raise GatewayError(
                        f"list pods on node {self.node_name} failed: {exc.status} {exc.reason}",
                        int(exc.status) if exc.status else None,
                    ) from exc
                known: dict[str, ContainerRef] = {}
                for pod in pods:
                    if pod.status is None or pod.metadata is None:
                        continue
                    for status in pod.status.container_statuses or []:
                        if status.container_id and pod.metadata.namespace and pod.metadata.name:
                            cid = status.container_id.split("://", 1)[-1]
                            known[cid] = ContainerRef(
                                namespace=pod.metadata.namespace,
                                pod=pod.metadata.name,
                                container=status.name,
                            )
                self._known = known
            return dict(self._known)
