"""GPU catalog: what the planner needs to know about one GPU type.

Built from `data/gpu-catalog.csv` (a copy of the design's shared catalog, one source per row) and
`data/gpu-measured.csv` (the memory CUDA really reports, read from published vLLM startup logs,
plus the few capabilities the shared catalog leaves open). Nodes are matched by the label GPU
Feature Discovery writes (`nvidia.com/gpu.product`), in every form it has taken: with and without
the `NVIDIA-` prefix, with `-SHARED` (time-slicing) and with `-MIG-<profile>` (the memory is then
the slice's). When the product is unknown the memory label (`nvidia.com/gpu.memory`, MiB) still
gives a conservative GPU.
"""

import csv
import difflib
import re
from enum import StrEnum
from functools import cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

MIB_PER_GIB = 1024.0

_MIG_RE = re.compile(r"^(?P<base>.+?)-MIG-(?P<profile>\d+g\.\d+gb(?:\+me)?)$", re.IGNORECASE)
_PROFILE_RE = re.compile(r"^(?P<gi>\d+)g\.(?P<gb>\d+)gb", re.IGNORECASE)

# Driver/ECC reservation between the memory nvidia-smi reports and what cudaMemGetInfo returns
# (vLLM's "total"), used only where no startup log measured the GPU: observed 0.26 GiB (T4) to
# 0.46 GiB (H100) in vllm-startup-logs.csv. The larger fraction is taken: a smaller total only
# ever shrinks the planned KV cache.
_RESERVED_FRACTION = 0.0075
_RESERVED_MIN_GIB = 0.30

# MIG memory slices are 1/8 of the card; GFD reports ~95 % of that per slice (A100-40GB 1g.5gb:
# 4864 MiB = 40960/8*0.95; A100-80GB 1g.10gb: 9728 MiB = 81920/8*0.95; gpu-catalog.csv sources).
_MIG_SLICE_EFFICIENCY = 0.95


# GPU Feature Discovery's `nvidia.com/gpu.family` values (k8s-device-plugin internal/lm/resource.go
# getArchFamily: volta < 7.5 <= turing; ampere < 8.9 <= ada-lovelace; hopper 9.x; 'blackwell' on
# newer releases, 'undefined' on older ones for 10.x/12.x) and the lowest compute capability of each,
# used only when the node has no nvidia.com/gpu.compute.major/minor labels.
FAMILY_MIN_CC: dict[str, tuple[int, int]] = {
    "volta": (7, 0),
    "turing": (7, 5),
    "ampere": (8, 0),
    "ada-lovelace": (8, 9),
    "hopper": (9, 0),
    "blackwell": (10, 0),
}


# Short names accepted where a label is expected (spec.placement.gpuTypes 'catalog aliases'),
# only where one product is meant; ambiguous names (H100, A100) get the closest-label error.
ALIASES = {
    "T4": "Tesla-T4",
    "H100-80GB": "NVIDIA-H100-80GB-HBM3",
    "H100-SXM": "NVIDIA-H100-80GB-HBM3",
    "A100-40GB": "NVIDIA-A100-SXM4-40GB",
    "A100-80GB": "NVIDIA-A100-SXM4-80GB",
    "RTX-4090": "NVIDIA-GeForce-RTX-4090",
    "RTX-3090": "NVIDIA-GeForce-RTX-3090",
}


class Fp8Support(StrEnum):
    """How a GPU runs FP8 (domain.md §3 'Hardware'; vllm-versions.md §5)."""

    NATIVE = "native"  # compute capability >= 8.9: W8A8 FP8 and fp8 KV cache
    WEIGHT_ONLY = "weight_only"  # 8.0/8.6 (and 7.5 from 0.33): Marlin W8A16, no fp8 KV
    NONE = "none"


class UnknownGpuError(ValueError):
    """A GPU label that is not in the catalog; carries the closest known labels."""

    def __init__(self, label: str, closest: list[str], detail: str | None = None) -> None:
        self.label = label
        self.closest = closest
        if detail is not None:
            super().__init__(f"GPU {label!r}: {detail}.")
            return
        hint = f" Closest known labels: {', '.join(closest)}." if closest else ""
        super().__init__(
            f"unknown GPU label {label!r}.{hint} Use a GPU Feature Discovery product label "
            "(nvidia.com/gpu.product) or give the memory in MiB (nvidia.com/gpu.memory)."
        )


