"""The 2026 models platform teams deploy resolve offline from the built-in catalog (#28), each
answering `vllm-operator estimate --model ID --gpu LABEL`; the instruct/base rule."""

from typing import Any

import pytest
from click.testing import CliRunner

from vllm_operator.catalog.architectures import (
    QuantMethod,
    lookup_architecture,
    variant_base,
)
from vllm_operator.cli.main import cli

# (model, GPU, estimate arguments): a configuration that starts (estimate exits 0).
ANSWERED = [
    ("Qwen/Qwen3-235B-A22B-FP8", "NVIDIA-H100-80GB-HBM3", ["--tensor-parallel-size", "4"]),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "NVIDIA-H200", ["--tensor-parallel-size", "8"]),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "NVIDIA-H200", ["--tensor-parallel-size", "4"]),
    ("Qwen/Qwen3-32B-AWQ", "NVIDIA-L40S", []),
    ("Qwen/Qwen3.6-27B", "NVIDIA-H100-80GB-HBM3", []),
    ("Qwen/Qwen3.6-27B-FP8", "NVIDIA-L40S", []),
    ("Qwen/Qwen3.6-35B-A3B-FP8", "NVIDIA-L40S", []),
    ("zai-org/GLM-5", "NVIDIA-H200", ["--tensor-parallel-size", "8", "--max-nodes", "2"]),
    ("zai-org/GLM-4.5", "NVIDIA-H200", ["--tensor-parallel-size", "8"]),
    ("zai-org/GLM-4.6", "NVIDIA-H200", ["--tensor-parallel-size", "8"]),
    (
        "moonshotai/Kimi-K2-Instruct-0905",
        "NVIDIA-H200",
        ["--tensor-parallel-size", "8", "--max-nodes", "2"],
    ),
    ("microsoft/Phi-4-mini-instruct", "NVIDIA-L4", []),
    ("mistralai/Devstral-Small-2505", "NVIDIA-L40S", ["--tensor-parallel-size", "2"]),
    ("mistralai/Devstral-Small-2507", "NVIDIA-H100-80GB-HBM3", []),
    ("deepseek-ai/DeepSeek-V3.1", "NVIDIA-H200", ["--tensor-parallel-size", "8"]),
    ("deepseek-ai/DeepSeek-V3.1-Terminus", "NVIDIA-B200", ["--tensor-parallel-size", "8"]),
    ("google/gemma-4-E2B-it", "NVIDIA-L4", []),
]


@pytest.mark.parametrize(("model", "gpu", "args"), ANSWERED, ids=[m for m, _, _ in ANSWERED])
def test_estimate_answers_offline(model: str, gpu: str, args: list[str]) -> None:
    result = CliRunner().invoke(
        cli, ["estimate", "--model", model, "--gpu", gpu, "--max-model-len", "8192", *args]
    )
    assert result.exit_code == 0, result.output
    assert "KV cache tokens" in result.output


def test_checkpoints_carry_their_format_over_the_base_dimensions() -> None:
    base = lookup_architecture("Qwen/Qwen3-235B-A22B")
    fp8 = lookup_architecture("Qwen/Qwen3-235B-A22B-FP8")
    assert (fp8.num_hidden_layers, fp8.num_experts, fp8.num_key_value_heads) == (94, 128, 4)
    assert fp8.quantization is not None and fp8.quantization.method is QuantMethod.FP8
    assert base.quantization is None
    assert lookup_architecture("Qwen/Qwen3-235B-A22B-Instruct-2507").max_position_embeddings == (
        262144
    )
    awq = lookup_architecture("Qwen/Qwen3-32B-AWQ")
    assert awq.quantization is not None and awq.quantization.method is QuantMethod.AWQ
    assert (awq.quantization.bits, awq.quantization.group_size) == (4, 128)
    assert awq.num_hidden_layers == lookup_architecture("Qwen/Qwen3-32B").num_hidden_layers


