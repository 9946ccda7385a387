"""`vllm-operator render`: the controller's rendering, offline, as YAML (GitOps reviews, goldens)."""

import sys
from pathlib import Path

import click

from vllm_operator.api.crd import dump_yaml
from vllm_operator.api.reasons import Reason
from vllm_operator.api.spec import GpuAllocation, PlacementStrategy
from vllm_operator.cli.specs import CliResolver, check_file, echo_refusal, prepare
from vllm_operator.reconcile.inventory import GpuNodeGroup
from vllm_operator.reconcile.pools import plan_pools
from vllm_operator.rendering.routing import render_routing
from vllm_operator.rendering.workload import render_pdb, render_service


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
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    help="GPU product labels present in the cluster (default: every type the spec allows).",
)
@click.option("--gpus-per-node", default=8, show_default=True, help="GPUs on each simulated node.")
@click.option(
    "--gpu-allocation",
    type=click.Choice([m.value for m in GpuAllocation]),
    default=GpuAllocation.DEVICE_PLUGIN.value,
    show_default=True,
    help="The cluster default for specs without spec.placement.gpuAllocation (as the operator's "
    "--gpu-allocation).",
)
def render(file: Path, gpus: tuple[str, ...], gpus_per_node: int, gpu_allocation: str) -> None:
    """Print the Deployments, Service and PodDisruptionBudget the operator would apply for FILE.

    Exit 0 when every service renders, 1 when the operator would refuse a service (its reason
    printed as the controller writes it into status) or a pool is infeasible, 2 for usage errors
    (a file that cannot be read as YAML).
    """
    resolver = CliResolver()
    failed = False
    out: list[str] = []
    for doc in check_file(file):
        prepared = prepare(doc, resolver)
        if prepared is None:
            if doc.reason is not None:
                echo_refusal(doc, err=True)
                failed = True
            continue
        service = prepared.service
        labels = list(gpus) or list(service.spec.placement.gpu_types)
        pools = plan_pools(
            prepared,
            simulated_groups(labels, gpus_per_node),
            gpu_allocation=GpuAllocation(gpu_allocation),
        )
        if service.spec.placement.strategy == PlacementStrategy.PREFERRED:
            # spec.replicas is the total: all of it on the most preferred planned type, as the
            # operator places it when that type has room (the live split: status.placement).
            planned = [p.deployment for p in pools if p.deployment is not None]
            for i, deployment in enumerate(planned):
                deployment["spec"]["replicas"] = service.spec.replicas if i == 0 else 0
        for pool in pools:
            if pool.deployment is None:
                click.echo(
                    f"{service.name}: {pool.gpu_type}: {pool.reason}: {pool.message}", err=True
                )
                failed = failed or not pool.feasible
                continue
            if pool.plan_note:  # rendered as asked, but the plan's figures no longer hold
                click.echo(
                    f"{service.name}: {pool.gpu_type}: {Reason.PLAN_OVERRIDDEN}: {pool.plan_note}",
                    err=True,
                )
            if pool.claim_template is not None:
                out.append(dump_yaml(pool.claim_template))
            out.append(dump_yaml(pool.deployment))
        if any(p.deployment is not None for p in pools):
            out.extend(dump_yaml(o) for o in (render_service(service), render_pdb(service)))
            # spec.routing inferencePool: the InferencePool and the rendered picker (#31).
            out.extend(dump_yaml(o) for o in render_routing(service))
    click.echo("".join(f"---\n{doc}" for doc in out), nl=False)
    sys.exit(1 if failed else 0)
