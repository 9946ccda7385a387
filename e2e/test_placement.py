"""placement.strategy Preferred on the local control plane (#29): the real scheduler, kwok GPU nodes.

H100 full (other pods hold every H100 GPU) -> the replicas land on A100 with the A100 plan; one
H100 node freed -> exactly one replica moves back (added on H100 first, the A100 one removed once
the H100 one is Ready), and the Ready count never drops below the total while it moves. A node of
the preferred type drained in the middle of a move cancels it (the spilled replica kept), the move
is redone only after minDwellSeconds, and a node merely cordoned mid-move lets the move finish.

Every wait is bounded by a condition (status, Events, pods), never a fixed window.
"""

from __future__ import annotations

import calendar
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import Cluster
from e2e.kube import Kube, wait_for
from e2e.localcluster import node_manifests
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


# A kwok node whose pods kwok never readies (hack/kwok/stages.yaml, pod-ready): the test plays its
# kubelet, so a pod of a move can stay bound but not Ready for as long as the test needs. Its GPU
# type (A100-80GB) is on no other simulated node, so no filler pods are needed.
HELD_NODE = "gpu-kubelet-held-0"
A100_80 = "NVIDIA-A100-SXM4-80GB"


def _held_node(tmp_path: Path) -> dict[str, Any]:
    """The node, cordoned; facts of A100-80GB from shared/data/gpu-catalog.csv (81920 MiB, 8.0)."""
    spec = {
        "gpuTypes": {A100_80: {"memoryMiB": 81920, "computeCapability": "8.0", "family": "ampere"}},
        "nodes": [
            {
                "name": "gpu-kubelet-held",
                "count": 1,
                "gpuProduct": A100_80,
                "gpusPerNode": 2,
                "cpu": "128",
                "memory": "1000Gi",
            }
        ],
    }
    path = tmp_path / "held-node.yaml"
    path.write_text(yaml.safe_dump(spec))
    (node,) = node_manifests(path)
    node["spec"]["unschedulable"] = True
    return node


def _cordon(kube: Kube, cordoned: bool) -> None:
    kube.patch(f"/api/v1/nodes/{HELD_NODE}", {"spec": {"unschedulable": cordoned}})


def _held_pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return [
        p
        for p in kube.list(f"/api/v1/namespaces/{namespace}/pods")
        if p["spec"].get("nodeName") == HELD_NODE and not p["metadata"].get("deletionTimestamp")
    ]


