"""One NVML read of every GPU of the node, turned into a `GpuBudget`.

Why this shape: a probe that dies or publishes nothing is worse than one that says what failed.
Every NVML failure becomes data: a library that cannot be loaded or initialised becomes the
budget's `error`; a GPU that falls off the bus is left out of the list (so the annotation shows it
gone); a per-GPU detail that cannot be read (processes without permission) becomes that GPU's
`error`. Failures are also returned as short reasons for the probe's error counter.

NVML stays initialised between reads; after a failure that can mean a driver reload (GPU lost,
uninitialised, driver not loaded) the reader shuts it down and initialises again on the next read.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from vllm_operator import __version__
from vllm_operator.api.probe import ContainerRef, GpuBudget, GpuDevice, GpuProcess, MigDevice
from vllm_operator.nvml import binding
from vllm_operator.nvml.binding import NvmlLike

log = logging.getLogger(__name__)

MIB = 1024 * 1024

_REINIT_CODES = {
    binding.ERROR_GPU_IS_LOST,
    binding.ERROR_UNINITIALIZED,
    binding.ERROR_DRIVER_NOT_LOADED,
}
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
_CONTAINER_ID = re.compile(r"([0-9a-f]{64})(?:\.scope)?$")


class PodLookup(Protocol):
    """Maps container IDs (as in a cgroup path) to pods; implemented in kube.node_annotations."""

    def containers(self, refresh: bool) -> Mapping[str, ContainerRef]: ...


def pod_of_process(pid: int, proc_root: Path) -> tuple[str | None, str | None]:
    """(pod UID, container ID) from /proc/<pid>/cgroup, or Nones for non-pod or unreadable PIDs.

    Handles cgroup v1 (`/kubepods/burstable/pod<uid>/<id>`) and v2 with the systemd driver
    (`kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope`). Needs the
    host's PID namespace (DaemonSet hostPID: true): NVML reports host PIDs.
    """
    try:
        text = (proc_root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None, None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        uid = _POD_UID.search(path)
        if uid is None:
            continue
        container = _CONTAINER_ID.search(path)
        return uid.group(1).replace("_", "-"), container.group(1) if container else None
    return None, None


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _cuda_version(value: int) -> str:
    """NVML's 12040 -> '12.4' (major*1000 + minor*10)."""
    return f"{value // 1000}.{(value % 1000) // 10}"


@dataclass
class ReadResult:
    """A budget and the failure reasons met while building it (for the errors counter)."""

    budget: GpuBudget
    errors: list[str] = field(default_factory=list)

    @property
    def nvml_up(self) -> bool:
        return self.budget.error is None