class GpuFacts(BaseModel):
    """One GPU type as the planner sees it (per GPU, or per MIG slice)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(description="Canonical GFD product label (with -MIG-/-SHARED suffixes).")
    marketing_name: str
    total_mib: int = Field(gt=0, description="Memory as nvidia-smi / the GFD memory label report.")
    cuda_total_gib: float = Field(gt=0, description="Memory cudaMemGetInfo reports: vLLM's total.")
    cuda_total_source: str
    compute_capability: tuple[int, int] | None = None
    bf16: bool = False
    fp8: Fp8Support = Fp8Support.NONE
    mig_profile: str | None = None
    shared: bool = False
    unified_memory: bool = Field(
        default=False,
        description="An integrated GPU sharing the host's memory (gpu-measured.csv "
        "unified_memory): vLLM then reads free memory from the host, see "
        "planning/memory.py UNIFIED_MEMORY_NON_TORCH_GIB.",
    )
    source: str = ""

    @property
    def nvidia_smi_gib(self) -> float:
        return self.total_mib / MIB_PER_GIB

    @property
    def supports_fp8_kv_cache(self) -> bool:
        """fp8 KV cache needs compute capability >= 8.9 (vllm-versions.md §5)."""
        return self.compute_capability is not None and self.compute_capability >= (8, 9)

    @property
    def cc_text(self) -> str:
        if self.compute_capability is None:
            return "unknown"
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    marketing_name: str
    total_mib: int | None
    compute_capability: tuple[int, int] | None
    bf16: bool
    fp8: Fp8Support
    mig_profiles: str
    source: str
    cuda_total_gib: float | None = None
    cuda_total_source: str | None = None
    unified_memory: bool = False


def capabilities_for_cc(cc: tuple[int, int]) -> tuple[bool, Fp8Support]:
    """(bf16, fp8) of any NVIDIA GPU of this compute capability (vllm-versions.md §5): bf16 from
    8.0 (vLLM platforms/cuda.py supported_dtypes), native FP8 from 8.9, Marlin W8A16 from 8.0."""
    if cc >= (8, 9):
        return True, Fp8Support.NATIVE
    if cc >= (8, 0):
        return True, Fp8Support.WEIGHT_ONLY
    return False, Fp8Support.NONE


def parse_compute_capability(text: str) -> tuple[int, int]:
    """'8.9' (or '8,9', '89' is refused: ambiguous) as (8, 9); ValueError with the accepted form."""
    major, sep, minor = text.strip().replace(",", ".").partition(".")
    if not sep or not major.isdigit() or not minor.isdigit():
        raise ValueError(f"compute capability {text!r} is not of the form MAJOR.MINOR (e.g. 8.9)")
    return int(major), int(minor)


def gfd_compute_capability(
    major: object = None, minor: object = None, family: object = None
) -> tuple[int, int] | None:
    """Compute capability from a node's GFD labels: nvidia.com/gpu.compute.major/minor, else the
    lowest of nvidia.com/gpu.family (conservative); None when neither is usable."""
    try:
        if major is not None and str(major).strip():
            return int(str(major)), int(str(minor or 0))
    except ValueError:
        pass
    if isinstance(family, str):
        return FAMILY_MIN_CC.get(family.strip().lower())
    return None


def _parse_cc(text: str) -> tuple[int, int] | None:
    if not text.strip():
        return None
    major, _, minor = text.strip().partition(".")
    return int(major), int(minor or 0)


def _cc_text(cc: tuple[int, int] | None) -> str:
    return "unknown" if cc is None else f"{cc[0]}.{cc[1]}"


def _parse_fp8(text: str) -> Fp8Support:
    value = text.strip().lower()
    if value == "yes":
        return Fp8Support.NATIVE
    if value == "w8a16_only":
        return Fp8Support.WEIGHT_ONLY
    return Fp8Support.NONE


def _read_csv(name: str) -> list[dict[str, str]]:
    text = resources.files("vllm_operator.catalog").joinpath("data", name).read_text("utf-8")
    return list(csv.DictReader(text.splitlines()))


@cache
def _rows() -> dict[str, _Row]:
    """Catalog rows by upper-cased label, measured values merged in."""
    measured = {r["gfd_product_label"]: r for r in _read_csv("gpu-measured.csv")}
    rows: dict[str, _Row] = {}
    for raw in _read_csv("gpu-catalog.csv"):
        label = raw["gfd_product_label"].strip()
        if not label:
            continue  # AMD parts have no GFD label; reachable through the memory look-up only
        extra = measured.get(label, {})
        cc = _parse_cc(extra.get("compute_capability") or raw["compute_capability"])
        bf16_text = (extra.get("bf16") or raw["bf16"]).strip().lower()
        fp8_text = extra.get("fp8") or raw["fp8"]
        source = raw["source"] + (f" | {extra['source']}" if extra.get("source") else "")
        rows[label.upper()] = _Row(
            label=label,
            marketing_name=raw["marketing_name"],
            total_mib=int(raw["total_mib"]) if raw["total_mib"].strip() else None,
            compute_capability=cc,
            bf16=bf16_text == "yes",
            fp8=_parse_fp8(fp8_text),
            mig_profiles=raw["mig_profiles"],
            source=source,
            cuda_total_gib=float(extra["cuda_total_gib"]) if extra.get("cuda_total_gib") else None,
            cuda_total_source=extra.get("source") or None,
            unified_memory=(extra.get("unified_memory") or "").strip().lower() == "yes",
        )
    return rows


@cache
def _memory_only_rows() -> list[tuple[int, str, str]]:
    """(total MiB, marketing name, source) of every catalog row, labelled or not."""
    out: list[tuple[int, str, str]] = []
    for raw in _read_csv("gpu-catalog.csv"):
        if raw["total_mib"].strip():
            out.append((int(raw["total_mib"]), raw["marketing_name"], raw["source"]))
    return out


def known_labels() -> list[str]:
    """Every product label the catalog knows, in catalog order."""
    return [row.label for row in _rows().values()]


def estimated_cuda_total_gib(total_mib: int) -> float:
    """CUDA-visible memory for a card known only by its nvidia-smi size (conservative)."""
    gib = total_mib / MIB_PER_GIB
    return round(gib - max(_RESERVED_MIN_GIB, gib * _RESERVED_FRACTION), 2)


def _facts(row: _Row, *, total_mib: int, mig: str | None, shared: bool, label: str) -> GpuFacts:
    if mig is None and row.cuda_total_gib is not None:
        cuda_total, cuda_source = row.cuda_total_gib, f"measured ({row.cuda_total_source})"
    else:
        cuda_total = estimated_cuda_total_gib(total_mib)
        cuda_source = "estimated: nvidia-smi MiB minus the driver reservation"
    return GpuFacts(
        label=label,
        marketing_name=row.marketing_name + (f" MIG {mig}" if mig else ""),
        total_mib=total_mib,
        cuda_total_gib=cuda_total,
        cuda_total_source=cuda_source,
        compute_capability=row.compute_capability,
        bf16=row.bf16,
        fp8=row.fp8,
        mig_profile=mig,
        shared=shared,
        unified_memory=row.unified_memory,
        source=row.source,
    )


def mig_memory_mib(card_total_mib: int, profile: str) -> int:
    """Memory of one MIG slice (what nvidia.com/gpu.memory reports for it)."""
    match = _PROFILE_RE.match(profile)
    if match is None:
        raise ValueError(f"MIG profile {profile!r} is not of the form <N>g.<M>gb")
    card_gb = card_total_mib / 1000.0
    eighths = max(1, min(8, round(int(match["gb"]) / (card_gb / 8))))
    return int(card_total_mib / 8 * eighths * _MIG_SLICE_EFFICIENCY)


def lookup_gpu(label: str, *, memory_mib: int | None = None) -> GpuFacts:
    """Find a GPU by its GFD product label (any of its historical forms).

    `memory_mib` is the node's `nvidia.com/gpu.memory` label when known: it wins over the catalog
    (it is what the node really has, e.g. a MIG slice or an ECC setting).
    Raises UnknownGpuError with the closest known labels.
    """
    text = label.strip()
    shared = False
    if text.upper().endswith("-SHARED"):
        shared, text = True, text[: -len("-SHARED")]
    mig: str | None = None
    match = _MIG_RE.match(text)
    if match is not None:
        text, mig = match["base"], match["profile"].lower()
    rows = _rows()
    text = ALIASES.get(text.upper(), text)
    row = rows.get(text.upper()) or rows.get(f"NVIDIA-{text}".upper())
    if row is None and text.upper().startswith("NVIDIA-"):
        row = rows.get(text.upper().removeprefix("NVIDIA-"))
    if row is None:
        raise UnknownGpuError(label, closest_labels(label))
    if mig is not None and mig.split("+")[0] not in row.mig_profiles.lower():
        raise UnknownGpuError(
            label,
            [f"{row.label}-MIG-{p.split('(')[0]}" for p in row.mig_profiles.split(";")][:5],
        )
    if memory_mib is not None:
        total = memory_mib
    elif row.total_mib is None:
        raise UnknownGpuError(
            label,
            [],
            detail=f"the catalog knows {row.label} (compute capability "
            f"{_cc_text(row.compute_capability)}) but not its memory: give it in MiB as "
            "nvidia-smi reports it (the node's nvidia.com/gpu.memory label)",
        )
    elif mig is not None:
        total = mig_memory_mib(row.total_mib, mig)
    else:
        total = row.total_mib
    canonical = row.label + (f"-MIG-{mig}" if mig else "") + ("-SHARED" if shared else "")
    facts = _facts(row, total_mib=total, mig=mig, shared=shared, label=canonical)
    if memory_mib is not None and memory_mib != row.total_mib and mig is None:
        facts = facts.model_copy(
            update={
                "cuda_total_gib": estimated_cuda_total_gib(memory_mib),
                "cuda_total_source": "estimated from the node's nvidia.com/gpu.memory label",
            }
        )
    return facts


def lookup_gpu_by_memory(
    memory_mib: int, *, compute_capability: tuple[int, int] | None = None
) -> GpuFacts:
    """A GPU known only by its memory (nvidia.com/gpu.memory, MiB: what nvidia-smi reports).

    When exactly one catalog product has that memory (and, if given, that compute capability) its
    facts are used. Otherwise the capabilities follow `compute_capability` (the node's GFD
    nvidia.com/gpu.compute.major/minor labels): bf16 at 8.0 and above, never lost on such a node;
    without it the GPU is treated conservatively (no bf16, no fp8), which can only make a plan
    safer. A figure equal to a catalog product's measured CUDA total (e.g. 81091 MiB = 79.19 GiB,
    an H100's cudaMemGetInfo total) is taken as that total, not reduced a second time. A compute
    capability that only one unified-memory product has (12.1, GB10) names that product, whose
    memory the catalog cannot hold (it is the host's): its unified-memory term then applies.
    """
    if memory_mib <= 0:
        raise ValueError(f"GPU memory must be a positive number of MiB, got {memory_mib}")
    rows = list(_rows().values())
    labelled = [
        r
        for r in rows
        if r.total_mib == memory_mib
        and (compute_capability is None or r.compute_capability in (None, compute_capability))
    ]
    if len(labelled) >= 1 and len({(r.compute_capability, r.bf16, r.fp8) for r in labelled}) == 1:
        row = labelled[0]
        return _facts(row, total_mib=memory_mib, mig=None, shared=False, label=row.label)
    cuda_match = [
        r
        for r in rows
        if r.cuda_total_gib is not None
        and abs(r.cuda_total_gib * MIB_PER_GIB - memory_mib) <= 1.0
        and r.total_mib is not None
        and (compute_capability is None or r.compute_capability == compute_capability)
    ]
    if len(cuda_match) == 1:
        row = cuda_match[0]
        facts = _facts(
            row, total_mib=row.total_mib or memory_mib, mig=None, shared=False, label=row.label
        )
        return facts.model_copy(
            update={
                "cuda_total_source": f"{memory_mib} MiB is {row.label}'s measured CUDA total "
                f"({facts.cuda_total_source}); taken as is"
            }
        )
    unified = [
        r
        for r in rows
        if r.unified_memory and r.total_mib is None and r.compute_capability == compute_capability
    ]
    if compute_capability is not None and len(unified) == 1:
        # A unified-memory product has no memory of its own in the catalog (the host's is what the
        # node reports), so its compute capability alone names it (12.1: GB10).
        row = unified[0]
        return _facts(row, total_mib=memory_mib, mig=None, shared=False, label=row.label)
    names = [name for mib, name, _ in _memory_only_rows() if mib == memory_mib]
    bf16, fp8 = False, Fp8Support.NONE
    source = "memory only (nvidia.com/gpu.memory); capabilities assumed absent"
    if compute_capability is not None:
        bf16, fp8 = capabilities_for_cc(compute_capability)
        source = (
            "memory (nvidia.com/gpu.memory) and compute capability "
            f"{compute_capability[0]}.{compute_capability[1]} (GFD compute labels); "
            "capabilities derived from the compute capability"
        )
    return GpuFacts(
        label=f"unknown-{memory_mib}MiB",
        marketing_name=names[0] if len(names) == 1 else f"GPU with {memory_mib} MiB",
        total_mib=memory_mib,
        cuda_total_gib=estimated_cuda_total_gib(memory_mib),
        cuda_total_source="estimated: nvidia-smi MiB minus the driver reservation",
        compute_capability=compute_capability,
        bf16=bf16,
        fp8=fp8,
        source=source,
    )


def closest_labels(label: str, limit: int = 3) -> list[str]:
    """Known labels nearest to `label` (case-insensitive), best first: labels sharing its
    model token (H100, A100, L4 ...) first, then by string similarity."""
    known = known_labels()
    by_upper = {k.upper(): k for k in known}
    tokens = [t for t in re.split(r"[-_ ]+", label.upper()) if t and t not in ("NVIDIA", "TESLA")]
    sharing = [
        k for k in by_upper if any(t in re.split(r"[-_ ]+", k) for t in tokens if len(t) >= 2)
    ]
    ranked = sorted(
        sharing,
        key=lambda k: -difflib.SequenceMatcher(None, f"NVIDIA-{label}".upper(), k).ratio(),
    )
    hits = ranked + [
        h
        for h in difflib.get_close_matches(f"NVIDIA-{label}".upper(), list(by_upper), n=limit)
        if h not in ranked
    ]
    return [by_upper[h] for h in hits[:limit]]
