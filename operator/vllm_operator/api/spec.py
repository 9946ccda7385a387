"""The VLLMService spec: what a user asks for.

A spec states intent (model, P99 context, concurrency, allowed GPU types), never engine limits:
the planner computes those per GPU type. Every field carries a description, which becomes the
`kubectl explain` text through the generated CRD. Defaults live here and are applied when the
operator reads an object; they are deliberately left out of the CRD schema so the API server never
materialises them into the stored spec (GitOps tools own the spec and would see a diff).

Cross-field rules are enforced twice: by pydantic validators here and by CEL rules
(`x-kubernetes-validations`) in the CRD, so kubectl, GitOps pipelines and
`vllm-operator validate` reject the same objects.
"""

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict

from vllm_operator.api.base import ApiModel
from vllm_operator.api.errors import FieldProblem
from vllm_operator.api.routing import RoutingSpec
from vllm_operator.api.security import SecuritySpec

VERSION_PATTERN = r"^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+|\.[0-9]+)?$"
"""An exact vLLM release: X.Y.Z, optionally with a fourth part as PyPI spells it (0.6.6.post1,
0.10.1.1). Ranges and `latest` are rejected: the operator pins one version."""

IMAGE_PATTERN = r"^[^\s]+$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
FLAG_PATTERN = r"^--[a-z0-9][a-z0-9-]*$"
SERVICE_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
"""metadata.name of a VLLMService: a DNS-1035 label, because it names the Kubernetes Service
(`<name>`, or `vllm-api` for `vllm`), which must start with a letter and hold no dots."""

MAX_SERVICE_NAME = 63
"""Longest metadata.name. The name is used verbatim as the Service and PDB name and as the value
of the labels app.kubernetes.io/instance and serving.vllm-operator.dev/service (label values are
limited to 63 characters), so 63 is the bound. Deployment names (`<name>-<gpu-short-name>`, the
short name up to 30 characters) are kept within 47 characters by rendering/names.py with a hash
suffix, so they never constrain the service name; pod names (deployment + 17) stay within 63 too."""

QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
"""A label key (optional DNS-subdomain prefix, a name of at most 63 characters), as in
k8s.io/apimachinery IsQualifiedName; the prefix's 253-character bound is a separate rule."""
LABEL_VALUE_OR_EMPTY_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
NO_CONTROL_CHARS_PATTERN = r"^[^\x00-\x1f\x7f]*$"

OPERATOR_OWNED_EXTRA_ARGS: dict[str, str] = {
    "--model": "the operator passes the model itself",
    "--port": "the operator sets the port its probes and Service use",
    "--host": "the probes and the Service reach vLLM on the pod IP; another bind address "
    "makes the pod unreachable",
    "--uds": "a Unix socket replaces the TCP port the probes and the Service use",
    "--ssl-keyfile": "the probes and the Service speak plain HTTP to the pod",
    "--ssl-certfile": "the probes and the Service speak plain HTTP to the pod",
    "--headless": "a headless engine serves no API for the probes and the Service (the "
    "operator runs the workers of a multi-node replica headless: spec.placement."
    "maxNodesPerReplica)",
    "--nnodes": "the operator sets the nodes of a replica from the plan's pipeline stages "
    "(spec.placement.maxNodesPerReplica)",
    "--node-rank": "the operator sets each node's rank from its LeaderWorkerSet "
    "(spec.placement.maxNodesPerReplica)",
    "--master-addr": "the operator points every node at its LeaderWorkerSet leader "
    "(spec.placement.maxNodesPerReplica)",
    "--master-port": "the operator sets the rendezvous port of a multi-node replica "
    "(spec.placement.maxNodesPerReplica)",
    "--distributed-executor-backend": "the operator runs vLLM's multiprocessing executor on "
    "the GPUs and nodes it places (spec.placement.maxGPUsPerReplica, maxNodesPerReplica)",
    "--disable-log-stats": "it removes every vllm: Prometheus metric the operator watches",
}
"""extraArgs the renderer owns (the pod contract: model, bind address, port, plain HTTP, metrics),
refused by name at admission whatever allowPlannerOverride says. `--served-model-name` is refused
too when the model comes from a PVC, where the operator sets it to model.name."""

MIN_EFFECTIVE_UTILIZATION = 0.01
"""Smallest maxGpuMemoryUtilization - memoryHeadroomFraction: the planner floors the utilization
to hundredths and vLLM needs it above 0, so anything below 0.01 would plan a zero budget."""
_FLOAT_SLACK = 1e-9

NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]
GpuType = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=LABEL_VALUE_PATTERN)
]


def _cel(rule: str, message: str, field_path: str | None = None) -> JsonDict:
    """One CEL rule for the CRD's x-kubernetes-validations (mirrored by a pydantic validator)."""
    entry: JsonDict = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


