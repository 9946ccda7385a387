"""The /metrics body of one simulated pod, in the pinned vLLM version's exposition.

The metric list comes from the version catalog (catalog/vllm/data/<version>.json, generated from
that release's own source): every `vllm:*` collector of the engine the version runs is exposed,
with vLLM's labels (`model_name`, plus `engine` from V1 0.8.5) and prometheus_client's own
formatting - the library vLLM itself uses - so counters get `_total`, histograms
`_bucket/_sum/_count`, and `# HELP/# TYPE` lines are exact. Metrics the scenario does not drive
are exposed at zero. Optionally dcgm-exporter's DCGM_FI_DEV_FB_USED (MiB) rides along for the
GPU-memory signal.
"""

import math
from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from e2e.simvllm.scenario import Scenario, State
from vllm_operator.catalog.vllm.loader import load_version
from vllm_operator.metrics.names import running_engines

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SHARES = (0.02, 0.05, 0.1, 0.2, 0.2, 0.15, 0.1, 0.08, 0.05, 0.03, 0.015, 0.005)
"""Fraction of requests per bucket (cumulated into `le` buckets), a plausible latency shape."""

EXTRA_LABELS: dict[str, tuple[str, ...]] = {"vllm:request_success_total": ("finished_reason",)}
FINISHED_REASONS = ("stop", "length", "abort")
SKIPPED_PREFIXES = (
    "vllm:lora_",
    "vllm:spec_decode",
    "vllm:hisparse",
    "vllm:num_requests_waiting_by_reason",
    "vllm:num_requests_kv_fetch",
    "vllm:prompt_tokens_cached_by_source",
    "vllm:num_requests_swapped",
    "vllm:cpu_",
)
"""Collectors whose extra labels the catalog does not record, or that only exist behind options."""


def _driven(state: State) -> dict[str, float]:
    hits, queries = math.floor(state.prefix_hits_total), math.floor(state.prefix_queries_total)
    values = {
        "vllm:kv_cache_usage_perc": state.kv_cache_usage,
        "vllm:gpu_cache_usage_perc": state.kv_cache_usage,
        "vllm:num_requests_running": state.running,
        "vllm:num_requests_waiting": state.waiting,
        "vllm:num_preemptions_total": math.floor(state.preemptions_total),
        "vllm:prefix_cache_queries_total": queries,
        "vllm:prefix_cache_hits_total": hits,
        "vllm:gpu_prefix_cache_queries_total": queries,
        "vllm:gpu_prefix_cache_hits_total": hits,
        "vllm:prompt_tokens_total": math.floor(state.prompt_tokens_total),
        "vllm:generation_tokens_total": math.floor(state.generation_tokens_total),
        "vllm:request_success_total": math.floor(state.requests_total),
        # V0's gauge: the scenario's value, else the cumulative hit ratio so far.
        "vllm:gpu_prefix_cache_hit_rate": state.prefix_hit_rate_gauge
        if state.prefix_hit_rate_gauge is not None
        else (hits / queries if queries else 0.0),
    }
    return values


class VllmCollector(Collector):
    """prometheus_client collector computing every value from the scenario at scrape time."""

    def __init__(
        self, scenario: Scenario, version: str, clock: Callable[[], float], *, dcgm: bool = True
    ) -> None:
        catalog = load_version(version)
        engines = running_engines(catalog)
        # A V1-default release serves V1 names unless it fell back; simulate the default engine.
        engine = "v1" if "v1" in engines and str(catalog.engine) != "v0-default" else "v0"
        self.scenario = scenario
        self.clock = clock
        self.dcgm = dcgm
        self.engine_label = engine == "v1" and "engine" in catalog.metric_labels.get("v1", ())
        self.metrics = {
            name: spec.type
            for name, spec in sorted(catalog.metrics.items())
            if (engine in spec.engines or "shared" in spec.engines)
            and engine not in spec.hidden_in
            and not name.startswith(SKIPPED_PREFIXES)
        }

    def _label_sets(self) -> list[tuple[list[str], list[str], float]]:
        """(label names, values, share) per engine: counts split evenly across engines."""
        n = self.scenario.engines if self.engine_label else 1
        names = ["model_name", "engine"] if self.engine_label else ["model_name"]
        return [
            (
                names,
                [self.scenario.model_name, str(i)]
                if self.engine_label
                else [self.scenario.model_name],
                1.0 / n,
            )
            for i in range(n)
        ]

    def collect(self) -> Iterator[Metric]:
        state = self.scenario.state_at(self.clock())
        driven = _driven(state)
        label_sets = self._label_sets()
        for name, kind in self.metrics.items():
            help_text = f"Simulated {name}."
            if name == "vllm:cache_config_info":
                family = GaugeMetricFamily(
                    name,
                    "Information of the LLMEngine CacheConfig",
                    labels=sorted(self.scenario.cache_config)
                    + (["engine"] if self.engine_label else []),
                )
                for i, _ in enumerate(label_sets):
                    values = [
                        self.scenario.cache_config[k] for k in sorted(self.scenario.cache_config)
                    ]
                    family.add_metric(values + ([str(i)] if self.engine_label else []), 1.0)
                yield family
            elif kind == "counter":
                base = name.removesuffix("_total")
                extra = EXTRA_LABELS.get(name, ())
                counter = CounterMetricFamily(base, help_text, labels=[*label_sets[0][0], *extra])
                for _, values, share in label_sets:
                    total = driven.get(name, 0.0) * share
                    if extra:
                        counter.add_metric([*values, FINISHED_REASONS[0]], total)
                        for reason in FINISHED_REASONS[1:]:
                            counter.add_metric([*values, reason], 0.0)
                    else:
                        counter.add_metric(values, total)
                yield counter
            elif kind == "histogram":
                hist = HistogramMetricFamily(name, help_text, labels=label_sets[0][0])
                for _, values, share in label_sets:
                    timed = "latency" in name or "time" in name
                    count = math.floor(state.requests_total * share) if timed else 0
                    fraction, buckets = 0.0, []
                    for bound, frac in zip(BUCKETS, SHARES, strict=True):
                        fraction += frac
                        buckets.append(
                            (repr(bound), float(min(count, math.floor(count * fraction))))
                        )
                    buckets.append(("+Inf", float(count)))
                    hist.add_metric(values, buckets, sum_value=count * 0.8)
                yield hist
            elif kind in ("gauge", "info"):
                gauge = GaugeMetricFamily(name, help_text, labels=label_sets[0][0])
                for _, values, share in label_sets:
                    value = driven.get(name, 0.0)
                    if name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
                        value *= share
                    gauge.add_metric(values, value)
                yield gauge
        if self.dcgm and state.gpu_memory_gib is not None:
            fb = GaugeMetricFamily(
                "DCGM_FI_DEV_FB_USED",
                "Framebuffer memory used (in MiB).",
                labels=["gpu", "UUID", "modelName", "Hostname"],
            )
            fb.add_metric(
                ["0", "GPU-00000000-0000-0000-0000-000000000000", "NVIDIA L4", "sim"],
                round(state.gpu_memory_gib * 1024.0),
            )
            yield fb
