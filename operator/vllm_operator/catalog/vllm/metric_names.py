"""Which vLLM metric names to query for a pinned version, resolved from the version catalog.

Why per version: vLLM renamed its memory metrics twice (vllm-versions.md §2). KV usage is
`vllm:gpu_cache_usage_perc` up to 0.10 and `vllm:kv_cache_usage_perc` from 0.9.2; prefix-cache
counters were `vllm:gpu_prefix_cache_{queries,hits}_total` (V1 0.7.3-0.10) and are
`vllm:prefix_cache_{queries,hits}_total` from 0.9.2; V0 only had the `vllm:gpu_prefix_cache_hit_rate`
gauge. Between 0.8 and 0.10 the V1 default silently falls back to V0, so both generations' names
are candidates there and the queries `or` them. The catalog (generated from each release's own
source) is the one home of these facts; `metrics.names` only re-exports this module.
"""

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from vllm_operator.catalog.vllm.loader import load_version
from vllm_operator.catalog.vllm.models import VersionCatalog

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_COUNTERS = (
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
)
PREFIX_GAUGE = "vllm:gpu_prefix_cache_hit_rate"
CACHE_CONFIG = "vllm:cache_config_info"


class VllmMetricNames(BaseModel):
    """The exposed names one pinned version serves (lists are `or`-ed, preferred first)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    kv_usage: tuple[str, ...]
    running: str | None
    waiting: str | None
    preemptions: str | None
    prefix_counters: tuple[tuple[str, str], ...]
    prefix_hit_rate_gauge: str | None
    cache_config_info: str | None
    engine_label: bool


def running_engines(catalog: VersionCatalog) -> frozenset[str]:
    """Engines a pod of this version may run: V1 defaults can fall back to V0 silently."""
    return {
        "v0-only": frozenset({"v0"}),
        "v0-default": frozenset({"v0"}),
        "v1-default": frozenset({"v0", "v1"}),
        "v1-only": frozenset({"v1"}),
    }.get(str(catalog.engine), frozenset({"v0", "v1"}))


def _visible(catalog: VersionCatalog, name: str, engines: Iterable[str]) -> bool:
    spec = catalog.metrics.get(name)
    if spec is None:
        return False
    return any(
        (e in spec.engines or "shared" in spec.engines) and e not in spec.hidden_in for e in engines
    )


def metric_names(version: str) -> VllmMetricNames:
    """Resolve the names to query for `version` (raises UnknownVersionError for other versions)."""
    catalog = load_version(version)
    engines = running_engines(catalog)

    def first(name: str) -> str | None:
        return name if _visible(catalog, name, engines) else None

    return VllmMetricNames(
        version=catalog.version,
        kv_usage=tuple(n for n in KV_USAGE if _visible(catalog, n, engines)),
        running=first(RUNNING),
        waiting=first(WAITING),
        preemptions=first(PREEMPTIONS),
        prefix_counters=tuple(
            (h, q)
            for h, q in PREFIX_COUNTERS
            if _visible(catalog, h, engines) and _visible(catalog, q, engines)
        ),
        prefix_hit_rate_gauge=first(PREFIX_GAUGE),
        cache_config_info=first(CACHE_CONFIG),
        engine_label="engine" in catalog.metric_labels.get("v1", ()),
    )
