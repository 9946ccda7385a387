"""Run `vllm-operator run` as a real process against the e2e cluster.

The e2e tier tests the operator as users run it: the console script, Kopf, the kubernetes
client and the real API server. The process writes its log to a file that failing tests print,
exposes its Prometheus metrics (write counters for the zero-write checks) and is always stopped.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import TracebackType

from e2e.kube import wait_for

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


RUNNING: list[OperatorProcess] = []
"""Operator processes running now, whose log tails conftest attaches to failing e2e reports (a
failure that only says "timed out waiting for Ready" needs what the operator did meanwhile)."""


def operator_log_tails(lines: int = 80) -> str:
    return "\n\n".join(f"== {p.log_file}\n{p.log_tail(lines)}" for p in RUNNING)


class OperatorProcess:
    """One operator process; use as a context manager or call start()/stop()."""

    def __init__(
        self,
        kubeconfig: Path,
        log_file: Path,
        namespaces: list[str] | None = None,
        canary_default: bool = False,
    ) -> None:
        """`canary_default`: the operator's cluster default for specs that leave
        spec.rollout.canary.enabled out. Off here (`--no-canary`), on in a real install: the
        tests that edit specs assert the roll of the new plan itself; the canary tests turn
        canaries on, by the spec or by this default."""
        self.kubeconfig = kubeconfig
        self.canary_default = canary_default
        self.log_file = log_file
        self.namespaces = namespaces or []
        self.metrics_port = _free_port()
        self.health_port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_args: list[str] = []

    def start(self, timeout: float = 60) -> OperatorProcess:
        exe = Path(sys.executable).parent / "vllm-operator"
        args = [
            str(exe),
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--metrics-port",
            str(self.metrics_port),
            "--health-address",
            f"127.0.0.1:{self.health_port}",
        ]
        for ns in self.namespaces:
            args += ["--namespace", ns]
        args.append("--canary" if self.canary_default else "--no-canary")
        args += self.start_args
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        log = self.log_file.open("ab")
        self.proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
        )
        log.close()
        RUNNING.append(self)
        wait_for(self._healthy, timeout=timeout, what="operator liveness endpoint")
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"operator exited rc={self.proc.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/healthz", timeout=2
            ) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self in RUNNING:
            RUNNING.remove(self)
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def metrics(self) -> dict[str, float]:
        """Current samples of the operator's own metrics, keyed by `name{labels}`."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            match = re.match(r"^(vllm_operator_[a-z_]+(?:\{[^}]*\})?) (\S+)$", line)
            if match:
                out[match[1]] = float(match[2])
        return out

    def writes(self) -> float:
        return sum(
            v for k, v in self.metrics().items() if k.startswith("vllm_operator_api_writes_total")
        )

    def settled_writes(self, timeout: float = 60.0) -> float:
        """The write count once no reconcile is queued or running.

        Why: a reconcile writes status first and its transition Events after, so a test that saw
        the status could read the count before the Event's write was counted (CI, #32: the
        multi-node no-op counted 9 writes against a baseline of 8 read too early). The queue's
        gauges make "every write so far is counted" a condition to wait on, not a sleep."""

        def idle() -> tuple[float] | None:
            metrics = self.metrics()
            busy = metrics.get("vllm_operator_workqueue_depth", 1.0) + metrics.get(
                "vllm_operator_workqueue_in_flight", 1.0
            )
            if busy:
                return None
            # A tuple, so that a count of 0 is still a result (wait_for takes a falsy one as "not yet").
            return (
                sum(
                    v for k, v in metrics.items() if k.startswith("vllm_operator_api_writes_total")
                ),
            )

        (count,) = wait_for(idle, timeout=timeout, interval=0.1, what="the work queue to be idle")
        return count

    def reconciles(self) -> float:
        return sum(
            v for k, v in self.metrics().items() if k.startswith("vllm_operator_reconciles_total")
        )

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
