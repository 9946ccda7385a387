"""placement.strategy Preferred through the controller against the in-memory gateway (#29).

A tiny ReplicaSet/scheduler stand-in (`settle_pods`) binds each pool's pods to nodes with free
GPUs (counting every pod's requests, as kube/pods.py does), leaves the rest Pending and
Unschedulable, and marks bound pods Ready: enough to drive spill, move back and `All`.
"""

import copy
from datetime import datetime, timedelta
from typing import Any

from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller

from .nodes import gpu_node
from .test_controller import NOW, OfflineHub, example, status_of

H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def foreign_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "training", "labels": {"app": "train"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def settle_pods(gw: FakeGateway, now: datetime) -> None:
    """Bring each owned Deployment's pods to spec.replicas: bind where GPUs are free, else Pending
    (Unschedulable since `now`); remove surplus Pending pods first; bound pods are Ready."""
    for (kind, ns, name), dep in sorted(gw.objects.items()):
        if kind is not Kind.DEPLOYMENT:
            continue
        want = int(dep["spec"].get("replicas") or 0)
        template = dep["spec"]["template"]
        pods = sorted(
            (
                o
                for (k, n, p), o in gw.objects.items()
                if k is Kind.POD and p.startswith(name + "-")
            ),
            key=lambda p: (bool(p["spec"].get("nodeName")), p["metadata"]["name"]),
        )
        for pod in pods[: max(0, len(pods) - want)]:
            del gw.objects[(Kind.POD, ns, pod["metadata"]["name"])]
        pods = pods[max(0, len(pods) - want) :]
        index = 0
        while len(pods) < want:
            pod_name = f"{name}-{index}"
            index += 1
            if (Kind.POD, ns, pod_name) in gw.objects:
                continue
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": ns,
                    "labels": dict(template["metadata"]["labels"]),
                },
                "spec": copy.deepcopy(template["spec"]),
                "status": {"phase": "Pending"},
            }
            gw.objects[(Kind.POD, ns, pod_name)] = pod
            pods.append(pod)
        selector = template["spec"].get("nodeSelector") or {}
        limits = template["spec"]["containers"][0]["resources"]["limits"]
        per_pod = int(limits["nvidia.com/gpu"])
        for pod in pods:
            if pod["spec"].get("nodeName"):
                continue
            used = gw.gpu_requests_by_node()
            node = next(
                (
                    n
                    for n in gw.nodes
                    if all(n["metadata"]["labels"].get(k) == v for k, v in selector.items())
                    and not n["spec"].get("unschedulable")
                    and int(n["status"]["allocatable"]["nvidia.com/gpu"])
                    - used.get(n["metadata"]["name"], {}).get("nvidia.com/gpu", 0)
                    >= per_pod
                ),
                None,
            )
            if node is None:
                pod["status"] = {
                    "phase": "Pending",
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "lastTransitionTime": now.isoformat(),
                        }
                    ],
                }
                continue
            pod["spec"]["nodeName"] = node["metadata"]["name"]
            pod["status"] = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        ready = sum(1 for p in pods if p["spec"].get("nodeName"))
        dep["status"] = {"replicas": want, "readyReplicas": ready, "updatedReplicas": want}


def setup(replicas: int, strategy: str = "Preferred") -> tuple[FakeGateway, Controller, Clock]:
    gw = FakeGateway()
    gw.nodes = [gpu_node("h100-0", H100, 8), gpu_node("a100-0", A100, 8)]
    svc = example("qwen2.5-14b-h100-a100.yaml")
    svc["spec"]["replicas"] = replicas
    svc["spec"]["placement"].update(
        {"strategy": strategy, "spillAfterSeconds": 60, "minDwellSeconds": 120}
    )
    gw.add(svc)
    clock = Clock()
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock)
    return gw, ctl, clock


def replicas(gw: FakeGateway) -> dict[str, int]:
    return {
        name: int(obj["spec"].get("replicas", 0))
        for (kind, _, name), obj in sorted(gw.objects.items())
        if kind is Kind.DEPLOYMENT
    }


