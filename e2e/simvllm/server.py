"""HTTP listeners for simulated vLLM pods (stdlib only): GET /health and GET /metrics.

`SimPod` serves one pod on 127.0.0.1:<port>; `SimFleet` runs several in one process (one thread
each). A crash phase prints the scenario's log text to stderr (prefixed with the pod name) and
answers 503 to every request from then on, so Prometheus marks the target down and its series
stale, as with a dead container. `POST /sim/scenario?name=NAME` (or `set_scenario`) switches a pod
to another scenario, e.g. from kv-saturation to steady to test restoration.
"""

import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest

from e2e.simvllm.exposition import VllmCollector
from e2e.simvllm.scenario import Scenario, load_scenario

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text format vLLM's /metrics has served (prometheus_client's classic exposition)."""


class SimPod:
    """One simulated vLLM pod: its scenario clock starts at `start()`; `speed` fast-forwards it."""

    def __init__(
        self,
        name: str,
        scenario: Scenario,
        *,
        version: str,
        port: int = 0,
        host: str = "127.0.0.1",
        speed: float = 1.0,
        dcgm: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.scenario = scenario
        self.speed = speed
        self._monotonic = monotonic
        self._t0 = monotonic()
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = VllmCollector(scenario, version, self.elapsed, dcgm=dcgm)
        self.registry.register(self._collector)
        self.crashed = threading.Event()
        pod = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                pod.check_crash()
                if pod.crashed.is_set():
                    self.send_error(503, "engine dead")
                    return
                path = self.path.split("?", 1)[0]
                if path == "/health":
                    code = pod.scenario.state_at(pod.elapsed()).health
                    self.send_response(code)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif path == "/metrics":
                    body = generate_latest(pod.registry)
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_error(404)

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                # POST /sim/scenario?name=steady switches the scenario (tests, `make demo`).
                url = urllib.parse.urlsplit(self.path)
                name = urllib.parse.parse_qs(url.query).get("name", [""])[0]
                if url.path != "/sim/scenario" or not name:
                    self.send_error(404)
                    return
                try:
                    pod.set_scenario(load_scenario(name))
                except FileNotFoundError as err:
                    self.send_error(400, str(err))
                    return
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return  # scrapes every second would drown the test output

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread: threading.Thread | None = None

    def set_scenario(self, scenario: Scenario) -> None:
        """Play another scenario from its start (a recovered, restarted or re-planned pod).

        Counters restart from zero, as they do when a vLLM container restarts.
        """
        self.scenario = scenario
        self._collector.scenario = scenario
        self._t0 = self._monotonic()
        self.crashed.clear()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def elapsed(self) -> float:
        return (self._monotonic() - self._t0) * self.speed

    def check_crash(self) -> None:
        state = self.scenario.state_at(self.elapsed())
        if state.crash is not None and not self.crashed.is_set():
            self.crashed.set()
            for line in state.crash.log.splitlines():
                print(f"[{self.name}] {line}", file=sys.stderr, flush=True)

    def start(self) -> "SimPod":
        self._t0 = self._monotonic()
        self._thread = threading.Thread(
            target=self.server.serve_forever, name=f"simvllm-{self.name}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


class SimFleet:
    """Several simulated pods, started and stopped together (a context manager)."""

    def __init__(self, pods: Iterable[SimPod]) -> None:
        self.pods = list(pods)

    def __enter__(self) -> "SimFleet":
        for pod in self.pods:
            pod.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for pod in self.pods:
            pod.stop()
