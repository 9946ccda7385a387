"""Model architectures: the numbers the memory model needs, from three places.

1. The shipped catalog: `data/model-architectures.json` (the design's shared copy) overlaid by
   `data/model-architectures-extra.json` (families the planner adds; every entry names its source).
2. A Hugging Face `config.json` (a file, or fetched by the `hub` gateway and handed in as a dict).
3. The inline override of a VLLMService (`spec.model.architecture`).

All three become one `Architecture`, the planner's internal type. Names follow config.json.
"""

import json
from collections.abc import Mapping
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.spec import Architecture as ArchitectureOverride
from vllm_operator.catalog.vllm.errors import UnknownVersionError
from vllm_operator.catalog.vllm.loader import version_position


class QuantMethod(StrEnum):
    """Weight formats the memory model sizes (vLLM's --quantization spellings)."""

    NONE = "none"
    AWQ = "awq"
    GPTQ = "gptq"
    BITSANDBYTES = "bitsandbytes"
    FP8 = "fp8"
    FBGEMM_FP8 = "fbgemm_fp8"
    COMPRESSED_TENSORS = "compressed-tensors"
    MXFP4 = "mxfp4"
    NVFP4 = "modelopt_fp4"
    INT8 = "int8"


_QUANT_ALIASES = {
    "awq_marlin": QuantMethod.AWQ,
    "gptq_marlin": QuantMethod.GPTQ,
    "marlin": QuantMethod.GPTQ,
    "bnb": QuantMethod.BITSANDBYTES,
    "compressed_tensors": QuantMethod.COMPRESSED_TENSORS,
    "modelopt": QuantMethod.FP8,
    "nvfp4": QuantMethod.NVFP4,
    "modelopt_mixed": QuantMethod.FP8,
    "experts_int8": QuantMethod.INT8,
}


def parse_quant_method(text: str | None) -> QuantMethod:
    """vLLM's --quantization value or a config's quant_method, as a QuantMethod."""
    if text is None or text.strip().lower() in ("", "none", "null"):
        return QuantMethod.NONE
    key = text.strip().lower()
    if key in _QUANT_ALIASES:
        return _QUANT_ALIASES[key]
    try:
        return QuantMethod(key)
    except ValueError:
        accepted = ", ".join(m.value for m in QuantMethod)
        raise ValueError(f"unsupported quantization {text!r}; accepted: {accepted}") from None


class LinearKind(StrEnum):
    """The fixed-state layer of a hybrid model, by vLLM's state-shape helper
    (model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator)."""

    GATED_DELTA_NET = "gated_delta_net"  # Qwen3-Next, Qwen3.5, Qwen3.6
    MAMBA2 = "mamba2"  # Granite-4.0-H, Falcon-H1, Nemotron-H, Bamba
    MAMBA1 = "mamba1"  # Jamba