def test_w4a4_fp4_checkpoints_quantise_every_linear_at_their_block_format() -> None:
    """llm-compressor's W4A4 MXFP4 is not gpt-oss's experts-only MXFP4: every Linear of the dense
    model is FP4. The stored bytes of the linears match the checkpoint report of the repo that
    benchmarked them (github.com/cezarc1/decodebench data/runs/checkpoint_report.json:
    mx_quantized_bytes 16,577,986,560, nv_quantized_bytes 17,553,164,032)."""
    linear_params = 64 * (2 * 5120 * 8192 + 2 * 5120 * 1024 + 3 * 5120 * 25600)
    for model, method, stored in (
        ("ggamecrazy/Qwen3-32B-MXFP4-W4A4", QuantMethod.MXFP4, 16_577_986_560),
        ("ggamecrazy/Qwen3-32B-NVFP4-W4A4", QuantMethod.NVFP4, 17_553_164_032),
    ):
        quant = lookup_architecture(model).quantization
        assert quant is not None and quant.method is method, model
        assert not quant.experts_only, model
        assert linear_params * quant.bytes_per_param() == pytest.approx(stored, rel=1e-5), model
    gpt_oss = lookup_architecture("openai/gpt-oss-20b").quantization
    assert gpt_oss is not None and gpt_oss.experts_only


def test_families_are_read_as_their_kind() -> None:
    glm5 = lookup_architecture("zai-org/GLM-5")
    assert glm5.kind == "MLA" and glm5.is_moe
    assert (glm5.kv_lora_rank, glm5.qk_rope_head_dim, glm5.index_head_dim) == (512, 64, 128)
    hybrid = lookup_architecture("Qwen/Qwen3.6-27B")
    assert hybrid.kind == "hybrid" and hybrid.full_attention_layers == 16
    glm45 = lookup_architecture("zai-org/GLM-4.5")
    assert glm45.kind == "MoE" and glm45.first_k_dense_replace == 3
    assert lookup_architecture("moonshotai/Kimi-K2-Instruct-0905").max_position_embeddings == 262144


def test_the_it_variant_of_gemma_4_e2b_is_its_base_by_the_stated_rule() -> None:
    variant = lookup_architecture("google/gemma-4-E2B-it")
    base = lookup_architecture("google/gemma-4-E2B")
    assert variant.name == "google/gemma-4-E2B-it"
    assert variant.source.startswith("same config.json as google/gemma-4-E2B (instruct/base rule)")
    assert variant.model_dump(exclude={"name", "source"}) == base.model_dump(
        exclude={"name", "source"}
    )
    devstral = lookup_architecture("mistralai/Devstral-Small-2507")
    assert devstral.vision_params == 0 and devstral.num_hidden_layers == 40


def test_every_added_entry_names_its_source() -> None:
    for model, _, _ in ANSWERED:
        assert "huggingface.co" in lookup_architecture(model).source or "code index id" in (
            lookup_architecture(model).source
        ), model


# ---------------------------------------------------------------------- the instruct/base rule

CATALOG: dict[str, dict[str, Any]] = {
    "org/Model-8B": {"same_config_variants": ["-Instruct", "-it"], "source": "card: same config"},
    "org/Other-8B": {"source": "no statement"},
}


def test_a_variant_resolves_to_its_base_only_when_the_base_states_the_same_config() -> None:
    assert variant_base("org/Model-8B-Instruct", CATALOG) == "org/Model-8B"
    assert variant_base("org/model-8b-it", CATALOG) == "org/Model-8B"
    assert variant_base("org/Model-8B-Chat", CATALOG) is None  # not stated for -Chat
    assert variant_base("org/Other-8B-Instruct", CATALOG) is None  # no statement: unknown
    assert variant_base("org/Unknown-Instruct", CATALOG) is None
    assert variant_base("-Instruct", CATALOG) is None


def test_a_variant_whose_config_differs_is_not_aliased() -> None:
    # The shared catalog lists unsloth/Qwen3-8B-FP8 among Qwen/Qwen3-8B's aliases, but its
    # config.json is an FP8 checkpoint: its own entry wins, the bf16 base is not used for it.
    base = lookup_architecture("Qwen/Qwen3-8B")
    variant = lookup_architecture("unsloth/Qwen3-8B-FP8")
    assert base.quantization is None
    assert variant.quantization is not None and variant.quantization.method is QuantMethod.FP8
    # An instruct variant with a longer context than its base is its own entry, not the base.
    instruct = lookup_architecture("Qwen/Qwen3-235B-A22B-Instruct-2507")
    assert (
        instruct.max_position_embeddings
        != lookup_architecture("Qwen/Qwen3-235B-A22B").max_position_embeddings
    )
