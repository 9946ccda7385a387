"""The consumed-memory excess of dense int4 AWQ/GPTQ checkpoints on sm12x cards (vLLM 0.20+).

An EMPIRICAL term (memory.py SM12X_INT4_EXCESS_FROM): the mechanism in vLLM's code was not found.
Logged (bench/data/vllm-startup-logs.csv, 0.27+ ledger 'Actual usage is C GiB for consumed memory
(weights + non-torch)'): row 106 Qwen/Qwen3-32B-AWQ on an RTX 5090 at 0.28.0, consumed 20.04 GiB
against 18.30 predicted without the term (+1.74); row 107 Qwen/Qwen3-14B-AWQ, same card and
release, 11.22 against 9.59 (+1.63); row 86 Qwen/Qwen3-8B-AWQ on an RTX 5070 Ti at 0.30.0, KV
4.97 GiB predicted against 3.67 logged (about +1.3 GiB). The term is one vocab x hidden matrix in
the activation dtype: 151,936 x 5,120 x 2 B = 1.449 GiB (Qwen3-14B/-32B), 151,936 x 4,096 x 2 B =
1.159 GiB (Qwen3-8B).
"""

from typing import Any

import pytest

from vllm_operator.catalog.architectures import (
    Architecture,
    Quantization,
    QuantMethod,
    lookup_architecture,
)
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    GIB,
    EngineArgs,
    estimate_memory,
    sm12x_int4_excess_bytes,
)
from vllm_operator.planning.versions import VllmVersion

QWEN3_14B_AWQ = lookup_architecture("Qwen/Qwen3-14B-AWQ")
QWEN3_32B_AWQ = lookup_architecture("Qwen/Qwen3-32B-AWQ")
QWEN3_8B_AWQ = lookup_architecture("Qwen/Qwen3-8B-AWQ")
QWEN3_MOE = lookup_architecture("Qwen/Qwen3-30B-A3B")
RTX_5090 = gpu_memory(lookup_gpu("NVIDIA-GeForce-RTX-5090"))
L40S = gpu_memory(lookup_gpu("NVIDIA-L40S"))
V028 = VllmVersion.parse("0.28.0")


def _excess(
    arch: Architecture,
    quant: Quantization | None,
    *,
    tp: int = 1,
    compute_capability: tuple[int, int] | None = (12, 0),
    version: VllmVersion = V028,
) -> float:
    return (
        sm12x_int4_excess_bytes(
            arch,
            quant,
            tp=tp,
            dtype="float16",
            compute_capability=compute_capability,
            version=version,
        )
        / GIB
    )


def test_one_vocab_by_hidden_matrix_in_the_activation_dtype() -> None:
    """151,936 x 5,120 x 2 B and 151,936 x 4,096 x 2 B, by hand."""
    assert _excess(QWEN3_14B_AWQ, QWEN3_14B_AWQ.quantization) == pytest.approx(
        151_936 * 5_120 * 2 / 2**30
    )
    assert _excess(QWEN3_32B_AWQ, QWEN3_32B_AWQ.quantization) == pytest.approx(1.4490, abs=1e-4)
    assert _excess(QWEN3_8B_AWQ, QWEN3_8B_AWQ.quantization) == pytest.approx(1.1592, abs=1e-4)


def test_vocab_parallel_over_tensor_parallel_ranks() -> None:
    one = _excess(QWEN3_14B_AWQ, QWEN3_14B_AWQ.quantization)
    assert _excess(QWEN3_14B_AWQ, QWEN3_14B_AWQ.quantization, tp=2) == pytest.approx(one / 2)


@pytest.mark.parametrize(
    ("case", "kw"),
    [
        ("sm89 (L40S rows 46-49 show no excess)", {"compute_capability": (8, 9)}),
        ("sm90", {"compute_capability": (9, 0)}),
        ("sm10x", {"compute_capability": (10, 0)}),
        ("capability unknown", {"compute_capability": None}),
        ("before 0.20", {"version": VllmVersion.parse("0.19.1")}),
    ],
)
def test_gated_to_sm12x_from_0_20(case: str, kw: dict[str, Any]) -> None:
    assert _excess(QWEN3_14B_AWQ, QWEN3_14B_AWQ.quantization, **kw) == 0.0, case


def test_gated_to_dense_int4_awq_and_gptq() -> None:
    gptq = Quantization(method=QuantMethod.GPTQ, bits=4, group_size=128)
    assert _excess(QWEN3_14B_AWQ, gptq) > 1.4
    assert _excess(QWEN3_14B_AWQ, None) == 0.0
    assert _excess(QWEN3_14B_AWQ, Quantization(method=QuantMethod.GPTQ, bits=8)) == 0.0
    assert _excess(QWEN3_14B_AWQ, Quantization(method=QuantMethod.FP8, bits=8)) == 0.0
    # the GPTQ MoE rows 64-66 on the same card show 0.36 GiB, not a vocab matrix
    assert _excess(QWEN3_MOE, gptq) == 0.0


def test_row_107_consumed_and_kv_within_the_gate() -> None:
    """Row 107: util 0.70, max_model_len 32768, 0.28.0 on an RTX 5090; logged consumed 11.22 GiB,
    KV 9.27 GiB. Without the term the planner said 9.59 consumed and 10.68 KV (+15.2 %); the
    rotary cache of 40,960 positions (0.01 GiB) is in the weights since planning/model_load.py."""
    args = EngineArgs.model_validate(
        {"vllm_version": "0.28.0", "gpu_memory_utilization": 0.70, "max_model_len": 32768}
    )
    est = estimate_memory(QWEN3_14B_AWQ, RTX_5090, args)
    consumed = est.weights_gib + est.non_torch_gib
    assert consumed == pytest.approx(11.05, abs=0.01)
    assert est.kv_cache_gib <= 9.27 * 1.05
    assert any("sm12x" in r and "empirical" in r for r in est.reasons)
    on_l40s = estimate_memory(QWEN3_14B_AWQ, L40S, args)
    assert not any("sm12x" in r for r in on_l40s.reasons)
