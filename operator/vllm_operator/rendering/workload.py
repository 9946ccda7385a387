"""Render the Deployment (or LeaderWorkerSet), Service and PodDisruptionBudget of a VLLMService.

Pure. Inputs are the parsed service and, per pool, a `PoolRender` that the reconcile step
assembles from the plan and the version catalog. Outputs are wire-format dicts ready for
server-side apply, so the same function backs `vllm-operator render` (GitOps reviews, golden files)
and the controller. A pool whose replica spans several nodes (pipeline parallelism across nodes)
becomes one LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): a group of one leader and
`nodes_per_replica - 1` workers per replica, one pod per node; every other pool a Deployment.
"""

import copy
import hashlib
import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.security import container_security_context, pod_security_context
from vllm_operator.api.service import API_VERSION, KIND, VLLMService
from vllm_operator.catalog.vllm.values import configures_kv_connector
from vllm_operator.rendering.dra import (
    GpuClaim,
    claim_pod_spec,
    claim_template_name,
    render_claim_template,
)
from vllm_operator.rendering.drain import DrainPlan, plan_drain
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

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"

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
    gpus_per_replica: int = Field(
        ge=1,
        description="GPUs of one pod: tensor x pipeline parallel size on one node; with "
        "nodes_per_replica > 1 the GPUs of each pod of the group (the tensor-parallel size).",
    )
    nodes_per_replica: int = Field(
        default=1,
        ge=1,
        description="Pods (nodes) of one replica: 1 renders a Deployment, more a LeaderWorkerSet "
        "whose group size is this (the planned pipeline_parallel_size).",
    )
    leader_argv: list[str] = Field(
        default_factory=list,
        description="Multi-node bootstrap flags of the group's leader (after engine_argv).",
    )
    worker_argv: list[str] = Field(
        default_factory=list,
        description="Multi-node bootstrap flags of the group's workers (after engine_argv).",
    )
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
    gpu_claim: GpuClaim | None = Field(
        default=None,
        description="gpuAllocation dra: the devices each pod claims through the pool's "
        "ResourceClaimTemplate (rendering/dra.py) instead of the extended resource.",
    )


def drain_for(service: VLLMService, pool: PoolRender) -> DrainPlan:
    """How the pool's pods stop (rendering/drain.py): graceful-shutdown flag, preStop, grace."""
    return plan_drain(
        service.spec.vllm.version, service.spec.workload.p99_context_tokens, pool.engine_argv, PORT
    )


def plan_hash(service: VLLMService, pool: PoolRender, drain: DrainPlan | None = None) -> str:
    """Hash of what decides the pods' behaviour; it changes exactly when pods must roll.
    `drain`: the pool's `drain_for`, when the caller has it already (a render computes it once)."""
    drain = drain if drain is not None else drain_for(service, pool)
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
        "drain": [drain.engine_argv, drain.grace_seconds, drain.pre_stop],
    }
    if pool.nodes_per_replica > 1:
        # Only multi-node pools hash these: single-node hashes (and so their pods) stay as they
        # were before LeaderWorkerSet pools existed.
        payload["group"] = [pool.nodes_per_replica, pool.leader_argv, pool.worker_argv]
    if pool.gpu_claim is not None:
        # Only DRA pools hash the claim: device-plugin hashes stay as they were.
        payload["claim"] = pool.gpu_claim.to_hash()
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


def pins_kv_cache_pages(service: VLLMService) -> bool:
    """Whether the pod must start without expandable segments: extraArgs configure a KV connector
    (catalog.vllm.values.configures_kv_connector says why)."""
    return configures_kv_connector(service.spec.vllm.version, service.spec.vllm.extra_args)


def _env(service: VLLMService) -> list[Obj]:
    env: list[Obj] = []
    if not pins_kv_cache_pages(service):
        # Fewer fragmentation OOMs on long-running servers (vLLM does not set it itself).
        env.append({"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"})
    env += [
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


def _tolerations(service: VLLMService, pool: PoolRender) -> list[Obj]:
    tolerations = [t.to_wire() for t in service.spec.placement.tolerations]
    gpu_toleration = {"key": pool.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}
    if gpu_toleration not in tolerations:
        tolerations.append(gpu_toleration)
    return tolerations


def _container(
    service: VLLMService, pool: PoolRender, extra_argv: list[str], drain: DrainPlan
) -> Obj:
    gpus = str(pool.gpus_per_replica)
    _, mounts = _volumes(service, pool)
    return {
        "name": "vllm",
        "image": pool.image,
        "command": pool.command,
        "args": [*pool.model_args, *pool.engine_argv, *drain.engine_argv, *extra_argv],
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
    }


def _pod_spec(service: VLLMService, pool: PoolRender, container: Obj, drain: DrainPlan) -> Obj:
    volumes, _ = _volumes(service, pool)
    spec: Obj = {
        # Service links would inject VLLM_PORT from any Service named `vllm`.
        "enableServiceLinks": False,
        # preStop and the engine's own drain both run within it (rendering/drain.py).
        "terminationGracePeriodSeconds": drain.grace_seconds,
        "nodeSelector": {**service.spec.placement.node_selector, LABEL_GPU_PRODUCT: pool.gpu_type},
        "tolerations": _tolerations(service, pool),
        "securityContext": pod_security_context(service.spec.security),
        "containers": [container],
        "volumes": volumes,
    }
    if pool.gpu_claim is not None:
        name = claim_template_name(deployment_name(service.name, pool.gpu_type), pool.gpu_claim)
        return claim_pod_spec(spec, name, pool.gpu_resource)
    return spec


def _rollout(service: VLLMService) -> Obj:
    rollout = service.spec.rollout
    return {"maxSurge": rollout.max_surge, "maxUnavailable": rollout.max_unavailable}


def render_deployment(service: VLLMService, pool: PoolRender) -> Obj:
    """One single-node pool's Deployment."""
    name = deployment_name(service.name, pool.gpu_type)
    pod_labels = {
        **common_labels(service.name),
        **pool_selector_labels(service.name, pool.gpu_type),
        LABEL_SERVING: "true",
    }
    drain = drain_for(service, pool)
    hash_ = plan_hash(service, pool, drain)
    container: Obj = {
        **_container(service, pool, [], drain),
        **_probes(pool),
        "lifecycle": {"preStop": drain.pre_stop},
        "securityContext": container_security_context(service.spec.security),
    }
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
            "strategy": {"type": "RollingUpdate", "rollingUpdate": _rollout(service)},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {ANNOTATION_PLAN_HASH: hash_},
                },
                "spec": _pod_spec(service, pool, container, drain),
            },
        },
    }


