"""Two platform terms of the 0.20+ budget, each checked against vLLM's own rule by hand.

Sources (vLLM 0.33.0):
- `distributed/device_communicators/all_reduce_utils.py` `SYMM_MEM_ALL_REDUCE_MAX_SIZES` has keys
  "9.0", "10.0", "10.3", "10.7" only, and `symm_mem.py` `SymmMemCommunicator.__init__` disables
  itself on any other capability: sm89 and sm12x ranks carry no symmetric-memory all-reduce.
- `config/vllm.py` `_set_cudagraph_sizes`: capture sizes `[1, 2, 4] + range(8, min(c + 1, 256), 8)
  + range(256, c + 1, 16)` below the ceiling `c = min(2 x max_num_seqs, 512)`;
  `v1/worker/gpu_model_runner.py` `profile_cudagraph_memory`: estimate = first capture +
  per-graph increment x (sizes - 1).
Logged: bench row 69 (Qwen3-235B-A22B-Instruct-2507-FP8, TP4 on RTX PRO 6000 Blackwell over PCIe,
vLLM 0.27.1: non-torch 1.70 GiB), row 53 (Qwen3.8-27B-FP8, TP2 on RTX 5090, 0.27.1, max_num_seqs 2:
'CUDA graph pool memory: 0.09 GiB (actual), 0.13 GiB (estimated)').
"""

import pytest

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    GIB,
    EngineArgs,
    capture_size_share,
    capture_sizes,
    cuda_graph_gib,
    estimate_memory,
    hybrid_capture_share,
    resolve_args,
)

LLAMA_8B = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")


@pytest.mark.parametrize(
    ("ceiling", "sizes"),
    [
        # [1, 2, 4] + 8..248 step 8 (31) + 256..512 step 16 (17)
        (512, 3 + 31 + 17),
        # 2 sequences: [1, 2, 4]
        (4, 3),
        # 1 sequence: [1, 2]
        (2, 2),
        # 16 sequences: [1, 2, 4, 8, 16, 24, 32]
        (32, 7),
        # 32 sequences: [1, 2, 4] + 8..64 step 8 (8)
        (64, 11),
        # 128 sequences: [1, 2, 4] + 8..248 step 8 (31) + [256]
        (256, 35),
    ],
)
def test_capture_sizes_follow_vllms_default_grid(ceiling: int, sizes: int) -> None:
    assert capture_sizes(ceiling) == sizes


def test_the_share_of_sizes_is_never_below_the_share_of_tokens() -> None:
    """The estimate's variable part is a first capture that grows with the ceiling plus one
    increment per size; the share takes the larger of the two readings."""
    for ceiling in range(1, 513):
        assert capture_size_share(ceiling) >= ceiling / 512 - 1e-12
        assert capture_size_share(ceiling) >= capture_sizes(ceiling) / 51 - 1e-12
    assert capture_size_share(512) == 1.0


def test_graph_estimate_of_a_small_ceiling_by_hand() -> None:
    """Llama-3.1-8B at TP1, vLLM 0.33.0: full = 0.63 + 1.64e-6 x 32 x 4096 + 4.47e-8 x 32 x
    (3 x 14336) = 0.90649 GiB; floor 0.30; 6 sequences -> ceiling 12 -> sizes [1, 2, 4, 8] ->
    0.30 + 0.60649 x 4 / 51 = 0.34757 GiB (the 0.19 clamp held it at a quarter: 0.45162)."""
    gpu = gpu_memory(lookup_gpu("NVIDIA-L4"))
    args = EngineArgs(vllm_version="0.33.0", max_model_len=4096, max_num_seqs=6)
    resolved, _, _ = resolve_args(args, LLAMA_8B, gpu)
    full = 0.63 + 0.164e-5 * 32 * 4096 + 0.0447e-6 * 32 * 3 * 14336
    assert cuda_graph_gib(LLAMA_8B, resolved, 32) == pytest.approx(
        0.30 + (full - 0.30) * 4 / 51, abs=1e-9
    )
    assert cuda_graph_gib(LLAMA_8B, resolved, 32) == pytest.approx(0.34757, abs=1e-5)


def test_graph_rule_before_0_18_is_unchanged() -> None:
    """The actual-capture rule of the older eras keeps its clamp: 0.05 + 0.021 x 32 x 0.25."""
    gpu = gpu_memory(lookup_gpu("NVIDIA-L4"))
    args = EngineArgs(vllm_version="0.11.0", max_model_len=4096, max_num_seqs=6)
    resolved, _, _ = resolve_args(args, LLAMA_8B, gpu)
    assert cuda_graph_gib(LLAMA_8B, resolved, 32) == pytest.approx(0.05 + 0.021 * 32 * 0.25)


@pytest.mark.parametrize(
    ("label", "non_torch"),
    [
        ("NVIDIA-H100-80GB-HBM3", 0.30 + 1.95),  # sm90: symmetric memory
        ("NVIDIA-B200", 0.30 + 1.95),  # sm100: symmetric memory
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 0.30 + 0.45),  # sm120: none
        ("NVIDIA-GeForce-RTX-5090", 0.30 + 0.45),  # sm120: none
        ("NVIDIA-L40S", 0.30 + 0.45),  # sm89: none
    ],
)
def test_tp_non_torch_term_follows_the_symmetric_memory_capabilities(
    label: str, non_torch: float
) -> None:
    args = EngineArgs(vllm_version="0.27.1", max_model_len=4096, tensor_parallel_size=2)
    est = estimate_memory(LLAMA_8B, gpu_memory(lookup_gpu(label)), args)
    assert est.non_torch_gib == pytest.approx(non_torch)