# ---------------------------------------------------------------------------------------- model


class SecretKeyRef(ApiModel):
    """A key of a Secret in the service's namespace."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="Name of the Secret in the VLLMService's namespace.",
    )
    key: str = Field(
        default="token",
        min_length=1,
        max_length=253,
        description="Key inside the Secret that holds the value. Defaults to `token`.",
    )


class HuggingFaceSource(ApiModel):
    """Download the model from the Hugging Face Hub (or a mirror set through HF_ENDPOINT)."""

    token_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret holding a Hugging Face access token, needed for gated models such as "
        "meta-llama. Passed to vLLM as HF_TOKEN and used by the operator to read config.json.",
    )


class PvcSource(ApiModel):
    """Serve model files that already sit on a PersistentVolumeClaim."""

    claim_name: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="Name of the PersistentVolumeClaim in the service's namespace (mounted read-only).",
    )
    path: str = Field(
        default="/",
        min_length=1,
        description="Directory inside the volume that holds config.json and the weights. "
        "Defaults to the volume's root.",
    )


class ModelSource(ApiModel):
    """Where vLLM loads the model from: exactly one of huggingFace or pvc."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "has(self.huggingFace) != has(self.pvc)",
                    "exactly one of huggingFace or pvc must be set",
                )
            ]
        }
    )

    hugging_face: HuggingFaceSource | None = Field(
        default=None, description="Download from the Hugging Face Hub."
    )
    pvc: PvcSource | None = Field(default=None, description="Load from a PersistentVolumeClaim.")

    @model_validator(mode="after")
    def _exactly_one(self) -> "ModelSource":
        if (self.hugging_face is None) == (self.pvc is None):
            raise ValueError("exactly one of huggingFace or pvc must be set")
        return self


class ModelDtype(StrEnum):
    """Weight and activation dtype passed to vLLM as --dtype."""

    AUTO = "auto"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"


