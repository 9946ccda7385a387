"""The controller end to end: a real operator process against the real control plane.

Each test gets a fresh namespace and its own operator process watching only that namespace, so
tests cannot see each other's objects and a test may stop and restart its operator.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from e2e.conftest import EXAMPLES, Cluster
from e2e.kube import Kube, WaitTimeout, load_manifests, wait_for
from e2e.operator_process import OperatorProcess

GROUP_PATH = "/apis/serving.vllm-operator.dev/v1alpha1"
HASH = "serving.vllm-operator.dev/plan-hash"
TIMEOUT = 90

pytestmark = pytest.mark.usefixtures("crd", "gpu_nodes")


def example(name: str, namespace: str) -> dict[str, Any]:
    (obj,) = load_manifests(EXAMPLES / name)
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    return obj


def svc_path(namespace: str, name: str) -> str:
    return f"{GROUP_PATH}/namespaces/{namespace}/vllmservices/{name}"


def cond(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def wait_condition(
    kube: Kube,
    namespace: str,
    name: str,
    type_: str,
    status: str,
    reason: str | None = None,
    generation: int | None = None,
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = kube.get(svc_path(namespace, name))
        c = cond(obj, type_)
        if c is None or c["status"] != status or (reason and c["reason"] != reason):
            return None
        if (
            generation is not None
            and (obj.get("status") or {}).get("observedGeneration") != generation
        ):
            return None
        return dict(obj)

    try:
        return wait_for(check, timeout=TIMEOUT, what=f"{name} {type_}={status} {reason or ''}")
    except WaitTimeout as err:
        # Say what the service showed instead (a bare "last=None" told nothing in a CI failure).
        status_now = kube.get(svc_path(namespace, name)).get("status") or {}
        seen = [
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status_now.get("conditions") or []
        ]
        raise WaitTimeout(f"{err}; conditions now: {seen}") from err


def deployments(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return kube.list(f"/apis/apps/v1/namespaces/{namespace}/deployments")


def test_every_example_is_planned_and_ready_on_matching_nodes(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    names = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        obj = example(path.name, namespace)
        kube.apply(obj)
        names.append(obj["metadata"]["name"])
    for name in names:
        obj = wait_condition(kube, namespace, name, "Ready", "True")
        assert cond(obj, "Feasible")["status"] == "True"  # type: ignore[index]
        status = obj["status"]
        # Every desired replica Ready; a Preferred example places its total across the pools
        # (e.g. 3 on L4, 0 on the spill type), so the count is not one per pool.
        desired = sum(pool.get("replicas", 0) for pool in status["pools"])
        assert desired >= 1 and status["ready"] == f"{desired}/{desired}", status["ready"]
        for pool in status["pools"]:
            if not pool.get("replicas"):
                continue  # a Preferred spill pool holding none: no pods to check
            dep = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{pool['deployment']}")
            pod_spec = dep["spec"]["template"]["spec"]
            assert pod_spec["nodeSelector"]["nvidia.com/gpu.product"] == pool["gpuType"]
            args = pod_spec["containers"][0]["args"]
            engine = pool["plan"]["engineArgs"]
            assert args[args.index("--max-num-seqs") + 1] == str(engine["max_num_seqs"])
            assert args[args.index("--max-model-len") + 1] == str(engine["max_model_len"])
            tp = engine["tensor_parallel_size"]
            limits = pod_spec["containers"][0]["resources"]["limits"]
            assert limits["nvidia.com/gpu"] == str(tp)
            selector = ",".join(
                f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items()
            )
            pods = kube.list(f"/api/v1/namespaces/{namespace}/pods", label_selector=selector)
            assert pods and all(p["status"]["phase"] == "Running" for p in pods)
            for pod in pods:
                node = kube.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
                assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == pool["gpuType"]
        services = kube.list(f"/api/v1/namespaces/{namespace}/services")
        assert name in {s["metadata"]["name"] for s in services}


def kopf_bookkeeping(live: dict[str, Any]) -> dict[str, Any]:
    """What Kopf would have persisted on a VLLMService: its annotations (diff-base, progress;
    under its default prefix or ours) and finalizers. None since #32 (event handlers only)."""
    meta = live["metadata"]
    found: dict[str, Any] = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith("kopf.zalando.org/")
        or k.startswith("serving.vllm-operator.dev/last-handled")
        or k.startswith("serving.vllm-operator.dev/kopf")
    }
    if meta.get("finalizers"):
        found["finalizers"] = meta["finalizers"]
    return found