def render_leader_worker_set(service: VLLMService, pool: PoolRender) -> Obj:
    """One multi-node pool's LeaderWorkerSet: a group of `nodes_per_replica` pods per replica.

    Why this shape:
    - One pod per node, each with the GPUs of one pipeline stage (the tensor-parallel size), so
      the scheduler places each stage on its own node and a group needs whole nodes.
    - The leader runs the API server (node rank 0); workers run vLLM headless with their rank
      from LWS_WORKER_INDEX and reach the leader at LWS_LEADER_ADDRESS (both injected by the
      LeaderWorkerSet controller's pod webhook; Kubernetes expands `$(VAR)` in args). Only the
      leader answers HTTP, so only it has probes and the serving label (the Service selects it).
    - startupPolicy LeaderCreated, not LeaderReady: vLLM's leader answers /health only after
      every worker joined its rendezvous and the weights are loaded, so workers that waited for
      a Ready leader would never start (a deadlock). The group restarts as one
      (RecreateGroupOnPodRestart): a pipeline without one of its stages serves nothing.
    - A rolling update replaces whole groups (maxSurge/maxUnavailable count groups).
    """
    name = deployment_name(service.name, pool.gpu_type)
    drain = drain_for(service, pool)
    hash_ = plan_hash(service, pool, drain)
    base_labels = {
        **common_labels(service.name),
        **pool_selector_labels(service.name, pool.gpu_type),
    }
    security = container_security_context(service.spec.security)
    leader = {
        **_container(service, pool, pool.leader_argv, drain),
        **_probes(pool),
        "lifecycle": {"preStop": drain.pre_stop},
        "securityContext": security,
    }
    # Workers keep their pipeline stage until the leader has drained (the leader drains first).
    worker = {
        **_container(service, pool, pool.worker_argv, drain),
        "lifecycle": {"preStop": drain.worker_pre_stop},
        "securityContext": security,
    }
    # Workers listen only for NCCL/Gloo traffic from the group: no HTTP port.
    del worker["ports"]
    nccl_env = [
        # The pods talk over the pod network: NCCL and Gloo bind to the pod's interface.
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
        {"name": "GLOO_SOCKET_IFNAME", "value": "eth0"},
        {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    leader["env"] = [*leader["env"], *nccl_env]
    worker["env"] = [*worker["env"], *nccl_env]
    replicas: Obj = {} if pool.replicas is None else {"replicas": pool.replicas}
    annotations = {ANNOTATION_PLAN_HASH: hash_}
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": LWS_KIND,
        "metadata": {
            **_metadata(service, name, {LABEL_POOL: gpu_short_name(pool.gpu_type)}),
            "annotations": {ANNOTATION_PLAN_HASH: hash_, ANNOTATION_GPU_TYPE: pool.gpu_type},
        },
        "spec": {
            **replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": _rollout(service),
            },
            "leaderWorkerTemplate": {
                "size": pool.nodes_per_replica,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {
                        "labels": {**base_labels, LABEL_SERVING: "true"},
                        "annotations": annotations,
                    },
                    "spec": _pod_spec(service, pool, leader, drain),
                },
                # A copy: the templates share no object (a caller may change one).
                "workerTemplate": copy.deepcopy(
                    {
                        "metadata": {"labels": base_labels, "annotations": annotations},
                        "spec": _pod_spec(service, pool, worker, drain),
                    }
                ),
            },
        },
    }


def render_workload(service: VLLMService, pool: PoolRender) -> Obj:
    """The pool's workload: a LeaderWorkerSet when a replica spans nodes, else a Deployment."""
    if pool.nodes_per_replica > 1:
        return render_leader_worker_set(service, pool)
    return render_deployment(service, pool)


def render_pool_claim_template(service: VLLMService, pool: PoolRender) -> Obj | None:
    """The pool's ResourceClaimTemplate in gpuAllocation dra mode (None otherwise); owned by the
    service like the workload that refers to it."""
    if pool.gpu_claim is None:
        return None
    name = claim_template_name(deployment_name(service.name, pool.gpu_type), pool.gpu_claim)
    labels = {LABEL_POOL: gpu_short_name(pool.gpu_type)}
    return render_claim_template(_metadata(service, name, labels), pool.gpu_claim)


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