class Architecture(ApiModel):
    """Inline model architecture, for models the operator cannot look up.

    The planner normally reads these numbers from the model's config.json (Hugging Face Hub or its
    own catalog); set them here for private or air-gapped models. Field names follow the
    Hugging Face config.json keys in camelCase.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "has(self.headDim) || self.hiddenSize % self.numAttentionHeads == 0",
                    "hiddenSize must be divisible by numAttentionHeads (or set headDim)",
                    ".hiddenSize",
                ),
                _cel(
                    "!has(self.numKeyValueHeads) || (self.numKeyValueHeads <= "
                    "self.numAttentionHeads && self.numAttentionHeads % self.numKeyValueHeads == 0)",
                    "numAttentionHeads must be a multiple of numKeyValueHeads",
                    ".numKeyValueHeads",
                ),
                _cel(
                    "!has(self.numExpertsPerToken) || (has(self.numExperts) && "
                    "self.numExpertsPerToken <= self.numExperts)",
                    "numExpertsPerToken must not exceed numExperts",
                    ".numExpertsPerToken",
                ),
            ]
        }
    )

    model_type: str | None = Field(
        default=None,
        description="Hugging Face model_type (llama, qwen2, mixtral, deepseek_v3, ...). Informational.",
    )
    num_hidden_layers: int = Field(ge=1, le=1024, description="Number of transformer layers.")
    hidden_size: int = Field(ge=1, le=1_048_576, description="Width of the residual stream.")
    num_attention_heads: int = Field(ge=1, le=4096, description="Number of query heads.")
    num_key_value_heads: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Number of key/value heads (GQA). Defaults to numAttentionHeads (MHA).",
    )
    head_dim: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Dimension of one attention head. Defaults to hiddenSize / numAttentionHeads.",
    )
    intermediate_size: int | None = Field(
        default=None,
        ge=1,
        description="Width of the dense MLP (per expert for MoE without moeIntermediateSize).",
    )
    vocab_size: int = Field(ge=1, le=10_000_000, description="Vocabulary size (embedding rows).")
    max_position_embeddings: int | None = Field(
        default=None, ge=1, description="Longest context the model supports."
    )
    tie_word_embeddings: bool | None = Field(
        default=None, description="Whether lm_head shares the embedding matrix. Defaults to false."
    )
    num_experts: int | None = Field(
        default=None,
        ge=1,
        description="Routed experts per MoE layer (num_local_experts / n_routed_experts).",
    )
    num_experts_per_token: int | None = Field(
        default=None, ge=1, description="Experts activated per token (num_experts_per_tok)."
    )
    moe_intermediate_size: int | None = Field(
        default=None,
        ge=1,
        description="Width of one expert's MLP when it differs from intermediateSize.",
    )
    num_shared_experts: int | None = Field(
        default=None, ge=0, description="Always-active shared experts per MoE layer."
    )
    kv_lora_rank: int | None = Field(
        default=None,
        ge=1,
        description="MLA latent rank (DeepSeek V2/V3). When set, the KV cache holds the latent only.",
    )
    qk_rope_head_dim: int | None = Field(
        default=None, ge=0, description="MLA rotary part of the key, cached next to the latent."
    )
    sliding_window: int | None = Field(
        default=None, ge=1, description="Sliding-window size of the windowed attention layers."
    )
    num_parameters: int | None = Field(
        default=None,
        ge=1,
        description="Total parameter count, when known exactly (overrides the count derived from "
        "the dimensions for weight sizing).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> "Architecture":
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise FieldProblem(
                "hiddenSize", "hiddenSize must be divisible by numAttentionHeads (or set headDim)"
            )
        kv = self.num_key_value_heads
        if kv is not None and (kv > self.num_attention_heads or self.num_attention_heads % kv):
            raise FieldProblem(
                "numKeyValueHeads", "numAttentionHeads must be a multiple of numKeyValueHeads"
            )
        per_token = self.num_experts_per_token
        if per_token is not None and (self.num_experts is None or per_token > self.num_experts):
            raise FieldProblem(
                "numExpertsPerToken", "numExpertsPerToken must not exceed numExperts"
            )
        return self


class ModelSpec(ApiModel):
    """The model to serve."""

    name: str = Field(
        min_length=1,
        max_length=512,
        pattern=NO_CONTROL_CHARS_PATTERN,
        description="Hugging Face repository id (for example meta-llama/Llama-3.1-8B-Instruct) or, "
        "with a pvc source, a name used as vLLM's served model name.",
    )
    revision: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        pattern=NO_CONTROL_CHARS_PATTERN,
        description="Git revision (branch, tag or commit) on the Hub. Pin a commit for reproducible plans.",
    )
    source: ModelSource = Field(
        default_factory=lambda: ModelSource(hugging_face=HuggingFaceSource()),
        description="Where the weights come from. Defaults to the Hugging Face Hub without a token.",
    )
    dtype: ModelDtype = Field(
        default=ModelDtype.AUTO,
        description="Model dtype (--dtype). `auto` lets the planner pick bfloat16 where the GPU "
        "supports it and float16 elsewhere. Defaults to auto.",
    )
    quantization: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9_-]+$",
        description="Quantisation method of the checkpoint (awq, gptq, bitsandbytes, fp8, "
        "compressed-tensors, ...), as vLLM's --quantization spells it; checked against the pinned "
        "vLLM version. Leave unset to use what the checkpoint's config declares.",
    )
    architecture: Architecture | None = Field(
        default=None,
        description="Inline architecture for models the operator cannot look up (private, air-gapped).",
    )


# ----------------------------------------------------------------------------------------- vLLM


class EnvVar(ApiModel):
    """An environment variable for the vLLM container."""

    name: str = Field(
        min_length=1, max_length=253, pattern=ENV_NAME_PATTERN, description="Variable name."
    )
    value: str = Field(default="", description="Variable value.")


class VllmSpec(ApiModel):
    """The vLLM release to run and its extras."""

    version: str = Field(
        pattern=VERSION_PATTERN,
        description="Exact vLLM release, for example 0.11.0 or 0.6.6.post1. Flags and metric "
        "names are checked against this version.",
    )
    image: str | None = Field(
        default=None,
        min_length=1,
        pattern=IMAGE_PATTERN,
        description="Container image override (tag or digest). Defaults to "
        "vllm/vllm-openai:v<version>; it must contain that vLLM version.",
    )
    extra_args: dict[Annotated[str, StringConstraints(pattern=FLAG_PATTERN)], str] = Field(
        default_factory=dict,
        max_length=64,
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(f"!('{flag}' in self)", f"{flag} cannot be set in extraArgs: {why}")
                for flag, why in OPERATOR_OWNED_EXTRA_ARGS.items()
            ]
        },
        description='Extra vLLM flags by long name (--flag: value). Use "true"/"false" for '
        'boolean flags (rendered as --flag / --no-flag) and "" for flags without a value. '
        "Validated against the pinned version; flags the planner owns are rejected unless "
        "allowPlannerOverride is true.",
    )
    allow_planner_override: bool = Field(
        default=False,
        description="Allow extraArgs to override flags the planner computes (max-model-len, "
        "max-num-seqs, gpu-memory-utilization, ...). The user's value is rendered once, in place "
        "of the planner's; status.pools[].plan shows it (userOverrides) with the memory "
        "recomputed, and Feasible turns to PlanOverridden when the plan no longer holds. Off by "
        "default: an override can make the memory plan wrong.",
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=128,
        description="Extra environment variables for the vLLM container (names unique).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @field_validator("extra_args")
    @classmethod
    def _not_operator_owned(cls, value: dict[str, str]) -> dict[str, str]:
        for flag, why in OPERATOR_OWNED_EXTRA_ARGS.items():
            if flag in value:
                raise ValueError(f"{flag} cannot be set in extraArgs: {why}")
        return value

    @field_validator("env")
    @classmethod
    def _unique_env(cls, value: list[EnvVar]) -> list[EnvVar]:
        seen: set[str] = set()
        for index, var in enumerate(value):
            if var.name in seen:
                raise FieldProblem(f"[{index}]", f"duplicate env name {var.name!r}")
            seen.add(var.name)
        return value


# ------------------------------------------------------------------------------------- workload


class PrefixCaching(StrEnum):
    """Whether vLLM's automatic prefix caching is on."""

    AUTO = "auto"
    ENABLED = "enabled"
    DISABLED = "disabled"


