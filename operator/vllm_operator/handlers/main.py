"""Wire the real gateways to the controller and start Kopf."""

import ctypes
import gc
import logging
import os
import threading
import time
from dataclasses import dataclass

import kopf
from prometheus_client import start_http_server

from vllm_operator.api.spec import GpuAllocation
from vllm_operator.handlers import kopf_gate, kopf_json, registrations
from vllm_operator.hub.resolver import HubArchitectureResolver, NoTokenSecrets, SecretReader
from vllm_operator.kube.cache import CachedGateway, WatchCache
from vllm_operator.kube.client import ApiGateway, connection_info, in_cluster, load_config
from vllm_operator.kube.informer import (
    INFORMED_KINDS,
    ApiKindSource,
    owned_watches,
    service_watches,
)
from vllm_operator.kube.inventory import ApiBoundPods, OutsidePodWatch
from vllm_operator.kube.relist import RELIST_SECONDS, PeriodicRelist, backstop_ttl
from vllm_operator.kube.webhook_tls import WebhookCertificates
from vllm_operator.metrics.operator_metrics import API_READS, REGISTRY
from vllm_operator.metrics.signals import (
    BYTES_TO_GIB,
    DCGM_FB_USED,
    PROBE_PROCESS_MEMORY,
    PrometheusSignals,
)
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.triggers import ServiceChanges
from vllm_operator.reconcile.writes import CountingGateway

log = logging.getLogger(__name__)

# How often Kopf's webhook server re-reads the certificate files (cert-manager or ours renewed),
# and how often the operator-managed CA is checked for renewal and its bundle re-patched.
CERT_FILE_CHECK_SECONDS = 10.0
CERT_RENEW_CHECK_SECONDS = 300.0

M_ARENA_MAX = -8
M_MMAP_THRESHOLD = -3
"""glibc's mallopt() parameters (malloc.h): the number of arenas, and the size from which an
allocation gets pages of its own (returned to the system when freed)."""
MALLOC_ARENAS = 1
MALLOC_MMAP_THRESHOLD = 128 * 1024

GC_GEN0_THRESHOLD = 10_000
"""Net container allocations between two young-generation collections (CPython's default: 700);
see `tune_gc`."""


def tune_malloc() -> bool:
    """One malloc arena and a fixed mmap threshold, set before the worker threads start; True when
    applied.

    Why: glibc gives each thread that meets contention an arena of its own (up to 8 per core),
    and memory freed in one is not reused by another. The operator's 16 handler threads each
    decode API responses and watch events, so after the creation burst of 1000 services ~190 MiB
    of the process sat in per-thread arenas (#21: 433 MiB resident; the peak RSS target is
    200 MiB). Python allocates under the GIL, so a single arena costs no contention worth having.
    glibc also raises its mmap threshold each time a large block is freed, after which large
    response buffers stay in the heap as fragments; a fixed threshold hands them back. An
    explicit MALLOC_ARENA_MAX in the environment wins (glibc has read it already); on a C library
    without mallopt nothing happens.
    """
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, MALLOC_ARENAS)) and bool(
        mallopt(M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)
    )


def tune_gc() -> tuple[int, int, int]:
    """Start-up's objects out of the cyclic collector's sight, and fewer young collections; the
    thresholds now in force.

    Why (#32): decoded API lists are trees of fresh dicts and lists with no reference cycles, so
    the cyclic collector finds nothing in them, yet with CPython's default threshold (700) it runs
    a young collection every few hundred containers of a decode, and the decoded page, alive until
    the cache has stored it, is promoted and triggers full collections, each of which walks every
    tracked object: the ~100,000 of the imported modules and the catalog as well. A restart of
    1000 services decodes ~6,000 listed objects at once; its GIL profile put 43 % of the samples
    in `jsontext.loads` (docs/controller-benchmark.md, "Fourteenth round"). Frozen objects
    (`gc.freeze`, meant for this: long-lived start-up state) are never walked again, and a young
    generation of 10,000 lets a page's objects be stored and dropped before most of them are
    counted. Reference counting still frees everything without a cycle at once; cyclic garbage
    waits at most for the next collection.
    """
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, middle, old)
    return gc.get_threshold()


@dataclass(frozen=True)
class WebhookOptions:
    """`run --webhook-*`: where the admission webhook listens and where its TLS comes from."""

    port: int
    address: str = "0.0.0.0"
    hostnames: tuple[str, ...] = ()
    certfile: str | None = None
    keyfile: str | None = None
    secret: tuple[str, str] | None = None
    configuration: str | None = None


def webhook_server(options: WebhookOptions, api_client: object) -> kopf.WebhookServer:
    """Kopf's HTTPS server with cert-manager's files, or with the operator-managed CA (renewed
    in a background thread, its bundle patched into the webhook configuration)."""
    host = options.hostnames[0] if options.hostnames else None
    if options.certfile and options.keyfile:
        return kopf.WebhookServer(
            addr=options.address,
            port=options.port,
            host=host,
            certfile=options.certfile,
            pkeyfile=options.keyfile,
            file_check_interval=CERT_FILE_CHECK_SECONDS,
        )
    certs = WebhookCertificates(
        api_client,
        hostnames=list(options.hostnames) or ["localhost"],
        secret=options.secret,
        configuration=options.configuration,
    )
    certs.ensure()  # before Kopf starts: the server reads the files once it starts
    threading.Thread(
        target=_renew_forever, args=(certs,), name="webhook-certificates", daemon=True
    ).start()
    return kopf.WebhookServer(
        addr=options.address,
        port=options.port,
        host=host,
        certfile=str(certs.certfile),
        pkeyfile=str(certs.keyfile),
        cafile=str(certs.bundlefile),
        file_check_interval=CERT_FILE_CHECK_SECONDS,
    )


