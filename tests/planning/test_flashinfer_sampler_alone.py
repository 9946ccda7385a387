"""From 0.9 to 0.20 a FlashInfer start's sampler warm-up runs FlashInfer's path alone (3.5 copies).

From the code of the pinned releases, not the bench:
- 0.10.1.1 / 0.10.2 / 0.11.0 ``v1/worker/gpu_model_runner.py`` ``_dummy_sampler_run`` calls the
  sampler once; 0.21.0 onwards calls it a second time with a seeded torch.Generator ("Also warm
  forward_native"), which ``forward_cuda`` hands to ``forward_native`` (the Triton path).
- 0.9.0-0.11.0 ``TopKTopPSampler`` samples with FlashInfer >= 0.2.3; 0.8.5 falls back to the
  native path on exactly those versions ("FlashInfer>=v0.2.3 is not backward compatible").
- 0.10.1.1 ``v1/sample/sampler.py``: ``logits.to(torch.float32)``, temperature divided in place;
  ``flashinfer_sample`` -> FlashInfer 0.2.11 ``top_k_top_p_sampling_from_logits`` (top_k_first):
  ``top_k_mask_logits`` (one masked copy) and ``torch.softmax`` (one copy). With the model-dtype
  logits that is 0.5 + 1 + 1 + 1 = 3.5 copies of the fp32 ``max_num_seqs x vocab`` logits.

Logged figures (bench/data/vllm-startup-logs.csv rows 43/44, dennislee22/vLLM-benchmarking):
Qwen2-7B-Instruct at TP1 and TP2 on A100 80GB, vLLM 0.10.1.1, util 0.25: KV 5.01 / 12.02 GiB.
"""

import pytest

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    ACTIVATION_CONST_GIB,
    SAMPLER_LOGIT_COPIES,
    SAMPLER_LOGIT_COPIES_FLASHINFER,
    SAMPLER_LOGIT_COPIES_NATIVE,
    EngineArgs,
    estimate_memory,
)

A100 = gpu_memory(lookup_gpu("NVIDIA-A100-SXM4-80GB"))
QWEN2_7B = lookup_architecture("Qwen/Qwen2-7B-Instruct")
SEQS = 1024
GIB = float(1 << 30)


def sampler_copies(version: str, *, flashinfer_sampler: bool = True) -> float:
    """The activation peak of a start whose sampler outweighs its forward pass (1,024 sequences
    and 1,024 batched tokens), in fp32 copies of the logits."""
    args = EngineArgs(
        vllm_version=version,
        max_model_len=4096,
        max_num_seqs=SEQS,
        max_num_batched_tokens=SEQS,
        flashinfer_sampler=flashinfer_sampler,
    )
    est = estimate_memory(QWEN2_7B, A100, args)
    one_copy = SEQS * QWEN2_7B.vocab_size * 4 / GIB
    return (est.activation_peak_gib - ACTIVATION_CONST_GIB) / one_copy


@pytest.mark.parametrize("version", ["0.9.0", "0.10.1.1", "0.10.2", "0.11.0"])
def test_flashinfer_alone_before_the_native_warmup(version: str) -> None:
    assert sampler_copies(version) == pytest.approx(SAMPLER_LOGIT_COPIES_FLASHINFER, abs=0.01)


def test_0_8_keeps_the_fitted_count() -> None:
    # an 0.8 start samples with a FlashInfer older than 0.2.3 or sorts: not counted as 3.5
    assert sampler_copies("0.8.5") == pytest.approx(SAMPLER_LOGIT_COPIES, abs=0.01)


@pytest.mark.parametrize("version", ["0.21.0", "0.22.0", "0.24.0"])
def test_the_native_warmup_sets_the_peak_from_0_21(version: str) -> None:
    assert sampler_copies(version) == pytest.approx(SAMPLER_LOGIT_COPIES, abs=0.01)


@pytest.mark.parametrize("version", ["0.10.1.1", "0.11.0"])
def test_flashinfer_turned_off_still_sorts(version: str) -> None:
    assert sampler_copies(version, flashinfer_sampler=False) == pytest.approx(
        SAMPLER_LOGIT_COPIES_NATIVE, abs=0.01
    )


def test_the_opt_in_window_is_planned_native() -> None:
    # 0.11.1-0.20.x take FlashInfer only on an explicit 1, which the planner does not count on
    assert sampler_copies("0.11.1") == pytest.approx(SAMPLER_LOGIT_COPIES_NATIVE, abs=0.01)
    assert sampler_copies("0.19.0") == pytest.approx(SAMPLER_LOGIT_COPIES, abs=0.01)


@pytest.mark.parametrize(("tp", "logged"), [(1, 5.01), (2, 12.02)])
def test_rows_43_44_on_the_safe_side_within_3_8_percent(tp: int, logged: float) -> None:
    args = EngineArgs(
        vllm_version="0.10.1.1",
        tensor_parallel_size=tp,
        max_model_len=16384,
        gpu_memory_utilization=0.25,
    )
    kv = estimate_memory(QWEN2_7B, A100, args).kv_cache_gib
    assert kv <= logged
    assert (logged - kv) / logged < 0.038
