"""What vLLM's "Model loading took X GiB" counts beyond the parameters.

vLLM measures model loading as the growth of `torch.cuda.memory_allocated` across
`model_loader.load_model` (utils/mem_utils.py DeviceMemoryProfiler: `empty_cache()`,
`reset_peak_memory_stats()`, `max_memory_allocated()` before and after; the same in 0.11.0 and
0.33.0). Two things besides the parameters are in that growth:

- the rotary embedding's cos/sin cache, a buffer of every position the model can address
  (`RotaryEmbedding.__init__` registers `cos_sin_cache` of [positions, rotary_dim] in the model
  dtype; `get_rope` keeps one per distinct configuration, so all layers share it);
- the caching allocator's unsplit blocks. PyTorch counts a block's full size as allocated, and
  it splits a block of its large pool only when more than 1 MiB would remain
  (c10/cuda/CUDACachingAllocator.cpp `should_split`: `remaining > kSmallSize`); a new segment is
  the request rounded up to 2 MiB (`kRoundLarge`), or 20 MiB (`kLargeBuffer`) for requests of
  1-10 MiB. A 95 MiB gate_up matrix therefore takes a 96 MiB segment and counts 96 MiB. With
  `expandable_segments:True` every block is split (`should_split` returns
  `remaining >= kMinBlockSize` there), so the operator's own pods do not pay it.

Measured against the logs (bench rows and public logs, model loading in GiB, logged / params /
params + these terms): Qwen2-7B-Instruct on one A100 at 0.10.1.1 14.2488 / 14.1852 / 14.2487,
on two 7.1217 / 7.0928 / 7.1216; Qwen3-4B in fp16 at V0 (a public log) 7.5552 / 7.4924 /
7.5550; Llama-3.1-8B at 0.19.0 14.99 / 14.96 / 14.99 (its llama3 rope caches 131072 positions).
"""

from dataclasses import dataclass, field

from vllm_operator.catalog.architectures import Architecture, Quantization

MIB = 1 << 20
MIN_BLOCK = 512  # kMinBlockSize: every request is rounded up to it
SMALL_SIZE = MIB  # kSmallSize: requests up to 1 MiB come from the small pool
LARGE_BUFFER = 20 * MIB  # kLargeBuffer: the segment for a 1-10 MiB request
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc
ROUND_LARGE = 2 * MIB  # kRoundLarge: larger segments are rounded up to it

MROPE_POSITION_FACTOR = 4  # mrope.py: cache_max_position_num = max_position_embeddings * 4
POSITION_SCALED_ROPES = ("linear", "dynamic")  # cache max_position x factor positions
# Models that build their rope in float32 whatever the model dtype (0.29.0 models/gpt_oss.py:
# `get_rope(..., dtype=torch.float32)`; the only catalog family that does).
FLOAT32_ROPE_MODEL_TYPES = ("gpt_oss",)


@dataclass
class _Block:
    start: int
    size: int
    segment: int
    free: bool = True


