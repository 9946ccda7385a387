"""What a vLLM release means by its memory settings.

Only the memory *semantics* live here (the flag catalog is catalog/vllm/): the era of the
profiler, the meaning and default of gpu_memory_utilization, whether CUDA-graph memory is taken
out of the KV budget, the batch defaults by GPU, chunked-prefill rules and block sizes. Every rule
cites design/vllm-versions.md (VV) or design/domain.md (DM), which cite vLLM's release sources.
"""

import re
from enum import StrEnum
from functools import total_ordering

from pydantic import BaseModel, ConfigDict

from vllm_operator.catalog.vllm.loader import default_version as _catalog_default

DEFAULT_VLLM_VERSION = _catalog_default()
"""The version new services get: the version catalog's default (its newest release), never typed
here, so adding a release to hack/vllm-catalog/versions.txt moves it everywhere at once."""

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?(post\d+|\d+))?")


@total_ordering
class VllmVersion(BaseModel):
    """A release number, ordered (0.6.6.post1 sorts after 0.6.6)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    major: int
    minor: int
    patch: int = 0
    post: int = 0
    text: str

    @classmethod
    def parse(cls, text: str) -> "VllmVersion":
        match = _VERSION_RE.match(text)
        if match is None:
            raise ValueError(f"vLLM version {text!r} is not of the form X.Y.Z (e.g. 0.11.0)")
        fourth = (match[4] or "").removeprefix("post")
        return cls(
            major=int(match[1]),
            minor=int(match[2]),
            patch=int(match[3] or 0),
            post=int(fourth or 0),
            text=text.strip(),
        )

    def key(self) -> tuple[int, int, int, int]:
        return (self.major, self.minor, self.patch, self.post)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, VllmVersion):
            return NotImplemented
        return self.key() < other.key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VllmVersion):
            return NotImplemented
        return self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def at_least(self, text: str) -> bool:
        return self.key() >= VllmVersion.parse(text).key()


class ProfilerEra(StrEnum):
    """How the startup profiler turns device memory into the KV budget (VV §3.1)."""

    V0_TORCH_ONLY = "v0-torch-peak-only"  # <= 0.2.4: torch.cuda.max_memory_allocated (PR #2031)
    V0_DEVICE_DELTA = "v0-device-delta"  # 0.2.5 to 0.6.3: init_free - free_after_profile
    V0_OTHERS_COUNTED = "v0-others-counted"  # 0.6.4: torch peak + (used - torch allocated)
    V0_PER_INSTANCE = "v0-per-instance"  # 0.6.6 to 0.10.x V0 fallback: memory_profiling()
    V1_OTHERS_COUNTED = "v1-others-counted"  # V1 0.7.0 to 0.9.0
    V1_PER_INSTANCE = "v1-per-instance"  # V1 0.9.1+: startup fails if free < util x total


class Engine(StrEnum):
    V0 = "V0"
    V1 = "V1"


class MemorySemantics(BaseModel):
    """Memory rules of one vLLM release on one GPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    engine: Engine
    era: ProfilerEra
    default_gpu_memory_utilization: float
    subtracts_cuda_graphs: bool
    default_max_num_seqs: int
    default_max_num_batched_tokens: int | None  # None: V0 without chunked prefill (see below)
    chunked_prefill_default: bool
    default_block_size: int
    counts_cuda_context: bool
    notes: list[str]


def engine_for(
    version: VllmVersion, compute_capability: tuple[int, int] | None, fp8_kv: bool
) -> Engine:
    """Engine generation actually used (VV 'Engine generations', §5 'V1 engine on sm<80').

    0.5-0.6 V0 only; 0.7 V0 by default; 0.8-0.10 V1 with a silent fallback to V0 for compute
    capability < 8.0 and for fp8 KV cache without FlashAttention-3 (sm90); 0.11+ V1 only.
    """
    if not version.at_least("0.8.0"):
        return Engine.V0
    if version.at_least("0.11.0"):
        return Engine.V1
    if compute_capability is not None and compute_capability < (8, 0):
        return Engine.V0
    if fp8_kv and (compute_capability is None or compute_capability[0] != 9):
        return Engine.V0
    return Engine.V1


def _era(version: VllmVersion, engine: Engine) -> ProfilerEra:
    if engine is Engine.V1:
        return (
            ProfilerEra.V1_PER_INSTANCE
            if version.at_least("0.9.1")
            else ProfilerEra.V1_OTHERS_COUNTED
        )
    if not version.at_least("0.2.5"):
        return ProfilerEra.V0_TORCH_ONLY
    if not version.at_least("0.6.4"):
        return ProfilerEra.V0_DEVICE_DELTA
    if not version.at_least("0.6.6"):
        return ProfilerEra.V0_OTHERS_COUNTED
    return ProfilerEra.V0_PER_INSTANCE


def _is_a100(marketing_name: str) -> bool:
    return "A100" in marketing_name.upper()