class NvmlReader:
    """Reads NVML through an injected `NvmlLike` (pynvml itself, or FakeNvml in tests)."""

    def __init__(
        self,
        nvml: NvmlLike,
        *,
        proc_root: Path | None = Path("/proc"),
        pods: PodLookup | None = None,
    ) -> None:
        self.nvml = nvml
        self.proc_root = proc_root
        self.pods = pods
        self._initialised = False
        self._memory_v2 = True

    def close(self) -> None:
        if self._initialised:
            self._initialised = False
            try:
                self.nvml.nvmlShutdown()
            except Exception as exc:  # shutting down a broken library must not fail the probe
                log.debug("NVML shutdown failed: %s", exc)

    def read(self, node: str, now: datetime) -> ReadResult:
        """Everything NVML says about this node's GPUs right now; never raises for NVML trouble."""
        errors: list[str] = []

        def failed(where: str, exc: BaseException) -> GpuBudget:
            errors.append(where)
            if binding.error_code(exc) in _REINIT_CODES or where == "init":
                self.close()
            return GpuBudget(
                node=node,
                observed_at=now,
                probe_version=__version__,
                error=f"{where}: {binding.error_text(exc)}",
            )

        if not self._initialised:
            try:
                self.nvml.nvmlInit()
            except Exception as exc:
                return ReadResult(failed("init", exc), errors)
            self._initialised = True
        try:
            driver = _text(self.nvml.nvmlSystemGetDriverVersion())
            count = self.nvml.nvmlDeviceGetCount()
        except Exception as exc:
            return ReadResult(failed("system", exc), errors)
        cuda = self._cuda(errors)
        gpus: list[GpuDevice] = []
        for index in range(count):
            try:
                gpus.append(self._gpu(index, errors))
            except Exception as exc:
                # The GPU fell off the bus (or its handle went stale) between count and read:
                # leave it out, so the published budget shows it gone.
                errors.append("gpu_lost" if binding.error_code(exc) is not None else "gpu_read")
                log.warning("Skipped GPU index=%d reason=%s", index, binding.error_text(exc))
                if binding.error_code(exc) in _REINIT_CODES:
                    self.close()
        budget = GpuBudget(
            node=node,
            observed_at=now,
            probe_version=__version__,
            driver_version=driver,
            cuda_driver_version=cuda,
            gpus=self._attach_pods(gpus),
        )
        return ReadResult(budget, errors)

    # -- pieces ----------------------------------------------------------------------------

    def _cuda(self, errors: list[str]) -> str | None:
        for fn in (
            self.nvml.nvmlSystemGetCudaDriverVersion_v2,
            self.nvml.nvmlSystemGetCudaDriverVersion,
        ):
            try:
                return _cuda_version(fn())
            except Exception as exc:
                log.debug("CUDA driver version not read: %s", binding.error_text(exc))
        errors.append("cuda_version")
        return None

    def _memory(self, handle: Any) -> tuple[int, int, int, int | None]:
        """(total, free, used, reserved) in MiB; v2 where the driver has it (used excludes the
        reserve there), v1 otherwise (reserve unknown, counted in used)."""
        if self._memory_v2:
            try:
                mem: Any = self.nvml.nvmlDeviceGetMemoryInfo(
                    handle, version=self.nvml.nvmlMemory_v2
                )
                return (
                    mem.total // MIB,
                    mem.free // MIB,
                    mem.used // MIB,
                    int(mem.reserved) // MIB,
                )
            except binding.NVMLError as exc:
                if binding.error_code(exc) not in {
                    binding.ERROR_FUNCTION_NOT_FOUND,
                    binding.ERROR_NOT_SUPPORTED,
                    binding.ERROR_ARGUMENT_VERSION_MISMATCH,
                }:
                    raise
                log.info("Fell back to NVML memory v1 reason=%s", binding.error_text(exc))
                self._memory_v2 = False
        mem = self.nvml.nvmlDeviceGetMemoryInfo(handle)
        return mem.total // MIB, mem.free // MIB, mem.used // MIB, None

    def _processes(self, handle: Any) -> list[GpuProcess]:
        procs = []
        for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            used = p.usedGpuMemory
            pod_uid, container_id = (
                pod_of_process(p.pid, self.proc_root) if self.proc_root else (None, None)
            )
            procs.append(
                GpuProcess(
                    pid=p.pid,
                    used_mib=None if used is None else used // MIB,
                    pod_uid=pod_uid,
                    container_id=container_id,
                )
            )
        return sorted(procs, key=lambda p: p.pid)

    def _gpu(self, index: int, errors: list[str]) -> GpuDevice:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        name = _text(nvml.nvmlDeviceGetName(handle))
        total, free, used, reserved = self._memory(handle)
        try:
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            capability: str | None = f"{major}.{minor}"
        except binding.NVMLError:
            errors.append("compute_capability")
            capability = None
        try:
            mig_enabled = nvml.nvmlDeviceGetMigMode(handle)[0] == binding.DEVICE_MIG_ENABLE
        except binding.NVMLError as exc:
            if binding.error_code(exc) != binding.ERROR_NOT_SUPPORTED:
                raise
            mig_enabled = False
        migs = self._migs(handle) if mig_enabled else []
        problem: str | None = None
        processes: list[GpuProcess] = []
        if not mig_enabled:  # in MIG mode processes are per slice (the parent needs privileges)
            try:
                processes = self._processes(handle)
            except binding.NVMLError as exc:
                errors.append("processes")
                problem = f"processes: {binding.error_text(exc)}"
        return GpuDevice(
            index=index,
            uuid=uuid,
            name=name,
            total_mib=total,
            free_mib=free,
            used_mib=used,
            reserved_mib=reserved,
            compute_capability=capability,
            mig_enabled=mig_enabled,
            mig_devices=migs,
            processes=processes,
            error=problem,
        )

    def _migs(self, handle: Any) -> list[MigDevice]:
        nvml = self.nvml
        migs = []
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except binding.NVMLError as exc:
                if binding.error_code(exc) == binding.ERROR_NOT_FOUND:
                    continue  # an empty slot
                raise
            total, free, used, reserved = self._memory(mig)
            migs.append(
                MigDevice(
                    index=slot,
                    uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                    name=_text(nvml.nvmlDeviceGetName(mig)),
                    total_mib=total,
                    free_mib=free,
                    used_mib=used,
                    reserved_mib=reserved,
                    processes=self._processes(mig),
                )
            )
        return migs

    def _attach_pods(self, gpus: list[GpuDevice]) -> list[GpuDevice]:
        """Names pods, namespaces and containers when a PodLookup is given (optional)."""
        if self.pods is None:
            return gpus
        wanted = {
            p.container_id
            for g in gpus
            for p in [*g.processes, *(q for m in g.mig_devices for q in m.processes)]
            if p.container_id
        }
        if not wanted:
            return gpus
        try:
            known = self.pods.containers(refresh=False)
            if wanted - set(known):
                known = self.pods.containers(refresh=True)
        except Exception as exc:  # naming pods is a nicety: never fail the read for it
            log.warning("Pod lookup failed: %s", exc)
            return gpus

        def named(procs: list[GpuProcess]) -> list[GpuProcess]:
            out = []
            for p in procs:
                ref = known.get(p.container_id or "")
                out.append(
                    p
                    if ref is None
                    else p.model_copy(
                        update={
                            "namespace": ref.namespace,
                            "pod": ref.pod,
                            "container": ref.container,
                        }
                    )
                )
            return out

        return [
            g.model_copy(
                update={
                    "processes": named(g.processes),
                    "mig_devices": [
                        m.model_copy(update={"processes": named(m.processes)})
                        for m in g.mig_devices
                    ],
                }
            )
            for g in gpus
        ]
