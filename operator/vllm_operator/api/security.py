"""Security context of the vLLM pods: what a VLLMService may set, and the restricted defaults.

Why: the rendered pods must pass the Pod Security Standard "restricted" by default (non-root,
every capability dropped, no privilege escalation, RuntimeDefault seccomp), and a cluster with its
own rules (a fixed UID range, a Localhost seccomp profile, an image built for another user) must be
able to say so in the spec. Only the fields a restricted or baseline policy judges are offered; the
rendering merges what the spec sets over the defaults, field by field.

The official `vllm/vllm-openai` image has no USER (it runs as root) but runs unchanged under any
UID when HOME and the caches are writable, which rendering provides (an emptyDir HOME); so the
defaults pick a fixed non-root UID (`DEFAULT_UID`).
"""

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from vllm_operator.api.base import ApiModel

DEFAULT_UID = 1000
"""UID/GID the vLLM container runs as unless the spec says otherwise (the image has no USER)."""


_SECCOMP_RULE = (
    "self.type == 'Localhost' ? (has(self.localhostProfile) && self.localhostProfile != '' && "
    "!self.localhostProfile.startsWith('/') && "
    "!self.localhostProfile.matches('(^|/)[.][.](/|$)')) : !has(self.localhostProfile)"
)
_SECCOMP_MESSAGE = (
    "type Localhost needs localhostProfile, a relative path without '..'; "
    "the other types take no localhostProfile"
)


class SeccompProfile(ApiModel):
    """As core/v1 SeccompProfile, with its API validation (issue #12, found by the reconcile fuzz:
    `{type: Localhost}` alone was admitted and every Deployment apply was refused with a 422)."""

    type: Literal["RuntimeDefault", "Localhost", "Unconfined"] = Field(
        description="RuntimeDefault (the restricted default), Localhost (with localhostProfile) or "
        "Unconfined (not allowed by the restricted Pod Security level)."
    )
    localhost_profile: str | None = Field(
        default=None,
        max_length=4096,
        description="Profile file on the node, relative to the kubelet's seccomp dir, without "
        "'..'. Required with type Localhost, refused with the other types.",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": _SECCOMP_RULE, "message": _SECCOMP_MESSAGE}]
        }
    )

    @model_validator(mode="after")
    def _localhost_profile(self) -> "SeccompProfile":
        local = self.localhost_profile
        if self.type == "Localhost":
            if not local or local.startswith("/") or ".." in local.split("/"):
                raise ValueError(_SECCOMP_MESSAGE)
        elif local is not None:
            raise ValueError(_SECCOMP_MESSAGE)
        return self


class Capabilities(ApiModel):
    """As core/v1 Capabilities."""

    add: list[str] | None = Field(default=None, description="Capabilities to add.")
    drop: list[str] | None = Field(default=None, description="Capabilities to drop (default ALL).")


class PodSecurity(ApiModel):
    """Pod-level security context of the vLLM pods (merged over the restricted defaults)."""

    run_as_user: int | None = Field(
        default=None, ge=0, description=f"UID of the vLLM process. Defaults to {DEFAULT_UID}."
    )
    run_as_group: int | None = Field(
        default=None, ge=0, description=f"GID of the vLLM process. Defaults to {DEFAULT_UID}."
    )
    run_as_non_root: bool | None = Field(
        default=None, description="Refuse to start as root. Defaults to true."
    )
    fs_group: int | None = Field(
        default=None, ge=0, description=f"Group owning the volumes. Defaults to {DEFAULT_UID}."
    )
    supplemental_groups: list[int] | None = Field(
        default=None, description="Extra groups of the vLLM process."
    )
    seccomp_profile: SeccompProfile | None = Field(
        default=None, description="Seccomp profile. Defaults to RuntimeDefault."
    )


class ContainerSecurity(ApiModel):
    """Container-level security context of the vLLM container (merged over the defaults)."""

    allow_privilege_escalation: bool | None = Field(default=None, description="Defaults to false.")
    capabilities: Capabilities | None = Field(default=None, description="Defaults to dropping ALL.")
    read_only_root_filesystem: bool | None = Field(
        default=None,
        description="Defaults to false: vLLM and its compilers write caches outside HOME.",
    )
    run_as_user: int | None = Field(default=None, ge=0, description="Overrides the pod's UID.")
    run_as_group: int | None = Field(default=None, ge=0, description="Overrides the pod's GID.")
    run_as_non_root: bool | None = Field(default=None, description="Overrides the pod's setting.")
    seccomp_profile: SeccompProfile | None = Field(
        default=None, description="Overrides the pod's seccomp profile."
    )


class SecuritySpec(ApiModel):
    """Security context of the vLLM pods. Empty: the Pod Security "restricted" defaults."""

    pod: PodSecurity = Field(
        default_factory=PodSecurity, description="Pod-level securityContext fields."
    )
    container: ContainerSecurity = Field(
        default_factory=ContainerSecurity, description="The vLLM container's securityContext."
    )


def pod_security_context(spec: SecuritySpec) -> dict[str, object]:
    """The pod securityContext: restricted defaults, then what the spec sets."""
    wire: dict[str, object] = {
        "runAsNonRoot": True,
        "runAsUser": DEFAULT_UID,
        "runAsGroup": DEFAULT_UID,
        "fsGroup": DEFAULT_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    wire.update(spec.pod.to_wire())
    return wire


def container_security_context(spec: SecuritySpec) -> dict[str, object]:
    """The vLLM container's securityContext: restricted defaults, then what the spec sets."""
    wire: dict[str, object] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    wire.update(spec.container.to_wire())
    return wire
