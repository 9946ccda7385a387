"""Read the remediation signals of a service's vLLM pods from Prometheus (the only caller of
prometheus-api-client).

One evaluation issues a handful of PromQL queries scoped to the service's namespace and pods, with
metric names resolved for the pinned vLLM version (metrics.names). `observe_many` answers every
service due in one scheduler tick with the same handful of queries (one per signal, #21): the
selector names all their namespaces and pods, and the results, aggregated by namespace and pod,
are split back per service; a thousand services cost a thousand times fewer queries. Series are aggregated per pod
across vLLM's `engine` label (one series per data-parallel engine from 0.8.5): counts and rates
with `sum by`, KV usage with `max by` (the fullest engine is the one that preempts).

Fail-safe by construction: Prometheus unreachable, an error response, or no fresh sample for any
pod gives `available=False`; a pod whose required series are missing or do not cover the window
gets `complete=False`. The policy takes no metric-driven action in either case.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


class MetricsRequest(BaseModel):
    """One service's pods to observe, as `observe_many` takes them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str
    pods: tuple[str, ...]
    vllm_version: str
    window_s: int


MAX_SELECTOR_CHARS = 256 * 1024
"""Most characters of pod and namespace alternatives in one batched query. The gateway posts its
queries (no URL length limit), and Prometheus refuses form bodies over 10 MiB (Go's ParseForm)
and GET request lines over 1 MiB (net/http's header limit): 256 KiB of alternatives keeps each
query, URL-encoded and repeated in the `or` of two KV names, below either. A tick with more pods
than that splits into a few queries per signal."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _alternatives(values: Iterable[str]) -> str:
    return _escape("|".join(re.escape(v) for v in sorted(set(values))))


def _selector(namespaces: Iterable[str], pods: Iterable[str], ns_label: str, pod_label: str) -> str:
    """One namespace matched exactly (the unbatched query), several by alternatives; results are
    split by the exact (namespace, pod) pair, so a pod name shared across namespaces of the batch
    is never attributed to the wrong service."""
    spaces = sorted(set(namespaces))
    ns = (
        f'{ns_label}="{_escape(spaces[0])}"'
        if len(spaces) == 1
        else f'{ns_label}=~"{_alternatives(spaces)}"'
    )
    return f'{{{ns},{pod_label}=~"{_alternatives(pods)}"}}'


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
        request = MetricsRequest(
            namespace=namespace,
            pods=tuple(pods),
            vllm_version=vllm_version,
            window_s=window_s,
        )
        return self.observe_many([request], now)[0]

    def observe_many(
        self, requests: Sequence[MetricsRequest], now: datetime
    ) -> list[ServiceMetrics]:
        """Every request's metrics for the window ending at `now`, in the requests' order, with
        one query per signal for all requests that share metric names and window (more only past
        MAX_SELECTOR_CHARS). Never raises for Prometheus trouble: a failed query makes every
        service of its batch unavailable, as it would have one by one."""
        out: list[ServiceMetrics | None] = [None] * len(requests)
        groups: dict[tuple[str, int], list[int]] = {}
        names_of: dict[int, VllmMetricNames] = {}
        for i, request in enumerate(requests):
            if not request.pods:
                out[i] = ServiceMetrics(available=True, message="no pods to observe")
                continue
            try:
                names = self._names(request.vllm_version)
            except UnknownVersionError as exc:
                # Without the version's catalog entry the metric names are unknown: say so instead
                # of failing the evaluation (no metric-driven action, crash handling still runs).
                log.warning(
                    "Skipped metrics version=%s error=%r", request.vllm_version, str(exc)[:200]
                )
                out[i] = ServiceMetrics(
                    available=False,
                    reason=Reason.UNSUPPORTED_VERSION,
                    message=f"vLLM {request.vllm_version} is not in the version catalog: its "
                    f"metric names are unknown, no metric-driven action ({exc})",
                )
                continue
            names_of[i] = names
            # Versions that export the same names share queries.
            shared = names.model_dump_json(exclude={"version"})
            groups.setdefault((shared, request.window_s), []).append(i)
        for (_, window_s), members in groups.items():
            for chunk in _chunks(members, requests):
                batch = [requests[i] for i in chunk]
                fetched = self._fetch(names_of[chunk[0]], window_s, batch, now)
                for i in chunk:
                    out[i] = _service_metrics(names_of[i], requests[i], fetched, now)
        return [m if m is not None else ServiceMetrics(available=False) for m in out]

    def _fetch(
        self,
        names: VllmMetricNames,
        window_s: int,
        batch: Sequence[MetricsRequest],
        now: datetime,
    ) -> _Fetched:
        """Issue each signal's query once for every pod of `batch`."""
        namespaces = [r.namespace for r in batch]
        pods = [p for r in batch for p in r.pods]
        sel = _selector(namespaces, pods, self._ns_label, self._pod_label)
        by = f"{self._ns_label}, {self._pod_label}"
        queries: dict[str, str] = {}
        if names.kv_usage:
            queries["kv"] = _or([f"max by ({by}) ({n}{sel})" for n in names.kv_usage])
        if names.running:
            queries["running"] = f"sum by ({by}) ({names.running}{sel})"
        if names.waiting:
            queries["waiting"] = f"sum by ({by}) ({names.waiting}{sel})"
        if self._gpu_metric:
            gsel = _selector(namespaces, pods, self._gpu_ns_label, self._gpu_pod_label)
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

        fetched = _Fetched(window_s=window_s, queries=(*queries.values(), *instant.values()))
        start = now - timedelta(seconds=window_s)
        step = f"{_step_seconds(window_s)}s"
        try:
            for key, query in queries.items():
                result = self._client.custom_query_range(
                    query, start_time=start, end_time=now, step=step
                )
                if key == "gpu":
                    fetched.ranges[key] = _range_by_pod(
                        result, self._gpu_ns_label, self._gpu_pod_label
                    )
                else:
                    fetched.ranges[key] = _range_by_pod(result, self._ns_label, self._pod_label)
            for key, query in instant.items():
                result = self._client.custom_query(query, params={"time": now.timestamp()})
                if key == "cache_config":
                    fetched.capacity = _capacity_by_pod(result, self._ns_label, self._pod_label)
                else:
                    fetched.scalars[key] = _instant_by_pod(result, self._ns_label, self._pod_label)
        except Exception as exc:  # noqa: BLE001 - any client/transport failure means "no data"
            log.warning(
                "Failed to query Prometheus services=%d error=%r", len(batch), str(exc)[:300]
            )
            fetched.error = f"Prometheus query failed: {type(exc).__name__}: {str(exc)[:200]}"
        return fetched


