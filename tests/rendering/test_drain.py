"""Every rendered vLLM pod drains before it stops (rendering/drain.py, issue #27).

The preStop program is run for real here against a local HTTP server that serves vLLM's
exposition format, so what it waits for is tested, not only how it is spelled.
"""

import http.server
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.vllm import load_version, supported_versions
from vllm_operator.rendering.args import multinode_argv
from vllm_operator.rendering.drain import (
    EXIT_MARGIN_S,
    MAX_DRAIN_S,
    MIN_DRAIN_S,
    PROPAGATION_S,
    SHUTDOWN_FLAG,
    drain_budget_seconds,
    has_shutdown_flag,
    plan_drain,
)
from vllm_operator.rendering.workload import PoolRender, plan_hash, render_workload


def _service(version: str, p99: int = 4096, extra: dict[str, str] | None = None) -> VLLMService:
    return VLLMService.model_validate(
        {
            "apiVersion": "serving.vllm-operator.dev/v1alpha1",
            "kind": "VLLMService",
            "metadata": {"name": "chat", "namespace": "default"},
            "spec": {
                "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                "vllm": {"version": version, "extraArgs": extra or {}},
                "workload": {"p99ContextTokens": p99, "concurrency": 4},
                "placement": {"gpuTypes": ["NVIDIA-L4"]},
            },
        }
    )


def _pool(version: str, nodes: int = 1, argv: list[str] | None = None) -> PoolRender:
    leader, worker = multinode_argv(version, nodes) if nodes > 1 else ([], [])
    return PoolRender(
        gpu_type="NVIDIA-L4",
        gpus_per_replica=1,
        nodes_per_replica=nodes,
        leader_argv=leader,
        worker_argv=worker,
        replicas=2,
        image=f"vllm/vllm-openai:v{version}",
        command=["vllm", "serve"],
        model_args=["meta-llama/Llama-3.1-8B-Instruct"],
        engine_argv=argv or ["--max-model-len", "4096"],
        weights_gib_total=15.0,
        host_memory_gib=32,
    )


def test_the_shutdown_flag_comes_from_the_catalog_of_each_release() -> None:
    # 0.17.1 is the last release without vLLM's graceful-shutdown flag, 0.18.0 the first with it.
    assert not has_shutdown_flag("0.17.1")
    assert has_shutdown_flag("0.18.0")
    for version in supported_versions():
        assert has_shutdown_flag(version) == (SHUTDOWN_FLAG in load_version(version).flags)


def test_the_drain_budget_grows_with_the_p99_context_within_its_bounds() -> None:
    assert drain_budget_seconds(1) == MIN_DRAIN_S
    assert drain_budget_seconds(4096) == 209  # 4096/1000 + 4096/20 = 208.9 s
    assert drain_budget_seconds(8192) > drain_budget_seconds(4096)
    assert drain_budget_seconds(1_000_000) == MAX_DRAIN_S


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    return cast(dict[str, Any], obj["spec"]["template"]["spec"]["containers"][0])


def test_a_release_with_the_flag_drains_in_the_engine_after_the_endpoints_updated() -> None:
    dep = render_workload(_service("0.33.0"), _pool("0.33.0"))
    container = _container(dep)
    args = container["args"]
    assert args[args.index(SHUTDOWN_FLAG) + 1] == "209"
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[-2:] == [str(PROPAGATION_S), "0"]  # wait for the endpoints, then SIGTERM
    grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace == PROPAGATION_S + 209 + EXIT_MARGIN_S


