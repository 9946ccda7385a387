"""The VLLMService resource: group, version, names and the top-level object."""

from typing import Any, Literal

from pydantic import Field

from vllm_operator.api.base import ApiModel
from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.api.status import VLLMServiceStatus

GROUP = "serving.vllm-operator.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "VLLMService"
PLURAL = "vllmservices"
SINGULAR = "vllmservice"
SHORT_NAMES = ("vllms",)
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

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", "default"))