class Quantization(BaseModel):
    """How a checkpoint's weights are stored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: QuantMethod
    bits: float = Field(gt=0, le=16)
    group_size: int | None = None
    zero_point: bool = False
    double_quant: bool = False
    experts_only: bool = Field(
        default=False, description="Only routed MoE experts are quantised (gpt-oss, Kimi-K2)."
    )
    mlp_only: bool = Field(
        default=False,
        description="Only MLP projections are quantised (Meta's fbgemm FP8 405B keeps attention).",
    )
    unquantized_mlp_layers: int = 0
    dense_bits: float | None = Field(
        default=None,
        description="Bits of the quantised layers other than routed experts, when they differ "
        "(modelopt MIXED_PRECISION: experts NVFP4, the rest FP8).",
    )

    shared_expert_bits: float | None = Field(
        default=None, description="Bits of the shared experts when they differ (MIXED_PRECISION)."
    )
    lm_head_bits: float | None = Field(
        default=None, description="Bits of a quantised lm_head (MIXED_PRECISION lists it)."
    )

    def dense_bytes_per_param(self) -> float:
        """Stored bytes per parameter of quantised non-expert layers."""
        if self.dense_bits is None:
            return self.bytes_per_param()
        return self.dense_bits / 8.0

    def bytes_per_param(self) -> float:
        """Stored bytes per quantised parameter, scales and zero points included."""
        base = self.bits / 8.0
        if self.method is QuantMethod.BITSANDBYTES:
            # nf4: one fp32 absmax per 64 weights; double quantisation stores it as int8 plus an
            # fp32 scale per 256 blocks (bitsandbytes Params4bit / QuantState).
            return base + (1.0 / 64 + 4.0 / (64 * 256) if self.double_quant else 4.0 / 64)
        if self.method is QuantMethod.MXFP4:
            return base + 1.0 / (self.group_size or 32)  # one E8M0 scale per 32 weights
        if self.method is QuantMethod.NVFP4:
            # NVFP4: E2M1 values plus one FP8 (E4M3) scale per 16 weights = 4.5 bits; the
            # per-tensor fp32 global scales are below 0.01 % (vLLM quantization/modelopt.py
            # ModelOptNvFp4Config group_size 16, ModelOptNvFp4FusedMoE.create_weights:
            # weight_scale float8_e4m3fn per group_size inputs).
            return base + 1.0 / (self.group_size or 16)
        if self.group_size:
            scale = 2.0 / self.group_size  # fp16/bf16 scale per group
            zeros = (self.bits / 8.0) / self.group_size if self.zero_point else 0.0
            return base + scale + zeros
        return base  # per-channel / per-block scales: below 0.1 %


class Architecture(BaseModel):
    """A decoder-only transformer as far as memory is concerned."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    model_type: str = "unknown"
    registry_names: tuple[str, ...] = Field(
        default=(),
        description="config.json `architectures`: the class names vLLM's model registry is "
        "keyed by (empty: not known, the release check is skipped).",
    )
    num_hidden_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_key_value_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate_size: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    max_position_embeddings: int | None = None
    # the rotary embedding, for the cos/sin cache vLLM keeps (planning/model_load.py)
    rope_type: str | None = Field(
        default=None,
        description="rope_scaling / rope_parameters rope_type; None: not stated (the default).",
    )
    rope_factor: float | None = None
    rope_original_max_position: int | None = None
    rotary_dim: int | None = Field(
        default=None, description="Rotary width when partial (partial_rotary_factor x head_dim)."
    )
    mrope: bool = Field(default=False, description="Multimodal rotary (mrope_section).")
    local_rope: bool = Field(
        default=False,
        description="A second, default rope for the sliding layers (Gemma-3 rope_local_base_freq).",
    )
    torch_dtype: str = "bfloat16"
    tie_word_embeddings: bool = False
    gated_mlp: bool = True
    attention_bias: bool = False
    # MoE
    num_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int | None = None
    first_k_dense_replace: int = 0
    # MLA (DeepSeek V2/V3, Kimi-K2)
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    index_head_dim: int | None = Field(
        default=None,
        description="Sparse MLA (DeepSeek-V3.2 DSA, GLM-5): the lightning indexer's key width; "
        "every layer caches one fp8 indexer key per token beside the latent.",
    )
    index_n_heads: int | None = None
    # sliding window / hybrid layouts
    sliding_window: int | None = None
    sliding_window_layers: int = Field(
        default=0, description="Layers that use the sliding window (V1 groups them apart)."
    )
    # hybrid attention + linear attention / state-space layers (Qwen3-Next, Qwen3.5/3.6,
    # Granite-4.0-H, Falcon-H1, Jamba): only `full_attention_layers` hold per-token KV, the
    # `linear_layers` hold one fixed state per sequence (see planning/memory.py hybrid_layout).
    linear_layers: int = Field(default=0, ge=0)
    linear_kind: LinearKind | None = None
    attention_layer_count: int | None = Field(
        default=None,
        description="Layers with attention when it is not layers - linear_layers: Nemotron-H's "
        "MLP-only layers hold neither; Falcon-H1 runs attention and Mamba in every layer.",
    )
    layer_pattern: str = Field(
        default="",
        description="Nemotron-H hybrid_override_pattern: M Mamba2, * attention, - MLP, E MoE "
        "(one mixer per layer).",
    )
    parallel_hybrid: bool = Field(
        default=False, description="Attention and Mamba side by side in every layer (Falcon-H1)."
    )
    linear_num_key_heads: int | None = None
    linear_num_value_heads: int | None = None
    linear_key_head_dim: int | None = None
    linear_value_head_dim: int | None = None
    linear_conv_kernel_dim: int | None = None
    mamba_intermediate_size: int | None = None
    mamba_num_heads: int | None = None
    mamba_head_dim: int | None = None
    mamba_n_groups: int | None = None
    mamba_d_state: int | None = None
    mamba_ssm_dtype: str | None = Field(
        default=None, description="Recurrent-state dtype the config asks for (mamba_ssm_dtype)."
    )
    attn_output_gate: bool = Field(
        default=False, description="q_proj also emits a sigmoid gate (Qwen3-Next / Qwen3.5)."
    )
    # Gemma-3n / Gemma-4: the last num_kv_shared_layers reuse an earlier layer's KV (they hold
    # none); full-attention layers may use a wider head; per-layer embeddings (PLE)
    layer_types: tuple[str, ...] = ()
    num_kv_shared_layers: int = Field(default=0, ge=0)
    global_head_dim: int | None = None
    num_global_key_value_heads: int | None = None
    hidden_size_per_layer_input: int = Field(default=0, ge=0)
    vocab_size_per_layer_input: int | None = None
    use_double_wide_mlp: bool = False
    num_mtp_layers: int = Field(
        default=0,
        ge=0,
        description="Multi-token-prediction layers the checkpoint ships (num_nextn_predict_layers"
        " / mtp_num_hidden_layers); loaded only when speculative decoding uses them.",
    )
    quantization: Quantization | None = None
    vision_params: int = Field(default=0, ge=0, description="Vision tower, replicated per rank.")
    # The vision tower's shape (config.json vision_config), for the encoder pass of vLLM's profile
    # run (planning/memory.py encoder_profile_bytes). 0: not in the catalog, the pass is not
    # modelled. vision_max_tokens_per_item is the processor's largest image in merged tokens, as
    # vLLM logs it ('Encoder cache will be initialized with a budget of N tokens').
    vision_hidden_size: int = Field(default=0, ge=0)
    vision_intermediate_size: int = Field(default=0, ge=0)
    vision_patch_size: int = Field(default=0, ge=0)
    vision_temporal_patch_size: int = Field(default=1, ge=1)
    vision_spatial_merge_size: int = Field(default=1, ge=1)
    vision_in_channels: int = Field(default=3, ge=1)
    vision_max_tokens_per_item: int = Field(default=0, ge=0)
    num_parameters: int | None = Field(default=None, description="Exact count when known.")
    source: str = ""

    @property
    def is_hybrid(self) -> bool:
        """Some layers keep a fixed per-sequence state instead of per-token KV."""
        return self.linear_layers > 0 and self.linear_kind is not None

    @property
    def full_attention_layers(self) -> int:
        if self.attention_layer_count is not None:
            return self.attention_layer_count
        return self.num_hidden_layers - (self.linear_layers if self.is_hybrid else 0)

    def is_full_attention(self, layer: int) -> bool:
        """A full (global) attention layer by layer_types; all layers when none are listed."""
        if not self.layer_types or layer >= len(self.layer_types):
            return True
        return self.layer_types[layer] == "full_attention"

    def is_kv_shared(self, layer: int) -> bool:
        """One of the last num_kv_shared_layers: reads an earlier layer's KV, holds none."""
        return layer >= self.num_hidden_layers - self.num_kv_shared_layers

    def attention_dims(self, layer: int) -> tuple[int, int]:
        """(KV heads, head dim) of a layer: Gemma-4's full-attention layers use
        global_head_dim (and num_global_key_value_heads when set)."""
        if self.global_head_dim and self.is_full_attention(layer):
            heads = self.num_global_key_value_heads or self.num_key_value_heads
            return heads, self.global_head_dim
        return self.num_key_value_heads, self.head_dim

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None and self.num_experts > 1

    @property
    def is_multimodal(self) -> bool:
        return self.vision_params > 0

    @property
    def kind(self) -> str:
        """dense | GQA | MoE | MLA | hybrid: the families the benchmark must answer."""
        if self.is_hybrid:
            return "hybrid"
        if self.is_mla:
            return "MLA"
        if self.is_moe:
            return "MoE"
        if self.num_key_value_heads < self.num_attention_heads:
            return "GQA"
        return "dense"