class LatencyProfile(StrEnum):
    """What the batch scheduler optimises for."""

    INTERACTIVE = "interactive"
    THROUGHPUT = "throughput"


class WorkloadSpec(ApiModel):
    """The traffic the service must sustain, stated as intent."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.maxContextTokens) || self.p99ContextTokens <= self.maxContextTokens",
                    "p99ContextTokens must be less than or equal to maxContextTokens",
                    ".p99ContextTokens",
                )
            ]
        }
    )

    max_context_tokens: int | None = Field(
        default=None,
        ge=1,
        le=16_777_216,
        description="Hard cap on a request's context (vLLM's --max-model-len). Defaults to "
        "p99ContextTokens rounded up to the KV block size.",
    )
    p99_context_tokens: int = Field(
        ge=1,
        le=16_777_216,
        alias="p99ContextTokens",
        description="Prompt plus completion tokens of a request at the 99th percentile. The plan "
        "guarantees `concurrency` sequences of this length fit in the KV cache.",
    )
    concurrency: int = Field(
        ge=1,
        le=65_536,
        description="Concurrent sequences per replica at the P99 context (bounds --max-num-seqs).",
    )
    prefix_caching: PrefixCaching = Field(
        default=PrefixCaching.AUTO,
        description="Automatic prefix caching: auto (the pinned version's default), enabled or "
        "disabled. Defaults to auto.",
    )
    latency_profile: LatencyProfile = Field(
        default=LatencyProfile.INTERACTIVE,
        description="interactive keeps prefill chunks small for low inter-token latency; throughput "
        "uses larger batches. Drives --max-num-batched-tokens. Defaults to interactive.",
    )

    @field_validator("p99_context_tokens")
    @classmethod
    def _p99_within_max(cls, value: int, info: ValidationInfo) -> int:
        # maxContextTokens is declared first so it is already validated here; the error then
        # carries the path spec.workload.p99ContextTokens, as the CRD's CEL rule does.
        cap = info.data.get("max_context_tokens")
        if cap is not None and value > cap:
            raise ValueError(
                f"p99ContextTokens ({value}) must be less than or equal to maxContextTokens ({cap})"
            )
        return value


# ------------------------------------------------------------------------------------ placement


class Toleration(ApiModel):
    """A pod toleration, as in core/v1 Toleration (with the API server's own rules)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!(has(self.operator) && self.operator == 'Exists') || !has(self.value) "
                    "|| size(self.value) == 0",
                    "value must be empty when operator is Exists",
                    ".value",
                ),
                _cel(
                    "(has(self.key) && size(self.key) > 0) || "
                    "(has(self.operator) && self.operator == 'Exists')",
                    "operator must be Exists when key is empty (tolerate every taint)",
                    ".operator",
                ),
                _cel(
                    "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                    "effect must be NoExecute when tolerationSeconds is set",
                    ".effect",
                ),
            ]
        }
    )

    key: str | None = Field(
        default=None,
        max_length=317,
        pattern=QUALIFIED_NAME_PATTERN,
        description="Taint key to tolerate; empty (with operator Exists) means all keys.",
    )
    operator: Literal["Exists", "Equal"] = Field(
        default="Equal", description="Exists or Equal. Defaults to Equal."
    )
    value: str | None = Field(
        default=None,
        max_length=63,
        pattern=LABEL_VALUE_OR_EMPTY_PATTERN,
        description="Taint value to match with Equal; must be empty with Exists.",
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty means all effects."
    )
    toleration_seconds: int | None = Field(
        default=None,
        description="How long a NoExecute taint is tolerated (effect must be NoExecute).",
        json_schema_extra={"format": "int64"},
    )

    @model_validator(mode="after")
    def _core_rules(self) -> "Toleration":
        if self.operator == "Exists" and self.value:
            raise FieldProblem("value", "value must be empty when operator is Exists")
        if not self.key and self.operator != "Exists":
            raise FieldProblem(
                "operator", "operator must be Exists when key is empty (tolerate every taint)"
            )
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise FieldProblem("effect", "effect must be NoExecute when tolerationSeconds is set")
        return self


