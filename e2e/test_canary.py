"""A new plan whose canary crashes is rolled back, the old pod serving throughout (#27).

Real control plane, real operator, kwok pods: the canary pod's crash is written as a kubelet
reports it (OOMKilled, restarted, CrashLoopBackOff). Every wait is bounded by a state the
operator or the API server reaches, not by a fixed window.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import EXAMPLES, Cluster
from e2e.kube import Kube, load_manifests, wait_for
from e2e.localcluster import set_container_status
from e2e.operator_process import OperatorProcess

GROUP_PATH = "/apis/serving.vllm-operator.dev/v1alpha1"
NAME = "llama-8b-chat"
DEPLOYMENT = "llama-8b-chat-l4"
CANARY = DEPLOYMENT + "-canary"
HASH = "serving.vllm-operator.dev/plan-hash"

pytestmark = pytest.mark.usefixtures("crd", "gpu_nodes")


def service(namespace: str) -> dict[str, Any]:
    (obj,) = load_manifests(EXAMPLES / "llama-3.1-8b-l4.yaml")
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["replicas"] = 1
    # A surge: the old pod keeps serving while the canary runs (one spare L4 in the rig).
    obj["spec"]["rollout"] = {
        "maxSurge": 1,
        "maxUnavailable": 0,
        "canary": {"enabled": True, "observationSeconds": 3600},
    }
    obj["spec"]["remediation"] = {"mode": "off", "evaluationIntervalSeconds": 10}
    return obj


def cond(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(
        (dict(c) for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_),
        {},
    )


def test_a_crashing_canary_is_rolled_back_and_the_old_pod_serves_throughout(
    cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    svc_path = f"{GROUP_PATH}/namespaces/{namespace}/vllmservices/{NAME}"
    dep_path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{DEPLOYMENT}"
    canary_path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{CANARY}"
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    kube.apply(service(namespace))

    def pods(selector: str) -> list[dict[str, Any]]:
        return [
            p
            for p in kube.list(pods_path, label_selector=selector)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]

    with OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", [namespace]):
        wait_for(
            lambda: cond(kube.get(svc_path), "Ready").get("status") == "True",
            timeout=90,
            what="the service Ready",
        )
        (old_pod,) = pods(f"app.kubernetes.io/instance={NAME}")
        old_name = old_pod["metadata"]["name"]
        old_hash = kube.get(dep_path)["metadata"]["annotations"][HASH]
        wait_for(
            lambda: (
                (kube.get(svc_path).get("status") or {}).get("pools", [{}])[0].get("lastGoodPlan")
            ),
            timeout=60,
            what="status.pools[0].lastGoodPlan",
        )

        def old_pod_serves() -> None:
            names = [p["metadata"]["name"] for p in pods(f"app.kubernetes.io/instance={NAME}")]
            assert old_name in names, f"the old pod {old_name} stopped serving: {names}"
            assert kube.get(dep_path)["metadata"]["annotations"][HASH] == old_hash

        kube.patch(svc_path, {"spec": {"workload": {"concurrency": 3}}})

        def canary_pod() -> str | None:
            old_pod_serves()
            found = pods("serving.vllm-operator.dev/canary=true")
            return str(found[0]["metadata"]["name"]) if found else None

        canary = wait_for(canary_pod, timeout=90, what="a Running canary pod")
        new_hash = kube.get(canary_path)["metadata"]["annotations"][HASH]
        assert new_hash != old_hash
        status = kube.get(svc_path)["status"]
        assert status["pools"][0]["canary"]["phase"] == "Observing"
        assert cond(kube.get(svc_path), "Progressing")["reason"] == "CanaryObserving"

        set_container_status(kube, namespace, canary)  # OOMKilled, restarted, CrashLoopBackOff

        def rolled_back() -> dict[str, Any] | None:
            old_pod_serves()
            obj = kube.get(svc_path)
            degraded = cond(obj, "Degraded")
            return obj if degraded.get("reason") == "CanaryFailed" else None

        # The operator looks at a watched canary at least every 30 s (remediation/canary.py).
        obj = wait_for(rolled_back, timeout=90, what="Degraded=True CanaryFailed")
        degraded = cond(obj, "Degraded")
        assert degraded["status"] == "True" and new_hash in degraded["message"]
        pool = obj["status"]["pools"][0]
        assert pool["canary"]["phase"] == "Failed" and pool["lastGoodPlan"]["hash"] == old_hash
        kube.wait_gone(canary_path, timeout=60)
        old_pod_serves()
