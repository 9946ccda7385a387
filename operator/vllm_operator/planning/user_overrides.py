"""A pool's plan with the user's own values for planner-owned flags (allowPlannerOverride).

Why: with `spec.vllm.allowPlannerOverride` a user may set a flag the planner computes
(`--max-num-seqs: "64"`). vLLM runs the user's value, so the status must show it and the memory
figures must be those of what runs, not of the plan the user replaced (issue #19: a service ran
`--max-num-seqs 64` while its status said 10). The forward memory model (`estimate_memory`, the
one `plan` searches with) recomputes the figures from the effective arguments; where a value
moves memory in a way the model does not account for (`--kv-cache-memory-bytes`,
`--cpu-offload-gb`, ...), the plan is kept but marked as no longer holding, with the reason.

Pure: every input is an argument.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from vllm_operator.api.engine_args import PlannedArgs
from vllm_operator.api.status import UserOverride
from vllm_operator.catalog.architectures import Architecture
from vllm_operator.catalog.gpus import GpuFacts
from vllm_operator.planning.errors import PlanningInputError
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.memory import KV_DTYPES_FP8, EngineArgs, estimate_memory
from vllm_operator.planning.plan import MemoryBreakdown, PoolPlan, adapter_args, draft_kv_gib

MEMORY_FIELDS = frozenset(
    {
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "gpu_memory_utilization",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
        "dtype",
        "kv_cache_dtype",
        "quantization",
        "enforce_eager",
    }
)
"""Planned fields the memory model takes (the figures are recomputed when one is overridden)."""

UNMODELLED_FIELDS: Mapping[str, str] = {
    "kv_cache_memory_bytes": "fixes the KV cache size whatever gpu_memory_utilization says",
    "num_gpu_blocks_override": "fixes the number of KV blocks whatever memory is free",
    "cpu_offload_gb": "moves part of the weights to host memory",
}
"""Planner-owned flags outside the memory model, and what each changes: a user value for one of
them means the plan's figures no longer hold."""

_NEUTRAL: Mapping[str, Any] = {"cpu_offload_gb": 0}
"""Values of UNMODELLED_FIELDS that change nothing (vLLM's defaults)."""

_MODELLED_KV_DTYPES = frozenset({"auto", "bfloat16", "float16", *KV_DTYPES_FP8})


@dataclass(frozen=True)
class OverriddenPlan:
    """The plan with the user's values: what runs, and whether the plan's figures still hold."""

    plan: PoolPlan
    overrides: tuple[UserOverride, ...] = ()
    problems: tuple[str, ...] = field(default=())
    """Why the plan no longer holds (empty: it holds, with figures recomputed if needed)."""
    unplanned: frozenset[str] = frozenset()
    """Planned fields the user set to a value the plan cannot hold (`--max-model-len auto`):
    the renderer leaves the planner's value out and renders the user's flag as written."""

    refusals: tuple[tuple[str, str], ...] = ()
    """(field path, why) of user values vLLM cannot start with on this pool (the weights or one
    max_model_len sequence do not fit, more GPUs than the pod has): the pool is refused
    (InvalidEngineConfig), never rendered."""

    @property
    def holds(self) -> bool:
        return not self.problems


def _path(flags: Mapping[str, str], name: str) -> str:
    return f"spec.vllm.extraArgs[{flags.get(name, '--' + name.replace('_', '-'))}]"


