"""The real-engine rig: the argv the operator rendered for a pod, run by the real `vllm serve`.

A VLLMService for the tiny serving model (its architecture inline, copied from the generated
config.json, so the plan is for that model) is applied to the local control plane; its pod runs
on a simulated (kwok) L4 node. The rig takes the container the operator rendered into the
Deployment, maps the GPU-only flags by the explicit, unit-tested list in e2e/realvllm.py
(cpu_argv) and starts vLLM's CPU build with it on loopback: the engine's own parser and startup
checks judge the operator's arguments, and it must answer a chat completion under the service's
model name. A real Prometheus scrapes the engine with the simulated pod's namespace/name labels
(what a PodMonitor's relabelling gives in a cluster), and the operator, pointed at it, records the
engine's own KV capacity in status.pools[].observed next to the plan, stores it under its key in
status.observations and re-plans the pool from it (learning from the fleet, #15).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import Cluster
from e2e.kube import Kube, wait_for
from e2e.operator_process import OperatorProcess
from e2e.prometheus import (
    LocalPrometheus,
    Target,
    free_port,
)
from e2e.realvllm import (
    RealEngine,
    VllmCpu,
    architecture,
    cpu_argv,
    parse_exposition,
    running_engine,
)

pytestmark = pytest.mark.usefixtures("crd", "gpu_nodes")

GROUP_PATH = "/apis/serving.vllm-operator.dev/v1alpha1"
NAME = "tiny-chat"
MODEL_NAME = "vllm-operator/tiny-llama"
EVAL_S = 10
# The Tesla/L4 budget of a 0.06 utilization ceiling leaves ~0.9 GiB of planned KV cache, which
# maps to VLLM_CPU_KVCACHE_SPACE=1: the engine stays at ~4 GiB of RAM on a shared 2-core machine.
MAX_UTILIZATION = 0.06


def service(namespace: str, install: VllmCpu) -> dict[str, Any]:
    return {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "model": {"name": MODEL_NAME, "architecture": architecture(install.serving_model)},
            "vllm": {"version": install.version},
            "workload": {"p99ContextTokens": 2048, "concurrency": 4},
            "placement": {"gpuTypes": ["NVIDIA-L4"]},
            "safety": {"maxGpuMemoryUtilization": MAX_UTILIZATION},
            "remediation": {
                "mode": "recommend",
                "evaluationIntervalSeconds": EVAL_S,
                "windowSeconds": 30,
            },
        },
    }


def svc_path(namespace: str) -> str:
    return f"{GROUP_PATH}/namespaces/{namespace}/vllmservices/{NAME}"


def running_pod(kube: Kube, namespace: str) -> tuple[dict[str, Any], str]:
    """The service once Ready with exactly one Running pod: (service, pod name)."""

    def check() -> tuple[dict[str, Any], str] | None:
        obj = kube.get(svc_path(namespace))
        conds = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions", [])}
        if conds.get("Ready") != "True":
            return None
        pods = kube.list(
            f"/api/v1/namespaces/{namespace}/pods",
            label_selector="app.kubernetes.io/instance=" + NAME,
        )
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return (obj, str(running[0]["metadata"]["name"])) if len(running) == 1 else None

    return wait_for(check, timeout=90, what="the service Ready with one Running pod")


@pytest.fixture
def planned(
    cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path, vllm_cpu: VllmCpu
) -> Iterator[tuple[dict[str, Any], dict[str, Any], str]]:
    """(pool status, rendered container, pod name) of the applied service."""
    kube.apply(service(namespace, vllm_cpu))
    with OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", [namespace]):
        obj, pod = running_pod(kube, namespace)
    (pool,) = obj["status"]["pools"]
    dep = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{pool['deployment']}")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    yield pool, container, pod


def test_operator_argv_serves_in_the_real_engine_and_its_capacity_is_observed(
    cluster: Cluster,
    kube: Kube,
    namespace: str,
    tmp_path: Path,
    vllm_cpu: VllmCpu,
    prometheus_binary: Path,
    planned: tuple[dict[str, Any], dict[str, Any], str],
) -> None:
    pool, container, pod = planned
    memory = pool["plan"]["memory"]
    mapped = cpu_argv(
        container,
        model_path=vllm_cpu.serving_model,
        kv_cache_gib=memory["kvCacheGiB"],
        port=free_port(),
    )
    # Everything but the listed GPU-only flags reaches the engine as the operator rendered it.
    for flag in ("--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--dtype"):
        assert (
            mapped.args[mapped.args.index(flag) + 1]
            == container["args"][container["args"].index(flag) + 1]
        )
    engine = RealEngine(vllm_cpu, mapped.args, mapped.env, tmp_path / "engine.log")
    with running_engine(engine):
        answer = engine.chat(MODEL_NAME, "hello from the operator's argv", max_tokens=4)
        assert answer["model"] == MODEL_NAME
        assert answer["usage"]["completion_tokens"] == 4
        logged = engine.kv_tokens_logged()
        (info,) = parse_exposition(engine.metrics_text())["vllm:cache_config_info"]
        reported = int(info["num_gpu_blocks"]) * int(info["block_size"])
        assert logged == reported, engine.log_tail()
        target = Target(f"127.0.0.1:{engine.port}", {"namespace": namespace, "pod": pod})
        with LocalPrometheus(prometheus_binary, [target]) as prom:
            prom.wait_until(
                lambda: bool(prom.query(f'vllm:cache_config_info{{pod="{pod}"}}')),
                60,
                "the engine scraped under the simulated pod's name",
            )
            op = OperatorProcess(cluster.kubeconfig, tmp_path / "operator2.log", [namespace])
            op.start_args = ["--prometheus-url", prom.url, "--gpu-memory-metric", "none"]
            with op:
                observed = wait_for(
                    lambda: kube.get(svc_path(namespace))["status"]["pools"][0].get("observed"),
                    timeout=3 * EVAL_S + 30,
                    what="status.pools[0].observed",
                )
                # Learning from the fleet (#15): the pool is re-planned from what vLLM measured.
                replanned = wait_for(
                    lambda: (lambda p: p if p["memory"]["kvCacheTokens"] == reported else None)(
                        kube.get(svc_path(namespace))["status"]["pools"][0]["plan"]
                    ),
                    timeout=30,
                    what="the plan re-planned from the measured capacity",
                )
    assert observed["kvCacheTokens"] == reported
    assert observed["plannedKvCacheTokens"] == memory["kvCacheTokens"]
    expected = round((reported - memory["kvCacheTokens"]) / memory["kvCacheTokens"] * 100, 1)
    assert observed["deviationPercent"] == expected
    assert observed["pods"] == 1
    # The observation is stored under its key, next to the model's prediction for it.
    status = kube.get(svc_path(namespace))["status"]
    args = pool["plan"]["engineArgs"]
    (obs,) = status["observations"]
    assert obs["key"] == {
        "model": MODEL_NAME,
        "gpuType": "NVIDIA-L4",
        "vllmVersion": vllm_cpu.version,
        "tensorParallelSize": args["tensor_parallel_size"],
        "maxModelLen": args["max_model_len"],
        "gpuMemoryUtilization": args["gpu_memory_utilization"],
        "blockSize": args["block_size"],
        "kvCacheDtype": args["kv_cache_dtype"],
        "dtype": args["dtype"],
        "enforceEager": False,
    }
    assert (obs["kvCacheTokens"], obs["predictedKvCacheTokens"]) == (
        reported,
        memory["kvCacheTokens"],
    )
    assert obs["deviationPercent"] == expected
    deviation = next(c for c in status["conditions"] if c["type"] == "PlanDeviation")
    assert deviation["status"] == ("True" if abs(expected) > 5 else "False")
    if replanned["engineArgs"] == args:  # still the configuration the engine measured
        assert replanned["memory"]["predictedKvCacheTokens"] == memory["kvCacheTokens"]
    else:  # max_num_seqs lowered to what the measured KV cache holds
        assert replanned["engineArgs"]["max_num_seqs"] < args["max_num_seqs"]
    assert any(
        r.startswith(f"KV capacity from observation: {reported} tokens measured by vLLM")
        for r in replanned["reasons"]
    )