class PlacementStrategy(StrEnum):
    """How spec.replicas is spread over the GPU types of spec.placement.gpuTypes (#29)."""

    ALL = "All"
    PREFERRED = "Preferred"


class GpuAllocation(StrEnum):
    """How a pool's pods get their GPUs (docs/installation.md, "GPU allocation")."""

    DEVICE_PLUGIN = "devicePlugin"
    """The NVIDIA device plugin's extended resource (`nvidia.com/gpu`, `nvidia.com/mig-*`)."""
    DRA = "dra"
    """Dynamic Resource Allocation: a ResourceClaimTemplate per pool for the NVIDIA DRA driver
    (`gpu.nvidia.com`), its count and device selector derived from the plan."""


class PlacementSpec(ApiModel):
    """Which GPUs may serve the model."""

    gpu_types: list[GpuType] = Field(
        min_length=1,
        max_length=32,
        alias="gpuTypes",
        description="Allowed GPU types, as GPU Feature Discovery product labels "
        "(nvidia.com/gpu.product, for example NVIDIA-H100-80GB-HBM3, NVIDIA-L4, Tesla-T4) or "
        "catalog aliases (H100-80GB, L4). One Deployment (pool) is planned per type present in "
        "the cluster.",
        json_schema_extra={
            "x-kubernetes-list-type": "set",
            "x-kubernetes-validations": [
                _cel(
                    "self.all(x, self.exists_one(y, y.lowerAscii() == x.lowerAscii()))",
                    "gpuTypes must be unique, ignoring case (each names one pool)",
                )
            ],
        },
    )
    strategy: PlacementStrategy = Field(
        default=PlacementStrategy.ALL,
        description="All (the default): one pool per listed type present in the cluster, each "
        "running spec.replicas. Preferred: gpuTypes in order of preference and spec.replicas is "
        "the total across pools; replicas go to the most preferred type with room, spill to "
        "the next type (planned for it) when it has none, and move back one at a time when "
        "room returns. Preferred needs scaling.mode operator and maxNodesPerReplica 1. See "
        "docs/operations.md, GPU-type preference.",
    )
    spill_after_seconds: int = Field(
        default=120,
        ge=10,
        le=3600,
        alias="spillAfterSeconds",
        description="Preferred only: how long a pod may stay Pending as Unschedulable before "
        "its replica spills to the next type, and how long room must be seen on a more "
        "preferred type before a replica moves back. Defaults to 120.",
    )
    min_dwell_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        alias="minDwellSeconds",
        description="Preferred only: the least time between two placement changes that move a "
        "running replica (a move back), so placement never flaps. Defaults to 300.",
    )
    node_selector: dict[
        Annotated[str, StringConstraints(pattern=QUALIFIED_NAME_PATTERN)],
        Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_OR_EMPTY_PATTERN)],
    ] = Field(
        default_factory=dict,
        max_length=64,
        description="Extra node labels every pool's pods must match (added to the GPU product "
        "selector, which the operator sets per pool: nvidia.com/gpu.product is refused here).",
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.all(k, k.indexOf('/') <= 253)",
                    "a label key's prefix must be at most 253 characters",
                ),
                _cel(
                    "!('nvidia.com/gpu.product' in self)",
                    "nvidia.com/gpu.product is set per pool from gpuTypes",
                ),
            ]
        },
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=64,
        description="Tolerations for the vLLM pods (GPU nodes are often tainted).",
    )
    max_gpus_per_replica: int = Field(
        default=8,
        ge=1,
        le=64,
        alias="maxGPUsPerReplica",
        description="Largest tensor-parallel size the planner may choose. Defaults to 8.",
    )
    max_nodes_per_replica: int = Field(
        default=1,
        ge=1,
        le=16,
        alias="maxNodesPerReplica",
        description="Most nodes one replica may span. 1 (the default) keeps every replica on "
        "one node (a Deployment pool); above 1 the planner may split a model that does not fit "
        "one node into pipeline-parallel stages, one per node, each stage tensor-parallel "
        "within its node, served as one LeaderWorkerSet group per replica.",
    )
    gpu_allocation: GpuAllocation | None = Field(
        default=None,
        alias="gpuAllocation",
        description="How pods get their GPUs: devicePlugin requests the extended resource "
        "nvidia.com/gpu; dra renders one ResourceClaimTemplate per pool (resource.k8s.io/v1, "
        "device class gpu.nvidia.com) whose count is the planned tensor-parallel size and whose "
        "CEL selector asks for the pool's product with at least the memory the plan assumed. "
        "Absent: the operator's cluster default (chart value gpuAllocation, devicePlugin unless "
        "set).",
    )

    @field_validator("gpu_types")
    @classmethod
    def _unique_gpu_types(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for gpu in value:
            if gpu.lower() in seen:
                raise ValueError("gpuTypes must be unique, ignoring case (each names one pool)")
            seen.add(gpu.lower())
        return value

    @field_validator("node_selector")
    @classmethod
    def _selector_keys(cls, value: dict[str, str]) -> dict[str, str]:
        if any(k.find("/") > 253 for k in value):
            raise ValueError("a label key's prefix must be at most 253 characters")
        if "nvidia.com/gpu.product" in value:
            raise ValueError("nvidia.com/gpu.product is set per pool from gpuTypes")
        return value


# ------------------------------------------------------------------------------- safety / repair


class SafetySpec(ApiModel):
    """Memory safety margins the planner must respect."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "(has(self.maxGpuMemoryUtilization) ? self.maxGpuMemoryUtilization : 0.9) - "
                    "(has(self.memoryHeadroomFraction) ? self.memoryHeadroomFraction : 0.0) >= "
                    f"{MIN_EFFECTIVE_UTILIZATION - _FLOAT_SLACK!r}",
                    "maxGpuMemoryUtilization - memoryHeadroomFraction must be at least "
                    f"{MIN_EFFECTIVE_UTILIZATION} (the utilization vLLM gets)",
                    ".memoryHeadroomFraction",
                )
            ]
        }
    )

    max_gpu_memory_utilization: float = Field(
        default=0.90,
        ge=MIN_EFFECTIVE_UTILIZATION,
        le=0.98,
        description="Ceiling for vLLM's --gpu-memory-utilization. Defaults to 0.90, the safe value "
        "on shared GPUs and below the 0.95 where CUDA-graph capture classically runs out of memory.",
    )
    memory_headroom_fraction: float = Field(
        default=0.0,
        ge=0.0,
        le=0.5,
        description="Fraction of GPU memory kept free below the ceiling for bursts and "
        "fragmentation; the ceiling minus this must stay at least 0.01. Defaults to 0.",
    )

    @model_validator(mode="after")
    def _usable_utilization(self) -> "SafetySpec":
        effective = self.max_gpu_memory_utilization - self.memory_headroom_fraction
        if effective < MIN_EFFECTIVE_UTILIZATION - _FLOAT_SLACK:
            raise FieldProblem(
                "memoryHeadroomFraction",
                "maxGpuMemoryUtilization - memoryHeadroomFraction must be at least "
                f"{MIN_EFFECTIVE_UTILIZATION} (the utilization vLLM gets)",
            )
        return self


class RemediationMode(StrEnum):
    """How the operator reacts to memory trouble at run time."""

    AUTO = "auto"
    RECOMMEND = "recommend"
    OFF = "off"


class RemediationSpec(ApiModel):
    """Run-time memory remediation."""

    mode: RemediationMode = Field(
        default=RemediationMode.AUTO,
        description="auto applies bounded, reversible changes; recommend only writes status and "
        "Events; off changes nothing (pods are still observed, so Degraded reports crashes). "
        "Defaults to auto.",
    )
    evaluation_interval_seconds: int = Field(
        default=30,
        ge=10,
        le=3600,
        description="How often the operator evaluates metrics and pod status. Defaults to 30.",
    )
    window_seconds: int = Field(
        default=300,
        ge=30,
        le=86_400,
        description="How long a metric signal must hold before it counts as sustained (KV-cache "
        "usage, queue, preemptions, memory creep). Defaults to 300 (5 minutes).",
    )
    kv_cache_usage_threshold: float = Field(
        default=0.95,
        ge=0.5,
        le=1.0,
        description="KV-cache usage (0-1) that, held for the whole window, counts as KV pressure. "
        "Defaults to 0.95.",
    )
    queue_ratio: float = Field(
        default=2.0,
        ge=0.5,
        le=100.0,
        description="Waiting requests per running request, averaged over the window, above which "
        "the queue counts as backed up. Defaults to 2.",
    )
    preemptions_per_minute: float = Field(
        default=1.0,
        ge=0.0,
        le=100_000.0,
        description="Preemption rate over the window above which the scheduler counts as "
        "thrashing. Defaults to 1 per minute.",
    )
    prefix_cache_hit_rate_floor: float = Field(
        default=0.3,
        ge=0.0,
        le=1.0,
        description="Under KV pressure, prefix caching is turned off when its hit rate over the "
        "window stays below this. Defaults to 0.3.",
    )
    memory_creep_fraction: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="A pod whose GPU memory stays above the planned reservation by more than this "
        "fraction for the whole window is restarted (chronic fragmentation). Defaults to 0.05.",
    )
    step_fraction: float = Field(
        default=0.25,
        gt=0.0,
        le=0.5,
        description="Size of one lowering step, as a fraction of the current value "
        "(maxNumBatchedTokens, maxNumSeqs). Defaults to 0.25.",
    )
    cooldown_seconds: int = Field(
        default=600,
        ge=0,
        le=86_400,
        description="Minimum time between two actions on the same pool. Defaults to 600.",
    )
    max_actions_per_hour: int = Field(
        default=4,
        ge=0,
        le=60,
        description="Most remediation actions per service in any hour; 0 allows none. Defaults to 4.",
    )
    restore_after_seconds: int = Field(
        default=3600,
        ge=60,
        le=604_800,
        description="Quiet time after which an override is stepped back towards the plan "
        "(doubled each time the same override had to be re-applied). Defaults to 3600.",
    )
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Under KV pressure, a pool may be scaled out up to this many replicas before "
        "any limit is lowered. Unset (the default): never scale out. Not allowed with "
        "scaling.mode external (the autoscaler scales out).",
    )


class CanarySpec(ApiModel):
    """A new plan runs on one pod (or group) first; the pool gets it only if that pod is healthy."""

    enabled: bool | None = Field(
        default=None,
        description="Try a change of an existing pool's engine arguments or image on one canary "
        "pod first (a 1-replica copy of the pool's workload: a surge with maxSurge > 0, else in "
        "place of one pod), promote it only when Ready, not restarted and with the planned "
        "KV capacity, else keep the last good plan (Degraded=True CanaryFailed). Replica-only "
        "changes and new pools need no canary. Absent: the operator's cluster default (chart "
        "value canary.enabled, on unless set); false turns canaries off for this service.",
    )
    observation_seconds: int = Field(
        default=120,
        ge=0,
        le=86_400,
        description="How long the canary must stay Ready without a restart before it is "
        "promoted. Defaults to 120.",
    )


class RolloutSpec(ApiModel):
    """How a pool's Deployment replaces pods when the plan changes."""

    max_surge: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Extra pods started during a rollout. Defaults to 0: a rollout never needs "
        "spare GPUs (each pod holds whole GPUs, which a cluster rarely has idle).",
    )
    max_unavailable: int = Field(
        default=1,
        ge=0,
        le=100,
        description="Pods that may be down during a rollout. Defaults to 1. maxSurge and "
        "maxUnavailable cannot both be 0.",
    )
    canary: CanarySpec = Field(
        default_factory=CanarySpec,
        description="Try a new plan on one pod before the rest of the pool. Defaults to the "
        "operator's cluster default (on unless the chart sets canary.enabled false).",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.maxSurge > 0 || self.maxUnavailable > 0",
                    "maxSurge and maxUnavailable cannot both be 0",
                )
            ]
        }
    )

    @model_validator(mode="after")
    def _can_progress(self) -> "RolloutSpec":
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise ValueError("maxSurge and maxUnavailable cannot both be 0")
        return self