def static_override_problems(
    values: Mapping[str, Any],
    flags: Mapping[str, str],
    *,
    max_gpus_per_replica: int,
    max_nodes_per_replica: int,
) -> list[tuple[str, str]]:
    """(field path, why) of planner-owned user values no pod of this spec can start with,
    whatever the GPU: vLLM's own range for gpu_memory_utilization (CacheConfig: 0 < x <= 1) and
    max_num_seqs (SchedulerConfig: >= 1), more tensor x data parallel ranks than GPUs a replica's pod may request, and pipeline
    stages (one node each, the operator's multi-node layout) where the spec allows one node.
    """
    out: list[tuple[str, str]] = []
    util = values.get("gpu_memory_utilization")
    if util is not None and (
        isinstance(util, bool) or not isinstance(util, int | float) or not 0 < util <= 1
    ):
        out.append(
            (
                _path(flags, "gpu_memory_utilization"),
                f"{util!r} is not a fraction in (0, 1]: vLLM's CacheConfig refuses it",
            )
        )
    seqs = values.get("max_num_seqs")
    if isinstance(seqs, int) and not isinstance(seqs, bool) and seqs < 1:
        # vLLM 0.32.0 vllm/config/scheduler.py SchedulerConfig: max_num_seqs Field(ge=1); no
        # release can schedule a request with none (found by the generative oracle)
        out.append(
            (
                _path(flags, "max_num_seqs"),
                f"{seqs!r} is below 1: no request can be scheduled (vLLM's SchedulerConfig "
                "refuses it, max_num_seqs >= 1)",
            )
        )
    tp = values.get("tensor_parallel_size")
    dp = values.get("data_parallel_size")
    tp_n = tp if isinstance(tp, int) and not isinstance(tp, bool) else 1
    dp_n = dp if isinstance(dp, int) and not isinstance(dp, bool) else 1
    if dp_n > 1:
        out.append(
            (
                _path(flags, "data_parallel_size"),
                f"{dp_n} engines of tensor_parallel_size {tp_n} need {dp_n * tp_n} GPUs in one "
                f"pod; the operator's pod requests tensor_parallel_size GPUs (scale with "
                "spec.replicas instead)",
            )
        )
    elif tp_n > max_gpus_per_replica:
        out.append(
            (
                _path(flags, "tensor_parallel_size"),
                f"{tp_n} needs {tp_n} GPUs in one pod; spec.placement.maxGPUsPerReplica is "
                f"{max_gpus_per_replica}",
            )
        )
    pp = values.get("pipeline_parallel_size")
    if isinstance(pp, int) and not isinstance(pp, bool) and pp > 1 and max_nodes_per_replica < pp:
        out.append(
            (
                _path(flags, "pipeline_parallel_size"),
                f"{pp} pipeline stages run one per node; spec.placement.maxNodesPerReplica is "
                f"{max_nodes_per_replica} (raise it to {pp} for a multi-node replica)",
            )
        )
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def apply_user_values(
    plan: PoolPlan,
    values: Mapping[str, Any],
    flags: Mapping[str, str],
    *,
    intent: PlanIntent,
    arch: Architecture,
    gpu: GpuFacts,
    measured_free_mib: float | None = None,
) -> OverriddenPlan:
    """`plan` with the planned fields `values` sets replaced, its memory recomputed.

    `values`: spec.vllm.extraArgs by vLLM field name, typed (catalog.vllm.values); fields the
    planner does not own are ignored. `flags`: the extraArgs key that set each field (shown in
    status). A value equal to the plan's is no override.
    """
    planned = plan.engine_args
    wire = planned.rendered()
    changed: dict[str, Any] = {}
    overrides: list[UserOverride] = []
    for name, value in values.items():
        if name not in PlannedArgs.model_fields or _same(wire.get(name), value):
            continue
        changed[name] = value
        overrides.append(
            UserOverride(
                arg=name,
                flag=flags.get(name, "--" + name.replace("_", "-")),
                planned=wire.get(name),
                value=value,
            )
        )
    problems = [
        f"{flags.get(name, name)} {why}; the memory model does not account for it"
        for name, why in UNMODELLED_FIELDS.items()
        if name in values and not _same(values[name], _NEUTRAL.get(name))
    ]
    unplanned: set[str] = set()
    for name, value in list(changed.items()):
        try:
            PlannedArgs.model_validate({**planned.model_dump(), name: value})
        except ValidationError as exc:
            unplanned.add(name)
            del changed[name]
            problems.append(
                f"{flags.get(name, name)} {value}: the plan cannot model it "
                f"({exc.errors()[0]['msg']}); rendered as written, the figures assume "
                f"{name} = {wire.get(name)}"
            )
    if not changed:
        return OverriddenPlan(
            plan=plan,
            overrides=tuple(overrides),
            problems=tuple(problems),
            unplanned=frozenset(unplanned),
            refusals=tuple(
                static_override_problems(
                    values,
                    flags,
                    max_gpus_per_replica=intent.max_gpus_per_replica,
                    max_nodes_per_replica=intent.max_nodes_per_replica,
                )
            ),
        )
    args = PlannedArgs.model_validate({**planned.model_dump(), **changed})
    reasons = [
        f"{o.arg} = {o.value}: spec.vllm.extraArgs {o.flag} replaces the planned {o.planned} "
        "(allowPlannerOverride)"
        for o in overrides
    ]
    refusals = list(
        static_override_problems(
            values,
            flags,
            max_gpus_per_replica=intent.max_gpus_per_replica,
            max_nodes_per_replica=intent.max_nodes_per_replica,
        )
    )
    tp = args.tensor_parallel_size
    if "tensor_parallel_size" in changed and tp > intent.max_gpus_per_replica and not refusals:
        refusals.append(
            (
                _path(flags, "tensor_parallel_size"),
                f"{tp} needs {tp} GPUs of one node; the pool allows "
                f"{intent.max_gpus_per_replica} (spec.placement.maxGPUsPerReplica and the GPUs "
                "of one node): its pods cannot be scheduled",
            )
        )
    memory = plan.memory
    if changed.keys() & MEMORY_FIELDS:
        if args.kv_cache_dtype not in _MODELLED_KV_DTYPES:
            problems.append(
                f"kv_cache_dtype {args.kv_cache_dtype} is not in the memory model (modelled: "
                f"{', '.join(sorted(_MODELLED_KV_DTYPES))})"
            )
        else:
            recomputed, why, refused = _recompute(plan, args, intent, arch, gpu, measured_free_mib)
            if refused:
                memory_flags = sorted(changed.keys() & MEMORY_FIELDS)
                refusals.append((_path(flags, memory_flags[0]), refused))
            if recomputed is None:
                problems.append(why)
            else:
                memory = recomputed
                reasons.append(why)
                if recomputed.kv_cache_tokens <= 0:
                    problems.append("with these values no KV cache fits: vLLM would not start")
                elif recomputed.concurrency_at_p99 < intent.concurrency:
                    problems.append(
                        f"with these values the KV cache holds {recomputed.concurrency_at_p99:.1f} "
                        f"sequences of {intent.p99_context_tokens} tokens, below the target "
                        f"{intent.concurrency}"
                    )
                if args.max_model_len < intent.p99_context_tokens:
                    problems.append(
                        f"max_model_len {args.max_model_len} is below p99ContextTokens "
                        f"{intent.p99_context_tokens}: longer requests are refused"
                    )
    updated = plan.model_copy(
        update={"engine_args": args, "memory": memory, "reasons": [*plan.reasons, *reasons]}
    )
    return OverriddenPlan(
        plan=updated,
        overrides=tuple(overrides),
        problems=tuple(problems),
        unplanned=frozenset(unplanned),
        refusals=tuple(refusals),
    )


