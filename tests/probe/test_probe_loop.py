"""nvml.probe: publish on change, rate-limited, heartbeat, failures; metrics of nvml.metrics."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.probe.conftest import NOW, VLLM_POD_UID, RecordingPublisher, fake, state
from vllm_operator.api.probe import GPU_BUDGET_ANNOTATION, BudgetReading, parse_budget
from vllm_operator.nvml.fake import FakeNvml
from vllm_operator.nvml.probe import Probe, ProbeSettings
from vllm_operator.nvml.reader import NvmlReader


class Clock:
    """Both clocks of the probe, moved by the test."""

    def __init__(self) -> None:
        self.t = 0.0

    def wall(self) -> datetime:
        return NOW + timedelta(seconds=self.t)

    def mono(self) -> float:
        return self.t


def make(
    nvml: FakeNvml,
    publisher: RecordingPublisher | None,
    proc_root: Path | None = None,
    **settings: float,
) -> tuple[Probe, Clock]:
    clock = Clock()
    probe = Probe(
        NvmlReader(nvml, proc_root=proc_root),
        ProbeSettings(node_name="gpu-l4-0", **settings),  # type: ignore[arg-type]
        publisher=publisher,
        clock=clock.wall,
        monotonic=clock.mono,
    )
    return probe, clock


def published(publisher: RecordingPublisher) -> list[dict[str, object]]:
    return [json.loads(value) for _, _, value in publisher.writes]


def test_first_read_is_published_under_the_annotation_key() -> None:
    pub = RecordingPublisher()
    probe, _ = make(fake("h100-idle"), pub)
    tick = probe.tick()
    assert tick.published and tick.reason == "first budget"
    ((node, key, value),) = pub.writes
    assert (node, key) == ("gpu-l4-0", GPU_BUDGET_ANNOTATION)
    reading = parse_budget(value, NOW)
    assert isinstance(reading, BudgetReading) and len(reading.budget.gpus) == 2


def test_jitter_is_not_published_and_a_real_change_waits_for_the_rate_limit() -> None:
    nvml = fake("l4-shared")
    pub = RecordingPublisher()
    probe, clock = make(nvml, pub, min_publish_interval_s=60, heartbeat_s=300)
    probe.tick()
    jitter = state("l4-shared")
    jitter.devices[0].memory_mib.free -= 100
    nvml.load(jitter)
    clock.t = 90
    assert not probe.tick().published  # 100 MiB < 256 MiB
    creep = state("l4-shared")
    creep.devices[0].memory_mib.free -= 1024
    creep.devices[0].processes[1].used_mib = 13024  # the vLLM pod grew by 1 GiB
    nvml.load(creep)
    assert probe.tick().published  # 90 s after the last write
    nvml.load(state("l4-shared"))
    clock.t = 120
    early = probe.tick()
    assert not early.published and early.reason is not None  # changed back, but only 30 s later
    clock.t = 150
    assert probe.tick().published  # the pending change goes out once allowed
    assert [w["gpus"][0]["freeMib"] for w in published(pub)] == [4480, 3456, 4480]  # type: ignore[index]


def test_heartbeat_refreshes_an_unchanged_budget() -> None:
    pub = RecordingPublisher()
    probe, clock = make(fake("h100-idle"), pub, heartbeat_s=300)
    probe.tick()
    clock.t = 299
    assert not probe.tick().published
    clock.t = 300
    tick = probe.tick()
    assert tick.published and tick.reason == "heartbeat"
    assert published(pub)[-1]["observedAt"] == "2026-11-22T03:05:00Z"


def test_gpu_disappearing_updates_the_annotation() -> None:
    nvml = fake("h100-idle")
    pub = RecordingPublisher()
    probe, clock = make(nvml, pub, min_publish_interval_s=60)
    probe.tick()
    nvml.load(state("h100-gpu1-lost"))
    clock.t = 60
    tick = probe.tick()
    assert tick.published and "disappeared: GPU-7a9b0c2d" in str(tick.reason)
    assert len(published(pub)[-1]["gpus"]) == 1  # type: ignore[arg-type]


def test_nvml_missing_is_published_counted_and_the_probe_keeps_running() -> None:
    pub = RecordingPublisher()
    nvml = fake("nvml-missing")
    probe, clock = make(nvml, pub, interval_s=30)
    tick = probe.tick()
    assert tick.published and published(pub)[0]["error"] == (
        "init: NVML error 12: NVML Shared Library Not Found"
    )
    assert isinstance(parse_budget(pub.writes[0][2], NOW), str)  # the planner ignores it
    text = generate_latest(probe.metrics.registry).decode()
    assert "vllm_operator_probe_nvml_up 0.0" in text
    assert 'vllm_operator_probe_errors_total{reason="init"} 1.0' in text
    nvml.load(state("h100-idle"))
    clock.t = 60
    assert probe.tick().published
    text = generate_latest(probe.metrics.registry).decode()
    assert "vllm_operator_probe_nvml_up 1.0" in text


def test_failed_publish_is_counted_and_retried_next_tick() -> None:
    pub = RecordingPublisher()
    pub.fail = 1
    probe, clock = make(fake("h100-idle"), pub)
    assert not probe.tick().published
    clock.t = 30
    assert probe.tick().published
    text = generate_latest(probe.metrics.registry).decode()
    assert 'vllm_operator_probe_annotation_publishes_total{result="error"} 1.0' in text
    assert 'vllm_operator_probe_annotation_publishes_total{result="ok"} 1.0' in text
    assert 'vllm_operator_probe_errors_total{reason="publish"} 1.0' in text


def test_no_publisher_only_reads() -> None:
    probe, _ = make(fake("h100-idle"), None)
    tick = probe.tick()
    assert not tick.published and len(tick.budget.gpus) == 2


def samples(probe: Probe, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of one metric, as a scraper parses them."""
    text = generate_latest(probe.metrics.registry).decode()
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def test_metrics_carry_gpu_and_process_memory_and_drop_exited_processes(proc_root: Path) -> None:
    nvml = fake("l4-shared")
    probe, _ = make(nvml, None, proc_root=proc_root)
    probe.tick()
    gpu = {
        "gpu": "0",
        "mig_device": "",
        "name": "NVIDIA L4",
        "uuid": "GPU-9c8b7a6f-5e4d-4c3b-a2f1-0e9d8c7b6a5f",
    }
    for key, mib in (("total", 23034), ("free", 4480), ("used", 18120), ("reserved", 434)):
        assert samples(probe, f"vllm_operator_probe_gpu_memory_{key}_bytes") == [(gpu, mib * 2**20)]
    procs = samples(probe, "vllm_operator_probe_gpu_process_memory_used_bytes")
    assert sorted((labels["pid"], labels["pod_uid"], value) for labels, value in procs) == [
        ("4242", "", 6100 * 2**20),
        ("5151", VLLM_POD_UID, 12000 * 2**20),
    ]
    assert all(labels.items() >= gpu.items() for labels, _ in procs)
    assert samples(probe, "vllm_operator_probe_gpus") == [({}, 1.0)]
    gone = state("l4-shared")
    gone.devices[0].processes = gone.devices[0].processes[1:]
    nvml.load(gone)
    probe.tick()
    procs = samples(probe, "vllm_operator_probe_gpu_process_memory_used_bytes")
    assert [labels["pid"] for labels, _ in procs] == ["5151"]


def test_mig_slices_are_metric_series_of_their_own() -> None:
    probe, _ = make(fake("a100-mig"), None)
    probe.tick()
    text = generate_latest(probe.metrics.registry).decode()
    assert 'mig_device="3",name="NVIDIA A100-SXM4-40GB MIG 1g.5gb"' in text
    assert 'pid="31337"' in text


def test_run_stops_on_the_event_and_shuts_nvml_down() -> None:
    nvml = fake("h100-idle")
    pub = RecordingPublisher()
    probe = Probe(
        NvmlReader(nvml, proc_root=None), ProbeSettings(node_name="n", interval_s=1), publisher=pub
    )
    stop = threading.Event()
    worker = threading.Thread(target=probe.run, args=(stop,))
    worker.start()
    try:
        assert _wait(lambda: len(pub.writes) == 1)
    finally:
        stop.set()
        worker.join(timeout=5)
    assert not worker.is_alive()
    assert nvml.initialised == 0


def _wait(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Bounded wait on a condition (the loop runs in a thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False
