"""The attention backend vLLM picks, and FlashInfer's share of its CUDA-graph estimate.

Logged figures: one study's grid of Qwen/Qwen3-4B on a Modal L4 at vLLM 0.29.0
(akshathtiwari/spec-fp8-study results/logs, commit 21691fcb34b0; bench rows 133-139): the
profiling capture takes 0.73-0.74 GiB and the estimate 0.57-0.58 GiB on FlashInfer (rows 135, 137,
138, 139) against 0.37-0.43 / 0.22-0.28 GiB on FA2, FLEX_ATTENTION and TRITON_ATTN (rows 133, 134,
136); row 135's log: "Using FLASHINFER attention backend out of potential backends:
['FLASHINFER', 'TRITON_ATTN']" (serve defaults with --kv-cache-dtype fp8_e4m3).
"""

import pytest

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.adapters import adapters_from_extra_args
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    ALLOCATOR_LARGE_SEGMENT_BYTES,
    FLASHINFER_WORKSPACE_BYTES,
    GIB,
    EngineArgs,
    estimate_memory,
    flashinfer_graph_bytes,
)

QWEN3_4B = lookup_architecture("Qwen/Qwen3-4B")
L4 = gpu_memory(lookup_gpu("NVIDIA-L4"), total_gib=22.03)
SEG20 = ALLOCATOR_LARGE_SEGMENT_BYTES / GIB


def _args(**kwargs: object) -> EngineArgs:
    return EngineArgs.model_validate(kwargs)


def _backend(model: str, gpu: str, **kwargs: object) -> str:
    est = estimate_memory(
        lookup_architecture(model), gpu_memory(lookup_gpu(gpu)), EngineArgs.model_validate(kwargs)
    )
    return est.args.attention_backend


@pytest.mark.parametrize(
    ("model", "gpu", "kwargs", "backend"),
    [
        # FA2 serves Ampere and Ada unless the KV cache is fp8 (FA3 on sm90 stores fp8)
        ("Qwen/Qwen3-4B", "NVIDIA-L4", {"vllm_version": "0.29.0"}, "FLASH_ATTN"),
        (
            "Qwen/Qwen3-4B",
            "NVIDIA-L4",
            {"vllm_version": "0.29.0", "kv_cache_dtype": "fp8_e4m3"},
            "FLASHINFER",
        ),
        (
            "Qwen/Qwen3-4B",
            "NVIDIA-H100-80GB-HBM3",
            {"vllm_version": "0.33.0", "kv_cache_dtype": "fp8"},
            "FLASH_ATTN",
        ),
        # sm10x lists FlashInfer first
        ("Qwen/Qwen3-4B", "NVIDIA-B200", {"vllm_version": "0.33.0"}, "FLASHINFER"),
        # attention sinks: neither FA2 nor FlashInfer off sm10x
        ("openai/gpt-oss-20b", "NVIDIA-L4", {"vllm_version": "0.33.0"}, "TRITON_ATTN"),
        # Turing: no FlashAttention; FlashInfer off sm75 from 0.24.0 (flashinfer#3620)
        (
            "Qwen/Qwen3-4B",
            "Tesla-T4",
            {"vllm_version": "0.33.0", "dtype": "float16"},
            "TRITON_ATTN",
        ),
        ("Qwen/Qwen3-4B", "Tesla-T4", {"vllm_version": "0.23.0", "dtype": "float16"}, "FLASHINFER"),
        # --attention-backend wins
        (
            "Qwen/Qwen3-4B",
            "NVIDIA-L4",
            {
                "vllm_version": "0.29.0",
                "kv_cache_dtype": "fp8_e4m3",
                "attention_backend": "triton_attn",
            },
            "TRITON_ATTN",
        ),
    ],
)
def test_vllm_picks_the_first_backend_that_serves_the_start(
    model: str, gpu: str, kwargs: dict[str, object], backend: str
) -> None:
    assert _backend(model, gpu, **kwargs) == backend


def _graphs(args: EngineArgs, arch_model: str = "Qwen/Qwen3-4B", gpu: str = "NVIDIA-L4") -> float:
    arch = lookup_architecture(arch_model)
    return estimate_memory(arch, gpu_memory(lookup_gpu(gpu)), args).cuda_graph_gib


def test_v2_counts_one_wrapper_per_decode_size_and_matches_the_l4_grid() -> None:
    """0.29.0, 256 sequences, captures up to 512: 35 decode sizes <= 256, plus the prefill and
    the plain decode wrapper: 37 wrappers of 8 MiB, two to a 20 MiB allocator segment, 19
    segments = 0.37 GiB; the study logs 0.35-0.37 GiB more on FlashInfer than on FA2 (estimate
    0.57 against 0.22, profiling capture 0.74 against 0.37)."""
    base = {"vllm_version": "0.29.0", "max_num_seqs": 256, "kv_cache_dtype": "fp8_e4m3"}
    fi = _graphs(_args(attention_backend="FLASHINFER", **base))
    fa = _graphs(_args(attention_backend="FLASH_ATTN", **base))
    assert fi - fa == pytest.approx(19 * SEG20, abs=1e-3)
    assert 0.35 <= fi - fa <= 0.37 + 0.005