class UnknownModelError(LookupError):
    """No architecture for a model: says how to supply one."""

    def __init__(self, name: str, detail: str = "") -> None:
        self.model = name
        super().__init__(
            f"unknown model {name!r}{': ' + detail if detail else ''}. Supply its architecture: "
            "`--model-config PATH` (the model's Hugging Face config.json), spec.model.architecture "
            "inline in the VLLMService, or let the operator read config.json from the Hub "
            "(spec.model.source.huggingFace, with tokenSecretRef for gated models)."
        )


# ------------------------------------------------------------------------------ from config.json


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        value = cfg.get(key)
        if value is not None:
            return value
    return None


def _quantization_from_config(qc: dict[str, Any] | None) -> Quantization | None:
    if not qc:
        return None
    method = parse_quant_method(str(_first(qc, "quant_method", "quant_type") or "none"))
    if method is QuantMethod.NONE:
        return None
    bits = _first(qc, "bits", "w_bit")
    group = _first(qc, "group_size", "q_group_size")
    sym = qc.get("symmetric", qc.get("sym"))
    targets = str(qc.get("targets", ""))
    if method is QuantMethod.BITSANDBYTES:
        bits = 8 if qc.get("load_in_8bit") else 4
        return Quantization(
            method=method,
            bits=bits,
            double_quant=bool(qc.get("bnb_4bit_use_double_quant", False)),
        )
    if method is QuantMethod.COMPRESSED_TENSORS and bits is None:
        bits = _compressed_tensors_bits(qc)
        group = group or _compressed_tensors_group(qc)
    dense_bits: float | None = None
    shared_bits: float | None = None
    head_bits: float | None = None
    if method is QuantMethod.FP8 and str(qc.get("quant_method", "")).lower() == "modelopt":
        # modelopt names its format in quant_algo: FP8, NVFP4, or MIXED_PRECISION with
        # per-layer formats (config_groups of fp8 and 4-bit float weights).
        algo = str(qc.get("quant_algo") or "FP8").upper()
        if "FP4" in algo:
            method, group = QuantMethod.NVFP4, group or 16
        elif algo == "MIXED_PRECISION" and _compressed_tensors_bits(qc, lowest=True) == 4:
            method, group, dense_bits = QuantMethod.NVFP4, 16, 8.0
            layers = qc.get("quantized_layers")
            if isinstance(layers, dict) and layers:
                dense_bits, shared_bits, head_bits = _mixed_layer_bits(layers)
    # compressed-tensors mxfp4-pack-quantized (llm-compressor W4A4 MXFP4): every targeted Linear
    # holds E2M1 values plus one E8M0 scale per 32, not gpt-oss's experts-only MXFP4 (vLLM
    # compressed_tensors.py picks the W4A4 MXFP4 scheme for dense Linear layers).
    dense_mxfp4 = method is QuantMethod.COMPRESSED_TENSORS and _is_mxfp4_format(qc)
    if dense_mxfp4:
        method, group = QuantMethod.MXFP4, 32
    if method is QuantMethod.COMPRESSED_TENSORS and _is_nvfp4_group(qc):
        method, group = QuantMethod.NVFP4, 16  # nvfp4-pack-quantized: fp8 scale per 16
    if method is QuantMethod.NVFP4:
        bits = 4
    if method in (QuantMethod.FP8, QuantMethod.FBGEMM_FP8):
        bits = 8
    if method is QuantMethod.MXFP4:
        bits, group = 4, group or 32
    return Quantization(
        method=method,
        bits=float(bits or 4),
        group_size=int(group) if group and int(group) > 0 else None,
        zero_point=bool(qc.get("zero_point", False)) if sym is None else not bool(sym),
        experts_only=targets == "experts" or (method is QuantMethod.MXFP4 and not dense_mxfp4),
        mlp_only=method is QuantMethod.FBGEMM_FP8,
        unquantized_mlp_layers=2 if method is QuantMethod.FBGEMM_FP8 else 0,
        dense_bits=dense_bits,
        shared_expert_bits=shared_bits,
        lm_head_bits=head_bits,
    )


