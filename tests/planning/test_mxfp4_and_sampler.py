"""MXFP4 expert padding per MoE backend and the native sampler of bare pip installs.

Logged figures: gpt-oss-120b on one H100, https://github.com/vllm-project/vllm/issues/23278
(0.10.1, Marlin, 65.9651 GiB, KV -2.14 GiB), https://github.com/vllm-project/vllm/issues/33155
(0.14.1, Triton, 64.38 GiB), https://github.com/vllm-project/vllm/issues/27508 (0.11.0,
util 0.95, 1024 batched tokens, KV 1.71 GiB, too small for the 131072 default context), bench row
120 (0.25.1, "Using 'TRITON' Mxfp4 MoE backend", 'Model loading took 61.29 GiB', a public
serving repo's docs quoted in bench/data/vllm-startup-logs.csv).
"""

import pytest

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import EngineArgs, estimate_memory, mxfp4_padded_dims
from vllm_operator.planning.versions import VllmVersion

GPT_OSS = lookup_architecture("openai/gpt-oss-120b")
H100 = gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3"))


def test_marlin_pads_hidden_to_256_and_intermediate_to_128() -> None:
    dims = mxfp4_padded_dims(
        GPT_OSS, tp=1, compute_capability=(8, 9), version=VllmVersion.parse("0.33.0")
    )
    assert dims == (3072, 2944)


def test_intermediate_is_padded_per_tp_rank() -> None:
    """2880 / 4 = 720 pads to 768 on Triton: the higher the TP, the larger the padding share;
    hidden stays 2880 (the Hopper value layout pads to 16 and 32 only)."""
    hid, inter = mxfp4_padded_dims(
        GPT_OSS, tp=4, compute_capability=(9, 0), version=VllmVersion.parse("0.14.1")
    )
    assert (hid, inter) == (2880, 768)


@pytest.mark.parametrize(
    ("version", "bare_pip", "logged"),
    [("0.10.1", True, 65.9651), ("0.14.1", False, 64.38), ("0.25.1", False, 61.29)],
)
def test_gpt_oss_120b_weights_match_both_backends(
    version: str, bare_pip: bool, logged: float
) -> None:
    est = estimate_memory(
        GPT_OSS, H100, EngineArgs(vllm_version=version, optional_kernels=not bare_pip)
    )
    assert est.weights_gib == pytest.approx(logged, rel=0.006)


def test_triton_keeps_the_loaded_scales_beside_the_swizzled_ones_until_0_25() -> None:
    """0.25.0 deletes the layer's w13/w2_weight_scale after swizzling them into the kernel's
    PrecisionConfig; 0.24.0 keeps both: one E8M0 byte per 32 expert weights, 3.34 GiB for
    gpt-oss-120b (36 layers x 128 experts x (5760 + 2880) x 90 bytes)."""
    kept = estimate_memory(GPT_OSS, H100, EngineArgs(vllm_version="0.24.0")).weights_gib
    freed = estimate_memory(GPT_OSS, H100, EngineArgs(vllm_version="0.25.0")).weights_gib
    assert kept - freed == pytest.approx(36 * 128 * (5760 + 2880) * 90 / 2**30, rel=1e-6)
    # Marlin (no triton_kernels before 0.12) never kept a second copy
    marlin = [
        estimate_memory(
            GPT_OSS, H100, EngineArgs(vllm_version=v, optional_kernels=False)
        ).weights_gib
        for v in ("0.11.0", "0.11.2")
    ]
    assert marlin[0] == marlin[1]


def test_bare_pip_0_10_1_defaults_fail_to_start() -> None:
    est = estimate_memory(GPT_OSS, H100, EngineArgs(vllm_version="0.10.1", optional_kernels=False))
    assert not est.fits
    assert est.kv_cache_gib == 0


def test_native_sampler_reproduces_the_0_11_kv_and_its_failure() -> None:
    est = estimate_memory(
        GPT_OSS,
        H100,
        EngineArgs(
            vllm_version="0.11.0",
            gpu_memory_utilization=0.95,
            max_num_batched_tokens=1024,
            optional_kernels=False,
        ),
    )
    assert est.kv_cache_gib == pytest.approx(1.71, rel=0.05)
    assert est.kv_cache_gib <= 1.71  # the safe side
    assert not est.fits


