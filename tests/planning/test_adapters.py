"""Speculative decoding (MTP / EAGLE draft weights and KV) and LoRA slot buffers, read from the
spec's extraArgs, in the memory plan."""

import pytest

from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.adapters import Adapters, adapters_from_extra_args
from vllm_operator.planning.errors import PlanningInputError
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.memory import (
    GIB,
    EngineArgs,
    decoder_layer_bytes,
    estimate_memory,
)

H100 = gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3"))


def test_extra_args_give_the_speculative_method_and_lora_slots() -> None:
    adapters = adapters_from_extra_args(
        {
            "--speculative-config": '{"method": "mtp", "num_speculative_tokens": 2}',
            "--enable-lora": "",
            "--max-loras": "4",
            "--max-lora-rank": "64",
        }
    )
    assert adapters == Adapters(
        speculative_method="mtp", num_speculative_tokens=2, max_loras=4, max_lora_rank=64
    )
    # LoRA off unless enabled; vLLM's default of one slot when enabled without --max-loras
    assert adapters_from_extra_args({"--max-loras": "4"}).max_loras == 0
    assert adapters_from_extra_args({"--enable-lora": ""}).max_loras == 1
    with pytest.raises(PlanningInputError, match="not JSON"):
        adapters_from_extra_args({"--speculative-config": "{method: mtp"})


def test_plan_intent_reads_adapters_from_the_spec() -> None:
    spec = VLLMServiceSpec.model_validate(
        {
            "model": {"name": "Qwen/Qwen3-8B"},
            "workload": {"p99ContextTokens": 4096, "concurrency": 8},
            "placement": {"gpuTypes": ["NVIDIA-L4"]},
            "vllm": {
                "version": "0.33.0",
                "extraArgs": {"--enable-lora": "", "--max-lora-rank": "32"},
            },
        }
    )
    intent = PlanIntent.from_spec(spec)
    assert (intent.adapters.max_loras, intent.adapters.max_lora_rank) == (1, 32)


def test_lora_slots_cost_rank_times_every_projection() -> None:
    """Qwen3-8B (36 layers, hidden 4096, 32 x 128 q, 8 x 128 kv, MLP 12288), TP 1, 4 slots of
    rank 64 in bf16, by hand from create_lora_weights: qkv lora_a 3 x r x h + lora_b (q + 2 kv)
    x r; o r x q_out + h x r; gate_up 2 x r x h + 2 x I x r; down r x I + h x r."""
    arch = lookup_architecture("Qwen/Qwen3-8B")
    h, q, kv, inter, r = 4096, 32 * 128, 2 * 8 * 128, 12288, 64
    per_layer = 3 * r * h + (q + kv) * r + r * q + h * r + 2 * r * h + 2 * inter * r
    per_layer += r * inter + h * r
    by_hand = 36 * per_layer * 4 * 2 / GIB
    base = estimate_memory(arch, H100, EngineArgs(max_model_len=8192))
    lora = estimate_memory(
        arch, H100, EngineArgs(max_model_len=8192, max_loras=4, max_lora_rank=64)
    )
    # reported under its own name, never as "weights" (#26)
    assert lora.lora_gib == pytest.approx(by_hand, abs=1e-3)
    assert lora.weights_gib == base.weights_gib and base.lora_gib == 0
    assert lora.kv_cache_gib == pytest.approx(base.kv_cache_gib - by_hand, abs=2e-3)


