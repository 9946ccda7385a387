"""Pod-level validation: what the API server (or the kubelet) would refuse in the pods we render.

Why: the CRD passes several fields through to the rendered Deployment/LeaderWorkerSet pods
(security contexts, tolerations, node selector, the image, the token Secret's key). A value the
CRD's schema admits but core/v1 refuses was accepted by `validate` and failed only at apply time
(a 422 on the Deployment) or at container start (CreateContainerConfigError, InvalidImageName).
Each check below mirrors one rule, cites where Kubernetes enforces it, and returns problems with
the VLLMService field path, so `validate`, `render`, the webhook and the reconcile refuse the spec
as InvalidSpec before anything is applied.

Each check is a standalone named function `(spec) -> list[Problem]`; POD_CHECKS lists them in
order and `pod_problems` runs them all.
"""

import re
from collections.abc import Callable

from vllm_operator.api.errors import Problem
from vllm_operator.api.security import DEFAULT_UID
from vllm_operator.api.spec import VLLMServiceSpec

MAX_ID = 2_147_483_647
"""Largest UID/GID core/v1 accepts: k8s.io/apimachinery pkg/util/validation IsValidUserID /
IsValidGroupID (0 <= id <= math.MaxInt32), called from k8s.io/kubernetes
pkg/apis/core/validation validatePodSpecSecurityContext (runAsUser, runAsGroup, fsGroup,
supplementalGroups) and ValidateSecurityContext (container runAsUser, runAsGroup)."""

LINUX_CAPABILITIES = frozenset(
    {
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    }
)
"""Linux capabilities (include/uapi/linux/capability.h, CAP_CHOWN .. CAP_CHECKPOINT_RESTORE).
The container runtime refuses any other name when it builds the OCI spec (containerd and CRI-O
both fail the container with "unknown capability"), so the pod never starts."""

CONFIG_MAP_KEY_PATTERN = re.compile(r"^[-._a-zA-Z0-9]+$")
"""A Secret/ConfigMap key: k8s.io/apimachinery IsConfigMapKey, checked by core validation's
validateSecretKeySelector for env[].valueFrom.secretKeyRef.key (at most 253 characters)."""

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# Image references as the kubelet parses them (github.com/distribution/reference regexp.go,
# used by pkg/kubelet/images applyDefaultImageTag): a reference it cannot parse is
# InvalidImageName and the container never starts.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(rf"^{_NAME}(?::{_TAG})?(?:@{_DIGEST})?$")
MAX_IMAGE_NAME = 255
"""distribution/reference NameTotalLengthMax: the repository name (without tag or digest)."""

PodCheck = Callable[[VLLMServiceSpec], list[Problem]]


def check_security_ids(spec: VLLMServiceSpec) -> list[Problem]:
    """UIDs and GIDs within 0..2147483647 (IsValidUserID / IsValidGroupID)."""
    out: list[Problem] = []
    pod, container = spec.security.pod, spec.security.container
    fields: list[tuple[str, int | None, str]] = [
        ("spec.security.pod.runAsUser", pod.run_as_user, "user"),
        ("spec.security.pod.runAsGroup", pod.run_as_group, "group"),
        ("spec.security.pod.fsGroup", pod.fs_group, "group"),
        ("spec.security.container.runAsUser", container.run_as_user, "user"),
        ("spec.security.container.runAsGroup", container.run_as_group, "group"),
    ]
    fields += [
        (f"spec.security.pod.supplementalGroups[{i}]", gid, "group")
        for i, gid in enumerate(pod.supplemental_groups or [])
    ]
    for path, value, what in fields:
        if value is not None and not 0 <= value <= MAX_ID:
            out.append(
                Problem(
                    path=path,
                    value=value,
                    message=f"not a valid {what} ID: the API server refuses the pod",
                    accepted=f"an integer between 0 and {MAX_ID}",
                )
            )
    return out


def check_run_as_non_root(spec: VLLMServiceSpec) -> list[Problem]:
    """runAsNonRoot (true unless the spec says otherwise) with an effective runAsUser of 0.

    The container-level value overrides the pod-level one (core/v1 SecurityContext). The kubelet
    refuses to start such a container (pkg/kubelet/kuberuntime verifyRunAsNonRoot: "container's
    runAsUser breaks non-root policy"): CreateContainerConfigError for ever.
    """
    pod, container = spec.security.pod, spec.security.container
    non_root = container.run_as_non_root
    if non_root is None:
        non_root = pod.run_as_non_root
    if non_root is None:
        non_root = True
    if container.run_as_user is not None:
        user, path = container.run_as_user, "spec.security.container.runAsUser"
    elif pod.run_as_user is not None:
        user, path = pod.run_as_user, "spec.security.pod.runAsUser"
    else:
        user, path = DEFAULT_UID, ""
    if non_root and user == 0:
        return [
            Problem(
                path=path,
                value=0,
                message="runAsUser 0 (root) with runAsNonRoot true: the kubelet refuses to start "
                "the container (runAsNonRoot defaults to true)",
                accepted="a non-zero UID, or runAsNonRoot: false",
            )
        ]
    return []