def test_spec_change_rolls_new_args_and_noop_makes_zero_writes(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    obj = example("llama-3.1-8b-l4.yaml", namespace)
    kube.apply(obj)
    live = wait_condition(kube, namespace, "llama-8b-chat", "Ready", "True")
    assert kopf_bookkeeping(live) == {}  # #32: Kopf persists nothing on the service
    wait_condition(kube, namespace, "llama-8b-chat", "Progressing", "False", "RolloutComplete")
    # The first remediation evaluation records MetricsAvailable (no Prometheus here): a real
    # change, written once. Wait for it so the no-op below starts from a settled status.
    wait_condition(kube, namespace, "llama-8b-chat", "MetricsAvailable", "False")
    dep_path = f"/apis/apps/v1/namespaces/{namespace}/deployments/llama-8b-chat-l4"
    before = kube.get(dep_path)

    # A no-op trigger (a label only): the operator reconciles and writes nothing.
    writes = operator.settled_writes()
    metrics_before = operator.metrics()
    reconciles = operator.reconciles()
    kube.patch(svc_path(namespace, "llama-8b-chat"), {"metadata": {"labels": {"touched": "yes"}}})
    wait_for(lambda: operator.reconciles() > reconciles, timeout=TIMEOUT, what="a reconcile")
    metrics_after = operator.metrics()
    assert operator.settled_writes() == writes, {
        k: (metrics_before.get(k), v) for k, v in metrics_after.items() if "total" in k
    }
    assert (
        kube.get(dep_path)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    )

    # A real change rolls the Deployment with the new plan.
    kube.patch(svc_path(namespace, "llama-8b-chat"), {"spec": {"workload": {"concurrency": 3}}})
    live = wait_condition(kube, namespace, "llama-8b-chat", "Ready", "True", generation=2)
    assert kopf_bookkeeping(live) == {}
    after = kube.get(dep_path)
    assert after["metadata"]["annotations"][HASH] != before["metadata"]["annotations"][HASH]
    args = after["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-num-seqs") + 1] == "3"


