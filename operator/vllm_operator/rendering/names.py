"""Stable names and labels of the objects a VLLMService owns.

Names must not change when nothing about the pool changes (a rename would delete and recreate a
Deployment holding GPUs), so they derive only from the service name and the GPU product label.
"""

import hashlib
import re

from vllm_operator.api.service import ANNOTATION_PREFIX

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_SERVICE = f"{ANNOTATION_PREFIX}/service"
LABEL_POOL = f"{ANNOTATION_PREFIX}/pool"
# Only the Service selects on this label: setting it to "false" drains a pod (no new requests)
# while its ReplicaSet still owns it, before remediation evicts it.
LABEL_SERVING = f"{ANNOTATION_PREFIX}/serving"
ANNOTATION_DRAINING_SINCE = f"{ANNOTATION_PREFIX}/draining-since"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
ANNOTATION_PLAN_HASH = f"{ANNOTATION_PREFIX}/plan-hash"
ANNOTATION_GPU_TYPE = f"{ANNOTATION_PREFIX}/gpu-type"
MANAGED_BY = "vllm-operator"

# Deployment names feed pod names (<deployment>-<10 char hash>-<5 char suffix>) and label values,
# which Kubernetes limits to 63 characters.
_MAX_DEPLOYMENT_NAME = 47

_DROP_TOKENS = {
    "nvidia",
    "tesla",
    "geforce",
    "sxm",
    "sxm2",
    "sxm4",
    "sxm5",
    "pcie",
    "hbm3",
    "hbm3e",
    "shared",
    "generation",
}


def gpu_short_name(product_label: str) -> str:
    """A short, DNS-safe name for a GPU product: NVIDIA-H100-80GB-HBM3 -> h100-80gb.

    Vendor and form-factor tokens are dropped; MIG profiles are kept (a100-40gb-mig-1g-5gb) so two
    pools of one card never collide.
    """
    tokens = [t for t in re.split(r"[^a-z0-9]+", product_label.lower()) if t]
    kept = [t for t in tokens if t not in _DROP_TOKENS]
    short = "-".join(kept or tokens) or "gpu"
    return short[:30].strip("-")


def deployment_name(service: str, product_label: str) -> str:
    """`<service>-<gpu-short-name>`, shortened with a hash suffix when too long."""
    name = f"{service}-{gpu_short_name(product_label)}"
    if len(name) <= _MAX_DEPLOYMENT_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[: _MAX_DEPLOYMENT_NAME - 7].rstrip('-')}-{digest}"


def service_name(service: str) -> str:
    """The Kubernetes Service in front of all pools.

    Never `vllm`: a Service of that name makes Kubernetes inject VLLM_PORT=tcp://... into pods of
    the namespace, which vLLM reads as its own port setting and crashes at start.
    """
    return f"{service}-api" if service == "vllm" else service


def selector_labels(service: str) -> dict[str, str]:
    """Labels that select every pod of a service (all pools)."""
    return {LABEL_NAME: "vllm", LABEL_INSTANCE: service}


def pool_selector_labels(service: str, product_label: str) -> dict[str, str]:
    """Labels that select the pods of one pool."""
    return {**selector_labels(service), LABEL_POOL: gpu_short_name(product_label)}


def common_labels(service: str) -> dict[str, str]:
    """Labels every owned object carries."""
    return {
        **selector_labels(service),
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: "inference",
        LABEL_SERVICE: service,
    }
