"""Wire the real gateways to the controller and start Kopf."""

import logging

import kopf
from prometheus_client import start_http_server

from vllm_operator.handlers import registrations
from vllm_operator.hub.resolver import HubArchitectureResolver, NoTokenSecrets, SecretReader
from vllm_operator.kube.cache import CachedGateway, WatchCache
from vllm_operator.kube.client import ApiGateway, connection_info, in_cluster, load_config
from vllm_operator.metrics.operator_metrics import REGISTRY
from vllm_operator.metrics.signals import (
    BYTES_TO_GIB,
    DCGM_FB_USED,
    PROBE_PROCESS_MEMORY,
    PrometheusSignals,
)
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.writes import CountingGateway

log = logging.getLogger(__name__)


def run_operator(
    *,
    namespaces: list[str],
    kubeconfig: str | None,
    metrics_port: int,
    health_address: str,
    prometheus_url: str | None = None,
    gpu_memory_metric: str = "dcgm",
    read_token_secrets: bool = True,
    settle_seconds: float = 0.0,
) -> None:
    """Block running the operator until it is stopped."""
    api_client = load_config(kubeconfig)
    api = ApiGateway(api_client)
    secrets: SecretReader = api if read_token_secrets else NoTokenSecrets()
    # Reads come from the watch caches Kopf's handlers feed; what still reaches the API server
    # (before the initial sync, on a miss or after a conflict) is counted below the cache.
    cache = WatchCache(namespaces)
    gateway = CachedGateway(CountingGateway(api, count_reads=True, count_writes=False), cache)
    signals = None
    if prometheus_url:
        if gpu_memory_metric == "probe":
            signals = PrometheusSignals(
                prometheus_url,
                gpu_memory_metric=PROBE_PROCESS_MEMORY,
                gpu_memory_to_gib=BYTES_TO_GIB,
                gpu_pod_label="exported_pod",
                gpu_namespace_label="exported_namespace",
            )
        else:
            metric = DCGM_FB_USED if gpu_memory_metric == "dcgm" else None
            signals = PrometheusSignals(prometheus_url, gpu_memory_metric=metric)
        log.info("Reading signals from Prometheus url=%s", prometheus_url)
    memo = registrations.operator_memo(
        Controller(
            gateway,
            HubArchitectureResolver(secrets),
            node_cache_seconds=2.0,
            metrics=signals,
            settle_seconds=settle_seconds,
        ),
        connection=connection_info(api_client),
        in_cluster=in_cluster(),
        cache=cache,
    )
    start_http_server(metrics_port, registry=REGISTRY)
    log.info("Started metrics endpoint port=%s", metrics_port)
    kopf.run(
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=f"http://{health_address}/healthz",
        memo=memo,
    )
