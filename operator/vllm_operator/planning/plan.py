"""From a VLLMService's intent to vLLM engine arguments for one GPU type (the inverse problem).

`plan_pool` is what the controller calls per GPU type: a pure function of the intent, the GPU,
the architecture and (optionally) a measured free-memory budget. It searches the smallest tensor
parallel size whose memory estimate (planning.memory, the same model `estimate` uses) holds the
requested concurrency at the P99 context, and explains every choice. When one node cannot hold it
and the intent allows more nodes per replica, it splits the model into pipeline stages, one per
node, each tensor-parallel within its node: the fewest nodes first, then the fewest GPUs
(docs/planning-model.md, "Multi-node layouts"). When nothing fits it returns Infeasible with the
reasons and concrete alternatives; it never cuts the requested context.
"""

import functools
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.engine_args import PlannedArgs
from vllm_operator.api.spec import LatencyProfile, PrefixCaching, VLLMServiceSpec
from vllm_operator.api.status import MemoryBreakdown as StatusMemory
from vllm_operator.api.status import PoolLayout as StatusLayout
from vllm_operator.api.status import PoolPlan as StatusPoolPlan
from vllm_operator.api.status import StageMemory as StatusStage
from vllm_operator.catalog.architectures import Architecture
from vllm_operator.catalog.gpus import GpuFacts
from vllm_operator.catalog.vllm.loader import flag_spec
from vllm_operator.planning.alternatives import (
    Infeasible,
    infeasible,
)
from vllm_operator.planning.errors import PlanningInputError
from vllm_operator.planning.fidelity import is_thin_cell, kv_error_margin, weight_format
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.intent import ObservedKv, PlanIntent
from vllm_operator.planning.memory import (
    UNIFIED_MEMORY_REASON,
    EngineArgs,
    GpuMemory,
    MemoryEstimate,
    StageMemory,
    cuda_graph_gib,
    estimate_memory,
    post_kv_slack_gib,
    resolve_args,
    resolve_quantization,
    sequences_at,
    v2_profile_terms,
)
from vllm_operator.planning.versions import DEFAULT_VLLM_VERSION, Engine, VllmVersion

CUDA_GRAPH_MARGIN_GIB = 0.25  # kept free beside the graphs when the version does not budget them
PROBE_MARGIN_GIB = 0.25  # kept free below a measured free-memory budget
INTERACTIVE_BATCHED_TOKENS = 2048
THROUGHPUT_BATCHED_TOKENS = 8192
MIN_BATCHED_TOKENS = 512


class MemoryBreakdown(BaseModel):
    """Expected memory on the rank that bounds the KV cache, GiB."""

    model_config = ConfigDict(extra="forbid")

    gpu_total_gib: float
    budget_gib: float
    weights_gib: float
    lora_gib: float = 0.0
    """LoRA slot buffers (apart from the weights; `--max-loras`, `--max-lora-rank` free them)."""
    draft_weights_gib: float = 0.0
    """The speculative draft's weights (`num_speculative_tokens` / `--speculative-config`)."""
    draft_kv_gib: float = 0.0
    """Of kv_cache_gib, what the draft's layers cache."""
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    cuda_graph_subtracted: bool
    kv_cache_gib: float
    kv_cache_tokens: int
    # Set when kv_cache_tokens was measured (status only: the CLI plans without observations).
    predicted_kv_cache_tokens: int | None = Field(default=None, exclude=True)
    num_gpu_blocks: int
    concurrency_at_p99: float
    budget_source: str


class Layout(BaseModel):
    """How a multi-node replica is laid out: one pipeline stage per node, each stage
    tensor-parallel over `gpus_per_node` GPUs of its node (one pod per node)."""

    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(ge=2)
    tensor_parallel_size: int = Field(ge=1)
    pipeline_parallel_size: int = Field(ge=2)
    gpus_per_node: int = Field(ge=1, description="GPUs the replica's pod uses on each node.")
    stages: list[StageMemory]

    def to_status(self) -> StatusLayout:
        return StatusLayout(
            nodes=self.nodes,
            tensor_parallel_size=self.tensor_parallel_size,
            pipeline_parallel_size=self.pipeline_parallel_size,
            gpus_per_node=self.gpus_per_node,
            stages=[
                StatusStage(
                    stage=s.stage,
                    layers=s.layers,
                    weights_gib=round(s.weights_gib, 2),
                    activation_gib=round(s.activation_gib, 2),
                    cuda_graph_gib=round(s.cuda_graph_gib, 2),
                    kv_free_gib=round(s.kv_free_gib, 2),
                    kv_cache_gib=round(s.kv_cache_gib, 2),
                    num_gpu_blocks=s.num_gpu_blocks,
                )
                for s in self.stages
            ],
        )


