"""Host (CPU) memory of one vLLM replica: what the container's memory request and limit must hold.

A container that exceeds its memory limit is killed by the kernel's cgroup OOM killer
(`OOMKilled`, exit 137): host RAM, never GPU memory. The limit is planned from what the pinned
vLLM version actually keeps in host memory, component by component, each with its reason:

* **Weight staging.** With the default `--load-format auto` vLLM reads safetensors through
  `safetensors_weights_iterator` (vllm/model_executor/model_loader/weight_utils.py): every rank
  opens each shard with `safe_open(st_file, framework="pt")` (mmap) and yields
  `f.get_tensor(name)` one tensor at a time; the model's `weight_loader` narrows it to the rank's
  slice and copies it to the GPU. Anonymous host memory is therefore about one tensor (the
  previous one is released while the next is read, so two at the peak) per rank, not the model:
  the mmapped file pages are page cache, charged to the cgroup but reclaimable, so they slow a
  tight container down rather than kill it. Every TP rank is its own process and reads the full
  tensor before narrowing it, so the staging counts once per rank. The same holds for the
  `prefetch` strategy and 0.19+'s automatic choice (both only warm the page cache).
  `--safetensors-load-strategy eager` (0.10.2+) reads a whole shard with `load(f.read())`:
  two shard sizes per rank (Hugging Face shards are at most 5 GB, `save_pretrained`'s default).
* **CPU swap space.** `--swap-space` (GiB per GPU, default 4 through 0.17.1, gone from 0.18.0 in
  the version catalog) is pinned CPU memory only on the V0 engine (V0 `CacheEngine` allocates
  `num_cpu_blocks` per worker). V1 never allocates it: `EngineCore._initialize_kv_caches` sets
  `num_cpu_blocks = 0` (vllm/v1/engine/core.py; vllm#27984), so V1 plans count none.
* **CPU offload.** `--cpu-offload-gb` (GiB per GPU, default 0) keeps that much of the weights in
  pinned host memory; `--kv-offloading-size` (0.11.2+, GiB over all TP ranks, unset by default)
  is the CPU buffer of KV offloading. Counted only when spec.vllm.extraArgs sets them.
* **/dev/shm.** With TP > 1 NCCL and vLLM's shared-memory broadcast queue use /dev/shm, rendered
  as an emptyDir with medium Memory: its pages are charged to the container's memory cgroup, so
  the planned size (also the emptyDir's sizeLimit) is part of the limit.
* **Processes.** The API server (FastAPI, the tokenizer, V1's detokenizer and multimodal cache),
  one worker process per GPU (torch and the CUDA context: 1.5-2 GiB RSS each, plus torch.compile /
  Inductor on V1), and on V1 with TP > 1 the EngineCore scheduler process apart from its workers.
* **Margin**: a fraction of the sum, for allocator slack and request bursts.

Request = limit = the total rounded up to whole GiB (Guaranteed-style memory: the scheduler
places the pod only where the node can hold what the pod is allowed to use). When the smallest
allocatable memory of the pool's nodes cannot hold it, the limit is clamped to that allocatable
minus a reserve and the plan says so (the pod still schedules; its risk is stated).

Pure: architecture, plan values and the version catalog in, a frozen HostMemoryPlan out.
"""

import math
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.status import HostMemory
from vllm_operator.api.status import HostMemoryComponent as StatusComponent
from vllm_operator.catalog.architectures import Architecture
from vllm_operator.catalog.vllm.errors import UnknownVersionError
from vllm_operator.catalog.vllm.loader import flag_spec
from vllm_operator.planning.versions import Engine

GIB = float(1 << 30)

API_SERVER_GIB = 2.5
"""The OpenAI API server process: Python, FastAPI/uvicorn, the tokenizer, V1's detokenizer."""
WORKER_PROCESS_GIB = 2.0
"""One GPU worker process: torch, the CUDA context and the model runner's host buffers (host RSS
of a CUDA process with torch loaded is 1.5-2 GiB)."""
COMPILE_GIB = 1.0
"""torch.compile / Inductor on V1 (not with enforce_eager): compiled graphs and its worker pool."""
ENGINE_CORE_GIB = 1.0
"""V1 EngineCore process when TP > 1 (the scheduler; with TP = 1 the worker lives in it)."""
SHM_PER_RANK_GIB = 1
"""/dev/shm per TP rank: NCCL's SHM transport and vLLM's shared-memory message queues."""
SHM_MIN_GIB = 2
MARGIN_FRACTION = 0.10
MARGIN_MIN_GIB = 1.0
SHARD_GIB = 5 * 1e9 / GIB
"""Largest Hugging Face checkpoint shard (`save_pretrained` max_shard_size default "5GB")."""
NODE_RESERVE_GIB = 1
"""Kept free below a node's allocatable memory when the plan has to be clamped to it."""
LOWER_BOUND_GIB = 4
"""Never plan a vLLM container below this."""