def _recompute(
    plan: PoolPlan,
    args: PlannedArgs,
    intent: PlanIntent,
    arch: Architecture,
    gpu: GpuFacts,
    measured_free_mib: float | None,
) -> tuple[MemoryBreakdown | None, str, str]:
    """The breakdown of `args` by the forward memory model, or None and why it cannot be; the
    third item says why vLLM would not start with `args` (empty: it would)."""
    try:
        est = estimate_memory(
            arch,
            gpu_memory(gpu, measured_free_mib=measured_free_mib),
            EngineArgs(
                tensor_parallel_size=args.tensor_parallel_size,
                pipeline_parallel_size=args.pipeline_parallel_size or 1,
                gpu_memory_utilization=args.gpu_memory_utilization,
                max_model_len=args.max_model_len,
                max_num_seqs=args.max_num_seqs,
                max_num_batched_tokens=args.max_num_batched_tokens,
                block_size=args.block_size,
                dtype=args.dtype,
                quantization=args.quantization,
                kv_cache_dtype=args.kv_cache_dtype,
                enforce_eager=args.enforce_eager,
                vllm_version=plan.vllm_version,
                **adapter_args(intent),
            ),
        )
    except (PlanningInputError, ValidationError, ValueError) as exc:
        return None, f"the memory model cannot estimate the overridden arguments: {exc}", ""
    memory = MemoryBreakdown(
        gpu_total_gib=est.gpu_total_gib,
        budget_gib=est.budget_gib,
        weights_gib=est.weights_gib,
        lora_gib=est.lora_gib,
        draft_weights_gib=est.draft_weights_gib,
        draft_kv_gib=draft_kv_gib(est),
        activation_gib=est.activation_peak_gib,
        non_torch_gib=est.non_torch_gib,
        cuda_graph_gib=est.cuda_graph_gib,
        cuda_graph_subtracted=est.cuda_graph_subtracted,
        kv_cache_gib=est.kv_cache_gib if est.fits else min(est.kv_cache_gib, 0.0),
        kv_cache_tokens=est.kv_cache_tokens if est.fits else 0,
        num_gpu_blocks=est.num_gpu_blocks if est.fits else 0,
        concurrency_at_p99=round(est.kv_cache_tokens / intent.p99_context_tokens, 2)
        if est.fits
        else 0.0,
        budget_source=plan.memory.budget_source,
    )
    refused = ""
    if not est.fits:
        refused = next(
            (r for r in est.reasons if r.startswith(("no memory left", "max_model_len "))),
            "no KV cache fits",
        )
        if "vLLM" not in refused:
            refused += ": vLLM would not start"
    return (
        memory,
        (
            f"memory recomputed with the overridden arguments: KV {memory.kv_cache_tokens} "
            f"tokens ({memory.concurrency_at_p99:.1f} x P99)"
        ),
        refused,
    )


__all__ = [
    "MEMORY_FIELDS",
    "UNMODELLED_FIELDS",
    "OverriddenPlan",
    "apply_user_values",
    "static_override_problems",
]
