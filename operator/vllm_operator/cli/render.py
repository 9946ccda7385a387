"""`vllm-operator render`: the controller's rendering, offline, as YAML (GitOps reviews, goldens)."""

import sys
from pathlib import Path

import click

from vllm_operator.api.crd import dump_yaml
from vllm_operator.api.manifests import parse_documents
from vllm_operator.reconcile.inventory import GpuNodeGroup
from vllm_operator.reconcile.pools import ServiceRejected, plan_pools, prepare_service
from vllm_operator.rendering.workload import render_pdb, render_service


class _NoSecrets:
    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return None


def simulated_groups(labels: list[str], gpus_per_node: int) -> dict[str, GpuNodeGroup]:
    """Node groups as if the cluster had nodes of these GPU types (memory from the catalog)."""
    return {
        label: GpuNodeGroup(
            product=label,
            nodes=1,
            schedulable_nodes=1,
            max_gpus_per_node=gpus_per_node,
            hardware_gpus_per_node=gpus_per_node,
            allocatable_gpus=gpus_per_node,
            node_names=(f"{label.lower()}-0",),
        )
        for label in labels
    }


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    help="GPU product labels present in the cluster (default: every type the spec allows).",
)
@click.option("--gpus-per-node", default=8, show_default=True, help="GPUs on each simulated node.")
def render(file: Path, gpus: tuple[str, ...], gpus_per_node: int) -> None:
    """Print the Deployments, Service and PodDisruptionBudget the operator would apply for FILE.

    Exit 0 when every service renders, 1 when a service is rejected or a pool is infeasible,
    2 for usage errors.
    """
    from vllm_operator.hub.resolver import HubArchitectureResolver

    resolver = HubArchitectureResolver(_NoSecrets())
    failed = False
    out: list[str] = []
    for doc in parse_documents(file.read_text(encoding="utf-8")):
        if doc.problems:
            for problem in doc.problems:
                click.echo(f"{file}[{doc.index}]: {problem}", err=True)
            sys.exit(2)
        if doc.service is None:
            continue
        service = doc.service
        labels = list(gpus) or list(service.spec.placement.gpu_types)
        try:
            prepared = prepare_service(service, resolver)
        except ServiceRejected as exc:
            click.echo(f"{service.name}: {exc.reason}: {exc.message}", err=True)
            failed = True
            continue
        pools = plan_pools(prepared, simulated_groups(labels, gpus_per_node))
        for pool in pools:
            if pool.deployment is None:
                click.echo(
                    f"{service.name}: {pool.gpu_type}: {pool.reason}: {pool.message}", err=True
                )
                failed = failed or not pool.feasible
                continue
            out.append(dump_yaml(pool.deployment))
        if any(p.deployment is not None for p in pools):
            out.extend(dump_yaml(o) for o in (render_service(service), render_pdb(service)))
    click.echo("".join(f"---\n{doc}" for doc in out), nl=False)
    sys.exit(1 if failed else 0)
