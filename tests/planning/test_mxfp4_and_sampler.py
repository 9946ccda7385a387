"""MXFP4 expert padding per MoE backend and the native sampler of bare pip installs.

Logged figures: gpt-oss-120b on one H100, https://github.com/vllm-project/vllm/issues/23278
(0.10.1, Marlin, 65.9651 GiB, KV -2.14 GiB), https://github.com/vllm-project/vllm/issues/33155
(0.14.1, Triton, 64.38 GiB), https://github.com/vllm-project/vllm/issues/27508 (0.11.0,
util 0.95, 1024 batched tokens, KV 1.71 GiB, too small for the 131072 default context).
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
    """2880 / 4 = 720 pads to 768 on Triton: the higher the TP, the larger the padding share."""
    hid, inter = mxfp4_padded_dims(
        GPT_OSS, tp=4, compute_capability=(9, 0), version=VllmVersion.parse("0.14.1")
    )
    assert (hid, inter) == (3072, 768)


@pytest.mark.parametrize(
    ("version", "bare_pip", "logged"), [("0.10.1", True, 65.9651), ("0.14.1", False, 64.38)]
)
def test_gpt_oss_120b_weights_match_both_backends(
    version: str, bare_pip: bool, logged: float
) -> None:
    est = estimate_memory(
        GPT_OSS, H100, EngineArgs(vllm_version=version, optional_kernels=not bare_pip)
    )
    assert est.weights_gib == pytest.approx(logged, rel=0.005)


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