class PoolPlan(BaseModel):
    """Engine arguments for one GPU type, keyed by vLLM field names, with the reasons."""

    model_config = ConfigDict(extra="forbid")

    gpu_type: str
    vllm_version: str
    engine: Engine
    engine_args: PlannedArgs
    memory: MemoryBreakdown
    reasons: list[str]
    layout: Layout | None = Field(
        default=None, description="Set only for a multi-node plan (pipeline_parallel_size > 1)."
    )

    @property
    def feasible(self) -> bool:
        return True

    def to_status(self) -> StatusPoolPlan:
        """The plan as the VLLMService status stores it."""
        m = self.memory
        return StatusPoolPlan(
            engine_args=self.engine_args.to_wire(),
            memory=StatusMemory(
                gpu_total_gib=round(m.gpu_total_gib, 2),
                budget_gib=round(m.budget_gib, 2),
                weights_gib=round(m.weights_gib, 2),
                lora_gib=round(m.lora_gib, 2) if m.lora_gib else None,
                draft_weights_gib=round(m.draft_weights_gib, 2) if m.draft_weights_gib else None,
                draft_kv_cache_gib=round(m.draft_kv_gib, 2) if m.draft_kv_gib else None,
                activation_gib=round(m.activation_gib, 2),
                non_torch_gib=round(m.non_torch_gib, 2),
                cuda_graph_gib=round(m.cuda_graph_gib, 2),
                kv_cache_gib=round(m.kv_cache_gib, 2),
                kv_cache_tokens=m.kv_cache_tokens,
                predicted_kv_cache_tokens=m.predicted_kv_cache_tokens,
                concurrency_at_p99=round(m.concurrency_at_p99, 2),
                budget_source=m.budget_source,
            ),
            reasons=list(self.reasons),
            layout=self.layout.to_status() if self.layout is not None else None,
        )


PlanResult = PoolPlan | Infeasible


def _round_up(value: int, multiple: int) -> int:
    return int(math.ceil(value / multiple) * multiple)


def _tp_candidates(arch: Architecture, limit: int) -> list[int]:
    sizes = [1, 2, 4, 8, 16, 32, 64]
    return [tp for tp in sizes if tp <= limit and arch.num_attention_heads % tp == 0]


def _max_model_len(intent: PlanIntent, arch: Architecture, block: int) -> tuple[int, str]:
    limit = arch.max_position_embeddings
    if limit is not None and intent.p99_context_tokens > limit:
        raise PlanningInputError(
            "spec.workload.p99ContextTokens",
            f"{intent.p99_context_tokens} is above {arch.name}'s maximum context of {limit} "
            f"tokens; use at most {limit}",
        )
    if intent.max_context_tokens is not None:
        if limit is not None and intent.max_context_tokens > limit:
            raise PlanningInputError(
                "spec.workload.maxContextTokens",
                f"{intent.max_context_tokens} is above {arch.name}'s maximum context of "
                f"{limit} tokens; use at most {limit}",
            )
        return intent.max_context_tokens, "max_model_len = maxContextTokens (the hard cap)"
    value = _round_up(intent.p99_context_tokens, block)
    if limit is not None and value > limit:
        value = limit
    return (
        value,
        f"max_model_len = p99ContextTokens {intent.p99_context_tokens} rounded up to the block size {block}",
    )


def _utilization(
    intent: PlanIntent, gpu: GpuMemory, arch: Architecture, probe: bool
) -> tuple[float, list[str]]:
    reasons: list[str] = []
    util = intent.max_gpu_memory_utilization - intent.memory_headroom_fraction
    text = f"gpu_memory_utilization = safety ceiling {intent.max_gpu_memory_utilization}"
    if intent.memory_headroom_fraction:
        text += f" minus headroom {intent.memory_headroom_fraction}"
    reasons.append(text)
    if probe and gpu.measured_free_gib is not None:
        cap = (gpu.measured_free_gib - PROBE_MARGIN_GIB) / gpu.total_gib
        if cap < util:
            util = cap
            reasons.append(
                f"lowered to {math.floor(cap * 100) / 100} by the measured free memory "
                f"({gpu.measured_free_gib:.2f} GiB of {gpu.total_gib:.2f})"
            )
    return math.floor(util * 100 + 1e-9) / 100, reasons