PodKey = tuple[str, str]
"""(namespace, pod): how batched results are split back per service."""


@dataclass
class _Fetched:
    """One batch's answers, by signal and (namespace, pod)."""

    window_s: int
    queries: tuple[str, ...]
    ranges: dict[str, dict[PodKey, list[Sample]]] = field(default_factory=dict)
    scalars: dict[str, dict[PodKey, float | None]] = field(default_factory=dict)
    capacity: dict[PodKey, int] = field(default_factory=dict)
    error: str | None = None


def _chunks(members: list[int], requests: Sequence[MetricsRequest]) -> list[list[int]]:
    """Requests in groups whose alternatives stay within MAX_SELECTOR_CHARS (a service is never
    split: its pods are answered by one query per signal)."""
    chunks: list[list[int]] = []
    size = 0
    for i in members:
        request = requests[i]
        cost = len(request.namespace) + sum(2 * len(p) + 1 for p in request.pods)
        if chunks and size + cost <= MAX_SELECTOR_CHARS:
            chunks[-1].append(i)
            size += cost
        else:
            chunks.append([i])
            size = cost
    return chunks


def _service_metrics(
    names: VllmMetricNames, request: MetricsRequest, fetched: _Fetched, now: datetime
) -> ServiceMetrics:
    """One service's share of a batch's answers."""
    if fetched.error is not None:
        return ServiceMetrics(available=False, message=fetched.error, queries=fetched.queries)
    window_s = fetched.window_s
    pod_names = sorted(set(request.pods))
    out: dict[str, PodMetrics] = {}
    seen_any = False
    for pod in pod_names:
        key = (request.namespace, pod)
        kv, invalid = _valid_fractions(fetched.ranges.get("kv", {}).get(key, []), "KV-cache usage")
        running = fetched.ranges.get("running", {}).get(key, [])
        waiting = fetched.ranges.get("waiting", {}).get(key, [])
        gpu = fetched.ranges.get("gpu", {}).get(key)
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
            preemptions_per_minute=fetched.scalars.get("preemptions", {}).get(key),
            prefix_cache_hit_rate=_hit_rate(fetched.scalars.get("hit_rate", {}).get(key)),
            kv_cache_tokens=fetched.capacity.get(key),
            gpu_memory_used_gib=gpu if gpu else None,
            invalid=invalid,
        )
    if not seen_any:
        return ServiceMetrics(
            available=False,
            message=f"no vLLM samples in the last {window_s}s for pods {', '.join(pod_names)} "
            f"(vLLM {names.version}: {', '.join(names.kv_usage) or 'no KV metric'})",
            pods=out,
            queries=fetched.queries,
        )
    partial = [p for p, m in out.items() if not m.complete and m.invalid is None]
    rejected = [f"{p}: {m.invalid}" for p, m in out.items() if m.invalid is not None]
    notes = []
    if rejected:
        notes.append("invalid data, " + "; ".join(rejected))
    if partial:
        notes.append(f"series missing or stale for {', '.join(partial)}")
    message = "; ".join(notes) if notes else f"vLLM {names.version} metrics fresh"
    return ServiceMetrics(available=True, message=message, pods=out, queries=fetched.queries)


