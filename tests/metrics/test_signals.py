"""The Prometheus gateway with a fake client: PromQL per version, aggregation, fail-safe."""

from datetime import UTC, datetime, timedelta
from typing import Any

from vllm_operator.metrics.signals import BYTES_TO_GIB, PROBE_PROCESS_MEMORY, PrometheusSignals

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class FakeProm:
    def __init__(
        self,
        ranges: dict[str, list[Any]] | None = None,
        instant: dict[str, list[Any]] | None = None,
        fail: Exception | None = None,
    ) -> None:
        self.ranges, self.instant, self.fail = ranges or {}, instant or {}, fail
        self.seen: list[str] = []

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        params: dict[str, Any] | None = None,
    ) -> Any:
        self.seen.append(query)
        if self.fail:
            raise self.fail
        return next((v for k, v in self.ranges.items() if k in query), [])

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        self.seen.append(query)
        return next((v for k, v in self.instant.items() if k in query), [])


def matrix(
    pod: str, value: float, *, span_s: int = 300, step: int = 15, label: str = "pod"
) -> list[Any]:
    start = NOW - timedelta(seconds=span_s)
    values = [
        [(start + timedelta(seconds=i)).timestamp(), str(value)] for i in range(0, span_s + 1, step)
    ]
    ns_label = "exported_namespace" if label == "exported_pod" else "namespace"
    return [{"metric": {label: pod, ns_label: "llm"}, "values": values}]


def vector(pod: str, value: str) -> list[Any]:
    return [{"metric": {"pod": pod, "namespace": "llm"}, "value": [NOW.timestamp(), value]}]


def observe(fake: FakeProm, version: str = "0.11.0", **kw: Any) -> Any:
    return PrometheusSignals(client=fake, **kw).observe(
        namespace="llm", pods=["a"], vllm_version=version, window_s=300, now=NOW
    )


def full(kv: float = 0.5) -> FakeProm:
    return FakeProm(
        ranges={
            "kv_cache_usage_perc": matrix("a", kv),
            "gpu_cache_usage_perc": matrix("a", kv),
            "num_requests_running": matrix("a", 8),
            "num_requests_waiting": matrix("a", 2),
            "DCGM_FI_DEV_FB_USED": matrix("a", 20.0),
        },
        instant={
            "num_preemptions_total": vector("a", "3"),
            "hits": vector("a", "NaN"),
            "cache_config_info": [
                {
                    "metric": {
                        "pod": "a",
                        "namespace": "llm",
                        "num_gpu_blocks": "1792",
                        "block_size": "16",
                        "engine": "0",
                    },
                    "value": [0, "1"],
                },
                {
                    "metric": {
                        "pod": "a",
                        "namespace": "llm",
                        "num_gpu_blocks": "None",
                        "block_size": "16",
                        "engine": "1",
                    },
                    "value": [0, "1"],
                },
            ],
        },
    )


def test_complete_pod_metrics_and_units() -> None:
    r = observe(full())
    m = r.pods["a"]
    assert r.available and m.complete
    assert m.gpu_memory_used_gib is not None and m.gpu_memory_used_gib[-1].v == 20.0
    assert any("DCGM_FI_DEV_FB_USED" in q and q.endswith("* 0.0009765625") for q in r.queries)
    assert m.preemptions_per_minute == 3.0
    assert m.prefix_cache_hit_rate is None  # 0/0: no queries in the window
    assert m.kv_cache_tokens == 1792 * 16  # "None" (not profiled yet) is ignored


def test_promql_uses_the_versions_names_and_aggregates_engines() -> None:
    fake = full()
    observe(fake, "0.11.0")
    assert any(
        q.startswith("(max by (namespace, pod) (vllm:kv_cache_usage_perc{") for q in fake.seen
    )
    assert any("sum by (namespace, pod) (vllm:num_requests_running{" in q for q in fake.seen)
    assert any("rate(vllm:prefix_cache_hits_total{" in q for q in fake.seen)
    assert all('namespace="llm",pod=~"a"' in q for q in fake.seen)
    fake = full()
    observe(fake, "0.10.2")  # V1 default with a possible silent V0 fallback: both names, or-ed
    assert any(
        "vllm:kv_cache_usage_perc" in q and " or " in q and "vllm:gpu_cache_usage_perc" in q
        for q in fake.seen
    )
    fake = full()
    observe(fake, "0.6.0")
    assert any("avg_over_time(vllm:gpu_prefix_cache_hit_rate" in q for q in fake.seen)