def test_a_release_without_the_flag_waits_in_prestop_for_its_requests() -> None:
    dep = render_workload(_service("0.11.0"), _pool("0.11.0"))
    container = _container(dep)
    assert SHUTDOWN_FLAG not in container["args"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[3:] == [
        "http://127.0.0.1:8000/metrics",
        "vllm:num_requests_running,vllm:num_requests_waiting",
        str(PROPAGATION_S),
        "209",
    ]


def test_a_users_shutdown_timeout_is_kept_and_covered_by_the_grace_period() -> None:
    argv = ["--max-model-len", "4096", SHUTDOWN_FLAG, "900"]
    drain = plan_drain("0.33.0", 4096, argv, 8000)
    assert drain.engine_argv == []
    assert drain.grace_seconds == PROPAGATION_S + 900 + EXIT_MARGIN_S
    dep = render_workload(_service("0.33.0"), _pool("0.33.0", argv=argv))
    assert _container(dep)["args"].count(SHUTDOWN_FLAG) == 1


def test_multinode_workers_wait_for_the_leader_to_drain() -> None:
    lws = render_workload(_service("0.33.0"), _pool("0.33.0", nodes=2))
    template = lws["spec"]["leaderWorkerTemplate"]
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert leader["lifecycle"]["preStop"]["exec"]["command"][3] == "http://127.0.0.1:8000/metrics"
    worker_cmd = worker["lifecycle"]["preStop"]["exec"]["command"]
    assert worker_cmd[3] == "http://${LWS_LEADER_ADDRESS}:8000/metrics"
    assert worker_cmd[-1] == "209"
    for pod in (template["leaderTemplate"], template["workerTemplate"]):
        assert pod["spec"]["terminationGracePeriodSeconds"] == PROPAGATION_S + 209 + EXIT_MARGIN_S


def test_the_drain_is_part_of_the_plan_hash() -> None:
    pool = _pool("0.33.0")
    assert plan_hash(_service("0.33.0", p99=4096), pool) != plan_hash(
        _service("0.33.0", p99=8192), pool
    )


# ----------------------------------------------------------------- the preStop program, run


class _Metrics:
    """A vLLM /metrics endpoint whose running-request gauge the test sets."""

    def __init__(self) -> None:
        self.running = 2.0
        self.scrapes = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.scrapes += 1
                body = (
                    "# HELP vllm:num_requests_running Number of requests in model execution.\n"
                    "# TYPE vllm:num_requests_running gauge\n"
                    f'vllm:num_requests_running{{engine="0",model_name="m"}} {outer.running}\n'
                    f'vllm:num_requests_waiting{{engine="0",model_name="m"}} 0.0\n'
                    'vllm:num_requests_running_other{model_name="m"} 7.0\n'
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"


@pytest.fixture
def metrics() -> Iterator[_Metrics]:
    m = _Metrics()
    thread = threading.Thread(target=m.server.serve_forever, daemon=True)
    thread.start()
    yield m
    m.server.shutdown()
    m.server.server_close()


def _run_hook(url: str, budget: int) -> subprocess.Popen[bytes]:
    command = plan_drain("0.11.0", 4096, [], 8000).pre_stop["exec"]
    argv = list(cast(dict[str, list[str]], command)["command"])
    argv[0] = sys.executable
    argv[3], argv[5], argv[6] = url, "0", str(budget)
    return subprocess.Popen(argv)


def test_the_prestop_program_returns_once_the_engine_is_idle(metrics: _Metrics) -> None:
    hook = _run_hook(metrics.url, budget=120)
    deadline = time.monotonic() + 30
    while metrics.scrapes < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metrics.scrapes >= 2, "the hook never polled the engine"
    assert hook.poll() is None, "the hook returned while requests were running"
    metrics.running = 0.0
    assert hook.wait(timeout=30) == 0


def test_the_prestop_program_returns_when_the_engine_is_gone() -> None:
    hook = _run_hook("http://127.0.0.1:9/metrics", budget=120)
    assert hook.wait(timeout=30) == 0


def test_a_workers_prestop_polls_the_leader_named_by_its_environment(metrics: _Metrics) -> None:
    # The LeaderWorkerSet webhook injects LWS_LEADER_ADDRESS; the hook expands it itself (exec
    # handlers get no $(VAR) expansion). A fragment absorbs the rendered ":8000/metrics" so the
    # test's server, on its own port, stands in for the leader.
    argv = list(
        cast(dict[str, list[str]], plan_drain("0.33.0", 4096, [], 8000).worker_pre_stop["exec"])[
            "command"
        ]
    )
    argv[0] = sys.executable
    argv[5] = "0"
    leader = metrics.url.removeprefix("http://") + "#"
    hook = subprocess.Popen(argv, env={"LWS_LEADER_ADDRESS": leader, "PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 30
    while metrics.scrapes < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metrics.scrapes >= 2 and hook.poll() is None, "the worker did not wait for the leader"
    metrics.running = 0.0
    assert hook.wait(timeout=30) == 0
