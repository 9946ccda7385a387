"""Signals against a real Prometheus scraping simulated vLLM pods, then through the policy.

Needs only the Prometheus binary (hack/tools/build-prometheus.sh), not the control plane. Skips
with the reason when the binary is absent, unless VLLM_OPERATOR_REQUIRE_PROMETHEUS=1.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.remediation.builders import plan, spec

from e2e.prometheus import (
    REQUIRE_ENV,
    LocalPrometheus,
    PrometheusUnavailable,
    Target,
    find_prometheus,
    free_port,
)
from e2e.simvllm.rig import scraped_pods
from e2e.simvllm.scenario import load_scenario
from e2e.simvllm.server import SimFleet, SimPod
from vllm_operator.api.status import HistoryEntry, Override
from vllm_operator.metrics.signals import MetricsRequest, PrometheusSignals, ServiceMetrics
from vllm_operator.remediation import (
    Decision,
    Observations,
    PodObservation,
    PoolObservation,
    decide,
)

NAMESPACE = "llm"
WINDOW_S = 30
SPEED = 10.0
POOL = "NVIDIA-L4"


OTHER_NAMESPACE = "llm-batch"
TWIN = "chat-kv"


@dataclass
class Rig:
    prometheus: LocalPrometheus
    signals: PrometheusSignals


PODS = {
    # pod name: (scenario, vLLM version, engines)
    "chat-steady": ("steady", "0.11.0", 1),
    "chat-kv": ("kv-saturation", "0.11.0", 2),
    "chat-prefix": ("low-prefix-hit", "0.11.0", 1),
    "chat-creep": ("chronic-creep", "0.11.0", 1),
    "chat-burst": ("burst-oom", "0.11.0", 1),
    "legacy-v0": ("kv-saturation", "0.6.0", 1),
}


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    try:
        binary = find_prometheus()
    except PrometheusUnavailable as err:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(str(err))
        pytest.skip(str(err))
    pods = [
        SimPod(
            name,
            load_scenario(scenario).model_copy(update={"engines": engines}),
            version=version,
            speed=SPEED,
        )
        for name, (scenario, version, engines) in PODS.items()
    ]
    targets = [Target(p.address, {"namespace": NAMESPACE, "pod": p.name}) for p in pods]
    # A pod named like one in NAMESPACE, in another namespace, with another scenario: batched
    # queries must keep them apart (#21).
    twin = SimPod(TWIN, load_scenario("steady"), version="0.11.0", speed=SPEED)
    targets.append(Target(twin.address, {"namespace": OTHER_NAMESPACE, "pod": twin.name}))
    with SimFleet([*pods, twin]), LocalPrometheus(binary, targets) as prom:
        prom.wait_until(
            lambda: len(prom.query('up{job="vllm"} == 1')) >= len(pods), 30, "targets scraped"
        )
        yield Rig(prom, PrometheusSignals(prom.url, gpu_memory_metric="DCGM_FI_DEV_FB_USED"))


def observe(rig: Rig, pods: list[str], version: str = "0.11.0") -> ServiceMetrics:
    return rig.signals.observe(
        namespace=NAMESPACE,
        pods=pods,
        vllm_version=version,
        window_s=WINDOW_S,
        now=datetime.now(UTC),
    )


def wait_complete(
    rig: Rig, pods: list[str], version: str = "0.11.0", timeout: float = 60
) -> ServiceMetrics:
    deadline = time.monotonic() + timeout
    result = observe(rig, pods, version)
    while time.monotonic() < deadline:
        result = observe(rig, pods, version)
        if result.available and all(result.pods[p].complete for p in pods):
            return result
        time.sleep(1)
    raise AssertionError(f"metrics never complete: {result.message}\n{rig.prometheus.log_tail()}")


def last(series: object) -> float:
    assert isinstance(series, list | tuple) and series
    return float(series[-1].v)


def test_version_correct_names_and_engine_aggregation(rig: Rig) -> None:
    pods = ["chat-steady", "chat-kv", "chat-prefix", "chat-creep"]
    result = wait_complete(rig, pods)
    steady, kv, prefix, creep = (result.pods[p] for p in pods)
    assert last(steady.kv_cache_usage) <= 0.56
    assert steady.prefix_cache_hit_rate == pytest.approx(0.6, abs=0.05)
    assert steady.gpu_memory_used_gib is not None and last(
        steady.gpu_memory_used_gib
    ) == pytest.approx(20.0, abs=0.01)
    # Two engines: running/waiting are summed across `engine`, usage is the fullest engine's.
    assert last(kv.requests_running) == pytest.approx(16)
    assert last(kv.requests_waiting) == pytest.approx(48)
    assert last(kv.kv_cache_usage) == pytest.approx(0.98)
    assert kv.preemptions_per_minute == pytest.approx(0.5 * SPEED * 60, rel=0.25)
    assert kv.kv_cache_tokens == 1792 * 16  # vllm:cache_config_info labels, not doubled by engines
    assert prefix.prefix_cache_hit_rate == pytest.approx(0.1, abs=0.05)
    assert creep.gpu_memory_used_gib is not None and last(
        creep.gpu_memory_used_gib
    ) == pytest.approx(21.8, abs=0.01)


def test_v0_names_without_engine_label(rig: Rig) -> None:
    result = wait_complete(rig, ["legacy-v0"], version="0.6.0")
    m = result.pods["legacy-v0"]
    assert last(m.kv_cache_usage) == pytest.approx(0.98)
    assert m.prefix_cache_hit_rate == pytest.approx(0.6, abs=0.05)  # the V0 gauge
    assert any("vllm:gpu_cache_usage_perc" in q for q in result.queries)


def test_policy_acts_once_on_real_signals(rig: Rig) -> None:
    pods = ["chat-kv", "chat-prefix", "chat-creep", "chat-steady"]
    result = wait_complete(rig, pods)
    now = datetime.now(UTC)

    def pool(name: str) -> Observations:
        return Observations(
            metrics_available=result.available,
            pools=[
                PoolObservation(
                    pool=POOL,
                    replicas=1,
                    pods=[PodObservation(name=name, ready=True, metrics=result.pods[name])],
                )
            ],
        )

    s = spec(windowSeconds=WINDOW_S)
    plans = {POOL: plan()}
    kv = decide(pool("chat-kv"), s, [], [], plans, now)
    assert [(a.reason.value, a.field, a.to_value) for a in kv.actions] == [
        ("KVPressure", "max_num_seqs", 18)
    ]
    waste = decide(pool("chat-prefix"), s, [], [], plans, now)
    assert [(a.reason.value, a.field) for a in waste.actions] == [
        ("PrefixCacheWaste", "enable_prefix_caching")
    ]
    creep = decide(pool("chat-creep"), s, [], [], plans, now)
    assert [(a.reason.value, a.pod) for a in creep.actions] == [
        ("ChronicFragmentation", "chat-creep")
    ]
    steady = decide(pool("chat-steady"), s, [], [], plans, now)
    assert steady.actions == ()
    # Evaluated again right after, with the first decision's history: the cooldown holds.
    again = decide(pool("chat-kv"), s, kv.overrides, kv.history, plans, now)
    assert again.actions == ()


def test_batched_queries_give_each_service_what_it_gets_alone(rig: Rig) -> None:
    """One query per signal for a tick's services (#21), each service's share equal to its
    own unbatched answer, from the same Prometheus at the same instant."""
    wait_complete(rig, ["chat-steady", "chat-kv", "chat-prefix", "chat-creep"])
    wait_complete(rig, ["legacy-v0"], version="0.6.0")
    requests = [
        MetricsRequest(namespace=NAMESPACE, pods=pods, vllm_version=version, window_s=WINDOW_S)
        for pods, version in [
            (("chat-steady", "chat-kv"), "0.11.0"),
            (("chat-prefix",), "0.11.0"),
            (("chat-creep", "chat-burst"), "0.11.0"),
            (("legacy-v0",), "0.6.0"),
        ]
    ] + [
        MetricsRequest(
            namespace=OTHER_NAMESPACE, pods=(TWIN,), vllm_version="0.11.0", window_s=WINDOW_S
        )
    ]
    counted = CountingClient(rig.prometheus.url)
    signals = PrometheusSignals(client=counted, gpu_memory_metric="DCGM_FI_DEV_FB_USED")

    def batch() -> tuple[datetime, list[ServiceMetrics]]:
        # Far enough back that every scrape before it has landed: both answers see the same data.
        now = datetime.now(UTC) - timedelta(seconds=3)
        return now, signals.observe_many(requests, now)

    def covered(result: list[ServiceMetrics]) -> bool:
        return all(m.pods[p].complete for m in result for p in m.pods if p != "chat-burst")

    deadline = time.monotonic() + 60
    now, batched = batch()
    while not covered(batched) and time.monotonic() < deadline:
        time.sleep(1)  # the next scrape; bounded by the deadline
        now, batched = batch()
    assert covered(batched), [m.message for m in batched]
    counted.calls = 0
    batched = signals.observe_many(requests, now)
    # Two groups (0.11.0 and 0.6.0 names), seven signals each.
    assert counted.calls == 14
    alone = [signals.observe_many([r], now)[0] for r in requests]
    assert counted.calls == 14 + 7 * len(requests)
    assert [m.model_copy(update={"queries": ()}) for m in batched] == [
        m.model_copy(update={"queries": ()}) for m in alone
    ]
    # The same pod name in two namespaces: two pods, two scenarios, two answers.
    saturated, steady = batched[0].pods[TWIN], batched[4].pods[TWIN]
    assert last(saturated.kv_cache_usage) == pytest.approx(0.98)
    assert last(steady.kv_cache_usage) <= 0.56


class CountingClient:
    """The gateway's client (POST, as it connects) with its queries counted."""

    def __init__(self, url: str) -> None:
        from prometheus_api_client import PrometheusConnect

        self.client = PrometheusConnect(url=url, disable_ssl=True, method="POST")
        self.calls = 0

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        self.calls += 1
        return self.client.custom_query(query, params=params)

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        params: dict[str, Any] | None = None,
    ) -> Any:
        self.calls += 1
        return self.client.custom_query_range(
            query, start_time=start_time, end_time=end_time, step=step, params=params
        )


