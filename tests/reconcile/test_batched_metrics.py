"""Evaluations due together ask Prometheus once per signal for all of them
(#21; delayed adds on the work queue since #32), and each service's status gets its own pods' answers."""

from __future__ import annotations

from typing import Any

from tests.metrics.strict_prom import PodKey, StrictProm
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.metrics.names import metric_names
from vllm_operator.metrics.signals import PrometheusSignals
from vllm_operator.reconcile.controller import Controller
from vllm_operator.rendering.names import pool_selector_labels

from .test_controller import OfflineHub, cluster, example, make_ready, status_of
from .test_evaluate import Clock


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_services_due_in_one_tick_cost_one_query_per_signal() -> None:
    gw = cluster()
    base = example("llama-3.1-8b-l4.yaml")
    version = base["spec"]["vllm"]["version"]
    # Twelve services in three namespaces; the same service (and pod) names in each namespace.
    keys = [("abc"[i % 3], f"chat-{i // 3}") for i in range(12)]
    names = metric_names(version)
    wanted = (*names.kv_usage, names.running, names.waiting, names.cache_config_info)
    data: dict[str, dict[PodKey, float]] = {n: {} for n in wanted if n is not None}
    fake = StrictProm(data)
    mono = Monotonic()
    ctl = Controller(
        gw,
        HubArchitectureResolver(gw, OfflineHub()),
        clock=Clock(),
        metrics=PrometheusSignals(client=fake, gpu_memory_metric=None),
        monotonic=mono,
    )
    for i, (namespace, name) in enumerate(keys):
        svc = {**base, "metadata": {"name": name, "namespace": namespace}}
        gw.add(svc)
        ctl.reconcile(namespace, name)
        make_ready(gw, namespace, f"{name}-l4")
        ctl.reconcile(namespace, name)
        pod = f"{name}-l4-abc"
        gw.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod,
                    "namespace": namespace,
                    "labels": pool_selector_labels(name, "NVIDIA-L4"),
                },
                "status": {"phase": "Running"},
            }
        )
        for metric in data:
            data[metric][(namespace, pod)] = 1000.0 + i if "cache_config" in metric else 0.5
    assert fake.calls == []

    mono.now += max(ctl.evaluations.tracked().values())
    assert sorted(ctl.run_due()) == sorted(keys)
    # kv, running, waiting (ranges), preemptions, hit rate, cache config (instant): one each.
    assert len(fake.calls) == 6, fake.calls
    for i, (namespace, name) in enumerate(keys):
        (pool,) = status_of(gw, name, namespace)["pools"]
        assert pool["observed"]["kvCacheTokens"] == (1000 + i) * 16, (namespace, name)

    # Outside a tick (an evaluation on its own) the service still queries for itself.
    ctl.evaluator._last.clear()
    before = len(fake.calls)
    ctl.evaluate(*keys[0])
    assert len(fake.calls) == before + 6
    assert all(f'namespace="{keys[0][0]}",' in q for q in fake.calls[before:])


def test_without_prometheus_a_tick_reads_each_service_once() -> None:
    """No batch to fetch: the tick hook must not decode every due service for nothing (the
    steady-window profile showed it at a third of the idle operator's CPU)."""
    gw = cluster()
    base = example("llama-3.1-8b-l4.yaml")
    mono = Monotonic()
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=Clock(), monotonic=mono)
    keys = [("default", f"chat-{i}") for i in range(5)]
    for namespace, name in keys:
        gw.add({**base, "metadata": {"name": name, "namespace": namespace}})
        ctl.reconcile(namespace, name)
    reads: list[tuple[str, str]] = []
    get = ctl.gw.get

    def counted(kind: Any, namespace: str, name: str) -> Any:
        reads.append((namespace, name))
        return get(kind, namespace, name)

    ctl.gw.get = counted  # type: ignore[method-assign]
    mono.now += max(ctl.evaluations.tracked().values())
    assert sorted(ctl.run_due()) == keys
    assert sorted(reads) == keys