_CHECKPOINT_BYTES = {"float32": 4, "float": 4}


class HostMemoryComponent(BaseModel):
    """One part of the host-memory plan."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    gib: float = Field(ge=0)
    reason: str


class HostMemoryPlan(BaseModel):
    """Host memory of one replica (the vLLM container), in GiB."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    components: tuple[HostMemoryComponent, ...]
    planned_gib: int = Field(ge=1, description="The sum, rounded up: what the plan asks for.")
    limit_gib: int = Field(ge=1, description="Request and limit rendered (planned or clamped).")
    shm_gib: int | None = Field(default=None, description="/dev/shm size (TP > 1), else None.")
    node_allocatable_gib: float | None = None
    clamped: bool = False
    reasons: tuple[str, ...] = ()

    @property
    def max_limit_gib(self) -> int | None:
        """The largest limit the pool's nodes can honour (None: allocatable unknown)."""
        return node_cap_gib(self.node_allocatable_gib)

    def to_status(self) -> HostMemory:
        """The plan as status.pools[].plan.hostMemory stores it."""
        return HostMemory(
            request_gib=self.limit_gib,
            limit_gib=self.limit_gib,
            planned_gib=self.planned_gib,
            components=[
                StatusComponent(name=c.name, gib=c.gib, reason=c.reason) for c in self.components
            ],
            node_allocatable_gib=self.node_allocatable_gib,
            max_limit_gib=self.max_limit_gib,
            clamped=self.clamped,
            note=self.reasons[-1] if self.clamped else None,
        )


def node_cap_gib(allocatable_gib: float | None) -> int | None:
    """Allocatable memory of the smallest node minus the reserve, whole GiB (None: unknown)."""
    if allocatable_gib is None:
        return None
    return max(1, math.floor(allocatable_gib - NODE_RESERVE_GIB))


def _flag_default(version: str, flag: str) -> tuple[bool, object]:
    """(the version has the flag, its default)."""
    try:
        spec = flag_spec(version, flag)
    except UnknownVersionError:
        return False, None
    return (spec is not None), (spec.default if spec is not None else None)


