"""`vllm-operator observations export`: a fleet's measured KV capacities as benchmark rows.

Every `status.observations[]` entry (the KV cache vLLM really allocated for one engine
configuration, docs/planning-model.md "Learning from the fleet") becomes one row in the format of
`bench/data/vllm-startup-logs.csv`, so a platform team can contribute its fleet's measurements
back and `make bench-planner ROWS=FILE` judges the memory model on them. What the CSV has no
column for (the revision, the prefill chunk, the operator's prediction, where it was measured)
goes into `notes` as `key=value` pairs that `bench_inputs` reads back: the round trip is exact.

Reads VLLMService objects from files (`-f`, YAML or JSON, one or more documents, or a `List` as
`kubectl get vllmservices -o yaml` prints it) or from the cluster (the kube gateway lists them).
"""

import contextlib
import csv
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from vllm_operator.api.status import Observation, PoolStatus, VLLMServiceStatus
from vllm_operator.catalog.gpus import UnknownGpuError, lookup_gpu
from vllm_operator.catalog.vllm.values import configures_kv_connector
from vllm_operator.cli.files import FileError, display_name, load_mapping_documents

BENCH_COLUMNS = (
    "source",
    "vllm_version",
    "model_id",
    "dtype",
    "quantization",
    "kv_cache_dtype",
    "gpu_name",
    "gpu_total_gib",
    "num_gpus_tp",
    "pp_size",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "block_size",
    "enforce_eager",
    "weights_gib",
    "activation_peak_gib",
    "non_torch_gib",
    "cuda_graph_gib",
    "kv_cache_gib",
    "gpu_blocks",
    "kv_cache_tokens",
    "max_concurrency_line",
    "notes",
)
"""The header of bench/data/vllm-startup-logs.csv (tests/cli/test_observations_cli.py checks it)."""

EXPORT_SOURCE = "vllm-operator observations export"
"""How an exported row's `source` starts: the bench reads such a row's inputs from its notes."""


