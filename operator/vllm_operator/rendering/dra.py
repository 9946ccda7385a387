"""Dynamic Resource Allocation: a pool's GPUs as a ResourceClaimTemplate (resource.k8s.io/v1).

Pure. In `gpuAllocation: dra` mode a pool's pods do not request the device plugin's extended
resource (`nvidia.com/gpu`); each pod gets its own ResourceClaim from the pool's template, which
asks the NVIDIA DRA driver's device class for exactly the planned tensor-parallel size of devices
that can hold the plan:

- `count`: the GPUs of one pod (TP; a multi-node pool's pods each claim their stage's GPUs, one
  claim per pod of the group, because every pod of a LeaderWorkerSet gets its own claim from the
  template).
- a CEL selector on the driver's device attributes, not a product name alone: the device type
  (`gpu` or `mig`), the product (NVML's name with spaces as hyphens, the GPU Feature Discovery
  label the pool is named by), a minimum memory capacity (the memory the plan was computed for:
  vLLM's budget is a fraction of the device's total, so a device with less would not hold the
  planned KV cache), the CUDA compute capability the plan's dtype and fp8 choices assumed, and for
  MIG the partition profile (the smallest the inventory offers that holds the target memory).

The attribute names are the driver's own (NVIDIA/k8s-dra-driver-gpu,
cmd/gpu-kubelet-plugin/deviceinfo.go, `GpuInfo.GetDevice` and `MigDeviceInfo.GetDevice`):
`type` ("gpu" / "mig"), `productName`, `architecture`, `cudaComputeCapability` (a version),
`profile` (MIG, e.g. "3g.40gb"), and the capacity `memory` (bytes, BinarySI). The driver's
Helm chart installs the DeviceClasses `gpu.nvidia.com` (full GPUs) and `mig.nvidia.com` (MIG
partitions); a claim names the one of its device type.
"""

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Obj = dict[str, Any]

DRIVER = "gpu.nvidia.com"
"""The NVIDIA DRA driver's name: the attribute and capacity domain of its devices."""
DEVICE_CLASS = "gpu.nvidia.com"
"""The DeviceClass the driver's chart installs for full GPUs (devices of type gpu)."""
DEVICE_CLASS_MIG = "mig.nvidia.com"
"""The driver's DeviceClass of MIG partitions (devices of type mig)."""
RESOURCE_API_VERSION = "resource.k8s.io/v1"
CLAIM_TEMPLATE_KIND = "ResourceClaimTemplate"
REQUEST_NAME = "gpus"
"""The request's name inside the claim (and the container's `resources.claims[].request`)."""
POD_CLAIM_NAME = "gpus"
"""The pod's `resourceClaims[].name` the vLLM container refers to."""
MIG_MARKER = "-MIG-"


class GpuClaim(BaseModel):
    """What one pod of a pool claims: derived from the plan and the pool's GPU type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = Field(ge=1, description="Devices per pod: the planned tensor-parallel size.")
    product: str = Field(
        description="GFD-style product label of the (parent) GPU, e.g. NVIDIA-H100-80GB-HBM3."
    )
    min_memory_mib: int = Field(
        ge=1, description="Least memory capacity of a device: what the plan was computed for."
    )
    compute_capability: tuple[int, int] | None = Field(
        default=None, description="Least CUDA compute capability (the plan's dtype/fp8 choice)."
    )
    mig_profile: str | None = Field(
        default=None, description="MIG partition profile (1g.10gb, 3g.40gb, ...); None: full GPU."
    )

    def to_hash(self) -> list[object]:
        return [
            self.count,
            self.product,
            self.min_memory_mib,
            list(self.compute_capability or ()),
            self.mig_profile,
        ]


def split_mig_label(label: str) -> tuple[str, str | None]:
    """("NVIDIA-A100-SXM4-80GB", "3g.40gb") for a MIG label, (label, None) for a full GPU."""
    index = label.upper().find(MIG_MARKER)
    if index < 0:
        return label, None
    return label[:index], label[index + len(MIG_MARKER) :].lower()


def _quote(text: str) -> str:
    """A CEL string literal (single quotes; the backslash and quote escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def device_selector(claim: GpuClaim) -> str:
    """The CEL expression a device must satisfy (evaluated by the scheduler per device)."""
    attrs = f"device.attributes[{_quote(DRIVER)}]"
    capacity = f"device.capacity[{_quote(DRIVER)}]"
    terms = [
        f"{attrs}.type == {_quote('mig' if claim.mig_profile else 'gpu')}",
        # NVML's product name; GFD's label is the same with spaces as hyphens.
        f"{attrs}.productName.replace(' ', '-') == {_quote(claim.product)}",
        f"{capacity}.memory.compareTo(quantity({_quote(f'{claim.min_memory_mib}Mi')})) >= 0",
    ]
    if claim.compute_capability is not None:
        major, minor = claim.compute_capability
        terms.append(
            f"{attrs}.cudaComputeCapability.compareTo(semver({_quote(f'{major}.{minor}.0')})) >= 0"
        )
    if claim.mig_profile:
        terms.append(f"{attrs}.profile == {_quote(claim.mig_profile)}")
    return " && ".join(terms)


def claim_template_name(workload_name: str, claim: GpuClaim) -> str:
    """The pool's ResourceClaimTemplate: its workload's name and a hash of the claim.

    A template's spec is immutable (the API server refuses any change), so a new plan that
    claims differently (another TP, memory or MIG profile) gets a new template the new pods
    refer to; the controller deletes the service's templates no pool refers to any more.
    """
    digest = hashlib.sha256(json.dumps(claim.to_hash()).encode()).hexdigest()[:8]
    return f"{workload_name}-gpus-{digest}"


def render_claim_template(metadata: Obj, claim: GpuClaim) -> Obj:
    """The ResourceClaimTemplate of one pool; `metadata` carries name, namespace, labels, owner."""
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": CLAIM_TEMPLATE_KIND,
        "metadata": metadata,
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": REQUEST_NAME,
                            "exactly": {
                                "deviceClassName": (
                                    DEVICE_CLASS_MIG if claim.mig_profile else DEVICE_CLASS
                                ),
                                "allocationMode": "ExactCount",
                                "count": claim.count,
                                "selectors": [{"cel": {"expression": device_selector(claim)}}],
                            },
                        }
                    ]
                }
            }
        },
    }


def claim_pod_spec(pod_spec: Obj, template_name: str, gpu_resource: str) -> Obj:
    """A pod spec whose vLLM container claims the pool's devices instead of the extended resource.

    The product nodeSelector goes too: on a DRA-only cluster no node carries GPU Feature
    Discovery's label, and the claim's selector already says which devices (hence nodes) fit.
    """
    spec = dict(pod_spec)
    selector = {k: v for k, v in spec.get("nodeSelector", {}).items() if k != _GFD_PRODUCT}
    if selector:
        spec["nodeSelector"] = selector
    else:
        spec.pop("nodeSelector", None)
    containers = []
    for container in spec["containers"]:
        resources = container["resources"]
        requests = {k: v for k, v in resources["requests"].items() if k != gpu_resource}
        limits = {k: v for k, v in resources["limits"].items() if k != gpu_resource}
        containers.append(
            {
                **container,
                "resources": {
                    "requests": requests,
                    "limits": limits,
                    "claims": [{"name": POD_CLAIM_NAME}],
                },
            }
        )
    spec["containers"] = containers
    spec["resourceClaims"] = [{"name": POD_CLAIM_NAME, "resourceClaimTemplateName": template_name}]
    return spec


_GFD_PRODUCT = "nvidia.com/gpu.product"
