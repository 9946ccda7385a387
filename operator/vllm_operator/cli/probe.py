"""`vllm-operator probe`: measure this node's GPU memory with NVML and publish it (DaemonSet).

The Helm chart runs it as a DaemonSet on GPU nodes; `--once --no-publish` prints the budget JSON
for debugging. Exit codes: 2 for usage errors, 1 when `--once` could not read NVML or publish.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from vllm_operator.nvml.fake import FakeState


def _fake_state(path: Path) -> FakeState:
    """The --fake-nvml fixture, read through the CLI's file checks (one line, exit 2)."""
    from pydantic import ValidationError

    from vllm_operator.cli.files import FileError, load_mapping
    from vllm_operator.nvml.fake import FakeState

    try:
        return FakeState.model_validate(load_mapping(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        raise FileError(str(path), f"not a FakeNvml fixture: {where}: {first['msg']}") from None


@click.command()
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    required=True,
    help="The node this probe runs on (env NODE_NAME; the DaemonSet sets it from spec.nodeName).",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=1),
    default=30,
    show_default=True,
    help="Seconds between two NVML reads.",
)
@click.option(
    "--min-publish-interval",
    type=click.FloatRange(min=0),
    default=60,
    show_default=True,
    help="Never write the node annotation more often than this (seconds).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=9400,
    show_default=True,
    help="Port of the Prometheus /metrics endpoint (0 disables it).",
)
@click.option("--once", is_flag=True, help="Read (and publish) once, print the budget JSON, exit.")
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    type=click.Path(dir_okay=False),
    default=None,
    help="Kubeconfig outside a cluster (in a pod the service account is used).",
)
@click.option("--no-publish", is_flag=True, help="Do not write the node annotation.")
@click.option(
    "--pod-names",
    is_flag=True,
    help="Name the pods of GPU processes in metrics and annotation (needs RBAC: list pods).",
)
@click.option(
    "--fake-nvml",
    type=click.Path(path_type=Path),
    default=None,
    hidden=True,
    help="Read this FakeNvml fixture instead of the real NVML (tests, simulated nodes).",
)
@click.option(
    "--proc-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/proc"),
    show_default=True,
    help="The host's /proc (e.g. a hostPath mount at /host/proc): NVML reports host PIDs, and "
    "/proc/<pid>/cgroup maps them to pods.",
)
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
def probe(
    node_name: str,
    interval: float,
    min_publish_interval: float,
    metrics_port: int,
    once: bool,
    kubeconfig: str | None,
    no_publish: bool,
    pod_names: bool,
    fake_nvml: Path | None,
    proc_root: Path,
    verbose: bool,
) -> None:
    """Measure free/used/reserved GPU memory and GPU processes with NVML; publish the budget as
    the node annotation serving.vllm-operator.dev/gpu-budget and serve Prometheus metrics."""
    if not node_name.strip():
        raise click.BadParameter("must not be empty", param_hint="--node-name")
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # Imported here: pynvml and the kubernetes client are only needed by this command.
    from vllm_operator.nvml.binding import NvmlLike, real_nvml
    from vllm_operator.nvml.fake import FakeNvml
    from vllm_operator.nvml.probe import AnnotationPublisher, Probe, ProbeSettings
    from vllm_operator.nvml.reader import NvmlReader, PodLookup

    nvml: NvmlLike = FakeNvml(_fake_state(fake_nvml)) if fake_nvml else real_nvml()
    publisher: AnnotationPublisher | None = None
    pods: PodLookup | None = None
    if not no_publish or pod_names:
        from vllm_operator.kube.client import load_config
        from vllm_operator.kube.node_annotations import NodeAnnotations, NodePods

        try:
            api = load_config(kubeconfig)
        except Exception as exc:
            raise click.ClickException(f"no Kubernetes configuration: {exc}") from exc
        publisher = None if no_publish else NodeAnnotations(api)
        pods = NodePods(api, node_name) if pod_names else None
    reader = NvmlReader(nvml, proc_root=proc_root, pods=pods)
    settings = ProbeSettings(
        node_name=node_name, interval_s=interval, min_publish_interval_s=min_publish_interval
    )
    runner = Probe(reader, settings, publisher=publisher)

    if once:
        try:
            result = runner.tick()
        finally:
            reader.close()
        click.echo(result.budget.to_annotation())
        if result.budget.error or (publisher is not None and not result.published):
            sys.exit(1)
        return

    if metrics_port:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, registry=runner.metrics.registry)
        logging.getLogger(__name__).info("Serving metrics port=%d", metrics_port)
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger(__name__).info("Stopping probe signal=%d", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    runner.run(stop)