# Stored bits per parameter of each per-layer quant_algo. W4A16_NVFP4 stores NVFP4 (E2M1 values and
# one FP8 scale per 16) and runs it with 16-bit activations on Marlin: vLLM 0.24.0
# quantization/modelopt.py lists it beside NVFP4 among the quant algos and serves it with
# ModelOptNvFp4W4A16LinearMethod / ModelOptNvFp4FusedMoE over the NVFP4 weight layout
# (nvidia/Qwen3.6-35B-A3B-NVFP4 names its experts, shared experts and lm_head so).
_ALGO_BITS = {"NVFP4": 4.5, "W4A16_NVFP4": 4.5, "FP8": 8.0, "W4A8_AWQ": 4.25, "INT8": 8.0}


def _mixed_layer_bits(layers: dict[str, Any]) -> tuple[float, float | None, float | None]:
    """Stored bits of the non-expert layers, the shared experts and lm_head of a modelopt
    MIXED_PRECISION checkpoint, from its per-layer `quantized_layers` (vLLM
    quantization/modelopt.py ModelOptMixedPrecisionConfig reads the same dict). A category
    without entries stays unquantised (16 bits); a category with several formats counts at the
    widest (the safe side)."""
    found: dict[str, float] = {}
    for name, info in layers.items():
        algo = str((info or {}).get("quant_algo", "")).upper() if isinstance(info, dict) else ""
        bits = _ALGO_BITS.get(algo, 8.0)
        if name.endswith("lm_head"):
            key = "head"
        elif "shared_expert" in name:
            key = "shared"
        elif ".experts" in name:
            continue  # routed experts: the checkpoint's NVFP4
        else:
            key = "dense"
        found[key] = max(found.get(key, 0.0), bits)
    return found.get("dense", 16.0), found.get("shared"), found.get("head")


def _compressed_tensors_bits(qc: dict[str, Any], *, lowest: bool = False) -> int:
    """num_bits of the first weight group (or the lowest over all groups)."""
    found = [
        int(((group or {}).get("weights") or {})["num_bits"])
        for group in (qc.get("config_groups") or {}).values()
        if ((group or {}).get("weights") or {}).get("num_bits")
    ]
    if not found:
        return 8
    return min(found) if lowest else found[0]


def _is_mxfp4_format(qc: dict[str, Any]) -> bool:
    """compressed-tensors names MXFP4 packing in `format` (top level or per config group)."""
    formats = [qc.get("format")] + [
        (group or {}).get("format") for group in (qc.get("config_groups") or {}).values()
    ]
    return any("mxfp4" in str(f or "").lower() for f in formats)


def _is_nvfp4_group(qc: dict[str, Any]) -> bool:
    """A compressed-tensors group of 4-bit floats in groups of 16 is NVFP4 (fp8 scales)."""
    if "nvfp4" in str(qc.get("format", "")).lower():
        return True
    for group in (qc.get("config_groups") or {}).values():
        weights = (group or {}).get("weights") or {}
        if weights.get("num_bits") == 4 and weights.get("type") == "float":
            return True
    return False


def _compressed_tensors_group(qc: dict[str, Any]) -> int | None:
    for group in (qc.get("config_groups") or {}).values():
        weights = (group or {}).get("weights") or {}
        if weights.get("group_size"):
            return int(weights["group_size"])
    return None


def _sliding_layers(cfg: dict[str, Any], layers: int) -> int:
    window = cfg.get("sliding_window")
    if window in (None, 0) or cfg.get("use_sliding_window") is False:
        return 0
    if str(cfg.get("model_type", "")).startswith("qwen") and not cfg.get("use_sliding_window"):
        return 0  # Qwen configs carry sliding_window but default use_sliding_window to false
    longest = cfg.get("max_position_embeddings")
    if isinstance(window, int) and isinstance(longest, int) and window >= longest:
        return 0  # a window as long as the context is full attention
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        return sum(1 for t in layer_types if "sliding" in str(t))
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:
        return layers - layers // pattern  # Gemma-3: every pattern-th layer is global
    if str(cfg.get("model_type", "")).startswith(("gemma2", "gpt_oss")):
        return layers // 2  # alternating local/global
    if isinstance(layer_types, str) and "alternating" in layer_types:
        return layers // 2
    return layers  # Mistral-v0.1 style: every layer windowed


