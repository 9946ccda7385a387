"""`vllm-operator estimate`: predict vLLM's startup memory profile for given engine arguments.

The forward direction of the memory model (planning.memory), with vLLM's own flag names.
Omitted options take the pinned (or default) vLLM version's defaults. With `--max-nodes N` it
also answers "on how many nodes does this start": the fewest pipeline stages, one per node as the
operator lays a multi-node replica out, at which vLLM starts; `--gpus-per-node` keeps the
tensor-parallel size within a node. Exit codes: 0 fits, 1 does not fit, 2 usage error (unknown GPU
or model, an argument vLLM would reject).
"""

import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from vllm_operator.catalog.architectures import (
    Architecture,
    UnknownModelError,
    architecture_from_config,
    lookup_architecture,
)
from vllm_operator.catalog.gpus import (
    GpuFacts,
    UnknownGpuError,
    capabilities_for_cc,
    lookup_gpu,
    lookup_gpu_by_memory,
    parse_compute_capability,
)
from vllm_operator.cli.files import load_mapping
from vllm_operator.planning.adapters import adapters_from_extra_args
from vllm_operator.planning.errors import PlanningInputError
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import EngineArgs, GpuMemory, MemoryEstimate, estimate_memory
from vllm_operator.planning.versions import DEFAULT_VLLM_VERSION

EXIT_NOT_FIT = 1
EXIT_USAGE = 2


