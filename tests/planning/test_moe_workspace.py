"""The persistent fused-MoE workspace of vLLM 0.20+ and the graphs that reuse it from 0.28.

Source: vLLM 0.33.0 `v1/worker/workspace.py` (WorkspaceManager), `fused_moe/modular_kernel.py`
`_allocate_buffers`, `fused_moe/experts/marlin_moe.py` `MarlinExperts.workspace_shapes`,
`utils/mem_utils.py` `memory_profiling` (consumed = free before the instance - free after the
profile run). Logged: bench rows 64-66 (Qwen/Qwen3-30B-A3B-GPTQ-Int4 on an RTX 5090, vLLM 0.28.0:
consumed 16.70 GiB, 0.86 GiB above the packed weights + non-torch; peak 1.19 GiB with the graph
estimate, 0.53 GiB eager).
"""

from vllm_operator.catalog.architectures import Quantization, QuantMethod, lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    GIB,
    EngineArgs,
    estimate_memory,
    moe_graph_bytes,
    moe_workspace_bytes,
    resolve_args,
)

QWEN3_MOE = lookup_architecture("Qwen/Qwen3-30B-A3B")
DENSE = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")
RTX_5090 = gpu_memory(lookup_gpu("NVIDIA-GeForce-RTX-5090"))


def _args(version: str, **kw: object) -> EngineArgs:
    return EngineArgs.model_validate(
        {"vllm_version": version, "max_model_len": 2048, "max_num_batched_tokens": 8192, **kw}
    )


def test_marlin_workspace_of_qwen3_30b_a3b_is_half_a_gib_at_8192_tokens() -> None:
    """M 8192 x top-8: workspace13 8192 x 8 x max(768, 2048) + workspace2 8192 x 8 x
    max(1536, 2048), 2 B each = 0.5 GiB, the bulk of the 0.86 GiB rows 64-66 log above the
    weights (the rest is not modelled: Marlin repack and allocator segments)."""
    resolved, _, _ = resolve_args(_args("0.33.0"), QWEN3_MOE, RTX_5090)
    assert moe_workspace_bytes(QWEN3_MOE, resolved) / GIB == 0.5


def test_workspace_scales_with_batched_tokens_not_with_depth_and_is_moe_only() -> None:
    small, _, _ = resolve_args(_args("0.33.0", max_num_batched_tokens=2048), QWEN3_MOE, RTX_5090)
    assert moe_workspace_bytes(QWEN3_MOE, small) / GIB == 0.125
    dense, _, _ = resolve_args(_args("0.33.0"), DENSE, RTX_5090)
    assert moe_workspace_bytes(DENSE, dense) == 0.0


def test_workspace_is_not_counted_before_0_20_and_graph_buffers_go_from_0_28() -> None:
    old, _, _ = resolve_args(_args("0.19.0"), QWEN3_MOE, RTX_5090)
    mid, _, _ = resolve_args(_args("0.27.1"), QWEN3_MOE, RTX_5090)
    new, _, _ = resolve_args(_args("0.28.0"), QWEN3_MOE, RTX_5090)
    assert moe_workspace_bytes(QWEN3_MOE, old) == 0.0
    assert moe_workspace_bytes(QWEN3_MOE, mid) > 0.0
    assert moe_graph_bytes(QWEN3_MOE, mid, 48) > 0.0
    assert moe_graph_bytes(QWEN3_MOE, new, 48) == 0.0


def test_eager_kv_of_rows_64_to_66_is_no_longer_over_predicted_beyond_the_floor_margin() -> None:
    """Row 66 (enforce_eager, 0.28.0) logs 11.03 GiB of KV cache at util 0.90 on a 31.36 GiB
    card; with the workspace held beside the sampler's peak the model is within a few percent
    (it was +6.7 % above the log without it)."""
    # Qwen3-30B-A3B-GPTQ-Int4 is the catalogued base at GPTQ 4-bit g128 (sym: no zero points)
    gptq = QWEN3_MOE.model_copy(
        update={"quantization": Quantization(method=QuantMethod.GPTQ, bits=4, group_size=128)}
    )
    args = _args("0.28.0", gpu_memory_utilization=0.90, enforce_eager=True, dtype="float16")
    est = estimate_memory(gptq, RTX_5090, args)
    assert est.kv_cache_gib <= 11.03 * 1.03
    no_workspace = est.kv_cache_gib + moe_workspace_bytes(gptq, est.args) / GIB
    assert no_workspace > 11.03 * 1.05  # what the model said before: +6.7 %