def batch_defaults(
    version: VllmVersion,
    engine: Engine,
    gpu_total_gib: float,
    marketing_name: str,
    sm: tuple[int, int] | None,
) -> tuple[int, int | None]:
    """(max_num_seqs, max_num_batched_tokens) when unset, server (`vllm serve`) values.

    VV §5 'GPU-specific defaults': 0.7-0.8.0 by device name (H100/H200: 8192 tokens, else 2048;
    1024 seqs in 0.8.0); 0.8.5 by memory (>= 70 GiB: 8192/1024, else 2048/256); 0.9.0+ also
    excludes the A100; >= 0.30: >= 160 GiB gets 16384/1024. GB10 (sm121, DGX Spark) is on the
    small tier in every release: NVML does not implement the device memory query on this
    unified-memory part (nvmlDeviceGetMemoryInfo returns NOT_SUPPORTED; nvidia-smi shows "Not
    Supported"), so before 0.33 `get_device_total_memory` raises and arg_utils.py's
    `except Exception` takes `device_memory = 0`; 0.33 falls back to torch's total and keeps GB10
    small explicitly (`is_gb10`: "has the memory but not the compute of a large discrete GPU").
    Bench row 115 (DGX Spark, 0.27.1) captures 35 FULL decode graphs: the sizes up to 256.
    V0 keeps 256 sequences and, without chunked prefill, no token default (None: the profiler
    then uses max(max_model_len, 2048), DM §1).
    """
    if engine is Engine.V0:
        return 256, None
    name = marketing_name.upper()
    if not version.at_least("0.8.5"):
        big = "H100" in name or "H200" in name
        return (1024 if version.at_least("0.8.0") else 256), (8192 if big else 2048)
    large = gpu_total_gib >= 70
    if version.at_least("0.9.0") and _is_a100(marketing_name):
        large = False
    if sm == (12, 1):
        return 256, 2048
    if version.at_least("0.30.0") and gpu_total_gib >= 160:
        return 1024, 16384
    return (1024, 8192) if large else (256, 2048)


def semantics_for(
    version_text: str,
    *,
    gpu_total_gib: float,
    marketing_name: str,
    compute_capability: tuple[int, int] | None,
    fp8_kv: bool = False,
) -> MemorySemantics:
    """The memory rules of `version_text` on this GPU."""
    version = VllmVersion.parse(version_text)
    engine = engine_for(version, compute_capability, fp8_kv)
    era = _era(version, engine)
    seqs, tokens = batch_defaults(
        version, engine, gpu_total_gib, marketing_name, compute_capability
    )
    notes: list[str] = []
    if engine is Engine.V0 and version.at_least("0.8.0"):
        notes.append(f"vLLM {version.text} falls back to the V0 engine on this GPU/config")
    # VV §3.1: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default on from 0.20.0 (opt-in 0.18-0.19;
    # 0.18/0.19 log 'In v0.19, CUDA graph memory profiling will be enabled by default', vllm#39559).
    # Later releases log 'CUDA graph memory profiling is enabled (default since v0.21.0)', but a
    # 0.20.0 startup (banner 'version 0.20.0', vllm/vllm-openai:v0.20.0 image) already subtracts
    # the estimate ('--gpu-memory-utilization=0.9000 is equivalent to ... 0.8964 without CUDA
    # graph memory profiling'): the message's version is off by one, the rule starts at 0.20.0.
    subtracts = version.at_least("0.20.0")
    if not subtracts:
        notes.append(
            "CUDA graphs are captured after the KV cache and must fit in (1 - util) x total"
        )
    return MemorySemantics(
        version=version.text,
        engine=engine,
        era=era,
        # DM §1: default 0.90, 0.92 from 0.20
        default_gpu_memory_utilization=0.92 if version.at_least("0.20.0") else 0.90,
        subtracts_cuda_graphs=subtracts,
        default_max_num_seqs=seqs,
        default_max_num_batched_tokens=tokens,
        chunked_prefill_default=engine is Engine.V1,  # DM §3: always on in V1
        default_block_size=16,
        counts_cuda_context=era in (ProfilerEra.V0_OTHERS_COUNTED, ProfilerEra.V1_OTHERS_COUNTED),
        notes=notes,
    )


def v0_chunked_prefill(max_model_len: int) -> bool:
    """V0 turns chunked prefill on by itself for contexts above 32K (VV §3.1 'Peak activation')."""
    return max_model_len > 32768


def mla_block_size(version: VllmVersion, compute_capability: tuple[int, int] | None) -> int | None:
    """Block size an MLA backend forces (VV §5 'MLA block size'): FlashMLA (sm90) 64,
    CUTLASS-MLA (Blackwell, sm100) 128; None where the version leaves the default."""
    if compute_capability is None or not version.at_least("0.8.0"):
        return None
    if compute_capability[0] == 10:
        return 128
    if compute_capability[0] == 9:
        return 64
    return None


def accepted_block_sizes(version: VllmVersion) -> tuple[int, ...] | None:
    """Values `--block-size` accepts (VV §1 flag matrix); None: any positive int (0.18+,
    FlashAttention needs a multiple of 16)."""
    if version.at_least("0.18.0"):
        return None
    if version.at_least("0.11.2"):
        return (1, 8, 16, 32, 64, 128, 256)
    if version.at_least("0.8.5"):
        return (1, 8, 16, 32, 64, 128)
    if version.at_least("0.6.4"):
        return (8, 16, 32, 64, 128)
    if version.at_least("0.5.5") and not version.at_least("0.6.0"):
        return (8, 16, 32, 128, 256, 512, 1024, 2048)
    return (8, 16, 32)


def v0_chunked_batched_tokens(version: VllmVersion) -> int:
    """V0's max_num_batched_tokens default once chunked prefill is on: 512 through 0.6.4,
    2048 from 0.6.6 (VV §1 flag matrix)."""
    return 2048 if version.at_least("0.6.6") else 512