def test_crashed_pod_goes_stale_and_never_acts(rig: Rig) -> None:
    def stale() -> bool:
        r = observe(rig, ["chat-burst"])
        return not r.available or not r.pods["chat-burst"].complete

    rig.prometheus.wait_until(stale, 60, "the crashed pod's series to go stale")
    r = observe(rig, ["chat-burst", "chat-steady"])
    assert r.available and not r.pods["chat-burst"].complete and r.pods["chat-steady"].complete


def test_unreachable_prometheus_is_unavailable_fast() -> None:
    signals = PrometheusSignals(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    started = time.monotonic()
    r = signals.observe(
        namespace=NAMESPACE,
        pods=["x"],
        vllm_version="0.11.0",
        window_s=WINDOW_S,
        now=datetime.now(UTC),
    )
    assert not r.available and "Prometheus query failed" in r.message
    assert time.monotonic() - started < 10


def test_unknown_pods_are_unavailable(rig: Rig) -> None:
    r = observe(rig, ["no-such-pod"])
    assert not r.available and "no vLLM samples" in r.message


def test_recovery_restores_and_prometheus_down_stops_actions() -> None:
    """KV saturation -> lower max_num_seqs; recovery -> Restored; Prometheus down -> nothing."""
    try:
        find_prometheus()
    except PrometheusUnavailable as err:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(str(err))
        pytest.skip(str(err))
    s = spec(windowSeconds=WINDOW_S, restoreAfterSeconds=60, cooldownSeconds=0)
    plans = {POOL: plan()}
    with scraped_pods(
        {"chat-0": "kv-saturation"}, namespace=NAMESPACE, version="0.11.0", speed=SPEED
    ) as rig:
        rig.wait_scraped()
        signals = PrometheusSignals(rig.url)

        def evaluate(overrides: list[Override], history: tuple[HistoryEntry, ...]) -> Decision:
            now = datetime.now(UTC)
            r = signals.observe(
                namespace=NAMESPACE,
                pods=["chat-0"],
                vllm_version="0.11.0",
                window_s=WINDOW_S,
                now=now,
            )
            obs = Observations(
                metrics_available=r.available,
                metrics_message=r.message,
                pools=[
                    PoolObservation(
                        pool=POOL,
                        replicas=1,
                        pods=[
                            PodObservation(name="chat-0", ready=True, metrics=r.pods.get("chat-0"))
                        ],
                    )
                ],
            )
            return decide(obs, s, overrides, history, plans, now)

        first = _until(lambda: evaluate([], ()), lambda d: bool(d.actions), 60)
        assert [(a.reason.value, a.to_value) for a in first.actions] == [("KVPressure", 18)]
        # The override is an hour old by now (pretend), and the pod recovers.
        old = [
            o.model_copy(update={"since": o.since - timedelta(hours=1)}) for o in first.overrides
        ]
        aged = tuple(
            h.model_copy(update={"time": h.time - timedelta(hours=1)}) for h in first.history
        )
        still = evaluate(old, aged)
        # Still saturated: no restore, the next step down instead (to the concurrency floor).
        assert [(a.reason.value, a.to_value) for a in still.actions] == [("KVPressure", 16)]
        rig.switch("chat-0", "steady")
        # Until the saturated samples leave the window the pool is not quiet (and still hot).
        restored = _until(
            lambda: evaluate(old, aged),
            lambda d: any(a.reason.value == "Restored" for a in d.actions),
            WINDOW_S * 3,
        )
        assert [(a.reason.value, a.kind.value, a.field) for a in restored.actions] == [
            ("Restored", "clearOverride", "max_num_seqs")
        ]
        assert restored.overrides == ()
        # Prometheus goes away: MetricsAvailable=False and no metric-driven step.
        rig.switch("chat-0", "kv-saturation")
        rig.prometheus.stop()
        down = evaluate([], ())
        assert down.actions == ()
        conds = {c.type: (c.status, c.reason) for c in down.conditions}
        assert conds["MetricsAvailable"] == ("False", "MetricsUnavailable")


def _until(
    produce: Callable[[], Decision], done: Callable[[Decision], bool], timeout: float
) -> Decision:
    deadline = time.monotonic() + timeout
    decision = produce()
    while not done(decision):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout}s: {decision}")
        time.sleep(1)
        decision = produce()
    return decision
