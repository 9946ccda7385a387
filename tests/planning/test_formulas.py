"""Every formula of the memory model against design/domain.md's worked examples and the logs."""

import pytest

from vllm_operator.catalog.architectures import Quantization, QuantMethod, lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.errors import PlanningInputError
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    GIB,
    EngineArgs,
    estimate_memory,
    kv_bytes_per_token,
    weights_bytes,
)

KIB = 1024
LLAMA8 = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")
LLAMA70 = lookup_architecture("meta-llama/Llama-3.1-70B")
DSV3 = lookup_architecture("deepseek-ai/DeepSeek-V3")
H100 = gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3"))


@pytest.mark.parametrize(("tp", "kib"), [(1, 128), (2, 64), (4, 32), (8, 16)])
def test_llama_3_1_8b_kv_per_token(tp: int, kib: int) -> None:
    """DM §2: 128 KiB/token in bf16, 64 at TP2."""
    assert kv_bytes_per_token(LLAMA8, tp=tp, layers=32, kv_dtype_bytes=2) == kib * KIB


@pytest.mark.parametrize(("tp", "kib"), [(1, 320), (4, 80), (8, 40), (16, 40), (32, 40)])
def test_llama_3_70b_kv_per_token_stops_shrinking_past_tp8(tp: int, kib: int) -> None:
    """DM §2: 320 KiB, 80 at TP4, no smaller past TP8 (KV heads are replicated)."""
    assert kv_bytes_per_token(LLAMA70, tp=tp, layers=80, kv_dtype_bytes=2) == kib * KIB


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_deepseek_v3_mla_latent_is_68_6_kib_on_every_rank(tp: int) -> None:
    """DM §2: 61 layers x 576 values x 2 B, not divided by TP."""
    value = kv_bytes_per_token(DSV3, tp=tp, layers=61, kv_dtype_bytes=2)
    assert value == 61 * 576 * 2
    assert value / KIB == pytest.approx(68.6, abs=0.05)


def test_fp8_kv_cache_halves_the_bytes() -> None:
    assert kv_bytes_per_token(LLAMA8, tp=1, layers=32, kv_dtype_bytes=1) == 64 * KIB


def test_llama_8b_weights_match_the_log() -> None:
    """DM §1: Llama-3.1-8B bf16 14.99 GiB."""
    w = weights_bytes(LLAMA8, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None) / GIB
    assert w == pytest.approx(14.99, rel=0.005)


def test_weights_split_by_tp_and_pp() -> None:
    full = weights_bytes(LLAMA8, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None)
    tp2 = weights_bytes(LLAMA8, tp=2, pp=1, stage=0, dtype="bfloat16", quant=None)
    assert tp2 == pytest.approx(full / 2, rel=0.001)
    stage0 = weights_bytes(LLAMA8, tp=1, pp=2, stage=0, dtype="bfloat16", quant=None) / GIB
    assert stage0 == pytest.approx(7.51, rel=0.01)  # log: Worker_PP0 7.51 GiB


def test_tied_embeddings_are_counted_once() -> None:
    arch = lookup_architecture("meta-llama/Llama-3.2-3B-Instruct")
    untied = arch.model_copy(update={"tie_word_embeddings": False})
    diff = weights_bytes(untied, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None) - weights_bytes(
        arch, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None
    )
    assert diff == arch.vocab_size * arch.hidden_size * 2


def test_awq_qwen_7b_weights_near_the_log() -> None:
    """DM §1: Qwen2.5-7B-AWQ 5.3 GiB (embeddings and lm_head stay fp16)."""
    arch = lookup_architecture("Qwen/Qwen2.5-7B-Instruct-AWQ")
    w = weights_bytes(arch, tp=1, pp=1, stage=0, dtype="float16", quant=arch.quantization) / GIB
    assert w == pytest.approx(5.3, rel=0.03)


