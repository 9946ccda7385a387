"""Which Prometheus series to read for a pinned vLLM version (for the remediation layer).

Why per version: vLLM renamed its KV-usage gauge (gpu_cache_usage_perc -> kv_cache_usage_perc,
0.9.2), replaced the prefix-cache hit-rate gauge by query/hit counters, hid and then removed the
old names, and added an ``engine`` label in V1.  Everything here is derived from the generated
catalog (names as exposed on /metrics: counters carry ``_total``).
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict

from vllm_operator.catalog.vllm.loader import load_version
from vllm_operator.catalog.vllm.models import VersionCatalog

EngineGen = Literal["v0", "v1"]


class MetricNames(BaseModel):
    """The series names one vLLM version exports when engine ``engine`` runs.

    ``None`` means that version/engine exports no such series.  Prefix caching is either a pair
    of counters (hit rate = rate(hits) / rate(queries)) or, in old V0 releases, a gauge.
    Aggregate over ``aggregate_by``: V1 adds an ``engine`` label with one series per
    data-parallel engine.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    engine: EngineGen
    kv_cache_usage: str | None
    num_requests_running: str | None
    num_requests_waiting: str | None
    num_preemptions: str | None
    prefix_cache_queries: str | None
    prefix_cache_hits: str | None
    prefix_cache_hit_rate: str | None
    cache_config_info: str | None
    time_to_first_token: str | None
    e2e_request_latency: str | None
    inter_token_latency: str | None
    model_label: str = "model_name"
    engine_label: str | None
    aggregate_by: tuple[str, ...] = ("model_name",)


def default_engine(catalog: VersionCatalog) -> EngineGen:
    """The engine a release runs unless told otherwise (0.8-0.10 may still fall back to V0)."""
    return "v1" if catalog.engine in ("v1-default", "v1-only") else "v0"


def possible_engines(version: str) -> tuple[EngineGen, ...]:
    """Engines a service on ``version`` may end up running (default first).

    0.8-0.10 fall back to V0 silently for unsupported features, so the remediation layer should
    accept either set of names there.
    """
    engine = load_version(version).engine
    return {
        "v0-only": ("v0",),
        "v0-default": ("v0", "v1"),
        "v1-default": ("v1", "v0"),
        "v1-only": ("v1",),
    }[engine]  # type: ignore[return-value]


def resolve_metric_names(version: str, engine: EngineGen | None = None) -> MetricNames:
    """The series to query for ``version`` (and ``engine``, default: the release's default)."""
    catalog = load_version(version)
    eng: EngineGen = engine or default_engine(catalog)

    def first(*names: str) -> str | None:
        for name in names:
            spec = catalog.metrics.get(name)
            if spec is None:
                continue
            if (eng in spec.engines or "shared" in spec.engines) and eng not in spec.hidden_in:
                return name
        return None

    labels = catalog.metric_labels.get(eng, ())
    engine_label = "engine" if eng == "v1" and "engine" in labels else None
    return MetricNames(
        version=catalog.version,
        engine=eng,
        kv_cache_usage=first("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        num_requests_running=first("vllm:num_requests_running"),
        num_requests_waiting=first("vllm:num_requests_waiting"),
        num_preemptions=first("vllm:num_preemptions_total"),
        prefix_cache_queries=first(
            "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"
        ),
        prefix_cache_hits=first("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        prefix_cache_hit_rate=first("vllm:gpu_prefix_cache_hit_rate"),
        cache_config_info=first("vllm:cache_config_info"),
        time_to_first_token=first("vllm:time_to_first_token_seconds"),
        e2e_request_latency=first("vllm:e2e_request_latency_seconds"),
        inter_token_latency=first(
            "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"
        ),
        engine_label=engine_label,
    )
