"""Fixtures of the probe tests: fake NVML states from fixtures/, a fake /proc, a recording publisher."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from vllm_operator.nvml.fake import FakeNvml, FakeState, load_state

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NOW = datetime(2026, 11, 22, 3, 0, 0, tzinfo=UTC)

# A vLLM pod's process as the kubelet's cgroup v2 systemd driver names it.
VLLM_POD_UID = "0d6f3a1c-2b4e-4f58-9a7c-1e2d3c4b5a69"
VLLM_CONTAINER_ID = "3f2a" + "0" * 56 + "beef"
VLLM_CGROUP = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{VLLM_POD_UID.replace('-', '_')}.slice/"
    f"cri-containerd-{VLLM_CONTAINER_ID}.scope\n"
)


def state(name: str) -> FakeState:
    return load_state(FIXTURES / f"{name}.json")


def fake(name: str) -> FakeNvml:
    return FakeNvml(state(name))


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    """A /proc with pid 5151 in a vLLM pod and pid 4242 outside Kubernetes."""
    root = tmp_path / "proc"
    (root / "5151").mkdir(parents=True)
    (root / "5151" / "cgroup").write_text(VLLM_CGROUP)
    (root / "4242").mkdir()
    (root / "4242" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")
    return root


class RecordingPublisher:
    """AnnotationPublisher that keeps every write; can be told to fail the next writes."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, str]] = []
        self.fail = 0

    def publish(self, node_name: str, key: str, value: str) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("apiserver unavailable")
        self.writes.append((node_name, key, value))
