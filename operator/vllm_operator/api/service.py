"""The VLLMService resource: group, version, names and the top-level object."""

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from vllm_operator.api.base import ApiModel
from vllm_operator.api.errors import FieldProblem
from vllm_operator.api.spec import MAX_SERVICE_NAME, SERVICE_NAME_PATTERN, VLLMServiceSpec
from vllm_operator.api.status import VLLMServiceStatus

GROUP = "serving.vllm-operator.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "VLLMService"
PLURAL = "vllmservices"
SINGULAR = "vllmservice"
SHORT_NAMES = ("vllms",)
LEGACY_FINALIZER = f"{GROUP}/kopf-finalizer"
"""The finalizer operator versions with a Kopf timer added to every VLLMService; none is added
now, and the reconcile removes this one (so such a service deletes without the operator)."""
CATEGORIES = ("vllm-operator", "ai")
FIELD_MANAGER = "vllm-operator"
ANNOTATION_PREFIX = GROUP


class VLLMService(ApiModel):
    """Serve a model with vLLM at a P99 context and concurrency on chosen GPU types.

    The operator computes vLLM's engine arguments for every allowed GPU type from the model's
    architecture and the GPU's memory, runs one Deployment per GPU type, and keeps the service
    memory-safe at run time.
    """

    api_version: Literal["serving.vllm-operator.dev/v1alpha1"] = Field(
        alias="apiVersion", description="serving.vllm-operator.dev/v1alpha1"
    )
    kind: Literal["VLLMService"] = Field(description="VLLMService")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: VLLMServiceSpec = Field(
        description="What to serve, at what context and concurrency, where."
    )
    status: VLLMServiceStatus | None = Field(
        default=None, description="What the operator observed and planned."
    )

    @model_validator(mode="after")
    def _name_fits(self) -> "VLLMService":
        # Mirrors the CRD's schema for metadata.name (see api/crd.py).
        name = self.metadata.get("name")
        if name is None:
            return self
        if not isinstance(name, str) or len(name) > MAX_SERVICE_NAME:
            raise FieldProblem("metadata.name", f"must be at most {MAX_SERVICE_NAME} characters")
        if not re.match(SERVICE_NAME_PATTERN, name):
            raise FieldProblem(
                "metadata.name",
                "must be a DNS-1035 label: lower-case letters, digits and '-', starting with a "
                "letter and ending with a letter or digit",
            )
        return self

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", "default"))