def step(gw: FakeGateway, ctl: Controller, clock: Clock, seconds: int = 30) -> None:
    ctl.reconcile("default", "qwen-14b")
    settle_pods(gw, clock.now)
    clock.now += timedelta(seconds=seconds)
    ctl.reconcile("default", "qwen-14b")


def events(gw: FakeGateway) -> list[str]:
    return [e.reason for e in gw.events]


def test_full_h100_spills_to_a100_with_its_own_plan_and_one_replica_moves_back() -> None:
    gw, ctl, clock = setup(replicas=3)
    gw.add(foreign_pod("train-0", "h100-0", 8))  # the H100 node is full
    step(gw, ctl, clock)
    assert replicas(gw) == {"qwen-14b-a100-40gb": 3, "qwen-14b-h100-80gb": 0}
    status = status_of(gw, "qwen-14b")
    placement = status["placement"]
    assert placement["total"] == 3 and placement["spilled"] == 3
    assert placement["summary"] == "a100-40gbx3 (3 spilled)"
    assert [t["reason"] for t in placement["types"]] == ["NoRoom", "Spilled"]
    a100_plan = next(p["plan"] for p in status["pools"] if p["gpuType"] == A100)
    h100_plan = next(p["plan"] for p in status["pools"] if p["gpuType"] == H100)
    assert a100_plan["hash"] != h100_plan["hash"]  # each type has its own plan
    # Spilled: the service is looked at again (room returns without any watched change).
    assert ctl.wanted_at(("default", "qwen-14b")) is not None

    # Training ends: room on H100. One replica moves back after the hysteresis: the H100
    # replica is added first, the A100 one removed only once the new one is Ready.
    del gw.objects[(Kind.POD, "training", "train-0")]
    seen: list[dict[str, int]] = []
    while "ReplicaMovedBack" not in events(gw):
        assert len(seen) < 10, seen
        step(gw, ctl, clock)
        seen.append(replicas(gw))
    assert {"qwen-14b-a100-40gb": 3, "qwen-14b-h100-80gb": 1} in seen  # added before drained
    assert seen[-1] == {"qwen-14b-a100-40gb": 2, "qwen-14b-h100-80gb": 1}
    assert status_of(gw, "qwen-14b")["replicas"] == 3  # the total, not the surge
    assert all(sum(r.values()) >= 3 for r in seen)
    assert events(gw).count("ReplicaMovingBack") == 1
    # The dwell holds the next move back for minDwellSeconds.
    step(gw, ctl, clock)
    assert replicas(gw) == {"qwen-14b-a100-40gb": 2, "qwen-14b-h100-80gb": 1}


def test_all_strategy_keeps_spec_replicas_in_every_pool_and_writes_no_placement() -> None:
    gw, ctl, clock = setup(replicas=2, strategy="All")
    gw.add(foreign_pod("train-0", "h100-0", 8))
    step(gw, ctl, clock)
    assert replicas(gw) == {"qwen-14b-a100-40gb": 2, "qwen-14b-h100-80gb": 2}
    assert "placement" not in status_of(gw, "qwen-14b")
    # The scale subresource reads spec.replicas' terms: per pool under All.
    assert status_of(gw, "qwen-14b")["replicas"] == 2
    assert ctl.wanted_at(("default", "qwen-14b")) is None