def test_mtp_adds_the_checkpoints_prediction_layer_and_its_kv() -> None:
    """MTP loads num_nextn_predict_layers decoder layers of the target's shape (+ eh_proj
    2h x h) and each holds KV like a target layer: DeepSeek-V3's one MTP layer adds one MoE
    layer of weights and one layer's latent per token (DeepSeek-V3 config.json:
    num_nextn_predict_layers 1; the catalog entry does not carry it, so it is set here)."""
    arch = lookup_architecture("deepseek-ai/DeepSeek-V3").model_copy(update={"num_mtp_layers": 1})
    args = EngineArgs(tensor_parallel_size=8, max_model_len=8192, kv_cache_dtype="fp8")
    base = estimate_memory(arch, gpu_memory(lookup_gpu("NVIDIA-H200")), args)
    spec = estimate_memory(
        arch,
        gpu_memory(lookup_gpu("NVIDIA-H200")),
        args.model_copy(update={"speculative_method": "mtp", "num_speculative_tokens": 1}),
    )
    layer = decoder_layer_bytes(arch, 60, tp=8, dtype="bfloat16", quant=arch.quantization)
    extra = (layer + (2 * 7168 * 7168 / 8 + 3 * 7168) * 2) / GIB
    assert spec.draft_weights_gib == pytest.approx(extra, abs=1e-3)
    assert spec.weights_gib == base.weights_gib
    assert spec.kv_bytes_per_token - base.kv_bytes_per_token == 512 + 64  # one fp8 latent
    assert spec.draft_kv_bytes_per_token == 512 + 64


def test_ngram_speculation_holds_no_weights_and_unknown_drafts_are_named() -> None:
    arch = lookup_architecture("Qwen/Qwen3-8B")
    base = estimate_memory(arch, H100, EngineArgs(max_model_len=8192))
    ngram = estimate_memory(
        arch,
        H100,
        EngineArgs(max_model_len=8192, speculative_method="ngram", num_speculative_tokens=4),
    )
    draft = estimate_memory(
        arch,
        H100,
        EngineArgs(max_model_len=8192, speculative_method="draft_model", num_speculative_tokens=4),
    )
    assert ngram.weights_gib == base.weights_gib and ngram.draft_weights_gib == 0
    assert any("'draft_model' is not in the estimate" in r for r in draft.reasons)


def test_hybrid_speculation_pins_a_state_block_per_draft_token() -> None:
    """MambaSpec.num_speculative_blocks: each speculative token keeps one more state block per
    sequence, and the conv state grows by it (mamba_utils.py num_spec)."""
    arch = lookup_architecture("Qwen/Qwen3.6-35B-A3B")
    args = EngineArgs(max_model_len=32768, quantization="fp8")
    base = estimate_memory(arch, H100, args)
    spec = estimate_memory(
        arch,
        H100,
        args.model_copy(update={"speculative_method": "mtp", "num_speculative_tokens": 2}),
    )
    assert spec.args.block_size >= base.args.block_size
    assert spec.kv_bytes_per_token == base.kv_bytes_per_token + 2 * 2 * 256 * 2
    assert spec.max_concurrency < base.max_concurrency


def test_lora_and_draft_are_in_the_plan_under_their_own_names_with_the_knobs_that_free_them() -> (
    None
):
    """#26: the LoRA slot buffers and the draft are plan terms of their own, and an intent that
    does not fit because of them is offered the knob that frees them."""
    from vllm_operator.planning.alternatives import AlternativeKind, Infeasible
    from vllm_operator.planning.plan import PoolPlan, plan_pool

    spec = VLLMServiceSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "workload": {"p99ContextTokens": 4096, "concurrency": 6},
            "placement": {"gpuTypes": ["NVIDIA-L4"], "maxGPUsPerReplica": 1},
            "vllm": {
                "version": "0.33.0",
                "extraArgs": {"--enable-lora": "", "--max-loras": "8", "--max-lora-rank": "64"},
            },
        }
    )
    arch = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")
    result = plan_pool(PlanIntent.from_spec(spec), lookup_gpu("NVIDIA-L4"), arch)
    assert isinstance(result, Infeasible)
    kinds = {a.kind: a for a in result.alternatives}
    assert "--max-loras 1" in kinds[AlternativeKind.FEWER_LORA_SLOTS].description
    fewer = spec.model_copy(
        update={
            "vllm": spec.vllm.model_copy(
                update={"extra_args": {"--enable-lora": "", "--max-loras": "1"}}
            )
        }
    )
    planned = plan_pool(PlanIntent.from_spec(fewer), lookup_gpu("NVIDIA-L4"), arch)
    assert isinstance(planned, PoolPlan)
    assert planned.memory.lora_gib > 0
    status = planned.to_status().memory
    assert status is not None
    assert status.lora_gib == round(planned.memory.lora_gib, 2)
    assert status.draft_weights_gib is None
