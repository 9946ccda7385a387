"""placement.strategy Preferred on the local control plane (#29): the real scheduler, kwok GPU nodes.

H100 full (other pods hold every H100 GPU) -> the replicas land on A100 with the A100 plan; one
H100 node freed -> exactly one replica moves back (added on H100 first, the A100 one removed once
the H100 one is Ready), and the Ready count never drops below the total while it moves.

Every wait is bounded by a condition (status, Events, pods), never a fixed window.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.kube import Kube, wait_for
from e2e.operator_process import OperatorProcess
from e2e.test_controller import deployments, example, svc_path, wait_condition

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("crd", "gpu_nodes")]

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-40GB"


def _h100_nodes(kube: Kube) -> list[dict[str, Any]]:
    nodes = kube.list("/api/v1/nodes", label_selector=f"nvidia.com/gpu.product={H100}")
    assert nodes, "the local cluster has no H100 node"
    return sorted(nodes, key=lambda n: n["metadata"]["name"])


def _gpus_held(kube: Kube, node: str) -> int:
    """GPUs requested by the pods bound to `node` that have not ended (any namespace)."""
    held = 0
    for pod in kube.list("/api/v1/pods"):
        if pod["spec"].get("nodeName") != node:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for c in pod["spec"]["containers"]:
            held += int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
    return held


def _filler(namespace: str, node: str, gpus: int) -> dict[str, Any]:
    """Another workload holding `gpus` GPUs of `node` (bound directly, as a training job's pod)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"train-{node}", "namespace": namespace, "labels": {"app": "train"}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "train",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(gpus)},
                        "requests": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def _placement(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return (kube.get(svc_path(namespace, name)).get("status") or {}).get("placement") or {}


def _ready_pods(kube: Kube, namespace: str, selector: dict[str, str]) -> int:
    """Pods of a Deployment passing readiness now (the truth; Deployment status lags it)."""
    pods = kube.list(
        f"/api/v1/namespaces/{namespace}/pods",
        label_selector=",".join(f"{k}={v}" for k, v in sorted(selector.items())),
    )
    return sum(
        1
        for p in pods
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    )


def _replicas(kube: Kube, namespace: str) -> dict[str, tuple[int, int]]:
    """(spec.replicas, Ready pods) per Deployment, keyed by the pool's GPU type."""
    return {
        d["metadata"]["annotations"]["serving.vllm-operator.dev/gpu-type"]: (
            int(d["spec"].get("replicas") or 0),
            _ready_pods(kube, namespace, d["spec"]["selector"]["matchLabels"]),
        )
        for d in deployments(kube, namespace)
    }


def _reasons(kube: Kube, namespace: str) -> list[str]:
    return [e["reason"] for e in kube.list(f"/api/v1/namespaces/{namespace}/events")]


def test_full_h100_spills_to_a100_and_one_replica_moves_back_when_a_node_frees(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    nodes = [n["metadata"]["name"] for n in _h100_nodes(kube)]
    # Earlier tests' pods may still be terminating on the H100 nodes: wait until they are free,
    # then fill every H100 GPU with another workload's pods.
    wait_for(
        lambda: all(_gpus_held(kube, n) == 0 for n in nodes),
        timeout=120,
        interval=1,
        what="H100 nodes free of earlier tests' pods",
    )
    for node in nodes:
        kube.create(_filler(namespace, node, 8))
    wait_for(
        lambda: all(
            (kube.get(f"/api/v1/namespaces/{namespace}/pods/train-{n}").get("status") or {}).get(
                "phase"
            )
            == "Running"
            for n in nodes
        ),
        timeout=120,
        interval=1,
        what="training pods Running on every H100 node",
    )

    obj = example("qwen2.5-14b-h100-a100.yaml", namespace)
    name = obj["metadata"]["name"]
    obj["spec"]["replicas"] = 2
    obj["spec"]["placement"].update(
        {"strategy": "Preferred", "spillAfterSeconds": 10, "minDwellSeconds": 3600}
    )
    kube.apply(obj)

    live = wait_condition(kube, namespace, name, "Ready", "True")
    placement = _placement(kube, namespace, name)
    assert placement["total"] == 2 and placement["spilled"] == 2, placement
    by_type = {t["gpuType"]: t for t in placement["types"]}
    assert by_type[H100]["desired"] == 0 and by_type[H100]["reason"] == "NoRoom", by_type
    assert by_type[A100]["desired"] == 2 and by_type[A100]["reason"] == "Spilled", by_type
    assert _replicas(kube, namespace) == {H100: (0, 0), A100: (2, 2)}
    # The A100 replicas run the A100 plan, not the H100 one.
    plans = {p["gpuType"]: p["plan"] for p in live["status"]["pools"]}
    assert plans[A100]["hash"] != plans[H100]["hash"]
    a100_dep = next(
        d
        for d in deployments(kube, namespace)
        if d["metadata"]["annotations"]["serving.vllm-operator.dev/gpu-type"] == A100
    )
    assert (
        a100_dep["metadata"]["annotations"]["serving.vllm-operator.dev/plan-hash"]
        == plans[A100]["hash"]
    )

    # One H100 node freed: one replica moves back, started on H100 before the A100 one goes.
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/train-{nodes[0]}")
    seen: list[dict[str, tuple[int, int]]] = []

    def moved() -> bool:
        counts = _replicas(kube, namespace)
        seen.append(counts)
        return "ReplicaMovedBack" in _reasons(kube, namespace) and counts == {
            H100: (1, 1),
            A100: (1, 1),
        }

    wait_for(moved, timeout=240, interval=0.5, what="one replica moved back to H100")
    # Added before drained: the H100 pod was Ready before the spilled replica was removed. Read
    # from the recorded times, not from sampling: on the work queue the intermediate state (H100
    # 1, A100 2) can last less than one poll of this test.
    h100_dep = next(
        d
        for d in deployments(kube, namespace)
        if d["metadata"]["annotations"]["serving.vllm-operator.dev/gpu-type"] == H100
    )
    (h100_pod,) = kube.list(
        f"/api/v1/namespaces/{namespace}/pods",
        label_selector=",".join(
            f"{k}={v}" for k, v in sorted(h100_dep["spec"]["selector"]["matchLabels"].items())
        ),
    )
    ready_at = next(
        c["lastTransitionTime"]
        for c in h100_pod["status"]["conditions"]
        if c["type"] == "Ready" and c["status"] == "True"
    )
    events = kube.list(f"/api/v1/namespaces/{namespace}/events")
    moving_at = min(e["firstTimestamp"] for e in events if e["reason"] == "ReplicaMovingBack")
    moved_at = min(e["firstTimestamp"] for e in events if e["reason"] == "ReplicaMovedBack")
    # RFC 3339 in UTC with second precision on both sides: string order is time order.
    assert moving_at <= ready_at <= moved_at, (moving_at, ready_at, moved_at)
    # Once both A100 replicas were Ready, the Ready count never fell below the total.
    first_ready = next(i for i, c in enumerate(seen) if c[A100][1] + c[H100][1] >= 2)
    assert all(c[A100][1] + c[H100][1] >= 2 for c in seen[first_ready:]), seen
    reasons = _reasons(kube, namespace)
    assert reasons.count("ReplicaMovingBack") == 1, reasons
    placement = _placement(kube, namespace, name)
    assert placement["spilled"] == 1 and placement.get("move") is None, placement
    # minDwellSeconds holds the second replica on A100 although H100 has room.
    assert placement["types"][0]["desired"] == 1


def test_all_strategy_runs_spec_replicas_in_every_pool(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    obj = example("qwen2.5-14b-h100-a100.yaml", namespace)
    name = obj["metadata"]["name"]
    kube.apply(obj)
    live = wait_condition(kube, namespace, name, "Ready", "True")
    assert "placement" not in live["status"]
    assert {k: v[0] for k, v in _replicas(kube, namespace).items()} == {H100: 1, A100: 1}
