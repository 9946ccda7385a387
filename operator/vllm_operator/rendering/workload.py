"""Render the Deployment, Service and PodDisruptionBudget of a VLLMService (pure).

Inputs are the parsed service and, per pool, a `PoolRender` that the reconcile step assembles from
the plan and the version catalog. Outputs are wire-format dicts ready for server-side apply, so the
same function backs `vllm-operator render` (GitOps reviews, golden files) and the controller.
"""

import hashlib
import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.security import container_security_context, pod_security_context
from vllm_operator.api.service import API_VERSION, KIND, VLLMService
from vllm_operator.rendering.names import (
    ANNOTATION_GPU_TYPE,
    ANNOTATION_PLAN_HASH,
    LABEL_GPU_PRODUCT,
    LABEL_POOL,
    LABEL_SERVING,
    common_labels,
    deployment_name,
    gpu_short_name,
    pool_selector_labels,
    selector_labels,
    service_name,
)

Obj = dict[str, Any]

PORT = 8000
MODEL_CACHE_PATH = "/models-cache"
HOME_PATH = "/home/vllm"
PVC_MOUNT_PATH = "/models"

# Startup budget: vLLM's HTTP server (and /health) only answers after download, weight loading,
# profiling and CUDA-graph capture. Budget a fixed part plus time per GiB of weights on one GPU
# (download at ~100 MiB/s and load dominate), capped at two hours.
_STARTUP_BASE_S = 300
_STARTUP_PER_WEIGHT_GIB_S = 20
_STARTUP_MAX_S = 7200
_PROBE_PERIOD_S = 10