def _float_arg(extra: Mapping[str, str], flag: str) -> float | None:
    raw = extra.get(flag)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def _as_float(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _largest_tensor_bytes(arch: Architecture) -> tuple[float, str]:
    """The largest single checkpoint tensor: the embedding (or lm_head) or an MLP projection."""
    unq = _CHECKPOINT_BYTES.get(arch.torch_dtype, 2)
    embed = arch.vocab_size * arch.hidden_size * unq
    inter = arch.intermediate_size
    if arch.is_moe and arch.moe_intermediate_size and arch.first_k_dense_replace == 0:
        inter = arch.moe_intermediate_size
    q = arch.quantization.bytes_per_param() if arch.quantization is not None else unq
    mlp = arch.hidden_size * inter * q
    if embed >= mlp:
        return float(embed), f"the embedding ({arch.vocab_size} x {arch.hidden_size})"
    return float(mlp), f"an MLP projection ({arch.hidden_size} x {inter})"


def _staging(
    arch: Architecture, tp: int, version: str, weights_gib_per_gpu: float, extra: Mapping[str, str]
) -> HostMemoryComponent:
    has_strategy, default = _flag_default(version, "--safetensors-load-strategy")
    strategy = extra.get("--safetensors-load-strategy") or (default if has_strategy else None)
    load_format = extra.get("--load-format", "auto")
    if strategy == "eager" or load_format not in ("auto", "safetensors"):
        shard = min(SHARD_GIB, weights_gib_per_gpu * tp)
        why = (
            "--safetensors-load-strategy eager reads a whole shard"
            if strategy == "eager"
            else f"--load-format {load_format} is not the mmapped safetensors path: counted as a "
            "whole shard"
        )
        return HostMemoryComponent(
            name="weightStaging",
            gib=round(2 * shard * tp, 2),
            reason=f"{why} (<= {SHARD_GIB:.2f} GiB), twice at the peak, in each of {tp} rank(s)",
        )
    size, what = _largest_tensor_bytes(arch)
    gib = 2 * size / GIB * tp
    return HostMemoryComponent(
        name="weightStaging",
        gib=round(gib, 2),
        reason=f"safetensors are mmapped and loaded one tensor at a time "
        f"(weight_utils.safetensors_weights_iterator, strategy {strategy or 'lazy'}): the "
        f"largest, {what}, is {size / GIB:.2f} GiB, twice at the peak, in each of {tp} rank(s)",
    )


def plan_host_memory(
    arch: Architecture,
    *,
    tensor_parallel_size: int,
    engine: Engine,
    vllm_version: str,
    weights_gib_per_gpu: float,
    enforce_eager: bool = False,
    extra_args: Mapping[str, str] | None = None,
    node_allocatable_gib: float | None = None,
) -> HostMemoryPlan:
    """Host memory of one replica for this plan, clamped to the nodes' allocatable memory.

    `extra_args` are spec.vllm.extraArgs (`--flag: value`): flags there that move host memory
    (--swap-space, --cpu-offload-gb, --kv-offloading-size, --safetensors-load-strategy,
    --load-format) are counted with the user's values. `node_allocatable_gib` is the smallest
    allocatable memory of the pool's nodes (None: unknown, nothing clamped).
    """
    extra = extra_args or {}
    tp = tensor_parallel_size
    parts = [_staging(arch, tp, vllm_version, weights_gib_per_gpu, extra)]

    has_swap, swap_default = _flag_default(vllm_version, "--swap-space")
    if has_swap:
        swap = _float_arg(extra, "--swap-space")
        per_gpu = swap if swap is not None else _as_float(swap_default)
        if engine is Engine.V0 and per_gpu > 0:
            parts.append(
                HostMemoryComponent(
                    name="swapSpace",
                    gib=round(per_gpu * tp, 2),
                    reason=f"--swap-space {per_gpu:g} GiB per GPU x {tp}: pinned CPU KV blocks "
                    f"of the V0 engine (vLLM {vllm_version})",
                )
            )
    offload = _float_arg(extra, "--cpu-offload-gb")
    if offload:
        parts.append(
            HostMemoryComponent(
                name="cpuOffload",
                gib=round(offload * tp, 2),
                reason=f"--cpu-offload-gb {offload:g} GiB per GPU x {tp}: weights kept in pinned "
                "host memory",
            )
        )
    kv_offload = _float_arg(extra, "--kv-offloading-size")
    if kv_offload:
        parts.append(
            HostMemoryComponent(
                name="kvOffload",
                gib=round(kv_offload, 2),
                reason=f"--kv-offloading-size {kv_offload:g} GiB: the CPU KV-offloading buffer "
                "(all TP ranks together)",
            )
        )
    shm: int | None = None
    if tp > 1:
        shm = max(SHM_MIN_GIB, SHM_PER_RANK_GIB * tp)
        parts.append(
            HostMemoryComponent(
                name="sharedMemory",
                gib=float(shm),
                reason=f"/dev/shm for {tp} tensor-parallel ranks (NCCL, vLLM's shared-memory "
                "queues): a memory-backed emptyDir counts against the container's limit",
            )
        )
    parts.append(
        HostMemoryComponent(
            name="apiServer",
            gib=API_SERVER_GIB,
            reason="the OpenAI API server process with the tokenizer (and V1's detokenizer)",
        )
    )
    compile_gib = COMPILE_GIB if engine is Engine.V1 and not enforce_eager else 0.0
    parts.append(
        HostMemoryComponent(
            name="workers",
            gib=round((WORKER_PROCESS_GIB + compile_gib) * tp, 2),
            reason=f"{tp} GPU worker process(es) x {WORKER_PROCESS_GIB:g} GiB (torch, CUDA "
            "context)" + (f" + {compile_gib:g} GiB torch.compile each" if compile_gib else ""),
        )
    )
    if engine is Engine.V1 and tp > 1:
        parts.append(
            HostMemoryComponent(
                name="engineCore",
                gib=ENGINE_CORE_GIB,
                reason="the V1 EngineCore (scheduler) process apart from its TP workers",
            )
        )
    subtotal = sum(p.gib for p in parts)
    margin = max(MARGIN_MIN_GIB, MARGIN_FRACTION * subtotal)
    parts.append(
        HostMemoryComponent(
            name="margin",
            gib=round(margin, 2),
            reason=f"{MARGIN_FRACTION:.0%} of the sum, at least {MARGIN_MIN_GIB:g} GiB "
            "(allocator slack, request bursts)",
        )
    )
    planned = max(LOWER_BOUND_GIB, math.ceil(subtotal + margin - 1e-9))
    reasons = [
        f"host memory request = limit = {planned} GiB: "
        + " + ".join(f"{p.name} {p.gib:g}" for p in parts)
    ]
    limit = planned
    clamped = False
    cap = node_cap_gib(node_allocatable_gib)
    if cap is not None and cap < planned:
        limit, clamped = cap, True
        reasons.append(
            f"clamped to {cap} GiB: the smallest node of the pool has {node_allocatable_gib:.1f} "
            f"GiB allocatable ({NODE_RESERVE_GIB} GiB kept free), below the planned {planned} GiB; "
            "loading may be OOMKilled: use nodes with more memory"
        )
    return HostMemoryPlan(
        components=tuple(parts),
        planned_gib=planned,
        limit_gib=limit,
        shm_gib=shm,
        node_allocatable_gib=(
            round(node_allocatable_gib, 2) if node_allocatable_gib is not None else None
        ),
        clamped=clamped,
        reasons=tuple(reasons),
    )
