"""How clients reach a VLLMService: its plain Service, or an InferencePool behind a gateway (#31).

Why: a service spread over several GPU pools (an H100 and an A100 plan) holds different KV-cache
capacities per pod, so round-robin over the Service overloads the small pods first. The Gateway
API Inference Extension (`inference.networking.k8s.io/v1` InferencePool plus an Endpoint Picker)
lets a gateway (Envoy AI Gateway, kgateway, GKE, ...) ask a picker that scores each vLLM pod by
queue depth, KV-cache usage and prefix affinity. The operator renders the InferencePool over every
serving pod of the service and, unless the user names one, the picker itself, configured with the
metric names of the pinned vLLM release. The gateway and its HTTPRoute stay the user's.
"""

from enum import StrEnum

from pydantic import ConfigDict, Field, model_validator

from vllm_operator.api.base import ApiModel
from vllm_operator.api.errors import FieldProblem

EPP_DEFAULT_PORT = 9002
"""The Endpoint Picker's ext-proc gRPC port (the port InferencePool implementations assume when
an extension Service's port is not given)."""

_DNS_1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class RoutingMode(StrEnum):
    """Who spreads requests over the pods of the service."""

    SERVICE = "service"
    INFERENCE_POOL = "inferencePool"


class EndpointPickerRef(ApiModel):
    """An Endpoint Picker the user runs: a Service in the VLLMService's namespace."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=_DNS_1035,
        description="Name of the picker's Service in the VLLMService's namespace.",
    )
    port: int = Field(
        default=EPP_DEFAULT_PORT,
        ge=1,
        le=65535,
        description=f"The picker Service's ext-proc (gRPC) port. Defaults to {EPP_DEFAULT_PORT}.",
    )


class RoutingSpec(ApiModel):
    """How the service is exposed to clients and gateways."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.endpointPickerRef) || "
                    "(has(self.mode) && self.mode == 'inferencePool')",
                    "message": "endpointPickerRef needs mode inferencePool",
                    "fieldPath": ".endpointPickerRef",
                }
            ]
        }
    )

    mode: RoutingMode = Field(
        default=RoutingMode.SERVICE,
        description="service (the default): clients and gateways use the plain Service, which "
        "spreads requests over every Ready pod of every pool. inferencePool: the operator also "
        "renders an InferencePool (inference.networking.k8s.io/v1) named like the service, "
        "selecting the serving pods of all its GPU pools (leaders only for multi-node pools) on "
        "the engine port, for a gateway's HTTPRoute to point at; the pool's Endpoint Picker is "
        "endpointPickerRef, or one the operator renders (`<name>-epp`) configured with the "
        "pinned vLLM release's metric names. Back to service: the InferencePool and the "
        "rendered picker are deleted. See docs/gitops.md.",
    )
    endpoint_picker_ref: EndpointPickerRef | None = Field(
        default=None,
        description="An Endpoint Picker the user runs (mode inferencePool only). Unset: the "
        "operator renders and runs one per service.",
    )

    @model_validator(mode="after")
    def _picker_needs_pool(self) -> "RoutingSpec":
        if self.endpoint_picker_ref is not None and self.mode != RoutingMode.INFERENCE_POOL:
            raise FieldProblem("endpointPickerRef", "endpointPickerRef needs mode inferencePool")
        return self
