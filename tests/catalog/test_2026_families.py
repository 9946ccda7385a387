"""More 2026 families resolve offline from the built-in catalog (#28): Granite-4.0-H and
Nemotron-H hybrids (Mamba2 + attention), Magistral, Gemma-4-31B, Qwen3.5-27B / 35B-A3B /
397B-A17B. Each plans through `vllm-operator estimate`, each hybrid gets its state page, and the
release table refuses each architecture on the vLLM releases that lack it."""

import pytest
from click.testing import CliRunner

from vllm_operator.catalog.architectures import (
    LinearKind,
    QuantMethod,
    architecture_from_hf_config,
    lookup_architecture,
    release_problem,
)
from vllm_operator.cli.main import cli
from vllm_operator.planning.memory import kv_bytes_per_token, state_page_bytes, weights_bytes

# (model, GPU, estimate arguments): a configuration that starts on a plausible GPU. Hybrids
# whose Mamba cache blocks would be fewer than the default max_num_seqs get a lower one, as
# vLLM 0.20+ refuses to start otherwise.
ANSWERED = [
    ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "NVIDIA-A10G", ["--max-num-seqs", "64"]),
    ("nvidia/NVIDIA-Nemotron-Nano-9B-v2-Base", "NVIDIA-H100-80GB-HBM3", []),
    ("ibm-granite/granite-4.0-h-micro", "NVIDIA-L4", []),
    ("ibm-granite/granite-4.0-h-tiny", "NVIDIA-L4", []),
    ("ibm-granite/granite-4.0-h-small", "NVIDIA-H100-80GB-HBM3", []),
    ("mistralai/Magistral-Small-2506", "NVIDIA-L40S", ["--tensor-parallel-size", "2"]),
    ("mistralai/Magistral-Small-2507", "NVIDIA-H100-80GB-HBM3", []),
    ("mistralai/Magistral-Small-2509", "NVIDIA-H100-80GB-HBM3", []),
    ("google/gemma-4-31B-it", "NVIDIA-H100-80GB-HBM3", ["--tensor-parallel-size", "2"]),
    ("Qwen/Qwen3.5-27B", "NVIDIA-H100-80GB-HBM3", ["--max-num-seqs", "256"]),
    ("Qwen/Qwen3.5-35B-A3B", "NVIDIA-H200", []),
    ("Qwen/Qwen3.5-397B-A17B", "NVIDIA-H200", ["--tensor-parallel-size", "8"]),
    ("Qwen/Qwen3.5-27B-FP8", "NVIDIA-L40S", ["--max-num-seqs", "64"]),
    ("Qwen/Qwen3.5-35B-A3B-FP8", "NVIDIA-H100-80GB-HBM3", []),
    ("Qwen/Qwen3.5-397B-A17B-FP8", "NVIDIA-H100-80GB-HBM3", ["--tensor-parallel-size", "8"]),
]
HYBRIDS = {
    "nvidia/NVIDIA-Nemotron-Nano-9B-v2",
    "nvidia/NVIDIA-Nemotron-Nano-9B-v2-Base",
    "ibm-granite/granite-4.0-h-micro",
    "ibm-granite/granite-4.0-h-tiny",
    "ibm-granite/granite-4.0-h-small",
    "Qwen/Qwen3.5-27B",
    "Qwen/Qwen3.5-35B-A3B",
    "Qwen/Qwen3.5-397B-A17B",
    "Qwen/Qwen3.5-27B-FP8",
    "Qwen/Qwen3.5-35B-A3B-FP8",
    "Qwen/Qwen3.5-397B-A17B-FP8",
}


@pytest.mark.parametrize(("model", "gpu", "args"), ANSWERED, ids=[m for m, _, _ in ANSWERED])
def test_estimate_answers_offline(model: str, gpu: str, args: list[str]) -> None:
    result = CliRunner().invoke(
        cli, ["estimate", "--model", model, "--gpu", gpu, "--max-model-len", "8192", *args]
    )
    assert result.exit_code == 0, result.output
    assert "KV cache tokens" in result.output
    assert "fits" in result.output and "NO" not in result.output, result.output
    if model in HYBRIDS:
        # the state page sets vLLM's hybrid block size (planning/memory.py hybrid_layout)
        assert "state page" in result.output, result.output
        assert "exceeds the" not in result.output, result.output
    else:
        assert "state page" not in result.output


