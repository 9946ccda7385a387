"""Run-time remediation through the controller: pod status and logs in, overrides and rollouts out."""

from datetime import UTC, datetime, timedelta
from typing import Any

from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller
from vllm_operator.rendering.names import pool_selector_labels

from .test_controller import OfflineHub, cluster, example, make_ready, status_of

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
OOM_LOG = """INFO 11-22 09:00:02 launcher.py:46] Application startup complete.
INFO 11-22 11:58:01 loggers.py:123] Avg prompt throughput: 912.3 tokens/s, Running: 6 reqs
ERROR 11-22 11:59:59 core.py:700] EngineCore encountered a fatal error.
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 22.05 GiB of which 1.02 GiB is free.
"""


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def setup(mode: str = "auto") -> tuple[FakeGateway, Controller, Clock]:
    from vllm_operator.hub.resolver import HubArchitectureResolver

    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["remediation"] = {"mode": mode}
    gw.add(svc)
    clock = Clock()
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock)
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    return gw, ctl, clock


def oom_pod(gw: FakeGateway, finished: datetime) -> dict[str, Any]:
    labels = {**pool_selector_labels("llama-8b-chat", "NVIDIA-L4"), "extra": "x"}
    pod = gw.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "llama-8b-chat-l4-abc", "namespace": "default", "labels": labels},
            "status": {
                "containerStatuses": [
                    {
                        "name": "vllm",
                        "ready": True,
                        "restartCount": 1,
                        "state": {"running": {}},
                        "lastState": {
                            "terminated": {
                                "reason": "Error",
                                "exitCode": 1,
                                "startedAt": (finished - timedelta(hours=3)).isoformat(),
                                "finishedAt": finished.isoformat(),
                            }
                        },
                    }
                ]
            },
        }
    )
    gw.logs[("default", "llama-8b-chat-l4-abc")] = OOM_LOG
    return pod


def args_of(gw: FakeGateway) -> list[str]:
    dep = gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")
    assert dep is not None
    args: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def flag(args: list[str], name: str) -> int:
    return int(args[args.index(name) + 1])


def test_burst_oom_lowers_batched_tokens_once_and_rolls_the_pool() -> None:
    gw, ctl, clock = setup()
    planned = flag(args_of(gw), "--max-num-batched-tokens")
    oom_pod(gw, T0 - timedelta(minutes=1))
    ctl.evaluate("default", "llama-8b-chat")
    status = status_of(gw, "llama-8b-chat")
    (override,) = status["overrides"]
    assert override["field"] == "max_num_batched_tokens" and override["reason"] == "BurstOOM"
    assert flag(args_of(gw), "--max-num-batched-tokens") == override["value"] < planned
    assert status["history"][-1]["reason"] == "BurstOOM"
    assert status["history"][-1]["recommended"] is False
    assert any(e.reason == "BurstOOM" for e in gw.events)
    # The plan in status is still the plan: the policy measures its steps against it.
    assert status["pools"][0]["plan"]["engineArgs"]["max_num_batched_tokens"] == planned

    writes = gw.total_writes()
    clock.now += timedelta(seconds=5)  # within the evaluation interval: nothing happens
    ctl.evaluate("default", "llama-8b-chat")
    assert gw.total_writes() == writes


def test_recommend_mode_reports_without_changing_the_pool() -> None:
    gw, ctl, _ = setup("recommend")
    before = args_of(gw)
    oom_pod(gw, T0 - timedelta(minutes=1))
    ctl.evaluate("default", "llama-8b-chat")
    status = status_of(gw, "llama-8b-chat")
    assert status["overrides"] == []
    assert status["history"][-1]["recommended"] is True
    assert args_of(gw) == before


def test_off_mode_does_nothing() -> None:
    gw, ctl, _ = setup("off")
    oom_pod(gw, T0 - timedelta(minutes=1))
    writes = gw.total_writes()
    ctl.evaluate("default", "llama-8b-chat")
    assert gw.total_writes() == writes


def test_without_prometheus_metrics_are_unavailable_and_nothing_metric_driven_happens() -> None:
    gw, ctl, _ = setup()
    ctl.evaluate("default", "llama-8b-chat")
    status = status_of(gw, "llama-8b-chat")
    metrics = [c for c in status["conditions"] if c["type"] == "MetricsAvailable"]
    assert metrics and metrics[0]["status"] == "False"
    assert status["overrides"] == []
