"""Version memory semantics (design/vllm-versions.md §3, §5)."""

import pytest

from vllm_operator.planning.versions import (
    Engine,
    ProfilerEra,
    VllmVersion,
    accepted_block_sizes,
    batch_defaults,
    engine_for,
    mla_block_size,
    semantics_for,
)


def v(text: str) -> VllmVersion:
    return VllmVersion.parse(text)


def test_versions_order_with_post_releases() -> None:
    assert v("0.6.6.post1") > v("0.6.6") and v("0.6.6.post1").at_least("0.6.6")
    assert v("0.10.1.1") > v("0.10.1") and v("0.6.6") == VllmVersion.parse("v0.6.6")
    assert v("0.9.0") < v("0.10.0") < v("0.33.0")
    with pytest.raises(ValueError):
        VllmVersion.parse("latest")


@pytest.mark.parametrize(
    ("version", "name", "gib", "expected"),
    [
        ("0.8.0", "NVIDIA H100 80GB HBM3", 79.2, (1024, 8192)),
        ("0.8.0", "NVIDIA L4", 22.2, (1024, 2048)),
        ("0.8.5", "NVIDIA A100 80GB SXM4", 79.2, (1024, 8192)),
        ("0.9.0", "NVIDIA A100 80GB SXM4", 79.2, (256, 2048)),
        ("0.9.0", "NVIDIA H100 80GB HBM3", 79.2, (1024, 8192)),
        ("0.19.0", "NVIDIA L4", 22.2, (256, 2048)),
        ("0.25.0", "NVIDIA B200", 178.0, (1024, 8192)),
        ("0.30.0", "NVIDIA B200", 178.0, (1024, 16384)),
        # The 0.2x bench rows off Hopper (issue #28): server (OPENAI_API_SERVER) defaults by device
        # memory, A100 excluded (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, 0.33.0).
        ("0.27.1", "NVIDIA GeForce RTX 4090", 23.99, (256, 2048)),
        ("0.28.0", "NVIDIA L4", 22.04, (256, 2048)),
        ("0.27.1", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 95.01, (1024, 8192)),
        ("0.31.0", "NVIDIA A100-SXM4-80GB", 79.25, (256, 2048)),
    ],
)
def test_v1_batch_defaults_by_gpu(
    version: str, name: str, gib: float, expected: tuple[int, int]
) -> None:
    assert batch_defaults(v(version), Engine.V1, gib, name, (9, 0)) == expected


def test_v0_has_no_token_default() -> None:
    assert batch_defaults(v("0.6.6"), Engine.V0, 79.2, "NVIDIA H100", (9, 0)) == (256, None)


@pytest.mark.parametrize(
    ("version", "cc", "fp8", "engine"),
    [
        ("0.6.6", (9, 0), False, Engine.V0),
        ("0.7.3", (9, 0), False, Engine.V0),
        ("0.8.5", (9, 0), False, Engine.V1),
        ("0.8.5", (7, 5), False, Engine.V0),
        ("0.10.1", (8, 9), True, Engine.V0),
        ("0.10.1", (9, 0), True, Engine.V1),
        ("0.11.0", (7, 5), False, Engine.V1),
    ],
)
def test_engine_generation_and_silent_fallback(
    version: str, cc: tuple[int, int], fp8: bool, engine: Engine
) -> None:
    assert engine_for(v(version), cc, fp8) is engine


@pytest.mark.parametrize(
    ("version", "util", "graphs"),
    [
        ("0.6.6", 0.90, False),
        ("0.18.0", 0.90, False),
        ("0.19.0", 0.90, False),
        ("0.20.0", 0.92, True),
        ("0.33.0", 0.92, True),
    ],
)
def test_utilisation_default_and_cuda_graph_budgeting(
    version: str, util: float, graphs: bool
) -> None:
    sem = semantics_for(
        version, gpu_total_gib=79.2, marketing_name="NVIDIA H100", compute_capability=(9, 0)
    )
    assert sem.default_gpu_memory_utilization == util
    assert sem.subtracts_cuda_graphs is graphs


@pytest.mark.parametrize(
    ("version", "era"),
    [
        ("0.2.4", ProfilerEra.V0_TORCH_ONLY),
        ("0.5.5", ProfilerEra.V0_DEVICE_DELTA),
        ("0.6.4", ProfilerEra.V0_OTHERS_COUNTED),
        ("0.6.6", ProfilerEra.V0_PER_INSTANCE),
        ("0.9.0", ProfilerEra.V1_OTHERS_COUNTED),
        ("0.9.1", ProfilerEra.V1_PER_INSTANCE),
    ],
)
def test_profiler_eras(version: str, era: ProfilerEra) -> None:
    sem = semantics_for(
        version, gpu_total_gib=79.2, marketing_name="NVIDIA H100", compute_capability=(9, 0)
    )
    assert sem.era is era


def test_chunked_prefill_is_always_on_in_v1() -> None:
    sem = semantics_for(
        "0.11.0", gpu_total_gib=22, marketing_name="NVIDIA L4", compute_capability=(8, 9)
    )
    assert sem.chunked_prefill_default


def test_mla_block_sizes_and_accepted_block_sizes() -> None:
    assert mla_block_size(v("0.11.0"), (9, 0)) == 64
    assert mla_block_size(v("0.11.0"), (10, 0)) == 128
    assert mla_block_size(v("0.11.0"), (8, 0)) is None
    assert accepted_block_sizes(v("0.6.0")) == (8, 16, 32)
    assert 256 in (accepted_block_sizes(v("0.11.2")) or ())
    assert accepted_block_sizes(v("0.18.0")) is None
