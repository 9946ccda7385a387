"""Hybrid attention + Gated-DeltaNet / Mamba models: state pages, vLLM's hybrid block size and
the shared block pool, computed by hand from config.json and the vLLM 0.33.0 / 0.11.0 rules,
and checked against real startup logs (bench row 54, vllm#42317)."""

import math

import pytest

from vllm_operator.catalog.architectures import (
    Architecture,
    LinearKind,
    QuantMethod,
    architecture_from_hf_config,
    lookup_architecture,
)
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    GIB,
    EngineArgs,
    estimate_memory,
    hybrid_layout,
    kv_bytes_per_token,
    state_page_bytes,
    weights_bytes,
)
from vllm_operator.planning.versions import VllmVersion

# text_config of huggingface.co/Qwen/Qwen3.6-35B-A3B config.json (Qwen3_5MoeForConditionalGeneration),
# as quoted in public checkpoint-validation fixtures; only the keys the planner reads.
QWEN36_35B_A3B = {
    "model_type": "qwen3_5_moe",
    "text_config": {
        "model_type": "qwen3_5_moe_text",
        "hidden_size": 2048,
        "num_hidden_layers": 40,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "vocab_size": 248320,
        "max_position_embeddings": 262144,
        "full_attention_interval": 4,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "mamba_ssm_dtype": "float32",
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    },
    "tie_word_embeddings": False,
}

# By hand: conv_dim = 2 x 16 x 128 + 32 x 128 = 8192; conv state 8192 x (4 - 1) x 2 B;
# recurrent state 32 x 128 x 128 x 4 B (float32).
QWEN36_STATE_PAGE = 8192 * 3 * 2 + 32 * 128 * 128 * 4  # 2,146,304


def qwen36() -> Architecture:
    return architecture_from_hf_config(QWEN36_35B_A3B, "Qwen/Qwen3.6-35B-A3B", "test")


H100 = gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3"))


def test_config_json_reads_the_layer_mix_and_gdn_dimensions() -> None:
    arch = qwen36()
    assert arch.is_hybrid and arch.kind == "hybrid"
    assert arch.linear_kind is LinearKind.GATED_DELTA_NET
    assert (arch.linear_layers, arch.full_attention_layers) == (30, 10)
    assert arch.intermediate_size == 512  # no dense MLP: falls back to the expert width
    assert arch.attn_output_gate  # vLLM's default for Qwen3-Next / Qwen3.5 attention
    # Qwen3-Next leaves layer_types unset: every 4th layer is full attention.
    text_config = QWEN36_35B_A3B["text_config"]
    assert isinstance(text_config, dict)
    text = {k: v for k, v in text_config.items() if k != "layer_types"}
    assert architecture_from_hf_config(text, "n", "t").linear_layers == 30


def test_state_page_is_conv_plus_recurrent_state_sharded_by_tp() -> None:
    arch = qwen36()
    assert state_page_bytes(arch, tp=1, model_dtype="bfloat16") == QWEN36_STATE_PAGE == 2_146_304
    assert state_page_bytes(arch, tp=2, model_dtype="bfloat16") == QWEN36_STATE_PAGE // 2


def test_block_size_is_raised_until_one_attention_page_holds_a_state_page() -> None:
    arch = qwen36()

    def block(kv_bytes: int, version: str, cc: tuple[int, int]) -> int:
        return hybrid_layout(
            arch,
            tp=1,
            layers=40,
            kv_dtype_bytes=kv_bytes,
            model_dtype="bfloat16",
            block_size=16,
            version=VllmVersion.parse(version),
            compute_capability=cc,
        ).block_size

    # bf16 KV: one token of one layer = 2 x 2 heads x 256 x 2 B = 2048 B;
    # 16 x cdiv(2,146,304, 16 x 2048) = 1056, the size vllm#42317 logs for this model.
    assert block(2, "0.24.0", (12, 0)) == 16 * math.ceil(QWEN36_STATE_PAGE / (16 * 2048)) == 1056
    # fp8 KV halves the token page: 16 x 131 = 2096.
    assert block(1, "0.24.0", (12, 0)) == 2096
    # 0.33 on Hopper: FlashInfer GDN prefill checkpoints every 64 tokens -> multiple of 64.
    assert block(2, "0.33.0", (9, 0)) == 64 * math.ceil(QWEN36_STATE_PAGE / (64 * 2048)) == 1088