def _hybrid_fields(cfg: dict[str, Any], layers: int, hidden: int) -> dict[str, Any]:
    """The fixed-state layers of a hybrid model, read the way vLLM's model classes read them
    (get_mamba_state_shape_from_config in qwen3_next.py / qwen3_5.py, granitemoehybrid.py,
    jamba.py of vLLM 0.33.0). Empty for a pure-attention model.
    """
    model_type = str(cfg.get("model_type", ""))
    layer_types = cfg.get("layer_types")
    types = [str(t) for t in layer_types] if isinstance(layer_types, list) else []
    if cfg.get("linear_num_value_heads"):
        if types:
            linear = sum(1 for t in types if t == "linear_attention")
        else:
            # Qwen3-Next leaves layer_types unset: every full_attention_interval-th layer is
            # full attention (Qwen3NextConfig: (i + 1) % interval == 0).
            interval = int(cfg.get("full_attention_interval") or 4)
            linear = layers - layers // interval
        gate = cfg.get("attn_output_gate")
        return {
            "linear_layers": linear,
            "linear_kind": LinearKind.GATED_DELTA_NET,
            "linear_num_key_heads": cfg.get("linear_num_key_heads"),
            "linear_num_value_heads": cfg.get("linear_num_value_heads"),
            "linear_key_head_dim": cfg.get("linear_key_head_dim"),
            "linear_value_head_dim": cfg.get("linear_value_head_dim"),
            "linear_conv_kernel_dim": cfg.get("linear_conv_kernel_dim") or 4,
            "mamba_ssm_dtype": cfg.get("mamba_ssm_dtype"),
            # vLLM qwen3_next.py: getattr(config, "attn_output_gate", True)
            "attn_output_gate": bool(gate) if gate is not None else True,
        }
    if model_type == "granitemoehybrid" and "mamba" in types:
        return {
            "linear_layers": sum(1 for t in types if t == "mamba"),
            "linear_kind": LinearKind.MAMBA2,
            "mamba_intermediate_size": int(cfg.get("mamba_expand") or 2) * hidden,
            "mamba_num_heads": cfg.get("mamba_n_heads"),
            "mamba_head_dim": cfg.get("mamba_d_head"),
            "mamba_n_groups": cfg.get("mamba_n_groups") or 1,
            "mamba_d_state": cfg.get("mamba_d_state"),
            "linear_conv_kernel_dim": cfg.get("mamba_d_conv") or 4,
        }
    pattern = cfg.get("hybrid_override_pattern")
    if model_type == "nemotron_h" and isinstance(pattern, str) and "M" in pattern:
        heads = cfg.get("mamba_num_heads")
        head_dim = cfg.get("mamba_head_dim")
        return {
            "linear_layers": pattern.count("M"),
            "attention_layer_count": pattern.count("*"),
            "layer_pattern": pattern,
            "linear_kind": LinearKind.MAMBA2,
            # nemotron_h.py: intermediate = mamba_num_heads x mamba_head_dim
            "mamba_intermediate_size": int(heads) * int(head_dim) if heads and head_dim else None,
            "mamba_num_heads": heads,
            "mamba_head_dim": head_dim,
            "mamba_n_groups": _first(cfg, "n_groups", "mamba_num_groups") or 1,
            "mamba_d_state": cfg.get("ssm_state_size"),
            "linear_conv_kernel_dim": cfg.get("conv_kernel") or 4,
            # models/config.py NemotronHForCausalLMConfig: float32 unless the config says
            "mamba_ssm_dtype": cfg.get("mamba_ssm_cache_dtype") or "float32",
        }
    if model_type == "falcon_h1" or (cfg.get("mamba_d_ssm") and cfg.get("mamba_n_heads")):
        return {
            "linear_layers": layers,
            "attention_layer_count": layers,
            "parallel_hybrid": True,
            "linear_kind": LinearKind.MAMBA2,
            # falcon_h1.py: mamba_d_ssm, else mamba_expand x hidden
            "mamba_intermediate_size": cfg.get("mamba_d_ssm")
            or int(cfg.get("mamba_expand") or 2) * hidden,
            "mamba_num_heads": cfg.get("mamba_n_heads"),
            "mamba_head_dim": cfg.get("mamba_d_head"),
            "mamba_n_groups": cfg.get("mamba_n_groups") or 1,
            "mamba_d_state": cfg.get("mamba_d_state"),
            "linear_conv_kernel_dim": cfg.get("mamba_d_conv") or 4,
        }
    if model_type == "jamba":
        period = int(cfg.get("attn_layer_period") or 8)
        offset = int(cfg.get("attn_layer_offset") or 4)
        return {
            "linear_layers": sum(1 for i in range(layers) if i % period != offset),
            "linear_kind": LinearKind.MAMBA1,
            "mamba_intermediate_size": int(cfg.get("mamba_expand") or 2) * hidden,
            "mamba_d_state": cfg.get("mamba_d_state") or 16,
            "linear_conv_kernel_dim": cfg.get("mamba_d_conv") or 4,
        }
    return {}