def _estimate(
    arch: Architecture,
    gpu: GpuMemory,
    intent: PlanIntent,
    *,
    tp: int,
    util: float,
    max_len: int,
    seqs: int,
    batched: int | None,
    kv_dtype: str,
    dtype: str,
    pp: int = 1,
) -> MemoryEstimate:
    return estimate_memory(
        arch,
        gpu,
        EngineArgs(
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            gpu_memory_utilization=util,
            max_model_len=max_len,
            max_num_seqs=seqs,
            max_num_batched_tokens=batched,
            dtype=dtype,
            quantization=intent.quantization,
            kv_cache_dtype=kv_dtype,
            vllm_version=intent.vllm_version,
            **adapter_args(intent),
        ),
    )


def adapter_args(intent: PlanIntent) -> dict[str, Any]:
    """Speculative decoding, LoRA and multimodal profiling from the spec's extraArgs, and the
    sampler from its env, as EngineArgs fields (the plan's search and an override's recompute
    alike)."""
    a = intent.adapters
    return {
        "flashinfer_sampler": intent.flashinfer_sampler,
        "expandable_segments": intent.expandable_segments,
        "speculative_method": a.speculative_method,
        "num_speculative_tokens": a.num_speculative_tokens,
        "max_loras": a.max_loras,
        "max_lora_rank": a.max_lora_rank,
        "skip_mm_profiling": a.skip_mm_profiling,
        "language_model_only": a.language_model_only,
        "limit_mm_per_prompt": a.limit_mm_per_prompt,
        "mm_encoder_tp_mode": a.mm_encoder_tp_mode,
        "attention_backend": a.attention_backend,
        "enable_prefix_caching": False if intent.prefix_caching is PrefixCaching.DISABLED else None,
    }


def _batched_tokens(
    intent: PlanIntent, engine: Engine, chunked: bool, max_len: int, seqs: int
) -> int | None:
    """None: V0 without chunked prefill, where vLLM requires max(max_model_len, 2048)."""
    if engine is Engine.V0 and not chunked:
        return None
    wanted = (
        THROUGHPUT_BATCHED_TOKENS
        if intent.latency_profile is LatencyProfile.THROUGHPUT
        else INTERACTIVE_BATCHED_TOKENS
    )
    return max(wanted, seqs)  # vLLM: max_num_batched_tokens >= max_num_seqs


def kv_reserve(est: MemoryEstimate, margin: float) -> float:
    """The share of this candidate's predicted KV cache a plan holds back: the model's measured
    error (`margin`, planning/fidelity.py), or what a cold first compile may keep of it
    (MemoryEstimate.compile_segment_gib: a pod's first start must hold the target either way),
    whichever is larger. None of it when `margin` is 0: a plan that trusts the model exactly, or
    an engine's own measurement."""
    if margin <= 0.0:
        return 0.0
    if est.kv_cache_gib <= 0.0:
        return margin
    return min(1.0, max(margin, est.compile_segment_gib / est.kv_cache_gib))


def _reserve_why(est: MemoryEstimate, margin: float, why: str) -> str:
    """`why` of the margin, with the first compile's table named when it sets the reserve."""
    if kv_reserve(est, margin) <= margin:
        return why
    return (
        f"{why}; more for a cold first compile, which may keep the {est.compile_segment_gib:.2f} "
        "GiB embedding table copy its benchmark allocates as consumed memory"
    )


def _fits(est: MemoryEstimate, intent: PlanIntent, margin: float = 0.0) -> bool:
    """vLLM starts and the KV cache holds the target, after taking the plan's reserve (kv_reserve:
    the model's own measured error, or a cold first compile's table) off the predicted tokens."""
    usable = sequences_at(est, intent.p99_context_tokens) * (1.0 - kv_reserve(est, margin))
    return est.fits and usable >= intent.concurrency


def _observed(
    est: MemoryEstimate, intent: PlanIntent, *, any_batch: bool = False
) -> ObservedKv | None:
    """The observation measured for this candidate's configuration, if any (exact memory-relevant
    arguments; at most the observed run's sequences and prefill chunk, unless `any_batch`)."""
    a = est.args
    for obs in intent.observations:
        if (
            _same_version(obs.vllm_version, intent.vllm_version)
            and obs.tensor_parallel_size == a.tensor_parallel_size
            and obs.max_model_len == a.max_model_len
            and math.isclose(obs.gpu_memory_utilization, a.gpu_memory_utilization, abs_tol=1e-9)
            and obs.block_size in (None, a.block_size)
            and obs.kv_cache_dtype == a.kv_cache_dtype
            and obs.dtype == a.dtype
            and obs.quantization == intent.quantization
            and not obs.enforce_eager  # the planner never plans eager mode
            and a.max_num_seqs <= obs.max_num_seqs
            and (
                any_batch
                or obs.max_num_batched_tokens is None
                or a.max_num_batched_tokens <= obs.max_num_batched_tokens
            )
        ):
            return obs
    return None


