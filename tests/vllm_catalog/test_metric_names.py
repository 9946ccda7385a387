"""Metric-name resolution per version, for the remediation layer."""

import pytest

from vllm_operator.catalog.vllm import possible_engines, resolve_metric_names


def test_newest_v1_names() -> None:
    names = resolve_metric_names("0.33.0")
    assert names.engine == "v1"
    assert names.kv_cache_usage == "vllm:kv_cache_usage_perc"
    assert names.prefix_cache_queries == "vllm:prefix_cache_queries_total"
    assert names.prefix_cache_hits == "vllm:prefix_cache_hits_total"
    assert names.prefix_cache_hit_rate is None
    assert names.num_preemptions == "vllm:num_preemptions_total"
    assert names.cache_config_info == "vllm:cache_config_info"
    assert names.time_to_first_token == "vllm:time_to_first_token_seconds"
    assert names.e2e_request_latency == "vllm:e2e_request_latency_seconds"
    assert names.engine_label == "engine"
    assert names.aggregate_by == ("model_name",)


def test_v0_era_names() -> None:
    names = resolve_metric_names("0.6.6.post1")
    assert names.engine == "v0"
    assert names.kv_cache_usage == "vllm:gpu_cache_usage_perc"
    assert names.prefix_cache_hit_rate == "vllm:gpu_prefix_cache_hit_rate"
    assert names.prefix_cache_queries is None
    assert names.engine_label is None


@pytest.mark.parametrize(
    ("version", "kv"),
    [
        ("0.9.1", "vllm:gpu_cache_usage_perc"),
        ("0.9.2", "vllm:kv_cache_usage_perc"),
        ("0.11.0", "vllm:kv_cache_usage_perc"),
    ],
)
def test_kv_usage_switch(version: str, kv: str) -> None:
    assert resolve_metric_names(version).kv_cache_usage == kv


def test_silent_v0_fallback_era_offers_both_engines() -> None:
    assert possible_engines("0.10.2") == ("v1", "v0")
    assert possible_engines("0.11.0") == ("v1",)
    v0 = resolve_metric_names("0.10.2", "v0")
    assert v0.kv_cache_usage == "vllm:gpu_cache_usage_perc"
    assert v0.prefix_cache_queries is None


def test_gpu_prefix_counters_before_rename() -> None:
    names = resolve_metric_names("0.8.5.post1")
    assert names.prefix_cache_queries == "vllm:gpu_prefix_cache_queries_total"
    assert names.engine_label == "engine"
    assert resolve_metric_names("0.8.0").engine_label is None