def usage_error(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(EXIT_USAGE)


def resolve_model(
    name: str, *, revision: str | None = None, token: str | None = None
) -> Architecture:
    """Catalog first, then the model's config.json on the Hub (offline: a clear usage error)."""
    try:
        return lookup_architecture(name)
    except UnknownModelError as catalog_error:
        from vllm_operator.hub.config import HubConfigSource, HubError, fetch_architecture

        try:
            return fetch_architecture(HubConfigSource(), name, revision=revision, token=token)
        except HubError as hub_error:
            usage_error(f"{catalog_error} (Hub: {hub_error})")


def resolve_gpu(
    label: str | None, memory_mib: int | None, compute_capability: str | None = None
) -> GpuFacts:
    """The GPU as a node's GFD labels describe it: product label, memory (MiB, as nvidia-smi
    reports it: nvidia.com/gpu.memory), compute capability (nvidia.com/gpu.compute.major/minor).

    A product the catalog does not know is planned from its memory and compute capability, as
    the operator does for such a node.
    """
    cc: tuple[int, int] | None = None
    if compute_capability is not None:
        try:
            cc = parse_compute_capability(compute_capability)
        except ValueError as exc:
            usage_error(str(exc))
    try:
        if label is not None:
            try:
                facts = lookup_gpu(label, memory_mib=memory_mib)
            except UnknownGpuError:
                if memory_mib is None or facts_known(label):
                    raise
                return lookup_gpu_by_memory(memory_mib, compute_capability=cc)
            if cc is not None and facts.compute_capability is None:
                bf16, fp8 = capabilities_for_cc(cc)
                facts = facts.model_copy(
                    update={"compute_capability": cc, "bf16": bf16, "fp8": fp8}
                )
            return facts
        if memory_mib is not None:
            return lookup_gpu_by_memory(memory_mib, compute_capability=cc)
    except (UnknownGpuError, ValueError) as exc:
        usage_error(str(exc))
    usage_error("give the GPU: --gpu LABEL (nvidia.com/gpu.product) or --gpu-memory-mib N")


def facts_known(label: str) -> bool:
    """Whether the catalog knows the product (then a lookup error is about its memory)."""
    from vllm_operator.catalog.gpus import known_labels

    wanted = label.strip().upper().removeprefix("NVIDIA-")
    return any(k.upper().removeprefix("NVIDIA-") == wanted for k in known_labels())


def estimate_json(est: MemoryEstimate, model: str, gpu: GpuFacts) -> dict[str, Any]:
    """The JSON object `estimate -o json` prints (stable keys for scripts and the bench).

    `stages` lists every pipeline stage (one without pipeline parallelism); `layout` is there
    only with more than one stage: one stage per node, each tensor-parallel within its node.
    """
    pp = est.args.pipeline_parallel_size
    layout: dict[str, Any] = {}
    if pp > 1:
        layout["layout"] = {
            "nodes": pp,
            "tensor_parallel_size": est.args.tensor_parallel_size,
            "pipeline_parallel_size": pp,
            "gpus_per_node": est.args.tensor_parallel_size,
        }
    return {
        "model": model,
        "gpu": gpu.label,
        "vllm_version": est.args.vllm_version,
        "engine": est.engine.value,
        "engine_args": est.args.model_dump(),
        "gpu_total_gib": est.gpu_total_gib,
        "budget_gib": est.budget_gib,
        "weights_gib": est.weights_gib,
        "activation_peak_gib": est.activation_peak_gib,
        "non_torch_gib": est.non_torch_gib,
        "cuda_graph_gib": est.cuda_graph_gib,
        "cuda_graph_subtracted": est.cuda_graph_subtracted,
        "kv_cache_gib": est.kv_cache_gib,
        "kv_bytes_per_token": est.kv_bytes_per_token,
        "kv_cache_tokens": est.kv_cache_tokens,
        "num_gpu_blocks": est.num_gpu_blocks,
        "max_concurrency": est.max_concurrency,
        "fits": est.fits,
        "reasons": est.reasons,
        **layout,
        "stages": [s.model_dump() for s in est.stages],
    }


def _print_table(data: dict[str, Any]) -> None:
    console = Console()
    table = Table(
        title=f"{data['model']} on {data['gpu']} (vLLM {data['vllm_version']}, {data['engine']})"
    )
    table.add_column("term")
    table.add_column("GiB / value", justify="right")
    args = data["engine_args"]
    rows = [
        ("GPU total (CUDA)", f"{data['gpu_total_gib']:.2f}"),
        (f"budget (x {args['gpu_memory_utilization']})", f"{data['budget_gib']:.2f}"),
        ("weights", f"{data['weights_gib']:.2f}"),
        (
            f"activation peak ({args['max_num_batched_tokens']} tok, {args['max_num_seqs']} seqs)",
            f"{data['activation_peak_gib']:.2f}",
        ),
        ("non-torch", f"{data['non_torch_gib']:.2f}"),
        (
            "CUDA graphs"
            + (" (subtracted)" if data["cuda_graph_subtracted"] else " (outside budget)"),
            f"{data['cuda_graph_gib']:.2f}",
        ),
        ("KV cache", f"{data['kv_cache_gib']:.2f}"),
        ("KV bytes / token / GPU", f"{data['kv_bytes_per_token']:,}"),
        ("KV cache tokens", f"{data['kv_cache_tokens']:,}"),
        ("GPU blocks", f"{data['num_gpu_blocks']:,} x {args['block_size']}"),
        (f"max concurrency at {args['max_model_len']} tokens", f"{data['max_concurrency']:.2f}x"),
        ("fits", "yes" if data["fits"] else "NO"),
    ]
    for term, value in rows:
        table.add_row(term, value)
    console.print(table)
    _print_stages(console, data)
    for reason in data["reasons"]:
        console.print(f"- {reason}")


def _print_stages(console: Console, data: dict[str, Any]) -> None:
    """Per-stage memory of a multi-node layout (the table above is the bounding stage)."""
    layout = data.get("layout")
    if layout is None:
        return
    table = Table(
        title=f"layout: {layout['nodes']} nodes x {layout['gpus_per_node']} GPUs "
        f"(TP={layout['tensor_parallel_size']} within a node, "
        f"PP={layout['pipeline_parallel_size']} across nodes); GiB per GPU, * bounds the KV cache"
    )
    for column in ("stage", "layers", "weights", "act.", "graphs", "KV free", "KV", "blocks"):
        table.add_column(column, justify="right")
    stages = data["stages"]
    bound = min(s["num_gpu_blocks"] for s in stages)
    for s in stages:
        table.add_row(
            str(s["stage"]),
            str(s["layers"]),
            f"{s['weights_gib']:.2f}",
            f"{s['activation_gib']:.2f}",
            f"{s['cuda_graph_gib']:.2f}",
            f"{s['kv_free_gib']:.2f}",
            f"{s['kv_cache_gib']:.2f}",
            f"{s['num_gpu_blocks']:,}" + ("*" if s["num_gpu_blocks"] == bound else ""),
        )
    console.print(table)


def _fewest_nodes(
    arch: Architecture, gpu: GpuMemory, args: EngineArgs, max_nodes: int
) -> tuple[MemoryEstimate, list[str]]:
    """The estimate at the fewest pipeline stages (nodes) up to `max_nodes` at which vLLM
    starts, with a note per layout that does not; the largest layout when none does."""
    notes: list[str] = []
    est = estimate_memory(arch, gpu, args)
    for pp in range(2, min(max_nodes, arch.num_hidden_layers) + 1):
        if est.fits:
            break
        tp = est.args.tensor_parallel_size
        why = est.reasons[-1] if est.reasons else "it does not start"
        notes.append(f"TP={tp} PP={est.args.pipeline_parallel_size} does not start: {why}")
        est = estimate_memory(arch, gpu, args.model_copy(update={"pipeline_parallel_size": pp}))
    return est, notes


@click.command()
@click.option("--model", "model", metavar="ID", help="Hugging Face repo id (catalog, then Hub).")
@click.option(
    "--model-config",
    type=click.Path(path_type=Path),
    help="A Hugging Face config.json instead of --model.",
)
@click.option("--gpu", "gpu_label", metavar="LABEL", help="GFD product label, e.g. NVIDIA-L4.")
@click.option(
    "--gpu-memory-mib",
    type=click.IntRange(min=1),
    help="GPU memory in MiB as nvidia-smi reports it (its 'Memory-Usage' total; GFD's "
    "nvidia.com/gpu.memory label), not the CUDA total vLLM logs: the driver reservation is "
    "taken off it. A figure equal to a catalog GPU's measured CUDA total is used as is.",
)
@click.option(
    "--compute-capability",
    metavar="MAJOR.MINOR",
    help="Compute capability (nvidia.com/gpu.compute.major/minor) for a GPU the catalog does "
    "not know: bf16 from 8.0, fp8 KV cache from 8.9.",
)
@click.option("--tensor-parallel-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--pipeline-parallel-size",
    type=click.IntRange(min=1),
    help="Pipeline stages (one per node as the operator runs them).  [default: 1, or the "
    "fewest that start with --max-nodes]",
)
@click.option(
    "--max-nodes",
    type=click.IntRange(min=1, max=16),
    help="Try 1, 2, ... up to N pipeline stages (nodes) and report the fewest at which vLLM "
    "starts (spec.placement.maxNodesPerReplica).",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=1),
    help="GPUs on each node: the tensor-parallel size must stay within one node.",
)
@click.option("--gpu-memory-utilization", type=click.FloatRange(0, 1, min_open=True))
@click.option("--max-model-len", type=click.IntRange(min=1))
@click.option("--max-num-seqs", type=click.IntRange(min=1))
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1))
@click.option("--block-size", type=click.IntRange(min=1))
@click.option("--dtype", default="auto", show_default=True)
@click.option("--quantization", default=None)
@click.option("--kv-cache-dtype", default="auto", show_default=True)
@click.option("--enforce-eager", is_flag=True, default=False)
@click.option("--vllm-version", default=DEFAULT_VLLM_VERSION, show_default=True)
@click.option(
    "--speculative-config",
    metavar="JSON",
    help="vLLM's --speculative-config (method, num_speculative_tokens): MTP / EAGLE draft "
    "weights and KV are added.",
)
@click.option("--enable-lora", is_flag=True, default=False, help="LoRA slot buffers are added.")
@click.option("--max-loras", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--max-lora-rank", type=click.IntRange(min=1), default=16, show_default=True)
@click.option(
    "--skip-mm-profiling",
    is_flag=True,
    default=False,
    help="vLLM's --skip-mm-profiling: the vision encoder's profile pass is left out.",
)
@click.option(
    "--language-model-only",
    is_flag=True,
    default=False,
    help="vLLM's --language-model-only: no vision tower weights, no encoder profile pass.",
)
@click.option(
    "--limit-mm-per-prompt",
    metavar="JSON",
    help='vLLM\'s --limit-mm-per-prompt, e.g. \'{"image": 0, "video": 0}\' (no encoder pass).',
)
@click.option(
    "--mm-encoder-tp-mode",
    type=click.Choice(["weights", "data"]),
    default="weights",
    show_default=True,
)
@click.option(
    "--attention-backend",
    metavar="NAME",
    help="vLLM's --attention-backend (FLASH_ATTN, FLASHINFER, TRITON_ATTN, ...); default: the "
    "backend vLLM picks for the model, GPU and KV cache dtype.",
)
@click.option(
    "--expandable-segments",
    is_flag=True,
    help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the engine's env, as the operator's "
    "pods run it: every allocator block is split, so model loading keeps no whole-block rounding "
    "and FlashInfer's wrappers pack into 20 MiB pages. Default: a plain `vllm serve`.",
)
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def estimate(
    model: str | None,
    model_config: Path | None,
    gpu_label: str | None,
    gpu_memory_mib: int | None,
    compute_capability: str | None,
    tensor_parallel_size: int,
    pipeline_parallel_size: int | None,
    max_nodes: int | None,
    gpus_per_node: int | None,
    gpu_memory_utilization: float | None,
    max_model_len: int | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    block_size: int | None,
    dtype: str,
    quantization: str | None,
    kv_cache_dtype: str,
    enforce_eager: bool,
    vllm_version: str,
    speculative_config: str | None,
    enable_lora: bool,
    max_loras: int,
    max_lora_rank: int,
    skip_mm_profiling: bool,
    language_model_only: bool,
    limit_mm_per_prompt: str | None,
    mm_encoder_tp_mode: str,
    attention_backend: str | None,
    expandable_segments: bool,
    output: str,
) -> None:
    """Predict vLLM's startup memory profile (weights, activation, KV cache) for engine args.

    Exit 0 when the configuration starts, 1 when it would not, 2 on a usage error.
    """
    if (model is None) == (model_config is None):
        usage_error("give exactly one of --model ID or --model-config PATH")
    if gpu_label is None and gpu_memory_mib is None:
        usage_error("give --gpu LABEL (nvidia.com/gpu.product) or --gpu-memory-mib N")
    if model_config is not None:
        try:
            arch = architecture_from_config(load_mapping(model_config), model_config)
        except ValueError as exc:
            usage_error(str(exc))
    else:
        assert model is not None
        arch = resolve_model(model, token=os.environ.get("HF_TOKEN"))
    facts = resolve_gpu(gpu_label, gpu_memory_mib, compute_capability)
    flags: dict[str, str] = {"--max-loras": str(max_loras), "--max-lora-rank": str(max_lora_rank)}
    if speculative_config:
        flags["--speculative-config"] = speculative_config
    if enable_lora:
        flags["--enable-lora"] = ""
    if skip_mm_profiling:
        flags["--skip-mm-profiling"] = ""
    if language_model_only:
        flags["--language-model-only"] = ""
    if limit_mm_per_prompt:
        flags["--limit-mm-per-prompt"] = limit_mm_per_prompt
    flags["--mm-encoder-tp-mode"] = mm_encoder_tp_mode
    if attention_backend:
        flags["--attention-backend"] = attention_backend
    if gpus_per_node is not None and tensor_parallel_size > gpus_per_node:
        usage_error(
            f"--tensor-parallel-size {tensor_parallel_size} is above --gpus-per-node "
            f"{gpus_per_node}: tensor parallelism stays within one node (pipeline stages span "
            "nodes: --pipeline-parallel-size or --max-nodes)"
        )
    if (
        max_nodes is not None
        and pipeline_parallel_size is not None
        and pipeline_parallel_size > max_nodes
    ):
        usage_error(
            f"--pipeline-parallel-size {pipeline_parallel_size} needs {pipeline_parallel_size} "
            f"nodes, above --max-nodes {max_nodes}"
        )
    try:
        adapters = adapters_from_extra_args(flags)
        args = EngineArgs(
            tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size or 1,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            block_size=block_size,
            dtype=dtype,
            quantization=quantization,
            kv_cache_dtype=kv_cache_dtype,
            enforce_eager=enforce_eager,
            vllm_version=vllm_version,
            speculative_method=adapters.speculative_method,
            num_speculative_tokens=adapters.num_speculative_tokens,
            max_loras=adapters.max_loras,
            max_lora_rank=adapters.max_lora_rank,
            skip_mm_profiling=adapters.skip_mm_profiling,
            language_model_only=adapters.language_model_only,
            limit_mm_per_prompt=adapters.limit_mm_per_prompt,
            mm_encoder_tp_mode=adapters.mm_encoder_tp_mode,
            attention_backend=adapters.attention_backend,
            expandable_segments=expandable_segments,
        )
        if max_nodes is not None and pipeline_parallel_size is None:
            est, notes = _fewest_nodes(arch, gpu_memory(facts), args, max_nodes)
            est = est.model_copy(update={"reasons": [*notes, *est.reasons]})
        else:
            est = estimate_memory(arch, gpu_memory(facts), args)
    except (PlanningInputError, ValueError) as exc:
        usage_error(str(exc))
    data = estimate_json(est, arch.name, facts)
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        _print_table(data)
    sys.exit(0 if est.fits else EXIT_NOT_FIT)
