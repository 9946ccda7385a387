"""GPU catalog: every label form GFD has used, memory look-up and clear errors."""

import pytest

from vllm_operator.catalog.gpus import (
    Fp8Support,
    UnknownGpuError,
    gfd_compute_capability,
    known_labels,
    lookup_gpu,
    lookup_gpu_by_memory,
    mig_memory_mib,
)


def test_catalog_lists_the_labelled_gpus_minus_amd() -> None:
    labels = known_labels()
    assert "NVIDIA-H100-80GB-HBM3" in labels
    assert "Tesla-T4" in labels
    assert len(labels) == 40  # 43 rows (the last NVIDIA-GB10), 3 AMD parts without a label


def test_h100_uses_the_cuda_total_measured_in_startup_logs() -> None:
    gpu = lookup_gpu("NVIDIA-H100-80GB-HBM3")
    assert gpu.total_mib == 81559
    assert gpu.cuda_total_gib == pytest.approx(79.19)
    assert gpu.compute_capability == (9, 0)
    assert gpu.bf16 and gpu.fp8 is Fp8Support.NATIVE and gpu.supports_fp8_kv_cache


@pytest.mark.parametrize("label", ["A100-SXM4-40GB", "nvidia-a100-sxm4-40gb", "A100-40GB"])
def test_older_label_without_prefix_and_aliases(label: str) -> None:
    assert lookup_gpu(label).label == "NVIDIA-A100-SXM4-40GB"


def test_time_sliced_label_keeps_the_memory_and_marks_shared() -> None:
    gpu = lookup_gpu("Tesla-T4-SHARED")
    assert gpu.shared and gpu.total_mib == 15360 and gpu.label == "Tesla-T4-SHARED"
    assert not gpu.bf16 and not gpu.supports_fp8_kv_cache


@pytest.mark.parametrize(
    ("label", "mib"),
    [
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 4864),  # gpu-catalog.csv: label memory 4864
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", 9728),  # gpu-catalog.csv: label memory 9728
        ("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", 38912),
    ],
)
def test_mig_label_has_the_memory_of_the_slice(label: str, mib: int) -> None:
    gpu = lookup_gpu(label)
    assert gpu.total_mib == mib
    assert gpu.mig_profile is not None
    assert gpu.cuda_total_gib < mib / 1024


def test_mig_profile_the_card_does_not_offer_is_rejected() -> None:
    with pytest.raises(UnknownGpuError):
        lookup_gpu("Tesla-T4-MIG-1g.5gb")


def test_node_memory_label_wins_over_the_catalog() -> None:
    gpu = lookup_gpu("NVIDIA-A100-SXM4-40GB", memory_mib=39538)
    assert gpu.total_mib == 39538
    assert gpu.cuda_total_gib < 39538 / 1024


def test_mig_memory_rounds_to_eighths() -> None:
    assert mig_memory_mib(81920, "7g.80gb") == int(81920 * 0.95)


def test_unknown_label_names_the_closest_known_labels() -> None:
    with pytest.raises(UnknownGpuError) as info:
        lookup_gpu("NVIDIA-H100-SXM")
    assert "NVIDIA-H100-80GB-HBM3" in info.value.closest or any(
        "H100" in c for c in info.value.closest
    )
    assert "nvidia.com/gpu.product" in str(info.value)


def test_lookup_by_memory_uses_a_unique_match_and_is_conservative_otherwise() -> None:
    assert lookup_gpu_by_memory(15360).label == "Tesla-T4"
    amd = lookup_gpu_by_memory(196288)
    assert amd.marketing_name == "AMD Instinct MI300X"
    assert not amd.bf16 and amd.compute_capability is None
    odd = lookup_gpu_by_memory(12345)
    assert odd.total_mib == 12345 and not odd.bf16
    with pytest.raises(ValueError):
        lookup_gpu_by_memory(0)