@pytest.mark.parametrize(("model", "gpu", "args"), ANSWERED, ids=[m for m, _, _ in ANSWERED])
def test_every_entry_names_its_registry_architecture_and_source(
    model: str, gpu: str, args: list[str]
) -> None:
    arch = lookup_architecture(model)
    assert arch.registry_names, model
    assert "huggingface.co" in arch.source, model
    assert release_problem(arch, "0.33.0") is None, model


@pytest.mark.parametrize(
    ("model", "lacking", "first"),
    [
        ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "0.9.0", "0.9.1"),
        ("ibm-granite/granite-4.0-h-small", "0.8.5.post1", "0.9.0"),
        ("google/gemma-4-31B-it", "0.18.1", "0.19.0"),
        ("Qwen/Qwen3.5-397B-A17B", "0.16.0", "0.17.0"),
        ("Qwen/Qwen3.5-27B", "0.16.0", "0.17.0"),
    ],
)
def test_releases_without_the_architecture_refuse_the_model(
    model: str, lacking: str, first: str
) -> None:
    arch = lookup_architecture(model)
    problem = release_problem(arch, lacking)
    assert problem is not None and f"the first release that has it is vLLM {first}" in problem
    assert release_problem(arch, first) is None


def test_nemotron_nano_v2_state_page_and_kv_by_hand() -> None:
    """hybrid_override_pattern: 27 Mamba2, 4 attention, 25 MLP layers. State page: conv
    (I + 2 G N) x (K - 1) in bf16 + heads x head_dim x N in float32 (NemotronH's default
    mamba_ssm_cache_dtype), I = 128 x 80 = 10240, G = 8, N = 128, K = 4."""
    arch = lookup_architecture("nvidia/NVIDIA-Nemotron-Nano-9B-v2")
    assert arch.linear_kind is LinearKind.MAMBA2
    assert (arch.linear_layers, arch.full_attention_layers) == (27, 4)
    state = (10240 + 2 * 8 * 128) * 3 * 2 + 128 * 80 * 128 * 4
    assert state_page_bytes(arch, tp=1, model_dtype="bfloat16") == state
    assert kv_bytes_per_token(arch, tp=1, layers=56, kv_dtype_bytes=2) == 4 * 2 * 8 * 128 * 2
    base = lookup_architecture("nvidia/NVIDIA-Nemotron-Nano-9B-v2-Base")
    assert base.model_dump(exclude={"name", "source"}) == arch.model_dump(
        exclude={"name", "source"}
    )


@pytest.mark.parametrize(
    ("model", "mamba_inner", "heads", "state", "billions"),
    [
        # IBM's card: H Micro 3B, H Tiny 7B, H Small 32B
        ("ibm-granite/granite-4.0-h-micro", 4096, 64, 128, (3.0, 3.4)),
        ("ibm-granite/granite-4.0-h-tiny", 3072, 48, 128, (6.7, 7.2)),
        ("ibm-granite/granite-4.0-h-small", 8192, 128, 128, (32.0, 32.4)),
    ],
)
def test_granite_4_h_state_page_is_mamba2_in_the_model_dtype(
    model: str, mamba_inner: int, heads: int, state: int, billions: tuple[float, float]
) -> None:
    """Granite-4.0-H: 36 Mamba2 + 4 attention layers. State page (one group, d_conv 4, head 64,
    the model's bf16): (I + 2 N) x 3 x 2 + heads x 64 x N x 2."""
    arch = lookup_architecture(model)
    assert arch.kind == "hybrid"
    assert (arch.linear_layers, arch.full_attention_layers) == (36, 4)
    page = (mamba_inner + 2 * state) * 3 * 2 + heads * 64 * state * 2
    assert state_page_bytes(arch, tp=1, model_dtype="bfloat16") == page
    params = weights_bytes(arch, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None) / 2
    assert billions[0] * 1e9 < params < billions[1] * 1e9


def test_granite_shared_mlp_is_the_mlp_without_experts_and_beside_them_with_experts() -> None:
    """granitemoehybrid.py: shared_mlp (shared_intermediate_size) is the whole MLP when
    num_local_experts is 0, and runs beside the routed experts otherwise."""
    micro = lookup_architecture("ibm-granite/granite-4.0-h-micro")
    assert not micro.is_moe and micro.intermediate_size == 8192
    small = lookup_architecture("ibm-granite/granite-4.0-h-small")
    assert small.is_moe and (small.num_experts, small.num_experts_per_tok) == (72, 10)
    assert (small.moe_intermediate_size, small.shared_expert_intermediate_size) == (768, 1536)
    dense_cfg = {
        "model_type": "granitemoehybrid",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "vocab_size": 128,
        "intermediate_size": 32,
        "shared_intermediate_size": 96,
        "num_local_experts": 0,
    }
    assert architecture_from_hf_config(dense_cfg, "g", "t").intermediate_size == 96
    # other families keep their intermediate_size: the key is read for granitemoehybrid only
    other = architecture_from_hf_config({**dense_cfg, "model_type": "llama"}, "l", "t")
    assert other.intermediate_size == 32


