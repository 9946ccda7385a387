"""A restart resyncs unchanged services without planning each of them again (#32 item 5).

The planner is a pure function of its inputs and the controller keeps its results by those inputs
(`PlanCache`), so a restart plans each distinct (intent, GPU, architecture, budget) once, not
once per service, writes nothing, and plans again only for a service whose inputs changed.
"""

import copy
from collections import Counter
from typing import Any

import pytest

from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.cache import CachedGateway, WatchCache
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.planning import plan as planner
from vllm_operator.reconcile import pools
from vllm_operator.reconcile.controller import Controller

from .nodes import cordoned
from .test_controller import NOW, OfflineHub, cluster, example

TEMPLATES = ["llama-3.1-8b-l4.yaml", "qwen2.5-7b-awq-t4.yaml"]
SERVICES = 12


def test_a_restart_plans_each_distinct_input_once_and_a_changed_service_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gw = cluster()
    for i in range(SERVICES):
        obj = copy.deepcopy(example(TEMPLATES[i % len(TEMPLATES)]))
        obj["metadata"] = {"name": f"svc-{i}", "namespace": "default"}
        gw.add(obj)
    first = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW)
    for _ in range(2):  # converge (the second pass sees its own status)
        for i in range(SERVICES):
            first.reconcile("default", f"svc-{i}")

    calls: list[Any] = []
    real = planner.plan_pool

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[:2])
        return real(*args, **kwargs)

    monkeypatch.setattr(pools, "plan_pool", counted)
    # The restart: a new controller with an empty plan cache resyncs every service.
    restarted = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW)
    writes = gw.total_writes()
    for i in range(SERVICES):
        outcome = restarted.reconcile("default", f"svc-{i}")
        assert outcome.applied == [] and not outcome.status_written
    assert gw.total_writes() == writes
    distinct = len(set(map(repr, calls)))
    assert 0 < len(calls) == distinct <= len(TEMPLATES) * 2  # once per input, not per service

    # A second resync plans nothing at all.
    calls.clear()
    for i in range(SERVICES):
        restarted.reconcile("default", f"svc-{i}")
    assert calls == []

    # A service whose planner inputs changed is planned again.
    live = gw.objects[(Kind.VLLM_SERVICE, "default", "svc-0")]
    live["spec"]["workload"]["concurrency"] = live["spec"]["workload"].get("concurrency", 4) + 7
    live["metadata"]["generation"] += 1
    restarted.reconcile("default", "svc-0")
    assert len(calls) >= 1


def test_a_restart_through_the_watch_cache_corrects_only_a_workload_edited_while_down() -> None:
    """The restart path of `vllm-operator run`: a new watch cache filled by the initial lists
    (Kopf hands each object to the index and the event handler, at the same resourceVersion),
    then every service resynced. Nothing unchanged is written; a Deployment edited while the
    operator was down (a newer resourceVersion, its plan-hash annotation left as it was) is
    applied back."""
    gw = _converged()
    (edited,) = [
        o
        for (k, _, name), o in gw.objects.items()
        if k is Kind.DEPLOYMENT and name.startswith("svc-0-")
    ]
    container = edited["spec"]["template"]["spec"]["containers"][0]
    planned_args = list(container["args"])
    container["args"] = [*planned_args, "--enforce-eager"]  # a `kubectl edit` while down
    edited["metadata"]["resourceVersion"] = "2"

    cache = WatchCache()
    for (kind, _, _), obj in gw.objects.items():
        cache.observe(kind, None, copy.deepcopy(obj))  # the index handler
    for node in gw.nodes:
        cache.observe(Kind.NODE, None, copy.deepcopy(node))
    cache.mark_synced()
    for (kind, _, _), obj in gw.objects.items():
        cache.listed(kind, copy.deepcopy(obj))  # the event handler, same version
    restarted = Controller(
        CachedGateway(gw, cache), HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW
    )
    writes = gw.writes.copy()
    applied = []
    for i in range(SERVICES):
        outcome = restarted.reconcile("default", f"svc-{i}")
        assert not outcome.status_written
        applied += outcome.applied
    assert applied == [f"Deployment/{edited['metadata']['name']}"]
    assert gw.writes - writes == Counter({"apply:Deployment": 1, "event": 1})  # and its Event
    live = gw.objects[(Kind.DEPLOYMENT, "default", edited["metadata"]["name"])]
    assert live["spec"]["template"]["spec"]["containers"][0]["args"] == planned_args


def _converged() -> FakeGateway:
    """SERVICES services of TEMPLATES (L4 and T4), converged, every object at resourceVersion 1."""
    gw = cluster()
    for i in range(SERVICES):
        obj = copy.deepcopy(example(TEMPLATES[i % len(TEMPLATES)]))
        obj["metadata"] = {"name": f"svc-{i}", "namespace": "default"}
        gw.add(obj)
    first = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW)
    for _ in range(2):
        for i in range(SERVICES):
            first.reconcile("default", f"svc-{i}")
    for obj in gw.objects.values():
        obj["metadata"]["resourceVersion"] = "1"
    return gw