def _same_version(a: str, b: str) -> bool:
    try:
        return VllmVersion.parse(a).key() == VllmVersion.parse(b).key()
    except ValueError:
        return a.strip() == b.strip()


def _with_observation(est: MemoryEstimate, obs: ObservedKv) -> MemoryEstimate:
    """The estimate with the engine's measured KV capacity in place of the model's.

    The engine started with these arguments and reported its capacity, so the configuration fits.
    """
    tokens = obs.kv_cache_tokens
    ratio = tokens / est.kv_cache_tokens if est.kv_cache_tokens > 0 else 1.0
    return est.model_copy(
        update={
            "kv_cache_tokens": tokens,
            "num_gpu_blocks": tokens // est.args.block_size,
            "kv_cache_gib": est.kv_cache_gib * ratio if ratio != 1.0 else est.kv_cache_gib,
            "max_concurrency": tokens / est.args.max_model_len,
            "fits": True,
        }
    )


def observation_used(est: MemoryEstimate, intent: PlanIntent) -> ObservedKv | None:
    """The observation whose capacity `est` carries (None: the memory model's prediction)."""
    obs = _observed(est, intent)
    return obs if obs is not None and obs.kv_cache_tokens == est.kv_cache_tokens else None


def _search(
    arch: Architecture,
    gpu: GpuMemory,
    intent: PlanIntent,
    *,
    util: float,
    max_len: int,
    dtype: str,
    kv_dtype: str,
    tp_limit: int,
    margin: float = 0.0,
    only_tp: int | None = None,
    pp: int = 1,
) -> tuple[MemoryEstimate | None, list[str], MemoryEstimate | None, MemoryEstimate | None]:
    """Smallest TP (and, if needed, a smaller prefill chunk) that fits; notes per TP tried.

    `pp` > 1: the same search for `pp` pipeline stages (nodes), TP within each node.
    A TP whose configuration an engine measured (`intent.observations`) is judged by the measured
    KV capacity, not the model's; the fourth value is the first such estimate that does not hold
    the target (the planner then lowers max_num_seqs there if no TP fits).
    """
    notes: list[str] = []
    last: MemoryEstimate | None = None
    short: MemoryEstimate | None = None

    def at(
        tp: int, batched: int | None, clamp: bool = True
    ) -> tuple[MemoryEstimate, ObservedKv | None]:
        est = _estimate(
            arch,
            gpu,
            intent,
            tp=tp,
            util=util,
            max_len=max_len,
            seqs=intent.concurrency,
            batched=batched,
            kv_dtype=kv_dtype,
            dtype=dtype,
            pp=pp,
        )
        loose = _observed(est, intent, any_batch=True) if intent.observations else None
        if (
            clamp
            and loose is not None
            and loose.max_num_batched_tokens is not None
            and est.args.max_num_batched_tokens > loose.max_num_batched_tokens >= intent.concurrency
        ):
            # The observed run used a smaller prefill chunk: keep it, so its capacity holds.
            return at(tp, loose.max_num_batched_tokens, clamp=False)
        obs = _observed(est, intent) if loose is not None else None
        return (_with_observation(est, obs), obs) if obs is not None else (est, None)

    for tp in _tp_candidates(arch, tp_limit):
        if only_tp is not None and tp != only_tp:
            continue
        label = f"TP={tp}" if pp == 1 else f"TP={tp} PP={pp} ({pp} nodes)"
        probe = _estimate(
            arch,
            gpu,
            intent,
            tp=tp,
            util=util,
            max_len=max_len,
            seqs=intent.concurrency,
            batched=None,
            kv_dtype=kv_dtype,
            dtype=dtype,
            pp=pp,
        )
        batched = _batched_tokens(
            intent, probe.engine, probe.args.enable_chunked_prefill, max_len, intent.concurrency
        )
        est, obs = at(tp, batched)
        while (
            obs is None
            and not _fits(est, intent, margin)
            and batched is not None
            and batched // 2 >= max(MIN_BATCHED_TOKENS, intent.concurrency)
        ):
            batched //= 2  # a smaller prefill chunk shrinks the activation peak
            est, obs = at(tp, batched)
        conc = sequences_at(est, intent.p99_context_tokens)
        measured = " (measured by the engine)" if obs is not None else ""
        if est.kv_cache_gib <= 0:
            notes.append(
                f"{label}: weights ({est.weights_gib:.2f} GiB per GPU"
                + (f", LoRA slots {est.lora_gib:.2f} GiB" if est.lora_gib else "")
                + (f", draft {est.draft_weights_gib:.2f} GiB" if est.draft_weights_gib else "")
                + ") leave no room for the KV cache"
            )
        else:
            notes.append(
                f"{label} fits {conc:.1f} sequences of {intent.p99_context_tokens} "
                f"tokens{measured} (target {intent.concurrency})"
            )
        last = est
        if _fits(est, intent, 0.0 if obs is not None else margin):
            return est, notes, last, short
        if obs is not None and short is None:
            short = est
    return None, notes, last, short