def _service_objects(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if doc.get("kind") == "List" or (doc.get("kind") or "").endswith("List"):
        return [i for i in doc.get("items") or [] if isinstance(i, Mapping)]
    return [doc]


def _matching_pool(pools: Iterable[PoolStatus], obs: Observation) -> PoolStatus | None:
    """The pool whose current plan runs the observation's configuration (its GPU total and
    pipeline size then belong to the row); None when the plan has moved on."""
    for pool in pools:
        if pool.gpu_type != obs.key.gpu_type or pool.plan is None:
            continue
        args = pool.plan.planned_args()
        if (
            args.tensor_parallel_size == obs.key.tensor_parallel_size
            and args.max_model_len == obs.key.max_model_len
            and args.gpu_memory_utilization == obs.key.gpu_memory_utilization
        ):
            return pool
    return None


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def observation_row(
    namespace: str,
    name: str,
    obs: Observation,
    pool: PoolStatus | None,
    *,
    expandable_segments: bool = True,
) -> dict[str, str]:
    """One bench row (BENCH_COLUMNS) for one observation of VLLMService namespace/name.
    `expandable_segments`: whether its pods run the allocator with expandable segments (all but
    those whose extraArgs configure a KV connector, see ``service_expandable_segments``)."""
    key = obs.key
    plan = pool.plan if pool is not None else None
    total = plan.memory.gpu_total_gib if plan is not None and plan.memory is not None else None
    pp = plan.planned_args().pipeline_parallel_size if plan is not None else None
    at = obs.observed_at.isoformat().replace("+00:00", "Z")
    notes = {
        "revision": key.revision or "",
        "max_num_batched_tokens": _number(obs.max_num_batched_tokens),
        "predicted_kv_cache_tokens": _number(obs.predicted_kv_cache_tokens),
        "deviation_percent": _number(obs.deviation_percent),
        "observed_at": at,
        "pods": str(obs.pods),
        "measured_by": obs.source,
        # the operator's pods run PyTorch's allocator with expandable segments (rendering/
        # workload.py), which splits every block: the bench must not add the rounding a plain
        # `vllm serve` pays (planning/model_load.py); a KV connector's pods run without them
        "expandable_segments": "true" if expandable_segments else "false",
    }
    return {
        "source": f"{EXPORT_SOURCE} (VLLMService {namespace}/{name}, {at})",
        "vllm_version": key.vllm_version,
        "model_id": key.model,
        "dtype": key.dtype,
        "quantization": key.quantization or "",
        "kv_cache_dtype": key.kv_cache_dtype,
        "gpu_name": key.gpu_type,
        "gpu_total_gib": _number(total),
        "num_gpus_tp": str(key.tensor_parallel_size),
        "pp_size": _number(pp),
        "gpu_memory_utilization": f"{key.gpu_memory_utilization:g}",
        "max_model_len": str(key.max_model_len),
        "max_num_seqs": str(obs.max_num_seqs),
        "block_size": _number(key.block_size),
        "enforce_eager": "true" if key.enforce_eager else "false",
        "weights_gib": "",
        "activation_peak_gib": "",
        "non_torch_gib": "",
        "cuda_graph_gib": "",
        "kv_cache_gib": "",
        "gpu_blocks": "",
        "kv_cache_tokens": str(obs.kv_cache_tokens),
        "max_concurrency_line": "",
        "notes": "; ".join(f"{k}={v}" for k, v in notes.items() if v != ""),
    }


def service_rows(body: Mapping[str, Any]) -> list[dict[str, str]]:
    """The rows of one VLLMService object (none without status.observations).

    Raises ValueError when its status does not parse (the operator writes it; a hand-edited or
    foreign object is refused rather than exported wrong)."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
    try:
        status = VLLMServiceStatus.model_validate(body.get("status") or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(
            f"VLLMService {namespace}/{name}: status.{where}: {first['msg']}"
        ) from None
    spec = body.get("spec") or {}
    return [
        observation_row(
            namespace,
            name,
            obs,
            _matching_pool(status.pools, obs),
            expandable_segments=service_expandable_segments(spec, obs.key.vllm_version),
        )
        for obs in status.observations
    ]


def service_expandable_segments(spec: Mapping[str, Any], version: str) -> bool:
    """Whether the service's pods run PyTorch's allocator with expandable segments: the renderer
    sets them unless extraArgs configure a KV connector, which vLLM refuses beside them
    (catalog/vllm/values.py ``configures_kv_connector``; planning/intent.py plans the same)."""
    vllm = spec.get("vllm")
    extra = vllm.get("extraArgs") if isinstance(vllm, Mapping) else None
    if not isinstance(extra, Mapping) or not extra:
        return True
    args = {str(k): str(v) for k, v in extra.items()}
    return not configures_kv_connector(version, args)


def bench_inputs(row: Mapping[str, str]) -> dict[str, Any]:
    """What the bench needs of an exported row beyond its columns (hack/bench_planner.py merges
    it into the row's inputs): the GPU label as it is, the prefill chunk, the allocator setting
    (expandable segments unless the row says otherwise: the operator's pods). Empty for other
    rows."""
    if not str(row.get("source", "")).startswith(EXPORT_SOURCE):
        return {}
    notes = dict(
        part.strip().split("=", 1) for part in str(row.get("notes", "")).split(";") if "=" in part
    )
    found: dict[str, Any] = {"version": row.get("vllm_version", "")}
    with contextlib.suppress(UnknownGpuError):  # not a GFD label: the bench maps the name
        found["gpu"] = lookup_gpu(str(row.get("gpu_name", ""))).label
    if notes.get("max_num_batched_tokens"):
        found["max_num_batched_tokens"] = int(notes["max_num_batched_tokens"])
    found["expandable_segments"] = notes.get("expandable_segments", "true").lower() == "true"
    return found


def write_rows(rows: Iterable[Mapping[str, str]], out: Any) -> int:
    """The header and the rows as CSV on `out` (a text stream); the number of rows."""
    writer = csv.DictWriter(out, fieldnames=BENCH_COLUMNS, lineterminator="\n")
    writer.writeheader()
    count = 0
    for row in rows:
        writer.writerow(row)
        count += 1
    return count


def _from_cluster(namespace: str | None, kubeconfig: str | None) -> list[Mapping[str, Any]]:
    from vllm_operator.kube.client import ApiGateway, load_config
    from vllm_operator.kube.gateway import GatewayError

    try:
        api = load_config(kubeconfig)
    except Exception as exc:
        raise click.ClickException(f"no Kubernetes configuration: {exc}") from exc
    try:
        return list(ApiGateway(api).list_services(namespace))
    except GatewayError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group(name="observations")
def observations() -> None:
    """The KV capacities the fleet's engines measured (status.observations)."""


@observations.command(name="export")
@click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    metavar="FILE",
    help="VLLMService objects (YAML or JSON, a List too; '-': stdin). Without it: the cluster.",
)
@click.option("-n", "--namespace", default=None, help="Only this namespace (default: all).")
@click.option(
    "--kubeconfig",
    default=None,
    metavar="PATH",
    help="Kubeconfig (default: in-cluster, then ~/.kube/config).",
)
@click.option(
    "-o",
    "--output",
    "output",
    default="-",
    metavar="FILE",
    help="Where to write the CSV ('-': stdout).",
)
def export(
    files: tuple[str, ...], namespace: str | None, kubeconfig: str | None, output: str
) -> None:
    """Write every status.observations[] entry as a row of the bench's CSV
    (bench/data/vllm-startup-logs.csv format); `make bench-planner ROWS=FILE` judges the memory
    model on them. Prints how many rows were written to stderr."""
    bodies: list[Mapping[str, Any]] = []
    if files:
        for name in files:
            for doc in load_mapping_documents(name):
                for obj in _service_objects(doc):
                    if obj.get("kind") not in (None, "VLLMService"):
                        continue
                    meta = obj.get("metadata") or {}
                    if namespace is None or meta.get("namespace", "default") == namespace:
                        bodies.append(obj)
    else:
        bodies = _from_cluster(namespace, kubeconfig)
    rows: list[dict[str, str]] = []
    for body in sorted(bodies, key=lambda b: _name(b)):
        try:
            rows.extend(service_rows(body))
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    if output == "-":
        count = write_rows(rows, sys.stdout)
    else:
        try:
            with Path(output).open("w", encoding="utf-8", newline="") as handle:
                count = write_rows(rows, handle)
        except OSError as exc:
            raise FileError(display_name(output), f"cannot be written: {exc.strerror}") from None
    click.echo(f"Exported {count} observation(s) of {len(bodies)} VLLMService(s)", err=True)


def _name(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace", "default")), str(meta.get("name", ""))
