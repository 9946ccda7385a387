"""Read the remediation signals of a service's vLLM pods from Prometheus (the only caller of
prometheus-api-client).

One evaluation issues a handful of PromQL queries scoped to the service's namespace and pods, with
metric names resolved for the pinned vLLM version (metrics.names). Series are aggregated per pod
across vLLM's `engine` label (one series per data-parallel engine from 0.8.5): counts and rates
with `sum by`, KV usage with `max by` (the fullest engine is the one that preempts).

Fail-safe by construction: Prometheus unreachable, an error response, or no fresh sample for any
pod gives `available=False`; a pod whose required series are missing or do not cover the window
gets `complete=False`. The policy takes no metric-driven action in either case.
"""

import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.reasons import Reason
from vllm_operator.catalog.vllm.errors import UnknownVersionError
from vllm_operator.metrics.names import VllmMetricNames, metric_names
from vllm_operator.remediation.observations import PodMetrics, Sample
from vllm_operator.remediation.signals import covers

log = logging.getLogger(__name__)

DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
"""dcgm-exporter's framebuffer-used gauge, in MiB, labelled with pod/namespace when the exporter
runs with Kubernetes pod mapping."""
MIB_TO_GIB = 1.0 / 1024.0
PROBE_PROCESS_MEMORY = "vllm_operator_probe_gpu_process_memory_used_bytes"
"""The NVML probe's per-process gauge (bytes; docs/probe.md). Its `pod`/`namespace` labels name the
vLLM pod; scrape it with honorLabels, or pass gpu_pod_label="exported_pod" and
gpu_namespace_label="exported_namespace"."""
BYTES_TO_GIB = 1.0 / 2**30


class PrometheusQueries(Protocol):
    """The two calls the gateway makes (PrometheusConnect satisfies it; tests may fake it)."""

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any: ...

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        params: dict[str, Any] | None = None,
    ) -> Any: ...