def plan_pool(
    intent: PlanIntent,
    gpu_facts: GpuFacts,
    arch: Architecture,
    *,
    measured_free_mib: float | None = None,
    other_gpus: tuple[GpuFacts, ...] = (),
    alternatives: bool = True,
) -> PlanResult:
    """Engine arguments for one GPU type, or Infeasible with reasons and alternatives.

    `measured_free_mib`: free memory an NVML probe measured on this GPU type (a later issue);
    when given it caps gpu_memory_utilization and the breakdown records it as the budget source.
    `alternatives=False`: an Infeasible without alternatives, for a caller that only asks
    whether the intent fits (another GPU type's alternative), sparing their searches.
    """
    gpu = gpu_memory(gpu_facts, measured_free_mib=measured_free_mib)
    version = intent.vllm_version
    try:
        resolved, sem, notes = resolve_args(
            EngineArgs(
                dtype=intent.dtype,
                quantization=intent.quantization,
                vllm_version=version,
                max_model_len=None,
                **adapter_args(intent),
            ),
            arch.model_copy(update={"max_position_embeddings": None}),
            gpu,
        )
        block = resolved.block_size
        max_len, len_reason = _max_model_len(intent, arch, block)
    except PlanningInputError as exc:
        return Infeasible(
            gpu_type=gpu_facts.label, vllm_version=version, reasons=[str(exc)], usage_error=True
        )
    dtype = resolved.dtype
    util, util_reasons = _utilization(intent, gpu, arch, measured_free_mib is not None)
    v2_outside = sem.subtracts_cuda_graphs and v2_profile_terms(
        arch, resolved, resolve_quantization(arch, intent.quantization)
    )
    if not sem.subtracts_cuda_graphs or v2_outside:
        # Before 0.20 graphs are captured after the KV cache and must fit in (1 - util) x total;
        # so do they on Model Runner V2 before 0.29 (memory.v2_profile_terms).
        tp_guess = 2  # worst case: the TP > 1 share of graph memory included
        layers = arch.num_hidden_layers
        cg = cuda_graph_gib(
            arch,
            resolved.model_copy(
                update={"max_num_seqs": intent.concurrency, "tensor_parallel_size": tp_guess}
            ),
            layers,
        )
        need = (cg + CUDA_GRAPH_MARGIN_GIB) / gpu.total_gib
        if 1 - util < need:
            util = math.floor((1 - need) * 100) / 100
            util_reasons.append(
                f"lowered to {util} so CUDA graphs (~{cg:.2f} GiB, captured after the KV cache "
                f"by vLLM {version}) fit in the remaining memory"
            )
    elif (1 - util) * gpu.total_gib < post_kv_slack_gib(1):
        # From 0.20 the graphs' estimate is budgeted, but capture and warm-up still allocate
        # after the KV cache, outside it (memory.POST_KV_SLACK_GIB).
        util = math.floor((1 - post_kv_slack_gib(1) / gpu.total_gib) * 100) / 100
        util_reasons.append(
            f"lowered to {util} to leave {post_kv_slack_gib(1):.2f} GiB outside the budget for "
            f"what vLLM {version} allocates after the KV cache (graph capture, sampler warm-up)"
        )
    # Every search of this pool: same GPU budget, model length and dtype; the default KV dtype
    # and TP limit unless a call says otherwise (alternatives try fp8 KV or a larger TP).
    search_pool = functools.partial(
        _search,
        arch,
        gpu,
        intent,
        util=util,
        max_len=max_len,
        dtype=dtype,
        kv_dtype="auto",
        tp_limit=intent.max_gpus_per_replica,
    )
    est, tp_notes, last, short = search_pool()
    pp = 1
    if est is None and intent.max_nodes_per_replica > 1:
        # Fewest nodes first, then (inside _search) the fewest GPUs per node: a stage never
        # spans nodes, so TP stays within maxGPUsPerReplica (the node's GPUs) on every node.
        for nodes in range(2, min(intent.max_nodes_per_replica, arch.num_hidden_layers) + 1):
            est, pp_notes, _, _ = search_pool(pp=nodes)
            tp_notes += pp_notes
            if est is not None:
                pp = nodes
                break
    quant = resolve_quantization(arch, intent.quantization)
    margin, margin_why = kv_error_margin(version, arch, gpu_facts.compute_capability, quant)
    thin_cell = is_thin_cell(version, gpu_facts.compute_capability, weight_format(quant))
    fidelity: list[str] = []
    within_error = False
    lowered_by_observation = False
    if est is None and short is not None:
        # What the engine measured holds fewer sequences than the target and no TP fits: serve
        # what it holds (never promise more), and say how to reach the target.
        est = _lower_seqs(arch, gpu, intent, short)
        lowered_by_observation = True
    observed = observation_used(est, intent) if est is not None else None
    if est is not None and margin > 0 and observed is None:
        # The margin may cost a smaller prefill chunk at the same TP, never more GPUs.
        safe, *_ = search_pool(margin=margin, only_tp=est.args.tensor_parallel_size, pp=pp)
        fidelity = _fidelity_reasons(safe, est, intent, margin, margin_why, thin_cell)
        within_error = safe is None
        est = safe or est
    if est is None and not alternatives:
        return Infeasible(gpu_type=gpu_facts.label, vllm_version=version, reasons=notes + tp_notes)
    if est is None:

        def search(
            arch: Architecture, intent: PlanIntent, dtype: str, kv_dtype: str, tp_limit: int
        ) -> MemoryEstimate | None:
            # As the plan itself searches: one node, then up to maxNodesPerReplica stages.
            for nodes in range(1, min(intent.max_nodes_per_replica, arch.num_hidden_layers) + 1):
                found = _search(
                    arch,
                    gpu,
                    intent,
                    util=util,
                    max_len=max_len,
                    dtype=dtype,
                    kv_dtype=kv_dtype,
                    tp_limit=tp_limit,
                    pp=nodes,
                )[0]
                if found is not None:
                    return found
            return None

        return infeasible(
            intent,
            gpu_facts,
            arch,
            dtype=dtype,
            search=search,
            plan_other=lambda other: _fit_elsewhere(intent, other, arch),
            notes=notes + tp_notes,
            last=last,
            other_gpus=other_gpus,
            more_nodes=lambda nodes: search_pool(pp=nodes)[0],
        )
    conc = sequences_at(est, intent.p99_context_tokens)
    promised = conc * (1.0 - kv_reserve(est, margin)) if within_error else conc
    predicted: int | None = None
    if observed is not None:
        predicted = _estimate(
            arch,
            gpu,
            intent,
            tp=est.args.tensor_parallel_size,
            util=est.args.gpu_memory_utilization,
            max_len=est.args.max_model_len,
            seqs=est.args.max_num_seqs,
            batched=est.args.max_num_batched_tokens,
            kv_dtype=est.args.kv_cache_dtype,
            dtype=est.args.dtype,
            pp=pp,
        ).kv_cache_tokens
    seqs_reason = (
        f"max_num_seqs = concurrency target {intent.concurrency}; {conc:.1f} sequences of "
        f"{intent.p99_context_tokens} tokens fit"
    )
    if lowered_by_observation:
        scale = math.ceil(intent.concurrency / est.args.max_num_seqs)
        seqs_reason = (
            f"max_num_seqs lowered to {est.args.max_num_seqs}, below the concurrency target "
            f"{intent.concurrency}: the measured KV cache holds only {conc:.1f} sequences of "
            f"{intent.p99_context_tokens} tokens and no tensor parallel size up to "
            f"{intent.max_gpus_per_replica} holds the target; about {scale}x the replicas "
            "(spec.replicas or remediation.maxReplicas) serve it"
        )
    if intent.prefix_caching is PrefixCaching.AUTO:
        prefix = est.engine is Engine.V1  # DM §3: on by default whenever V1 runs (0.8+)
        prefix_reason = (
            f"enable_prefix_caching = {str(prefix).lower()} (vLLM {version} {est.engine} default)"
        )
    else:
        prefix = intent.prefix_caching is PrefixCaching.ENABLED
        prefix_reason = (
            f"enable_prefix_caching = {str(prefix).lower()} (spec.workload.prefixCaching)"
        )
    args = est.args
    layout_reasons = [
        f"tensor_parallel_size = {args.tensor_parallel_size}: the smallest that holds the target"
    ]
    layout: Layout | None = None
    if pp > 1:
        layout = Layout(
            nodes=pp,
            tensor_parallel_size=args.tensor_parallel_size,
            pipeline_parallel_size=pp,
            gpus_per_node=args.tensor_parallel_size,
            stages=est.stages,
        )
        layout_reasons = _layout_reasons(intent, est, pp)
    reasons = [
        *notes,
        *(tp_notes if len(tp_notes) > 1 else []),
        *(
            [
                f"tensor_parallel_size = {args.tensor_parallel_size}: the size the engine's "
                "capacity was measured at"
            ]
            if lowered_by_observation
            else layout_reasons
        ),
        *util_reasons,
        len_reason,
        *([_observation_reason(observed, predicted)] if observed is not None else []),
        seqs_reason,
        f"max_num_batched_tokens = {args.max_num_batched_tokens} ({intent.latency_profile.value}"
        + (
            ", halved to fit memory"
            if args.max_num_batched_tokens < _batched_default(intent) and est.engine is Engine.V1
            else ""
        )
        + ")",
        f"dtype = {args.dtype}"
        + (
            " (GPU has no bfloat16)"
            if args.dtype == "float16" and arch.torch_dtype == "bfloat16"
            else ""
        ),
        "kv_cache_dtype = auto (the model dtype)",
        prefix_reason,
        *fidelity,
        *[r for r in est.reasons if "sliding-window" in r or r == UNIFIED_MEMORY_REASON],
        *est.startup_warnings,
    ]
    engine_args = PlannedArgs(
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=pp if pp > 1 else None,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=rendered_block_size(arch, version, args.block_size),
        dtype=args.dtype,
        kv_cache_dtype=args.kv_cache_dtype,
        quantization=intent.quantization,
        enable_prefix_caching=prefix,
        enforce_eager=False,
    )
    return PoolPlan(
        gpu_type=gpu_facts.label,
        vllm_version=version,
        engine=est.engine,
        engine_args=engine_args,
        memory=MemoryBreakdown(
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
            kv_cache_gib=est.kv_cache_gib,
            kv_cache_tokens=est.kv_cache_tokens,
            predicted_kv_cache_tokens=predicted,
            num_gpu_blocks=est.num_gpu_blocks,
            concurrency_at_p99=round(promised, 2),
            budget_source="probe" if measured_free_mib is not None else "catalog",
        ),
        reasons=reasons,
        layout=layout,
    )