def test_gemma_4_31b_caches_wide_global_heads_on_one_layer_in_six() -> None:
    """50 sliding layers of 16 KV heads x 256 and 10 global layers of 4 KV heads x 512
    (attention_k_eq_v still caches K and V: gemma4.py loads k_proj into both slots)."""
    arch = lookup_architecture("google/gemma-4-31B-it")
    assert arch.sliding_window_layers == 50 and arch.sliding_window == 1024
    per_token = 50 * 2 * 16 * 256 * 2 + 10 * 2 * 4 * 512 * 2
    assert kv_bytes_per_token(arch, tp=1, layers=60, kv_dtype_bytes=2) == per_token


def test_qwen35_family_reads_its_hybrid_and_moe_geometry() -> None:
    big = lookup_architecture("Qwen/Qwen3.5-397B-A17B")
    assert big.linear_kind is LinearKind.GATED_DELTA_NET
    assert (big.linear_layers, big.full_attention_layers) == (45, 15)
    assert (big.num_experts, big.num_experts_per_tok, big.num_mtp_layers) == (512, 10, 1)
    # GDN state: conv (2 x 16 x 128 + 64 x 128) x 3 x 2 + 64 x 128 x 128 x 4 (float32)
    gdn = (2 * 16 * 128 + 64 * 128) * 3 * 2 + 64 * 128 * 128 * 4
    assert state_page_bytes(big, tp=1, model_dtype="bfloat16") == gdn
    params = weights_bytes(big, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None) / 2
    assert 396e9 < params < 398e9  # the published 397 B, vision tower included
    dense = lookup_architecture("Qwen/Qwen3.5-27B")
    assert (dense.max_position_embeddings, dense.num_mtp_layers) == (262144, 1)
    text = {
        "num_hidden_layers",
        "hidden_size",
        "intermediate_size",
        "num_key_value_heads",
        "head_dim",
        "linear_layers",
        "linear_num_key_heads",
        "linear_num_value_heads",
        "vocab_size",
    }
    assert dense.model_dump(include=text) == (
        lookup_architecture("Qwen/Qwen3.6-27B").model_dump(include=text)
    )
    for model in ("Qwen/Qwen3.5-27B-FP8", "Qwen/Qwen3.5-35B-A3B-FP8", "Qwen/Qwen3.5-397B-A17B-FP8"):
        quant = lookup_architecture(model).quantization
        assert quant is not None and quant.method is QuantMethod.FP8, model


@pytest.mark.parametrize(
    ("base", "instruct"),
    [
        ("Qwen/Qwen3.5-35B-A3B-Base", "Qwen/Qwen3.5-35B-A3B"),
        ("Qwen/Qwen3.5-4B-Base", "Qwen/Qwen3.5-4B"),
        ("nvidia/NVIDIA-Nemotron-Nano-9B-v2-Base", "nvidia/NVIDIA-Nemotron-Nano-9B-v2"),
    ],
)
def test_a_sourced_base_checkpoint_plans_as_its_post_trained_sibling(
    base: str, instruct: str
) -> None:
    """Qwen and NVIDIA name the pretrained checkpoint `-Base` and the post-trained one bare; the
    `-Base` entries state (with their source) that the config is the sibling's."""
    a, b = lookup_architecture(base), lookup_architecture(instruct)
    assert a.model_dump(exclude={"name", "source"}) == b.model_dump(exclude={"name", "source"})
    assert a.source != b.source and "huggingface.co/" + base in a.source


def test_magistral_small_is_the_mistral_small_decoder_with_vision_only_from_2509() -> None:
    text = lookup_architecture("mistralai/Magistral-Small-2507")
    assert text.registry_names == ("MistralForCausalLM",) and text.vision_params == 0
    assert (text.num_hidden_layers, text.hidden_size, text.num_key_value_heads) == (40, 5120, 8)
    vision = lookup_architecture("mistralai/Magistral-Small-2509")
    assert vision.registry_names == ("Mistral3ForConditionalGeneration",)
    assert vision.vision_params > 0
