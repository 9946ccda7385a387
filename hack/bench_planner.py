"""Benchmark the memory model against published vLLM startup logs.

Runs the same estimate as `vllm-operator estimate` over every row of
bench/data/vllm-startup-logs.csv that has enough inputs (bench/data/row-inputs.yaml adds what a
row's notes state and marks rows that lack inputs), prints a per-row table and a summary, and
writes both to docs/planning-model.md between the BENCH markers.

    python hack/bench_planner.py [--write docs/planning-model.md]
"""

import argparse
import csv
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vllm_operator.catalog.architectures import UnknownModelError, lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu, lookup_gpu_by_memory
from vllm_operator.cli.observations import bench_inputs
from vllm_operator.planning.errors import PlanningInputError
from vllm_operator.planning.fidelity import (
    ERAS,
    KV_MARGINS,
    MIN_CELL_MODELS,
    MIN_CELL_ROWS,
    WIDEST_MARGIN,
    era_name,
    gpu_family,
    margin_for_errors,
    p90_of,
    weight_format,
)
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    GIB,
    EngineArgs,
    MemoryEstimate,
    estimate_memory,
    hybrid_layout,
    kv_bytes_per_token,
    moe_workspace_bytes,
    resolve_quantization,
)
from vllm_operator.planning.versions import DEFAULT_VLLM_VERSION, VllmVersion

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "bench" / "data" / "vllm-startup-logs.csv"
INPUTS = ROOT / "bench" / "data" / "row-inputs.yaml"
BEGIN, END = "<!-- BENCH:BEGIN -->", "<!-- BENCH:END -->"