class ScalingMode(StrEnum):
    """Who owns each pool Deployment's `spec.replicas`."""

    OPERATOR = "operator"
    EXTERNAL = "external"


class ScalingSpec(ApiModel):
    """Who sets the replica count of the pools: the operator, or an autoscaler."""

    mode: ScalingMode = Field(
        default=ScalingMode.OPERATOR,
        description="operator (the default): every pool runs spec.replicas and the operator "
        "restores that count when anything else changes it (only spec.replicas changes: no pod "
        "restarts). external: an autoscaler (HorizontalPodAutoscaler, KEDA) or `kubectl scale` owns "
        "the replica count of each pool Deployment; spec.replicas is only the count a new pool "
        "starts with, the operator never writes replicas again (it gives up ownership of "
        "spec.replicas under server-side apply, keeping the live count) and "
        "remediation.maxReplicas (scale-out) cannot be set. See docs/autoscaling.md.",
    )


# ---------------------------------------------------------------------------------------- spec


class VLLMServiceSpec(ApiModel):
    """Desired state of a VLLMService: a model served at a P99 context and concurrency."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.remediation) || !has(self.remediation.maxReplicas) || "
                    "self.remediation.maxReplicas >= (has(self.replicas) ? self.replicas : 1)",
                    "maxReplicas must be greater than or equal to replicas",
                    ".remediation.maxReplicas",
                ),
                _cel(
                    "!has(self.scaling) || !has(self.scaling.mode) || "
                    "self.scaling.mode != 'external' || !has(self.remediation) || "
                    "!has(self.remediation.maxReplicas)",
                    "maxReplicas cannot be set with scaling.mode external: the autoscaler owns "
                    "replicas",
                    ".remediation.maxReplicas",
                ),
                _cel(
                    "!has(self.placement.strategy) || self.placement.strategy != 'Preferred' || "
                    "!has(self.scaling) || !has(self.scaling.mode) || "
                    "self.scaling.mode != 'external'",
                    "placement.strategy Preferred needs scaling.mode operator: the operator "
                    "splits spec.replicas across the pools (an autoscaler scales that total "
                    "through the VLLMService's scale subresource)",
                    ".placement.strategy",
                ),
                _cel(
                    "!has(self.placement.strategy) || self.placement.strategy != 'Preferred' || "
                    "!has(self.placement.maxNodesPerReplica) || "
                    "self.placement.maxNodesPerReplica == 1",
                    "placement.strategy Preferred needs maxNodesPerReplica 1 (multi-node pools "
                    "are not spilled)",
                    ".placement.strategy",
                ),
                _cel(
                    "!has(self.vllm.extraArgs) || !('--served-model-name' in self.vllm.extraArgs) "
                    "|| !has(self.model.source) || !has(self.model.source.pvc)",
                    "--served-model-name cannot be set in extraArgs with a pvc source: the "
                    "operator serves the model under model.name",
                    ".vllm.extraArgs",
                ),
            ]
        }
    )

    model: ModelSpec = Field(description="The model to serve.")
    vllm: VllmSpec = Field(description="The pinned vLLM release.")
    workload: WorkloadSpec = Field(description="Traffic the service must sustain.")
    placement: PlacementSpec = Field(description="GPU types the service may run on.")
    replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Replicas in EACH GPU pool (one pool per allowed GPU type present in the "
        "cluster), so capacity grows with the pools; 0 scales every pool down. Defaults to 1. "
        "With placement.strategy Preferred, the total across the pools. "
        "With scaling.mode external, only the count a new pool starts with.",
    )
    scaling: ScalingSpec = Field(
        default_factory=ScalingSpec,
        description="Who owns the pools' replica count. Defaults to the operator (spec.replicas).",
    )
    safety: SafetySpec = Field(
        default_factory=SafetySpec, description="Memory safety margins for the planner."
    )
    remediation: RemediationSpec = Field(
        default_factory=RemediationSpec, description="Run-time memory remediation."
    )
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec,
        description="How pools roll out a new plan. Defaults to one pod at a time, no surge.",
    )
    security: SecuritySpec = Field(
        default_factory=SecuritySpec,
        description="Security context of the vLLM pods. Defaults pass the Pod Security "
        "'restricted' level: non-root (UID/GID 1000), RuntimeDefault seccomp, no privilege "
        "escalation, every capability dropped.",
    )
    routing: RoutingSpec = Field(
        default_factory=RoutingSpec,
        description="How clients and gateways reach the pods: the plain Service (the default) or "
        "an InferencePool with an Endpoint Picker for a Gateway API inference gateway.",
    )

    @model_validator(mode="after")
    def _cross_field(self) -> "VLLMServiceSpec":
        cap = self.remediation.max_replicas
        if cap is not None and cap < self.replicas:
            raise FieldProblem(
                "remediation.maxReplicas", "maxReplicas must be greater than or equal to replicas"
            )
        if cap is not None and self.scaling.mode == ScalingMode.EXTERNAL:
            raise FieldProblem(
                "remediation.maxReplicas",
                "maxReplicas cannot be set with scaling.mode external: the autoscaler owns "
                "replicas",
            )
        if self.placement.strategy == PlacementStrategy.PREFERRED:
            if self.scaling.mode == ScalingMode.EXTERNAL:
                raise FieldProblem(
                    "placement.strategy",
                    "placement.strategy Preferred needs scaling.mode operator: the operator "
                    "splits spec.replicas across the pools (an autoscaler scales that total "
                    "through the VLLMService's scale subresource)",
                )
            if self.placement.max_nodes_per_replica != 1:
                raise FieldProblem(
                    "placement.strategy",
                    "placement.strategy Preferred needs maxNodesPerReplica 1 (multi-node pools "
                    "are not spilled)",
                )
        if "--served-model-name" in self.vllm.extra_args and self.model.source.pvc is not None:
            raise FieldProblem(
                "vllm.extraArgs",
                "--served-model-name cannot be set in extraArgs with a pvc source: the operator "
                "serves the model under model.name",
            )
        return self
