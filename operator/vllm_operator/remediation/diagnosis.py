"""One classifier for why a vLLM container died: its log text plus its pod history in, a class out.

Used by the remediation policy (through the evaluator) and by `vllm-operator diagnose`, so a person
and the operator always read a crash the same way. Classes (docs/operations.md, "Diagnosis"):

* ``startup-kv-insufficient``: the KV cache vLLM could allocate does not hold one request of
  max_model_len. V0 (0.5-0.10) "max seq len (X) is larger than the maximum number of tokens that
  can be stored in KV cache (Y)" and "No available memory for the cache blocks"; V1 (0.7.3+)
  "... max seq len (X), (N GB|GiB KV cache is needed, which is larger than the available KV cache
  memory (A GiB)", "the estimated maximum model length is E" from 0.9.2.
* ``startup-free-memory``: V1 0.9.1+ "Free memory on device [cuda:N] (F/T GiB) on startup is less
  than desired GPU memory utilization (u, R GiB)": another process holds GPU memory.
* ``startup-cuda-oom`` / ``runtime-cuda-oom``: CUDA out of memory (torch.OutOfMemoryError,
  "CUDA out of memory", "CUDA error: out of memory", driver-level "CUDA driver error: out of
  memory" and CUBLAS_STATUS_ALLOC_FAILED, vLLM's "Failed to load model - not enough GPU memory")
  while loading, profiling or capturing CUDA graphs, or in a forward pass after the server had
  started.
* ``host-oom``: host RAM ran out: the kernel's cgroup killer (container reason OOMKilled, or exit
  137 with no other explanation), the kernel's "Out of memory: Killed process", or Ray's memory
  monitor. Never a GPU problem: GPU arguments cannot help.
* ``unrecognized-arguments``: argparse refused the command line ("error: unrecognized
  arguments: ..."): the rendered flags do not exist in the running image.
* ``other``: a failure that is not a memory problem (NCCL, an illegal memory access, a missing or
  gated model, no GPU platform, a wrong swap-space size, ...). Never called OOM.
* ``unknown``: nothing recognisable (no failure in the text, no termination).

Startup vs runtime comes from the pod's history first (was the container Ready before it died)
and, without it, from the log: startup frames around the error (load_model, profile_run,
determine_available_memory, capture_model, "Failed to load model", "WorkerProc failed to start",
"EngineCore failed to start") mean startup, unless a sign of a started server lies between the
frames and the error (frames after the error, its own traceback, always count); a server
that had started (Application startup complete, request logs, throughput lines) or engine-dead
wrappers (AsyncLLM output_handler failed, EngineDeadError, background loop errored) mean runtime.

Real-world text is messy: tracebacks that start mid-way, hard-wrapped lines (also mid-word),
timestamps and prefixes (kubectl --timestamps, docker compose "svc  | ", Ray's "(Actor pid=N)",
"[rank0]:", vLLM's "ERROR 05-01 14:39:06 [core.py:1131]"), box-drawing borders from terminal
UIs, and re-exports under another logger name (``ray_vllm:``). Matching therefore runs on lines
with those prefixes removed, joined once with spaces (wraps at whitespace) and once without
(wraps mid-word).

Pure: text and values in, a frozen Diagnosis out.
"""

import re
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class FailureClass(StrEnum):
    """What killed the container."""

    STARTUP_KV_INSUFFICIENT = "startup-kv-insufficient"
    STARTUP_FREE_MEMORY = "startup-free-memory"
    STARTUP_CUDA_OOM = "startup-cuda-oom"
    RUNTIME_CUDA_OOM = "runtime-cuda-oom"
    HOST_OOM = "host-oom"
    UNRECOGNIZED_ARGUMENTS = "unrecognized-arguments"
    OTHER = "other"
    UNKNOWN = "unknown"


GPU_MEMORY_CLASSES = frozenset(
    {
        FailureClass.STARTUP_KV_INSUFFICIENT,
        FailureClass.STARTUP_FREE_MEMORY,
        FailureClass.STARTUP_CUDA_OOM,
        FailureClass.RUNTIME_CUDA_OOM,
    }
)
MEMORY_CLASSES = GPU_MEMORY_CLASSES | {FailureClass.HOST_OOM}


