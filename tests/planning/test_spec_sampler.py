"""The rejection-sampler warm-up that speculative decoding adds to vLLM's profile run.

Source: vLLM 0.33.0 `v1/worker/gpu_model_runner.py` `_dummy_sampler_run` (with a speculative
config: one dummy draft token per request, fresh logits of 2 x num_reqs rows, then
`RejectionSampler.forward`, `v1/sample/rejection_sampler.py`: the bonus rows through the ordinary
sampler, the target rows cast to fp32). Logged: bench rows 96-99, Qwen/Qwen3.8-27B on one H200 at
vLLM 0.24.0+rhaiv.13 (github.com/MarkellR-RedHat/pytorch-quantization-demo, commit dfd8e56):
72.30 GiB of KV cache without MTP, 67.45 / 67.81 / 67.82 GiB with MTP and 1 / 2 / 4 draft tokens.
"""

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    GIB,
    SAMPLER_LOGIT_COPIES,
    SAMPLER_LOGIT_COPIES_SPEC,
    EngineArgs,
    estimate_memory,
)

QWEN38 = lookup_architecture("Qwen/Qwen3.8-27B")
H200 = gpu_memory(lookup_gpu("NVIDIA-H200"))


def _estimate(version: str, spec_tokens: int) -> tuple[float, float]:
    args = EngineArgs.model_validate(
        {
            "vllm_version": version,
            "max_model_len": 32768,
            "max_num_batched_tokens": 8192,
            "speculative_method": "mtp" if spec_tokens else None,
            "num_speculative_tokens": spec_tokens,
        }
    )
    est = estimate_memory(QWEN38, H200, args)
    return est.activation_peak_gib, est.kv_cache_gib


def test_mtp_charges_the_rejection_sampler_warmup_whatever_the_draft_length() -> None:
    plain_act, _ = _estimate("0.24.0", 0)
    logits = 1024 * QWEN38.vocab_size * 4 / GIB  # serve default on a >= 70 GiB GPU
    expected = (SAMPLER_LOGIT_COPIES_SPEC - SAMPLER_LOGIT_COPIES) * logits
    peaks = {k: _estimate("0.24.0", k)[0] for k in (1, 2, 4)}
    assert len(set(peaks.values())) == 1  # one dummy draft token per request, whatever k
    assert abs(peaks[1] - plain_act - expected) < 0.01


def test_h200_rows_with_and_without_mtp_are_reproduced_within_one_percent() -> None:
    logged = {0: 72.30, 1: 67.45, 2: 67.81, 4: 67.82}
    for k, kv in logged.items():
        _, predicted = _estimate("0.24.0", k)
        assert abs(predicted - kv) / kv < 0.01, (k, predicted, kv)
        assert predicted <= kv * 1.005, (k, predicted, kv)  # never over beyond rounding


def test_earlier_releases_keep_the_plain_sampler_term() -> None:
    plain, _ = _estimate("0.19.0", 0)
    with_mtp, _ = _estimate("0.19.0", 4)
    assert abs(with_mtp - plain) < 0.01