def _restart_writers(gw: FakeGateway) -> dict[str, list[str]]:
    """A restart through a new watch cache over `gw` as it is now; what each service wrote."""
    cache = WatchCache()
    for (kind, _, _), obj in gw.objects.items():
        cache.observe(kind, None, copy.deepcopy(obj))
    for node in gw.nodes:
        cache.observe(Kind.NODE, None, copy.deepcopy(node))
    cache.mark_synced()
    restarted = Controller(
        CachedGateway(gw, cache), HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW
    )
    wrote: dict[str, list[str]] = {}
    for i in range(SERVICES):
        outcome = restarted.reconcile("default", f"svc-{i}")
        if outcome.wrote():
            wrote[f"svc-{i}"] = [*outcome.applied, *(["status"] if outcome.status_written else [])]
    return wrote


def test_a_restart_over_unchanged_services_writes_nothing() -> None:
    gw = _converged()
    writes = gw.total_writes()
    assert _restart_writers(gw) == {}
    assert gw.total_writes() == writes


def test_a_restart_plans_again_for_a_node_cordoned_while_down() -> None:
    """What planning reads of the nodes changed while the operator was down (the T4 node
    cordoned): every T4 service reports it; the L4 services write nothing."""
    gw = _converged()
    gw.nodes = [cordoned(n) if n["metadata"]["name"] == "t4-0" else n for n in gw.nodes]
    wrote = _restart_writers(gw)
    t4 = {f"svc-{i}" for i in range(SERVICES) if TEMPLATES[i % len(TEMPLATES)].endswith("t4.yaml")}
    assert set(wrote) == t4 and all("status" in w for w in wrote.values())
    for name in t4:
        status = gw.objects[(Kind.VLLM_SERVICE, "default", name)]["status"]
        assert "no schedulable node of Tesla-T4" in str(status)


def test_a_restart_applies_a_spec_edited_while_down() -> None:
    """A spec edit the operator has not seen (a new generation): its Deployment is applied and
    status written for that service alone."""
    gw = _converged()
    (before,) = [
        copy.deepcopy(o)
        for (k, _, n), o in gw.objects.items()
        if k is Kind.DEPLOYMENT and n.startswith("svc-1-")
    ]
    live = gw.objects[(Kind.VLLM_SERVICE, "default", "svc-1")]
    live["spec"]["workload"]["concurrency"] = live["spec"]["workload"].get("concurrency", 4) + 7
    live["metadata"]["generation"] += 1
    live["metadata"]["resourceVersion"] = "2"
    wrote = _restart_writers(gw)
    assert list(wrote) == ["svc-1"], wrote
    assert (
        any(w.startswith("Deployment/svc-1-") for w in wrote["svc-1"])
        and "status" in wrote["svc-1"]
    )
    (dep,) = [
        o for (k, _, n), o in gw.objects.items() if k is Kind.DEPLOYMENT and n.startswith("svc-1-")
    ]
    assert dep["metadata"]["annotations"] != before["metadata"]["annotations"]  # a new plan hash


class _ReadLog(FakeGateway):
    """The fake API server, noting the name of every workload a read returned."""

    def __init__(self) -> None:
        super().__init__()
        self.returned: Counter[str] = Counter()

    def get(self, kind: Kind, namespace: str, name: str) -> Any:
        obj = super().get(kind, namespace, name)
        if obj is not None and kind in (Kind.DEPLOYMENT, Kind.LEADER_WORKER_SET):
            self.returned[obj["metadata"]["name"]] += 1
        return obj

    def list_owned(self, kind: Kind, namespace: str, selector: dict[str, str]) -> Any:
        found = super().list_owned(kind, namespace, selector)
        self.returned.update(o["metadata"]["name"] for o in found)
        return found


def test_a_no_op_reconcile_reads_each_workload_once() -> None:
    """#32 no-op reconcile: each pool's live workload comes from the one listing of the
    service's workloads that the prune pass also uses (read twice before: by name per pool, then
    in the listing), and a reconcile that wrote a workload lists again for the prune pass."""
    gw = _ReadLog()
    gw.nodes = cluster().nodes
    obj = copy.deepcopy(example(TEMPLATES[0]))
    obj["metadata"] = {"name": "svc-0", "namespace": "default"}
    gw.add(obj)
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW)
    for _ in range(2):
        ctl.reconcile("default", "svc-0")
    (workload,) = [n for (k, _, n) in gw.objects if k is Kind.DEPLOYMENT]

    gw.returned.clear()
    outcome = ctl.reconcile("default", "svc-0")
    assert outcome.applied == [] and not outcome.status_written
    assert gw.returned == Counter({workload: 1})

    # Edited behind the operator's back: applied back, then listed again for the prune pass.
    live = gw.objects[(Kind.DEPLOYMENT, "default", workload)]
    live["spec"]["template"]["spec"]["containers"][0]["args"].append("--enforce-eager")
    gw.returned.clear()
    outcome = ctl.reconcile("default", "svc-0")
    assert outcome.applied == [f"Deployment/{workload}"]
    assert gw.returned == Counter({workload: 2})
