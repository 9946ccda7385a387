"""Classify the last log lines of a crashed vLLM container into one memory failure, with numbers.

vLLM tells the truth about its memory when it fails: the KV-cache capacity it really had, the
context length that would have fit, the free memory another tenant left. The policy re-plans with
those numbers instead of guessing, so the classifier extracts them. Texts by version
(vllm-versions.md §3.3, domain.md §6):

* V0 `raise_if_cache_size_invalid` (0.5-0.10): "No available memory for the cache blocks" and
  "The model's max seq len (X) is larger than the maximum number of tokens that can be stored in
  KV cache (Y)".
* V1 `check_enough_kv_cache_memory` (0.7.3+): "... max seq len (X), (Y GB KV cache is needed,
  which is larger than the available KV cache memory (Z GB)" (0.7/0.8.0, GB = 1024^3), "GiB" from
  0.8.5, "... the estimated maximum model length is N" from 0.9.2, "models's" fixed to "model's"
  in 0.25.
* V1 0.9.1+: "Free memory on device (F/T GiB) on startup is less than desired GPU memory
  utilization (u, R GiB)" - another process holds memory.
* CUDA out of memory (torch.OutOfMemoryError / torch.cuda.OutOfMemoryError / "CUDA error: out of
  memory") during profiling, CUDA-graph capture or a forward pass while serving.
* "Engine core initialization failed" (V1): the API server's wrapper around any EngineCore
  startup error; alone it only says the failure happened at startup.

Pure: text in, `LogError | None` out.
"""

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class LogErrorKind(StrEnum):
    """The memory failure a log tail shows."""

    KV_CACHE_TOO_SMALL = "KVCacheTooSmall"
    """max_model_len does not fit in the KV cache vLLM could allocate (V0 or V1 message)."""
    NO_CACHE_MEMORY = "NoCacheMemory"
    """Weights plus activations left no memory at all for KV-cache blocks."""
    FREE_MEMORY_BELOW_UTILIZATION = "FreeMemoryBelowUtilization"
    """Another process holds GPU memory: less than util x total was free at startup."""
    CUDA_OOM = "CudaOutOfMemory"
    """CUDA out of memory (profiling, CUDA-graph capture or a forward pass)."""
    ENGINE_INIT_FAILED = "EngineInitFailed"
    """The V1 engine core failed to start, for a reason the tail does not show."""


class OomPhase(StrEnum):
    """When a CUDA out-of-memory error happened."""

    STARTUP = "startup"
    GRAPH_CAPTURE = "graphCapture"
    SERVING = "serving"