def test_row_69_consumed_memory_matches_the_logged_ledger() -> None:
    """Row 69 logs 56.89 GiB consumed per TP4 rank (sm120, PCIe, 0.27.1) with 55.19 GiB of weights:
    the 1.70 GiB above the weights hold the persistent fused-MoE workspace, by hand 8192 x top-8 x
    (max(1536 / 4, 4096) + max(2 x 1536 / 4, 4096)) x 2 B = 1.00 GiB, so 0.70 GiB is non-torch:
    the sm12x rule gives 0.30 + 0.45 = 0.75, the sm90 rule gave 2.25 (consumed 58.36)."""
    arch = lookup_architecture("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8")
    args = EngineArgs(
        vllm_version="0.27.1",
        max_model_len=32768,
        tensor_parallel_size=4,
        max_num_seqs=32,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=8192,
    )
    gpu = gpu_memory(lookup_gpu("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"), total_gib=95.01)
    est = estimate_memory(arch, gpu, args)
    workspace = 8192 * 8 * (max(1536 / 4, 4096) + max(2 * 1536 / 4, 4096)) * 2 / GIB
    assert workspace == pytest.approx(1.0)
    assert est.non_torch_gib == pytest.approx(0.75)
    consumed = est.weights_gib + est.non_torch_gib + workspace
    assert consumed == pytest.approx(56.89, abs=0.1)


QWEN38_FP8 = lookup_architecture("Qwen/Qwen3.8-27B-FP8")


def _qwen38_graphs(max_num_seqs: int, **args: object) -> float:
    gpu = gpu_memory(lookup_gpu("NVIDIA-L40S"))
    engine = EngineArgs(
        vllm_version="0.26.0", max_model_len=131072, max_num_seqs=max_num_seqs, **args
    )
    resolved, _, _ = resolve_args(engine, QWEN38_FP8, gpu)
    return cuda_graph_gib(QWEN38_FP8, resolved, QWEN38_FP8.num_hidden_layers)


def test_a_hybrids_full_graphs_stop_at_max_num_seqs() -> None:
    """vLLM's dispatcher (v1/cudagraph_dispatcher.py ``initialize_cudagraph_keys``, 0.20-0.29)
    captures FULL decode graphs only up to (1 + speculative tokens) x max_num_seqs: 256 sequences
    give PIECEWISE=51 (largest=512) and FULL=35 (largest=256), as rows 100 and 126 log. Qwen3.8-27B
    (64 layers, hidden 5120, MLP 3 x 17408): full = 0.63 + 1.64e-6 x 64 x 5120 + 4.47e-8 x 64 x
    52224 = 1.3168 GiB; 256 sequences -> 0.30 + 1.0168 x (51 + 35) / 102 = 1.1573 GiB, still above
    the 1.11 GiB vLLM 0.26.0 estimated on an L40S (bench row 74) and the 0.75 GiB of its 0.24 FULL=35
    start on a MIG slice (row 100); 1,024 sequences keep the 51 + 51 graphs of the fit (row 96
    logs 1.06 GiB)."""
    full = 0.63 + 0.164e-5 * 64 * 5120 + 0.0447e-6 * 64 * 3 * 17408
    assert _qwen38_graphs(256) == pytest.approx(0.30 + (full - 0.30) * 86 / 102, abs=1e-9)
    assert 1.11 < _qwen38_graphs(256) < 1.16
    assert _qwen38_graphs(1024) == pytest.approx(full, abs=1e-9)
    # 16 sequences: PIECEWISE up to 32 (7 sizes), FULL up to 16 ([1, 2, 4, 8, 16]: 5)
    assert _qwen38_graphs(16) == pytest.approx(0.30 + (full - 0.30) * 12 / 102, abs=1e-9)


def test_speculative_tokens_widen_a_hybrids_full_decode_graphs() -> None:
    """With 3 MTP tokens a decode step is 4 tokens a sequence, so the FULL graphs reach 4 x
    max_num_seqs (capped by the capture ceiling): 2 sequences -> both modes [1, 2, 4], the share
    of the dense rule (bench row 53 logs 0.13 GiB at TP2; 0.36 here at TP1)."""
    with_spec = _qwen38_graphs(2, speculative_method="mtp", num_speculative_tokens=3)
    without = _qwen38_graphs(2)
    assert with_spec > without
    full = 0.63 + 0.164e-5 * 64 * 5120 + 0.0447e-6 * 64 * 3 * 17408
    assert with_spec == pytest.approx(0.30 + (full - 0.30) * 3 / 51, abs=1e-9)


def test_a_dense_models_graph_share_is_unchanged() -> None:
    """Dense models keep ``capture_size_share``: the per-mode count lifts dense 0.30 starts above
    their logs (bench row 86, Qwen3-8B-AWQ, +3.8 % -> +6.5 %), so it is not applied there."""
    gpu = gpu_memory(lookup_gpu("NVIDIA-L4"))
    args = EngineArgs(vllm_version="0.33.0", max_model_len=4096, max_num_seqs=256)
    resolved, _, _ = resolve_args(args, LLAMA_8B, gpu)
    full = 0.63 + 0.164e-5 * 32 * 4096 + 0.0447e-6 * 32 * 3 * 14336
    assert cuda_graph_gib(LLAMA_8B, resolved, 32) == pytest.approx(full, abs=1e-9)
    assert hybrid_capture_share(512, 256) == pytest.approx(86 / 102)
    assert hybrid_capture_share(512, 512) == 1.0