def test_unreachable_prometheus_is_unavailable() -> None:
    r = observe(FakeProm(fail=ConnectionError("connection refused")))
    assert not r.available and "connection refused" in r.message and r.pods == {}


def test_no_samples_at_all_is_unavailable() -> None:
    r = observe(FakeProm())
    assert not r.available and "no vLLM samples" in r.message


def test_short_history_is_incomplete_not_an_action() -> None:
    fake = full()
    fake.ranges["kv_cache_usage_perc"] = matrix("a", 0.99, span_s=60)
    r = observe(fake)
    assert r.available and not r.pods["a"].complete


def test_probe_process_metric_with_exported_labels() -> None:
    fake = full()
    fake.ranges = {
        **fake.ranges,
        PROBE_PROCESS_MEMORY: matrix("a", 21.5, label="exported_pod"),
    }
    del fake.ranges["DCGM_FI_DEV_FB_USED"]
    r = observe(
        fake,
        gpu_memory_metric=PROBE_PROCESS_MEMORY,
        gpu_memory_to_gib=BYTES_TO_GIB,
        gpu_pod_label="exported_pod",
        gpu_namespace_label="exported_namespace",
    )
    m = r.pods["a"]
    assert m.gpu_memory_used_gib is not None and abs(m.gpu_memory_used_gib[-1].v - 21.5) < 1e-9
    assert any(
        'exported_namespace="llm",exported_pod=~"a"' in q and q.endswith(repr(BYTES_TO_GIB))
        for q in fake.seen
    )


def test_no_gpu_exporter_disables_creep_only() -> None:
    r = observe(full(), gpu_memory_metric=None)
    assert r.pods["a"].complete and r.pods["a"].gpu_memory_used_gib is None


def test_a_hit_rate_of_minus_one_means_prefix_caching_is_off() -> None:
    fake = full()
    fake.instant["gpu_prefix_cache_hit_rate"] = vector("a", "-1")  # V0 gauge, caching off
    r = observe(fake, "0.6.0")
    assert r.available and r.pods["a"].complete
    assert r.pods["a"].prefix_cache_hit_rate is None  # not 0.0: no PrefixCacheWaste step on it
    fake.instant["gpu_prefix_cache_hit_rate"] = vector("a", "0.42")
    assert observe(fake, "0.6.0").pods["a"].prefix_cache_hit_rate == 0.42
    fake.instant["gpu_prefix_cache_hit_rate"] = vector("a", "1.7")  # not a rate
    assert observe(fake, "0.6.0").pods["a"].prefix_cache_hit_rate is None


def test_kv_usage_outside_zero_to_one_is_invalid_data_not_a_signal() -> None:
    for bad in (-0.25, 1.5):
        r = observe(full(kv=bad))
        m = r.pods["a"]
        assert r.available and not m.complete  # no metric-driven action on this pod
        assert m.kv_cache_usage == [] and m.invalid is not None
        assert f"KV-cache usage {bad:g} outside 0-1" in m.invalid
        assert "invalid data" in r.message
    ok = observe(full(kv=1.0))  # full is valid
    assert ok.pods["a"].complete and ok.pods["a"].invalid is None


def test_a_version_outside_the_catalog_is_unavailable_with_a_reason() -> None:
    fake = full()
    r = observe(fake, "0.0.1")
    assert not r.available and r.reason is not None and r.reason.value == "UnsupportedVersion"
    assert "0.0.1 is not in the version catalog" in r.message
    assert fake.seen == []  # no query with guessed metric names
