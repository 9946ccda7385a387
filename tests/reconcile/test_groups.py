"""Remediation sees a multi-node replica (a LeaderWorkerSet group) as one pod.

The pods of a group crash, restart and move together (RecreateGroupOnPodRestart) and only the
leader serves and reports metrics: a crash in a worker is the group's crash, named by the group's
leader (the pod whose drain and eviction recreate the whole group), explained by the worker's own
log; a worker is never drained or evicted on its own.
"""

from datetime import timedelta
from typing import Any

from tests.remediation.logfixtures import LOGS, load
from vllm_operator.api.groups import LWS_LABEL_GROUP_INDEX, LWS_LABEL_NAME, LWS_LABEL_WORKER_INDEX
from vllm_operator.api.reasons import Reason
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.remediation import fold_groups, observe_pod
from vllm_operator.rendering.names import pool_selector_labels

from .test_controller import cluster, condition, controller, example, status_of
from .test_degraded import NAME, NS, POOL, termination
from .test_evaluate import T0, setup

LWS = "llama-8b-chat-l4"


def group_pod(
    index: int,
    *,
    group: int = 0,
    ready: bool = True,
    waiting: str | None = None,
    terminated: dict[str, Any] | None = None,
) -> dict[str, Any]:
    name = f"{LWS}-{group}" if index == 0 else f"{LWS}-{group}-{index}"
    state: dict[str, Any] = (
        {"waiting": {"reason": waiting}}
        if waiting
        else {"running": {"startedAt": (T0 - timedelta(hours=1)).isoformat()}}
    )
    status: dict[str, Any] = {"name": "vllm", "ready": ready, "restartCount": 0, "state": state}
    if terminated is not None:
        status["lastState"] = {"terminated": terminated}
        status["restartCount"] = 2
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                **pool_selector_labels(NAME, POOL),
                LWS_LABEL_NAME: LWS,
                LWS_LABEL_GROUP_INDEX: str(group),
                LWS_LABEL_WORKER_INDEX: str(index),
            },
        },
        "status": {"containerStatuses": [status]},
    }


def test_pods_outside_groups_are_observed_as_they_are() -> None:
    pod = group_pod(0)
    del pod["metadata"]["labels"][LWS_LABEL_NAME]
    assert fold_groups([pod]) == [(pod, pod)]


def test_a_healthy_group_is_one_ready_pod_named_by_its_leader() -> None:
    folded = fold_groups([group_pod(1), group_pod(0), group_pod(0, group=1), group_pod(1, group=1)])
    assert [(p["metadata"]["name"], c["metadata"]["name"]) for p, c in folded] == [
        (f"{LWS}-0", f"{LWS}-0"),
        (f"{LWS}-1", f"{LWS}-1"),
    ]
    assert all(observe_pod(p).ready for p, _ in folded)


def test_a_crashing_worker_makes_its_group_crash_and_not_ready() -> None:
    crashed = termination("Error", 1, T0 - timedelta(seconds=30))
    worker = group_pod(1, ready=False, waiting="CrashLoopBackOff", terminated=crashed)
    ((folded, source),) = fold_groups([group_pod(0), worker])
    seen = observe_pod(folded)
    assert seen.name == f"{LWS}-0"  # the group, by its leader
    assert seen.crash_looping and not seen.ready
    assert seen.last_termination is not None and seen.last_termination.exit_code == 1
    assert source is worker  # whose previous log explains it


def test_a_not_ready_worker_makes_the_group_not_ready() -> None:
    ((folded, _),) = fold_groups([group_pod(0), group_pod(1, ready=False)])
    assert not observe_pod(folded).ready


def _put(gw: FakeGateway, *pods: dict[str, Any]) -> None:
    for pod in pods:
        gw.objects.pop((Kind.POD, NS, pod["metadata"]["name"]), None)
        gw.add(pod)


def test_a_worker_crash_degrades_the_pool_naming_the_group_with_the_workers_log() -> None:
    gw, ctl, _ = setup()
    for key in [k for k in gw.objects if k[0] is Kind.POD]:
        del gw.objects[key]
    worker = group_pod(
        1,
        ready=False,
        waiting="CrashLoopBackOff",
        terminated=termination("Error", 1, T0 - timedelta(seconds=30)),
    )
    _put(gw, group_pod(0), worker)
    gw.logs[(NS, worker["metadata"]["name"])] = load(
        LOGS / "v0.5-nccl-unhandled-system-error.log"
    ).log
    ctl.evaluate(NS, NAME)
    cond = condition(status_of(gw, NAME), "Degraded")
    assert (cond["status"], cond["reason"]) == ("True", Reason.CRASHING.value), cond
    assert f"pod {LWS}-0" in cond["message"] and "cause nccl" in cond["message"]
    (pool,) = status_of(gw, NAME)["pools"]
    assert pool["failure"]["pod"] == f"{LWS}-0"
    # Nothing acted on the worker alone: it was neither drained nor evicted.
    assert all(pod != worker["metadata"]["name"] for _, pod in gw.evictions)
    labels = gw.objects[(Kind.POD, NS, worker["metadata"]["name"])]["metadata"]["labels"]
    assert "serving.vllm-operator.dev/serving" not in labels


def test_a_pool_that_no_longer_spans_nodes_replaces_its_leader_worker_set_by_a_deployment() -> None:
    """The same pool name, another kind: the old workload goes once the new one is desired (a
    LeaderWorkerSet left beside the Deployment would hold the GPUs of whole nodes)."""
    gw = cluster()
    svc = gw.add(example("llama-3.1-8b-l4.yaml"))
    meta = svc["metadata"]
    owner = {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    gw.apply(
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {
                "name": LWS,
                "namespace": NS,
                "labels": {
                    **pool_selector_labels(NAME, POOL),
                    "app.kubernetes.io/managed-by": "vllm-operator",
                },
                "annotations": {"serving.vllm-operator.dev/gpu-type": POOL},
                "ownerReferences": [owner],
            },
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2}},
        }
    )
    outcome = controller(gw).reconcile(NS, NAME)
    assert f"Deployment/{LWS}" in outcome.applied
    assert outcome.deleted == [f"LeaderWorkerSet/{LWS}"]
    assert gw.get(Kind.LEADER_WORKER_SET, NS, LWS) is None
    assert gw.get(Kind.DEPLOYMENT, NS, LWS) is not None
    removed = [e for e in gw.events if e.reason == Reason.POOL_REMOVED]
    assert removed and "the pool is now a Deployment" in removed[0].message