class ServiceMetrics(BaseModel):
    """What Prometheus said about one service's pods at one evaluation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    available: bool
    message: str = ""
    reason: Reason | None = Field(
        default=None,
        description="Why metrics are unavailable when the cause is known (UnsupportedVersion: no "
        "metric names for the version); None otherwise.",
    )
    pods: dict[str, PodMetrics] = Field(default_factory=dict)
    queries: tuple[str, ...] = Field(default=(), description="The PromQL issued, for debugging.")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _selector(namespace: str, pods: Iterable[str], ns_label: str, pod_label: str) -> str:
    alternatives = "|".join(re.escape(p) for p in sorted(pods))
    return f'{{{ns_label}="{_escape(namespace)}",{pod_label}=~"{_escape(alternatives)}"}}'


def _or(queries: Sequence[str]) -> str:
    return " or ".join(f"({q})" for q in queries)


def _step_seconds(window_s: int) -> int:
    """About 20 points per window, at least one scrape interval apart."""
    return max(5, min(60, window_s // 20))


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class PrometheusSignals:
    """Gateway from Prometheus to `remediation.PodMetrics`, per service evaluation.

    `gpu_memory_metric` names a per-pod GPU-memory gauge (dcgm-exporter's DCGM_FI_DEV_FB_USED, in
    MiB, by default; or PROBE_PROCESS_MEMORY with gpu_memory_to_gib=BYTES_TO_GIB) and
    `gpu_memory_to_gib` converts its unit; `gpu_pod_label`/`gpu_namespace_label` name the labels
    that carry the vLLM pod on that series when they differ from the vLLM series' labels. Set
    gpu_memory_metric=None when no such exporter runs: chronic-fragmentation detection is then off.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: PrometheusQueries | None = None,
        timeout_s: float = 5.0,
        pod_label: str = "pod",
        namespace_label: str = "namespace",
        gpu_memory_metric: str | None = DCGM_FB_USED,
        gpu_memory_to_gib: float = MIB_TO_GIB,
        gpu_pod_label: str | None = None,
        gpu_namespace_label: str | None = None,
        names: Callable[[str], VllmMetricNames] = metric_names,
    ) -> None:
        if client is None:
            if url is None:
                raise ValueError("PrometheusSignals needs a url or a client")
            client = _connect(url, timeout_s)
        self._client = client
        self._pod_label = pod_label
        self._ns_label = namespace_label
        self._gpu_metric = gpu_memory_metric
        self._gpu_to_gib = gpu_memory_to_gib
        self._gpu_pod_label = gpu_pod_label or pod_label
        self._gpu_ns_label = gpu_namespace_label or namespace_label
        self._names = names

    def observe(
        self,
        *,
        namespace: str,
        pods: Iterable[str],
        vllm_version: str,
        window_s: int,
        now: datetime,
    ) -> ServiceMetrics:
        """Query the window ending at `now` for `pods`; never raises for Prometheus trouble."""
        pod_names = sorted(set(pods))
        if not pod_names:
            return ServiceMetrics(available=True, message="no pods to observe")
        try:
            names = self._names(vllm_version)
        except UnknownVersionError as exc:
            # Without the version's catalog entry the metric names are unknown: say so instead of
            # failing the evaluation (no metric-driven action, crash handling still runs).
            log.warning("Skipped metrics version=%s error=%r", vllm_version, str(exc)[:200])
            return ServiceMetrics(
                available=False,
                reason=Reason.UNSUPPORTED_VERSION,
                message=f"vLLM {vllm_version} is not in the version catalog: its metric names "
                f"are unknown, no metric-driven action ({exc})",
            )
        sel = _selector(namespace, pod_names, self._ns_label, self._pod_label)
        by = f"{self._ns_label}, {self._pod_label}"
        queries: dict[str, str] = {}
        if names.kv_usage:
            queries["kv"] = _or([f"max by ({by}) ({n}{sel})" for n in names.kv_usage])
        if names.running:
            queries["running"] = f"sum by ({by}) ({names.running}{sel})"
        if names.waiting:
            queries["waiting"] = f"sum by ({by}) ({names.waiting}{sel})"
        if self._gpu_metric:
            gsel = _selector(namespace, pod_names, self._gpu_ns_label, self._gpu_pod_label)
            gby = f"{self._gpu_ns_label}, {self._gpu_pod_label}"
            queries["gpu"] = f"max by ({gby}) ({self._gpu_metric}{gsel}) * {self._gpu_to_gib!r}"
        instant: dict[str, str] = {}
        w = f"[{window_s}s]"
        if names.preemptions:
            instant["preemptions"] = f"sum by ({by}) (rate({names.preemptions}{sel}{w})) * 60"
        rates = [
            f"sum by ({by}) (rate({h}{sel}{w})) / sum by ({by}) (rate({q}{sel}{w}))"
            for h, q in names.prefix_counters
        ]
        if names.prefix_hit_rate_gauge:
            rates.append(f"max by ({by}) (avg_over_time({names.prefix_hit_rate_gauge}{sel}{w}))")
        if rates:
            instant["hit_rate"] = _or(rates)
        if names.cache_config_info:
            instant["cache_config"] = f"{names.cache_config_info}{sel}"

        start = now - timedelta(seconds=window_s)
        step = f"{_step_seconds(window_s)}s"
        ranges: dict[str, dict[str, list[Sample]]] = {}
        scalars: dict[str, dict[str, float | None]] = {}
        try:
            for key, query in queries.items():
                result = self._client.custom_query_range(
                    query, start_time=start, end_time=now, step=step
                )
                label = self._gpu_pod_label if key == "gpu" else self._pod_label
                ranges[key] = self._range_by_pod(result, label)
            capacity: dict[str, int] = {}
            for key, query in instant.items():
                result = self._client.custom_query(query, params={"time": now.timestamp()})
                if key == "cache_config":
                    capacity = self._capacity_by_pod(result)
                else:
                    scalars[key] = self._instant_by_pod(result)
        except Exception as exc:  # noqa: BLE001 - any client/transport failure means "no data"
            log.warning("Failed to query Prometheus error=%r", str(exc)[:300])
            return ServiceMetrics(
                available=False,
                message=f"Prometheus query failed: {type(exc).__name__}: {str(exc)[:200]}",
                queries=tuple([*queries.values(), *instant.values()]),
            )

        out: dict[str, PodMetrics] = {}
        seen_any = False
        for pod in pod_names:
            kv, invalid = _valid_fractions(ranges.get("kv", {}).get(pod, []), "KV-cache usage")
            running = ranges.get("running", {}).get(pod, [])
            waiting = ranges.get("waiting", {}).get(pod, [])
            gpu = ranges.get("gpu", {}).get(pod)
            if kv or running or waiting:
                seen_any = True
            complete = (
                all(covers(s, now, window_s) for s in (kv, running, waiting))
                and bool(names.kv_usage)
                and invalid is None
            )
            out[pod] = PodMetrics(
                complete=complete,
                kv_cache_usage=kv,
                requests_running=running,
                requests_waiting=waiting,
                preemptions_per_minute=scalars.get("preemptions", {}).get(pod),
                prefix_cache_hit_rate=_hit_rate(scalars.get("hit_rate", {}).get(pod)),
                kv_cache_tokens=capacity.get(pod),
                gpu_memory_used_gib=gpu if gpu else None,
                invalid=invalid,
            )
        all_queries = tuple([*queries.values(), *instant.values()])
        if not seen_any:
            return ServiceMetrics(
                available=False,
                message=f"no vLLM samples in the last {window_s}s for pods {', '.join(pod_names)} "
                f"(vLLM {names.version}: {', '.join(names.kv_usage) or 'no KV metric'})",
                pods=out,
                queries=all_queries,
            )
        partial = [p for p, m in out.items() if not m.complete and m.invalid is None]
        rejected = [f"{p}: {m.invalid}" for p, m in out.items() if m.invalid is not None]
        notes = []
        if rejected:
            notes.append("invalid data, " + "; ".join(rejected))
        if partial:
            notes.append(f"series missing or stale for {', '.join(partial)}")
        message = "; ".join(notes) if notes else f"vLLM {names.version} metrics fresh"
        return ServiceMetrics(available=True, message=message, pods=out, queries=all_queries)

    def _range_by_pod(self, result: Any, label: str) -> dict[str, list[Sample]]:
        series: dict[str, list[Sample]] = {}
        for item in result or []:
            pod = item.get("metric", {}).get(label)
            if pod is None:
                continue
            for ts, value in item.get("values", []):
                number = _finite(value)
                if number is not None:
                    series.setdefault(pod, []).append(
                        Sample(t=datetime.fromtimestamp(float(ts), tz=UTC), v=number)
                    )
        for samples in series.values():
            samples.sort(key=lambda s: s.t)
        return series

    def _capacity_by_pod(self, result: Any) -> dict[str, int]:
        """num_gpu_blocks x block_size per pod (labels are strings).

        The largest series wins: V1's front end already reports the sum over its DP engines
        (v1/engine/utils.py@v0.11.0), so adding per-engine series could double count.
        """
        tokens: dict[str, int] = {}
        for item in result or []:
            labels = item.get("metric", {})
            pod = labels.get(self._pod_label)
            blocks, block = _int_label(labels, "num_gpu_blocks"), _int_label(labels, "block_size")
            if pod is not None and blocks is not None and block is not None:
                tokens[pod] = max(tokens.get(pod, 0), blocks * block)
        return tokens

    def _instant_by_pod(self, result: Any) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        for item in result or []:
            pod = item.get("metric", {}).get(self._pod_label)
            if pod is not None and pod not in values:
                values[pod] = _finite(item.get("value", [None, None])[1])
        return values


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError):
        return None  # absent, or "None" before profiling finished


