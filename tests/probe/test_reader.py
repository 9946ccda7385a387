"""nvml.reader against FakeNvml fixtures with real nvidia-smi totals (gpu-catalog.csv)."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from tests.probe.conftest import NOW, VLLM_CONTAINER_ID, VLLM_POD_UID, fake, state
from vllm_operator.api.probe import ContainerRef, PlanningBudget, planning_budget
from vllm_operator.nvml.fake import FakeNvml, FakeState
from vllm_operator.nvml.reader import NvmlReader, pod_of_process


def test_idle_h100_pair_reads_v2_memory_versions_and_capability() -> None:
    result = NvmlReader(fake("h100-idle"), proc_root=None).read("gpu-h100-0", NOW)
    b = result.budget
    assert result.errors == [] and result.nvml_up
    assert (b.node, b.driver_version, b.cuda_driver_version) == ("gpu-h100-0", "550.54.15", "12.4")
    assert [g.index for g in b.gpus] == [0, 1]
    h100 = b.gpus[0]
    assert (h100.name, h100.total_mib, h100.compute_capability) == (
        "NVIDIA H100 80GB HBM3",
        81559,
        "9.0",
    )
    assert (h100.free_mib, h100.used_mib, h100.reserved_mib) == (81005, 1, 553)
    assert h100.free_mib + h100.used_mib + (h100.reserved_mib or 0) == h100.total_mib
    assert not h100.mig_enabled and h100.processes == []


def test_a100_in_mig_mode_reports_slices_with_their_processes() -> None:
    nvml = fake("a100-mig")
    b = NvmlReader(nvml, proc_root=None).read("gpu-a100-0", NOW).budget
    (a100,) = b.gpus
    assert a100.mig_enabled and a100.total_mib == 40960 and a100.compute_capability == "8.0"
    assert [(m.index, m.name.rsplit(" ", 1)[-1], m.total_mib) for m in a100.mig_devices] == [
        (0, "3g.20gb", 19968),
        (3, "1g.5gb", 4864),
        (4, "1g.5gb", 4864),
    ]
    assert [(p.pid, p.used_mib) for p in a100.mig_devices[0].processes] == [(31337, 14350)]
    # the parent's process list needs privileges in MIG mode: the reader does not ask for it
    assert a100.processes == [] and a100.error is None
    # empty slots 1, 2, 5, 6 were probed and skipped (NVML_ERROR_NOT_FOUND)
    assert nvml.calls["nvmlDeviceGetMigDeviceHandleByIndex"] == 7


def test_shared_l4_maps_the_vllm_pod_and_leaves_the_other_tenant_unmapped(proc_root: Path) -> None:
    b = NvmlReader(fake("l4-shared"), proc_root=proc_root).read("gpu-l4-0", NOW).budget
    (l4,) = b.gpus
    other, vllm = l4.processes
    assert (other.pid, other.used_mib, other.pod_uid) == (4242, 6100, None)
    assert (vllm.pid, vllm.used_mib) == (5151, 12000)
    assert (vllm.pod_uid, vllm.container_id) == (VLLM_POD_UID, VLLM_CONTAINER_ID)
    replan = planning_budget(b, margin_mib=512, own_pod_uids={VLLM_POD_UID})
    assert isinstance(replan, PlanningBudget)
    assert (replan.usable_mib, replan.other_tenants_mib) == (4480 + 12000 - 512, 6100)


class Pods:
    def __init__(self) -> None:
        self.refreshes = 0

    def containers(self, refresh: bool) -> dict[str, ContainerRef]:
        self.refreshes += refresh
        if not refresh:
            return {}
        return {
            VLLM_CONTAINER_ID: ContainerRef(namespace="llm", pod="chat-l4-abc", container="vllm")
        }


def test_pod_lookup_names_pods_and_refreshes_only_for_unknown_containers(proc_root: Path) -> None:
    pods = Pods()
    b = NvmlReader(fake("l4-shared"), proc_root=proc_root, pods=pods).read("n", NOW).budget
    vllm = b.gpus[0].processes[1]
    assert (vllm.namespace, vllm.pod, vllm.container) == ("llm", "chat-l4-abc", "vllm")
    assert pods.refreshes == 1


@pytest.mark.parametrize(
    ("cgroup", "expected"),
    [
        (
            "12:memory:/kubepods/burstable/pod0d6f3a1c-2b4e-4f58-9a7c-1e2d3c4b5a69/"
            + "a" * 64
            + "\n",
            ("0d6f3a1c-2b4e-4f58-9a7c-1e2d3c4b5a69", "a" * 64),
        ),
        (
            "0::/kubepods.slice/kubepods-pod0d6f3a1c_2b4e_4f58_9a7c_1e2d3c4b5a69.slice/"
            "cri-containerd-" + "b" * 64 + ".scope\n",
            ("0d6f3a1c-2b4e-4f58-9a7c-1e2d3c4b5a69", "b" * 64),
        ),
        ("0::/system.slice/nvidia-persistenced.service\n", (None, None)),
    ],
)
def test_pod_of_process_reads_cgroup_v1_and_v2(
    tmp_path: Path, cgroup: str, expected: tuple[str | None, str | None]
) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text(cgroup)
    assert pod_of_process(7, tmp_path) == expected
    assert pod_of_process(8, tmp_path) == (None, None)  # gone, or another PID namespace


def test_old_driver_falls_back_to_memory_v1_once() -> None:
    nvml = fake("t4-old-driver")
    reader = NvmlReader(nvml, proc_root=None)
    (t4,) = reader.read("gpu-t4-0", NOW).budget.gpus
    assert (t4.name, t4.total_mib, t4.compute_capability) == ("Tesla T4", 15360, "7.5")
    assert t4.reserved_mib is None and t4.used_mib == 3 + 255  # v1 counts the reserve as used
    assert t4.processes[0].used_mib is None  # NVML_VALUE_NOT_AVAILABLE
    reader.read("gpu-t4-0", NOW)
    assert nvml.calls["nvmlDeviceGetMemoryInfo"] == 3  # v2 tried once, then v1 twice


def test_missing_library_is_reported_in_the_budget_and_retried() -> None:
    nvml = fake("nvml-missing")
    reader = NvmlReader(nvml, proc_root=None)
    result = reader.read("gpu-h100-0", NOW)
    assert not result.nvml_up and result.errors == ["init"]
    assert result.budget.gpus == []
    assert result.budget.error == "init: NVML error 12: NVML Shared Library Not Found"
    nvml.load(state("h100-idle"))  # the driver got installed
    recovered = reader.read("gpu-h100-0", NOW)
    assert recovered.nvml_up and len(recovered.budget.gpus) == 2
    assert nvml.calls["nvmlInit"] == 2


def test_failing_driver_is_reported_and_nvml_kept_initialised() -> None:
    nvml = fake("nvml-failing")
    result = NvmlReader(nvml, proc_root=None).read("n", NOW)
    assert result.budget.error == "system: NVML error 999: Unknown Error"
    assert result.errors == ["system"]


def test_gpu_lost_between_reads_is_left_out_and_nvml_reinitialised() -> None:
    nvml = fake("h100-idle")
    reader = NvmlReader(nvml, proc_root=None)
    assert len(reader.read("n", NOW).budget.gpus) == 2
    nvml.load(state("h100-gpu1-lost"))
    result = reader.read("n", NOW)
    assert [g.uuid for g in result.budget.gpus] == ["GPU-5f3a6c1e-0b8d-4c1a-9e0f-1d2c3b4a5f60"]
    assert result.errors == ["gpu_lost"] and result.nvml_up
    assert nvml.initialised == 0  # shut down after GPU_IS_LOST ...
    reader.read("n", NOW)
    assert nvml.calls["nvmlInit"] == 2  # ... and initialised again on the next read


def test_processes_without_permission_become_a_gpu_error() -> None:
    s = state("l4-shared")
    s.devices[0].processes_error = pynvml.NVML_ERROR_NO_PERMISSION
    result = NvmlReader(FakeNvml(s), proc_root=None).read("n", NOW)
    (l4,) = result.budget.gpus
    assert l4.processes == [] and l4.error == "processes: NVML error 4: Insufficient Permissions"
    assert result.errors == ["processes"] and result.nvml_up


def test_fake_raises_real_pynvml_errors() -> None:
    nvml = FakeNvml(FakeState())
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(0)


def test_fixtures_use_catalog_totals(repo: Path) -> None:
    import csv

    catalog = {
        row["marketing_name"]: int(row["total_mib"])
        for row in csv.DictReader(
            (repo / "operator/vllm_operator/catalog/data/gpu-catalog.csv").read_text().splitlines()
        )
        if row["total_mib"]
    }
    expect = {
        "h100-idle": "NVIDIA H100 SXM5 80GB",
        "a100-mig": "NVIDIA A100 40GB SXM4",
        "l4-shared": "NVIDIA L4",
        "t4-old-driver": "NVIDIA T4",
    }
    for name, marketing in expect.items():
        for device in state(name).devices:
            assert device.memory_mib.total == catalog[marketing], name


def test_real_binding_never_raises_on_this_machine() -> None:
    """The real pynvml: GPUs where a driver is installed, a NVML error budget everywhere else."""
    from vllm_operator.nvml.binding import real_nvml

    reader = NvmlReader(real_nvml(), proc_root=None)
    try:
        result = reader.read("this-node", NOW)
    finally:
        reader.close()
    if result.nvml_up:
        assert result.budget.driver_version and all(g.total_mib > 0 for g in result.budget.gpus)
    else:
        assert result.budget.error is not None and result.budget.error.startswith(
            "init: NVML error"
        )