_GPU_NAMES = [
    ("H100", "NVIDIA-H100-80GB-HBM3"),
    ("H200", "NVIDIA-H200"),
    ("A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
    ("A100 40GB", "NVIDIA-A100-SXM4-40GB"),
    ("A100 80GB", "NVIDIA-A100-SXM4-80GB"),
    ("L40S", "NVIDIA-L40S"),
    ("L4", "NVIDIA-L4"),
    ("T4", "Tesla-T4"),
    ("3090", "NVIDIA-GeForce-RTX-3090"),
    ("4090", "NVIDIA-GeForce-RTX-4090"),
    ("A6000", "NVIDIA-RTX-A6000"),
]


@dataclass
class Result:
    row: int
    model: str
    version: str
    gpu: str
    tp: int
    answered: bool
    reason: str = ""
    weights_pred: float | None = None
    weights_log: float | None = None
    kv_pred: float | None = None
    kv_log: float | None = None
    kv_unit: str = "GiB"
    kind: str = ""
    family: str = "not in catalog"
    gpu_family: str = "unknown"
    fmt: str = "unknown"
    failure_logged: bool = False
    failure_predicted: bool | None = None
    ledger_log: dict[str, float] | None = None
    ledger_pred: dict[str, float] | None = None
    budget: float | None = None
    kv_logged: float | None = None
    terms: dict[str, float] | None = None
    kv_not_scored: str = ""  # why the row's logged KV cache is reported but not scored

    @property
    def weights_err(self) -> float | None:
        if self.weights_pred is None or not self.weights_log:
            return None
        return 100.0 * (self.weights_pred - self.weights_log) / self.weights_log

    @property
    def kv_err(self) -> float | None:
        if self.kv_pred is None or not self.kv_log or self.kv_log <= 0:
            return None
        return 100.0 * (self.kv_pred - self.kv_log) / self.kv_log


def _num(text: str) -> float | None:
    text = (text or "").strip()
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _version(text: str) -> str | None:
    match = re.search(r"\d+\.\d+\.\d+(?:\.post\d+|\.\d+)?", text or "")
    return match.group(0) if match else None


def _quant(text: str) -> str | None:
    t = (text or "").strip().lower()
    if not t or t == "none":
        return None
    return t.split()[0]


def _gpu_label(name: str) -> str | None:
    for needle, label in _GPU_NAMES:
        if needle.upper() in name.upper():
            return label
    return None


_ERAS = ERAS


def era_of(version: str) -> str:
    """The era bucket a release falls in ('unknown' when the row states none)."""
    return era_name(version)


def gpu_family_of(cc: tuple[int, int] | None) -> str:
    return gpu_family(cc)


def run_row(index: int, row: dict[str, str], extra: dict[str, Any]) -> Result:
    extra = {**bench_inputs(row), **extra}  # a row of `observations export` carries its own
    model = str(extra.get("model") or re.sub(r"\s*\(.*\)$", "", row["model_id"]).strip())
    version = str(extra.get("version") or _version(row["vllm_version"]) or "")
    base = Result(row=index, model=model, version=version or "?", gpu="", tp=1, answered=False)
    base.failure_logged = bool(extra.get("startup_failure"))
    if "ledger" in extra:
        base.ledger_log = {k: float(v) for k, v in extra["ledger"].items()}
    total_logged, util_logged = _num(row["gpu_total_gib"]), _num(row["gpu_memory_utilization"])
    if total_logged and util_logged:
        base.budget = total_logged * util_logged
    base.kv_logged = _num(row["kv_cache_gib"])
    if "skip" in extra:
        base.reason = str(extra["skip"])
        return base
    if not version:
        base.reason = "vLLM version not stated"
        return base
    try:
        arch = lookup_architecture(model)
    except UnknownModelError as exc:
        base.reason = str(exc).split(". Supply")[0]
        return base
    if "hf_overrides" in extra:  # `--hf-overrides` of the row's command, as vLLM applies it
        arch = arch.model_copy(update=dict(extra["hf_overrides"]))
    base.kind = arch.kind + (" +vision" if arch.is_multimodal else "")
    base.family = ("MoE " if arch.is_moe and "MoE" not in arch.kind else "") + base.kind
    if "gpu_memory_mib" in extra:
        cc = extra.get("compute_capability")  # a card the catalog lacks, named by its log
        facts = lookup_gpu_by_memory(
            int(extra["gpu_memory_mib"]),
            compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
        )
    else:
        label = extra.get("gpu") or _gpu_label(row["gpu_name"])
        if label is None:
            base.reason = f"GPU {row['gpu_name']!r} not mapped to a product label"
            return base
        facts = lookup_gpu(str(label))
    total = extra.get("gpu_total_gib") or _num(row["gpu_total_gib"])
    gpu = gpu_memory(facts, total_gib=float(total) if total else None)
    base.gpu = facts.label
    base.gpu_family = gpu_family_of(facts.compute_capability)
    tp = int(_num(row["num_gpus_tp"]) or 1)
    base.tp = tp
    eager = row["enforce_eager"].strip().lower() == "true"
    dtype = row["dtype"].strip() or "auto"
    args = EngineArgs(
        tensor_parallel_size=tp,
        pipeline_parallel_size=int(_num(row["pp_size"]) or 1),
        gpu_memory_utilization=extra.get("gpu_memory_utilization")
        or _num(row["gpu_memory_utilization"]),
        max_model_len=int(_num(row["max_model_len"]) or 0) or None,
        max_num_seqs=extra.get("max_num_seqs") or (int(_num(row["max_num_seqs"]) or 0) or None),
        max_num_batched_tokens=extra.get("max_num_batched_tokens"),
        block_size=int(_num(row["block_size"]) or 0) or None,
        dtype=dtype,
        quantization=_quant(row["quantization"]),
        kv_cache_dtype=(row["kv_cache_dtype"].strip() or "auto"),
        enforce_eager=eager,
        vllm_version=version or DEFAULT_VLLM_VERSION,
        optional_kernels=not extra.get("bare_pip"),
        speculative_method=extra.get("speculative_method"),
        num_speculative_tokens=int(extra.get("num_speculative_tokens") or 0),
        attention_backend=extra.get("attention_backend"),
        expandable_segments=bool(extra.get("expandable_segments")),
    )
    try:
        est: MemoryEstimate = estimate_memory(arch, gpu, args)
        base.fmt = weight_format(resolve_quantization(arch, args.quantization))
    except PlanningInputError as exc:
        base.reason = f"rejected: {exc}"
        return base
    base.answered = True
    # vLLM 0.33 counts the persistent fused-MoE workspace as consumed memory (memory.py
    # moe_workspace_bytes); the model carries it in its activation term, the ledger moves it.
    moe_ws = moe_workspace_bytes(arch, est.args) / GIB
    base.ledger_pred = {
        "consumed": est.weights_gib + est.draft_weights_gib + est.non_torch_gib + moe_ws,
        "peak": est.activation_peak_gib
        - moe_ws
        + (est.cuda_graph_gib if est.cuda_graph_subtracted else 0.0),
        "kv": est.kv_cache_gib,
    }
    base.terms = {
        "budget": est.budget_gib,
        "weights": est.weights_gib + est.draft_weights_gib + est.lora_gib,
        "non_torch": est.non_torch_gib,
        "activation": est.activation_peak_gib,
        "graphs": est.cuda_graph_gib,
        "graphs_budgeted": float(est.cuda_graph_subtracted),
    }
    base.weights_pred = est.weights_gib
    base.weights_log = _num(row["weights_gib"])
    base.failure_predicted = not est.fits or bool(est.startup_warnings)
    if extra.get("weights_only"):
        return base
    if extra.get("kv_not_scored"):
        # a start whose KV figure measures something besides vLLM on its own GPU (e.g. another
        # process's memory entering the profile): its weights are scored, its KV reported
        base.kv_not_scored = str(extra["kv_not_scored"])
        return base
    kv_gib = _num(row["kv_cache_gib"])
    if kv_gib is not None and kv_gib <= 0:
        base.kv_pred, base.kv_log = est.kv_cache_gib, kv_gib  # a verdict row, no % error
    elif kv_gib and not extra.get("score_in_tokens"):
        base.kv_pred, base.kv_log = est.kv_cache_gib, kv_gib
    else:
        tokens = _num(row["kv_cache_tokens"])
        blocks = _num(row["gpu_blocks"])
        logged = tokens or (blocks * (args.block_size or 16) if blocks else None)
        if logged and not extra.get("tokens_not_comparable"):
            base.kv_pred, base.kv_log, base.kv_unit = float(est.kv_cache_tokens), logged, "tokens"
    if base.weights_log is None and base.kv_log is None:
        base.answered = False
        base.reason = "row logs neither weights nor KV cache"
    return base


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f} %"


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    return f"{value:,.0f} tok" if unit == "tokens" else f"{value:.2f}"