class Phase(StrEnum):
    """When the failure happened."""

    STARTUP = "startup"
    RUNTIME = "runtime"


class Numbers(BaseModel):
    """The numbers vLLM (or torch, or Kubernetes) printed; None where the text has none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_model_len: int | None = Field(default=None, ge=1, description="Requested max seq len.")
    kv_cache_tokens: int | None = Field(
        default=None, ge=0, description="Tokens the KV cache holds (V0)."
    )
    kv_needed_gib: float | None = Field(
        default=None, ge=0, description="KV GiB one request needs (V1)."
    )
    kv_available_gib: float | None = Field(
        default=None, ge=0, description="KV GiB after profiling (V1)."
    )
    estimated_max_model_len: int | None = Field(
        default=None, ge=0, description="Longest context that fits (V1 0.9.2+)."
    )
    free_gib: float | None = Field(default=None, ge=0, description="Free GPU memory at startup.")
    total_gib: float | None = Field(default=None, ge=0, description="GPU memory CUDA reports.")
    requested_utilization: float | None = Field(default=None, ge=0, le=1)
    requested_gib: float | None = Field(default=None, ge=0)
    tried_to_allocate_gib: float | None = Field(
        default=None, ge=0, description="The allocation torch could not satisfy."
    )
    gpu_capacity_gib: float | None = Field(default=None, ge=0, description="torch's GPU capacity.")
    gpu_free_gib: float | None = Field(default=None, ge=0, description="torch's free memory then.")
    exit_code: int | None = None

    def present(self) -> dict[str, Any]:
        """Only the numbers the text carried (for JSON and messages)."""
        return self.model_dump(exclude_none=True)


class PodHistory(BaseModel):
    """What the pod status says about the container's last run (values, no API objects)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str | None = Field(default=None, description="lastState.terminated.reason.")
    exit_code: int | None = None
    was_ready: bool | None = Field(
        default=None, description="The container was Ready before it died; None when unknown."
    )
    crash_looping: bool = False
    restart_count: int = Field(default=0, ge=0)