class PoolRender(BaseModel):
    """Everything the renderer needs to know about one pool besides the spec."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_type: str = Field(description="GPU Feature Discovery product label of the pool's nodes.")
    gpu_resource: str = Field(default="nvidia.com/gpu", description="Extended resource to request.")
    gpus_per_replica: int = Field(ge=1, description="Tensor x pipeline parallel size.")
    replicas: int | None = Field(
        ge=0,
        description="spec.replicas of the Deployment; None leaves it out of the applied "
        "configuration, so the operator's field manager does not own it (scaling.mode external: "
        "an autoscaler does).",
    )
    image: str
    command: list[str] = Field(description="Container command, e.g. ['vllm', 'serve'].")
    model_args: list[str] = Field(description="The model argument(s) in the version's form.")
    engine_argv: list[str] = Field(description="Validated engine flags for the pinned version.")
    weights_gib_total: float = Field(ge=0, description="Weights of one replica, all GPUs, in GiB.")
    host_memory_gib: int = Field(
        ge=1,
        description="The container's memory request and limit, GiB (planning.host_memory, or a "
        "HostOOM override above it).",
    )
    shm_gib: int | None = Field(
        default=None, ge=1, description="/dev/shm size with TP > 1 (memory-backed emptyDir)."
    )


def plan_hash(service: VLLMService, pool: PoolRender) -> str:
    """Hash of what decides the pods' behaviour; it changes exactly when pods must roll."""
    payload = {
        "image": pool.image,
        "command": pool.command,
        "model": pool.model_args,
        "argv": pool.engine_argv,
        "gpus": [pool.gpu_resource, pool.gpus_per_replica],
        "hostMemory": [pool.host_memory_gib, pool.shm_gib],
        "env": [e.to_wire() for e in service.spec.vllm.env],
        "source": service.spec.model.source.to_wire(),
        "security": service.spec.security.to_wire(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def owner_reference(service: VLLMService) -> Obj:
    """Controller owner reference: deleting the service garbage-collects everything it owns."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": service.name,
        "uid": str(service.metadata.get("uid", "")),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(service: VLLMService, name: str, extra_labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": service.namespace,
        "labels": {**common_labels(service.name), **(extra_labels or {})},
    }
    if service.metadata.get("uid"):
        meta["ownerReferences"] = [owner_reference(service)]
    return meta


def startup_budget_seconds(weights_gib_total: float) -> int:
    """How long the startup probe waits before Kubernetes restarts a loading pod."""
    budget = _STARTUP_BASE_S + _STARTUP_PER_WEIGHT_GIB_S * weights_gib_total
    return int(min(_STARTUP_MAX_S, math.ceil(budget / _PROBE_PERIOD_S) * _PROBE_PERIOD_S))


def _env(service: VLLMService) -> list[Obj]:
    env: list[Obj] = [
        # Fewer fragmentation OOMs on long-running servers (vLLM does not set it itself).
        {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"},
        {"name": "HF_HOME", "value": MODEL_CACHE_PATH},
        # The pod runs as a non-root UID the image has no passwd entry for: a writable HOME for
        # vLLM's, Triton's and torch.compile's caches, and USER so getpass.getuser() needs no
        # passwd lookup (torch's inductor cache path calls it).
        {"name": "HOME", "value": HOME_PATH},
        {"name": "USER", "value": "vllm"},
    ]
    hf = service.spec.model.source.hugging_face
    if hf is not None and hf.token_secret_ref is not None:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {
                        "name": hf.token_secret_ref.name,
                        "key": hf.token_secret_ref.key,
                    }
                },
            }
        )
    if service.spec.model.revision:
        env.append({"name": "VLLM_OPERATOR_MODEL_REVISION", "value": service.spec.model.revision})
    reserved = {e["name"] for e in env}
    env.extend(e.to_wire() for e in service.spec.vllm.env if e.name not in reserved)
    return env


def _volumes(service: VLLMService, pool: PoolRender) -> tuple[list[Obj], list[Obj]]:
    volumes: list[Obj] = [{"name": "model-cache", "emptyDir": {}}, {"name": "home", "emptyDir": {}}]
    mounts: list[Obj] = [
        {"name": "model-cache", "mountPath": MODEL_CACHE_PATH},
        {"name": "home", "mountPath": HOME_PATH},
    ]
    pvc = service.spec.model.source.pvc
    if pvc is not None:
        volumes.append(
            {
                "name": "model",
                "persistentVolumeClaim": {"claimName": pvc.claim_name, "readOnly": True},
            }
        )
        mounts.append({"name": "model", "mountPath": PVC_MOUNT_PATH, "readOnly": True})
    if pool.gpus_per_replica > 1:
        # NCCL and PyTorch use shared memory between the tensor-parallel workers; the
        # container default of 64 MiB is too small. Memory-backed: its pages count against the
        # container's memory limit, which is why the host-memory plan sizes it.
        shm = pool.shm_gib or 2
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm}Gi"}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


def _probes(pool: PoolRender) -> Obj:
    http = {"path": "/health", "port": "http"}
    startup_failures = startup_budget_seconds(pool.weights_gib_total) // _PROBE_PERIOD_S
    return {
        "startupProbe": {
            "httpGet": http,
            "periodSeconds": _PROBE_PERIOD_S,
            "timeoutSeconds": 5,
            "failureThreshold": startup_failures,
        },
        "readinessProbe": {
            "httpGet": http,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": http,
            "periodSeconds": 15,
            "timeoutSeconds": 10,
            "failureThreshold": 4,
        },
    }


def render_deployment(service: VLLMService, pool: PoolRender) -> Obj:
    """One pool's Deployment."""
    name = deployment_name(service.name, pool.gpu_type)
    pod_labels = {
        **common_labels(service.name),
        **pool_selector_labels(service.name, pool.gpu_type),
        LABEL_SERVING: "true",
    }
    volumes, mounts = _volumes(service, pool)
    node_selector = {**service.spec.placement.node_selector, LABEL_GPU_PRODUCT: pool.gpu_type}
    tolerations = [t.to_wire() for t in service.spec.placement.tolerations]
    gpu_toleration = {"key": pool.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}
    if gpu_toleration not in tolerations:
        tolerations.append(gpu_toleration)
    gpus = str(pool.gpus_per_replica)
    hash_ = plan_hash(service, pool)
    container: Obj = {
        "name": "vllm",
        "image": pool.image,
        "command": pool.command,
        "args": [*pool.model_args, *pool.engine_argv],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": _env(service),
        # Memory request = limit (planning.host_memory): the pod lands only where the node can
        # hold what it may use, and an OOMKilled container means this plan was too small.
        "resources": {
            "requests": {
                "cpu": str(2 * pool.gpus_per_replica),
                "memory": f"{pool.host_memory_gib}Gi",
                pool.gpu_resource: gpus,
            },
            "limits": {"memory": f"{pool.host_memory_gib}Gi", pool.gpu_resource: gpus},
        },
        "volumeMounts": mounts,
        **_probes(pool),
        "securityContext": container_security_context(service.spec.security),
    }
    rollout = service.spec.rollout
    replicas: Obj = {} if pool.replicas is None else {"replicas": pool.replicas}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            **_metadata(service, name, {LABEL_POOL: gpu_short_name(pool.gpu_type)}),
            "annotations": {ANNOTATION_PLAN_HASH: hash_, ANNOTATION_GPU_TYPE: pool.gpu_type},
        },
        "spec": {
            **replicas,
            "selector": {"matchLabels": pool_selector_labels(service.name, pool.gpu_type)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {
                    "maxSurge": rollout.max_surge,
                    "maxUnavailable": rollout.max_unavailable,
                },
            },
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {ANNOTATION_PLAN_HASH: hash_},
                },
                "spec": {
                    # Service links would inject VLLM_PORT from any Service named `vllm`.
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 60,
                    "nodeSelector": node_selector,
                    "tolerations": tolerations,
                    "securityContext": pod_security_context(service.spec.security),
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def render_service(service: VLLMService) -> Obj:
    """The Service in front of every pool (OpenAI-compatible API and /metrics on port 8000)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(service, service_name(service.name)),
        "spec": {
            "type": "ClusterIP",
            "selector": {**selector_labels(service.name), LABEL_SERVING: "true"},
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def render_pdb(service: VLLMService) -> Obj:
    """At most one pod of the service voluntarily disrupted at a time (drains, remediation)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(service, service.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(service.name)}},
    }
