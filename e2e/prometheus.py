"""A real Prometheus for tests: built from its Go module, scraping local targets on loopback.

`find_prometheus()` locates the binary hack/tools/build-prometheus.sh builds (or the one in
VLLM_OPERATOR_BIN_DIR); `LocalPrometheus` writes a config with static targets whose labels map
each simulated vLLM pod to its `namespace` and `pod` (what a PodMonitor's relabelling gives in a
cluster), starts Prometheus on 127.0.0.1 with a throwaway TSDB, waits for /-/ready with a bounded
wait, and stops the process (and only that process) when done.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "hack" / "tools" / "build-prometheus.sh"
REQUIRE_ENV = "VLLM_OPERATOR_REQUIRE_PROMETHEUS"
"""Set to 1 (as `make test` does after building) to turn a missing binary into a failure."""


class PrometheusUnavailable(RuntimeError):
    """The Prometheus binary is not built."""


def find_prometheus() -> Path:
    """The prometheus binary, or PrometheusUnavailable saying how to build it."""
    candidates: list[Path] = []
    if bin_dir := os.environ.get("VLLM_OPERATOR_BIN_DIR"):
        candidates.append(Path(bin_dir) / "prometheus")
    if BUILD_SCRIPT.is_file():
        try:
            out = subprocess.run(
                ["bash", str(BUILD_SCRIPT), "--dir"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.strip()
            if out:
                candidates.append(Path(out) / "prometheus")
        except (subprocess.SubprocessError, OSError):
            pass
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise PrometheusUnavailable(
        "no Prometheus binary (looked in "
        + ", ".join(str(p) for p in candidates)
        + "); build it with hack/tools/build-prometheus.sh"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Target:
    """One scrape target (host:port) and the labels Prometheus attaches to its series."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)


class LocalPrometheus:
    """One Prometheus process scraping `targets` every `scrape_interval`.

    The targets come from a file (file-based service discovery), so `set_targets` can follow pods
    that come and go (a rollout renames them) without restarting Prometheus.
    """

    def __init__(
        self,
        binary: Path,
        targets: Sequence[Target],
        *,
        scrape_interval: str = "1s",
        workdir: Path | None = None,
    ) -> None:
        self.binary = binary
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="vllm-operator-prom-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "prometheus.log"
        self.targets_path = self.workdir / "targets.json"

    def set_targets(self, targets: Sequence[Target]) -> None:
        """Replace the scraped targets (Prometheus re-reads the file within about a second)."""
        self.targets = list(targets)
        body = json.dumps(
            [{"targets": [t.address], "labels": dict(t.labels)} for t in self.targets]
        )
        tmp = self.targets_path.with_suffix(".tmp")
        tmp.write_text(body)
        os.replace(tmp, self.targets_path)  # atomic: Prometheus never reads half a file

    def config(self) -> dict[str, Any]:
        return {
            "global": {
                "scrape_interval": self.scrape_interval,
                "evaluation_interval": self.scrape_interval,
            },
            "scrape_configs": [
                {
                    "job_name": "vllm",
                    "scrape_timeout": self.scrape_interval,
                    "file_sd_configs": [
                        {"files": [str(self.targets_path)], "refresh_interval": "1s"}
                    ],
                }
            ],
        }

    def start(self, timeout: float = 60.0) -> LocalPrometheus:
        config = self.workdir / "prometheus.yml"
        self.set_targets(self.targets)
        config.write_text(yaml.safe_dump(self.config()))
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                str(self.binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )
        log.close()
        try:
            self.wait_until(
                lambda: self._get("/-/ready") is not None, timeout, "Prometheus /-/ready"
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.process = None
        if self._own_dir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _get(self, path: str) -> bytes | None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"Prometheus exited with {self.process.returncode}:\n{self.log_tail()}"
            )
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as response:
                body: bytes = response.read()
                return body
        except (urllib.error.URLError, OSError):
            return None

    def query(self, promql: str) -> list[dict[str, Any]]:
        body = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if body is None:
            return []
        result: list[dict[str, Any]] = json.loads(body)["data"]["result"]
        return result

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll `condition` every 0.2 s until it holds; fail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        raise TimeoutError(f"Timed out after {timeout:.0f}s waiting for {what}\n{self.log_tail()}")
