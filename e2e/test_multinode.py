"""Multi-node pools end to end: a 405B-class bf16 model across two simulated 8x H100 nodes.

The real operator, the real LeaderWorkerSet controller (sigs.k8s.io/lws, with its webhooks) and
the real scheduler: the operator plans TP=8 x PP=2 (maxNodesPerReplica 2), applies one
LeaderWorkerSet, the LWS controller creates the group's leader and worker pods, kube-scheduler
binds them (one per 8-GPU node: each pod asks for 8 GPUs), kwok runs them, and the VLLMService
becomes Ready. A spec change rolls the group (both pods replaced); deleting the VLLMService
removes the LeaderWorkerSet and its pods through owner references.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from e2e.kube import Kube, load_manifests, wait_for
from e2e.operator_process import OperatorProcess
from e2e.test_controller import svc_path, wait_condition

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "multinode"
EXAMPLE_FILE = EXAMPLE / "llama-3.1-405b-h100-2nodes.yaml"
HASH = "serving.vllm-operator.dev/plan-hash"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
TIMEOUT = 90

pytestmark = pytest.mark.usefixtures("crd", "gpu_nodes")


def example(namespace: str) -> dict[str, Any]:
    if not EXAMPLE_FILE.exists():
        pytest.skip(f"needs the multi-node planner's example {EXAMPLE_FILE.name} (#17 part 1)")
    (obj,) = load_manifests(EXAMPLE_FILE)
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    return obj


def lws_path(namespace: str, name: str = "") -> str:
    base = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets"
    return f"{base}/{name}" if name else base


def group_pods(kube: Kube, namespace: str, lws: str) -> list[dict[str, Any]]:
    return kube.list(f"/api/v1/namespaces/{namespace}/pods", label_selector=f"{LWS_NAME}={lws}")


def running_group(kube: Kube, namespace: str, lws: str, size: int, plan_hash: str) -> Any:
    """The group's pods once all `size` run the plan `plan_hash`, are Ready and none is going."""

    def check() -> list[dict[str, Any]] | None:
        pods = group_pods(kube, namespace, lws)
        if len(pods) != size:
            return None
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or meta.get("annotations", {}).get(HASH) != plan_hash:
                return None
            if not pod["spec"].get("nodeName") or Kube.condition(pod, "Ready") != "True":
                return None
        return pods

    return wait_for(check, timeout=TIMEOUT, what=f"group of {lws} at plan {plan_hash}")


def test_405b_on_two_h100_nodes_runs_as_one_group_rolls_and_cascades(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    obj = example(namespace)
    name = obj["metadata"]["name"]
    kube.apply(obj)
    live = wait_condition(kube, namespace, name, "Ready", "True")
    (pool,) = live["status"]["pools"]
    engine = pool["plan"]["engineArgs"]
    assert (engine["tensor_parallel_size"], engine["pipeline_parallel_size"]) == (8, 2)
    assert pool["readyReplicas"] == 1 and live["status"]["ready"] == "1/1"

    # One LeaderWorkerSet, no Deployment: a group of two pods, 8 GPUs each.
    assert not kube.list(f"/apis/apps/v1/namespaces/{namespace}/deployments")
    (lws,) = kube.list(lws_path(namespace))
    lws_name = lws["metadata"]["name"]
    assert lws_name == pool["deployment"]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["status"]["readyReplicas"] == 1
    first_hash = lws["metadata"]["annotations"][HASH]
    pods = running_group(kube, namespace, lws_name, 2, first_hash)
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 2, f"both stages on one node: {nodes}"
    for node in nodes:
        labels = kube.get(f"/api/v1/nodes/{node}")["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    leader = next(p for p in pods if p["metadata"]["labels"][WORKER_INDEX] == "0")
    worker = next(p for p in pods if p["metadata"]["labels"][WORKER_INDEX] == "1")
    assert {p["metadata"]["labels"][GROUP_INDEX] for p in pods} == {"0"}
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        env = {e["name"]: e.get("value") for e in container.get("env") or []}
        # Injected by the LeaderWorkerSet controller's pod webhook; the args refer to them.
        assert env["LWS_GROUP_SIZE"] == "2"
        assert env["LWS_LEADER_ADDRESS"].startswith(f"{lws_name}-0.{lws_name}.{namespace}")
    assert worker["metadata"]["labels"].get("serving.vllm-operator.dev/serving") is None
    assert "--headless" in worker["spec"]["containers"][0]["args"]
    assert leader["metadata"]["labels"]["serving.vllm-operator.dev/serving"] == "true"
    old_uids = {p["metadata"]["uid"] for p in pods}

    # The service's PodDisruptionBudget counts the whole group (leader and worker): one
    # voluntary disruption is allowed, and it takes the group down, which spends the budget.
    pdb_path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"

    def pdb_counts_group() -> dict[str, Any] | None:
        pdb = kube.get(pdb_path)
        return pdb if (pdb.get("status") or {}).get("expectedPods") == 2 else None

    pdb = wait_for(pdb_counts_group, timeout=TIMEOUT, what="the PDB to count both pods")
    assert pdb["status"]["disruptionsAllowed"] == 1

    # A no-op trigger: the operator reconciles and writes nothing (the LeaderWorkerSet's
    # webhook defaults are not a diff to re-apply).
    wait_condition(kube, namespace, name, "Progressing", "False", "RolloutComplete")
    wait_condition(kube, namespace, name, "MetricsAvailable", "False")
    writes, reconciles = operator.settled_writes(), operator.reconciles()
    metrics_before = operator.metrics()
    kube.patch(svc_path(namespace, name), {"metadata": {"labels": {"touched": "yes"}}})
    wait_for(lambda: operator.reconciles() > reconciles, timeout=TIMEOUT, what="a reconcile")
    metrics_after = operator.metrics()
    assert operator.settled_writes() == writes, (
        {k: (metrics_before.get(k), v) for k, v in metrics_after.items() if "total" in k},
        operator.log_tail(40),
    )
    assert (
        kube.get(lws_path(namespace, lws_name))["metadata"]["generation"]
        == (lws["metadata"]["generation"])
    )

    # A spec change (fewer concurrent sequences): a new plan rolls the whole group.
    concurrency = obj["spec"]["workload"]["concurrency"] // 2
    kube.patch(svc_path(namespace, name), {"spec": {"workload": {"concurrency": concurrency}}})
    live = wait_condition(kube, namespace, name, "Ready", "True", generation=2)
    lws = kube.get(lws_path(namespace, lws_name))
    second_hash = lws["metadata"]["annotations"][HASH]
    assert second_hash != first_hash
    pods = running_group(kube, namespace, lws_name, 2, second_hash)
    assert not old_uids & {p["metadata"]["uid"] for p in pods}, "a pod of the old group survived"
    for pod in pods:
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--max-num-seqs") + 1] == str(
            live["status"]["pools"][0]["plan"]["engineArgs"]["max_num_seqs"]
        )
    wait_condition(kube, namespace, name, "Progressing", "False", "RolloutComplete", generation=2)

    # Deleting the VLLMService removes the LeaderWorkerSet, its StatefulSets and pods.
    kube.delete(svc_path(namespace, name))
    wait_for(lambda: not kube.list(lws_path(namespace)), timeout=TIMEOUT, what="LWS gone")
    wait_for(
        lambda: not kube.list(f"/apis/apps/v1/namespaces/{namespace}/statefulsets"),
        timeout=TIMEOUT,
        what="StatefulSets gone",
    )
    wait_for(lambda: not group_pods(kube, namespace, lws_name), timeout=TIMEOUT, what="pods gone")