def test_logged_kv_gib_gives_vllms_token_count_exactly() -> None:
    """Row 54 (noonghunna/club-3090#652, vLLM 0.24.0, RTX 5090, fp8 KV, max_model_len 131072):
    'Available KV cache memory: 6.01 GiB' and 'GPU KV cache size: 569,878 tokens'."""
    layout = hybrid_layout(
        qwen36(),
        tp=1,
        layers=40,
        kv_dtype_bytes=1,
        model_dtype="bfloat16",
        block_size=16,
        version=VllmVersion.parse("0.24.0"),
        compute_capability=(12, 0),
    )
    # 10 attention + 30 GDN layers -> groups of 10: 1 attention group, 3 state groups; a block
    # holds one 2096 x 1024 B page of each of the 10 layers of a group.
    assert (layout.group_size, layout.attention_groups, layout.state_groups) == (10, 1, 3)
    assert layout.bytes_per_block == 10 * 2096 * 1024
    blocks = int(6.01 * GIB // layout.bytes_per_block)
    assert blocks == 300
    # per sequence: cdiv(131072, 2096) = 63 attention blocks + 3 groups x 2 state blocks (align
    # mode, prefix caching on by default) = 69
    assert layout.blocks_per_request(131072) == 63 + 3 * 2
    assert int(blocks / layout.blocks_per_request(131072) * 131072) == 569_878
    # the same setup in noonghunna/club-3090#612 (vLLM 0.24.0): 5.98 GiB -> 567,978 tokens, 4.33x
    other = int(5.98 * GIB // layout.bytes_per_block)
    assert (other, int(other / 69 * 131072), round(other / 69, 2)) == (299, 567_978, 4.33)


def test_before_hybrid_prefix_caching_a_sequence_pins_one_state_block() -> None:
    """vLLM 0.11.0 MambaModelConfig turned prefix caching off for hybrids: MambaSpec's
    max_memory_usage_bytes is one page; 0.33 (align mode, FlashInfer checkpoint on sm90) three."""
    arch = qwen36()

    def layout(version: str) -> int:
        return hybrid_layout(
            arch,
            tp=1,
            layers=40,
            kv_dtype_bytes=2,
            model_dtype="bfloat16",
            block_size=16,
            version=VllmVersion.parse(version),
            compute_capability=(9, 0),
        ).state_blocks_per_seq

    assert (layout("0.11.0"), layout("0.33.0")) == (1, 3)


def test_only_full_attention_layers_hold_per_token_kv() -> None:
    arch = qwen36()
    # 10 attention layers x 2 (K, V) x 2 heads x 256 x 2 B
    assert kv_bytes_per_token(arch, tp=1, layers=40, kv_dtype_bytes=2) == 10 * 2 * 2 * 256 * 2


def test_estimate_reports_concurrency_from_sequences_and_tokens() -> None:
    """Max concurrency rests on blocks per sequence (attention pages for max_model_len plus the
    pinned state pages), so halving max_model_len less than doubles it."""
    arch = lookup_architecture("Qwen/Qwen3.6-35B-A3B")
    gpu = gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3"))
    long = estimate_memory(arch, gpu, EngineArgs(max_model_len=32768, vllm_version="0.33.0"))
    short = estimate_memory(arch, gpu, EngineArgs(max_model_len=16384, vllm_version="0.33.0"))
    assert long.args.block_size == short.args.block_size == 1088
    assert long.num_gpu_blocks == short.num_gpu_blocks
    per_long = math.ceil(32768 / 1088) + 3 * 3
    per_short = math.ceil(16384 / 1088) + 3 * 3
    assert long.max_concurrency == round(long.num_gpu_blocks / per_long, 2)
    assert short.max_concurrency == round(short.num_gpu_blocks / per_short, 2)
    assert short.max_concurrency < 2 * long.max_concurrency
    assert any("raises the attention block size to 1088" in r for r in long.reasons)


def test_gdn_layer_weights_replace_attention_weights() -> None:
    """Qwen3.6-35B-A3B counts 34.7 B text parameters (+0.45 B vision): the published 35 B."""
    arch = lookup_architecture("Qwen/Qwen3.6-35B-A3B")
    params = weights_bytes(arch, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None) / 2
    assert 34.5e9 < params - arch.vision_params < 34.9e9


def test_mamba2_state_matches_vllms_shape_helper() -> None:
    """mamba2_state_shape: conv (I + 2 G N) / TP x (K - 1), SSM H / TP x head_dim x N; groups
    not divisible by TP are extended (extra_groups_for_head_shards). Dimensions: the example of
    vLLM's own comment ((heads, head_dim, state) = (128, 64, 128)), 8192 = 128 x 64."""
    arch = Architecture(
        name="mamba2-shape",
        num_hidden_layers=4,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=8192,
        vocab_size=32000,
        linear_layers=3,
        linear_kind=LinearKind.MAMBA2,
        mamba_intermediate_size=8192,
        mamba_num_heads=128,
        mamba_head_dim=64,
        mamba_n_groups=1,
        mamba_d_state=128,
        linear_conv_kernel_dim=4,
    )
    one = (8192 + 2 * 1 * 128) * 3 * 2 + 128 * 64 * 128 * 2
    assert state_page_bytes(arch, tp=1, model_dtype="bfloat16") == one
    two = (8192 + 2 * 2 * 128) // 2 * 3 * 2 + 64 * 64 * 128 * 2  # 1 group -> 2 at TP 2
    assert state_page_bytes(arch, tp=2, model_dtype="bfloat16") == two


@pytest.mark.parametrize(
    ("qc", "method", "experts", "dense"),
    [
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, QuantMethod.NVFP4, 0.5625, 0.5625),
        (
            {
                "quant_method": "compressed-tensors",
                "format": "nvfp4-pack-quantized",
                "config_groups": {
                    "group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}
                },
            },
            QuantMethod.NVFP4,
            0.5625,
            0.5625,
        ),
        (
            {
                "quant_method": "modelopt",
                "quant_algo": "MIXED_PRECISION",
                "config_groups": {
                    "group_0": {"weights": {"num_bits": 8, "type": "float"}},
                    "group_1": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}},
                },
            },
            QuantMethod.NVFP4,
            0.5625,
            1.0,
        ),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, QuantMethod.FP8, 1.0, 1.0),
    ],
)
def test_nvfp4_is_four_and_a_half_bits(
    qc: dict[str, object], method: QuantMethod, experts: float, dense: float
) -> None:
    """NVFP4: 4-bit E2M1 values + one FP8 scale per 16 weights = 4.5 bits (0.5625 B)."""
    cfg = {**QWEN36_35B_A3B, "quantization_config": qc}
    quant = architecture_from_hf_config(cfg, "q", "t").quantization
    assert quant is not None and quant.method is method
    assert quant.bytes_per_param() == pytest.approx(experts)
    assert quant.dense_bytes_per_param() == pytest.approx(dense)


