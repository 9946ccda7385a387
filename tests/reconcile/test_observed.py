"""status.pools[].observed: the engine's own KV capacity next to the plan, kept per plan."""

from datetime import datetime
from typing import Any

from vllm_operator.api.status import MemoryBreakdown, PoolPlan, PoolStatus
from vllm_operator.metrics.signals import ServiceMetrics
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.observed import kept_observation, observed_capacity, plan_key
from vllm_operator.remediation.observations import PodMetrics
from vllm_operator.rendering.names import pool_selector_labels

from .test_controller import OfflineHub, cluster, example, make_ready, status_of
from .test_evaluate import Clock


def plan(tokens: int, **args: Any) -> PoolPlan:
    memory = MemoryBreakdown.model_validate(
        {
            "gpuTotalGiB": 22.0,
            "budgetGiB": 19.8,
            "weightsGiB": 15.0,
            "activationGiB": 1.0,
            "nonTorchGiB": 0.5,
            "cudaGraphGiB": 0.3,
            "kvCacheGiB": 3.0,
            "kv_cache_tokens": tokens,
            "concurrencyAtP99": 3.0,
        }
    )
    return PoolPlan(engine_args={"max_model_len": 8192, **args}, memory=memory)


def test_deviation_is_relative_to_the_plan_and_the_smallest_pod_wins() -> None:
    obs = observed_capacity(plan(20000), [19000, None, 21000])
    assert obs is not None
    assert (obs.kv_cache_tokens, obs.planned_kv_cache_tokens, obs.pods) == (19000, 20000, 2)
    assert obs.deviation_percent == -5.0
    assert obs.plan_hash == plan_key(plan(20000))


def test_no_report_no_observation_and_no_plan_memory_no_deviation() -> None:
    assert observed_capacity(plan(20000), [None, 0]) is None
    obs = observed_capacity(PoolPlan(engine_args={}), [512])
    assert obs is not None and obs.deviation_percent is None and obs.planned_kv_cache_tokens is None


def test_an_observation_is_kept_only_while_its_plan_runs() -> None:
    current = plan(20000)
    obs = observed_capacity(current, [10000])
    old = [PoolStatus(gpu_type="NVIDIA-L4", observed=obs)]
    assert kept_observation(old, "NVIDIA-L4", current) == obs
    assert kept_observation(old, "NVIDIA-L4", plan(20000, max_num_seqs=4)) is None
    assert kept_observation(old, "Tesla-T4", current) is None


class Metrics:
    """The metrics gateway's answer: every pod fresh, reporting `tokens` of KV capacity."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def observe(
        self, *, namespace: str, pods: Any, vllm_version: str, window_s: int, now: datetime
    ) -> ServiceMetrics:
        return ServiceMetrics(
            available=True,
            pods={p: PodMetrics(complete=False, kv_cache_tokens=self.tokens) for p in pods},
        )


def test_evaluation_records_the_engines_capacity_and_the_reconcile_keeps_it() -> None:
    from vllm_operator.hub.resolver import HubArchitectureResolver

    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["remediation"] = {"mode": "recommend"}
    gw.add(svc)
    ctl = Controller(
        gw, HubArchitectureResolver(gw, OfflineHub()), clock=Clock(), metrics=Metrics(12345)
    )
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    labels = pool_selector_labels("llama-8b-chat", "NVIDIA-L4")
    gw.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "llama-8b-chat-l4-abc", "namespace": "default", "labels": labels},
            "status": {"phase": "Running"},
        }
    )
    ctl.evaluate("default", "llama-8b-chat")
    (pool,) = status_of(gw, "llama-8b-chat")["pools"]
    planned = pool["plan"]["memory"]["kvCacheTokens"]
    assert pool["observed"]["kvCacheTokens"] == 12345
    assert pool["observed"]["plannedKvCacheTokens"] == planned
    assert pool["observed"]["deviationPercent"] == round((12345 - planned) / planned * 100, 1)
    writes = gw.total_writes()
    ctl.reconcile("default", "llama-8b-chat")  # the reconcile rebuilds pools: keeps the observation
    assert status_of(gw, "llama-8b-chat")["pools"][0]["observed"]["kvCacheTokens"] == 12345
    assert gw.total_writes() == writes
