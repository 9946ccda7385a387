"""What kube-apiserver 1.35 refuses in the DRA objects the operator writes or reads, for the fake.

The in-memory gateway (kube/fake.py) must refuse what the server refuses, or a reconcile test
passes where the real cluster fails. These are the rules of k8s.io/kubernetes
pkg/apis/resource/validation (v1.35) that the operator's objects can break: a ResourceClaimTemplate
(request name a DNS label, count 1..128 with ExactCount, a device class name, a non-empty
CEL selector of at most 10 KiB, the spec immutable after creation) and a ResourceSlice as a driver
publishes it (driver a DNS subdomain of at most 63 characters, a pool name and non-negative
generation with a positive slice count, exactly one of nodeName / nodeSelector / allNodes /
perDeviceNodeSelection, at most 128 devices named by DNS labels, each attribute with exactly one
value of at most 64 characters, at most 32 attributes and capacities together per device).
"""

import re
from typing import Any

Obj = dict[str, Any]

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MAX_COUNT = 128  # resource.AllocationResultsMaxSize: devices one request may allocate
_MAX_CEL_BYTES = 10 * 1024  # resource.CELSelectorExpressionMaxLength
_MAX_DEVICES = 128  # resource.ResourceSliceMaxDevices
_MAX_ATTRIBUTES_AND_CAPACITIES = 32  # resource.ResourceSliceMaxAttributesAndCapacitiesPerDevice
_MAX_ATTRIBUTE_VALUE = 64  # resource.DeviceAttributeMaxValueLength
_VALUE_TYPES = ("int", "bool", "string", "version")
_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def _label(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(_DNS1123_LABEL.fullmatch(value))


def claim_template_problems(obj: Obj) -> list[str]:
    """Field errors of a ResourceClaimTemplate (as `field: why`), empty when valid."""
    problems: list[str] = []
    requests = (((obj.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests")
    if not isinstance(requests, list):
        return ["spec.spec.devices.requests: Required value"]
    for i, request in enumerate(requests):
        at = f"spec.spec.devices.requests[{i}]"
        if not _label(request.get("name")):
            problems.append(f"{at}.name: Invalid value: a DNS label")
        exactly = request.get("exactly")
        if not isinstance(exactly, dict):
            problems.append(f"{at}.exactly: Required value")
            continue
        if not _DNS1123_SUBDOMAIN.fullmatch(str(exactly.get("deviceClassName") or "")):
            problems.append(f"{at}.exactly.deviceClassName: Required value")
        mode = exactly.get("allocationMode", "ExactCount")
        if mode not in ("ExactCount", "All"):
            problems.append(f"{at}.exactly.allocationMode: Unsupported value: {mode!r}")
        count = exactly.get("count")
        if mode == "ExactCount" and (
            not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= _MAX_COUNT
        ):
            problems.append(
                f"{at}.exactly.count: Invalid value: {count!r}: must be in 1..{_MAX_COUNT}"
            )
        for j, selector in enumerate(exactly.get("selectors") or []):
            expression = ((selector or {}).get("cel") or {}).get("expression")
            if not isinstance(expression, str) or not expression.strip():
                problems.append(f"{at}.exactly.selectors[{j}].cel.expression: Required value")
            elif len(expression.encode()) > _MAX_CEL_BYTES:
                problems.append(f"{at}.exactly.selectors[{j}].cel.expression: Too long")
    return problems


def claim_template_update_problems(old: Obj, new: Obj) -> list[str]:
    """A ResourceClaimTemplate's spec cannot change (ValidateResourceClaimTemplateUpdate)."""
    if old.get("spec") != new.get("spec"):
        return ["spec: Invalid value: field is immutable"]
    return []


def resource_slice_problems(obj: Obj) -> list[str]:
    """Field errors of a ResourceSlice (as `field: why`), empty when valid."""
    spec = obj.get("spec") or {}
    problems: list[str] = []
    driver = spec.get("driver")
    # Measured on kube-apiserver 1.35.4: "GPU.NVIDIA.COM" is accepted (the name is checked in
    # lower case), "gpu_nvidia.com" refused.
    name_ok = isinstance(driver, str) and bool(_DNS1123_SUBDOMAIN.fullmatch(driver.lower()))
    if not (name_ok and len(str(driver)) <= 63):
        problems.append(f"spec.driver: Invalid value: {driver!r}: a DNS subdomain (<= 63)")
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        problems.append("spec.pool.name: Required value")
    generation, count = pool.get("generation"), pool.get("resourceSliceCount")
    if not isinstance(generation, int) or generation < 0:
        problems.append("spec.pool.generation: Invalid value: must be >= 0")
    if not isinstance(count, int) or count <= 0:
        problems.append("spec.pool.resourceSliceCount: Invalid value: must be > 0")
    chosen = [k for k in _NODE_SELECTION if spec.get(k)]
    if len(chosen) != 1:
        problems.append(f"spec: Invalid value: exactly one of {', '.join(_NODE_SELECTION)}")
    devices = spec.get("devices") or []
    if len(devices) > _MAX_DEVICES:
        problems.append(f"spec.devices: Too many: {len(devices)}: must have at most 128 items")
    for i, device in enumerate(devices):
        at = f"spec.devices[{i}]"
        if not _label(device.get("name")):
            problems.append(f"{at}.name: Invalid value: a DNS label")
        attributes = device.get("attributes") or {}
        capacity = device.get("capacity") or {}
        if len(attributes) + len(capacity) > _MAX_ATTRIBUTES_AND_CAPACITIES:
            problems.append(f"{at}: Too many: attributes and capacities together must be <= 32")
        for name, attribute in attributes.items():
            values = [t for t in _VALUE_TYPES if (attribute or {}).get(t) is not None]
            if len(values) != 1:
                problems.append(f"{at}.attributes[{name}]: Invalid value: exactly one value")
            elif values[0] in ("string", "version") and (
                len(str(attribute[values[0]])) > _MAX_ATTRIBUTE_VALUE
            ):
                problems.append(f"{at}.attributes[{name}]: Too long: must be <= 64 characters")
        for name, quantity in capacity.items():
            if not isinstance((quantity or {}).get("value"), str | int):
                problems.append(f"{at}.capacity[{name}].value: Required value")
    return problems