FRACTION_TOLERANCE = 1e-6
"""Rounding slack on values that are fractions (KV usage, hit rates)."""


def _valid_fractions(samples: list[Sample], what: str) -> tuple[list[Sample], str | None]:
    """The samples within 0-1, and why others were rejected (None: all valid).

    A usage below 0 or above 1 is impossible: the exporter or the engine is broken, so the whole
    series is distrusted (the pod counts as incomplete), never clamped into a plausible value.
    """
    bad = [s.v for s in samples if not -FRACTION_TOLERANCE <= s.v <= 1 + FRACTION_TOLERANCE]
    if not bad:
        return [s.model_copy(update={"v": min(1.0, max(0.0, s.v))}) for s in samples], None
    worst = max(bad, key=lambda v: abs(v - 0.5))
    return [], f"{what} {worst:g} outside 0-1 ({len(bad)} of {len(samples)} samples)"


def _hit_rate(value: float | None) -> float | None:
    """A prefix-cache hit rate, or None: V0's gauge reports -1 when prefix caching is off, and a
    value outside 0-1 is not a rate (no PrefixCacheWaste step is taken on it)."""
    if value is None or not -FRACTION_TOLERANCE <= value <= 1 + FRACTION_TOLERANCE:
        return None
    return min(1.0, max(0.0, value))


def _connect(url: str, timeout_s: float) -> PrometheusQueries:
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    client: PrometheusQueries = PrometheusConnect(
        url=url, disable_ssl=True, timeout=timeout_s, retry=Retry(total=0)
    )
    return client