def _p90(values: list[float]) -> float:
    return p90_of(values)


def bytes_per_token_check(inputs: dict[int, dict[str, Any]]) -> list[str]:
    """Structural check of the KV formula on every row that logs both KV GiB and tokens,
    answered or not (it needs no GPU, util or version): implied bytes/token/GPU vs the model."""
    lines = [
        "| row | model | TP | PP | implied B/token/GPU | model B/token/GPU | err |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    with LOGS.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for index, row in enumerate(rows):
        extra = inputs.get(index, {})
        kv, tokens = _num(row["kv_cache_gib"]), _num(row["kv_cache_tokens"])
        if not kv or not tokens or extra.get("tokens_not_comparable"):
            continue
        model = str(extra.get("model") or re.sub(r"\s*\(.*\)$", "", row["model_id"]).strip())
        try:
            arch = lookup_architecture(model)
        except UnknownModelError:
            continue
        tp = int(_num(row["num_gpus_tp"]) or 1)
        pp = int(_num(row["pp_size"]) or 1)
        kv_bytes = 1 if row["kv_cache_dtype"].strip().startswith("fp8") else 2
        layers = -(-arch.num_hidden_layers // pp)
        if arch.is_hybrid:
            lines.append(_hybrid_token_check(index, model, row, extra, arch, tp, kv_bytes, kv))
            continue
        ours = kv_bytes_per_token(arch, tp=tp, layers=layers, kv_dtype_bytes=kv_bytes)
        implied = kv * GIB / tokens
        err = 100.0 * (ours - implied) / implied
        lines.append(
            f"| {index} | {model} | {tp} | {pp} | {implied:,.0f} | {ours:,} | {err:+.1f} % |"
        )
    return lines


def _hybrid_token_check(
    index: int,
    model: str,
    row: dict[str, str],
    extra: dict[str, Any],
    arch: Any,
    tp: int,
    kv_bytes: int,
    kv_gib: float,
) -> str:
    """A hybrid's logged KV GiB through vLLM's hybrid layout (block size, groups, state pages
    per sequence) to tokens, against the logged token count: the state-page rule, exactly."""
    version = str(extra.get("version") or _version(row["vllm_version"]) or DEFAULT_VLLM_VERSION)
    label = extra.get("gpu") or _gpu_label(row["gpu_name"])
    cc = lookup_gpu(str(label)).compute_capability if label else None
    layout = hybrid_layout(
        arch,
        tp=tp,
        layers=arch.num_hidden_layers,
        kv_dtype_bytes=kv_bytes,
        model_dtype="bfloat16",
        block_size=16,
        version=VllmVersion.parse(version),
        compute_capability=cc,
    )
    max_len = int(_num(row["max_model_len"]) or arch.max_position_embeddings or 4096)
    blocks = int(kv_gib * GIB // layout.bytes_per_block)
    ours = int(blocks / layout.blocks_per_request(max_len) * max_len)
    logged = int(_num(row["kv_cache_tokens"]) or 0)
    err = 100.0 * (ours - logged) / logged
    return (
        f"| {index} | {model} (hybrid: block {layout.block_size}, {blocks} blocks, "
        f"{layout.blocks_per_request(max_len)} per sequence) | {tp} | 1 | {logged:,} tok | "
        f"{ours:,} tok | {err:+.1f} % |"
    )


TARGETS = "targets (issue #15): median <= 1 %, p90 <= 4 %, worst over-prediction <= +5 %"


def _stats(errs: list[float]) -> str:
    if not errs:
        return "| | | |"
    return (
        f"| {statistics.median(map(abs, errs)):.1f} % | {_p90([abs(e) for e in errs]):.1f} % | "
        f"{max(errs):+.1f} % |"
    )


def group_table(
    results: list[Result], title: str, key: Any, order: list[str] | None = None
) -> list[str]:
    """Error and coverage per group: rows in the set, rows answered, rows with a KV figure."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    lines = [
        f"| {title} | rows | answered | with KV | KV median abs err | p90 | worst over |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rank = {name: i for i, name in enumerate(order or [])}
    for name in sorted(groups, key=lambda n: (rank.get(n, len(rank)), n)):
        rs = groups[name]
        errs = [r.kv_err for r in rs if r.kv_err is not None]
        lines.append(
            f"| {name} | {len(rs)} | {sum(r.answered for r in rs)} | {len(errs)} {_stats(errs)}"
        )
    return lines


_ERA_ORDER = {name: i for i, (_, name) in enumerate(ERAS)}


def cell_errors(results: list[Result]) -> dict[tuple[str, str, str], list[float]]:
    """Signed KV errors (percent) per era x GPU family x weight format."""
    out: dict[tuple[str, str, str], list[float]] = {}
    for r in results:
        if r.kv_err is not None:
            out.setdefault((era_of(r.version), r.gpu_family, r.fmt), []).append(r.kv_err)
    return out


def cell_models(results: list[Result]) -> dict[tuple[str, str, str], set[str]]:
    """The distinct models behind each cell's KV rows."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for r in results:
        if r.kv_err is not None:
            out.setdefault((era_of(r.version), r.gpu_family, r.fmt), set()).add(r.model)
    return out


def measured_margins(results: list[Result]) -> dict[tuple[str, str, str], tuple[float, int, float]]:
    """The margin table planning/fidelity.py must hold: every cell with enough rows of enough
    distinct models."""
    models = cell_models(results)
    return {
        key: (margin_for_errors(errs), len(errs), round(_p90([abs(e) for e in errs]), 1))
        for key, errs in cell_errors(results).items()
        if len(errs) >= MIN_CELL_ROWS and len(models[key]) >= MIN_CELL_MODELS
    }


def widest_needed(results: list[Result]) -> float:
    """The widest margin any era (over all its rows) or calibrated cell needs."""
    needs = [margin for margin, _, _ in measured_margins(results).values()]
    for _, era in ERAS:
        errs = [r.kv_err for r in results if r.kv_err is not None and era_of(r.version) == era]
        if len(errs) >= MIN_CELL_ROWS:
            needs.append(margin_for_errors(errs))
    return max(needs)


def margins_literal(results: list[Result]) -> str:
    lines = [
        f"WIDEST_MARGIN = {widest_needed(results)}",
        "",
        "KV_MARGINS: dict[tuple[str, str, str], tuple[float, int, float]] = {",
    ]
    for key, (margin, rows, p90) in sorted(
        measured_margins(results).items(), key=lambda kv: (_ERA_ORDER.get(kv[0][0], 99), kv[0])
    ):
        lines.append(f"    {key!r}: ({margin}, {rows}, {p90}),")
    return "\n".join(lines + ["}"])


def cell_table(results: list[Result]) -> list[str]:
    """Era x GPU family x format: error, and the margin the planner applies to the cell."""
    lines = [
        "| era | GPU family | format | rows with KV | KV median abs err | p90 | worst over | "
        "margin |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    cells = cell_errors(results)
    for key in sorted(cells, key=lambda k: (_ERA_ORDER.get(k[0], 99), k)):
        errs = cells[key]
        if key in KV_MARGINS:  # what the planner applies (fidelity.py), not recomputed here
            margin = KV_MARGINS[key][0]
            worst = max(errs)
            note = "own worst over" if worst > _p90([abs(e) for e in errs]) else "own p90"
        else:
            margin, note = (
                WIDEST_MARGIN,
                (
                    f"widest (< {MIN_CELL_ROWS} rows)"
                    if len(errs) < MIN_CELL_ROWS
                    else f"widest (< {MIN_CELL_MODELS} models)"
                ),
            )
        over = " **over its margin**" if max(errs) > margin * 100 + 1e-9 else ""
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {len(errs)} {_stats(errs)} "
            f"{margin * 100:.0f} % ({note}){over} |"
        )
    return lines


def era_summary(results: list[Result], era: str) -> str:
    errs = [r.kv_err for r in results if r.kv_err is not None and era_of(r.version) == era]
    answered = [r for r in results if r.answered and era_of(r.version) == era]
    if not errs:
        return f"- era {era}: {len(answered)} answered rows, none with a KV figure"
    return (
        f"- era **{era}**: {len(answered)} answered rows, {len(errs)} with a KV figure: "
        f"median absolute error **{statistics.median(map(abs, errs)):.1f} %**, p90 "
        f"**{_p90([abs(e) for e in errs]):.1f} %**, worst over-prediction "
        f"**{max(errs):+.1f} %** (issue #28 targets: 2 %, 5 %, +5 %)"
    )


def _pair(pred: dict[str, float], log: dict[str, float], key: str) -> str:
    ours = f"{pred[key]:.2f}" if key in pred else "(unanswered)"
    return f"{ours} / {log[key]:.2f}" if key in log else ours


def ledger_table(results: list[Result]) -> list[str]:
    """vLLM's 0.27+ ledger term by term: 'consumed' is weights + non-torch, 'peak activation' is
    the profile's torch peak plus the CUDA-graph estimate (budgeted since 0.20), and the KV cache
    is what the budget leaves: budget - consumed - peak (the last column checks that identity on
    the logged figures)."""
    lines = [
        "| row | model | vLLM | GPU | budget | consumed pred / log | peak (activation + graph "
        "estimate) pred / log | KV pred / log | budget - C - P vs KV log |",
        "|---:|---|---|---|---:|---|---|---|---:|",
    ]
    for r in results:
        if r.ledger_log is None:
            continue
        log, pred = r.ledger_log, r.ledger_pred or {}
        identity = ""
        if r.budget is not None and r.kv_logged:
            identity = f"{r.budget - log['consumed'] - log['peak'] - r.kv_logged:+.2f}"

        scored_in_gib = r.kv_log and r.kv_unit == "GiB"  # a row scored in tokens has no KV GiB
        kv = f"{pred['kv']:.2f} / {r.kv_log:.2f}" if "kv" in pred and scored_in_gib else ""
        lines.append(
            f"| {r.row} | {r.model} | {r.version} | {r.gpu or '-'} | "
            f"{'' if r.budget is None else f'{r.budget:.2f}'} | {_pair(pred, log, 'consumed')} | "
            f"{_pair(pred, log, 'peak')} | {kv} | {identity} |"
        )
    return lines


def terms_table(results: list[Result], rows: set[int] | None = None) -> list[str]:
    """Per row, the model's terms beside what the row logged (``--terms``): which term is off.

    Logged columns are the CSV's (weights, non-torch, the peak, the graphs) and, for 0.27+ rows,
    the ledger's consumed / peak. A graph estimate outside the budget (before 0.20, or Model
    Runner V2 at 0.22-0.28) is shown in parentheses: it does not enter the KV figure."""
    out = [
        "| row | vLLM | GPU | budget | weights pred / log | non-torch pred / log | activation pred |"
        " graph est. pred | peak log | consumed pred / log (ledger) | KV pred / log | err |",
        "|---:|---|---|---:|---|---|---:|---:|---:|---|---|---:|",
    ]
    for r in results:
        if r.terms is None or (rows is not None and r.row not in rows):
            continue
        if rows is None and era_of(r.version) != _ERAS[0][1]:
            continue
        t = r.terms
        graphs = f"{t['graphs']:.2f}" if t["graphs_budgeted"] else f"({t['graphs']:.2f})"
        log = r.ledger_log or {}
        consumed = _pair(r.ledger_pred or {}, log, "consumed") if "consumed" in log else ""
        raw = _RAW.get(r.row, {})
        out.append(
            f"| {r.row} | {r.version} | {r.gpu} | {t['budget']:.2f} | "
            f"{t['weights']:.2f} / {raw.get('weights_gib') or '-'} | "
            f"{t['non_torch']:.2f} / {raw.get('non_torch_gib') or '-'} | {t['activation']:.2f} | "
            f"{graphs} | {log.get('peak', raw.get('activation_peak_gib') or '-')} | {consumed} | "
            f"{_fmt(r.kv_pred, r.kv_unit)} / {_fmt(r.kv_log, r.kv_unit)} | {_pct(r.kv_err)} |"
        )
    return out


_RAW: dict[int, dict[str, str]] = {}


def _verdict(r: Result) -> str:
    if r.failure_predicted is None:
        return ""
    if r.failure_logged:
        return "fails: right" if r.failure_predicted else "fails: **missed**"
    return "**false failure**" if r.failure_predicted else ""


def render(results: list[Result]) -> str:
    lines = [
        "| row | model | kind | vLLM | GPU | TP | weights pred / log GiB | err | "
        "KV pred / log (GiB or tokens) | err | startup |",
        "|---:|---|---|---|---|---:|---|---:|---|---:|---|",
    ]
    for r in results:
        if not r.answered:
            continue
        w = f"{_fmt(r.weights_pred, 'GiB')} / {_fmt(r.weights_log, 'GiB')}" if r.weights_log else ""
        kv = f"{_fmt(r.kv_pred, r.kv_unit)} / {_fmt(r.kv_log, r.kv_unit)}" if r.kv_log else ""
        lines.append(
            f"| {r.row} | {r.model} | {r.kind} | {r.version} | {r.gpu} | {r.tp} | {w} | "
            f"{_pct(r.weights_err)} | {kv} | {_pct(r.kv_err)} | {_verdict(r)} |"
        )
    kv_errs = [r.kv_err for r in results if r.kv_err is not None]
    w_errs = [r.weights_err for r in results if r.weights_err is not None]
    answered = [r for r in results if r.answered]
    failures = [r for r in answered if r.failure_logged]
    right = [r for r in failures if r.failure_predicted]
    worst_over = max(kv_errs) if kv_errs else float("nan")
    summary = [
        "",
        f"- rows answered: **{len(answered)} of {len(results)}** "
        f"({len(kv_errs)} with a logged KV cache, {len(w_errs)} with logged weights)",
        f"- KV cache, all eras: median absolute error "
        f"**{statistics.median(map(abs, kv_errs)):.1f} %**, p90 "
        f"**{_p90([abs(e) for e in kv_errs]):.1f} %**, worst over-prediction "
        f"**{worst_over:+.1f} %** ({TARGETS}; the bench's own gate: 5 %, 12 %, +10 %)",
        f"- weights: median absolute error **{statistics.median(map(abs, w_errs)):.1f} %**, "
        f"p90 {_p90([abs(e) for e in w_errs]):.1f} % (target: <= 2 %)",
        f"- startup-failure verdicts: **{len(right)} of {len(failures)}** logged failures "
        "predicted; false failures: "
        f"{sum(1 for r in answered if r.failure_predicted and not r.failure_logged)}",
        "",
        era_summary(results, ERAS[0][1]),
        "",
        "By era x GPU family x weight format (the planner's KV margin per cell: the p90 or the "
        f"worst over-prediction, rounded up, at least 2 %; fewer than {MIN_CELL_ROWS} rows or "
        f"rows of fewer than {MIN_CELL_MODELS} models: "
        f"the widest margin, {WIDEST_MARGIN * 100:.0f} %):",
        "",
        *cell_table(results),
        "",
        "vLLM's 0.27+ ledger reproduced term by term (rows that quote it):",
        "",
        *ledger_table(results),
        "",
        "By era (coverage and KV error):",
        "",
        *group_table(
            results, "era", lambda r: era_of(r.version), [name for _, name in reversed(_ERAS)]
        ),
        "",
        "By GPU family:",
        "",
        *group_table(results, "GPU family", lambda r: r.gpu_family),
        "",
        "By model family:",
        "",
        *group_table(results, "model family", lambda r: r.family),
        "",
        "By weight format:",
        "",
        *group_table(results, "format", lambda r: r.fmt),
        "",
        "Rows scored on their weights only (the logged KV cache reported, not scored):",
        "",
        *[
            f"- row {r.row} ({r.model}, vLLM {r.version}, KV {_fmt(r.kv_logged, 'GiB')} logged): "
            f"{r.kv_not_scored}"
            for r in results
            if r.kv_not_scored
        ],
        "",
        "Unanswered rows:",
        "",
    ]
    for r in results:
        if not r.answered:
            summary.append(f"- row {r.row} ({r.model}, vLLM {r.version}): {r.reason}")
    return "\n".join(lines + summary) + "\n"


def summary_numbers(results: list[Result]) -> dict[str, float]:
    kv_errs = [r.kv_err for r in results if r.kv_err is not None]
    w_errs = [r.weights_err for r in results if r.weights_err is not None]
    return {
        "kv_median": statistics.median(map(abs, kv_errs)),
        "kv_p90": _p90([abs(e) for e in kv_errs]),
        "kv_worst_over": max(kv_errs),
        "weights_median": statistics.median(map(abs, w_errs)),
        "answered": float(sum(r.answered for r in results)),
    }


def run_all(extra_rows: list[Path] | None = None) -> list[Result]:
    """Every row of the bench CSV, then those of `extra_rows` (files in the same format, e.g.
    `vllm-operator observations export` output), numbered on after the bench's own."""
    inputs: dict[int, dict[str, Any]] = yaml.safe_load(INPUTS.read_text("utf-8")) or {}
    rows: list[dict[str, str]] = []
    for path in [LOGS, *(extra_rows or [])]:
        with path.open(newline="", encoding="utf-8") as handle:
            found = list(csv.DictReader(handle))
        offset = len(rows)
        rows.extend(found)
        _RAW.update({offset + i: row for i, row in enumerate(found)})
        if path is not LOGS:
            inputs.update({offset + i: {} for i in range(len(found))})
    return [run_row(i, row, inputs.get(i, {})) for i, row in enumerate(rows)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="markdown file to update between markers")
    parser.add_argument(
        "--margins", action="store_true", help="print the KV_MARGINS table for planning/fidelity.py"
    )
    parser.add_argument(
        "--terms",
        nargs="*",
        type=int,
        metavar="ROW",
        help="print the model's terms per row beside the logged ones (default: the 0.20+ rows)",
    )
    parser.add_argument(
        "--rows",
        type=Path,
        action="append",
        help="more rows in the bench's CSV format (`vllm-operator observations export`)",
    )
    opts = parser.parse_args()
    results = run_all(opts.rows)
    if opts.margins:
        print(margins_literal(results))
        return 0
    if opts.terms is not None:
        print("\n".join(terms_table(results, set(opts.terms) or None)))
        return 0
    inputs: dict[int, dict[str, Any]] = yaml.safe_load(INPUTS.read_text("utf-8")) or {}
    text = render(results)
    text += (
        "\nKV bytes per token (structural check of the KV formula; implied = logged KV GiB / "
        "logged tokens, so log rounding shows as ~0.1 %):\n\n"
        + "\n".join(bytes_per_token_check(inputs))
        + "\n"
    )
    print(text)
    if opts.write is not None:
        doc = opts.write.read_text("utf-8") if opts.write.exists() else f"{BEGIN}\n{END}\n"
        if BEGIN not in doc or END not in doc:
            doc += f"\n{BEGIN}\n{END}\n"
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        opts.write.write_text(f"{head}{BEGIN}\n{text}{END}{tail}", "utf-8")
        print(f"Wrote {opts.write}", file=sys.stderr)
    numbers = summary_numbers(results)
    ok = (
        numbers["kv_median"] <= 5
        and numbers["kv_p90"] <= 12
        and numbers["kv_worst_over"] <= 10
        and numbers["weights_median"] <= 2
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
