"""The sm90/sm10x TP > 1 non-torch term holds at every release, not from 0.12 only.

Logged figures (bench/data/vllm-startup-logs.csv):
- row 77: Qwen3-Next-80B-A3B-Instruct at TP2 on two H200s, vLLM 0.10.2 in a pip venv without
  FlashInfer, serve defaults; its ledger "Free memory on device (139.21/139.81 GiB) ... (0.9,
  125.83 GiB). Actual usage is 74.28 GiB for weight, 5.58 GiB for peak activation, 1.38 GiB for
  non-torch memory" and "Available KV cache memory: 44.59 GiB" (a public log file, search-tool
  file id 7292846353).
- rows 8/9: moonshotai/Kimi-K2-Thinking at TP8 on eight H200s, vllm-project/recipes
  moonshotai/Kimi-K2-Think.md (logs 11-06-2025, a 0.11.1 pre-release): "Available KV cache
  memory: 46.80 GiB".
- rows 43/44: Qwen2-7B-Instruct at TP1 and TP2 on A100 80GB, vLLM 0.10.1.1 (dennislee22/
  vLLM-benchmarking): 19.81 GiB budgets, 14.2488 / 7.1217 GiB of weights, KV 5.01 / 12.02 GiB, so
  0.55 and 0.67 GiB for non-torch memory plus activation: Ampere carries no such term.
"""

import pytest

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    NON_TORCH_TP_GIB,
    NON_TORCH_TP_GIB_SM90,
    EngineArgs,
    estimate_memory,
)

H100 = gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3"))
H200 = gpu_memory(lookup_gpu("NVIDIA-H200"))
A100 = gpu_memory(lookup_gpu("NVIDIA-A100-SXM4-80GB"))
QWEN3_32B = lookup_architecture("Qwen/Qwen3-32B")


@pytest.mark.parametrize("version", ["0.8.5", "0.10.2", "0.11.1", "0.16.0", "0.19.0", "0.33.0"])
def test_every_release_adds_the_nvlink_term_on_hopper(version: str) -> None:
    def non_torch(tp: int) -> float:
        args = EngineArgs(vllm_version=version, tensor_parallel_size=tp, max_model_len=8192)
        return estimate_memory(QWEN3_32B, H100, args).non_torch_gib

    assert non_torch(2) - non_torch(1) == pytest.approx(NON_TORCH_TP_GIB_SM90)


def test_ampere_keeps_the_smaller_term() -> None:
    qwen2 = lookup_architecture("Qwen/Qwen2-7B-Instruct")

    def consumed_above_weights(tp: int) -> float:
        args = EngineArgs(
            vllm_version="0.10.1.1",
            tensor_parallel_size=tp,
            max_model_len=16384,
            gpu_memory_utilization=0.25,
        )
        est = estimate_memory(qwen2, A100, args)
        assert est.kv_cache_gib <= (5.01, 12.02)[tp - 1]  # rows 43/44, on the safe side
        return est.non_torch_gib

    assert consumed_above_weights(2) - consumed_above_weights(1) == pytest.approx(NON_TORCH_TP_GIB)


def test_row_77_at_0_10_2_carries_the_term() -> None:
    est = estimate_memory(
        lookup_architecture("Qwen/Qwen3-Next-80B-A3B-Instruct"),
        H200,
        EngineArgs(vllm_version="0.10.2", tensor_parallel_size=2, optional_kernels=False),
    )
    assert est.non_torch_gib >= 1.38  # the ledger's figure, covered
    assert est.kv_cache_gib <= 44.59
    assert est.kv_cache_gib == pytest.approx(44.59, rel=0.03)


def test_kimi_k2_thinking_at_0_11_1_is_reproduced_on_the_safe_side() -> None:
    """+2.9 % (1.37 GiB over) while the term started at 0.12."""
    est = estimate_memory(
        lookup_architecture("moonshotai/Kimi-K2-Thinking"),
        H200,
        EngineArgs(vllm_version="0.11.1", tensor_parallel_size=8),
    )
    assert est.kv_cache_gib <= 46.80
    assert est.kv_cache_gib == pytest.approx(46.80, rel=0.01)
