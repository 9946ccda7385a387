"""vllm_operator_pool_plans counts the current pools (issue #20, defect 12: never cleared, so a
pool that became feasible read 1 for feasible *and* infeasible forever)."""

from prometheus_client import CollectorRegistry, Gauge

from vllm_operator.metrics.operator_metrics import PoolPlans
from vllm_operator.reconcile.controller import Controller

from ..reconcile.test_controller import cluster, controller, example


def _gauge() -> tuple[CollectorRegistry, Gauge]:
    registry = CollectorRegistry()
    return registry, Gauge("pool_plans", "test", ["gpu_type", "feasible"], registry=registry)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (s.labels["gpu_type"], s.labels["feasible"]): s.value
        for metric in registry.collect()
        for s in metric.samples
    }


def test_a_changed_plan_replaces_its_series_and_counts_across_services() -> None:
    registry, gauge = _gauge()
    plans = PoolPlans(gauge)
    plans.set(("ns", "a"), [("NVIDIA-L4", False)])
    plans.set(("ns", "b"), [("NVIDIA-L4", True), ("Tesla-T4", True)])
    assert _samples(registry) == {
        ("NVIDIA-L4", "false"): 1,
        ("NVIDIA-L4", "true"): 1,
        ("Tesla-T4", "true"): 1,
    }
    plans.set(("ns", "a"), [("NVIDIA-L4", True)])
    assert _samples(registry) == {("NVIDIA-L4", "true"): 2, ("Tesla-T4", "true"): 1}
    plans.forget(("ns", "b"))
    assert _samples(registry) == {("NVIDIA-L4", "true"): 1}
    plans.forget(("ns", "a"))
    assert _samples(registry) == {}


def test_controller_clears_the_infeasible_series_when_the_plan_becomes_feasible() -> None:
    registry, gauge = _gauge()
    gw = cluster()
    svc = example("llama-3.1-70b-h100-tp.yaml")
    svc["spec"]["placement"] = {"gpuTypes": ["Tesla-T4"], "maxGPUsPerReplica": 1}
    gw.add(svc)
    ctl: Controller = controller(gw)
    ctl.pool_plans = PoolPlans(gauge)
    ctl.reconcile("default", "llama-70b")
    assert _samples(registry) == {("Tesla-T4", "false"): 1}
    svc["spec"]["placement"] = {"gpuTypes": ["NVIDIA-H100-80GB-HBM3"]}
    svc["metadata"]["generation"] = 2
    gw.add(svc)
    ctl.reconcile("default", "llama-70b")
    assert _samples(registry) == {("NVIDIA-H100-80GB-HBM3", "true"): 1}
    ctl.forget("default", "llama-70b")
    assert _samples(registry) == {}


class _CountingGauge(Gauge):
    """A gauge that counts the series it is asked to set or remove."""

    touched = 0

    def labels(self, *values: str) -> Gauge:  # type: ignore[override]
        _CountingGauge.touched += 1
        return super().labels(*values)

    def remove(self, *values: str) -> None:
        _CountingGauge.touched += 1
        super().remove(*values)


def test_a_service_touches_only_its_own_series_however_many_services() -> None:
    """#32 no-op reconcile: the counts move by one service's change; recounting every service
    on every reconcile made a resync of N services O(N^2)."""
    registry = CollectorRegistry()
    plans = PoolPlans(
        _CountingGauge("pool_plans", "test", ["gpu_type", "feasible"], registry=registry)
    )
    for i in range(500):
        plans.set(("ns", f"s{i}"), [("NVIDIA-L4", True), ("Tesla-T4", i % 2 == 0)])
    _CountingGauge.touched = 0
    plans.set(("ns", "s1"), [("NVIDIA-L4", True), ("Tesla-T4", False)])  # unchanged
    assert _CountingGauge.touched == 0
    plans.set(("ns", "s1"), [("NVIDIA-L4", True)])
    assert _CountingGauge.touched == 2  # NVIDIA-L4 true stays 500 (set again), T4 false 249
    assert _samples(registry) == {
        ("NVIDIA-L4", "true"): 500,
        ("Tesla-T4", "true"): 250,
        ("Tesla-T4", "false"): 249,
    }