def _lower_seqs(
    arch: Architecture, gpu: GpuMemory, intent: PlanIntent, short: MemoryEstimate
) -> MemoryEstimate:
    """`short` (an observed configuration below the target) with max_num_seqs cut to the
    sequences of P99 context its measured KV cache holds; fewer sequences keep the observation
    valid (they never leave vLLM less KV), so the measured capacity still applies."""
    a = short.args
    seqs = max(1, math.floor(sequences_at(short, intent.p99_context_tokens)))
    est = _estimate(
        arch,
        gpu,
        intent,
        tp=a.tensor_parallel_size,
        util=a.gpu_memory_utilization,
        max_len=a.max_model_len,
        seqs=seqs,
        batched=a.max_num_batched_tokens,
        kv_dtype=a.kv_cache_dtype,
        dtype=a.dtype,
        pp=a.pipeline_parallel_size,
    )
    obs = _observed(est, intent)
    return _with_observation(est, obs) if obs is not None else short


def _observation_reason(obs: ObservedKv, predicted: int | None) -> str:
    at = obs.observed_at.isoformat().replace("+00:00", "Z")
    text = (
        f"KV capacity from observation: {obs.kv_cache_tokens} tokens measured by vLLM "
        f"{obs.vllm_version} at {at} ({obs.source})"
    )
    if predicted:
        dev = (obs.kv_cache_tokens - predicted) / predicted * 100
        text += f"; the memory model predicted {predicted} ({dev:+.1f} %)"
    return text