def _play_kubelet_ready(kube: Kube, namespace: str, pod: dict[str, Any]) -> None:
    """Writes Running and Ready as a kubelet would once the container passes readiness."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": now}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    statuses = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": "",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }
        for c in pod["spec"]["containers"]
    ]
    kube.patch(
        f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
        {"status": {"phase": "Running", "conditions": conditions, "containerStatuses": statuses}},
        subresource="status",
    )


def _event_times(kube: Kube, namespace: str, reason: str) -> list[str]:
    """When each Event of `reason` was last seen (an aggregated Event counts once, last time)."""
    return sorted(
        str(e.get("lastTimestamp") or e.get("firstTimestamp"))
        for e in kube.list(f"/api/v1/namespaces/{namespace}/events")
        if e["reason"] == reason
    )


def _seconds(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))


def test_preferred_node_drained_mid_move_cancels_it_and_a_cordon_lets_it_finish(
    cluster: Cluster, kube: Kube, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    if cluster.local is None:
        pytest.skip("adds a simulated node: needs the local control plane")
    dwell = 30
    cluster.local.add_nodes([_held_node(tmp_path)])
    try:
        obj = example("qwen2.5-14b-h100-a100.yaml", namespace)
        name = obj["metadata"]["name"]
        obj["spec"]["replicas"] = 2
        obj["spec"]["placement"] = {
            "gpuTypes": [A100_80, A100],
            "strategy": "Preferred",
            "spillAfterSeconds": 10,
            "minDwellSeconds": dwell,
        }
        kube.apply(obj)
        # Its only node cordoned: both replicas spill to A100-40GB at once (inventory, no wait).
        wait_for(
            lambda: _replicas(kube, namespace) == {A100_80: (0, 0), A100: (2, 2)},
            timeout=180,
            interval=1,
            what="both replicas Ready on A100-40GB",
        )
        seen: list[dict[str, tuple[int, int]]] = []

        def sample() -> dict[str, tuple[int, int]]:
            counts = _replicas(kube, namespace)
            seen.append(counts)
            return counts

        def moving(count: int) -> dict[str, Any] | None:
            """The move in flight (its new pod bound to the held node, not Ready), once
            ReplicaMovingBack has been recorded `count` times."""
            sample()
            placement = _placement(kube, namespace, name)
            pods = _held_pods(kube, namespace)
            if len(_event_times(kube, namespace, "ReplicaMovingBack")) < count:
                return None
            if not placement.get("move") or len(pods) != 1:
                return None
            return pods[0]

        # Room returns: a move starts; its new pod is bound but not Ready (the test is kubelet).
        _cordon(kube, False)
        pod = wait_for(lambda: moving(1), timeout=120, interval=0.5, what="a move in flight")
        assert _ready_pods(kube, namespace, {"app.kubernetes.io/instance": name}) == 2

        # Drained mid-move (cordon, then the new pod evicted): its replacement cannot be
        # scheduled, so the move is cancelled and the spilled replica kept.
        _cordon(kube, True)
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")

        def cancelled() -> bool:
            counts = sample()
            return (
                bool(_event_times(kube, namespace, "ReplicaMoveCancelled"))
                and counts == {A100_80: (0, 0), A100: (2, 2)}
                and not _placement(kube, namespace, name).get("move")
            )

        wait_for(cancelled, timeout=120, interval=0.5, what="the move cancelled")
        assert _placement(kube, namespace, name)["spilled"] == 2

        # Room again: the move is redone, but not before minDwellSeconds after the cancel.
        _cordon(kube, False)
        pod = wait_for(lambda: moving(2), timeout=180, interval=0.5, what="the move redone")
        (cancelled_at,) = _event_times(kube, namespace, "ReplicaMoveCancelled")
        redone_at = _event_times(kube, namespace, "ReplicaMovingBack")[-1]
        # Second precision on both sides: allow one second of rounding.
        assert _seconds(redone_at) - _seconds(cancelled_at) >= dwell - 1, (
            cancelled_at,
            redone_at,
        )

        # Cordoned (not drained) mid-move: the new pod keeps its GPU, so the move finishes once
        # it is Ready, and only then is the A100-40GB replica removed.
        _cordon(kube, True)
        _play_kubelet_ready(kube, namespace, pod)

        def moved() -> bool:
            return bool(_event_times(kube, namespace, "ReplicaMovedBack")) and sample() == {
                A100_80: (1, 1),
                A100: (1, 1),
            }

        wait_for(moved, timeout=120, interval=0.5, what="the move finished on a cordoned node")
        # The Ready count never fell below the total, and nothing moved more than asked.
        assert all(c[A100][1] + c[A100_80][1] >= 2 for c in seen), seen
        assert len(_event_times(kube, namespace, "ReplicaMovingBack")) == 2
        assert len(_event_times(kube, namespace, "ReplicaMoveCancelled")) == 1
        assert not _placement(kube, namespace, name).get("move")
    finally:
        kube.delete(f"/api/v1/nodes/{HELD_NODE}")


def test_autoscaler_scales_the_preferred_total_through_the_scale_subresource(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """What an HPA or KEDA does to a Preferred service: read and write vllmservices/scale (the
    total). Room for one H100 replica: scale-out fills it, then spills; scale-in drains the spill."""
    nodes = [n["metadata"]["name"] for n in _h100_nodes(kube)]
    wait_for(
        lambda: all(_gpus_held(kube, n) == 0 for n in nodes),
        timeout=120,
        interval=1,
        what="H100 nodes free of earlier tests' pods",
    )
    for i, node in enumerate(nodes):
        kube.create(_filler(namespace, node, 7 if i == 0 else 8))
    obj = example("qwen2.5-14b-h100-a100.yaml", namespace)
    name = obj["metadata"]["name"]
    obj["spec"]["placement"].update({"strategy": "Preferred", "spillAfterSeconds": 10})
    kube.apply(obj)
    wait_for(
        lambda: _replicas(kube, namespace) == {H100: (1, 1), A100: (0, 0)},
        timeout=180,
        interval=1,
        what="one replica Ready on H100",
    )
    scale_path = f"{svc_path(namespace, name)}/scale"

    def scaled(total: int, want: dict[str, tuple[int, int]]) -> dict[str, Any] | None:
        scale = kube.get(scale_path)
        ok = _replicas(kube, namespace) == want and scale["status"].get("replicas") == total
        return scale if ok else None

    kube.patch(scale_path, {"spec": {"replicas": 3}})
    scale = wait_for(
        lambda: scaled(3, {H100: (1, 1), A100: (2, 2)}),
        timeout=120,
        interval=1,
        what="scaled out to 3: H100 full, 2 spilled",
    )
    assert scale["spec"]["replicas"] == 3
    assert scale["status"]["selector"] == (
        f"app.kubernetes.io/name=vllm,app.kubernetes.io/instance={name}"
    )
    kube.patch(scale_path, {"spec": {"replicas": 2}})
    wait_for(
        lambda: scaled(2, {H100: (1, 1), A100: (1, 1)}),
        timeout=120,
        interval=1,
        what="scaled in to 2: a spilled replica removed first",
    )
    assert _placement(kube, namespace, name)["spilled"] == 1


def test_gpus_held_in_an_unwatched_namespace_spill_at_once_without_listing_pods(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """#32: the operator watches only `namespace`; another namespace's pods fill every H100 GPU.
    Its watch of the bound GPU pods outside its namespaces (kube/inventory.py) counts them, so
    the replica is placed on A100 at once (spillAfterSeconds is an hour: no Pending wait can
    cause it), and no reconcile listed pods through the API (it used to, on every decision)."""
    nodes = [n["metadata"]["name"] for n in _h100_nodes(kube)]
    wait_for(
        lambda: all(_gpus_held(kube, n) == 0 for n in nodes),
        timeout=120,
        interval=1,
        what="H100 nodes free of earlier tests' pods",
    )
    other = f"{namespace}-train"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        kube.wait_for_default_service_account(other)
        for node in nodes:
            kube.create(_filler(other, node, 8))
        obj = example("qwen2.5-14b-h100-a100.yaml", namespace)
        name = obj["metadata"]["name"]
        obj["spec"]["replicas"] = 1
        obj["spec"]["placement"].update(
            {"strategy": "Preferred", "spillAfterSeconds": 3600, "minDwellSeconds": 3600}
        )
        kube.apply(obj)

        def spilled() -> dict[str, Any] | None:
            by_type = {t["gpuType"]: t for t in _placement(kube, namespace, name).get("types", [])}
            if by_type.get(A100, {}).get("desired") == 1 and by_type[H100]["desired"] == 0:
                return by_type
            return None

        by_type = wait_for(spilled, timeout=120, interval=1, what="the replica placed on A100")
        assert by_type[H100]["reason"] == "NoRoom", by_type
        reads = {k: v for k, v in operator.metrics().items() if "api_reads_total" in k and v}
        assert not [k for k in reads if 'kind="list:Pod"' in k], reads
    finally:
        kube.delete(f"/api/v1/namespaces/{other}")
