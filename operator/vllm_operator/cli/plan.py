"""`vllm-operator plan FILE`: the engine arguments the operator would choose, per GPU type.

Checks each VLLMService in FILE as the controller does before acting (cli.specs: the admission
chain's schema, service and model steps), then runs the controller's own planning function
(planning.plan.plan_service), puts the spec's allowPlannerOverride values in as `render` and the
reconcile do (reconcile.pools.user_values) and runs the chain's pool steps, so the plan printed
is the one that runs and a pool the operator would refuse is refused here too. Exit codes: 0 every pool planned, 1 a service the operator would
refuse or an intent that does not fit (reasons and alternatives printed), 2 usage error (a file
that cannot be read, an unknown GPU, input vLLM would reject).
"""

import json
import sys
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Table

from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.catalog.gpus import GpuFacts
from vllm_operator.catalog.vllm.errors import UnknownVersionError
from vllm_operator.catalog.vllm.loader import load_version
from vllm_operator.cli.estimate import EXIT_NOT_FIT, EXIT_USAGE, resolve_gpu, usage_error
from vllm_operator.cli.specs import (
    EXIT_REJECTED,
    Checked,
    CliResolver,
    check_file,
    echo_refusal,
    prepare,
)
from vllm_operator.cli.upgrade import preview, preview_lines
from vllm_operator.planning.alternatives import Infeasible
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.plan import PlanResult, PoolPlan, plan_service
from vllm_operator.reconcile.pools import PreparedService, pool_refusal, user_values


def result_dict(result: PlanResult) -> dict[str, Any]:
    data = result.model_dump(mode="json")
    if data.get("layout", 0) is None:
        del data["layout"]  # single-node plans print as they did before multi-node layouts
    data["feasible"] = isinstance(result, PoolPlan)
    memory = data.get("memory") or {}
    for key in ("lora_gib", "draft_weights_gib", "draft_kv_gib"):
        if not memory.get(key):  # printed only for a spec with LoRA or a draft
            memory.pop(key, None)
    return data


def _print_layout(console: Console, result: PoolPlan) -> None:
    """The multi-node layout and the memory of every stage (per GPU of the stage), GiB."""
    layout = result.layout
    if layout is None:
        return
    table = Table(
        title=f"layout: {layout.nodes} nodes x {layout.gpus_per_node} GPUs "
        f"(TP={layout.tensor_parallel_size} within a node, "
        f"PP={layout.pipeline_parallel_size} across nodes); GiB per GPU, * bounds the KV cache"
    )
    for column in ("stage", "layers", "weights", "act.", "graphs", "KV free", "KV", "blocks"):
        table.add_column(column, justify="right")
    bound = min(s.num_gpu_blocks for s in layout.stages)
    for s in layout.stages:
        table.add_row(
            str(s.stage),
            str(s.layers),
            f"{s.weights_gib:.2f}",
            f"{s.activation_gib:.2f}",
            f"{s.cuda_graph_gib:.2f}",
            f"{s.kv_free_gib:.2f}",
            f"{s.kv_cache_gib:.2f}",
            f"{s.num_gpu_blocks:,}" + ("*" if s.num_gpu_blocks == bound else ""),
        )
    console.print(table)


def _print_plan(console: Console, name: str, result: PlanResult) -> None:
    if isinstance(result, Infeasible):
        console.print(
            f"[bold red]{name} on {result.gpu_type}: infeasible[/] (vLLM {result.vllm_version})"
        )
        for reason in result.reasons:
            console.print(f"  - {reason}")
        if result.alternatives:
            console.print("  Alternatives:")
            for alt in result.alternatives:
                console.print(f"  * {alt.description}")
        return
    table = Table(
        title=f"{name} on {result.gpu_type} (vLLM {result.vllm_version}, {result.engine.value})"
    )
    table.add_column("engine argument")
    table.add_column("value", justify="right")
    for key, value in result.engine_args.rendered().items():
        table.add_row(key, "" if value is None else str(value))
    m = result.memory
    table.add_section()
    for label, value in (
        ("GPU total (CUDA), GiB", m.gpu_total_gib),
        ("budget, GiB", m.budget_gib),
        ("weights, GiB", m.weights_gib),
        *((("LoRA slots, GiB", m.lora_gib),) if m.lora_gib else ()),
        *((("draft weights, GiB", m.draft_weights_gib),) if m.draft_weights_gib else ()),
        ("activation peak, GiB", m.activation_gib),
        ("non-torch, GiB", m.non_torch_gib),
        (
            "CUDA graphs, GiB"
            + (" (subtracted)" if m.cuda_graph_subtracted else " (outside budget)"),
            m.cuda_graph_gib,
        ),
        ("KV cache, GiB", m.kv_cache_gib),
    ):
        table.add_row(label, f"{value:.2f}")
    if m.draft_kv_gib:
        table.add_row("of which draft KV, GiB", f"{m.draft_kv_gib:.2f}")
    table.add_row("KV cache tokens", f"{m.kv_cache_tokens:,}")
    table.add_row("concurrency at P99", f"{m.concurrency_at_p99:.2f}")
    console.print(table)
    _print_layout(console, result)
    for reason in result.reasons:
        console.print(f"  - {reason}")