def test_a10g_capability_is_filled_in() -> None:
    assert lookup_gpu("NVIDIA-A10G").compute_capability == (8, 6)


@pytest.mark.parametrize(
    ("label", "mib", "cc"),
    [
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 97887, (12, 0)),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition", 97887, (12, 0)),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition", 97887, (12, 0)),
        ("NVIDIA-RTX-PRO-4500-Blackwell-Server-Edition", 32623, (12, 0)),
        ("NVIDIA-GeForce-RTX-5090", 32607, (12, 0)),
        ("NVIDIA-GeForce-RTX-5080", 16303, (12, 0)),
        ("NVIDIA-GeForce-RTX-5070-Ti", 16303, (12, 0)),
        ("NVIDIA-GeForce-RTX-5070", 12227, (12, 0)),
        ("NVIDIA-GeForce-RTX-5060-Ti", 16311, (12, 0)),
        ("NVIDIA-H20-3e", 143771, (9, 0)),
        ("NVIDIA-H20", 97871, (9, 0)),
    ],
)
def test_blackwell_and_2026_parts_by_their_gfd_labels(
    label: str, mib: int, cc: tuple[int, int]
) -> None:
    gpu = lookup_gpu(label)
    assert gpu.total_mib == mib and gpu.compute_capability == cc
    assert gpu.bf16 and gpu.fp8 is Fp8Support.NATIVE


def test_measured_cuda_totals_of_blackwell_cards() -> None:
    """vllm#51590: RTX PRO 4500 31.38 GiB; RTX 5090: the lowest of 31.4 (club-3090#1087) and 31.36
    (bench row 64, driver 595.84), since the total moves with the driver."""
    assert lookup_gpu("NVIDIA-RTX-PRO-4500-Blackwell-Server-Edition").cuda_total_gib == 31.38
    assert lookup_gpu("NVIDIA-GeForce-RTX-5090").cuda_total_gib == 31.36


def test_b300_is_known_but_needs_the_node_memory_label() -> None:
    with pytest.raises(UnknownGpuError) as info:
        lookup_gpu("NVIDIA-B300-SXM6-AC")
    assert "nvidia.com/gpu.memory" in str(info.value) and "10.3" in str(info.value)
    gpu = lookup_gpu("NVIDIA-B300-SXM6-AC", memory_mib=275040)
    assert gpu.compute_capability == (10, 3) and gpu.bf16


def test_unlisted_gpu_takes_bf16_from_its_compute_capability() -> None:
    gpu = lookup_gpu_by_memory(50000, compute_capability=(8, 0))
    assert gpu.bf16 and gpu.fp8 is Fp8Support.WEIGHT_ONLY and not gpu.supports_fp8_kv_cache
    ada = lookup_gpu_by_memory(50000, compute_capability=(8, 9))
    assert ada.bf16 and ada.supports_fp8_kv_cache
    turing = lookup_gpu_by_memory(50000, compute_capability=(7, 5))
    assert not turing.bf16


def test_a_cuda_total_is_not_reduced_twice() -> None:
    """81091 MiB = 79.19 GiB, the H100's cudaMemGetInfo total (issue: 'unknown-81091MiB')."""
    gpu = lookup_gpu_by_memory(81091)
    assert gpu.label == "NVIDIA-H100-80GB-HBM3"
    assert gpu.cuda_total_gib == pytest.approx(79.19) and gpu.bf16


@pytest.mark.parametrize(
    ("major", "minor", "family", "cc"),
    [
        ("8", "6", "ampere", (8, 6)),
        (None, None, "ada-lovelace", (8, 9)),
        (None, None, "hopper", (9, 0)),
        (None, None, "undefined", None),
        ("x", None, None, None),
        ("12", "0", "undefined", (12, 0)),
    ],
)
def test_compute_capability_from_gfd_labels(
    major: str | None, minor: str | None, family: str | None, cc: tuple[int, int] | None
) -> None:
    assert gfd_compute_capability(major, minor, family) == cc