def _vision_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The vision tower's shape from config.json's vision_config (Qwen2-VL / Qwen3-VL / Qwen3.5
    keys: hidden_size, intermediate_size, patch_size, temporal_patch_size, spatial_merge_size,
    in_channels) and the catalog's vision_max_tokens_per_item. Empty without both: the encoder
    pass of the profile run is then not modelled."""
    vision = cfg.get("vision_config")
    max_tokens = cfg.get("vision_max_tokens_per_item")
    if not isinstance(vision, dict) or not max_tokens:
        return {}
    hidden = vision.get("hidden_size") or vision.get("embed_dim")
    inter = vision.get("intermediate_size")
    patch = vision.get("patch_size")
    if not (hidden and inter and patch):
        return {}
    return {
        "vision_hidden_size": int(hidden),
        "vision_intermediate_size": int(inter),
        "vision_patch_size": int(patch),
        "vision_temporal_patch_size": int(vision.get("temporal_patch_size") or 1),
        "vision_spatial_merge_size": int(vision.get("spatial_merge_size") or 1),
        "vision_in_channels": int(vision.get("in_channels") or 3),
        "vision_max_tokens_per_item": int(max_tokens),
    }


def _gemma_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """KV sharing, the wider full-attention head and per-layer embeddings (Gemma-3n, Gemma-4;
    vLLM gemma4.py / gemma3n.py read the same keys). Empty for other models."""
    shared = int(cfg.get("num_kv_shared_layers") or 0)
    ple = int(cfg.get("hidden_size_per_layer_input") or 0)
    if not shared and not ple and not cfg.get("global_head_dim"):
        return {}
    types = cfg.get("layer_types")
    return {
        "layer_types": tuple(str(t) for t in types) if isinstance(types, list) else (),
        "num_kv_shared_layers": shared,
        "global_head_dim": cfg.get("global_head_dim"),
        "num_global_key_value_heads": cfg.get("num_global_key_value_heads"),
        "hidden_size_per_layer_input": ple,
        "vocab_size_per_layer_input": cfg.get("vocab_size_per_layer_input"),
        "use_double_wide_mlp": bool(cfg.get("use_double_wide_mlp")),
    }


def _rope_fields(cfg: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """The rotary embedding as vLLM's get_rope reads it: rope_scaling (rope_parameters in newer
    configs, `type` in older ones), partial_rotary_factor (or phi's partial_rotary_dim), the
    mrope section of the multimodal Qwens and Gemma-3's local base frequency."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        rope = {}
    kind = rope.get("rope_type") or rope.get("type")
    mrope = "mrope_section" in rope or kind == "mrope"
    factor = rope.get("factor")
    original = rope.get("original_max_position_embeddings")
    partial = rope.get("partial_rotary_factor") or cfg.get("partial_rotary_factor")
    rotary = cfg.get("partial_rotary_dim") or cfg.get("rotary_dim")
    if rotary is None and isinstance(partial, (int, float)) and 0 < partial < 1:
        rotary = int(head_dim * partial)
    return {
        "rope_type": None if kind in (None, "default", "mrope") else str(kind),
        "rope_factor": float(factor) if isinstance(factor, (int, float)) else None,
        "rope_original_max_position": int(original) if isinstance(original, int) else None,
        "rotary_dim": int(rotary) if isinstance(rotary, int) and rotary < head_dim else None,
        "mrope": mrope,
        "local_rope": cfg.get("rope_local_base_freq") is not None,
    }


def architecture_from_hf_config(cfg: dict[str, Any], name: str, source: str) -> Architecture:
    """Read a Hugging Face config.json (dict). Multimodal configs use their text_config.

    Raises ValueError naming the missing keys when the config lacks what the model needs.
    """
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    merged: dict[str, Any] = {**cfg, **(text or {})}
    if text is not None and "model_type" in cfg:
        merged["model_type"] = cfg["model_type"]
    layers = _first(merged, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _first(merged, "hidden_size", "n_embd", "d_model")
    heads = _first(merged, "num_attention_heads", "n_head")
    vocab = _first(merged, "vocab_size", "padded_vocab_size")
    inter = _first(merged, "intermediate_size", "ffn_hidden_size", "n_inner")
    model_type = str(merged.get("model_type") or "unknown")
    if inter is None and model_type in ("phi", "gpt2", "opt") and hidden is not None:
        inter = 4 * int(hidden)
    if inter is None and merged.get("num_experts"):
        inter = merged.get("moe_intermediate_size")  # every layer routed (Qwen3.5-MoE text)
    missing = [
        key
        for key, value in (
            ("num_hidden_layers", layers),
            ("hidden_size", hidden),
            ("num_attention_heads", heads),
            ("vocab_size", vocab),
            ("intermediate_size", inter),
        )
        if value is None
    ]
    if missing:
        raise ValueError(f"config of {name!r} lacks {', '.join(missing)}")
    kv_heads = _first(merged, "num_key_value_heads", "num_kv_heads", "multi_query_group_num")
    head_dim = _first(merged, "head_dim") or int(hidden) // int(heads)
    experts = _first(merged, "num_experts", "num_local_experts", "n_routed_experts")
    # granitemoehybrid.py: a shared_mlp of shared_intermediate_size runs beside the routed
    # experts, and is the whole MLP when num_local_experts is 0 (Granite-4.0-H-Micro).
    granite_shared = (
        merged.get("shared_intermediate_size") if model_type == "granitemoehybrid" else None
    )
    if granite_shared and not experts:
        inter = granite_shared
    kv_lora = merged.get("kv_lora_rank")
    dense_layers = _first(merged, "first_k_dense_replace", "n_dense_layers") or 0
    q_lora = merged.get("q_lora_rank") or None
    tie_default = model_type.startswith("gemma")
    tie = merged.get("tie_word_embeddings")
    quant = _quantization_from_config(
        cfg.get("quantization_config") or merged.get("quantization_config")
    )
    dtype = str(_first(merged, "torch_dtype", "dtype") or "bfloat16").split()[0]
    hybrid = _hybrid_fields(merged, int(layers), int(hidden))
    if hybrid and merged.get("linear_layers") is not None:
        hybrid["linear_layers"] = int(merged["linear_layers"])
    return Architecture(
        name=name,
        model_type=model_type,
        num_hidden_layers=int(layers),
        hidden_size=int(hidden),
        num_attention_heads=int(heads),
        num_key_value_heads=1 if kv_lora else int(kv_heads or heads),
        head_dim=int(head_dim),
        intermediate_size=int(inter),
        vocab_size=int(vocab),
        max_position_embeddings=merged.get("max_position_embeddings"),
        torch_dtype=dtype,
        tie_word_embeddings=bool(tie) if tie is not None else tie_default,
        gated_mlp=str(merged.get("mlp", "")) != "plain"
        and model_type not in ("phi", "opt", "gpt2", "nemotron_h"),  # nemotron_h: relu2 up/down
        attention_bias=bool(merged.get("attention_bias")) or model_type.startswith("qwen2"),
        num_experts=int(experts) if experts else None,
        num_experts_per_tok=merged.get("num_experts_per_tok"),
        moe_intermediate_size=_first(merged, "moe_intermediate_size")
        or (int(inter) if experts else None),
        num_shared_experts=int(_first(merged, "n_shared_experts", "num_shared_experts") or 0),
        shared_expert_intermediate_size=merged.get("shared_expert_intermediate_size")
        or (granite_shared if experts else None),
        first_k_dense_replace=int(dense_layers),
        kv_lora_rank=kv_lora,
        q_lora_rank=q_lora,
        qk_nope_head_dim=merged.get("qk_nope_head_dim"),
        qk_rope_head_dim=merged.get("qk_rope_head_dim"),
        v_head_dim=merged.get("v_head_dim"),
        index_head_dim=merged.get("index_head_dim") if merged.get("index_topk") else None,
        index_n_heads=merged.get("index_n_heads") if merged.get("index_topk") else None,
        sliding_window=merged.get("sliding_window")
        if _sliding_layers(merged, int(layers))
        else None,
        sliding_window_layers=_sliding_layers(merged, int(layers)),
        quantization=quant,
        vision_params=int(merged.get("vision_params") or 0),
        **_vision_fields(cfg),
        num_parameters=merged.get("num_parameters"),
        source=source,
        registry_names=_registry_names(cfg),
        num_mtp_layers=int(
            _first(merged, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0
        ),
        **hybrid,
        **_gemma_fields(merged),
        **_rope_fields(merged, int(head_dim)),
    )


@cache
def _registry_name_table() -> dict[str, Any]:
    return _read_json("model-registry-names.json")


def registry_names_for(model_type: object, model: str = "") -> tuple[str, ...]:
    """The config.json `architectures` of a catalog model that does not state its own: by the
    catalog key, else by its model_type (data/model-registry-names.json, every row sourced).

    Why: vLLM resolves a checkpoint by these class names, so the release check
    (`release_problem`) needs them; without them it cannot tell and lets the model through.
    """
    table = _registry_name_table()
    row = table["by_model"].get(model) or (
        table["by_model_type"].get(model_type) if isinstance(model_type, str) else None
    )
    if not row:
        return ()
    return tuple(str(n) for n in row["architectures"])


def _registry_names(cfg: dict[str, Any]) -> tuple[str, ...]:
    names = cfg.get("architectures")
    if not isinstance(names, list):
        return ()
    return tuple(n for n in names if isinstance(n, str))


# ----------------------------------------------------------------- architectures by release


@cache
def _registry_releases() -> dict[str, Any]:
    return _read_json("architecture-releases.json")


def release_problem(arch: Architecture, version: str) -> str | None:
    """Why vLLM `version` cannot load `arch` (its registry lacks every class name the model's
    config.json lists), or None when it can or the catalog cannot tell.

    From `data/architecture-releases.json` (hack/vllm-catalog/architectures.py: the
    `_VLLM_MODELS` registry of each scanned release wheel). Only what the data proves is
    refused: a release older than the first scanned one, and an architecture no scanned release
    registers (vLLM may still run it through its Transformers backend), are let through. Every
    release the catalog pins is scanned; `absent` lists the releases between an architecture's
    first and last that lack it (removed, then registered again).
    """
    if not arch.registry_names:
        return None
    data = _registry_releases()
    scanned = list(data["scanned"])
    try:
        here = version_position(version)
        positions = {v: version_position(v) for v in scanned}
    except UnknownVersionError:
        return None
    if here < min(positions.values()):
        return None
    table = data["architectures"]
    known = [(n, table[n]) for n in arch.registry_names if n in table]
    if not known:
        return None
    for _name, span in known:
        inside = positions[span["first"]] <= here <= positions[span["last"]]
        if inside and version not in span.get("absent", ()):
            return None
    name, span = known[0]
    gap = span.get("absent", ())
    if version in gap:
        again = next(v for v in scanned if positions[v] > here and v not in gap)
        return (
            f"vLLM {version} does not register the architecture {name} of {arch.name} (vLLM's "
            f"model registry: absent from {', '.join(span['absent'])}); it is registered again "
            f"in vLLM {again}: pin spec.vllm.version {again} or another release that has it"
        )
    if positions[span["first"]] > here:
        return (
            f"vLLM {version} does not register the architecture {name} of {arch.name} (vLLM's "
            f"model registry); the first release that has it is vLLM {span['first']}: pin "
            f"spec.vllm.version {span['first']} or later"
        )
    return (
        f"vLLM {version} no longer registers the architecture {name} of {arch.name} (vLLM's "
        f"model registry); the last release that has it is vLLM {span['last']}: pin "
        f"spec.vllm.version {span['last']} or earlier"
    )


def load_config_file(path: Path) -> Architecture:
    """An architecture from a config.json on disk (`estimate --model-config`)."""
    try:
        cfg = json.loads(path.read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read model config {str(path)!r}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise ValueError(f"model config {str(path)!r} is not a JSON object")
    return architecture_from_config(cfg, path)


def architecture_from_config(cfg: dict[str, Any], path: Path) -> Architecture:
    """An architecture from a config.json already read from `path` (named after its folder)."""
    name = str(cfg.get("_name_or_path") or path.parent.name or path.stem)
    return architecture_from_hf_config(cfg, name, f"file {path}")


def architecture_from_override(override: ArchitectureOverride, name: str) -> Architecture:
    """The VLLMService's inline `spec.model.architecture` as an Architecture."""
    inter = override.intermediate_size or override.moe_intermediate_size or 4 * override.hidden_size
    return Architecture(
        name=name,
        model_type=override.model_type or "unknown",
        num_hidden_layers=override.num_hidden_layers,
        hidden_size=override.hidden_size,
        num_attention_heads=override.num_attention_heads,
        num_key_value_heads=1
        if override.kv_lora_rank
        else (override.num_key_value_heads or override.num_attention_heads),
        head_dim=override.head_dim or override.hidden_size // override.num_attention_heads,
        intermediate_size=inter,
        vocab_size=override.vocab_size,
        max_position_embeddings=override.max_position_embeddings,
        tie_word_embeddings=bool(override.tie_word_embeddings),
        num_experts=override.num_experts,
        num_experts_per_tok=override.num_experts_per_token,
        moe_intermediate_size=override.moe_intermediate_size
        or (inter if override.num_experts else None),
        num_shared_experts=override.num_shared_experts or 0,
        kv_lora_rank=override.kv_lora_rank,
        qk_rope_head_dim=override.qk_rope_head_dim,
        sliding_window=override.sliding_window,
        num_parameters=override.num_parameters,
        source="spec.model.architecture (inline override)",
        registry_names=registry_names_for(override.model_type),
    )


# -------------------------------------------------------------------------------------- catalog


def _read_json(name: str) -> dict[str, Any]:
    text = resources.files("vllm_operator.catalog").joinpath("data", name).read_text("utf-8")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"catalog file {name} is not a JSON object")
    return data


@cache
def _raw_catalog() -> dict[str, dict[str, Any]]:
    """Every entry, extras overlaid and `extends` resolved, keyed by repo id."""
    shared = {k: dict(v) for k, v in _read_json("model-architectures.json").items()}
    extra = {k: v for k, v in _read_json("model-architectures-extra.json").items() if k[0] != "_"}
    merged: dict[str, dict[str, Any]] = dict(shared)
    for key, entry in extra.items():
        base = dict(merged.get(key, {}))
        if base and "source" in entry:
            entry = {**entry, "source": f"{base.get('source', '')} | {entry['source']}"}
        merged[key] = {**base, **{k: v for k, v in entry.items() if v is not None or k in base}}

    def resolve(key: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
        entry = merged[key]
        parent = entry.get("extends")
        if not parent or parent in seen:
            return entry
        base = resolve(str(parent), (*seen, key))
        return {**base, **{k: v for k, v in entry.items() if v is not None}, "extends": None}

    resolved = {key: resolve(key) for key in merged}
    for key, entry in resolved.items():
        if not entry.get("architectures"):
            names = registry_names_for(entry.get("model_type"), key)
            if names:
                entry["architectures"] = list(names)
    for entry in list(resolved.values()):
        for alias in entry.get("aliases") or []:
            resolved.setdefault(str(alias), entry)
    return resolved


INSTRUCT_SUFFIXES = ("-Instruct", "-it", "-Chat")
"""Suffixes of the instruct / chat variant of a base checkpoint (Hugging Face naming)."""


def variant_base(name: str, catalog: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The catalogued base an instruct/chat variant (`-Instruct`, `-it`, `-Chat`) resolves to.

    Only when the base's entry states, with its source, that the variant's config.json is the
    same in every field the memory model reads (`same_config_variants`: the suffixes). A
    fine-tune usually keeps its base's architecture, but not always (a longer context, an
    added token, another dtype or a quantised checkpoint all change the plan), so a name is
    never guessed: without the statement the variant is unknown, and a variant with its own
    entry (a differing config) always wins over the rule.
    """
    lower = name.lower()
    for suffix in INSTRUCT_SUFFIXES:
        if not lower.endswith(suffix.lower()) or len(lower) == len(suffix):
            continue
        stem = lower[: -len(suffix)]
        base = next((k for k in catalog if k.lower() == stem), None)
        if base is None:
            continue
        stated = {str(s).lower() for s in catalog[base].get("same_config_variants") or []}
        if suffix.lower() in stated:
            return base
    return None


def catalog_names() -> list[str]:
    """Model ids the catalog knows (complete or not)."""
    return sorted(_raw_catalog())


@cache
def lookup_architecture(name: str) -> Architecture:
    """The catalog's architecture for a repo id (case-insensitive; aliases included).

    Raises UnknownModelError when the model is absent or its entry lacks dimensions.
    """
    catalog = _raw_catalog()
    key = name if name in catalog else next((k for k in catalog if k.lower() == name.lower()), None)
    if key is None:
        base = variant_base(name, catalog)
        if base is None:
            raise UnknownModelError(name, "not in the built-in catalog")
        key = name
        stated = catalog[base].get("source", "")
        entry = {
            **catalog[base],
            "source": f"same config.json as {base} (instruct/base rule); {stated}",
        }
    else:
        entry = dict(catalog[key])
    alias_of = entry.get("alias_of")
    if alias_of and alias_of in catalog:
        entry = {**catalog[alias_of], **{k: v for k, v in entry.items() if v is not None}}
    try:
        return architecture_from_hf_config(entry, key, str(entry.get("source", "catalog")))
    except ValueError as exc:
        raise UnknownModelError(name, f"the built-in catalog entry is incomplete ({exc})") from exc
