"""spec.routing inferencePool (#31): the InferencePool over the service's pods and its picker.

Pure: the service in, the objects out. What each object is for:

- **InferencePool** (`inference.networking.k8s.io/v1`; the v1.1.0 CRD is vendored in e2e/crds/):
  selects the pods the Service selects, every GPU pool of the service at once (`app.kubernetes.io/instance` plus the `serving` label), so a
  gateway's Endpoint Picker chooses among the H100 and the A100 pods by their KV usage and queue.
  Workers of a multi-node group carry no `serving` label: only leaders answer HTTP and are picked.
  A draining pod gets `serving=false` (rendering/drain.py, reconcile) and leaves the pool the same
  moment it leaves the Service; a pod that is not Ready is never picked, because the picker's pod
  reconciler keeps only Ready pods in its datastore.
- **Endpoint Picker** (when `endpointPickerRef` is unset): the GIE reference picker (EPP) pinned
  to `EPP_VERSION`, one Deployment + Service (ext-proc gRPC on 9002, health on 9003) +
  ServiceAccount + a Role that only reads pods, InferencePools and InferenceObjectives of the
  namespace. Its metric
  flags name the series the pinned vLLM release exports (the catalog): the picker's defaults
  assume one era (`vllm:gpu_cache_usage_perc` before vLLM 0.9.2/0.11, `vllm:kv_cache_usage_perc`
  after), and a picker reading a series that does not exist scores every pod as empty.
"""

import hashlib
import json
from typing import Any

from vllm_operator.api.routing import EPP_DEFAULT_PORT, RoutingMode
from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.vllm.metric_names import metric_names
from vllm_operator.rendering.names import (
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_SERVICE,
    LABEL_SERVING,
    MANAGED_BY,
    selector_labels,
)
from vllm_operator.rendering.workload import PORT, owner_reference

Obj = dict[str, Any]

INFERENCE_POOL_API_VERSION = "inference.networking.k8s.io/v1"
EPP_VERSION = "v1.1.0"
"""The Gateway API Inference Extension release whose Endpoint Picker the operator runs."""
EPP_IMAGE = f"registry.k8s.io/gateway-api-inference-extension/epp:{EPP_VERSION}"
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
EPP_UID = 65532
"""The EPP image is distroless `nonroot` (UID/GID 65532)."""
LORA_INFO_METRIC = "vllm:lora_requests_info"
PICKER_COMPONENT = "endpoint-picker"
OBJECTIVES_GROUP = "inference.networking.x-k8s.io"
"""The InferenceObjective's API group (v1alpha2), which the v1.1.0 picker watches at start."""
EPP_CONFIG = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "prefix-cache-scorer"},
    ],
    "schedulingProfiles": [
        {
            "name": "default",
            "plugins": [
                {"pluginRef": "queue-scorer"},
                {"pluginRef": "kv-cache-utilization-scorer"},
                {"pluginRef": "prefix-cache-scorer"},
            ],
        }
    ],
}
"""The picker's scheduling configuration: the release chart's `default-plugins.yaml`
(config/charts/inferencepool/templates/epp-config.yaml at EPP_VERSION): queue depth, KV-cache
usage and prefix-cache affinity, weight 1 each, the max-score picker the loader adds. The v1.1.0
binary has no built-in default: without `--config-file`/`--config-text` it exits at start with
"scheduler config must be set either by config api or through code" (cmd/epp/runner/runner.go),
found by e2e/test_routing_picker.py."""


def inference_pool_name(service: VLLMService) -> str:
    """The InferencePool is named like the VLLMService (an HTTPRoute's backendRef names it)."""
    return service.name


def picker_name(service: VLLMService) -> str:
    """`<service>-epp`, shortened with a hash to stay a 63-character DNS label."""
    name = f"{service.name}-epp"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{service.name[:52].rstrip('-')}-epp-{digest}"


def pool_selector(service: VLLMService) -> dict[str, str]:
    """The serving pods of every GPU pool: what the Service selects, so both agree."""
    return {**selector_labels(service.name), LABEL_SERVING: "true"}


def _picker_labels(service: VLLMService) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm-epp",
        LABEL_INSTANCE: service.name,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: PICKER_COMPONENT,
        LABEL_SERVICE: service.name,
    }


def _picker_selector(service: VLLMService) -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm-epp", LABEL_INSTANCE: service.name}


def _meta(service: VLLMService, name: str, labels: dict[str, str]) -> Obj:
    meta: Obj = {"name": name, "namespace": service.namespace, "labels": dict(labels)}
    if service.metadata.get("uid"):
        meta["ownerReferences"] = [owner_reference(service)]
    return meta


def picker_ref(service: VLLMService) -> tuple[str, int]:
    """The picker Service the pool refers to: the user's, or the rendered one."""
    ref = service.spec.routing.endpoint_picker_ref
    if ref is not None:
        return ref.name, ref.port
    return picker_name(service), EPP_DEFAULT_PORT