def test_bnb_4bit_llama_8b_near_the_log() -> None:
    """DM §1: 8B bnb-4bit 5.6 GiB."""
    q = Quantization(method=QuantMethod.BITSANDBYTES, bits=4)
    w = weights_bytes(LLAMA8, tp=1, pp=1, stage=0, dtype="float16", quant=q) / GIB
    assert w == pytest.approx(5.6, rel=0.02)


def test_fp8_70b_at_tp4_matches_the_log() -> None:
    arch = lookup_architecture("RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic")
    w = weights_bytes(arch, tp=4, pp=1, stage=0, dtype="bfloat16", quant=arch.quantization) / GIB
    assert w == pytest.approx(16.96, rel=0.01)


def test_moe_experts_only_quantisation_keeps_attention_in_bf16() -> None:
    arch = lookup_architecture("openai/gpt-oss-20b")
    quantised = weights_bytes(arch, tp=1, pp=1, stage=0, dtype="bfloat16", quant=arch.quantization)
    plain = weights_bytes(arch, tp=1, pp=1, stage=0, dtype="bfloat16", quant=None)
    assert 0.25 < quantised / plain < 0.45  # experts ~90 % of params at 4.25 bits


def test_budget_equation_holds_and_reproduces_a_v0_19_log() -> None:
    """llm-d v0.19.0: 75.23 - 17.12 = 58.11 GiB KV for Llama-3.1-8B at util 0.95."""
    est = estimate_memory(
        LLAMA8,
        H100,
        EngineArgs(gpu_memory_utilization=0.95, max_model_len=8192, vllm_version="0.19.0"),
    )
    assert est.budget_gib == pytest.approx(75.23, abs=0.01)
    assert not est.cuda_graph_subtracted
    assert est.kv_cache_gib == pytest.approx(
        est.budget_gib - est.weights_gib - est.activation_peak_gib - est.non_torch_gib, abs=1e-3
    )
    assert est.kv_cache_gib == pytest.approx(58.11, rel=0.01)
    assert est.num_gpu_blocks * 16 * 128 * KIB <= est.kv_cache_gib * GIB
    assert est.kv_cache_tokens == est.num_gpu_blocks * 16


def test_cuda_graphs_are_subtracted_from_0_20() -> None:
    old = estimate_memory(
        LLAMA8,
        H100,
        EngineArgs(gpu_memory_utilization=0.9, max_model_len=8192, vllm_version="0.19.0"),
    )
    new = estimate_memory(
        LLAMA8,
        H100,
        EngineArgs(gpu_memory_utilization=0.9, max_model_len=8192, vllm_version="0.20.0"),
    )
    assert not old.cuda_graph_subtracted
    assert new.cuda_graph_subtracted and new.kv_cache_gib == pytest.approx(
        new.budget_gib
        - new.weights_gib
        - new.activation_peak_gib
        - new.non_torch_gib
        - new.cuda_graph_gib,
        abs=1e-3,
    )
    eager = estimate_memory(
        LLAMA8,
        H100,
        EngineArgs(
            gpu_memory_utilization=0.9,
            max_model_len=8192,
            vllm_version="0.20.0",
            enforce_eager=True,
        ),
    )
    assert eager.cuda_graph_gib == 0 and eager.kv_cache_gib > new.kv_cache_gib


def test_default_utilisation_follows_the_version() -> None:
    assert (
        estimate_memory(LLAMA8, H100, EngineArgs(vllm_version="0.19.0")).args.gpu_memory_utilization
        == 0.90
    )
    assert (
        estimate_memory(LLAMA8, H100, EngineArgs(vllm_version="0.20.0")).args.gpu_memory_utilization
        == 0.92
    )


def test_smaller_profile_batch_frees_kv_memory() -> None:
    big = estimate_memory(LLAMA8, H100, EngineArgs(max_num_batched_tokens=16384, max_num_seqs=16))
    small = estimate_memory(LLAMA8, H100, EngineArgs(max_num_batched_tokens=2048, max_num_seqs=16))
    assert small.activation_peak_gib < big.activation_peak_gib
    assert small.kv_cache_gib > big.kv_cache_gib