def test_expandable_segments_pack_the_wrappers_into_pages() -> None:
    """The operator's pods: 37 x 8 MiB = 296 MiB in 20 MiB pages, 300 MiB."""
    base = {
        "vllm_version": "0.29.0",
        "max_num_seqs": 256,
        "kv_cache_dtype": "fp8_e4m3",
        "expandable_segments": True,
    }
    fi = _graphs(_args(attention_backend="FLASHINFER", **base))
    fa = _graphs(_args(attention_backend="FLASH_ATTN", **base))
    assert fi - fa == pytest.approx(15 * SEG20, abs=1e-3)


def test_kv_of_the_fp8_start_drops_by_the_wrappers() -> None:
    """Row 135 (auto backend, fp8 KV) against the same start forced onto Triton (row 136)."""
    args = {"vllm_version": "0.29.0", "kv_cache_dtype": "fp8_e4m3", "gpu_memory_utilization": 0.92}
    auto = estimate_memory(QWEN3_4B, L4, _args(**args))
    triton = estimate_memory(QWEN3_4B, L4, _args(attention_backend="TRITON_ATTN", **args))
    assert auto.args.attention_backend == "FLASHINFER"
    assert triton.kv_cache_gib - auto.kv_cache_gib == pytest.approx(19 * SEG20, abs=1e-3)


def test_speculative_decoding_keeps_only_the_two_shared_wrappers_on_v2() -> None:
    """FlashInfer supports single-token decode graphs only: under speculative decoding vLLM
    drops to PIECEWISE and keeps no per-size wrapper (a method Model Runner V2 takes)."""
    est = estimate_memory(
        QWEN3_4B, L4, EngineArgs(vllm_version="0.29.0", attention_backend="FLASHINFER")
    )
    spec = est.args.model_copy(update={"speculative_method": "eagle3", "num_speculative_tokens": 3})
    assert flashinfer_graph_bytes(QWEN3_4B, spec) == ALLOCATOR_LARGE_SEGMENT_BYTES
    # ngram runs on the V1 runner, whose PIECEWISE captures build no attention metadata
    ngram = spec.model_copy(update={"speculative_method": "ngram"})
    assert flashinfer_graph_bytes(QWEN3_4B, ngram) == 0


def test_v1_counts_the_lazily_allocated_workspace_and_the_first_wrapper() -> None:
    """The V1 runner (a hybrid at 0.27.1): the first profiled FULL capture allocates the float
    workspace, max(394 MiB, tokens x heads per rank x head_dim x 16) from 0.26.0, and its
    wrapper's 20 MiB segment; the second sample's wrapper fits in that segment, so the
    extrapolation adds none. Under speculative decoding: nothing."""
    model = "Qwen/Qwen3.8-27B-FP8"
    base = {"vllm_version": "0.27.1", "max_num_seqs": 8, "max_num_batched_tokens": 2048}
    fi = _graphs(_args(attention_backend="FLASHINFER", **base), model)
    fa = _graphs(_args(attention_backend="FLASH_ATTN", **base), model)
    assert fi - fa == pytest.approx((FLASHINFER_WORKSPACE_BYTES / GIB) + SEG20, abs=1e-3)
    wide = {**base, "max_num_batched_tokens": 8192}  # 8192 x 24 x 256 x 16 B = 768 MiB
    fi_wide = _graphs(_args(attention_backend="FLASHINFER", **wide), model)
    fa_wide = _graphs(_args(attention_backend="FLASH_ATTN", **wide), model)
    assert fi_wide - fa_wide == pytest.approx((768 * 2**20) / GIB + SEG20, abs=1e-3)
    spec = {"speculative_method": "mtp", "num_speculative_tokens": 3}
    assert _graphs(
        _args(attention_backend="FLASHINFER", **base, **spec),
        model,
    ) == pytest.approx(_graphs(_args(attention_backend="FLASH_ATTN", **base, **spec), model))


@pytest.mark.parametrize(
    ("gpu", "version", "counted"),
    [
        ("NVIDIA-GeForce-RTX-5090", "0.27.1", True),  # sm12x: native decode until XQA
        ("NVIDIA-GeForce-RTX-5090", "0.28.0", False),
        ("NVIDIA-H100-80GB-HBM3", "0.24.0", True),  # sm90: XQA decode from 0.25.0
        ("NVIDIA-H100-80GB-HBM3", "0.25.0", False),
        ("NVIDIA-B200", "0.33.0", False),  # sm10x: TRT-LLM gen
        ("NVIDIA-A100-SXM4-80GB", "0.33.0", True),
    ],
)
def test_trtllm_decode_paths_keep_no_wrappers(gpu: str, version: str, counted: bool) -> None:
    base = {"vllm_version": version, "max_num_seqs": 64}
    fi = _graphs(_args(attention_backend="FLASHINFER", **base), gpu=gpu)
    fa = _graphs(_args(attention_backend="FLASH_ATTN", **base), gpu=gpu)
    assert (fi > fa) is counted


def test_eager_starts_capture_nothing() -> None:
    args = EngineArgs(vllm_version="0.29.0", attention_backend="FLASHINFER", enforce_eager=True)
    assert _graphs(args) == 0.0


def test_extra_args_carry_the_attention_backend() -> None:
    assert adapters_from_extra_args({"--attention-backend": "flashinfer"}).attention_backend == (
        "FLASHINFER"
    )
    assert adapters_from_extra_args({}).attention_backend is None
