"""Probe budgets on nodes change the plan; stale or malformed ones are ignored with an Event."""

import json
from datetime import datetime, timedelta
from typing import Any

from vllm_operator.api.probe import GPU_BUDGET_ANNOTATION
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.budgets import measured_budgets

from .nodes import gpu_node
from .test_controller import NOW, cluster, controller, example, status_of


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
    assert "stale" in result.ignored["a"] and "malformed" in result.ignored["b"]


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