def _layout_reasons(intent: PlanIntent, est: MemoryEstimate, pp: int) -> list[str]:
    """Why this multi-node layout: one node was not enough, how vLLM splits the layers, and
    which stage bounds the KV cache (vLLM gives every rank the smallest block count)."""
    tp = est.args.tensor_parallel_size
    split = ", ".join(str(s.layers) for s in est.stages)
    tight = min(est.stages, key=lambda s: s.num_gpu_blocks)
    return [
        f"one node does not hold the target with up to {intent.max_gpus_per_replica} GPUs; "
        f"spec.placement.maxNodesPerReplica {intent.max_nodes_per_replica} allows more",
        f"tensor_parallel_size = {tp} within each node, pipeline_parallel_size = {pp} across "
        f"{pp} nodes ({tp * pp} GPUs): the fewest nodes, then the fewest GPUs, that hold the "
        "target",
        f"layers per stage {split} (vLLM get_pp_indices); embeddings on stage 0, final norm, "
        f"lm_head and sampler on stage {pp - 1}",
        f"KV cache bounded by stage {tight.stage} ({tight.num_gpu_blocks} blocks): vLLM gives "
        "every stage the smallest block count",
    ]


def _fidelity_reasons(
    with_margin: MemoryEstimate | None,
    bare: MemoryEstimate,
    intent: PlanIntent,
    margin: float,
    why: str,
    thin_cell: bool = False,
) -> list[str]:
    """Why the plan differs from one that trusts the model exactly (issue #15 item 5).

    Nothing when the margin changed nothing (but a note when the margin is the widest one,
    because the bench has too few rows for this era x GPU family x format, issue #28); a note
    when it cost a smaller prefill chunk; a warning, with the concurrency promised after the
    margin, when only the margin-less plan fits (the target then rests on the model being right
    within its error).
    """
    held = with_margin or bare
    by_compile = kv_reserve(held, margin) > margin
    why = _reserve_why(held, margin, why)
    margin = kv_reserve(held, margin)
    pct = f"{margin * 100:.0f} %"
    if with_margin is None:
        conc = sequences_at(bare, intent.p99_context_tokens)
        return [
            f"KV headroom within the model's error: {conc:.1f} sequences predicted against the "
            f"target {intent.concurrency}, but the KV prediction may be {pct} high for vLLM "
            f"{intent.vllm_version} ({why}); concurrency promised {conc * (1 - margin):.1f}"
        ]
    a, b = with_margin.args, bare.args
    if a.max_num_batched_tokens == b.max_num_batched_tokens:
        if thin_cell or by_compile:
            return [f"KV margin {pct} ({why}): the target holds with it"]
        return []
    return [
        f"KV margin {pct} ({why}): max_num_batched_tokens {a.max_num_batched_tokens} instead "
        f"of {b.max_num_batched_tokens}, so the target holds even if the KV prediction is "
        f"{pct} high"
    ]