def test_modelopt_flag_matches_an_nvfp4_checkpoint() -> None:
    """`--quantization modelopt` is how such checkpoints are served (row 54)."""
    arch = lookup_architecture("nvidia/Qwen3.6-35B-A3B-NVFP4")
    gpu = gpu_memory(lookup_gpu("NVIDIA-GeForce-RTX-5090"))
    est = estimate_memory(
        arch,
        gpu,
        EngineArgs(
            max_model_len=131072, max_num_seqs=1, kv_cache_dtype="fp8", quantization="modelopt"
        ),
    )
    bf16 = estimate_memory(lookup_architecture("Qwen/Qwen3.6-35B-A3B"), gpu, EngineArgs())
    assert est.args.quantization == "modelopt_fp4"
    assert est.weights_gib < 0.35 * bf16.weights_gib  # 65 GiB of bf16 would not load at all
    assert not bf16.fits


def test_sparse_mla_caches_the_indexer_key_beside_the_latent() -> None:
    """DeepSeek-V3.2 (config: index_head_dim 128, index_topk 2048): per layer and token the
    fp8_ds_mla latent (512 fp8 + 4 fp32 scales + 64 bf16 RoPE = 656 B, flashmla_sparse.py) plus
    the indexer key (128 fp8 + one fp32 scale = 132 B, deepseek_v2.py DeepseekV32IndexerCache);
    with a bf16 cache (512 + 64) x 2 + 132."""
    v32 = lookup_architecture("deepseek-ai/DeepSeek-V3.2")
    v3 = lookup_architecture("deepseek-ai/DeepSeek-V3")
    assert v32.index_head_dim == 128 and v3.index_head_dim is None
    assert kv_bytes_per_token(v32, tp=8, layers=61, kv_dtype_bytes=1) == 61 * (656 + 132)
    assert kv_bytes_per_token(v32, tp=8, layers=61, kv_dtype_bytes=2) == 61 * (1152 + 132)
    assert kv_bytes_per_token(v3, tp=8, layers=61, kv_dtype_bytes=2) == 61 * 1152
    # the indexer's projections are replicated on every rank: q_lora x 64 x 128 + hidden x
    # (128 + 64) + norm, per layer, at the checkpoint's fp8
    extra = 61 * (1536 * 64 * 128 + 7168 * (128 + 64) + 256)
    q = v32.quantization
    diff = weights_bytes(v32, tp=8, pp=1, stage=0, dtype="bfloat16", quant=q) - weights_bytes(
        v3, tp=8, pp=1, stage=0, dtype="bfloat16", quant=q
    )
    assert diff == pytest.approx(extra * 1.0)


