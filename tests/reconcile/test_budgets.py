"""Probe budgets on nodes change the plan; stale or malformed ones are ignored with an Event."""

import json
from datetime import datetime, timedelta
from typing import Any

from vllm_operator.api.probe import GPU_BUDGET_ANNOTATION, BudgetProblem
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.budgets import BudgetCache, measured_budgets
from vllm_operator.reconcile.controller import Controller

from .nodes import gpu_node
from .test_controller import NOW, OfflineHub, cluster, condition, controller, example, status_of


def budget(node: str, used_by: list[dict[str, Any]], *, at: datetime = NOW) -> str:
    used = sum(p["usedMib"] for p in used_by)
    return json.dumps(
        {
            "node": node,
            "observedAt": at.isoformat(),
            "probeVersion": "test",
            "gpus": [
                {
                    "index": 0,
                    "uuid": "GPU-1",
                    "name": "NVIDIA L4",
                    "totalMib": 23034,
                    "freeMib": 23034 - 300 - used,
                    "usedMib": 300 + used,
                    "processes": used_by,
                }
            ],
        }
    )


def annotated_l4(name: str, text: str) -> dict[str, Any]:
    node = gpu_node(name, "NVIDIA-L4", 1)
    node["metadata"]["annotations"] = {GPU_BUDGET_ANNOTATION: text}
    return node


def test_host_tenant_lowers_the_budget_and_pods_of_others_exclude_their_gpu() -> None:
    tenant = [{"pid": 4242, "usedMib": 6000}]
    other_pod = [{"pid": 7, "usedMib": 20000, "podUid": "someone-else"}]
    nodes = [annotated_l4("a", budget("a", tenant)), annotated_l4("b", budget("b", other_pod))]
    result = measured_budgets(nodes, NOW)
    # Node b's only GPU is held by another pod: not a candidate. Node a: free minus margin.
    assert result.usable_mib == {"NVIDIA-L4": 23034 - 300 - 6000 - 256}
    assert result.ignored == {}


def test_own_pods_do_not_count_against_themselves() -> None:
    own = [{"pid": 1, "usedMib": 20000, "podUid": "mine"}]
    result = measured_budgets([annotated_l4("a", budget("a", own))], NOW, own_pod_uids=["mine"])
    assert result.usable_mib["NVIDIA-L4"] == 23034 - 300 - 256


def test_stale_and_malformed_annotations_are_ignored_with_reasons() -> None:
    stale = budget("a", [], at=NOW - timedelta(hours=2))
    result = measured_budgets([annotated_l4("a", stale), annotated_l4("b", "{not json")], NOW)
    assert result.usable_mib == {}
    assert result.ignored["a"].rejection.problem is BudgetProblem.STALE
    assert result.ignored["b"].rejection.problem is BudgetProblem.MALFORMED


def test_measured_budget_changes_the_plan_and_status_says_so() -> None:
    gw = cluster()
    # A 3 GiB host process (a display server, say) leaves less than util x total free.
    gw.nodes = [annotated_l4("l4-0", budget("l4-0", [{"pid": 9, "usedMib": 3000}]))]
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["workload"]["concurrency"] = 2
    gw.add(svc)
    controller(gw).reconcile("default", "llama-8b-chat")
    (pool,) = status_of(gw, "llama-8b-chat")["pools"]
    assert "probe" in pool["plan"]["memory"]["budgetSource"].lower()
    assert pool["plan"]["engineArgs"]["gpu_memory_utilization"] < 0.9

    plain = cluster()
    plain.add(svc)
    controller(plain).reconcile("default", "llama-8b-chat")
    (catalog_pool,) = status_of(plain, "llama-8b-chat")["pools"]
    assert "probe" not in catalog_pool["plan"]["memory"]["budgetSource"].lower()


def test_bad_annotation_gives_one_warning_and_the_catalog_plan() -> None:
    gw = cluster()
    gw.nodes = [annotated_l4("l4-0", "{not json")]
    gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    ctl.reconcile("default", "llama-8b-chat")
    warnings = [e for e in gw.events if e.reason == "ProbeBudgetIgnored"]
    assert len(warnings) == 1 and "l4-0" in warnings[0].message
    assert gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4") is not None


# --- Issue #20, defect 1: one bad node annotation must not stall or spam the cluster ----------

NESTED = "[" * 30_000 + "]" * 30_000  # json.loads raises RecursionError, not ValueError


