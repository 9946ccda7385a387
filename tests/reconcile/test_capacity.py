"""Capacity versus feasibility (issue #20 items 7 and 8), through the controller and FakeGateway.

Cordoned or NotReady nodes are unavailability, never infeasibility: the plan comes from the GPU
types' hardware, and status tells the truth about the Deployments that exist and what they lack.
"""

import copy
from typing import Any

from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind

from .nodes import cordoned, gpu_node, not_ready
from .test_controller import cluster, condition, controller, example, make_ready, status_of

PLAN_HASH = "serving.vllm-operator.dev/plan-hash"


def _nodes_of(gw: FakeGateway, prefix: str, change: Any) -> None:
    gw.nodes = [change(n) if n["metadata"]["name"].startswith(prefix) else n for n in gw.nodes]


def _deployment(gw: FakeGateway, name: str) -> dict[str, Any]:
    """The stored Deployment itself (the Deployment controller's side of the fake)."""
    return gw.objects[(Kind.DEPLOYMENT, "default", name)]


def _event_reasons(gw: FakeGateway) -> list[str]:
    return [e.reason for e in gw.events]


def test_new_service_on_cordoned_nodes_is_planned_from_hardware_not_infeasible() -> None:
    """70B needs TP>1: with every H100 cordoned the schedulable GPU count per node read 0, TP was
    capped at 1 and the service reported Feasible=False Infeasible with a Warning Event."""
    gw = cluster()
    gw.nodes.append(gpu_node("h100-1", "NVIDIA-H100-80GB-HBM3", 8))
    _nodes_of(gw, "h100-", cordoned)
    gw.add(example("llama-3.1-70b-h100-tp.yaml"))
    controller(gw).reconcile("default", "llama-70b")

    status = status_of(gw, "llama-70b")
    feasible = condition(status, "Feasible")
    assert feasible["status"] == "True", feasible
    progressing = condition(status, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "NoMatchingNodes")
    assert "h100-0 (cordoned)" in progressing["message"]
    assert "Infeasible" not in _event_reasons(gw)
    (pool,) = status["pools"]
    assert pool["plan"]["engineArgs"]["tensor_parallel_size"] > 1
    assert "no schedulable node" in pool["message"]


def test_nodes_not_ready_keep_the_deployment_untouched_and_report_unavailability() -> None:
    """A control-plane outage longer than the node lease: every L4 NotReady, the device plugin's
    allocatable gone. The plan stays (0 Deployment writes), Degraded says why, no Infeasible."""
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["replicas"] = 2
    gw.add(svc)
    gw.nodes.append(gpu_node("l4-1", "NVIDIA-L4", 1))
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    hash_before = _deployment(gw, "llama-8b-chat-l4")["metadata"]["annotations"][PLAN_HASH]
    applies = gw.writes["apply:Deployment"]
    events = len(gw.events)

    _nodes_of(gw, "l4-", lambda n: not_ready(n, device_plugin_gone=True))
    _deployment(gw, "llama-8b-chat-l4")["status"]["readyReplicas"] = 0
    outcome = ctl.reconcile("default", "llama-8b-chat")

    assert outcome.applied == [] and gw.writes["apply:Deployment"] == applies
    assert _deployment(gw, "llama-8b-chat-l4")["metadata"]["annotations"][PLAN_HASH] == hash_before
    status = status_of(gw, "llama-8b-chat")
    assert condition(status, "Feasible")["status"] == "True"
    degraded = condition(status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "PoolsUnavailable")
    assert "llama-8b-chat-l4 wants 2 replica(s), no ready replicas" in degraded["message"]
    assert "l4-0 (NotReady)" in degraded["message"]
    assert status["ready"] == "0/2"
    assert "Infeasible" not in _event_reasons(gw)[events:]
    # A second reconcile in the same state changes nothing.
    writes = gw.total_writes()
    ctl.reconcile("default", "llama-8b-chat")
    assert gw.total_writes() == writes


def test_cordon_with_running_pods_is_no_degradation_and_uncordon_changes_nothing() -> None:
    """Cordoning evicts nothing: pods keep serving, so the service stays Ready; the pool's message
    notes that no node can take another pod. Uncordoning re-applies nothing."""
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    applies = gw.writes["apply:Deployment"]

    original = copy.deepcopy(gw.nodes)
    _nodes_of(gw, "l4-", cordoned)
    ctl.reconcile("default", "llama-8b-chat")
    status = status_of(gw, "llama-8b-chat")
    assert condition(status, "Ready")["status"] == "True"
    assert condition(status, "Degraded")["status"] == "False"
    assert "l4-0 (cordoned)" in status["pools"][0]["message"]

    gw.nodes = original
    ctl.reconcile("default", "llama-8b-chat")
    status = status_of(gw, "llama-8b-chat")
    assert condition(status, "Ready")["status"] == "True"
    assert "message" not in status["pools"][0]
    assert gw.writes["apply:Deployment"] == applies
    assert "Infeasible" not in _event_reasons(gw)


def test_deleted_nodes_leave_the_deployment_in_status_with_its_replicas_and_degraded() -> None:
    """Node loss used to read `ready 0/0`, `deployment: null`, `replicas: 0` and Degraded=False
    although the Deployment wanted 3 replicas."""
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["replicas"] = 3
    gw.add(svc)
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    plan = status_of(gw, "llama-8b-chat")["pools"][0]["plan"]

    gw.nodes = [n for n in gw.nodes if not n["metadata"]["name"].startswith("l4-")]
    _deployment(gw, "llama-8b-chat-l4")["status"]["readyReplicas"] = 0
    outcome = ctl.reconcile("default", "llama-8b-chat")

    assert outcome.deleted == [] and outcome.applied == []
    status = status_of(gw, "llama-8b-chat")
    (pool,) = status["pools"]
    assert pool["deployment"] == "llama-8b-chat-l4"
    assert (pool["replicas"], pool["readyReplicas"]) == (3, 0)
    assert pool["plan"] == plan  # what the Deployment still runs
    assert status["ready"] == "0/3"
    degraded = condition(status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "PoolsUnavailable")
    assert (
        "llama-8b-chat-l4 wants 3 replica(s), no ready replicas and no schedulable nodes"
        in (degraded["message"])
    )
    assert condition(status, "Progressing")["reason"] == "NoMatchingNodes"
    assert condition(status, "Ready")["status"] == "False"


def test_replica_failure_of_the_deployment_is_quoted_in_degraded_and_progressing() -> None:
    """A ReplicaSet that cannot create pods (Pod Security, quota) showed only `RollingOut 0/1`."""
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    forbidden = (
        'pods "llama-8b-chat-l4-7d9f-x2x" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, limited: "
        "requests.nvidia.com/gpu=4"
    )
    dep = gw.objects[(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")]
    dep["metadata"]["generation"] = 1
    dep["status"] = {
        "observedGeneration": 1,
        "conditions": [
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
            {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreate",
                "message": forbidden,
            },
        ],
    }
    ctl.reconcile("default", "llama-8b-chat")

    status = status_of(gw, "llama-8b-chat")
    degraded = condition(status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ReplicaFailure")
    assert f"ReplicaFailure FailedCreate: {forbidden}" in degraded["message"]
    assert forbidden in condition(status, "Progressing")["message"]
    assert forbidden in status["pools"][0]["message"]

    # The quota is raised: the condition goes, and so does the degradation.
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    degraded = condition(status_of(gw, "llama-8b-chat"), "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("False", "AsExpected")