def test_gemma4_kv_shared_layers_hold_no_kv_and_global_layers_a_wider_head() -> None:
    """Gemma-4-E2B (config: 35 layers, 4 sliding : 1 full, num_kv_shared_layers 20, head_dim
    256, global_head_dim 512, 1 KV head): the first 15 layers own KV, 3 of them full attention
    with the 512-wide head, 12 sliding with 256; the last 20 reuse it."""
    arch = lookup_architecture("google/gemma-4-E2B")
    by_hand = 3 * 2 * 1 * 512 * 2 + 12 * 2 * 1 * 256 * 2
    assert kv_bytes_per_token(arch, tp=1, layers=35, kv_dtype_bytes=2) == by_hand == 18432
    # without sharing every one of the 35 layers would hold KV: 7 full + 28 sliding
    unshared = arch.model_copy(update={"num_kv_shared_layers": 0})
    assert kv_bytes_per_token(unshared, tp=1, layers=35, kv_dtype_bytes=2) == (
        7 * 2 * 512 * 2 + 28 * 2 * 256 * 2
    )


def test_gemma4_per_layer_embeddings_are_most_of_the_small_model() -> None:
    """The per-layer embedding table (262144 x 35 x 256 = 2.35 B parameters) is loaded on the
    GPU: Gemma-4-E2B's weights are 8.62 GiB predicted vs 8.89 GiB logged by vLLM 0.21 on an L4
    (bench row 6); without the table they would be about half."""
    arch = lookup_architecture("google/gemma-4-E2B")
    full = weights_bytes(arch, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None) / GIB
    table = 262144 * 35 * 256 * 2 / GIB
    no_ple = arch.model_copy(update={"hidden_size_per_layer_input": 0})
    bare = weights_bytes(no_ple, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None) / GIB
    assert full == pytest.approx(8.89, rel=0.04)
    assert full - bare > table