class Diagnosis(BaseModel):
    """One classified failure: class, phase, numbers, and the text that shows it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    failure_class: FailureClass
    phase: Phase | None = None
    numbers: Numbers = Field(default_factory=Numbers)
    graph_capture: bool = Field(
        default=False, description="A startup CUDA OOM while capturing CUDA graphs."
    )
    cause: str = Field(default="", description="Short name of the cause (nccl, gated-model, ...).")
    evidence: str = Field(default="", description="The matching text, trimmed, for messages.")

    @property
    def memory(self) -> bool:
        return self.failure_class in MEMORY_CLASSES

    @property
    def gpu_memory(self) -> bool:
        return self.failure_class in GPU_MEMORY_CLASSES


# ------------------------------------------------------------------------------ text cleanup

_PREFIXES = [
    re.compile(r"^\s*[│|]\s?"),  # terminal UI borders
    re.compile(r"\s*[│]\s*$"),
    re.compile(r"^\s*\[?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s+"),
    re.compile(r"^\s*[\w.-]+\s+\|\s"),  # docker compose "svc-1  | "
    re.compile(r"^\s*\([\w:.-]+(?: [\w]+=[^)\s,]+,?)*\)\s*"),  # (EngineCore_DP0 pid=1)
    re.compile(r"^\s*\[rank\d+\]:\s*"),
    re.compile(r"^\s*(?:ray_)?vllm:\s+(?=\S)(?!error:)"),  # ray_vllm: re-exports
    re.compile(
        r"^\s*(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+"
        r"(?:\[[^\]]+\]|[\w./-]+:\d+\])\s?"
    ),
]


def _clean_line(line: str) -> str:
    previous = None
    while previous != line:
        previous = line
        for pattern in _PREFIXES:
            line = pattern.sub("", line, count=1)
    return line.rstrip()


def _variants(text: str) -> tuple[str, str]:
    lines = [_clean_line(line) for line in text.splitlines()]
    lines = [line for line in lines if line.strip()]
    return " ".join(lines), "".join(lines)


# ------------------------------------------------------------------------------ patterns

_NUM = r"([0-9][0-9,]*)"
_FLOAT = r"([0-9]+(?:\.[0-9]+)?)"
_S = r"\s*"

_UNRECOGNIZED = re.compile(r"error:\s*unrecognized arguments:\s*([^\n]{0,300})", re.IGNORECASE)
_V0_MAX_LEN = re.compile(
    r"max seq len \(" + _NUM + r"\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \(" + _NUM + r"\)",
    re.IGNORECASE,
)
_V1_NEEDED = re.compile(
    r"max seq len \(" + _NUM + r"\),\s*\(?\s*" + _FLOAT + r"\s*Gi?B KV cache is needed, which "
    r"is larger than the available KV cache\s*memory \(" + _FLOAT + r"\s*Gi?B\)",
    re.IGNORECASE,
)
_ESTIMATED = re.compile(r"estimated maximum model length is " + _NUM, re.IGNORECASE)
_NO_CACHE = re.compile(r"No available memory for the cache blocks", re.IGNORECASE)
_FREE_MEMORY = re.compile(
    r"Free memory on device(?: [^(]*)?\("
    + _S
    + _FLOAT
    + _S
    + "/"
    + _S
    + _FLOAT
    + _S
    + r"GiB\) on startup is less than desired GPU memory utilization"
    + _S
    + r"\("
    + _S
    + _FLOAT
    + _S
    + ","
    + _S
    + _FLOAT
    + _S
    + r"GiB\)",
    re.IGNORECASE,
)
_CUDA_OOM = re.compile(
    r"(torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|"
    # Driver-level allocations (the CUDA driver API behind expandable segments, vLLM's cumem
    # allocator for sleep mode, custom ops): the same GPU memory, another wording.
    r"CUDA driver error: out of memory|cuda runtime error \(2\) : out of memory|"
    r"CUBLAS_STATUS_ALLOC_FAILED|"
    # vLLM's own wrapper around a weight-loading OOM (gpu_model_runner.load_model, 0.10+).
    r"Failed to load model - not enough GPU memory)",
    re.IGNORECASE,
)
_TORCH_NUMBERS = re.compile(
    r"Tried to allocate "
    + _FLOAT
    + r"\s*(GiB|MiB|KiB)\.?\s*GPU\s*\d*\s*has a total capacity of "
    + _FLOAT
    + r"\s*(GiB|MiB) of which "
    + _FLOAT
    + r"\s*(GiB|MiB|KiB|bytes)\s*is free",
    re.IGNORECASE,
)
_HOST_OOM_LOG = re.compile(
    r"(Out of memory: Killed process|ray\.exceptions\.OutOfMemoryError|Ray killed this worker"
    r"|killed due to memory pressure \(OOM\)|exceeds the memory usage threshold)",
    re.IGNORECASE,
)
# Not memory problems, though several mention memory: (cause, pattern), first match wins.
_OTHER = [
    ("illegal-memory-access", re.compile(r"illegal memory access", re.IGNORECASE)),
    ("nccl", re.compile(r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandled", re.I)),
    ("gated-model", re.compile(r"401 Client Error|gated repo|GatedRepoError", re.IGNORECASE)),
    (
        "model-not-found",
        re.compile(
            r"Repository Not Found|RepositoryNotFoundError|404 Client Error|is not a local folder "
            r"and is not a valid model identifier|does not appear to have a file named",
            re.IGNORECASE,
        ),
    ),
    (
        "no-gpu-platform",
        re.compile(
            r"Failed to infer device type|No CUDA GPUs are available|Found no NVIDIA driver",
            re.IGNORECASE,
        ),
    ),
    ("swap-space", re.compile(r"Too large swap space", re.IGNORECASE)),
    (
        "unsupported-model",
        re.compile(r"Model architectures? \[[^\]]*\] (?:are|is) not supported", re.I),
    ),
    ("invalid-argument", re.compile(r"error: argument [-\w]+: invalid", re.IGNORECASE)),
    (
        "engine-init-failed",
        re.compile(
            r"Engine core initialization failed|EngineCore failed to start|Engine process failed "
            r"to start|WorkerProc failed to start",
            re.IGNORECASE,
        ),
    ),
]
_EXCEPTION_LINE = re.compile(r"\b([A-Z]\w*(?:Error|Exception)):\s+[^\n]{1,200}")

_STARTUP_FRAMES = re.compile(
    r"(load_model|load_weights|profile_run|determine_available_memory|"
    r"Failed to load model|WorkerProc failed to start|process_weights_after_loading|"
    r"marlin_repack|_init_executor|Exception in worker \w+ while processing method|"
    r"determine_num_available_blocks|initialize_cache|_initialize_kv_caches|"
    r"initialize_from_config|init_device|capture_model|_dummy_run|_dummy_sampler_run|"
    r"EngineCore failed to start|Engine core initialization failed|Engine process failed to start|"
    r"Capturing CUDA graph|Capturing cudagraph|torch\.cuda\.graph|capture_end)",
    re.IGNORECASE,
)
_GRAPH_CAPTURE = re.compile(
    r"(capture_model|Capturing CUDA graph|Capturing cudagraph|torch\.cuda\.graph|capture_end|"
    r"cudagraph capture|graph capture)",
    re.IGNORECASE,
)
_SERVING = re.compile(
    r"(Application startup complete|Avg prompt throughput|Uvicorn running on|\"POST /v1/|"
    r"output_handler failed|EngineDeadError|AsyncEngineDeadError|Background loop has errored|"
    r"run_busy_loop|engine_step|step_async|_process_engine_step|Engine background task failed)",
    re.IGNORECASE,
)
_WINDOW = 6000
"""Characters around an OOM searched for the frames that tell when it happened."""


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _gib(value: str, unit: str) -> float:
    scale = {"gib": 1.0, "mib": 1 / 1024, "kib": 1 / 1024**2, "bytes": 1 / 1024**3}
    return round(float(value) * scale[unit.lower()], 4)


def _evidence(text: str, m: re.Match[str], before: int = 40, after: int = 200) -> str:
    start = max(0, m.start() - before)
    return " ".join(text[start : m.end() + after].split())[:300]


def _search(
    variants: tuple[str, str], pattern: re.Pattern[str]
) -> tuple[str, re.Match[str]] | None:
    for text in variants:
        if m := pattern.search(text):
            return text, m
    return None


def _startup_window(text: str, m: re.Match[str]) -> str | None:
    """The text around an error that shows it happened at startup, or None.

    Startup frames after the error (its traceback, the "failed to start" wrappers) always count.
    Frames before it count only when no sign of a started server (_SERVING) lies between them and
    the error: a log that loaded the model, served, and then ran out keeps its old load lines.
    """
    start = max(0, m.start() - _WINDOW)
    after = text[m.start() : m.end() + _WINDOW]
    if _STARTUP_FRAMES.search(after):
        return text[start : m.end() + _WINDOW]
    before = text[start : m.start()]
    frames = list(_STARTUP_FRAMES.finditer(before))
    if not frames:
        return None
    if _SERVING.search(before, frames[-1].end()):
        return None
    return text[start : m.end() + _WINDOW]


def _log_phase(text: str, m: re.Match[str]) -> tuple[Phase | None, bool]:
    """Startup vs runtime from the text around a CUDA OOM, and whether graph capture ran out."""
    if (window := _startup_window(text, m)) is not None:
        return Phase.STARTUP, bool(_GRAPH_CAPTURE.search(window))
    if _SERVING.search(text):
        return Phase.RUNTIME, False
    return None, False


def _kv(variants: tuple[str, str]) -> Diagnosis | None:
    if found := _search(variants, _V1_NEEDED):
        text, m = found
        est = _ESTIMATED.search(text, m.end())
        return Diagnosis(
            failure_class=FailureClass.STARTUP_KV_INSUFFICIENT,
            phase=Phase.STARTUP,
            numbers=Numbers(
                max_model_len=_int(m.group(1)),
                kv_needed_gib=float(m.group(2)),
                kv_available_gib=float(m.group(3)),
                estimated_max_model_len=_int(est.group(1)) if est else None,
            ),
            evidence=_evidence(text, m),
        )
    if found := _search(variants, _V0_MAX_LEN):
        text, m = found
        return Diagnosis(
            failure_class=FailureClass.STARTUP_KV_INSUFFICIENT,
            phase=Phase.STARTUP,
            numbers=Numbers(max_model_len=_int(m.group(1)), kv_cache_tokens=_int(m.group(2))),
            evidence=_evidence(text, m),
        )
    if found := _search(variants, _NO_CACHE):
        text, m = found
        return Diagnosis(
            failure_class=FailureClass.STARTUP_KV_INSUFFICIENT,
            phase=Phase.STARTUP,
            numbers=Numbers(kv_available_gib=0.0),
            evidence=_evidence(text, m),
        )
    return None


def _from_log(variants: tuple[str, str], history: PodHistory | None) -> Diagnosis | None:
    if found := _search(variants, _UNRECOGNIZED):
        text, m = found
        return Diagnosis(
            failure_class=FailureClass.UNRECOGNIZED_ARGUMENTS,
            phase=Phase.STARTUP,
            cause=m.group(1).strip()[:200],
            evidence=_evidence(text, m, before=0),
        )
    if kv := _kv(variants):
        return kv
    if found := _search(variants, _FREE_MEMORY):
        text, m = found
        return Diagnosis(
            failure_class=FailureClass.STARTUP_FREE_MEMORY,
            phase=Phase.STARTUP,
            numbers=Numbers(
                free_gib=float(m.group(1)),
                total_gib=float(m.group(2)),
                requested_utilization=min(float(m.group(3)), 1.0),
                requested_gib=float(m.group(4)),
            ),
            evidence=_evidence(text, m, before=0),
        )
    if found := _search(variants, _CUDA_OOM):
        text, m = found
        phase, graphs = _log_phase(text, m)
        if history is not None and history.was_ready is not None:
            phase = Phase.RUNTIME if history.was_ready else Phase.STARTUP
            graphs = graphs and phase == Phase.STARTUP
        numbers = Numbers()
        if t := _TORCH_NUMBERS.search(text, m.start()):
            numbers = Numbers(
                tried_to_allocate_gib=_gib(t.group(1), t.group(2)),
                gpu_capacity_gib=_gib(t.group(3), t.group(4)),
                gpu_free_gib=_gib(t.group(5), t.group(6)),
            )
        return Diagnosis(
            failure_class=(
                FailureClass.STARTUP_CUDA_OOM
                if phase == Phase.STARTUP
                else FailureClass.RUNTIME_CUDA_OOM
            ),
            phase=phase,
            numbers=numbers,
            graph_capture=graphs,
            evidence=_evidence(text, m, before=0),
        )
    if found := _search(variants, _HOST_OOM_LOG):
        text, m = found
        return Diagnosis(
            failure_class=FailureClass.HOST_OOM,
            phase=_history_phase(history),
            cause="killed-by-memory-monitor",
            evidence=_evidence(text, m),
        )
    for cause, pattern in _OTHER:
        if found := _search(variants, pattern):
            text, m = found
            return Diagnosis(
                failure_class=FailureClass.OTHER,
                phase=_history_phase(history) or _other_phase(text, m),
                cause=cause,
                evidence=_evidence(text, m, before=0),
            )
    return None


def _history_phase(history: PodHistory | None) -> Phase | None:
    if history is None or history.was_ready is None:
        return None
    return Phase.RUNTIME if history.was_ready else Phase.STARTUP


def _other_phase(text: str, m: re.Match[str]) -> Phase | None:
    if _startup_window(text, m) is not None:
        return Phase.STARTUP
    if _SERVING.search(text):
        return Phase.RUNTIME
    return None


def diagnose(log: str | None, history: PodHistory | None = None) -> Diagnosis:
    """Classify one container failure from its last log lines and/or its pod history.

    The kernel's verdict wins: a container OOMKilled (or SIGKILLed, exit 137, with nothing else in
    the log) ran out of host memory whatever the log says last. Then the log's most specific
    message; then a generic exception line (other); else unknown.
    """
    variants = _variants(log) if log else ("", "")
    exit_code = history.exit_code if history else None
    if history is not None and history.reason == "OOMKilled":
        return Diagnosis(
            failure_class=FailureClass.HOST_OOM,
            phase=_history_phase(history),
            numbers=Numbers(exit_code=exit_code),
            cause="OOMKilled",
            evidence=f"container terminated: OOMKilled (exit {exit_code})",
        )
    found = _from_log(variants, history) if log else None
    if found is not None:
        if exit_code is not None:
            return found.model_copy(
                update={"numbers": found.numbers.model_copy(update={"exit_code": exit_code})}
            )
        return found
    if exit_code == 137:
        return Diagnosis(
            failure_class=FailureClass.HOST_OOM,
            phase=_history_phase(history),
            numbers=Numbers(exit_code=exit_code),
            cause="SIGKILL",
            evidence=f"container terminated: {history.reason if history else 'Error'} (exit 137, "
            "SIGKILL) with no error in its log: killed at its memory limit",
        )
    if log:
        for text in variants[:1]:
            if m := _EXCEPTION_LINE.search(text):
                last = list(_EXCEPTION_LINE.finditer(text))[-1]
                return Diagnosis(
                    failure_class=FailureClass.OTHER,
                    phase=_history_phase(history),
                    numbers=Numbers(exit_code=exit_code),
                    cause=last.group(1),
                    evidence=_evidence(text, last, before=0) or _evidence(text, m, before=0),
                )
    if history is not None and (history.exit_code not in (None, 0) or history.crash_looping):
        return Diagnosis(
            failure_class=FailureClass.OTHER,
            phase=_history_phase(history),
            numbers=Numbers(exit_code=exit_code),
            cause=history.reason or "CrashLoopBackOff",
            evidence=f"container terminated: {history.reason} (exit {exit_code})",
        )
    return Diagnosis(failure_class=FailureClass.UNKNOWN, numbers=Numbers(exit_code=exit_code))


# ------------------------------------------------------------------------------ pod objects

VLLM_CONTAINER = "vllm"


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def container_status(pod: Mapping[str, Any], container: str = VLLM_CONTAINER) -> dict[str, Any]:
    """The named container's status, or the first one (a Pod from another tool names it otherwise)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        if isinstance(status, Mapping) and status.get("name") == container:
            return dict(status)
    return dict(statuses[0]) if statuses and isinstance(statuses[0], Mapping) else {}