class LogError(BaseModel):
    """One classified failure with the numbers vLLM printed (None where the version omits them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: LogErrorKind
    phase: OomPhase = OomPhase.STARTUP
    max_model_len: int | None = Field(default=None, ge=1, description="The requested max seq len.")
    kv_cache_tokens: int | None = Field(
        default=None, ge=0, description="Tokens the KV cache can hold (V0 message)."
    )
    kv_needed_gib: float | None = Field(default=None, ge=0, description="KV GiB one request needs.")
    kv_available_gib: float | None = Field(
        default=None, ge=0, description="KV-cache GiB vLLM had after profiling."
    )
    estimated_max_model_len: int | None = Field(
        default=None, ge=0, description="Longest context that fits (V1 0.9.2+)."
    )
    free_gib: float | None = Field(default=None, ge=0, description="Free GPU memory at startup.")
    total_gib: float | None = Field(default=None, ge=0, description="GPU memory CUDA reports.")
    requested_utilization: float | None = Field(default=None, ge=0, le=1)
    requested_gib: float | None = Field(default=None, ge=0)
    line: str = Field(default="", description="The matching log line, trimmed, for messages.")


_NUM = r"([0-9][0-9,]*)"
_FLOAT = r"([0-9]+(?:\.[0-9]+)?)"

_V0_MAX_LEN = re.compile(
    r"max seq len \(" + _NUM + r"\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \(" + _NUM + r"\)",
    re.IGNORECASE,
)
_V1_NEEDED = re.compile(
    r"max seq len \(" + _NUM + r"\),\s*\(?\s*" + _FLOAT + r"\s*Gi?B KV cache is needed, which is "
    r"larger than the available KV cache\s+memory \(" + _FLOAT + r"\s*Gi?B\)",
    re.IGNORECASE,
)
_ESTIMATED = re.compile(r"estimated maximum model length is " + _NUM, re.IGNORECASE)
_FREE_MEMORY = re.compile(
    r"Free memory on device(?: [^(]*)?\(\s*" + _FLOAT + r"\s*/\s*" + _FLOAT + r"\s*GiB\) on "
    r"startup is less than desired GPU memory utilization\s*\(\s*"
    + _FLOAT
    + r"\s*,\s*"
    + _FLOAT
    + r"\s*GiB\)",
    re.IGNORECASE,
)
_NO_CACHE = re.compile(r"No available memory for the cache blocks", re.IGNORECASE)
_CUDA_OOM = re.compile(
    r"(torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory|CUDA error: out of memory)",
    re.IGNORECASE,
)
_ENGINE_INIT = re.compile(r"Engine core initialization failed", re.IGNORECASE)
_GRAPH_CAPTURE = re.compile(
    r"(Capturing CUDA graph|Capturing cudagraph|capture_model|cuda_graph|CUDAGraph|graph capture)",
    re.IGNORECASE,
)
_SERVING_MARKERS = re.compile(
    r"(Application startup complete|Avg prompt throughput|Uvicorn running on|\"POST /v1/)",
    re.IGNORECASE,
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _line_of(text: str, start: int) -> str:
    begin = text.rfind("\n", 0, start) + 1
    end = text.find("\n", start)
    return text[begin : end if end >= 0 else len(text)].strip()[:512]


def _oom_phase(text: str, at: int) -> OomPhase:
    """Where the OOM happened: after a serving marker, the engine had started serving.

    Before any serving marker, graph-capture lines or frames near the OOM mean the CUDA graphs did
    not fit beside the KV cache (the classic OOM at high gpu_memory_utilization before 0.18).
    """
    before = text[:at]
    if _SERVING_MARKERS.search(before):
        return OomPhase.SERVING
    if _GRAPH_CAPTURE.search(before) or _GRAPH_CAPTURE.search(text, at, at + 2000):
        return OomPhase.GRAPH_CAPTURE
    return OomPhase.STARTUP


def classify_log(text: str) -> LogError | None:
    """Return the memory failure the log tail shows, most specific first, or None.

    The specific startup messages win over a generic CUDA OOM or "Engine core initialization
    failed", because they carry the numbers the policy needs.
    """
    if m := _V1_NEEDED.search(text):
        est = _ESTIMATED.search(text, m.end())
        return LogError(
            kind=LogErrorKind.KV_CACHE_TOO_SMALL,
            max_model_len=_int(m.group(1)),
            kv_needed_gib=float(m.group(2)),
            kv_available_gib=float(m.group(3)),
            estimated_max_model_len=_int(est.group(1)) if est else None,
            line=_line_of(text, m.start()),
        )
    if m := _V0_MAX_LEN.search(text):
        return LogError(
            kind=LogErrorKind.KV_CACHE_TOO_SMALL,
            max_model_len=_int(m.group(1)),
            kv_cache_tokens=_int(m.group(2)),
            line=_line_of(text, m.start()),
        )
    if m := _FREE_MEMORY.search(text):
        return LogError(
            kind=LogErrorKind.FREE_MEMORY_BELOW_UTILIZATION,
            free_gib=float(m.group(1)),
            total_gib=float(m.group(2)),
            requested_utilization=float(m.group(3)),
            requested_gib=float(m.group(4)),
            line=_line_of(text, m.start()),
        )
    if m := _NO_CACHE.search(text):
        return LogError(kind=LogErrorKind.NO_CACHE_MEMORY, line=_line_of(text, m.start()))
    if m := _CUDA_OOM.search(text):
        return LogError(
            kind=LogErrorKind.CUDA_OOM,
            phase=_oom_phase(text, m.start()),
            line=_line_of(text, m.start()),
        )
    if m := _ENGINE_INIT.search(text):
        return LogError(kind=LogErrorKind.ENGINE_INIT_FAILED, line=_line_of(text, m.start()))
    return None