# Config fixtures (config.json keys the planner reads) of a Nemotron-H (56 layers, hidden 4480:
# Nemotron-Nano-9B-v2's dimensions) and a Falcon-H1 (24 layers, hidden 2048), as published in a
# memory-estimator's formula tests (AgileRL arena tests, code index id 70988719928).
NEMOTRON_H = {
    "model_type": "nemotron_h",
    "num_hidden_layers": 56,
    "hidden_size": 4480,
    "intermediate_size": 15680,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 131072,
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "ssm_state_size": 128,
    "conv_kernel": 4,
    "mamba_num_groups": 8,
    "mamba_num_heads": 128,
    "mamba_head_dim": 80,
}
FALCON_H1 = {
    "model_type": "falcon_h1",
    "num_hidden_layers": 24,
    "hidden_size": 2048,
    "intermediate_size": 4608,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "vocab_size": 65537,
    "mamba_d_state": 256,
    "mamba_d_conv": 4,
    "mamba_n_groups": 1,
    "mamba_n_heads": 48,
    "mamba_d_head": 64,
    "mamba_d_ssm": 3072,
}


def test_nemotron_h_pattern_counts_attention_mamba_and_mlp_layers_apart() -> None:
    """hybrid_override_pattern: 27 Mamba2 (M), 4 attention (*), 25 MLP-only (-) layers: only the
    4 attention layers hold KV (counting all 56 would overstate it 14x). State: conv (I + 2 G N)
    x (K - 1) in bf16 + heads x head_dim x N in float32 (NemotronHForCausalLMConfig's default
    mamba_ssm_cache_dtype), I = 128 heads x 80."""
    arch = architecture_from_hf_config(NEMOTRON_H, "nemotron-h", "test")
    assert (arch.linear_layers, arch.full_attention_layers) == (27, 4)
    assert kv_bytes_per_token(arch, tp=1, layers=56, kv_dtype_bytes=2) == 4 * 2 * 8 * 128 * 2
    state = (10240 + 2 * 8 * 128) * 3 * 2 + 128 * 80 * 128 * 4
    assert state_page_bytes(arch, tp=1, model_dtype="bfloat16") == state
    layout = hybrid_layout(
        arch,
        tp=1,
        layers=56,
        kv_dtype_bytes=2,
        model_dtype="bfloat16",
        block_size=16,
        version=VllmVersion.parse("0.33.0"),
        compute_capability=(9, 0),
    )
    # page per token and layer 2 x 8 x 128 x 2 = 4096 B; groups of 4: 1 attention + 7 state
    assert layout.block_size == 16 * math.ceil(state / (16 * 4096))
    assert (layout.group_size, layout.attention_groups, layout.state_groups) == (4, 1, 7)
    # relu2 MLPs (up + down), one mixer per layer: 8.9 B parameters
    params = weights_bytes(arch, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None) / 2
    assert 8.7e9 < params < 9.0e9


def test_falcon_h1_runs_attention_and_mamba_in_every_layer() -> None:
    arch = architecture_from_hf_config(FALCON_H1, "falcon-h1", "test")
    assert arch.parallel_hybrid
    assert (arch.linear_layers, arch.full_attention_layers) == (24, 24)
    state = (3072 + 2 * 1 * 256) * 3 * 2 + 48 * 64 * 256 * 2
    assert state_page_bytes(arch, tp=1, model_dtype="bfloat16") == state
    layout = hybrid_layout(
        arch,
        tp=1,
        layers=24,
        kv_dtype_bytes=2,
        model_dtype="bfloat16",
        block_size=16,
        version=VllmVersion.parse("0.11.0"),
        compute_capability=(8, 0),
    )
    assert (layout.attention_groups, layout.state_groups, layout.state_blocks_per_seq) == (1, 1, 1)
    assert layout.bytes_per_block == 24 * layout.block_size * 2 * 2 * 128 * 2