def test_image_installs_keep_the_flashinfer_sampler() -> None:
    image = estimate_memory(
        GPT_OSS, H100, EngineArgs(vllm_version="0.11.0", gpu_memory_utilization=0.95)
    )
    bare = estimate_memory(
        GPT_OSS,
        H100,
        EngineArgs(vllm_version="0.11.0", gpu_memory_utilization=0.95, optional_kernels=False),
    )
    assert image.activation_peak_gib < bare.activation_peak_gib


def test_a_clean_0_29_hopper_start_confirms_the_kv_the_unpadded_layout_plans() -> None:
    """gpt-oss-120b on one H100 80GB HBM3, vLLM 0.29.0 (apron-runner:v0.29.0-rc8), util 0.9,
    max_model_len 640, a cold boot alone on its GPU, from a public memory calculator's cohort:
    mondegreens/apron records/phase-1b-cohort/records/verification-reports/
    1220ded0ff28143274f8d56e3a39b7c807a3a742d7d03ef2729270470ba3794a57ef.json (commit 09c3175428f2):
    model_weight_memory 65,959,960,248 B (61.43 GiB), available_kv_cache_memory 6,120,328,396 B
    (5.70 GiB), kv_cache_tokens 81,951, initial_total_memory 85,018,877,624 B; its engine args from
    the cohort's solutions.jsonl (solution 1220666c11f9: gpu_memory_utilization 0.9, max_model_len
    640). With hidden padded to 256 the planner gave 2.0 GiB here (-65 %)."""
    gpu = gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3"), total_gib=85_018_877_624 / 2**30)
    est = estimate_memory(
        GPT_OSS,
        gpu,
        EngineArgs(vllm_version="0.29.0", gpu_memory_utilization=0.9, max_model_len=640),
    )
    assert est.weights_gib == pytest.approx(65_959_960_248 / 2**30, rel=0.01)
    logged_kv = 6_120_328_396 / 2**30
    assert est.kv_cache_gib == pytest.approx(logged_kv, rel=0.03)
    assert est.kv_cache_gib <= logged_kv  # the safe side
    assert est.kv_cache_tokens == pytest.approx(81_951, rel=0.03)


@pytest.mark.parametrize(
    ("version", "inter"), [("0.26.0", 3072), ("0.27.0", 2944), ("0.33.0", 2944)]
)
def test_trtllm_rounds_the_intermediate_to_128_from_0_27(version: str, inter: int) -> None:
    """fused_moe/oracle/mxfp4.py `mxfp4_round_up_hidden_size_and_intermediate_size`, TRTLLM
    branch: round_up(intermediate, 256) in 0.25.1 and 0.26.0, 128 in 0.27.0 through 0.33.0;
    hidden to 256 throughout. gpt-oss's 2880 goes to 3072, then 2944."""
    dims = mxfp4_padded_dims(
        GPT_OSS, tp=1, compute_capability=(10, 0), version=VllmVersion.parse(version)
    )
    assert dims == (3072, inter)


def test_the_v0_sampler_sorts_the_vocabulary() -> None:
    """vLLM 0.6.4.post1's V0 sampler takes ``_apply_top_k_top_p`` (a sort) for the profile's
    top_k = vocab - 1, top_p = 0.99 unless VLLM_USE_FLASHINFER_SAMPLER=1 (default 0). Bench row 2,
    https://github.com/vllm-project/vllm/issues/10360 (Qwen2.5-32B-Instruct-AWQ, RTX A6000,
    --max-model-len 4096): peak_torch_memory=19.60GiB on about 18.16 GiB of weights
    (initial_memory_usage=18.60GiB less non_torch_memory=0.44GiB), i.e. 1.44 GiB of activation
    where the forward pass over 4,096 tokens holds 0.75, and kv_cache_size=22.74GiB."""
    awq = lookup_architecture("Qwen/Qwen2.5-32B-Instruct-AWQ")
    a6000 = gpu_memory(lookup_gpu("NVIDIA-RTX-A6000"))
    est = estimate_memory(
        awq,
        a6000,
        EngineArgs(vllm_version="0.6.4.post1", max_model_len=4096, gpu_memory_utilization=0.9),
    )
    assert est.activation_peak_gib >= 1.44
    assert est.kv_cache_gib == pytest.approx(22.74, rel=0.01)