def _pod_key(item: Any, ns_label: str, pod_label: str) -> PodKey | None:
    labels = item.get("metric", {})
    namespace, pod = labels.get(ns_label), labels.get(pod_label)
    if namespace is None or pod is None:
        return None
    return (namespace, pod)


def _range_by_pod(result: Any, ns_label: str, pod_label: str) -> dict[PodKey, list[Sample]]:
    series: dict[PodKey, list[Sample]] = {}
    for item in result or []:
        key = _pod_key(item, ns_label, pod_label)
        if key is None:
            continue
        for ts, value in item.get("values", []):
            number = _finite(value)
            if number is not None:
                series.setdefault(key, []).append(
                    Sample(t=datetime.fromtimestamp(float(ts), tz=UTC), v=number)
                )
    for samples in series.values():
        samples.sort(key=lambda s: s.t)
    return series


def _capacity_by_pod(result: Any, ns_label: str, pod_label: str) -> dict[PodKey, int]:
    """num_gpu_blocks x block_size per pod (labels are strings).

    The largest series wins: V1's front end already reports the sum over its DP engines
    (v1/engine/utils.py@v0.11.0), so adding per-engine series could double count.
    """
    tokens: dict[PodKey, int] = {}
    for item in result or []:
        labels = item.get("metric", {})
        key = _pod_key(item, ns_label, pod_label)
        blocks, block = _int_label(labels, "num_gpu_blocks"), _int_label(labels, "block_size")
        if key is not None and blocks is not None and block is not None:
            tokens[key] = max(tokens.get(key, 0), blocks * block)
    return tokens


def _instant_by_pod(result: Any, ns_label: str, pod_label: str) -> dict[PodKey, float | None]:
    values: dict[PodKey, float | None] = {}
    for item in result or []:
        key = _pod_key(item, ns_label, pod_label)
        if key is not None and key not in values:
            values[key] = _finite(item.get("value", [None, None])[1])
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

    # POST: a batched query names every pod due in a tick, longer than proxies allow in a URL.
    client: PrometheusQueries = PrometheusConnect(
        url=url, disable_ssl=True, timeout=timeout_s, retry=Retry(total=0), method="POST"
    )
    return client