def check_capabilities(spec: VLLMServiceSpec) -> list[Problem]:
    """Capability names the container runtime knows: Linux capabilities with or without the
    CAP_ prefix, and ALL."""
    caps = spec.security.container.capabilities
    if caps is None:
        return []
    out: list[Problem] = []
    for field, names in (("add", caps.add), ("drop", caps.drop)):
        for index, name in enumerate(names or []):
            bare = name.removeprefix("CAP_")
            if name == "ALL" or bare in LINUX_CAPABILITIES:
                continue
            out.append(
                Problem(
                    path=f"spec.security.container.capabilities.{field}[{index}]",
                    value=name,
                    message="unknown capability: the container runtime refuses to create the "
                    "container",
                    accepted="ALL or a Linux capability name such as NET_BIND_SERVICE or "
                    "CAP_SYS_PTRACE",
                )
            )
    return out


def _label_key_prefix(key: str, path: str) -> list[Problem]:
    prefix, slash, _ = key.rpartition("/")
    if not slash:
        return []
    if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
        return [
            Problem(
                path=path,
                value=key,
                message="the key's prefix is not a DNS subdomain of at most 253 characters",
                accepted="[prefix/]name with a DNS-1123 subdomain prefix (IsQualifiedName)",
            )
        ]
    return []


def check_label_keys(spec: VLLMServiceSpec) -> list[Problem]:
    """nodeSelector and toleration keys: qualified names whose prefix is a DNS subdomain of at
    most 253 characters (apimachinery IsQualifiedName, called from core validation's
    ValidateNodeSelector... and validateTolerations)."""
    out: list[Problem] = []
    for key in spec.placement.node_selector:
        out += _label_key_prefix(key, f"spec.placement.nodeSelector[{key}]")
    for index, toleration in enumerate(spec.placement.tolerations):
        if toleration.key:
            out += _label_key_prefix(toleration.key, f"spec.placement.tolerations[{index}].key")
    return out


def check_secret_key(spec: VLLMServiceSpec) -> list[Problem]:
    """The Hugging Face token Secret's key becomes env[].valueFrom.secretKeyRef.key, which must
    be a ConfigMap/Secret key (IsConfigMapKey)."""
    hf = spec.model.source.hugging_face
    ref = hf.token_secret_ref if hf is not None else None
    if ref is None or CONFIG_MAP_KEY_PATTERN.match(ref.key):
        return []
    return [
        Problem(
            path="spec.model.source.huggingFace.tokenSecretRef.key",
            value=ref.key,
            message="not a valid Secret key: the API server refuses the pod's secretKeyRef",
            accepted="letters, digits, '-', '_' and '.' (at most 253 characters)",
        )
    ]


def check_image(spec: VLLMServiceSpec) -> list[Problem]:
    """A container image reference the kubelet can parse (lower-case repository path, an
    optional registry host and port, a tag of at most 128 characters, an optional digest)."""
    image = spec.vllm.image
    if image is None:
        return []
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    if IMAGE_REFERENCE.match(image) and len(name) <= MAX_IMAGE_NAME:
        return []
    return [
        Problem(
            path="spec.vllm.image",
            value=image,
            message="not a valid image reference: the kubelet reports InvalidImageName and "
            "never starts the container",
            accepted="[registry[:port]/]lower-case/path[:tag][@sha256:digest], for example "
            "vllm/vllm-openai:v0.11.0",
        )
    ]


POD_CHECKS: tuple[PodCheck, ...] = (
    check_security_ids,
    check_run_as_non_root,
    check_capabilities,
    check_label_keys,
    check_secret_key,
    check_image,
)
"""Every pod-level check, in the order their problems are reported."""


def pod_problems(spec: VLLMServiceSpec) -> list[Problem]:
    """Every problem the API server or the kubelet would find in the pods rendered from spec."""
    out: list[Problem] = []
    for check in POD_CHECKS:
        out.extend(check(spec))
    return out