def was_ready_before(pod: Mapping[str, Any], terminated: Mapping[str, Any]) -> bool | None:
    """Was the container Ready during its last (terminated) run, as far as the pod status shows.

    Kubernetes keeps one transition time per condition. While the container has not come back
    Ready, the pod's Ready condition is False: if it last turned False after the dead container
    started, the container had been Ready and lost it when it died; if it has been False since
    before, the container never became Ready. Once the replacement is Ready again the history is
    gone (None).
    """
    started = parse_time(terminated.get("startedAt"))
    if started is None:
        return None
    conditions = (pod.get("status") or {}).get("conditions") or []
    ready = next(
        (c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Ready"), None
    )
    if ready is None or ready.get("status") != "False":
        return None
    changed = parse_time(ready.get("lastTransitionTime"))
    if changed is None:
        return None
    return changed > started


def pod_history(pod: Mapping[str, Any], container: str = VLLM_CONTAINER) -> PodHistory | None:
    """The container's last termination as a PodHistory; None when it never terminated."""
    status = container_status(pod, container)
    state = status.get("state") or {}
    terminated = (status.get("lastState") or {}).get("terminated") or state.get("terminated")
    waiting = (state.get("waiting") or {}).get("reason")
    if not terminated:
        if waiting == "CrashLoopBackOff":
            return PodHistory(
                crash_looping=True, restart_count=int(status.get("restartCount") or 0)
            )
        return None
    code = terminated.get("exitCode")
    return PodHistory(
        reason=str(terminated.get("reason") or "Error"),
        exit_code=int(code) if isinstance(code, int) else None,
        was_ready=was_ready_before(pod, terminated),
        crash_looping=waiting == "CrashLoopBackOff",
        restart_count=int(status.get("restartCount") or 0),
    )