def test_glm45_air_reads_as_a_gqa_moe_with_one_dense_layer_and_an_mtp_layer() -> None:
    """GLM-4.5-Air config.json (glm4_moe): n_routed_experts 128 + n_shared_experts 1, top-8,
    first_k_dense_replace 1, attention_bias; 106 B parameters as published (12 B active); KV
    per token at TP 4: 46 x 2 x (8 / 4) x 128 x 2 B."""
    arch = lookup_architecture("zai-org/GLM-4.5-Air")
    assert (arch.kind, arch.num_experts, arch.num_shared_experts) == ("MoE", 128, 1)
    assert (arch.first_k_dense_replace, arch.attention_bias, arch.num_mtp_layers) == (1, True, 1)
    params = weights_bytes(arch, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None) / 2
    assert 106e9 < params < 108e9
    assert kv_bytes_per_token(arch, tp=4, layers=46, kv_dtype_bytes=2) == 46 * 2 * 2 * 128 * 2


def test_hybrid_plans_ask_for_the_families_measured_error_as_headroom() -> None:
    from vllm_operator.planning.fidelity import WIDEST_MARGIN, kv_error_margin

    arch = lookup_architecture("Qwen/Qwen3.6-35B-A3B")
    margin, why = kv_error_margin("0.19.0", arch, (9, 0))  # a calibrated 2 % cell
    assert margin == 0.10 and "hybrid" in why
    # a cell with too few rows (0.20+ x Volta/Turing here, which has none) gets the widest margin,
    # never less than the family floor
    margin, why = kv_error_margin("0.33.0", arch, (7, 5))
    assert margin == max(WIDEST_MARGIN, 0.10) and "fewer than 5 calibration rows" in why


def test_mixed_precision_reads_the_per_layer_formats_when_the_config_lists_them() -> None:
    """modelopt MIXED_PRECISION configs list every quantised layer with its quant_algo
    (ModelOptMixedPrecisionConfig): attention / GDN projections FP8, shared experts and lm_head
    NVFP4 here; what is not listed stays bf16."""
    qc = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "config_groups": {
            "group_0": {"weights": {"num_bits": 8, "type": "float"}},
            "group_1": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}},
        },
        "quantized_layers": {
            "model.language_model.layers.0.linear_attn.in_proj_qkv": {"quant_algo": "FP8"},
            "model.language_model.layers.3.self_attn.q_proj": {"quant_algo": "FP8"},
            "model.language_model.layers.0.mlp.experts": {"quant_algo": "NVFP4"},
            "model.language_model.layers.0.mlp.shared_expert.gate_proj": {"quant_algo": "NVFP4"},
            "lm_head": {"quant_algo": "NVFP4"},
        },
    }
    arch = architecture_from_hf_config({**QWEN36_35B_A3B, "quantization_config": qc}, "m", "t")
    quant = arch.quantization
    assert quant is not None
    assert (quant.dense_bits, quant.shared_expert_bits, quant.lm_head_bits) == (8.0, 4.5, 4.5)
    plain = quant.model_copy(update={"shared_expert_bits": None, "lm_head_bits": None})
    with_head = weights_bytes(arch, tp=1, pp=1, stage=0, dtype="bfloat16", quant=quant)
    without = weights_bytes(arch, tp=1, pp=1, stage=0, dtype="bfloat16", quant=plain)
    head = 248320 * 2048 * (2 - 0.5625)
    shared = 40 * (3 * 2048 * 512 + 2048) * (1 - 0.5625)  # + shared_expert_gate (h x 1)
    assert without - with_head == pytest.approx(head + shared, rel=1e-6)


