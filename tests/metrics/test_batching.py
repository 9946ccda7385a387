"""Batched Prometheus queries (#21): one query per signal for every service due in a tick, each
service's share equal to what it gets when asked alone, against a fake that refuses what the
real Prometheus refuses."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from vllm_operator.metrics import signals
from vllm_operator.metrics.names import metric_names
from vllm_operator.metrics.signals import (
    DCGM_FB_USED,
    MetricsRequest,
    PrometheusSignals,
    ServiceMetrics,
)

from .strict_prom import PodKey, StrictProm

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
VERSIONS = ("0.11.0", "0.6.0")


def requests() -> list[MetricsRequest]:
    """30 services in three namespaces; pod names repeat across namespaces (with other values)."""
    out = []
    for i in range(30):
        namespace = "abc"[i % 3]
        pods = tuple(f"chat-{i // 3}-{k}" for k in range(1 + i % 3))
        out.append(
            MetricsRequest(
                namespace=namespace,
                pods=pods,
                vllm_version="0.6.0" if i == 7 else "0.11.0",
                window_s=60 if i == 11 else 30,
            )
        )
    return out


def series(reqs: list[MetricsRequest]) -> dict[str, dict[PodKey, float]]:
    """Every metric of both versions for every pod, each value unique to its (namespace, pod)."""
    keys = sorted({(r.namespace, p) for r in reqs for p in r.pods})
    value = {key: (n + 1) / (len(keys) + 1) for n, key in enumerate(keys)}  # within 0-1
    names: set[str | None] = {DCGM_FB_USED}
    for version in VERSIONS:
        m = metric_names(version)
        names |= {*m.kv_usage, m.running, m.waiting, m.preemptions, m.cache_config_info}
        names |= {n for pair in m.prefix_counters for n in pair}
        names |= {m.prefix_hit_rate_gauge}
    out: dict[str, dict[PodKey, float]] = {}
    for name in names:
        if name is not None:
            scale = 1000 if name.endswith("cache_config_info") else 1
            out[name] = {k: round(v * scale) if scale > 1 else v for k, v in value.items()}
    return out


def alone(reqs: list[MetricsRequest]) -> list[ServiceMetrics]:
    data = series(reqs)
    out = []
    for r in reqs:
        fake = StrictProm(data)
        out.append(PrometheusSignals(client=fake).observe_many([r], NOW)[0])
    return out


def without_queries(results: list[ServiceMetrics]) -> list[ServiceMetrics]:
    return [r.model_copy(update={"queries": ()}) for r in results]


def signals_per_group() -> int:
    """kv, running, waiting, GPU memory, preemptions, hit rate, cache config."""
    return 7


def test_one_query_per_signal_for_every_service_and_each_gets_its_own_share() -> None:
    reqs = requests()
    fake = StrictProm(series(reqs))
    batched = PrometheusSignals(client=fake).observe_many(reqs, NOW)
    # Three groups: 0.11.0 over 30 s, 0.6.0 (other names), and a 60 s window.
    assert len(fake.calls) == 3 * signals_per_group()
    assert without_queries(batched) == without_queries(alone(reqs))
    for r, m in zip(reqs, batched, strict=True):
        assert m.available and set(m.pods) == set(r.pods)
        assert all(p.complete for p in m.pods.values()), m.message
    # The same pod name in two namespaces is two pods with their own values.
    a, b = batched[0].pods["chat-0-0"], batched[3].pods["chat-1-0"]
    assert (reqs[0].namespace, reqs[3].namespace) == ("a", "a")
    same_name = [
        m.pods["chat-0-0"].kv_cache_tokens
        for r, m in zip(reqs, batched, strict=True)
        if "chat-0-0" in m.pods
    ]
    assert len(same_name) == 3 and len(set(same_name)) == 3
    assert a.kv_cache_tokens != b.kv_cache_tokens


def test_a_hundred_services_in_one_tick_still_cost_one_query_per_signal() -> None:
    reqs = [
        MetricsRequest(
            namespace=f"team-{i % 7}",
            pods=(f"svc-{i}-l4-7d9c8b6f5-x2x9q", f"svc-{i}-l4-7d9c8b6f5-k8p4z"),
            vllm_version="0.11.0",
            window_s=300,
        )
        for i in range(100)
    ]
    fake = StrictProm(series(reqs))
    batched = PrometheusSignals(client=fake).observe_many(reqs, NOW)
    assert len(fake.calls) == signals_per_group()
    assert without_queries(batched) == without_queries(alone(reqs))


def test_past_the_selector_budget_a_tick_splits_into_a_few_queries_per_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reqs = [r for r in requests() if r.vllm_version == "0.11.0" and r.window_s == 30]
    monkeypatch.setattr(signals, "MAX_SELECTOR_CHARS", 120)
    fake = StrictProm(series(reqs))
    batched = PrometheusSignals(client=fake).observe_many(reqs, NOW)
    queries_per_signal = len(fake.calls) // signals_per_group()
    assert 1 < queries_per_signal < len(reqs)
    assert without_queries(batched) == without_queries(alone(reqs))


def test_a_refused_query_fails_its_batch_only_and_unknown_versions_cost_nothing() -> None:
    reqs = requests()[:6] + [
        # 11,000+ points per series at the largest step: Prometheus refuses the range query.
        MetricsRequest(namespace="a", pods=("huge",), vllm_version="0.11.0", window_s=700_000),
        MetricsRequest(namespace="a", pods=("old",), vllm_version="0.0.1", window_s=30),
        MetricsRequest(namespace="a", pods=(), vllm_version="0.11.0", window_s=30),
    ]
    fake = StrictProm(series(reqs))
    batched = PrometheusSignals(client=fake).observe_many(reqs, NOW)
    assert all(m.available for m in batched[:6])
    huge, old, empty = batched[6:]
    assert not huge.available and "exceeded maximum resolution" in huge.message
    assert not old.available and old.reason is not None and old.reason.value == "UnsupportedVersion"
    assert empty.available and empty.pods == {}
    assert not any('"old"' in q or '=~"old"' in q for q in fake.calls)


def test_the_fake_refuses_what_prometheus_refuses() -> None:
    """The fake is only a proof when it rejects malformed PromQL the way Prometheus does."""
    fake = StrictProm({"up": {("a", "p"): 1.0}})
    with pytest.raises(Exception, match="unknown escape"):
        fake.custom_query('up{pod=~"a\\-b"}')  # a regex escape not doubled for the string
    with pytest.raises(Exception, match="invalid regular expression"):
        fake.custom_query('up{pod=~"(a"}')
    with pytest.raises(Exception, match="unbalanced"):
        fake.custom_query('sum by (pod) (up{pod="p"}')
    with pytest.raises(Exception, match="POST too large"):
        fake.custom_query('up{pod=~"' + "a|" * 6 * 2**20 + 'a"}')
    assert fake.custom_query('up{namespace="a",pod=~"a\\\\-b|p"}')[0]["metric"]["pod"] == "p"
