"""A new plan whose canary crashes is rolled back, the old pod serving throughout (#27).

Real control plane, real operator, kwok pods: the canary pod's crash is written as a kubelet
reports it (OOMKilled, restarted, CrashLoopBackOff). Every wait is bounded by a state the
operator or the API server reaches, not by a fixed window.

The same for a multi-node pool: a LeaderWorkerSet whose group (leader and worker on two simulated
L4 nodes, the real LWS controller) is the canary's unit, with canaries on by the operator's
cluster default (`vllm-operator run --canary`) for a spec that does not mention them.
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
SERVING = "serving.vllm-operator.dev/serving"

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


MN_NAME = "qwen-14b"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "qwen-14b-l4"
LWS_CANARY = LWS_GROUP + "-canary"


def multinode_service(namespace: str) -> dict[str, Any]:
    """Qwen2.5-14B in bf16 (~14 GiB of weights per half) does not fit one L4: with
    maxNodesPerReplica 2 it is one group of two single-GPU L4 pods (TP=1, PP=2). The rig has four
    L4 nodes: the running group and a surged canary group fit side by side. No canary knob: the
    operator's cluster default decides."""
    return {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": MN_NAME, "namespace": namespace},
        "spec": {
            "model": {"name": "Qwen/Qwen2.5-14B-Instruct"},
            "vllm": {"version": "0.33.0"},
            "workload": {"p99ContextTokens": 4096, "maxContextTokens": 8192, "concurrency": 4},
            "placement": {"gpuTypes": ["NVIDIA-L4"], "maxNodesPerReplica": 2},
            "replicas": 1,
            "rollout": {"maxSurge": 1, "maxUnavailable": 0},
            "remediation": {"mode": "off", "evaluationIntervalSeconds": 10},
        },
    }


def test_a_crashing_canary_group_is_rolled_back_and_the_old_group_serves_throughout(
    cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    svc_path = f"{GROUP_PATH}/namespaces/{namespace}/vllmservices/{MN_NAME}"
    lws_base = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets"
    lws_path, canary_path = f"{lws_base}/{LWS_GROUP}", f"{lws_base}/{LWS_CANARY}"
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    kube.apply(multinode_service(namespace))

    def running(selector: str) -> list[dict[str, Any]]:
        return [
            p
            for p in kube.list(pods_path, label_selector=selector)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]

    op = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", [namespace], True)
    with op:
        wait_for(
            lambda: cond(kube.get(svc_path), "Ready").get("status") == "True",
            timeout=90,
            what="the multi-node service Ready",
        )
        old_hash = kube.get(lws_path)["metadata"]["annotations"][HASH]
        old_group = wait_for(
            lambda: (lambda ps: ps if len(ps) == 2 else None)(running(f"{LWS_NAME}={LWS_GROUP}")),
            timeout=90,
            what="the group's leader and worker Running",
        )
        old_uids = {p["metadata"]["uid"] for p in old_group}
        wait_for(
            lambda: (
                (kube.get(svc_path).get("status") or {}).get("pools", [{}])[0].get("lastGoodPlan")
            ),
            timeout=60,
            what="status.pools[0].lastGoodPlan",
        )

        def old_group_serves() -> None:
            uids = {p["metadata"]["uid"] for p in running(f"{LWS_NAME}={LWS_GROUP}")}
            assert uids == old_uids, f"the old group changed: {old_uids} -> {uids}"
            assert kube.get(lws_path)["metadata"]["annotations"][HASH] == old_hash

        # A new plan (fewer concurrent sequences): tried on a canary group, the pool holds.
        kube.patch(svc_path, {"spec": {"workload": {"concurrency": 2}}})

        def canary_group() -> list[dict[str, Any]] | None:
            old_group_serves()
            found = running("serving.vllm-operator.dev/canary=true")
            return found if len(found) == 2 else None

        group = wait_for(canary_group, timeout=90, what="the canary group's two pods Running")
        new_hash = kube.get(canary_path)["metadata"]["annotations"][HASH]
        assert new_hash != old_hash
        assert kube.get(canary_path)["spec"]["replicas"] == 1
        assert {p["metadata"]["labels"][LWS_NAME] for p in group} == {LWS_CANARY}
        (worker,) = [p for p in group if p["metadata"]["labels"].get(SERVING) != "true"]
        # The operator has seen the group's leader (its UID: LeaderWorkerSet recreates the whole
        # group when a pod of it restarts, and the new pods show no restart).
        leader = next(p for p in group if p["metadata"]["labels"].get(SERVING) == "true")
        obj = wait_for(
            lambda: (lambda o: o if o["status"]["pools"][0]["canary"].get("podUid") else None)(
                kube.get(svc_path)
            ),
            timeout=60,
            what="status.pools[0].canary.podUid",
        )
        assert obj["status"]["pools"][0]["canary"]["podUid"] == leader["metadata"]["uid"]
        assert obj["status"]["pools"][0]["canary"]["phase"] == "Observing"
        assert cond(obj, "Progressing")["reason"] == "CanaryObserving"

        # The group's worker (a pipeline stage, not the serving leader) dies (OOMKilled,
        # restarted, CrashLoopBackOff): the group is the unit, so the canary failed.
        set_container_status(kube, namespace, worker["metadata"]["name"])

        def rolled_back() -> dict[str, Any] | None:
            old_group_serves()
            found = kube.get(svc_path)
            return found if cond(found, "Degraded").get("reason") == "CanaryFailed" else None

        obj = wait_for(rolled_back, timeout=90, what="Degraded=True CanaryFailed")
        degraded = cond(obj, "Degraded")
        assert degraded["status"] == "True" and new_hash in degraded["message"]
        # Seen either before LeaderWorkerSet recreated the group (the worker's restart) or after
        # (the leader replaced under its name): which one is a race with the LWS controller.
        assert (
            f"the canary pod {worker['metadata']['name']} restarted" in degraded["message"]
            or f"the canary group was recreated (its leader {leader['metadata']['name']}"
            in degraded["message"]
        ), degraded["message"]
        pool = obj["status"]["pools"][0]
        assert pool["canary"]["phase"] == "Failed" and pool["lastGoodPlan"]["hash"] == old_hash
        kube.wait_gone(canary_path, timeout=60)
        wait_for(
            lambda: not running("serving.vllm-operator.dev/canary=true"),
            timeout=60,
            what="the canary group's pods gone",
        )
        old_group_serves()
