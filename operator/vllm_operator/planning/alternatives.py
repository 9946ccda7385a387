"""What would make an infeasible intent fit: concrete changes, each checked by the planner.

Why apart from planning/plan.py: the search answers "what fits"; this module answers "what would
fit if one thing changed" (more GPUs, an fp8 KV cache, a quantised checkpoint, another GPU type,
fewer sequences), re-running the same search through the callables the planner hands in, so an
alternative is never suggested that the planner would then refuse.
"""

from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.catalog.architectures import Architecture, Quantization, QuantMethod
from vllm_operator.catalog.gpus import GpuFacts
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.memory import MemoryEstimate, sequences_at

MAX_TP_ONE_NODE = 8  # tensor parallelism beyond one 8-GPU node is not suggested
MAX_NODES_PER_REPLICA = 16  # the CRD's maximum of spec.placement.maxNodesPerReplica


class Search(Protocol):
    """The planner's search on one GPU: the smallest fitting estimate, or None."""

    def __call__(
        self, arch: Architecture, intent: PlanIntent, dtype: str, kv_dtype: str, tp_limit: int
    ) -> MemoryEstimate | None: ...


class AlternativeKind(StrEnum):
    LARGER_TP = "LargerTensorParallel"
    FP8_KV_CACHE = "Fp8KvCache"
    QUANTIZED_CHECKPOINT = "QuantizedCheckpoint"
    OTHER_GPU_TYPE = "OtherGpuType"
    MORE_NODES = "MoreNodesPerReplica"
    LOWER_CONCURRENCY = "LowerConcurrency"
    FEWER_LORA_SLOTS = "FewerLoraSlots"
    LOWER_LORA_RANK = "LowerLoraRank"
    FEWER_SPECULATIVE_TOKENS = "FewerSpeculativeTokens"


class Alternative(BaseModel):
    """A concrete change that makes the intent fit, with what it then supports."""

    model_config = ConfigDict(extra="forbid")

    kind: AlternativeKind
    description: str
    changes: dict[str, int | float | str] = Field(default_factory=dict)


class Infeasible(BaseModel):
    """The intent does not fit on this GPU type: why, and what would."""

    model_config = ConfigDict(extra="forbid")

    gpu_type: str
    vllm_version: str
    reasons: list[str]
    alternatives: list[Alternative] = Field(default_factory=list)
    usage_error: bool = Field(
        default=False, description="The input itself is invalid (CLI exit 2), not just too big."
    )

    @property
    def feasible(self) -> bool:
        return False


def _fewest_nodes(
    search: Callable[[int], MemoryEstimate | None], lo: int, hi: int
) -> tuple[int, MemoryEstimate] | None:
    """The fewest stages in [lo, hi] at which `search` fits.

    The largest layout is tried first: more stages never hold fewer KV tokens at the same TP
    (tests/planning/test_multinode_properties.py), so when `hi` does not fit nothing does, and a
    model that fits nowhere costs one search instead of fifteen (an infeasible pool is planned
    again whenever its inputs change). Otherwise the answer is usually a node or two more, so
    the scan goes up from `lo`.
    """
    if lo > hi:
        return None
    widest = search(hi)
    if widest is None:
        return None
    for pp in range(lo, hi):
        est = search(pp)
        if est is not None:
            return pp, est
    return hi, widest


def layout_label(est: MemoryEstimate) -> str:
    """'TP=4', or 'TP=8 PP=2' for a layout across nodes."""
    pp = est.args.pipeline_parallel_size
    tp = est.args.tensor_parallel_size
    return f"TP={tp}" if pp == 1 else f"TP={tp} PP={pp}"


def quantized_variant(arch: Architecture) -> Architecture:
    return arch.model_copy(
        update={
            "quantization": Quantization(
                method=QuantMethod.AWQ, bits=4, group_size=128, zero_point=True
            ),
            "torch_dtype": "float16",
        }
    )


