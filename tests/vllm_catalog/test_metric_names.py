"""Metric-name resolution per version (the catalog is its one home; metrics.names re-exports it)."""

import pytest

from vllm_operator.catalog.vllm import load_version, metric_names, running_engines
from vllm_operator.metrics import names as gateway_names


def test_newest_v1_names() -> None:
    names = metric_names("0.33.0")
    assert names.kv_usage == ("vllm:kv_cache_usage_perc",)
    assert names.prefix_counters == (
        ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    )
    assert names.prefix_hit_rate_gauge is None
    assert names.preemptions == "vllm:num_preemptions_total"
    assert names.cache_config_info == "vllm:cache_config_info"
    assert names.engine_label is True


def test_v0_era_names() -> None:
    names = metric_names("0.6.6.post1")
    assert names.kv_usage == ("vllm:gpu_cache_usage_perc",)
    assert names.prefix_hit_rate_gauge == "vllm:gpu_prefix_cache_hit_rate"
    assert names.prefix_counters == ()
    assert names.engine_label is False


@pytest.mark.parametrize(
    ("version", "kv"),
    [
        ("0.9.1", ("vllm:gpu_cache_usage_perc",)),
        ("0.9.2", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
        ("0.11.0", ("vllm:kv_cache_usage_perc",)),
    ],
)
def test_kv_usage_switch(version: str, kv: tuple[str, ...]) -> None:
    assert metric_names(version).kv_usage == kv


def test_silent_v0_fallback_era_offers_both_generations() -> None:
    assert running_engines(load_version("0.10.2")) == {"v0", "v1"}
    assert running_engines(load_version("0.11.0")) == {"v1"}
    assert len(metric_names("0.10.2").prefix_counters) == 2


def test_gpu_prefix_counters_before_rename() -> None:
    names = metric_names("0.8.5.post1")
    assert names.prefix_counters == (
        ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
    )
    assert metric_names("0.8.0").engine_label is False


def test_metrics_gateway_delegates_to_the_catalog() -> None:
    assert gateway_names.metric_names is metric_names
    assert gateway_names.VllmMetricNames is type(metric_names("0.33.0"))
