"""Plan results cached by their inputs (#21): an identical reconcile does not plan again."""

from collections import Counter
from typing import Any

import pytest

from vllm_operator.api.manifests import check_service
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning import plan as planning
from vllm_operator.reconcile import pools
from vllm_operator.reconcile.pools import PlanCache, prepare_service

from .test_controller import cluster, controller, example


@pytest.fixture
def planner_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    calls: Counter[str] = Counter()
    real = planning.plan_pool

    def counting(*args: Any, **kwargs: Any) -> planning.PlanResult:
        calls[args[1].label] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(pools, "plan_pool", counting)
    return calls


def test_a_second_identical_reconcile_does_not_call_the_planner(
    planner_calls: Counter[str],
) -> None:
    gw = cluster()
    gw.add(example("qwen2.5-14b-h100-a100.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "qwen-14b")
    first = sum(planner_calls.values())
    assert first >= 2  # one plan per GPU type
    ctl.reconcile("default", "qwen-14b")
    assert sum(planner_calls.values()) == first


def test_services_with_the_same_inputs_share_plans_and_a_changed_input_plans_again(
    planner_calls: Counter[str],
) -> None:
    gw = cluster()
    for name in ("a", "b"):
        svc = example("llama-3.1-8b-l4.yaml")
        svc["metadata"]["name"] = name
        gw.add(svc)
    ctl = controller(gw)
    ctl.reconcile("default", "a")
    ctl.reconcile("default", "b")
    assert planner_calls == Counter({"NVIDIA-L4": 1})
    svc = example("llama-3.1-8b-l4.yaml")
    svc["metadata"]["name"] = "c"
    svc["spec"]["workload"]["concurrency"] = 12
    gw.add(svc)
    ctl.reconcile("default", "c")
    assert planner_calls == Counter({"NVIDIA-L4": 2})


def test_the_cache_is_bounded_least_recently_used_first(planner_calls: Counter[str]) -> None:
    gw = cluster()
    prepared = prepare_service(
        check_service(example("llama-3.1-8b-l4.yaml")), controller(gw).resolver
    )
    l4, t4 = lookup_gpu("NVIDIA-L4"), lookup_gpu("Tesla-T4")
    cache = PlanCache(maxsize=1)
    cache.plan(prepared.intent, l4, prepared.arch, None, ())
    cache.plan(prepared.intent, l4, prepared.arch, None, ())
    assert planner_calls == Counter({"NVIDIA-L4": 1})
    cache.plan(prepared.intent, t4, prepared.arch, None, ())  # pushes the L4 plan out
    cache.plan(prepared.intent, l4, prepared.arch, None, ())
    assert planner_calls == Counter({"NVIDIA-L4": 2, "Tesla-T4": 1})