def _batched_default(intent: PlanIntent) -> int:
    if intent.latency_profile is LatencyProfile.THROUGHPUT:
        return THROUGHPUT_BATCHED_TOKENS
    return max(INTERACTIVE_BATCHED_TOKENS, intent.concurrency)


def _fit_elsewhere(
    intent: PlanIntent, gpu: GpuFacts, arch: Architecture
) -> tuple[str, float] | None:
    """Layout ('TP=4', 'TP=8 PP=2') and concurrency at P99 of the plan on another GPU type,
    when the intent fits there."""
    # Observations belong to the GPU type they were measured on.
    result = plan_pool(
        intent.model_copy(update={"observations": ()}), gpu, arch, alternatives=False
    )
    if isinstance(result, PoolPlan):
        args = result.engine_args
        label = f"TP={args.tensor_parallel_size}"
        if args.pipeline_parallel_size is not None:
            label += f" PP={args.pipeline_parallel_size}"
        return label, result.memory.concurrency_at_p99
    return None


def rendered_block_size(arch: Architecture, version: str, block_size: int | None) -> int | None:
    """The block size to render, or None to leave it to vLLM.

    A hybrid's block size is the one vLLM aligns itself (the memory model computes it the same
    way, hybrid_layout); a release whose parser takes only a few sizes (0.11.0: 1 ... 128)
    refuses the aligned size on the command line although it runs the model with it (#26: a
    hybrid on a release that supports it was refused because of the planner's own block size).
    There it is left out, and vLLM aligns it at startup as the plan assumes.
    """
    if block_size is None or not arch.is_hybrid:
        return block_size
    spec = flag_spec(version, "--block-size")
    choices = () if spec is None or spec.choices is None else tuple(map(str, spec.choices))
    if choices and str(block_size) not in choices:
        return None
    return block_size


def draft_kv_gib(est: MemoryEstimate) -> float:
    """The part of the KV cache the speculative draft's layers take, GiB per GPU."""
    if not est.draft_kv_bytes_per_token or not est.kv_bytes_per_token:
        return 0.0
    return round(est.kv_cache_gib * est.draft_kv_bytes_per_token / est.kv_bytes_per_token, 4)


def plan_service(
    spec: VLLMServiceSpec,
    gpus: list[GpuFacts],
    arch: Architecture,
    *,
    measured_free_mib: dict[str, float] | None = None,
) -> list[PlanResult]:
    """One plan per GPU type (in the given order). `measured_free_mib` maps a GPU label to the
    free memory a probe measured there."""
    intent = PlanIntent.from_spec(spec)
    probes = measured_free_mib or {}
    return [
        plan_pool(
            intent, gpu, arch, measured_free_mib=probes.get(gpu.label), other_gpus=tuple(gpus)
        )
        for gpu in gpus
    ]


def default_version() -> str:
    return VllmVersion.parse(DEFAULT_VLLM_VERSION).text
