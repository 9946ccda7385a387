"""A converged fleet writes nothing (#32 item 5: steady state 0 writes), and a restart neither.

The benchmark (docs/controller-benchmark.md) reported status writes in its steady window. This
drives every top-level example (the benchmark's templates) through the controller on a cluster
as small as the benchmark's (its L4s and A100s oversubscribed, so pods stay Pending and the
Preferred template spills and blocks) with a scheduler stand-in that keeps a Pending pod's
`PodScheduled=False` transition time as kube-scheduler does, past every placement deadline
(spillAfterSeconds, minDwellSeconds). Once those passed, a reconcile and an evaluation of each
service change nothing: no status write, no apply, no Event, and a restarted controller
(empty memory) writes nothing either.
"""

import copy
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller

from .nodes import cpu_node, gpu_node
from .test_controller import OfflineHub, example
from .test_placement_reconcile import Clock

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TEMPLATES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
PER_TEMPLATE = 3


def bench_cluster() -> FakeGateway:
    """e2e/nodes.yaml's GPU nodes, fewer of them: every pool competes for GPUs."""
    gw = FakeGateway()
    gw.nodes = [
        gpu_node("h100-0", "NVIDIA-H100-80GB-HBM3", 8),
        gpu_node("a100-0", "NVIDIA-A100-SXM4-40GB", 8),
        gpu_node("l4-0", "NVIDIA-L4", 1),
        gpu_node("l4-1", "NVIDIA-L4", 1),
        gpu_node("t4-0", "Tesla-T4", 1),
        cpu_node(),
    ]
    return gw


def _gpus(pod: dict[str, Any]) -> int:
    limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
    return int(limits.get("nvidia.com/gpu", 0))


def schedule(gw: FakeGateway, now: datetime) -> None:
    """ReplicaSet + kube-scheduler + kubelet, enough of them: each Deployment gets
    spec.replicas pods (the newest removed first); a pod binds where its GPUs are free and turns
    Ready, else stays Pending with PodScheduled=False Unschedulable since it first failed (the
    scheduler does not move that transition time on its retries)."""
    used = {n["metadata"]["name"]: 0 for n in gw.nodes}
    pods_of: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for (kind, ns, _), obj in sorted(gw.objects.items()):
        if kind is Kind.POD:
            node = obj["spec"].get("nodeName")
            if node:
                used[node] += _gpus(obj)
            pods_of.setdefault((ns, obj["metadata"]["labels"]["x-deployment"]), []).append(obj)
    for (kind, ns, name), dep in sorted(gw.objects.items()):
        if kind is not Kind.DEPLOYMENT:
            continue
        want = int(dep["spec"].get("replicas") or 0)
        template = dep["spec"]["template"]
        pods = pods_of.get((ns, name), [])
        stale = [p for p in pods if p["metadata"]["annotations"]["x-template"] != repr(template)]
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"], reverse=True):
            if len(pods) > want or pod in stale:
                pods.remove(pod)
                node = pod["spec"].get("nodeName")
                if node:
                    used[node] -= _gpus(pod)
                del gw.objects[(Kind.POD, ns, pod["metadata"]["name"])]
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
                    "labels": {**template["metadata"]["labels"], "x-deployment": name},
                    "annotations": {"x-template": repr(template)},
                },
                "spec": copy.deepcopy(template["spec"]),
                "status": {"phase": "Pending"},
            }
            gw.objects[(Kind.POD, ns, pod_name)] = pod
            pods.append(pod)
        selector = template["spec"].get("nodeSelector") or {}
        for pod in pods:
            if pod["spec"].get("nodeName"):
                continue
            need = _gpus(pod)
            node = next(
                (
                    n
                    for n in gw.nodes
                    if all(n["metadata"]["labels"].get(k) == v for k, v in selector.items())
                    and int(n["status"]["allocatable"].get("nvidia.com/gpu", 0))
                    - used[n["metadata"]["name"]]
                    >= need
                    and (need > 0 or not selector)
                ),
                None,
            )
            if node is None:
                if not pod["status"].get("conditions"):
                    pod["status"]["conditions"] = [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "lastTransitionTime": now.isoformat(),
                        }
                    ]
                continue
            pod["spec"]["nodeName"] = node["metadata"]["name"]
            used[node["metadata"]["name"]] += need
            pod["status"] = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "vllm", "ready": True, "restartCount": 0}],
            }
        ready = sum(1 for p in pods if p["spec"].get("nodeName"))
        dep["status"] = {
            "observedGeneration": dep["metadata"].get("generation", 1),
            "replicas": len(pods),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "updatedReplicas": len(pods),
        }


def fleet() -> tuple[FakeGateway, list[str], Clock]:
    gw = bench_cluster()
    names = []
    for i in range(len(TEMPLATES) * PER_TEMPLATE):
        obj = copy.deepcopy(example(TEMPLATES[i % len(TEMPLATES)]))
        obj["metadata"] = {"name": f"svc-{i:02d}", "namespace": "default"}
        gw.add(obj)
        names.append(obj["metadata"]["name"])
    return gw, names, Clock()


def round_(gw: FakeGateway, ctl: Controller, names: list[str], clock: Clock) -> int:
    """Every service reconciled and evaluated once, the cluster catching up, 30 s passing;
    returns the writes of the round."""
    before = gw.total_writes()
    for name in names:
        ctl.reconcile("default", name)
    schedule(gw, clock.now)
    for name in names:
        ctl.evaluate("default", name)
    clock.now += timedelta(seconds=30)
    return gw.total_writes() - before


def test_a_converged_fleet_of_every_template_writes_nothing_and_nor_does_a_restart() -> None:
    gw, names, clock = fleet()
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock)
    # Past every placement deadline of the examples (spillAfterSeconds 60, minDwellSeconds 300).
    for _ in range(14):
        round_(gw, ctl, names, clock)
    pending = [
        o for (k, _, _), o in gw.objects.items() if k is Kind.POD and not o["spec"].get("nodeName")
    ]
    assert pending, "the cluster is meant to be oversubscribed"
    blocked = [
        t
        for (k, _, _), o in gw.objects.items()
        if k is Kind.VLLM_SERVICE
        for t in ((o.get("status") or {}).get("placement") or {}).get("types", [])
        if t.get("blockedSince")
    ]
    assert blocked, "a Preferred service is meant to meet an Unschedulable type"
    writes = [round_(gw, ctl, names, clock) for _ in range(6)]
    assert writes == [0] * 6, (writes, gw.writes)

    restarted = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock)
    before = gw.total_writes()
    for name in names:
        outcome = restarted.reconcile("default", name)
        assert outcome.applied == [] and not outcome.status_written, name
        restarted.evaluate("default", name)
    assert gw.total_writes() == before