def render_inference_pool(service: VLLMService) -> Obj:
    """The InferencePool of the service (labels as every owned object, plus the component)."""
    name, port = picker_ref(service)
    labels = {
        **selector_labels(service.name),
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: "inference-pool",
        LABEL_SERVICE: service.name,
    }
    return {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": "InferencePool",
        "metadata": _meta(service, inference_pool_name(service), labels),
        "spec": {
            "selector": {"matchLabels": pool_selector(service)},
            "targetPorts": [{"number": PORT}],
            "endpointPickerRef": {
                "group": "",
                "kind": "Service",
                "name": name,
                "port": {"number": port},
                "failureMode": "FailClose",
            },
        },
    }


def picker_args(service: VLLMService) -> list[str]:
    """The EPP's flags: its pool, its ports, and the pinned vLLM release's metric names.

    The flags are those of cmd/epp/runner/runner.go at EPP_VERSION (v1.1.0 has the queue, KV-usage
    and LoRA metric flags, not a running-requests one; its KV default is the pre-0.9.2
    `vllm:gpu_cache_usage_perc`, pkg/epp/server/runserver.go). The scorers come as
    `--config-text` (EPP_CONFIG), a JSON document the picker's YAML loader reads."""
    names = metric_names(service.spec.vllm.version)
    args = [
        f"--pool-name={inference_pool_name(service)}",
        f"--pool-namespace={service.namespace}",
        f"--grpc-port={EPP_DEFAULT_PORT}",
        f"--grpc-health-port={EPP_HEALTH_PORT}",
        f"--metrics-port={EPP_METRICS_PORT}",
        # Metrics stay unauthenticated inside the pod network: the TokenReview and
        # SubjectAccessReview calls authentication needs are cluster-scoped grants the
        # operator would have to hold and hand out.
        "--metrics-endpoint-auth=false",
        # The chart's default: without it (and without OTEL_* variables) v1.1.0 prints every
        # request's trace spans to stdout (pkg/common/telemetry.go, console exporter).
        "--tracing=false",
        f"--config-text={json.dumps(EPP_CONFIG, separators=(',', ':'))}",
    ]
    if names.waiting is not None:
        args.append(f"--total-queued-requests-metric={names.waiting}")
    if names.kv_usage:
        # One series only: the picker takes one name; the preferred (newest) one of the release.
        args.append(f"--kv-cache-usage-percentage-metric={names.kv_usage[0]}")
    args.append(f"--lora-info-metric={LORA_INFO_METRIC}")
    return args


def _picker_deployment(service: VLLMService) -> Obj:
    name = picker_name(service)
    labels = _picker_labels(service)
    grpc_probe = {"grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"}}
    container: Obj = {
        "name": "epp",
        "image": EPP_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": picker_args(service),
        "ports": [
            {"name": "grpc", "containerPort": EPP_DEFAULT_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": EPP_METRICS_PORT, "protocol": "TCP"},
        ],
        "livenessProbe": {**grpc_probe, "initialDelaySeconds": 5, "periodSeconds": 10},
        "readinessProbe": {**grpc_probe, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": EPP_UID,
            "runAsGroup": EPP_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(service, name, labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _picker_selector(service)},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "terminationGracePeriodSeconds": 130,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                },
            },
        },
    }


def render_endpoint_picker(service: VLLMService) -> list[Obj]:
    """The rendered picker: ServiceAccount, Role, RoleBinding, Service, Deployment (apply order)."""
    name = picker_name(service)
    labels = _picker_labels(service)
    group = INFERENCE_POOL_API_VERSION.split("/")[0]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(service, name, labels),
            "automountServiceAccountToken": True,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(service, name, labels),
            # What the picker reads, nothing it could change: its pool and the pods it scores.
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {
                    "apiGroups": [group],
                    "resources": ["inferencepools"],
                    "verbs": ["get", "list", "watch"],
                },
                # The v1.1.0 picker also watches InferenceObjectives (request priorities).
                {
                    "apiGroups": [OBJECTIVES_GROUP],
                    "resources": ["inferenceobjectives"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(service, name, labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": service.namespace}],
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(service, name, labels),
            "spec": {
                "type": "ClusterIP",
                "selector": _picker_selector(service),
                "ports": [
                    {
                        "name": "grpc-ext-proc",
                        "port": EPP_DEFAULT_PORT,
                        "targetPort": "grpc",
                        "protocol": "TCP",
                        "appProtocol": "http2",
                    }
                ],
            },
        },
        _picker_deployment(service),
    ]


def render_routing(service: VLLMService) -> list[Obj]:
    """Every object spec.routing asks for beyond the Service: none for mode service; the
    rendered picker's objects first, the InferencePool last (it refers to the picker)."""
    routing = service.spec.routing
    if routing.mode != RoutingMode.INFERENCE_POOL:
        return []
    picker = [] if routing.endpoint_picker_ref is not None else render_endpoint_picker(service)
    return [*picker, render_inference_pool(service)]