def _placed(
    spec: VLLMServiceSpec, max_nodes: int | None, gpus_per_node: int | None
) -> VLLMServiceSpec:
    """The spec with the node options applied as the controller applies the inventory: the
    tensor-parallel limit is the smaller of maxGPUsPerReplica and the node's GPUs."""
    placement = spec.placement
    update: dict[str, int] = {}
    if max_nodes is not None:
        update["max_nodes_per_replica"] = max_nodes
    if gpus_per_node is not None:
        update["max_gpus_per_replica"] = min(placement.max_gpus_per_replica, gpus_per_node)
    if not update:
        return spec
    return spec.model_copy(update={"placement": placement.model_copy(update=update)})


@click.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    metavar="LABEL",
    help="Plan for these GPU types instead of spec.placement.gpuTypes (repeatable).",
)
@click.option(
    "--max-nodes",
    type=click.IntRange(min=1, max=16),
    help="Plan with this spec.placement.maxNodesPerReplica instead of the file's.",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=1),
    help="GPUs on each node, as the controller reads them from the nodes: the tensor-parallel "
    "size stays within it (default: spec.placement.maxGPUsPerReplica).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "yaml", "json"]),
    default="table",
    show_default=True,
)
@click.option(
    "--vllm-version",
    "upgrade_to",
    metavar="VERSION",
    help="Preview an upgrade: per pool, what changes from spec.vllm.version to VERSION (flags "
    "the release removed, renamed or deprecated, KV tokens, concurrency, host memory, startup "
    "rules).",
)
def plan(
    file: Path,
    gpus: tuple[str, ...],
    max_nodes: int | None,
    gpus_per_node: int | None,
    output: str,
    upgrade_to: str | None = None,
) -> None:
    """Plan engine arguments for every VLLMService in FILE, per allowed GPU type.

    Exit 0 when every pool is planned, 1 when the operator would refuse a service (the reason
    is printed as the controller writes it into status) or an intent does not fit, 2 on a usage
    error (a file that cannot be read as YAML, an unknown --gpu).
    """
    if upgrade_to is not None:
        try:
            load_version(upgrade_to)  # an option, not a spec: no admission step
        except UnknownVersionError as exc:
            usage_error(str(exc))
    resolver = CliResolver()
    prepared: list[tuple[Checked, PreparedService]] = []
    worst = 0
    checked = check_file(file)
    for doc in checked:
        ready = prepare(doc, resolver)
        if ready is not None:
            prepared.append((doc, ready))
        elif doc.reason is not None:
            echo_refusal(doc, err=True)
            worst = EXIT_REJECTED
    if not prepared and worst == 0:
        usage_error(f"{file} holds no VLLMService")
    out: list[dict[str, Any]] = []
    console = Console()
    for doc, one in prepared:
        service = one.service
        labels = list(gpus) or list(service.spec.placement.gpu_types)
        facts: list[GpuFacts] = [resolve_gpu(label, None) for label in labels]
        placed = _placed(service.spec, max_nodes, gpus_per_node)
        name = service.name or service.spec.model.name
        if upgrade_to is not None:
            pools = preview(placed, facts, one.arch, upgrade_to, one)
            if output == "table":
                for line in preview_lines(name, pools):
                    click.echo(line)
            out.append({"name": name, "upgrade": pools})
            for pool in pools:
                if "refused" in pool:
                    worst = max(worst, EXIT_REJECTED)
                elif not pool.get("feasible", {}).get("to", True):
                    worst = max(worst, EXIT_NOT_FIT)
            continue
        planned = plan_service(placed, facts, one.arch)
        results: list[PlanResult] = []
        for gpu, result in zip(facts, planned, strict=True):
            if isinstance(result, PoolPlan):
                # What render and the reconcile run: the user's values, the pool steps.
                overridden = user_values(one, result, PlanIntent.from_spec(placed), gpu)
                args = overridden.plan.engine_args.rendered()
                rendered = {k: None if k in overridden.unplanned else v for k, v in args.items()}
                refusal = pool_refusal(one, result.gpu_type, overridden, rendered, result.engine)
                if refusal is not None:  # as render reports a refused pool
                    click.echo(
                        f"{doc.where}: {gpu.label}: {refusal.reason}: {refusal.message}", err=True
                    )
                    worst = max(worst, EXIT_REJECTED)
                    continue
                result = overridden.plan
                for problem in overridden.problems:
                    click.echo(f"{doc.where}: {gpu.label}: PlanOverridden: {problem}", err=True)
            results.append(result)
        for result in results:
            if isinstance(result, Infeasible):
                worst = max(worst, EXIT_USAGE if result.usage_error else EXIT_NOT_FIT)
        if output == "table":
            for result in results:
                _print_plan(console, name, result)
        out.append(
            {
                "name": name,
                "model": service.spec.model.name,
                "vllmVersion": service.spec.vllm.version,
                "pools": [result_dict(r) for r in results],
            }
        )
    if out and output == "json":
        click.echo(json.dumps(out if len(out) > 1 else out[0], indent=2))
    elif out and output == "yaml":
        click.echo(yaml.safe_dump(out if len(out) > 1 else out[0], sort_keys=False), nl=False)
    sys.exit(worst)