def test_spec_and_user_metadata_stay_as_applied(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    obj = example("qwen2.5-14b-h100-a100.yaml", namespace)
    obj["metadata"]["labels"] = {"team": "search"}
    obj["metadata"]["annotations"] = {"example.com/owner": "search"}
    kube.apply(obj)
    live = wait_condition(kube, namespace, "qwen-14b", "Ready", "True")
    assert live["spec"] == obj["spec"]
    assert live["metadata"]["labels"] == obj["metadata"]["labels"]
    ours = {
        k: v
        for k, v in live["metadata"]["annotations"].items()
        if not k.startswith("serving.vllm-operator.dev/")
    }
    assert ours == obj["metadata"]["annotations"]


def test_deleting_the_service_removes_everything(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(example("llama-3.1-8b-l4.yaml", namespace))
    wait_condition(kube, namespace, "llama-8b-chat", "Ready", "True")
    kube.delete(svc_path(namespace, "llama-8b-chat"))
    wait_for(lambda: not deployments(kube, namespace), timeout=TIMEOUT, what="deployments gone")
    wait_for(
        lambda: not [s for s in kube.list(f"/api/v1/namespaces/{namespace}/services")],
        timeout=TIMEOUT,
        what="services gone",
    )
    wait_for(
        lambda: not kube.list(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"),
        timeout=TIMEOUT,
        what="PDBs gone",
    )


def test_restart_in_the_middle_of_a_rollout_resumes_without_duplicates(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(example("qwen2.5-14b-h100-a100.yaml", namespace))
    wait_condition(kube, namespace, "qwen-14b", "Ready", "True")
    operator.stop()
    kube.patch(svc_path(namespace, "qwen-14b"), {"spec": {"workload": {"concurrency": 8}}})
    operator.start()
    wait_condition(kube, namespace, "qwen-14b", "Ready", "True", generation=2)
    deps = deployments(kube, namespace)
    assert sorted(d["metadata"]["name"] for d in deps) == [
        "qwen-14b-a100-40gb",
        "qwen-14b-h100-80gb",
    ]
    for dep in deps:
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--max-num-seqs") + 1] == "8"
    assert len(kube.list(f"/api/v1/namespaces/{namespace}/services")) == 1


def test_infeasible_unknown_model_and_bad_flags_create_nothing(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    infeasible = example("llama-3.1-70b-h100-tp.yaml", namespace)
    infeasible["spec"]["placement"] = {"gpuTypes": ["Tesla-T4"], "maxGPUsPerReplica": 1}
    unknown = example("llama-3.1-8b-l4.yaml", namespace)
    unknown["metadata"]["name"] = "private"
    unknown["spec"]["model"]["name"] = "acme/private-model-7b"
    bad_flag = example("llama-3.1-8b-l4.yaml", namespace)
    bad_flag["metadata"]["name"] = "bad-flag"
    bad_flag["spec"]["vllm"]["extraArgs"] = {"--swap-space": "8"}
    for obj in (infeasible, unknown, bad_flag):
        kube.apply(obj)
    obj = wait_condition(kube, namespace, "llama-70b", "Feasible", "False", "Infeasible")
    assert "Tesla-T4" in cond(obj, "Feasible")["message"]  # type: ignore[index]
    obj = wait_condition(kube, namespace, "private", "Feasible", "False", "UnknownModel")
    assert "spec.model.architecture" in cond(obj, "Feasible")["message"]  # type: ignore[index]
    obj = wait_condition(kube, namespace, "bad-flag", "Feasible", "False", "InvalidExtraArgs")
    assert "--swap-space" in cond(obj, "Feasible")["message"]  # type: ignore[index]
    assert deployments(kube, namespace) == []
    kube.wait_events(namespace, "Infeasible", type_="Warning")


def test_missing_gpu_type_waits_for_nodes_then_plans(
    cluster: Cluster, kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    if cluster.local is None:
        pytest.skip("adds simulated nodes: needs the local control plane")
    obj = example("llama-3.1-8b-l4.yaml", namespace)
    obj["spec"]["placement"]["gpuTypes"] = ["NVIDIA-L40S"]
    kube.apply(obj)
    wait_condition(kube, namespace, "llama-8b-chat", "Progressing", "False", "NoMatchingNodes")
    assert deployments(kube, namespace) == []
    node = copy.deepcopy(cluster.kube.get("/api/v1/nodes/gpu-l4-0"))
    name = f"gpu-l40s-{namespace}"
    labels = dict(node["metadata"]["labels"])
    labels.update(
        {
            "nvidia.com/gpu.product": "NVIDIA-L40S",
            "nvidia.com/gpu.memory": "46068",
            "kubernetes.io/hostname": name,
        }
    )
    cluster.local.add_nodes(
        [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": node["metadata"].get("annotations", {}),
                },
                "spec": {"taints": node["spec"].get("taints", [])},
                "status": {
                    "capacity": node["status"]["capacity"],
                    "allocatable": node["status"]["allocatable"],
                },
            }
        ]
    )
    try:
        wait_condition(kube, namespace, "llama-8b-chat", "Ready", "True")
        assert [d["metadata"]["name"] for d in deployments(kube, namespace)] == [
            "llama-8b-chat-l40s"
        ]
    finally:
        kube.delete(f"/api/v1/nodes/{name}")


def test_probe_budget_on_nodes_changes_the_plan(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    import json
    from datetime import UTC, datetime

    key = "serving.vllm-operator.dev/gpu-budget"
    l4_nodes = kube.list("/api/v1/nodes", label_selector="nvidia.com/gpu.product=NVIDIA-L4")
    obj = example("llama-3.1-8b-l4.yaml", namespace)
    obj["spec"]["workload"]["concurrency"] = 2
    kube.apply(obj)
    before = wait_condition(kube, namespace, "llama-8b-chat", "Ready", "True")
    assert "probe" not in before["status"]["pools"][0]["plan"]["memory"]["budgetSource"].lower()
    try:
        for node in l4_nodes:
            name = node["metadata"]["name"]
            budget = {
                "node": name,
                "observedAt": datetime.now(UTC).isoformat(),
                "probeVersion": "e2e",
                "gpus": [
                    {
                        "index": 0,
                        "uuid": f"GPU-{name}",
                        "name": "NVIDIA L4",
                        "totalMib": 23034,
                        "freeMib": 19734,
                        "usedMib": 3300,
                        "processes": [{"pid": 4242, "usedMib": 3000}],
                    }
                ],
            }
            kube.patch(
                f"/api/v1/nodes/{name}", {"metadata": {"annotations": {key: json.dumps(budget)}}}
            )

        def measured() -> dict[str, Any] | None:
            live = kube.get(svc_path(namespace, "llama-8b-chat"))
            pools = (live.get("status") or {}).get("pools") or []
            if pools and "probe" in pools[0]["plan"]["memory"]["budgetSource"].lower():
                return dict(pools[0])
            return None

        pool = wait_for(measured, timeout=TIMEOUT, what="a plan from the probe budget")
        assert pool["plan"]["engineArgs"]["gpu_memory_utilization"] < 0.9
        assert any("measured free memory" in r for r in pool["plan"]["reasons"])
    finally:
        for node in l4_nodes:
            kube.patch(
                f"/api/v1/nodes/{node['metadata']['name']}",
                {"metadata": {"annotations": {key: None}}},
            )
