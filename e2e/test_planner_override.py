"""allowPlannerOverride against the real API server: each flag once, what runs in status (#19).

A user override must reach the pod's argv exactly once, in place of the planner's value, and
the VLLMService status (a real CRD status subresource, with the generated schema) must show the
value in force and mark it as the user's; an override that breaks vLLM's engine-configuration
rules is refused with a condition and a Warning Event, and no Deployment is created.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.kube import Kube, wait_for
from e2e.operator_process import OperatorProcess
from e2e.test_controller import cond, example, svc_path, wait_condition

pytestmark = pytest.mark.usefixtures("crd", "gpu_nodes")

TIMEOUT = 90


def service(namespace: str, extra: dict[str, str]) -> dict[str, Any]:
    obj = example("llama-3.1-8b-l4.yaml", namespace)
    obj["spec"]["vllm"]["extraArgs"] = extra
    obj["spec"]["vllm"]["allowPlannerOverride"] = True
    return obj


def test_an_override_appears_once_in_the_deployment_argv_and_in_status(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(service(namespace, {"--max-num-seqs": "8"}))
    obj = wait_condition(kube, namespace, "llama-8b-chat", "Feasible", "True", "AllPoolsPlanned")
    dep = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/llama-8b-chat-l4")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args.count("--max-num-seqs") == 1, args
    assert args[args.index("--max-num-seqs") + 1] == "8"
    (pool,) = obj["status"]["pools"]
    plan = pool["plan"]
    assert plan["engineArgs"]["max_num_seqs"] == 8
    assert plan["userOverrides"] == [
        {"arg": "max_num_seqs", "flag": "--max-num-seqs", "planned": 6, "value": 8}
    ]
    assert plan["memory"]["concurrencyAtP99"] >= 6


def test_an_override_breaking_an_engine_rule_is_refused_with_an_event(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(service(namespace, {"--no-enable-chunked-prefill": ""}))
    obj = wait_condition(
        kube, namespace, "llama-8b-chat", "Feasible", "False", "InvalidEngineConfig"
    )
    message = cond(obj, "Feasible")["message"]  # type: ignore[index]
    assert "vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len" in message
    assert "enable_chunked_prefill from extraArgs --no-enable-chunked-prefill" in message
    assert kube.list(f"/apis/apps/v1/namespaces/{namespace}/deployments") == []

    def warned() -> list[dict[str, Any]] | None:
        events = kube.list(f"/api/v1/namespaces/{namespace}/events")
        hits = [
            e for e in events if e["reason"] == "InvalidEngineConfig" and e["type"] == "Warning"
        ]
        return hits or None

    wait_for(warned, timeout=TIMEOUT, what="InvalidEngineConfig Warning Event")
    # Fixing the spec (a batch of max_model_len) renders the pool.
    fixed = service(
        namespace, {"--no-enable-chunked-prefill": "", "--max-num-batched-tokens": "4096"}
    )
    kube.apply(fixed)
    wait_condition(kube, namespace, "llama-8b-chat", "Feasible", "True")
    dep = wait_for(
        lambda: (
            kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/llama-8b-chat-l4")
            if kube.exists(f"/apis/apps/v1/namespaces/{namespace}/deployments/llama-8b-chat-l4")
            else None
        ),
        timeout=TIMEOUT,
        what="Deployment llama-8b-chat-l4",
    )
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args.count("--max-num-batched-tokens") == 1
    assert args[args.index("--max-num-batched-tokens") + 1] == "4096"
    assert kube.get(svc_path(namespace, "llama-8b-chat"))["status"]["pools"][0]["plan"][
        "userOverrides"
    ] == [
        {
            "arg": "max_num_batched_tokens",
            "flag": "--max-num-batched-tokens",
            "planned": 2048,
            "value": 4096,
        }
    ]
