"""`vllm-operator run`: start the controller (Kopf) with our settings, liveness and metrics."""

import logging
import sys

import click


@click.command()
@click.option("--namespace", "-n", "namespaces", multiple=True, help="Watch only these namespaces.")
@click.option("--all-namespaces", "-A", is_flag=True, help="Watch every namespace (the default).")
@click.option(
    "--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig outside a cluster."
)
@click.option("--metrics-port", default=8080, show_default=True, help="Prometheus /metrics port.")
@click.option(
    "--health-address",
    default="0.0.0.0:8081",
    show_default=True,
    help="host:port of the liveness endpoint (/healthz).",
)
@click.option(
    "--prometheus-url",
    envvar="VLLM_OPERATOR_PROMETHEUS_URL",
    default=None,
    help="Prometheus scraping the vLLM pods; without it remediation acts on pod status only.",
)
@click.option(
    "--gpu-memory-metric",
    type=click.Choice(["dcgm", "probe", "none"]),
    default="dcgm",
    show_default=True,
    help="Per-pod GPU memory for creep detection: dcgm-exporter, the NVML probe, or none.",
)
@click.option(
    "--read-token-secrets/--no-read-token-secrets",
    default=True,
    show_default=True,
    help="Read the Hub token Secret a VLLMService names (only to fetch a gated model's "
    "config.json); off: the operator needs no Secret access.",
)
@click.option(
    "--settle-seconds",
    type=click.FloatRange(0, 300),
    default=3.0,
    show_default=True,
    help="Roll a pool's pods for a new plan only after the spec has kept its generation this "
    "long, so a burst of edits restarts the pods once (0: roll every intermediate spec).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=2,  # reconcile.queue.DEFAULT_WORKERS (not imported: it would slow every command)
    show_default=True,
    help="Services reconciled at the same time (threads taking keys from the one work queue; "
    "a service is never reconciled by two at once). More help only where each API request "
    "waits long (a distant API server): every extra thread is one more request in flight "
    "against the API server, and the GIL runs one thread's Python at a time.",
)
@click.option(
    "--webhook-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve the admission fit check (HTTPS) on this port; off without it.",
)
@click.option(
    "--webhook-address",
    default="0.0.0.0",
    show_default=True,
    help="Address the webhook listens on.",
)
@click.option(
    "--webhook-host",
    "webhook_hosts",
    multiple=True,
    help="Name the API server calls the webhook by (e.g. <service>.<namespace>.svc, 127.0.0.1); "
    "repeatable; the operator-managed certificate covers each.",
)
@click.option(
    "--webhook-cert", default=None, help="Serving certificate file (e.g. cert-manager's)."
)
@click.option("--webhook-key", default=None, help="Private key file of --webhook-cert.")
@click.option(
    "--webhook-secret",
    default=None,
    metavar="NAMESPACE/NAME",
    help="Without --webhook-cert: the Secret keeping the operator-managed CA (created, renewed).",
)
@click.option(
    "--webhook-configuration",
    default=None,
    help="Without --webhook-cert: the ValidatingWebhookConfiguration whose caBundle the "
    "operator keeps in step with its CA.",
)
@click.option(
    "--gpu-allocation",
    type=click.Choice(["devicePlugin", "dra"]),
    default="devicePlugin",
    show_default=True,
    envvar="VLLM_OPERATOR_GPU_ALLOCATION",
    help="How pods get GPUs when a spec leaves spec.placement.gpuAllocation out: the device "
    "plugin's nvidia.com/gpu, or DRA ResourceClaimTemplates (NVIDIA DRA driver).",
)
@click.option(
    "--canary/--no-canary",
    default=True,
    show_default=True,
    envvar="VLLM_OPERATOR_CANARY",
    help="Whether a running pool's new plan is tried on one canary pod first when a spec leaves "
    "spec.rollout.canary.enabled out (a spec that sets it keeps its choice).",
)
@click.option(
    "--cluster-pod-inventory/--no-cluster-pod-inventory",
    default=True,
    show_default=True,
    help="With --namespace: watch the GPU pods bound in every other namespace too (cluster-wide "
    "list/watch of pods), so placement and canary surge room count what the scheduler counts; "
    "off: only the watched namespaces' pods (no cluster-wide pod reads).",
)
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
def run(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    kubeconfig: str | None,
    metrics_port: int,
    health_address: str,
    prometheus_url: str | None,
    gpu_memory_metric: str,
    read_token_secrets: bool,
    settle_seconds: float,
    workers: int,
    webhook_port: int | None,
    webhook_address: str,
    webhook_hosts: tuple[str, ...],
    webhook_cert: str | None,
    webhook_key: str | None,
    webhook_secret: str | None,
    webhook_configuration: str | None,
    gpu_allocation: str,
    canary: bool,
    cluster_pod_inventory: bool,
    verbose: bool,
) -> None:
    """Run the operator: reconcile VLLMServices into per-GPU-type vLLM Deployments."""
    if namespaces and all_namespaces:
        raise click.UsageError("--namespace and --all-namespaces are mutually exclusive")
    if bool(webhook_cert) != bool(webhook_key):
        raise click.UsageError("--webhook-cert and --webhook-key go together")
    secret: tuple[str, str] | None = None
    if webhook_secret:
        namespace, _, name = webhook_secret.partition("/")
        if not namespace or not name:
            raise click.UsageError("--webhook-secret is NAMESPACE/NAME")
        secret = (namespace, name)
    # Kopf logs every handler success at INFO; keep the operator's own lines readable.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # One access-log line per admission request (aiohttp, under Kopf's webhook server) would
    # drown the operator's own lines; the admission metrics count them instead.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # Imported here: kopf and the kubernetes client are only needed by this command.
    from vllm_operator.handlers.main import WebhookOptions, run_operator

    webhook = None
    if webhook_port is not None:
        webhook = WebhookOptions(
            port=webhook_port,
            address=webhook_address,
            hostnames=webhook_hosts,
            certfile=webhook_cert,
            keyfile=webhook_key,
            secret=secret,
            configuration=webhook_configuration,
        )

    run_operator(
        namespaces=list(namespaces),
        kubeconfig=kubeconfig,
        metrics_port=metrics_port,
        health_address=health_address,
        prometheus_url=prometheus_url,
        gpu_memory_metric=gpu_memory_metric,
        read_token_secrets=read_token_secrets,
        settle_seconds=settle_seconds,
        workers=workers,
        webhook=webhook,
        gpu_allocation=gpu_allocation,
        canary=canary,
        cluster_pod_inventory=cluster_pod_inventory,
    )