def two_services(gw: Any) -> None:
    """An L4 service (can use the bad node) and a T4 one (cannot)."""
    gw.add(example("llama-3.1-8b-l4.yaml"))
    gw.add(example("qwen2.5-7b-awq-t4.yaml"))


def test_deeply_nested_annotation_fails_no_reconcile_and_warns_once_on_the_node() -> None:
    gw = cluster()
    gw.nodes[2] = annotated_l4("l4-0", NESTED)
    two_services(gw)
    ctl = controller(gw)
    for _ in range(3):
        ctl.reconcile("default", "llama-8b-chat")
        ctl.reconcile("default", "qwen-7b-awq")
    assert gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4") is not None
    assert gw.get(Kind.DEPLOYMENT, "default", "qwen-7b-awq-t4") is not None
    warnings = [e for e in gw.events if e.reason == "ProbeBudgetIgnored"]
    assert [(e.kind, e.name, e.type) for e in warnings] == [("Node", "l4-0", "Warning")]
    assert "Malformed" in warnings[0].message


def test_note_only_on_services_that_can_use_the_gpu_type() -> None:
    gw = cluster()
    gw.nodes[2] = annotated_l4("l4-0", NESTED)
    two_services(gw)
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    ctl.reconcile("default", "qwen-7b-awq")
    l4 = condition(status_of(gw, "llama-8b-chat"), "Feasible")["message"]
    t4 = condition(status_of(gw, "qwen-7b-awq"), "Feasible")["message"]
    assert "probe budget ignored on l4-0 (Malformed)" in l4
    assert "probe budget" not in t4


def test_stale_annotation_warns_once_although_time_passes() -> None:
    gw = cluster()
    gw.nodes[2] = annotated_l4("l4-0", budget("l4-0", [], at=NOW - timedelta(hours=2)))
    two_services(gw)
    clock = [NOW]
    ctl = Controller(gw, controller(gw).resolver, clock=lambda: clock[0])
    writes_before = None
    for step in range(5):
        clock[0] = NOW + timedelta(seconds=37 * step)
        ctl.reconcile("default", "llama-8b-chat")
        ctl.reconcile("default", "qwen-7b-awq")
        if step == 1:
            writes_before = dict(gw.writes)
    warnings = [e for e in gw.events if e.reason == "ProbeBudgetIgnored"]
    assert len(warnings) == 1 and "Stale" in warnings[0].message
    assert dict(gw.writes) == writes_before  # steady state: no status rewrites, no Events


def test_a_new_problem_on_the_same_node_is_a_new_event_and_recovery_resets() -> None:
    gw = cluster()
    gw.nodes[2] = annotated_l4("l4-0", NESTED)
    gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    gw.nodes[2] = annotated_l4("l4-0", budget("l4-0", [], at=NOW - timedelta(hours=2)))
    ctl.reconcile("default", "llama-8b-chat")
    gw.nodes[2] = annotated_l4("l4-0", budget("l4-0", []))
    ctl.reconcile("default", "llama-8b-chat")
    gw.nodes[2] = annotated_l4("l4-0", NESTED)
    ctl.reconcile("default", "llama-8b-chat")
    problems = [e.message.split("(")[1].split(")")[0] for e in gw.events if e.kind == "Node"]
    assert problems == ["Malformed", "Stale", "Malformed"]


def test_annotation_is_decoded_once_per_change_not_per_reconcile() -> None:
    gw = cluster()
    gw.nodes[2] = annotated_l4("l4-0", budget("l4-0", [{"pid": 9, "usedMib": 3000}]))
    two_services(gw)
    ctl = controller(gw)
    for _ in range(10):
        ctl.reconcile("default", "llama-8b-chat")
        ctl.reconcile("default", "qwen-7b-awq")
    assert ctl.node_view.budget_cache.decodes == 1
    gw.nodes[2] = annotated_l4("l4-0", budget("l4-0", [{"pid": 9, "usedMib": 4000}]))
    ctl.reconcile("default", "llama-8b-chat")
    assert ctl.node_view.budget_cache.decodes == 2


def test_cache_forgets_deleted_nodes() -> None:
    cache = BudgetCache()
    nodes = [annotated_l4("a", budget("a", [])), annotated_l4("b", budget("b", []))]
    measured_budgets(nodes, NOW, cache=cache)
    cache.retain(["a"])
    measured_budgets(nodes[:1], NOW, cache=cache)
    assert cache.decodes == 2


_ = OfflineHub
