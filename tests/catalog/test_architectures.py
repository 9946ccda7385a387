"""Architectures from the catalog, from config.json and from the inline override."""

import json
from pathlib import Path

import pytest

from vllm_operator.api.spec import Architecture as ArchitectureOverride
from vllm_operator.catalog.architectures import (
    QuantMethod,
    UnknownModelError,
    architecture_from_hf_config,
    architecture_from_override,
    catalog_names,
    load_config_file,
    lookup_architecture,
)

FAMILIES = [
    "meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-2-70b-hf",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.2-3B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct-AWQ",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "google/gemma-2-9b-it",
    "google/gemma-3-27b-it",
    "microsoft/Phi-3-mini-4k-instruct",
    "microsoft/phi-4",
    "deepseek-ai/DeepSeek-V2-Lite",
    "deepseek-ai/DeepSeek-V3",
    "moonshotai/Kimi-K2-Instruct",
    "openai/gpt-oss-20b",
    "openai/gpt-oss-120b",
]


@pytest.mark.parametrize("name", FAMILIES)
def test_popular_families_are_complete_and_sourced(name: str) -> None:
    arch = lookup_architecture(name)
    assert arch.source
    assert arch.num_hidden_layers > 0 and arch.vocab_size > 0


def test_every_extra_entry_names_its_source() -> None:
    data = json.loads(
        (
            Path(__file__).resolve().parents[2]
            / "operator/vllm_operator/catalog/data/model-architectures-extra.json"
        ).read_text()
    )
    for key, entry in data.items():
        if not key.startswith("_"):
            assert entry.get("source"), key


def test_families_are_classified() -> None:
    assert lookup_architecture("meta-llama/Llama-2-7b-hf").kind == "dense"
    assert lookup_architecture("meta-llama/Llama-3.1-8B-Instruct").kind == "GQA"
    assert lookup_architecture("mistralai/Mixtral-8x7B-Instruct-v0.1").kind == "MoE"
    v3 = lookup_architecture("deepseek-ai/DeepSeek-V3")
    assert v3.kind == "MLA" and v3.num_key_value_heads == 1
    assert v3.quantization is not None and v3.quantization.method is QuantMethod.FP8


def test_sliding_window_layers_are_counted() -> None:
    assert lookup_architecture("google/gemma-3-27b-it").sliding_window_layers == 52  # 62 - 62//6
    assert lookup_architecture("google/gemma-2-9b-it").sliding_window_layers == 21
    assert lookup_architecture("meta-llama/Llama-3.1-8B-Instruct").sliding_window_layers == 0


def test_lookup_is_case_insensitive_and_follows_aliases() -> None:
    assert lookup_architecture("META-LLAMA/LLAMA-3.1-8B-INSTRUCT").num_hidden_layers == 32
    alias = lookup_architecture("unsloth/meta-llama-3.1-8b-instruct-unsloth-bnb-4bit")
    assert alias.hidden_size == 4096


def test_unknown_and_incomplete_models_say_how_to_supply_an_architecture() -> None:
    with pytest.raises(UnknownModelError, match="--model-config PATH"):
        lookup_architecture("nobody/nothing")
    with pytest.raises(UnknownModelError, match="incomplete"):
        lookup_architecture("MiniMaxAI/MiniMax-M2")
    assert "MiniMaxAI/MiniMax-M2" in catalog_names()


def test_hf_config_with_text_config_quantization_and_layer_types(tmp_path: Path) -> None:
    cfg = {
        "model_type": "gemma3",
        "_name_or_path": "org/model",
        "text_config": {
            "num_hidden_layers": 6,
            "hidden_size": 1024,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "head_dim": 128,
            "intermediate_size": 4096,
            "vocab_size": 32000,
            "sliding_window": 512,
            "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
            "max_position_embeddings": 8192,
        },
        "quantization_config": {
            "quant_method": "awq",
            "bits": 4,
            "group_size": 128,
            "zero_point": True,
        },
        "torch_dtype": "float16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    arch = load_config_file(path)
    assert arch.name == "org/model"
    assert arch.sliding_window_layers == 5 and arch.sliding_window == 512
    assert arch.tie_word_embeddings  # Gemma ties by default
    assert arch.quantization is not None and arch.quantization.method is QuantMethod.AWQ
    assert arch.quantization.bytes_per_param() == pytest.approx(0.5 + 2.5 / 128)
    assert arch.torch_dtype == "float16"


def test_hf_config_mla_and_moe_fields() -> None:
    cfg = {
        "model_type": "deepseek_v3",
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "intermediate_size": 1024,
        "moe_intermediate_size": 256,
        "n_routed_experts": 16,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 64,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32,
        "v_head_dim": 32,
        "q_lora_rank": None,
        "vocab_size": 1000,
    }
    arch = architecture_from_hf_config(cfg, "x/y", "test")
    assert arch.is_mla and arch.is_moe and arch.num_experts == 16
    assert arch.first_k_dense_replace == 1 and arch.num_shared_experts == 1


def test_config_missing_dimensions_is_rejected_with_the_keys() -> None:
    with pytest.raises(ValueError, match="hidden_size"):
        architecture_from_hf_config({"num_hidden_layers": 2}, "x/y", "test")


def test_bad_config_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read model config"):
        load_config_file(path)


def test_inline_override_becomes_an_architecture() -> None:
    override = ArchitectureOverride(
        num_hidden_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=14336,
        vocab_size=128256,
        max_position_embeddings=131072,
    )
    arch = architecture_from_override(override, "private/model")
    assert arch.head_dim == 128 and arch.num_key_value_heads == 8
    assert arch.source.startswith("spec.model.architecture")
    mla = architecture_from_override(
        ArchitectureOverride(
            num_hidden_layers=61,
            hidden_size=7168,
            num_attention_heads=128,
            vocab_size=129280,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            intermediate_size=18432,
        ),
        "private/mla",
    )
    assert mla.is_mla and mla.num_key_value_heads == 1