def _renew_forever(certs: WebhookCertificates) -> None:
    """The daemon thread's loop: it ends with the process."""
    while True:
        time.sleep(CERT_RENEW_CHECK_SECONDS)
        try:
            certs.ensure()
        except Exception as exc:  # retried next round; the current certificate stays served
            log.warning("Failed to renew the webhook certificates error=%s", exc)


RELIST_SECONDS_ENV = "VLLM_OPERATOR_RELIST_SECONDS"
"""Overrides the watch cache's periodic list period (kube/relist.py RELIST_SECONDS), e.g. for a
benchmark whose steady window must hold one round (hack/bench_controller.py)."""


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
    workers: int = 8,
    webhook: WebhookOptions | None = None,
    gpu_allocation: str = "devicePlugin",
    canary: bool = True,
    cluster_pod_inventory: bool = True,
) -> None:
    """Block running the operator until it is stopped."""
    if tune_malloc():
        log.info("Tuned malloc arenas=%d mmap_threshold=%d", MALLOC_ARENAS, MALLOC_MMAP_THRESHOLD)
    thresholds = tune_gc()
    log.info(
        "Tuned garbage collector frozen=%d thresholds=%s",
        gc.get_freeze_count(),
        ",".join(map(str, thresholds)),
    )
    kopf_gate.install()  # one waiter on Kopf's start gate, not one per listed object (#32)
    kopf_json.install()  # Kopf's watch streams decoded with orjson (#32)
    api_client = load_config(kubeconfig)
    api = ApiGateway(api_client)
    secrets: SecretReader = api if read_token_secrets else NoTokenSecrets()
    # Reads come from the watch caches Kopf's handlers and the owned kinds' watches feed; what still reaches the API server
    # (before the initial sync, on a miss or after a conflict) is counted below the cache.
    # One complete list per cached kind every `relist_seconds` (kube/relist.py) re-confirms
    # what no event changed; the per-entry expiry is only the backstop for failing lists.
    relist_seconds = float(os.environ.get(RELIST_SECONDS_ENV) or RELIST_SECONDS)
    cache = WatchCache(namespaces, ttl=backstop_ttl(relist_seconds))
    relist = PeriodicRelist(
        api,
        cache,
        namespaces,
        period=relist_seconds,
        count=lambda what: API_READS.labels(what).inc(),
    )
    gateway = CachedGateway(CountingGateway(api, count_reads=True, count_writes=False), cache)
    if namespaces and cluster_pod_inventory:
        # The GPU pods of the other namespaces, for placement's and the canary's free GPUs
        # (kube/inventory.py); the workers' gate waits for its first list.
        OutsidePodWatch(ApiBoundPods(api_client), cache, namespaces).start()
    elif namespaces:
        log.info(
            "Counting GPU requests of the watched namespaces' pods only namespaces=%s",
            ",".join(namespaces),
        )
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
    server = None
    if webhook is not None:
        server = webhook_server(webhook, api_client)
        registrations.register_admission()
        log.info("Serving the admission webhook address=%s port=%s", webhook.address, webhook.port)
    controller = Controller(
        gateway,
        HubArchitectureResolver(secrets),
        node_cache_seconds=2.0,
        metrics=signals,
        settle_seconds=settle_seconds,
        workers=workers,
        gpu_allocation=GpuAllocation(gpu_allocation),
        canary_default=canary,
    )
    # Kopf's kinds (nodes, LeaderWorkerSets, DRA) are in the cache once Kopf's index gate opens,
    # objects or none (handlers/kopf_gate.py).
    kopf_gate.notify_when_indexed(cache.mark_synced)
    # The VLLMServices and the owned kinds (Deployments, Services, PDBs, pods) are listed and
    # watched here, not by Kopf (kube/informer.py, #32), on a client of their own: each open
    # watch holds a connection of its pool for minutes, which the reconciles' requests must not
    # wait for.
    service_changes = ServiceChanges()
    source = ApiKindSource(
        load_config(kubeconfig, pool_size=(len(INFORMED_KINDS) + 1) * max(1, len(namespaces)) + 2)
    )
    on_service_event, on_service_found = registrations.service_watch_callbacks(
        controller, service_changes
    )
    on_event, on_found = registrations.owned_watch_callbacks(controller)
    watches = service_watches(
        source, cache, namespaces, on_service_event, on_service_found
    ) + owned_watches(source, cache, namespaces, on_event, on_found)
    for watch in watches:
        watch.start()
    memo = registrations.operator_memo(
        controller,
        connection=connection_info(api_client),
        in_cluster=in_cluster(),
        cache=cache,
        webhook_server=server,
        relist=relist,
        service_changes=service_changes,
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