@dataclass
class LargePoolSimulation:
    """PyTorch's caching allocator, large pool only, without expandable segments.

    Requests of 1 MiB or less go to the small pool, whose blocks are split down to 512 bytes and
    so count what was asked for; they are left out. Frees coalesce a block with its free
    neighbours in the same segment (`free_block` / `try_merge_blocks`), and a request takes the
    smallest free block that fits (`get_free_block`: `pool.blocks.lower_bound`).
    """

    blocks: list[_Block] = field(default_factory=list)
    segments: int = 0

    def allocate(self, size: int) -> _Block:
        size = -(-size // MIN_BLOCK) * MIN_BLOCK
        fits = [b for b in self.blocks if b.free and b.size >= size]
        if fits:
            block = min(fits, key=lambda b: (b.size, b.segment, b.start))
        else:
            if size < MIN_LARGE_ALLOC:
                segment_size = LARGE_BUFFER
            else:
                segment_size = -(-size // ROUND_LARGE) * ROUND_LARGE
            block = _Block(0, segment_size, self.segments)
            self.segments += 1
            self.blocks.append(block)
        block.free = False
        if block.size - size > SMALL_SIZE:
            rest = _Block(block.start + size, block.size - size, block.segment)
            block.size = size
            self.blocks.insert(self.blocks.index(block) + 1, rest)
        return block

    def free(self, block: _Block) -> None:
        block.free = True
        i = self.blocks.index(block)
        after = self.blocks[i + 1] if i + 1 < len(self.blocks) else None
        if after is not None and after.free and after.segment == block.segment:
            block.size += after.size
            self.blocks.pop(i + 1)
        before = self.blocks[i - 1] if i > 0 else None
        if before is not None and before.free and before.segment == block.segment:
            before.size += block.size
            self.blocks.pop(i)

    def allocated(self) -> int:
        return sum(b.size for b in self.blocks if not b.free)


def rope_caches(arch: Architecture) -> list[tuple[int, int]]:
    """(positions, rotary_dim) of each cos/sin cache vLLM's `get_rope` builds for `arch`.

    rotary_embedding/__init__.py get_rope (0.29.0): the default, llama3 and dynamic-NTK
    embeddings cache `max_position` positions; linear scaling `max_position x factor`
    (linear_scaling_rope.py); YaRN `original_max_position x factor` (yarn_scaling_rope.py); the
    multimodal mrope four times `max_position` (mrope.py). Gemma-3 builds a second, default one
    for its sliding layers (gemma3.py: rope_local_base_freq). An unlisted type is counted as the
    default, the smaller side for the scaled kinds.
    """
    positions = arch.max_position_embeddings
    if not positions:
        return []
    if arch.is_mla:
        return [(positions, arch.qk_rope_head_dim or 64)]
    rotary = arch.rotary_dim or arch.head_dim
    factor = arch.rope_factor or 1.0
    if arch.mrope:
        cached = positions * MROPE_POSITION_FACTOR
    elif arch.rope_type in POSITION_SCALED_ROPES:
        cached = int(positions * factor)
    elif arch.rope_type == "yarn":
        cached = int((arch.rope_original_max_position or positions) * factor)
    else:
        cached = positions
    caches = [(cached, rotary)]
    if arch.local_rope:
        caches.append((positions, rotary))
    return caches


def rope_cache_bytes(arch: Architecture, dtype_bytes: int) -> int:
    """Bytes of the model's cos/sin caches: cos and sin halves, rotary_dim values per position,
    in the model dtype unless the model asks for float32."""
    width = 4 if arch.model_type in FLOAT32_ROPE_MODEL_TYPES else dtype_bytes
    return sum(p * r * width for p, r in rope_caches(arch))


def rounding_supported(arch: Architecture, quant: Quantization | None) -> bool:
    """Whether the parameter tensors' creation order is known here: unquantised decoders of
    attention and MLP/MoE layers. Quantised layers repack after loading (new tensors, old ones
    freed), and hybrid, MLA and per-layer-embedding models create other tensors."""
    return quant is None and not (
        arch.is_hybrid
        or arch.is_mla
        or arch.layer_pattern
        or arch.parallel_hybrid
        or arch.hidden_size_per_layer_input
    )


def _layer_tensors(arch: Architecture, layer: int, tp: int, b: int) -> list[int]:
    """Large tensors of one decoder layer in creation order (qkv_proj, o_proj, then the MLP:
    gate_up_proj and down_proj, or FusedMoE's w13 and w2 and a shared expert)."""
    kv_heads, hd = arch.attention_dims(layer)
    h = arch.hidden_size
    q = arch.num_attention_heads // tp * hd * (2 if arch.attn_output_gate else 1)
    kv = 2 * max(1, kv_heads // tp) * hd
    tensors = [(q + kv) * h * b, h * (arch.num_attention_heads // tp * hd) * b]
    factor = 2 if arch.gated_mlp else 1
    if arch.is_moe and layer >= arch.first_k_dense_replace:
        experts = arch.num_experts or 1
        inter = (arch.moe_intermediate_size or arch.intermediate_size) // tp
        tensors += [experts * factor * inter * h * b, experts * h * inter * b]
        shared = arch.shared_expert_intermediate_size or (
            arch.num_shared_experts * inter * tp if arch.num_shared_experts else 0
        )
        if shared:
            tensors += [factor * shared // tp * h * b, h * shared // tp * b]
    else:
        inter = arch.intermediate_size // tp
        tensors += [factor * inter * h * b, h * inter * b]
    return tensors


def allocator_rounding_bytes(
    arch: Architecture,
    *,
    tp: int,
    pp: int,
    stage: int,
    layers: list[int],
    dtype_bytes: int,
) -> int:
    """Bytes the caching allocator counts beyond the parameters of one rank of PP stage `stage`.

    Replays the creation order of vLLM's decoder models (`initialize_model` under the target
    device): the vocab-parallel embedding, each layer's projections with the rotary cache's
    float32 temporaries beside the first attention (base.py `_compute_cos_sin_cache`: freqs,
    cos, sin and their concatenation, freed once the cache is cast), then a ParallelLMHead that
    a tied checkpoint frees again (`tie_weights` replaces its weight).
    """
    sim = LargePoolSimulation()
    wanted = 0
    h = arch.hidden_size
    vocab = -(-arch.vocab_size // 64) * 64 // tp  # pad_vocab_size(vocab, 64) / tp
    first = sum(layers[:stage])

    def keep(size: int) -> None:
        nonlocal wanted
        if size > SMALL_SIZE:
            sim.allocate(size)
            wanted += -(-size // MIN_BLOCK) * MIN_BLOCK

    if stage == 0:
        keep(vocab * h * dtype_bytes)
    for layer in range(first, first + layers[stage]):
        tensors = _layer_tensors(arch, layer, tp, dtype_bytes)
        keep(tensors[0])
        keep(tensors[1])
        if layer == first:
            for positions, rotary in rope_caches(arch):
                # freqs, cos and sin ([positions, rotary / 2] float32) and their concatenation;
                # the first three die with _compute_cos_sin_cache, the last once it is cast
                half = positions * rotary // 2 * 4
                temps = [sim.allocate(half) for _ in range(3)] if half > SMALL_SIZE else []
                whole = sim.allocate(2 * half) if 2 * half > SMALL_SIZE else None
                for temp in temps:
                    sim.free(temp)
                keep(positions * rotary * dtype_bytes)
                if whole is not None:
                    sim.free(whole)
        for size in tensors[2:]:
            keep(size)
    if stage == pp - 1:
        head = vocab * h * dtype_bytes
        if arch.tie_word_embeddings and pp == 1:
            if head > SMALL_SIZE:
                sim.free(sim.allocate(head))
        else:
            keep(head)
    return max(0, sim.allocated() - wanted)