def test_v0_without_chunked_prefill_profiles_max_model_len() -> None:
    est = estimate_memory(LLAMA8, H100, EngineArgs(max_model_len=20000, vllm_version="0.6.4.post1"))
    assert est.args.max_num_batched_tokens == 20000 and not est.args.enable_chunked_prefill
    assert est.activation_peak_gib == pytest.approx(2.07, rel=0.05)  # vllm#10517: 17.06 - 14.99


def test_non_torch_grows_with_tp() -> None:
    one = estimate_memory(LLAMA70, H100, EngineArgs(tensor_parallel_size=4, vllm_version="0.19.0"))
    assert one.non_torch_gib > 1.5  # 2.07-2.21 GiB in the v0.19 TP logs
    single = estimate_memory(LLAMA8, H100, EngineArgs(vllm_version="0.19.0"))
    assert single.non_torch_gib < 0.5


def test_mla_block_size_is_forced_on_hopper() -> None:
    h200 = gpu_memory(lookup_gpu("NVIDIA-H200"))
    est = estimate_memory(DSV3, h200, EngineArgs(tensor_parallel_size=8, max_model_len=8192))
    assert est.args.block_size == 64
    assert est.kv_bytes_per_token == 61 * 576 * 2


def test_pipeline_parallel_takes_the_tightest_stage() -> None:
    est = estimate_memory(LLAMA8, H100, EngineArgs(pipeline_parallel_size=2, vllm_version="0.19.0"))
    assert est.kv_bytes_per_token == 64 * KIB


@pytest.mark.parametrize(
    ("gpu", "args", "field"),
    [
        ("NVIDIA-L4", EngineArgs(tensor_parallel_size=3), "tensor_parallel_size"),
        ("Tesla-T4", EngineArgs(dtype="bfloat16"), "dtype"),
        ("NVIDIA-A100-SXM4-40GB", EngineArgs(kv_cache_dtype="fp8"), "kv_cache_dtype"),
        ("NVIDIA-L4", EngineArgs(max_model_len=200_000), "max_model_len"),
        ("NVIDIA-L4", EngineArgs(quantization="awq"), "quantization"),
        ("NVIDIA-L4", EngineArgs(block_size=48, vllm_version="0.11.0"), "block_size"),
        ("Tesla-T4", EngineArgs(vllm_version="0.8.5"), "dtype"),
    ],
)
def test_inputs_vllm_rejects_are_usage_errors(gpu: str, args: EngineArgs, field: str) -> None:
    with pytest.raises(PlanningInputError) as info:
        estimate_memory(LLAMA8, gpu_memory(lookup_gpu(gpu)), args)
    assert info.value.field == field


def test_bf16_checkpoint_falls_back_to_fp16_from_0_9() -> None:
    est = estimate_memory(
        LLAMA8, gpu_memory(lookup_gpu("Tesla-T4")), EngineArgs(vllm_version="0.9.0")
    )
    assert est.args.dtype == "float16"
    assert any("float16" in r for r in est.reasons)


def test_measured_free_memory_below_the_request_stops_v1_startup() -> None:
    gpu = gpu_memory(lookup_gpu("NVIDIA-L4"), measured_free_mib=10_000)
    est = estimate_memory(LLAMA8, gpu, EngineArgs(max_model_len=4096))
    assert est.budget_source.startswith("measured")
    assert any("Free memory on device" in r for r in est.reasons)


def test_not_fitting_context_is_reported() -> None:
    est = estimate_memory(
        LLAMA8, gpu_memory(lookup_gpu("NVIDIA-L4")), EngineArgs(max_model_len=131072)
    )
    assert not est.fits
    assert any("larger than" in r for r in est.reasons)
