"""A burst of spec edits rolls the pods once: pod-template changes wait for a settled spec."""

from __future__ import annotations

import copy
from typing import Any

from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller

from .test_controller import NOW, OfflineHub, cluster, example, status_of

NAME = "llama-8b-chat"
DEPLOYMENT = (Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def setup(settle: float = 3.0) -> tuple[FakeGateway, Controller, Monotonic, dict[str, Any]]:
    gw = cluster()
    obj = example("llama-3.1-8b-l4.yaml")
    obj["metadata"]["generation"] = 1
    gw.add(obj)
    mono = Monotonic()
    ctl = Controller(
        gw,
        HubArchitectureResolver(gw, OfflineHub()),
        clock=lambda: NOW,
        settle_seconds=settle,
        monotonic=mono,
    )
    ctl.reconcile("default", NAME)
    return gw, ctl, mono, obj


def edit(gw: FakeGateway, obj: dict[str, Any], generation: int, **workload: Any) -> None:
    """A user's edit as the API server stores it: new spec, next generation, status kept."""
    live = gw.objects[(Kind.VLLM_SERVICE, "default", NAME)]
    obj["spec"]["workload"].update(workload)
    live["spec"] = obj["spec"]
    live["metadata"]["generation"] = generation


def args(gw: FakeGateway) -> list[str]:
    out: list[str] = gw.objects[DEPLOYMENT]["spec"]["template"]["spec"]["containers"][0]["args"]
    return out


def test_creation_is_not_held_back() -> None:
    gw, _, _, _ = setup()
    assert DEPLOYMENT in gw.objects
    assert status_of(gw, NAME)["observedGeneration"] == 1


def test_a_burst_of_edits_rolls_the_pool_once_with_the_last_spec() -> None:
    gw, ctl, mono, obj = setup()
    applies = gw.writes["apply:Deployment"]
    before = args(gw)

    edit(gw, obj, 2, concurrency=3)
    ctl.reconcile("default", NAME)
    mono.now += 1
    edit(gw, obj, 3, concurrency=2)
    ctl.reconcile("default", NAME)
    # Nothing rolled yet, and status does not claim the new generation.
    assert gw.writes["apply:Deployment"] == applies
    assert args(gw) == before
    assert status_of(gw, NAME)["observedGeneration"] == 1
    # The key waits on the queue (the earliest wait wins: the first edit's, 103 s); taken then,
    # it finds the reconcile wanted only when the last generation has been stable for 3 s.
    assert ctl.queue.pending() == {("default", NAME): 103.0}
    mono.now += 2.5
    assert ctl.run_due() == [("default", NAME)]
    assert gw.writes["apply:Deployment"] == applies
    assert ctl.queue.pending() == {("default", NAME): 104.0}
    mono.now += 0.5
    assert ctl.run_due() == [("default", NAME)]
    assert gw.writes["apply:Deployment"] == applies + 1
    assert args(gw)[args(gw).index("--max-num-seqs") + 1] == "2"
    assert status_of(gw, NAME)["observedGeneration"] == 3
    # Only the next remediation evaluation is left (one interval after the first reconcile).
    assert ctl.queue.pending() == {("default", NAME): 130.0}


def test_a_replica_change_is_not_held_back() -> None:
    gw, ctl, _, obj = setup()
    live = gw.objects[(Kind.VLLM_SERVICE, "default", NAME)]
    live["spec"]["replicas"] = 2
    live["metadata"]["generation"] = 2
    ctl.reconcile("default", NAME)
    assert gw.objects[DEPLOYMENT]["spec"]["replicas"] == 2
    assert status_of(gw, NAME)["observedGeneration"] == 2


def test_without_settle_time_every_edit_rolls_at_once() -> None:
    gw, ctl, _, obj = setup(settle=0)
    applies = gw.writes["apply:Deployment"]
    edit(gw, obj, 2, concurrency=3)
    ctl.reconcile("default", NAME)
    assert gw.writes["apply:Deployment"] == applies + 1


def _set_l4_host_memory(gw: FakeGateway, memory: str) -> None:
    """The L4 node's allocatable host memory changed (a node replaced, a kubelet reservation
    changed, or a flapping report): the pool's plan changes without any spec edit."""
    (node,) = [n for n in gw.nodes if n["metadata"]["name"] == "l4-0"]
    node["status"]["allocatable"]["memory"] = memory


def template(gw: FakeGateway) -> Any:
    return copy.deepcopy(gw.objects[DEPLOYMENT]["spec"]["template"])


def test_a_flapping_node_that_ends_where_it_started_rolls_nothing() -> None:
    """#32 fault: node-triggered re-plans were not debounced (a GPU label flapping 10 times in
    5 s rolled a pool 20 times). A new template must be wanted for the settle window first."""
    gw, ctl, mono, _ = setup()
    applies = gw.writes["apply:Deployment"]
    before = template(gw)
    for step in range(10):
        mono.now += 0.5
        _set_l4_host_memory(gw, "8Gi" if step % 2 == 0 else "512Gi")
        ctl.enqueue(("default", NAME))  # the node event
        assert ctl.run_due() == [("default", NAME)]
    # Ten changes in 5 s, ending at the original value: no roll, and none waiting.
    mono.now += 10
    ctl.run_due()
    assert gw.writes["apply:Deployment"] == applies
    assert template(gw) == before


def test_a_node_driven_plan_change_rolls_once_after_the_settle_window() -> None:
    gw, ctl, mono, _ = setup()
    applies = gw.writes["apply:Deployment"]
    before = template(gw)
    _set_l4_host_memory(gw, "8Gi")
    ctl.enqueue(("default", NAME))
    assert ctl.run_due() == [("default", NAME)]
    assert gw.writes["apply:Deployment"] == applies  # held back
    assert ctl.queue.pending() == {("default", NAME): mono.now + 3}
    mono.now += 3
    assert ctl.run_due() == [("default", NAME)]
    assert gw.writes["apply:Deployment"] == applies + 1
    assert template(gw) != before
