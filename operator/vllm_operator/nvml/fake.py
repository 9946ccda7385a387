"""An NVML-shaped fake, driven by fixture files, for testing the probe without GPUs.

Why: the probe's job is to interpret NVML faithfully (memory v1 vs v2, MIG slices, processes that
NVML cannot attribute, GPUs that fall off the bus, a missing driver). `FakeNvml` implements the
same functions as pynvml with the same return shapes and raises real `pynvml.NVMLError`
subclasses, so the reader under test is the production reader. It is always passed in explicitly
(`NvmlReader(FakeNvml.from_file(...))`, `vllm-operator probe --fake-nvml FILE`), never patched in.

A fixture is JSON; memory is given in MiB as nvidia-smi prints it (converted to bytes here):

    {"driverVersion": "550.54.15", "cudaDriverVersion": 12040,
     "devices": [{"name": "NVIDIA L4", "uuid": "GPU-...", "computeCapability": [8, 9],
                  "memoryMiB": {"total": 23034, "reserved": 434, "used": 6120, "free": 16480},
                  "processes": [{"pid": 4242, "usedMiB": 6100}]}],
     "errors": {"nvmlInit": 12}}

`errors` maps a function name to the NVML return code it raises; `load()` swaps the state between
two reads (a GPU disappearing, a tenant starting).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.nvml import binding

MIB = 1024 * 1024
MEMORY_V2 = 0x02000028  # pynvml.nvmlMemory_v2


class _Fixture(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FakeMemory(_Fixture):
    total: int = Field(ge=0)
    free: int = Field(ge=0)
    used: int = Field(ge=0)
    reserved: int = Field(default=0, ge=0)


class FakeProcess(_Fixture):
    pid: int = Field(ge=0)
    used_mib: int | None = Field(default=None, alias="usedMiB", ge=0)


class FakeMigDevice(_Fixture):
    slot: int = Field(ge=0)
    name: str
    uuid: str
    memory_mib: FakeMemory = Field(alias="memoryMiB")
    processes: list[FakeProcess] = Field(default_factory=list)


class FakeDevice(_Fixture):
    name: str
    uuid: str
    memory_mib: FakeMemory = Field(alias="memoryMiB")
    compute_capability: tuple[int, int] = Field(alias="computeCapability")
    mig_mode: tuple[int, int] | None = Field(default=None, alias="migMode")
    max_mig_device_count: int = Field(default=7, alias="maxMigDeviceCount")
    mig_devices: list[FakeMigDevice] = Field(default_factory=list, alias="migDevices")
    processes: list[FakeProcess] = Field(default_factory=list)
    processes_error: int | None = Field(default=None, alias="processesError")
    lost: bool = False


class FakeState(_Fixture):
    description: str = ""
    source: str = ""
    driver_version: str = Field(default="550.54.15", alias="driverVersion")
    cuda_driver_version: int = Field(default=12040, alias="cudaDriverVersion")
    memory_v2: bool = Field(default=True, alias="memoryV2")
    devices: list[FakeDevice] = Field(default_factory=list)
    errors: dict[str, int] = Field(default_factory=dict)


@dataclass(frozen=True)
class FakeHandle:
    """nvmlDevice_t: a GPU index, plus a MIG slot for MIG device handles."""

    index: int
    mig_slot: int | None = None


@dataclass
class FakeMemoryInfo:
    total: int
    free: int
    used: int
    reserved: int = 0
    version: int = 0


@dataclass
class FakeProcessInfo:
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - pynvml's field name
    gpuInstanceId: int = 0xFFFFFFFF  # noqa: N815
    computeInstanceId: int = 0xFFFFFFFF  # noqa: N815


class FakeNvml:
    """NvmlLike over a FakeState. Counts calls so tests can assert what the probe asked."""

    nvmlMemory_v2 = MEMORY_V2

    def __init__(self, state: FakeState) -> None:
        self.state = state
        self.initialised = 0
        self.calls: dict[str, int] = {}

    @classmethod
    def from_file(cls, path: Path | str) -> FakeNvml:
        return cls(load_state(path))

    def load(self, state: FakeState) -> None:
        """Swap what the GPUs report from now on (handles taken earlier may now be lost)."""
        self.state = state

    # -- helpers ---------------------------------------------------------------------------

    def _enter(self, name: str, *, needs_init: bool = True) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        code = self.state.errors.get(name)
        if code is not None:
            raise binding.nvml_error(code)
        if needs_init and self.initialised <= 0:
            raise binding.nvml_error(binding.ERROR_UNINITIALIZED)

    def _device(self, handle: Any) -> FakeDevice:
        if not isinstance(handle, FakeHandle):
            raise binding.nvml_error(binding.ERROR_INVALID_ARGUMENT)
        if handle.index >= len(self.state.devices) or self.state.devices[handle.index].lost:
            raise binding.nvml_error(binding.ERROR_GPU_IS_LOST)
        return self.state.devices[handle.index]

    def _mig(self, handle: FakeHandle) -> FakeMigDevice | None:
        if handle.mig_slot is None:
            return None
        for mig in self._device(handle).mig_devices:
            if mig.slot == handle.mig_slot:
                return mig
        raise binding.nvml_error(binding.ERROR_GPU_IS_LOST)

    # -- the NvmlLike surface --------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit", needs_init=False)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.state.driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return self.state.cuda_driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.state.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.state.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if index < 0 or index >= len(self.state.devices):
            raise binding.nvml_error(binding.ERROR_INVALID_ARGUMENT)
        handle = FakeHandle(index)
        self._device(handle)
        return handle

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetName")
        mig = self._mig(handle)
        return mig.name if mig else self._device(handle).name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetUUID")
        mig = self._mig(handle)
        return mig.uuid if mig else self._device(handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> FakeMemoryInfo:
        self._enter("nvmlDeviceGetMemoryInfo")
        mig = self._mig(handle)
        mem = mig.memory_mib if mig else self._device(handle).memory_mib
        if version:
            if not self.state.memory_v2:  # pynvml: the _v2 symbol is missing from old drivers
                raise binding.nvml_error(binding.ERROR_FUNCTION_NOT_FOUND)
            return FakeMemoryInfo(
                total=mem.total * MIB,
                free=mem.free * MIB,
                used=mem.used * MIB,
                reserved=mem.reserved * MIB,
                version=version,
            )
        # nvmlMemory_t (v1) counts the driver reserve as used
        return FakeMemoryInfo(
            total=mem.total * MIB, free=mem.free * MIB, used=(mem.used + mem.reserved) * MIB
        )

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability")
        return self._device(handle).compute_capability

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        device = self._device(handle)
        if device.mig_mode is None:
            raise binding.nvml_error(binding.ERROR_NOT_SUPPORTED)
        return list(device.mig_mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        device = self._device(handle)
        if device.mig_mode is None:
            raise binding.nvml_error(binding.ERROR_NOT_SUPPORTED)
        return device.max_mig_device_count

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        device = self._device(handle)
        if not any(m.slot == index for m in device.mig_devices):
            raise binding.nvml_error(binding.ERROR_NOT_FOUND)
        return FakeHandle(handle.index, index)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[FakeProcessInfo]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        mig = self._mig(handle)
        device = self._device(handle)
        if mig is None and device.processes_error is not None:
            raise binding.nvml_error(device.processes_error)
        procs = mig.processes if mig else device.processes
        return [
            FakeProcessInfo(p.pid, None if p.used_mib is None else p.used_mib * MIB) for p in procs
        ]


def load_state(path: Path | str) -> FakeState:
    """A fixture file parsed (unknown keys rejected, so a typo cannot silently fake a GPU)."""
    return FakeState.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