def _adapter_alternatives(
    arch: Architecture, intent: PlanIntent, dtype: str, search: Search
) -> list[Alternative]:
    """The knobs that free the memory LoRA slots and a speculative draft take (`--max-loras`,
    `--max-lora-rank`, `num_speculative_tokens` of `--speculative-config`), each checked with the
    planner's own search."""
    adapters = intent.adapters
    tries: list[tuple[AlternativeKind, dict[str, int], str, dict[str, int | float | str]]] = []
    if adapters.max_loras > 1:
        tries.append(
            (
                AlternativeKind.FEWER_LORA_SLOTS,
                {"max_loras": 1},
                "spec.vllm.extraArgs --max-loras 1 (LoRA slot buffers on every layer)",
                {"--max-loras": 1},
            )
        )
    if adapters.max_loras and adapters.max_lora_rank > 8:
        rank = max(8, adapters.max_lora_rank // 2)
        tries.append(
            (
                AlternativeKind.LOWER_LORA_RANK,
                {"max_lora_rank": rank},
                f"spec.vllm.extraArgs --max-lora-rank {rank} (slot buffers grow with the rank)",
                {"--max-lora-rank": rank},
            )
        )
    if adapters.num_speculative_tokens > 1:
        tries.append(
            (
                AlternativeKind.FEWER_SPECULATIVE_TOKENS,
                {"num_speculative_tokens": 1},
                "num_speculative_tokens 1 in spec.vllm.extraArgs --speculative-config",
                {"num_speculative_tokens": 1},
            )
        )
    if adapters.num_speculative_tokens:
        tries.append(
            (
                AlternativeKind.FEWER_SPECULATIVE_TOKENS,
                {"num_speculative_tokens": 0},
                "no --speculative-config in spec.vllm.extraArgs (the draft's weights and KV)",
                {"num_speculative_tokens": 0},
            )
        )
    out: list[Alternative] = []
    for kind, update, what, changes in tries:
        changed = intent.model_copy(update={"adapters": adapters.model_copy(update=update)})
        found = search(arch, changed, dtype, "auto", intent.max_gpus_per_replica)
        if found is not None:
            out.append(
                Alternative(
                    kind=kind,
                    description=f"{what}: {layout_label(found)} fits "
                    f"{sequences_at(found, intent.p99_context_tokens):.1f} sequences",
                    changes=changes,
                )
            )
    return out


def infeasible(
    intent: PlanIntent,
    facts: GpuFacts,
    arch: Architecture,
    *,
    dtype: str,
    search: Search,
    plan_other: Callable[[GpuFacts], tuple[str, float] | None],
    notes: list[str],
    last: MemoryEstimate | None,
    other_gpus: tuple[GpuFacts, ...],
    more_nodes: Callable[[int], MemoryEstimate | None] | None = None,
) -> Infeasible:
    """The reasons the intent does not fit `facts`, and every single change that would fit.

    Each alternative is checked by running the planner's own search again with that one knob
    changed (`search`), or by planning another GPU type (`plan_other`: its layout and concurrency at
    P99 when it fits): nothing is suggested that the planner would not then accept.
    `more_nodes(pp)`: the planner's search at `pp` pipeline stages (nodes), for the fewest
    nodes beyond spec.placement.maxNodesPerReplica that would hold the target.
    """
    nodes = intent.max_nodes_per_replica
    reasons = [
        f"{intent.concurrency} sequences of {intent.p99_context_tokens} tokens do not fit on "
        f"{facts.label} with up to {intent.max_gpus_per_replica} GPUs per "
        + (f"node on up to {nodes} nodes per replica" if nodes > 1 else "replica"),
        *notes,
    ]
    if last is not None:
        reasons += [r for r in last.reasons if r not in reasons]
    alternatives: list[Alternative] = []
    bigger = search(arch, intent, dtype, "auto", MAX_TP_ONE_NODE)
    if bigger is not None and bigger.args.tensor_parallel_size > intent.max_gpus_per_replica:
        tp = bigger.args.tensor_parallel_size
        alternatives.append(
            Alternative(
                kind=AlternativeKind.LARGER_TP,
                description=f"raise spec.placement.maxGPUsPerReplica to {tp}: "
                f"{layout_label(bigger)} fits "
                f"{sequences_at(bigger, intent.p99_context_tokens):.1f} sequences",
                changes={"maxGPUsPerReplica": tp},
            )
        )
    if facts.supports_fp8_kv_cache:
        fp8 = search(arch, intent, dtype, "fp8", intent.max_gpus_per_replica)
        if fp8 is not None:
            alternatives.append(
                Alternative(
                    kind=AlternativeKind.FP8_KV_CACHE,
                    description=f"an fp8 KV cache (--kv-cache-dtype fp8, halves KV bytes; "
                    f"compute capability {facts.cc_text}): {layout_label(fp8)} fits "
                    f"{sequences_at(fp8, intent.p99_context_tokens):.1f} sequences",
                    changes={
                        "kv_cache_dtype": "fp8",
                        "tensor_parallel_size": fp8.args.tensor_parallel_size,
                    },
                )
            )
    if arch.quantization is None and intent.quantization is None:
        quant_arch = quantized_variant(arch)
        q_intent = intent.model_copy(update={"dtype": "auto"})
        q_dtype = "float16"
        q = search(
            quant_arch, q_intent, q_dtype, "auto", max(intent.max_gpus_per_replica, MAX_TP_ONE_NODE)
        )
        if q is not None:
            q_tp = q.args.tensor_parallel_size
            q_label = layout_label(q)
            raise_tp = (
                f" and spec.placement.maxGPUsPerReplica {q_tp}"
                if q_tp > intent.max_gpus_per_replica
                else ""
            )
            alternatives.append(
                Alternative(
                    kind=AlternativeKind.QUANTIZED_CHECKPOINT,
                    description=f"a 4-bit AWQ/GPTQ checkpoint of {arch.name} (spec.model.name of "
                    f"the quantised repo){raise_tp}: {q_label} fits "
                    f"{sequences_at(q, intent.p99_context_tokens):.1f} sequences",
                    changes={"quantization": "awq", "tensor_parallel_size": q_tp},
                )
            )
    for other in other_gpus:
        if other.label == facts.label:
            continue
        result = plan_other(other)
        if result is not None:
            label, concurrency = result
            alternatives.append(
                Alternative(
                    kind=AlternativeKind.OTHER_GPU_TYPE,
                    description=f"{other.label}: {label} fits {concurrency:.1f} sequences",
                    changes={"gpuType": other.label},
                )
            )
    if more_nodes is not None:
        found = _fewest_nodes(
            more_nodes, nodes + 1, min(MAX_NODES_PER_REPLICA, arch.num_hidden_layers)
        )
        if found is not None:
            pp, spread = found
            tp = spread.args.tensor_parallel_size
            alternatives.append(
                Alternative(
                    kind=AlternativeKind.MORE_NODES,
                    description=f"raise spec.placement.maxNodesPerReplica to {pp}: TP={tp} "
                    f"within each node and PP={pp} across {pp} nodes fits "
                    f"{sequences_at(spread, intent.p99_context_tokens):.1f} sequences",
                    changes={"maxNodesPerReplica": pp, "tensor_parallel_size": tp},
                )
            )
    alternatives += _adapter_alternatives(arch, intent, dtype, search)
    if last is not None and last.fits and last.kv_cache_tokens >= intent.p99_context_tokens:
        most = int(sequences_at(last, intent.p99_context_tokens))
        alternatives.append(
            Alternative(
                kind=AlternativeKind.LOWER_CONCURRENCY,
                description=f"lower spec.workload.concurrency to {most}: "
                f"{layout_label(last)} holds {most} sequences of "
                f"{intent.p99_context_tokens} tokens (the context is never cut)",
                changes={"concurrency": most},
            )
        )
    return Infeasible(
        gpu_type=facts.label,
        vllm_version=intent.vllm_version,
        reasons=reasons,
        alternatives=alternatives,
    )