def test_nvidias_mixed_nvfp4_checkpoint_names_w4a16_layers() -> None:
    """nvidia/Qwen3.6-35B-A3B-NVFP4 lists its experts, shared experts and lm_head as W4A16_NVFP4
    (NVFP4 storage, 16-bit activations: vLLM modelopt.py ModelOptNvFp4W4A16LinearMethod) and its
    attention / GDN projections as FP8; an unknown algo name would count 8 bits."""
    quant = lookup_architecture("nvidia/Qwen3.6-35B-A3B-NVFP4").quantization
    assert quant is not None and quant.method is QuantMethod.NVFP4
    assert (quant.dense_bits, quant.shared_expert_bits, quant.lm_head_bits) == (8.0, 4.5, 4.5)


def test_qwen3_next_from_the_catalog_and_a_hybrid_from_the_hub_gateway() -> None:
    """Qwen3-Next-80B-A3B answers offline (48 layers, every 4th full attention, 80 B
    parameters); a hybrid config.json read through the Hub gateway parses the same way."""
    from typing import Any

    from vllm_operator.hub.config import fetch_architecture

    nxt = lookup_architecture("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert (nxt.linear_layers, nxt.full_attention_layers) == (36, 12)
    params = weights_bytes(nxt, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None) / 2
    assert 79e9 < params < 81e9

    class Hub:
        def fetch_config(
            self, repo_id: str, *, revision: str | None = None, token: str | None = None
        ) -> dict[str, Any]:
            return QWEN36_35B_A3B

    arch = fetch_architecture(Hub(), "Qwen/Qwen3.6-35B-A3B")
    assert arch.is_hybrid and arch.source.endswith("/config.json")
    assert state_page_bytes(arch, tp=1, model_dtype="bfloat16") == QWEN36_STATE_PAGE


def test_short_sequences_still_pin_their_state_pages() -> None:
    """At a context shorter than max_model_len a hybrid's sequence needs fewer attention blocks
    but the same state blocks: tokens / context would overstate the concurrency the plan
    promises (plan.py counts with sequences_at)."""
    from vllm_operator.planning.memory import sequences_at

    arch = lookup_architecture("Qwen/Qwen3.6-35B-A3B")
    est = estimate_memory(arch, H100, EngineArgs(max_model_len=32768, quantization="fp8"))
    blocks = est.num_gpu_blocks
    assert sequences_at(est, 4096) == blocks / (math.ceil(4096 / 1088) + 3 * 3)
    assert sequences_at(est, 4096) < est.kv_cache_tokens / 4096
    assert sequences_at(est, 32768) == pytest.approx(est.max_concurrency, abs=0.01)
    dense = estimate_memory(lookup_architecture("Qwen/Qwen3-8B"), H100, EngineArgs())
    assert sequences_at(dense, 4096) == dense.kv_cache_tokens / 4096


def test_without_prefix_caching_a_sequence_pins_one_state_block() -> None:
    """MambaModelConfig: prefix caching off -> mamba_cache_mode 'none' -> one state page per
    sequence (MambaSpec.max_memory_usage_bytes), no checkpoint alignment."""
    arch = lookup_architecture("Qwen/Qwen3.6-35B-A3B")
    args = EngineArgs(max_model_len=32768, quantization="fp8")
    on = estimate_memory(arch, H100, args)
    off = estimate_memory(arch, H100, args.model_copy(update={"enable_prefix_caching": False}))
    assert (on.args.block_size, off.args.block_size) == (1088, 1056)
    assert off.hybrid_layout is not None and off.hybrid_layout.state_blocks_per_seq == 1
    assert off.max_concurrency > on.max_concurrency


def test_mtp_draft_layer_and_speculative_blocks_reproduce_a_logged_token_count() -> None:
    """noonghunna/club-3090#594: a Qwen3.x-27B FP8 checkpoint (64 layers, 16 full attention,
    GDN 16 / 48 heads) on two RTX 3090s, TP 2, fp8 KV, max_model_len 262144, MTP with 3
    speculative tokens: 'Available KV cache memory: 5.33 GiB', 'GPU KV cache size: 300,220
    tokens', 'Maximum concurrency ... 1.15x'. By the rule: the conv state grows by 3 positions
    (state 5120 x 6 x 2 + 24 x 128 x 128 x 4 = 1,634,304 B per rank) -> block 1600 (vllm#53595
    logs 1600 for this model with MTP 3 at TP 1 as well: twice the state over twice the KV
    page); the MTP layer joins the 16 attention layers
    (groups of 17: 1 attention + 3 state groups); a sequence pins cdiv(262144, 1600) = 164
    attention blocks + 3 x (2 + 3) state blocks = 179."""
    arch = lookup_architecture("Qwen3.8-27B")
    layout = hybrid_layout(
        arch,
        tp=2,
        layers=64,
        kv_dtype_bytes=1,
        model_dtype="bfloat16",
        block_size=16,
        version=VllmVersion.parse("0.24.0"),
        compute_capability=(8, 6),
        draft_attention_layers=1,
        spec_tokens=3,
    )
    assert layout.state_page == 5120 * 6 * 2 + 24 * 128 * 128 * 4
    assert (layout.block_size, layout.group_size, layout.state_groups) == (1600, 17, 3)
    blocks = int(5.33 * GIB // layout.bytes_per_block)
    assert layout.blocks_per_request(262144) == 164 + 3 * 5
    assert int(blocks / 179 * 262144) == 300_220
    assert round(blocks / 179, 2) == 1.15
    # without speculation the same checkpoint aligns to 1568 (talos-argocd-proxmox#1995, bench
    # row 59: 4.99 GiB -> 302,921 tokens at 131072, 2.31x)
    plain = hybrid_layout(
        arch,
        tp=2,
        layers=64,
        kv_dtype_bytes=1,
        model_dtype="bfloat16",
        block_size=16,
        version=VllmVersion.parse("0.24.0"),
        compute_capability=(8, 6),
    )
    plain_blocks = int(4.99 * GIB // plain.bytes_per_block)
    assert (plain.block_size, plain_blocks) == (1568, 208)
    assert int(plain_blocks / plain.blocks_per_request(131072) * 131072) == 302_921


def _l40s_qwen38(version: str, **args: object) -> list[str]:
    """Bench row 75: Qwen/Qwen3.8-27B-FP8 on one L40S, util 0.90, 131,072 context."""
    est = estimate_memory(
        lookup_architecture("Qwen/Qwen3.8-27B-FP8"),
        gpu_memory(lookup_gpu("NVIDIA-L40S")),
        EngineArgs(
            gpu_memory_utilization=0.90,
            max_model_len=131072,
            vllm_version=version,
            **args,
        ),
    )
    return [w for w in est.startup_warnings if "Mamba cache blocks" in w]


def test_more_sequences_than_mamba_blocks_is_a_startup_failure_from_0_20() -> None:
    """vLLM 0.26.0 logged 'max_num_seqs (256) exceeds available Mamba cache blocks (184)' and
    stopped (bench row 75, vllm#38270). The estimate's layout turns the logged 8.82 GiB into the
    same 184 blocks (bench KV-bytes table); its own 8.45 GiB (the vision encoder's profile pass
    counted, memory.encoder_profile_bytes; the graph estimate with 35 FULL graphs at 256
    sequences, memory.hybrid_capture_share) gives 174, 189 without that pass, with the mrope
    cos/sin cache in the weights (0.125 GiB, planning/model_load.py; 176 and 192 before it), and
    both say 256 do not fit. 16 sequences (row 76, which started), eager mode (no FULL decode graphs) and
    releases before the check pass."""
    (warning,) = _l40s_qwen38("0.26.0")
    assert "max_num_seqs 256 exceeds the 174 Mamba cache blocks" in warning
    assert "at most 174" in warning
    (unprofiled,) = _l40s_qwen38("0.26.0", skip_mm_profiling=True)
    assert "max_num_seqs 256 exceeds the 189 Mamba cache blocks" in unprofiled
    assert _l40s_qwen38("0.26.0", max_num_seqs=16) == []
    assert _l40s_qwen38("0.26.0", enforce_eager=True) == []
    assert _l40s_qwen38("0.19.0") == []
