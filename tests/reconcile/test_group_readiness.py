"""A multi-node replica is ready when all of its pods are, as the watch cache shows them (#32).

The LeaderWorkerSet's status lags its pods: a group whose worker was deleted while the
LeaderWorkerSet controller was down, or whose worker is Pending on a cordoned node, was reported
Ready for 12-18 s. Status counts a group ready from its pods, never more than the
LeaderWorkerSet reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vllm_operator.api.groups import LWS_LABEL_GROUP_INDEX, LWS_LABEL_NAME, LWS_LABEL_WORKER_INDEX
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller
from vllm_operator.rendering.names import pool_selector_labels

from .nodes import gpu_node
from .test_controller import condition, controller, status_of

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "multinode" / "llama-3.1-405b-h100-2nodes.yaml"
H100 = "NVIDIA-H100-80GB-HBM3"
NAME, LWS = "llama-405b", "llama-405b-h100-80gb"


def pod(index: int, *, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"{LWS}-0" if index == 0 else f"{LWS}-0-{index}",
        "namespace": "default",
        "labels": {
            **pool_selector_labels(NAME, H100),
            LWS_LABEL_NAME: LWS,
            LWS_LABEL_GROUP_INDEX: "0",
            LWS_LABEL_WORKER_INDEX: str(index),
        },
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T12:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def setup() -> tuple[FakeGateway, Controller]:
    gw = FakeGateway()
    gw.nodes = [gpu_node(f"h100-{i}", H100, 8) for i in range(4)]
    gw.add(yaml.safe_load(EXAMPLE.read_text()))
    ctl = controller(gw)
    ctl.reconcile("default", NAME)
    lws = gw.objects[(Kind.LEADER_WORKER_SET, "default", LWS)]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    # The LeaderWorkerSet controller reported its one group ready.
    lws["status"] = {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}
    return gw, ctl


def ready_message(gw: FakeGateway) -> tuple[str, str]:
    ready = condition(status_of(gw, NAME), "Ready")
    return ready["status"], ready["message"]


def test_a_group_with_all_its_pods_ready_is_ready() -> None:
    gw, ctl = setup()
    gw.add(pod(0))
    gw.add(pod(1))
    ctl.reconcile("default", NAME)
    assert ready_message(gw) == ("True", "1/1 replicas ready")


def test_a_group_missing_its_worker_is_not_ready_whatever_the_leader_worker_set_says() -> None:
    gw, ctl = setup()
    gw.add(pod(0))  # the worker was deleted; the LeaderWorkerSet's status still says 1 ready
    ctl.reconcile("default", NAME)
    assert ready_message(gw) == ("False", "0/1 replicas ready")
    (pool,) = status_of(gw, NAME)["pools"]
    assert pool["readyReplicas"] == 0


def test_a_pending_or_terminating_worker_makes_the_group_not_ready() -> None:
    gw, ctl = setup()
    gw.add(pod(0))
    gw.add(pod(1, ready=False))  # Pending on a cordoned node
    ctl.reconcile("default", NAME)
    assert ready_message(gw)[0] == "False"
    gw.add(pod(1, deleting=True))
    ctl.reconcile("default", NAME)
    assert ready_message(gw)[0] == "False"


def test_pods_never_count_more_groups_than_the_leader_worker_set_reports() -> None:
    gw, ctl = setup()
    gw.objects[(Kind.LEADER_WORKER_SET, "default", LWS)]["status"]["readyReplicas"] = 0
    gw.add(pod(0))
    gw.add(pod(1))
    ctl.reconcile("default", NAME)
    assert ready_message(gw) == ("False", "0/1 replicas ready")