def test_type_states_read_room_running_ready_unschedulable_and_quota_from_objects() -> None:
    """The inputs the decision gets: free GPUs of Ready, uncordoned nodes matching the
    nodeSelector, minus every bound pod's requests; our pods by pool label."""
    from vllm_operator.api.reasons import Reason
    from vllm_operator.reconcile.placement_inputs import type_states
    from vllm_operator.reconcile.pools import PoolOutcome

    from .nodes import cordoned, not_ready

    dep = {
        "spec": {
            "template": {
                "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
            }
        }
    }
    h100 = PoolOutcome(
        gpu_type=H100, product=H100, feasible=True, reason=Reason.PLANNED, deployment=dep
    )
    a100 = PoolOutcome(gpu_type=A100, product=None, feasible=True, reason=Reason.NO_MATCHING_NODES)
    nodes = [
        gpu_node("h-0", H100, 8),
        cordoned(gpu_node("h-1", H100, 8)),
        not_ready(gpu_node("h-2", H100, 8)),
        gpu_node("h-3", H100, 8),
    ]
    nodes[3]["metadata"]["labels"]["pool"] = "other"
    requested = {"h-0": {"nvidia.com/gpu": 3}}

    def pod(name: str, node: str | None, ready: bool = False, **status: Any) -> dict[str, Any]:
        conditions = [{"type": "Ready", "status": "True"}] if ready else []
        if status.get("unschedulable"):
            conditions = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": "2026-11-22T12:00:00Z",
                }
            ]
        return {
            "metadata": {"name": name, "labels": {"serving.vllm-operator.dev/pool": "h100-80gb"}},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": "Running" if node else "Pending", "conditions": conditions},
        }

    pods = [pod("a", "h-0", ready=True), pod("b", "h-2"), pod("c", None, unschedulable=True)]
    live = {
        "spec": {"replicas": 3},
        "status": {
            "conditions": [
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "message": 'pods "x" is forbidden: exceeded quota: gpu',
                }
            ]
        },
    }
    got_h100, got_a100 = type_states(
        [h100, a100], nodes, requested, pods, {H100: live, A100: None}, {"pool": "gpu"}
    )
    # A nodeSelector no node matches leaves no room.
    assert got_h100.room == 0
    got_h100, _ = type_states([h100, a100], nodes, requested, pods, {H100: live}, {})
    # h-1 cordoned and h-2 NotReady give none; h-0: (8 - 3) // 2, h-3: 8 // 2.
    assert got_h100.room == 2 + 4
    assert (got_h100.current, got_h100.running, got_h100.ready) == (3, 1, 1)
    assert got_h100.unschedulable_since == NOW
    assert got_h100.quota_refused
    assert not got_a100.plannable and got_a100.room == 0


def test_an_autoscaler_scaling_the_total_fills_the_preferred_type_first_and_drains_spills_first() -> (
    None
):
    """An HPA or KEDA scales a Preferred service through its scale subresource: spec.replicas
    (the total) changes, status.replicas/selector are what the subresource reads back."""
    gw, ctl, clock = setup(replicas=2)
    gw.add(foreign_pod("train-0", "h100-0", 5))  # room for 3 replicas of one GPU on H100
    step(gw, ctl, clock)
    assert replicas(gw) == {"qwen-14b-a100-40gb": 0, "qwen-14b-h100-80gb": 2}
    status = status_of(gw, "qwen-14b")
    assert status["replicas"] == 2
    assert status["selector"] == "app.kubernetes.io/name=vllm,app.kubernetes.io/instance=qwen-14b"

    def scale(total: int) -> None:  # what a write to vllmservices/scale does to the object
        svc = gw.objects[(Kind.VLLM_SERVICE, "default", "qwen-14b")]
        svc["spec"]["replicas"] = total
        svc["metadata"]["generation"] = int(svc["metadata"].get("generation", 1)) + 1

    scale(5)
    step(gw, ctl, clock)
    assert replicas(gw) == {"qwen-14b-a100-40gb": 2, "qwen-14b-h100-80gb": 3}
    assert status_of(gw, "qwen-14b")["replicas"] == 5
    assert status_of(gw, "qwen-14b")["placement"]["spilled"] == 2
    scale(3)
    step(gw, ctl, clock)
    assert replicas(gw) == {"qwen-14b-a100-40gb": 0, "qwen-14b-h100-80gb": 3}
    assert status_of(gw, "qwen-14b")["replicas"] == 3
    assert events(gw).count("PlacementScaled") >= 3
