"""Run-time remediation through the controller: pod status and logs in, overrides and rollouts out."""

from datetime import UTC, datetime, timedelta
from typing import Any

from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller
from vllm_operator.rendering.names import pool_selector_labels

from .nodes import gpu_node
from .test_controller import OfflineHub, cluster, condition, example, make_ready, status_of

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


def setup(
    mode: str = "auto", l4_memory: str | None = None
) -> tuple[FakeGateway, Controller, Clock]:
    from vllm_operator.hub.resolver import HubArchitectureResolver

    gw = cluster()
    if l4_memory is not None:
        gw.nodes = [
            gpu_node("l4-0", "NVIDIA-L4", 1, host_memory=l4_memory)
            if n["metadata"]["name"] == "l4-0"
            else n
            for n in gw.nodes
        ]
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["remediation"] = {"mode": mode}
    gw.add(svc)
    clock = Clock()
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock)
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    return gw, ctl, clock


def oom_pod(
    gw: FakeGateway, finished: datetime, *, reason: str = "Error", exit_code: int = 1
) -> dict[str, Any]:
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
                                "reason": reason,
                                "exitCode": exit_code,
                                "startedAt": (finished - timedelta(hours=3)).isoformat(),
                                "finishedAt": finished.isoformat(),
                            }
                        },
                    }
                ]
            },
        }
    )
    if reason != "OOMKilled":
        gw.logs[("default", "llama-8b-chat-l4-abc")] = OOM_LOG
    return pod


def args_of(gw: FakeGateway) -> list[str]:
    dep = gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")
    assert dep is not None
    args: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def flag(args: list[str], name: str) -> int:
    return int(args[args.index(name) + 1])


def memory_of(gw: FakeGateway) -> tuple[str, str]:
    """(request, limit) of the vLLM container's memory."""
    dep = gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")
    assert dep is not None
    resources = dep["spec"]["template"]["spec"]["containers"][0]["resources"]
    return resources["requests"]["memory"], resources["limits"]["memory"]


def gib(quantity: str) -> int:
    assert quantity.endswith("Gi"), quantity
    return int(quantity.removesuffix("Gi"))


def test_oom_killed_raises_the_memory_limit_and_leaves_gpu_args_alone() -> None:
    gw, ctl, _ = setup()
    args = args_of(gw)
    request, limit = memory_of(gw)
    host = status_of(gw, "llama-8b-chat")["pools"][0]["plan"]["hostMemory"]
    assert request == limit == f"{host['limitGiB']}Gi"  # rendered from the plan, both ways
    oom_pod(gw, T0 - timedelta(minutes=1), reason="OOMKilled", exit_code=137)
    ctl.evaluate("default", "llama-8b-chat")
    status = status_of(gw, "llama-8b-chat")
    (override,) = status["overrides"]
    assert (override["field"], override["reason"]) == ("host_memory_gib", "HostOOM")
    request, limit = memory_of(gw)
    assert request == limit == f"{override['value']}Gi"
    assert gib(limit) >= host["limitGiB"] + 4  # one bounded step: +25 % or +4 GiB
    assert args_of(gw) == args  # no GPU argument touched
    assert status["pools"][0]["plan"]["hostMemory"] == host  # the plan stays the plan
    assert condition(status, "MemoryPressure")["reason"] == "HostOOM"


def test_oom_killed_at_the_nodes_allocatable_memory_grows_nothing() -> None:
    gw, ctl, _ = setup(l4_memory="8Gi")
    host = status_of(gw, "llama-8b-chat")["pools"][0]["plan"]["hostMemory"]
    assert host["clamped"] and host["limitGiB"] == host["maxLimitGiB"] == 7
    assert host["plannedGiB"] > 7 and "8.0 GiB allocatable" in host["note"]
    assert any(
        "clamped to 7 GiB" in r
        for r in status_of(gw, "llama-8b-chat")["pools"][0]["plan"]["reasons"]
    )
    before = memory_of(gw)
    oom_pod(gw, T0 - timedelta(minutes=1), reason="OOMKilled", exit_code=137)
    ctl.evaluate("default", "llama-8b-chat")
    status = status_of(gw, "llama-8b-chat")
    assert status["overrides"] == []
    assert memory_of(gw) == before == ("7Gi", "7Gi")
    unmet = condition(status, "TargetUnmet")
    assert unmet["status"] == "True" and "host-memory limit is already 7 GiB" in unmet["message"]


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


def test_off_mode_changes_nothing_but_reports_the_crash() -> None:
    gw, ctl, _ = setup("off")
    oom_pod(gw, T0 - timedelta(minutes=1))
    before = dict(gw.writes)
    ctl.evaluate("default", "llama-8b-chat")
    changed = {k: v - before.get(k, 0) for k, v in gw.writes.items() if v != before.get(k, 0)}
    # Only status and Events: no apply, no eviction, no pod label.
    assert set(changed) <= {"status", "event"}, changed
    status = status_of(gw, "llama-8b-chat")
    assert status["overrides"] == [] and not [h for h in status["history"] if h.get("field")]
    assert condition(status, "Degraded")["status"] == "True"


def test_without_prometheus_metrics_are_unavailable_and_nothing_metric_driven_happens() -> None:
    gw, ctl, _ = setup()
    ctl.evaluate("default", "llama-8b-chat")
    status = status_of(gw, "llama-8b-chat")
    metrics = [c for c in status["conditions"] if c["type"] == "MetricsAvailable"]
    assert metrics and metrics[0]["status"] == "False"
    assert status["overrides"] == []
