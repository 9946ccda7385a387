"""The NVML functions the probe calls, as a Protocol, and the real binding (pynvml).

Why a Protocol: the probe must be testable on machines without GPUs. `NvmlLike` names exactly the
pynvml functions and constants the reader uses, with pynvml's own names and return shapes, so the
real module and `FakeNvml` (fake.py) are interchangeable and passed in explicitly.

Errors keep pynvml's types on both sides: the fake raises real `pynvml.NVMLError` subclasses built
from NVML return codes, so the reader's error handling is the one that runs in production.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

import pynvml

NVMLError = pynvml.NVMLError

# Return codes the reader branches on (the values of nvml.h).
ERROR_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
ERROR_NO_PERMISSION: int = pynvml.NVML_ERROR_NO_PERMISSION
ERROR_NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
ERROR_LIBRARY_NOT_FOUND: int = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
ERROR_FUNCTION_NOT_FOUND: int = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
ERROR_GPU_IS_LOST: int = pynvml.NVML_ERROR_GPU_IS_LOST
ERROR_UNINITIALIZED: int = pynvml.NVML_ERROR_UNINITIALIZED
ERROR_DRIVER_NOT_LOADED: int = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
ERROR_ARGUMENT_VERSION_MISMATCH: int = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
ERROR_INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
DEVICE_MIG_ENABLE: int = pynvml.NVML_DEVICE_MIG_ENABLE


def nvml_error(code: int) -> Exception:
    """The pynvml exception NVML raises for `code` (the matching NVMLError_* subclass)."""
    return cast(Exception, pynvml.NVMLError(code))


def error_code(exc: BaseException) -> int | None:
    """The NVML return code of an NVMLError, None for anything else."""
    value = getattr(exc, "value", None) if isinstance(exc, pynvml.NVMLError) else None
    return value if isinstance(value, int) else None


def error_text(exc: BaseException) -> str:
    """A short, stable description: 'NVML_ERROR_<code>: <pynvml text>' or the exception type."""
    code = error_code(exc)
    if code is None:
        return f"{type(exc).__name__}: {exc}"
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ calls into the library, which may be the broken part
        text = "NVML error"
    return f"NVML error {code}: {text}"


class MemoryInfo(Protocol):
    """nvmlMemory_t (total/free/used) or nvmlMemory_v2_t (plus reserved), in bytes."""

    @property
    def total(self) -> int: ...
    @property
    def free(self) -> int: ...
    @property
    def used(self) -> int: ...


class ProcessInfo(Protocol):
    """nvmlProcessInfo_t as pynvml returns it; usedGpuMemory is None when NVML cannot say."""

    @property
    def pid(self) -> int: ...
    @property
    def usedGpuMemory(self) -> int | None: ...  # noqa: N802 - pynvml's field name


class NvmlLike(Protocol):
    """Exactly the pynvml surface the probe uses (real module or FakeNvml)."""

    nvmlMemory_v2: int

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlSystemGetCudaDriverVersion_v2(self) -> int: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> MemoryInfo: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> Sequence[int]: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Sequence[ProcessInfo]: ...


def real_nvml() -> NvmlLike:
    """The pynvml module itself. Loading libnvidia-ml.so happens in nvmlInit, not here, so a node
    without the driver still gets a probe that reports NVML_ERROR_LIBRARY_NOT_FOUND."""
    return cast(NvmlLike, pynvml)
