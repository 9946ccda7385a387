"""The memory model: predict vLLM's own startup accounting, per GPU rank.

One code path serves `estimate` (engine args in, memory profile out) and `plan` (which searches
engine args with it). The terms follow design/domain.md §1 (DM) and design/vllm-versions.md §3 (VV):

    budget   = total x gpu_memory_utilization
    kv_cache = budget - weights - peak_activation - non_torch [- cuda_graphs from 0.20]
    tokens   = floor(kv_cache / (block_size x kv_bytes_per_token)) x block_size, min over ranks

Structural terms (weights, KV bytes per token) are computed exactly from the architecture.
Activation, non-torch and CUDA-graph memory are small models whose constants were fitted on the
published startup logs in bench/data/vllm-startup-logs.csv; every constant says where it comes
from, and docs/planning-model.md (written by `make bench-planner`) states the measured error.
"""

import math

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.catalog.architectures import (
    Architecture,
    LinearKind,
    Quantization,
    QuantMethod,
)
from vllm_operator.planning.errors import PlanningInputError
from vllm_operator.planning.model_load import (
    allocator_rounding_bytes,
    rope_cache_bytes,
    rounding_supported,
)
from vllm_operator.planning.versions import (
    DEFAULT_VLLM_VERSION,
    Engine,
    MemorySemantics,
    ProfilerEra,
    VllmVersion,
    accepted_block_sizes,
    mla_block_size,
    semantics_for,
    v0_chunked_batched_tokens,
    v0_chunked_prefill,
)

GIB = float(1 << 30)

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
KV_DTYPES_FP8 = ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")

# --- fitted constants (bench/data/vllm-startup-logs.csv; see docs/planning-model.md) -----------
# Sampler pass of the profile run: logits of max_num_seqs tokens in fp32 plus the sampler's
# temporaries (softmax, log-softmax, sort for top-p/k): 3.73-3.87 x the fp32 logits on
# Llama-3.1-8B, Qwen2.5-7B, Gemma-2-27B, Qwen3-14B (v0.17/v0.19 rows). Counted from the code, that
# is the V1 sampler's PyTorch-native path with the Triton top-k/top-p kernel (forward_native): the
# model-dtype logits (0.5), their fp32 copy (1), the kernel's num_SMs x vocab buffer
# (min(SMs, seqs) / seqs), the probabilities (1) and random_sample's exponential draw (1), i.e.
# 3.5 + min(SMs, seqs) / seqs, 3.6-4.0 on the fitted rows. It is the peak of 0.17-0.20 starts (the
# FlashInfer sampler opt-in, FLASHINFER_SAMPLER_OPT_IN) and of 0.21+ starts, whose warm-up runs that
# path a second time (FLASHINFER_ALONE).
SAMPLER_LOGIT_COPIES = 3.85
# FlashInfer's path alone, where the warm-up runs nothing else: Sampler.forward casts the
# model-dtype logits to fp32 (0.5 + 1), divides by the temperature in place, and
# flashinfer_sample's top_k_top_p_sampling_from_logits (top_k_first) keeps top_k_mask_logits'
# masked copy (1) and the softmax (1) while top_p_sampling_from_probs draws: 3.5 fp32 copies
# (vLLM 0.10.1.1/0.10.2/0.11.0 v1/sample/sampler.py and ops/topk_topp_sampler.py; FlashInfer 0.2.11
# flashinfer/sampling.py, which 0.10.1.1 pins, allocates the same two tensors as 0.6.8.post1's).
# Bench rows 43/44 (Qwen2-7B on A100s, 0.10.1.1): -3.3 / -4.1 -> -2.3 / -3.7 %.
SAMPLER_LOGIT_COPIES_FLASHINFER = 3.5
# The window where that path runs alone (FLASHINFER_ALONE), from the first release that samples
# with FlashInfer >= 0.2.3 (0.9.0, 0.9.1, 0.9.2 and 0.10.1.1 TopKTopPSampler: ``if
# flashinfer_version < "0.2.3"`` falls back to native; 0.8.5 has the test the other way round,
# "FlashInfer>=v0.2.3 is not backward compatible", so an 0.8 start samples with an older
# FlashInfer or sorts, and keeps SAMPLER_LOGIT_COPIES) to the release whose ``_dummy_sampler_run``
# (v1/worker/gpu_model_runner.py) samples twice: from 0.21.0 it samples as configured and again
# with a seeded torch.Generator ("Also warm forward_native (taken when generators dict is
# non-empty)"), which forward_cuda hands to forward_native, so a FlashInfer start peaks like a
# native Triton one (SAMPLER_LOGIT_COPIES). One call read in 0.9.0, 0.9.2, 0.10.1.1, 0.10.2,
# 0.11.0-0.11.2, 0.12.0, 0.14.1, 0.16.0, 0.17.0, 0.18.0, 0.20.0 and 0.20.2; two in 0.21.0 through
# 0.33.0. (0.11.1-0.20.x sample natively by default, FLASHINFER_SAMPLER_OPT_IN.)
FLASHINFER_ALONE = ("0.9.0", "0.21.0")
# Without FlashInfer's sampler the V1 sampler takes the PyTorch-native top-k/top-p path
# (v1/sample/ops/topk_topp_sampler.py, forward_native: logits.sort over the whole vocabulary ->
# fp32 values + int64 indices and the sort's own buffers, softmax, cumsum, masks, scatter, then the
# softmax and exponential draw of random_sample). The profile's dummy sampler run asks for
# top_k = vocab - 1 and top_p = 0.9 (gpu_model_runner._dummy_sampler_run), so that path always
# runs. Four starts with 1024 sequences and two vocabularies measure it: gpt-oss-120b on an H100
# in a pip venv without FlashInfer at 0.10.1 and 0.11.0 (bench rows 50 and 52, vllm#23278 /
# vllm#27508: 7.44 and 7.55 GiB beside the logged weights, the per-instance non-torch term and the
# activation constant, i.e. 9.5 and 9.6 fp32 copies of the 201,088-token logits, at 8192 and at 1024
# batched tokens alike, so the sampler and not the forward pass), and Qwen3 (151,936 tokens) at the
# releases that sort by default: the llm-d version sweep's Qwen3-14B at 0.16.0 and row 42's
# Qwen3-32B at TP2, both 5.64 GiB of peak activation, i.e. 9.6 copies each (the same figure for two
# models of one vocabulary and batch, which only a sampler term gives). The planner takes 9.7, the
# largest rounded up (the safe side). It was 8.8 while the
# planner also counted fp32 logits for the whole profile batch at 0.11-0.16, a term vLLM's code
# does not have: 0.11.0's ``_dummy_run`` returns ``hidden_states[logit_indices]``, one row per
# request, and the drop from 5.64 to 2.23 GiB between 0.16.0 and 0.17.0 of the same sweep is the
# sort giving way to the Triton kernel (TRITON_TOP_K_TOP_P_FROM). The V0 engine's sampler sorts
# too, in every V0 release: its profile run samples with SamplingParams(top_p=0.99,
# top_k=vocab - 1) (worker/model_runner.py ``profile_run``), and ``Sampler.forward`` (0.6.4.post1
# model_executor/layers/sampler.py) takes ``_apply_top_k_top_p`` (logits.sort, softmax, cumsum,
# masks, a scattered copy) unless VLLM_USE_FLASHINFER_SAMPLER=1 (envs.py default "0"), then keeps
# full fp32 probabilities and log-probabilities for ``_sample``. Bench row 2 (Qwen2.5-32B-AWQ on an
# RTX A6000, 0.6.4.post1, 256 sequences of a 152,064-token vocabulary: its 'peak_torch_memory'
# leaves 1.44 GiB above the weights, where the forward pass over 4,096 tokens is 0.75): +3.4 ->
# +0.5 % with the sort's copies; the other V0 rows' forward passes are larger than their sampler.
SAMPLER_LOGIT_COPIES_NATIVE = 9.7
# The sort is gone on the V1 runner from 0.17: ``forward_native`` calls ``apply_top_k_top_p``,
# which takes ``apply_top_k_top_p_triton`` whenever Triton is installed (a dependency of CUDA
# torch) and the batch has at least 8 rows (v1/sample/ops/topk_topp_sampler.py and
# topk_topp_triton.py, read alike in 0.17.0, 0.18.0, 0.19.0, 0.20.0, 0.21.0, 0.22.0, 0.24.0-0.27.1
# and 0.29.0; 0.16.0 has neither and sorts); that kernel filters the fp32 logits in place with one
# num_SMs x vocab buffer, so a V1 start with FlashInfer's sampler off peaks like one with it
# (SAMPLER_LOGIT_COPIES). Bench row 131 (Qwen3-Coder-30B-A3B, a MoE that 0.24.0 runs on the V1
# runner, 4x L40S, VLLM_USE_FLASHINFER_SAMPLER=0): -8.3 -> -5.2 %. 0.22-0.28 starts that vLLM runs
# on Model Runner V2 with the sampler off keep the sort term as the empirical stand-in of
# ``v2_profile_terms`` (row 108).
TRITON_TOP_K_TOP_P_FROM = "0.17.0"
# That stand-in keeps the copy count it was measured with (rows 85, 108 and 131 at 0.24-0.27.1,
# the sampler off): vLLM's code of those releases runs no sort there, so the figure is an
# empirical allowance for what such a start holds, not the sort's copies, and it does not follow
# SAMPLER_LOGIT_COPIES_NATIVE's refit.
SAMPLER_OFF_V2_STAND_IN_COPIES = 8.8
# FlashInfer's sampler is opt-in from 0.11.1 to 0.20.x: vLLM PR #26859 ("Disable FlashInfer sampler
# by default", merged 2025-10-15, after 0.11.0) made TopKTopPSampler take forward_cuda only
# ``if envs.VLLM_USE_FLASHINFER_SAMPLER`` (None, i.e. unset, is off; read in 0.11.1, 0.11.2, 0.12.0,
# 0.14.1, 0.16.0, 0.17.0, 0.18.0, 0.20.0 and 0.20.2), and PR #40376 ("Enable FlashInfer top-k/top-p
# sampler by default") made the unset variable read True from 0.21.0 (envs.py). Up to 0.11.0 an
# unset variable meant on wherever FlashInfer was installed. So a start in this window samples
# natively unless its env sets VLLM_USE_FLASHINFER_SAMPLER=1; the planner's flag only records an
# explicit 0, so it takes the native path here whatever the env says (the safe side: the native
# path's copies are never fewer than FlashInfer's).
FLASHINFER_SAMPLER_OPT_IN = ("0.11.1", "0.21.0")
# With speculative decoding the profile's sampler warm-up also runs the rejection sampler
# (0.33.0 v1/worker/gpu_model_runner.py `_dummy_sampler_run`: one dummy draft token per request,
# so fresh logits of 2 x num_reqs rows, then `RejectionSampler.forward` samples the num_reqs bonus
# rows with the ordinary sampler and casts the num_reqs target rows to fp32 for the sampling
# constraints and probabilities), whatever the number of speculative tokens. Its peak, in fp32
# copies of the num_reqs x vocab logits, is fitted on three starts of Qwen3.8-27B on one H200 at
# vLLM 0.24 with MTP and 1, 2 and 4 speculative tokens (bench rows 97-99: 67.45 / 67.81 / 67.82 GiB
# of KV cache against 72.30 without MTP, row 96, of which the MTP layer's weights are 0.79 GiB):
# 8.0 copies leave rows 97-99 at +0.1 / -0.5 / -0.5 %. Counted from 0.20, the era of those logs.
SAMPLER_LOGIT_COPIES_SPEC = 8.0
SAMPLER_SPEC_FROM = "0.20.0"
# Forward transient of one layer per token: gate_up (2*i) + act (i) + 3 residual-width buffers.
# Reproduces Llama-3.1-8B at 20000 tokens (2.06 vs 2.07 GiB, v0.6.4) and CodeLlama-7B at 8192.
ACTIVATION_CONST_GIB = 0.06
NON_TORCH_CONTEXT_GIB = 0.45  # CUDA context counted by 0.6.4 / V1 0.7-0.9.0 (0.35-0.44 seen)
NON_TORCH_BASE_GIB = 0.10  # per-instance eras before 0.18 (0.02-0.13 seen)
NON_TORCH_BASE_GIB_018 = 0.30  # 0.18+ (0.24-0.26 seen on H100 at 0.19; 0.46 once)
NON_TORCH_TP_GIB = 0.45  # TP > 1 on any other capability (0.33-0.44 seen)
NON_TORCH_TP_GIB_SM90 = 1.95  # TP > 1 on sm90 / sm10x, every release (1.82-1.96 seen at 0.19)
# On an integrated (unified-memory) GPU vLLM reads free memory from the host, not the device:
# utils/mem_utils.py MemorySnapshot.measure sets free_memory = psutil.virtual_memory().available
# when current_platform.is_integrated_gpu (torch `is_integrated`, cudaDevAttrIntegrated; 0.21.0
# to 0.33.0 alike, vLLM PR #35356, which replaced a compute-capability list naming 12.1, DGX
# Spark), and memory_profiling counts the drop of that figure from the worker's init snapshot
# (gpu_worker.init_device) to the end of the profile run (as non_torch_increase to 0.26, whole as
# total_consumed from 0.27). So "consumed memory (weights + non-torch)" holds every host
# allocation of the node in that window as well: the worker's heap and CPU tensors,
# torch.compile's workers, the API server process. vLLM's code does not determine its size, so
# the planner holds the largest logged figure, on the safe side: 4.64 GiB of non-torch memory
# (bench row 116, Qwen3.8-27B BF16 on a GB10 at 0.27.1: consumed 55.99 less 51.35 of weights; row
# 115, Qwen3-0.6B on a DGX Spark, leaves about 2.2 GiB). It replaces
# the discrete GPU's per-instance base (a TP > 1 rank adds its all-reduce term on top).
UNIFIED_MEMORY_NON_TORCH_GIB = 4.64
UNIFIED_MEMORY_REASON = (
    f"non-torch memory {UNIFIED_MEMORY_NON_TORCH_GIB} GiB, conservative for a unified-memory GPU: "
    "vLLM reads free memory from the host there (psutil MemAvailable), so host allocations "
    "during startup count against the KV cache; the figure is the largest logged (bench rows "
    "115-116), not derived from this model"
)
# Compute capabilities whose TP > 1 ranks carry NON_TORCH_TP_GIB_SM90: the NVLink datacenter parts
# (sm90, sm10x) it was fitted on. sm12x (RTX PRO / RTX 50xx, PCIe only) and sm89 log less and take
# NON_TORCH_TP_GIB (``nvlink_tp_term``). The term is empirical: which allocation it is has not been
# established. It is not vLLM's symmetric-memory all-reduce (off by default in 0.10.2, envs.py
# VLLM_ALLREDUCE_USE_SYMM_MEM "0", where row 77 already logs it; 64 MiB buffers at TP2 on sm90 from
# 0.11), not NCCL's NVLink SHARP (ncclNvlsInit returns early for two GPUs or fewer, and the TP2
# rows carry it) and not FlashInfer's all-reduce fusion workspace (on by default only from 0.17,
# config/vllm.py enable_allreduce_rms_fusion, at most 64 MB at TP2 and 2 MB at TP4 on sm90).
NVLINK_TP_MAJORS = (9, 10)
CUDA_GRAPH_BASE_GIB = 0.05
CUDA_GRAPH_PER_LAYER_GIB = 0.021  # 0.55-1.70 GiB for 24-80 layers with 512 capture sizes
CUDA_GRAPH_TP_GIB = 0.30
# From 0.18 the KV budget loses vLLM's own *estimate* of the graphs: a dummy capture of the
# largest sizes against a small KV cache (PR #30515, gpu_model_runner.profile_cudagraph_memory,
# logged as 'Estimated CUDA graph memory: X GiB total'; gpu_worker.determine_available_memory
# subtracts it when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, default on from 0.20). Fitted on the
# 23 estimates of the llm-d v0.19.0 campaign (rows 18-40 of the calibration set, H100, capture
# sizes up to 512): fixed + per (layer x hidden) + per (layer x MLP width / TP), less with TP > 1
# (the residual stream stays whole, the MLP and attention buffers shrink). Dense rows within
# -10 %..+18 % of the logged estimate (the layer-count-only rule: -41 %..+47 %).
CUDA_GRAPH_EST_FIXED_GIB = 0.63
CUDA_GRAPH_EST_PER_LAYER_HIDDEN_GIB = 0.164e-5  # x layers x hidden
CUDA_GRAPH_EST_PER_LAYER_MLP_GIB = 0.0447e-6  # x layers x MLP width / TP
CUDA_GRAPH_EST_TP_GIB = -0.11
# From 0.20 the graphs' estimate is inside the budget, but vLLM still allocates after the KV cache
# outside it: the real capture runs against the full KV pool (the estimate was profiled against a
# minimal one), plus the sampler warm-up and NCCL / custom all-reduce buffers per peer. Only the
# (1 - util) x total slack holds them. Logged failures: a 22.36 GiB card at util 0.98 (0.45 GiB
# slack) OOMs in graph capture and boots at 0.97 (0.67 GiB; vllm#57475, vLLM 0.29); gpt-oss-120b
# TP8 on 31.38 GiB cards at 0.95 (1.57 GiB slack) ends 1.37 GiB over its budget and fails
# (vllm#51590 comment, vLLM 0.28). Warned, not refused: the slope per TP peer rests on one log.
# The release from which vLLM refuses a hybrid model whose max_num_seqs exceeds its Mamba cache
# blocks (vllm#38270, merged 2026-03-26; on main still in vllm#49064, 2026-07-22). vLLM 0.19.0 failed
# the same start differently (vllm-project/recipes#551), the 0.26.0 log of bench row 75 raises it.
MAMBA_BLOCK_CHECK_SINCE = "0.20.0"
POST_KV_SLACK_GIB = 0.50
POST_KV_SLACK_PER_TP_PEER_GIB = 0.17
# Part of the estimate that does not shrink with the capture size: a capture of size 1 still
# logs 0.36-0.43 GiB (vLLM 0.20 / 0.2x logs in docs/planning-model.md).
CUDA_GRAPH_EST_FLOOR_GIB = 0.30


class EngineArgs(BaseModel):
    """Engine arguments as `vllm serve` takes them; None means 'the version's default'."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    block_size: int | None = Field(default=None, ge=1)
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    vllm_version: str = DEFAULT_VLLM_VERSION
    optional_kernels: bool = Field(
        default=True,
        description="FlashInfer and triton_kernels are installed, as in the vllm/vllm-openai "
        "images the operator deploys (both are bundled or required by 0.33). False for a bare "
        "pip install of an older wheel: the native sampler sorts the vocabulary, and MXFP4 MoE "
        "on sm90 falls back to Marlin.",
    )
    flashinfer_sampler: bool = Field(
        default=True,
        description="FlashInfer's top-k/top-p sampler is not turned off (no "
        "VLLM_USE_FLASHINFER_SAMPLER=0 in the container's env). Off, the sampler is the one a bare "
        "pip install gets: the V1 runner's native path (a sort before 0.17) and, before 0.29, no "
        "Model Runner V2 terms for an unquantised start (v2_profile_terms). vLLM 0.11.1-0.20.x "
        "run it only on an explicit 1 (FLASHINFER_SAMPLER_OPT_IN), so there it is planned off "
        "either way.",
    )
    expandable_segments: bool = Field(
        default=False,
        description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the container's env (the "
        "operator's pods set it unless a KV connector is configured; vLLM does not): the caching "
        "allocator then unmaps the free pages of partly used segments, so a cold compile's "
        "benchmark table is never kept (compile_segment_bytes).",
    )
    speculative_method: str | None = Field(
        default=None, description="--speculative-config method (mtp, eagle, eagle3, ngram, ...)."
    )
    num_speculative_tokens: int = Field(default=0, ge=0)
    max_loras: int = Field(default=0, ge=0, description="LoRA slots (--max-loras); 0: no LoRA.")
    max_lora_rank: int = Field(default=16, ge=1)
    enable_prefix_caching: bool | None = Field(
        default=None,
        description="None: the version's default. A hybrid without prefix caching pins one "
        "state block per sequence instead of align mode's two or three.",
    )
    skip_mm_profiling: bool = Field(
        default=False,
        description="--skip-mm-profiling: the profile run leaves the multimodal encoder out.",
    )
    language_model_only: bool = Field(
        default=False,
        description="--language-model-only: the vision tower is neither loaded nor profiled.",
    )
    limit_mm_per_prompt: dict[str, int] | None = Field(
        default=None,
        description="--limit-mm-per-prompt counts per modality; image and video both 0: no "
        "encoder pass in the profile run. None: vLLM's default limits.",
    )
    mm_encoder_tp_mode: str = Field(
        default="weights",
        description="--mm-encoder-tp-mode: 'weights' shards the tower like the language model, "
        "'data' runs it whole on every rank.",
    )
    attention_backend: str | None = Field(
        default=None,
        description="--attention-backend (FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION, "
        "...). None: vLLM picks one (resolve_attention_backend).",
    )


class GpuMemory(BaseModel):
    """The GPU as the memory model needs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    marketing_name: str
    total_gib: float = Field(gt=0)
    compute_capability: tuple[int, int] | None = None
    bf16: bool = True
    fp8_kv: bool = True
    measured_free_gib: float | None = Field(
        default=None, description="Free memory an NVML probe measured before vLLM starts."
    )
    unified_memory: bool = Field(
        default=False,
        description="An integrated GPU sharing the host's memory: vLLM's free-memory reading "
        "then counts host allocations (UNIFIED_MEMORY_NON_TORCH_GIB).",
    )


class ResolvedArgs(BaseModel):
    """EngineArgs with every default filled in for one version and GPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    dtype: str
    quantization: str | None
    kv_cache_dtype: str
    enforce_eager: bool
    enable_chunked_prefill: bool
    vllm_version: str
    optional_kernels: bool = True
    flashinfer_sampler: bool = True
    expandable_segments: bool = False
    speculative_method: str | None = None
    num_speculative_tokens: int = 0
    max_loras: int = 0
    max_lora_rank: int = 16
    enable_prefix_caching: bool | None = None
    mm_profile_items: int = 0
    mm_profile_tokens_per_item: int = 0
    mm_encoder_tp_mode: str = "weights"
    language_model_only: bool = False
    attention_backend: str = "FLASH_ATTN"
    flashinfer_decode_wrappers: bool = Field(
        default=False,
        description="Attention runs on FlashInfer with its own decode wrappers (not the TRT-LLM "
        "decode path of sm10x): each captured decode batch size gets one (flashinfer_graph_bytes).",
    )


class HybridLayout(BaseModel):
    """How vLLM V1 lays out a hybrid model's KV cache on one rank (sizes in bytes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    block_size: int
    attention_page_per_token: int
    state_page: int
    group_size: int
    attention_groups: int
    state_groups: int
    state_blocks_per_seq: int
    bytes_per_block: int

    def blocks_per_request(self, max_model_len: int) -> int:
        """vLLM's get_max_concurrency_for_kv_cache_config: per group, cdiv(max memory of one
        request, page), summed over the groups that share one block pool."""
        attention = -(-max_model_len // self.block_size)
        return self.attention_groups * attention + self.state_groups * self.state_blocks_per_seq


class StageMemory(BaseModel):
    """One pipeline stage's rank: what it holds and how many KV blocks its memory would allow.

    Each stage profiles its own memory (its layers, embeddings on the first, the final norm,
    lm_head and the sampler on the last) and vLLM then gives every rank the smallest block count
    of all (v1/core/kv_cache_planning.py get_kv_cache_configs, 0.33.0: "Change the num_blocks of
    each rank to the smallest among all ranks"), so the KV cache a stage allocates is that
    minimum times its own bytes per block, never more than its own free memory.
    """

    model_config = ConfigDict(extra="forbid")

    stage: int = Field(ge=0)
    layers: int = Field(ge=0)
    weights_gib: float
    activation_gib: float
    cuda_graph_gib: float
    kv_free_gib: float = Field(description="Budget left for the KV cache on this stage.")
    kv_cache_gib: float = Field(description="KV cache allocated: the replica's blocks here.")
    kv_bytes_per_token: int
    num_gpu_blocks: int = Field(description="Blocks this stage alone would hold.")


class MemoryEstimate(BaseModel):
    """vLLM's startup memory profile as predicted for the rank that bounds the KV cache."""

    model_config = ConfigDict(extra="forbid")

    args: ResolvedArgs
    engine: Engine
    era: ProfilerEra
    gpu_total_gib: float
    budget_gib: float
    budget_source: str
    weights_gib: float = Field(description="The model's own weights (LoRA and draft apart).")
    lora_gib: float = Field(
        default=0.0, description="LoRA slot buffers (--max-loras x --max-lora-rank), per GPU."
    )
    draft_weights_gib: float = Field(
        default=0.0, description="The speculative draft's weights (MTP / EAGLE layers), per GPU."
    )
    draft_kv_bytes_per_token: int = Field(
        default=0, description="Of kv_bytes_per_token, what the draft's layers cache."
    )
    activation_peak_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    cuda_graph_subtracted: bool
    kv_cache_gib: float
    compile_segment_gib: float = Field(
        default=0.0,
        description="KV cache a cold first compile may lose: the embedding table copy its "
        "benchmark allocates, which the allocator keeps as consumed memory in about half of cold "
        "starts. Not in kv_cache_gib; plans keep it as a reserve.",
    )
    kv_bytes_per_token: int
    kv_cache_tokens: int
    num_gpu_blocks: int
    max_concurrency: float
    fits: bool
    reasons: list[str]
    hybrid_layout: HybridLayout | None = Field(
        default=None,
        description="A hybrid's block pool (attention and state groups): concurrency at a "
        "context shorter than max_model_len counts the state pages each sequence pins.",
    )
    startup_warnings: list[str] = Field(
        default_factory=list,
        description="Predicted failures after the KV cache is allocated (graph capture, "
        "sampler warm-up): the KV figure stands, but vLLM may stop before serving.",
    )
    stages: list[StageMemory] = Field(
        default_factory=list,
        description="Per pipeline stage (one entry without pipeline parallelism); the fields "
        "above are the stage with the fewest blocks.",
    )


# ------------------------------------------------------------------------------------ weights


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        accepted = ", ".join(sorted(DTYPE_BYTES))
        raise PlanningInputError(
            "dtype", f"unknown dtype {dtype!r}; accepted: {accepted}"
        ) from None


def layers_per_stage(layers: int, pp: int) -> list[int]:
    """Decoder layers per pipeline stage, as vLLM splits them.

    vllm/distributed/utils.py get_pp_indices (same code in 0.11.0 and 0.33.0): every stage gets
    layers // pp, and the remainder goes one each to the stages before the last, starting from
    the second-to-last (`for i in range(2, remaining_layers + 2): partitions[-i] += 1`): the last
    stage holds the final norm and lm_head, so it is spared the extra layer. 61 layers on 2
    stages: [31, 30]; 126 on 4: [31, 32, 32, 31]. VLLM_PP_LAYER_PARTITION overrides it; the
    operator does not set it.
    """
    base, rem = divmod(layers, pp)
    return [base + (1 if pp - 1 - rem <= i < pp - 1 else 0) for i in range(pp)]


def _attention_params(arch: Architecture, tp: int, layer: int = 0) -> tuple[float, float]:
    """(sharded-and-split params per rank, replicated params) of one attention block."""
    h = arch.hidden_size
    if arch.is_mla:
        nope = arch.qk_nope_head_dim or 128
        rope = arch.qk_rope_head_dim or 64
        v = arch.v_head_dim or 128
        heads = arch.num_attention_heads
        lora = arch.kv_lora_rank or 512
        replicated = h * (lora + rope) + lora  # kv_a_proj_with_mqa + kv_a_layernorm
        if arch.q_lora_rank:
            replicated += h * arch.q_lora_rank + arch.q_lora_rank
            q = arch.q_lora_rank * heads * (nope + rope)
        else:
            q = h * heads * (nope + rope)
        split = q + lora * heads * (nope + v) + heads * v * h
        if arch.index_head_dim:
            # sparse-MLA indexer, not TP-sharded (deepseek_v2.py Indexer: wq_b ReplicatedLinear
            # q_lora x heads*dim, wk_weights_proj with disable_tp: hidden x (dim + heads))
            idx_heads, idx_dim = arch.index_n_heads or 64, arch.index_head_dim
            replicated += (arch.q_lora_rank or h) * idx_heads * idx_dim
            replicated += h * (idx_dim + idx_heads) + 2 * idx_dim
        return split / tp, float(replicated)
    kv_heads, hd = arch.attention_dims(layer)
    q = h * arch.num_attention_heads * hd * (2 if arch.attn_output_gate else 1)
    kv_heads_rank = max(1, kv_heads // tp)
    kv = 2 * h * kv_heads_rank * hd  # replicated when tp > kv heads
    if arch.num_kv_shared_layers and arch.is_kv_shared(layer):
        kv = 0  # a KV-shared layer has q_proj and o_proj only (gemma4.py)
    o = arch.num_attention_heads * hd * h
    bias = (
        (arch.num_attention_heads * hd) / tp + 2 * kv_heads_rank * hd if arch.attention_bias else 0
    )
    return (q + o) / tp + kv + bias, 0.0


def is_full_attention_layer(arch: Architecture, layer: int) -> bool:
    """Whether layer `layer` of a hybrid holds per-token KV. The full-attention layers are
    spread evenly (every 4th layer of Qwen3-Next / Qwen3.5: (i + 1) % 4 == 0); only the split
    across pipeline stages depends on where they sit."""
    if not arch.is_hybrid or arch.parallel_hybrid:
        return True
    if arch.layer_pattern:
        return arch.layer_pattern[layer : layer + 1] == "*"
    full, layers = arch.full_attention_layers, arch.num_hidden_layers
    return (layer + 1) * full // layers > layer * full // layers


def _linear_layer_params(arch: Architecture, tp: int) -> float:
    """Parameters per rank of one fixed-state layer (all projections column/row sharded).

    Gated DeltaNet (vLLM qwen3_next.py Qwen3NextGatedDeltaNet): in_proj_qkvz + in_proj_ba
    (hidden x (2 key + 2 value widths + 2 value heads)), conv1d over q, k and v, A_log and
    dt_bias per value head, out_proj. Mamba2 (mamba_mixer2.py): in_proj hidden x (2 I + 2 G N
    + H), conv1d over x, B, C, dt_bias / A / D per head, gated norm, out_proj. Mamba1
    (mamba_mixer.py): in_proj hidden x 2 I, conv1d, x_proj I x (dt_rank + 2 N), dt_proj,
    A (I x N), D, out_proj.
    """
    h = arch.hidden_size
    k = arch.linear_conv_kernel_dim or 4
    if arch.linear_kind is LinearKind.GATED_DELTA_NET:
        nk, nv = arch.linear_num_key_heads or 16, arch.linear_num_value_heads or 32
        kd = nk * (arch.linear_key_head_dim or 128)
        vd = nv * (arch.linear_value_head_dim or 128)
        conv_dim = 2 * kd + vd
        total = h * (2 * kd + 2 * vd + 2 * nv) + conv_dim * k + vd * h + 2 * nv
        return total / tp + (arch.linear_value_head_dim or 128)
    inter = arch.mamba_intermediate_size or 2 * h
    state = arch.mamba_d_state or 128
    if arch.linear_kind is LinearKind.MAMBA2:
        groups, heads = arch.mamba_n_groups or 1, arch.mamba_num_heads or 128
        conv_dim = inter + 2 * groups * state
        total = h * (2 * inter + 2 * groups * state + heads) + conv_dim * (k + 1) + 3 * heads
        return (total + inter + inter * h) / tp
    dt_rank = -(-h // 16)
    total = (
        h * 2 * inter
        + inter * (k + 1)
        + inter * (dt_rank + 2 * state)
        + dt_rank * inter
        + inter
        + inter * state
        + inter
        + inter * h
    )
    return total / tp


def _mlp_params(arch: Architecture, layer: int, tp: int) -> tuple[float, float, float]:
    """(routed-expert params, other MLP params, replicated) per rank for layer `layer`."""
    h = arch.hidden_size
    factor = 3 if arch.gated_mlp else 2
    if not arch.is_moe or layer < arch.first_k_dense_replace:
        inter = arch.intermediate_size
        if arch.use_double_wide_mlp and arch.num_kv_shared_layers and arch.is_kv_shared(layer):
            inter *= 2  # gemma4.py: intermediate_size doubles for KV-shared layers
        bias = 0 if arch.gated_mlp else inter / tp + h
        other = factor * h * inter / tp + bias
        if arch.hidden_size_per_layer_input:
            # per-layer input gate and projection (hidden x PLE each, replicated) + norm
            other += 2 * h * arch.hidden_size_per_layer_input + h
        return 0.0, other, 0.0
    experts = arch.num_experts or 1
    moe_inter = arch.moe_intermediate_size or arch.intermediate_size
    routed = experts * factor * h * moe_inter / tp
    shared = 0.0
    if arch.shared_expert_intermediate_size:
        shared = factor * h * arch.shared_expert_intermediate_size / tp + h
    elif arch.num_shared_experts:
        shared = arch.num_shared_experts * factor * h * moe_inter / tp
    return routed, shared, float(h * experts)  # router replicated


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _mxfp4_triton_sm90(
    compute_capability: tuple[int, int] | None,
    version: VllmVersion | None,
    optional_kernels: bool,
) -> bool:
    """Whether MXFP4 experts take vLLM's Triton (OAI triton_kernels) backend on Hopper.

    The Triton kernels serve (9, 0) <= capability < (11, 0), but sm100 prefers FlashInfer's
    TRT-LLM backend (mxfp4.py `get_mxfp4_backend`, 0.25+ oracle/mxfp4.py
    `_get_priority_backends_for_gpt_oss`), so Triton is Hopper's backend; triton_kernels was an
    optional package before 0.12.0 (`has_triton_kernels()`) and is bundled as
    vllm.third_party.triton_kernels since.
    """
    major = compute_capability[0] if compute_capability is not None else 0
    return major == 9 and (optional_kernels or (version is not None and version.at_least("0.12.0")))


def mxfp4_padded_dims(
    arch: Architecture,
    *,
    tp: int,
    compute_capability: tuple[int, int] | None,
    version: VllmVersion | None,
    optional_kernels: bool = True,
) -> tuple[int, int]:
    """(hidden, intermediate per TP rank) of MXFP4 expert weights after the backend's padding.

    vLLM pads both to the MoE kernel's tile (0.11.0 quantization/mxfp4.py create_weights,
    0.33.0 fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size):
    Marlin (below sm90, and on sm90 without triton_kernels; vllm#23278 logs 'marlin_utils_fp4' on
    an H100 at 0.10.1) intermediate to 128, hidden to 256; FlashInfer TRT-LLM (sm100)
    intermediate to 256 (128 from 0.27.0: 0.26.0 rounds to 256, 0.27.0-0.33.0 to 128), hidden to 256; Triton (sm90, _mxfp4_triton_sm90)
    intermediate to 64 and hidden as it is: its Hopper value layout pads to 16 and 32 only
    (triton_kernels layout_details/hopper_value.py swizzle_data), and what the Triton backend
    adds besides is its scales (mxfp4_triton_sm90_expert_bytes). gpt-oss has hidden 2880:
    padding to 256 adds 6.7 %. TRT-LLM is chosen on sm100 only (`is_device_capability(100)`;
    `capability.major == 10` in later releases); sm12x (RTX PRO / RTX 50xx, GB10) takes the
    Marlin fallback.
    """
    hidden = arch.hidden_size
    inter = (arch.moe_intermediate_size or arch.intermediate_size) // tp
    major = compute_capability[0] if compute_capability is not None else 0
    if major == 10:
        return _round_up(hidden, 256), _round_up(
            inter, 128 if version is not None and version.at_least("0.27.0") else 256
        )
    if _mxfp4_triton_sm90(compute_capability, version, optional_kernels):
        return hidden, _round_up(inter, 64)
    return _round_up(hidden, 256), _round_up(inter, 128)


def mxfp4_triton_sm90_expert_bytes(
    arch: Architecture, *, hidden: int, inter: int, version: VllmVersion | None
) -> float:
    """Bytes of one MoE layer's MXFP4 experts on one rank after the Triton backend's processing.

    Read in vLLM 0.14.1 quantization/mxfp4.py and 0.25.1 fused_moe/oracle/mxfp4.py
    (`convert_gpt_oss_weight_to_mxfp4_moe_kernel_format`, TRITON branch):
    - the E2M1 values, two per byte, in the Hopper value layout (rows to 16, bytes to 32:
      triton_kernels hopper_value.py `swizzle_data`);
    - the E8M0 scales (one per 32) swizzled into the kernel's PrecisionConfig: output features
      to 2 * num_warps * 2 * 8 = 256 (num_warps 8), scale columns to 2 (hopper_scale.py);
    - before 0.25.0 the loaded scales as well: the layer keeps its `w13_weight_scale` /
      `w2_weight_scale` Parameters beside the swizzled copy; 0.25.0 adds
      `del layer.w13_weight_scale` ("drop the now-dead weight/scale Parameters to free their
      memory"; absent in 0.24.0);
    - the biases in fp32 (`w13_bias.to(torch.float32)`).
    Logged: gpt-oss-120b on one H100 64.38 GiB at 0.14.1 (vllm#33155), 61.29 GiB at 0.25.1
    (bench row 120): the 3.1 GiB between them is the second copy of the scales, not padding.
    """
    experts = arch.num_experts or 1
    out13, out2 = 2 * inter, hidden  # output features of gate_up (w13) and down (w2)
    values = experts * (
        _round_up(out13, 16) * _round_up(hidden // 2, 32)
        + _round_up(out2, 16) * _round_up(inter // 2, 32)
    )
    loaded_scales = experts * (out13 * (hidden // 32) + out2 * (inter // 32))
    swizzled_scales = experts * (
        _round_up(out13, 256) * _round_up(hidden // 32, 2)
        + _round_up(out2, 256) * _round_up(inter // 32, 2)
    )
    kept = loaded_scales if version is None or not version.at_least("0.25.0") else 0
    biases = experts * (out13 + out2) * 4
    return float(values + swizzled_scales + kept + biases)


def decoder_layer_bytes(
    arch: Architecture,
    layer: int,
    *,
    tp: int,
    dtype: str,
    quant: Quantization | None,
    compute_capability: tuple[int, int] | None = None,
    version: VllmVersion | None = None,
    optional_kernels: bool = True,
) -> float:
    """Weight bytes of decoder layer `layer` on one TP rank."""
    unq = dtype_bytes(dtype)
    mxfp4 = quant is not None and quant.method is QuantMethod.MXFP4 and arch.is_moe
    q_bytes = quant.bytes_per_param() if quant else unq
    dense_q_bytes = quant.dense_bytes_per_param() if quant else unq
    total = 0.0
    attn_split, attn_rep = _attention_params(arch, tp, layer)
    if arch.parallel_hybrid:
        attn_split += _linear_layer_params(arch, tp)  # Falcon-H1: both mixers in every layer
    elif not is_full_attention_layer(arch, layer):
        attn_split, attn_rep = _linear_layer_params(arch, tp), 0.0
    routed, other_mlp, mlp_rep = _mlp_params(arch, layer, tp)
    if arch.layer_pattern:
        # Nemotron-H: one mixer per layer: M Mamba2, * attention, - MLP, E MoE
        kind = arch.layer_pattern[layer : layer + 1]
        if kind in ("-", "E"):
            attn_split = attn_rep = 0.0
        else:
            routed = other_mlp = mlp_rep = 0.0
        if kind == "-":
            routed, mlp_rep = 0.0, 0.0
            other_mlp = (
                (3 if arch.gated_mlp else 2) * arch.hidden_size * arch.intermediate_size / tp
            )
    attn_b = mlp_b = routed_b = float(unq)
    if quant is not None:
        mlp_quantised = not (
            quant.mlp_only
            and (
                layer < quant.unquantized_mlp_layers // 2
                or layer >= arch.num_hidden_layers - quant.unquantized_mlp_layers // 2
            )
        )
        routed_b = q_bytes if mlp_quantised else unq
        if not quant.experts_only:
            mlp_b = dense_q_bytes if mlp_quantised else unq
            attn_b = unq if quant.mlp_only else dense_q_bytes
        moe_layer = arch.is_moe and layer >= arch.first_k_dense_replace
        if quant.shared_expert_bits is not None and moe_layer:
            mlp_b = quant.shared_expert_bits / 8.0  # other_mlp of a MoE layer: shared experts
    if mxfp4 and routed:
        # expert tensors at the padded shape, plus bf16 biases w13 [E, 2I] and w2 [E, H]
        # (mxfp4.py create_weights registers w13_bias / w2_bias in torch.bfloat16)
        hid, inter = mxfp4_padded_dims(
            arch,
            tp=tp,
            compute_capability=compute_capability,
            version=version,
            optional_kernels=optional_kernels,
        )
        experts = arch.num_experts or 1
        routed = 0.0
        if _mxfp4_triton_sm90(compute_capability, version, optional_kernels):
            total += mxfp4_triton_sm90_expert_bytes(arch, hidden=hid, inter=inter, version=version)
        else:
            total += experts * 3 * hid * inter * q_bytes + experts * (2 * inter + hid) * 2
    total += attn_split * attn_b + attn_rep * attn_b + routed * routed_b + other_mlp * mlp_b
    total += (mlp_rep + 2 * arch.hidden_size) * unq  # router, two RMSNorms
    return total


def weights_bytes(
    arch: Architecture,
    *,
    tp: int,
    pp: int,
    stage: int,
    dtype: str,
    quant: Quantization | None,
    compute_capability: tuple[int, int] | None = None,
    version: VllmVersion | None = None,
    optional_kernels: bool = True,
) -> float:
    """Weight bytes on one rank of PP stage `stage` (embeddings first stage, lm_head last)."""
    unq = dtype_bytes(dtype)
    layers = layers_per_stage(arch.num_hidden_layers, pp)
    first = sum(layers[:stage])
    total = 0.0
    for layer in range(first, first + layers[stage]):
        total += decoder_layer_bytes(
            arch,
            layer,
            tp=tp,
            dtype=dtype,
            quant=quant,
            compute_capability=compute_capability,
            version=version,
            optional_kernels=optional_kernels,
        )
    embed = arch.vocab_size * arch.hidden_size / tp * unq
    if stage == 0:
        total += embed + arch.vision_params * unq
        if arch.hidden_size_per_layer_input:
            # per-layer embeddings: a vocab x (layers x PLE) table, vocab-parallel, plus the
            # model projection hidden x (layers x PLE) (gemma4.py embed_tokens_per_layer,
            # per_layer_model_projection): 2.3 B of Gemma-4-E2B's parameters
            ple = arch.num_hidden_layers * arch.hidden_size_per_layer_input
            vocab_pl = arch.vocab_size_per_layer_input or arch.vocab_size
            total += (vocab_pl * ple / tp + arch.hidden_size * ple) * unq
    if stage == pp - 1:
        total += arch.hidden_size * unq  # final norm
        if not arch.tie_word_embeddings or pp > 1:
            head_b = quant.lm_head_bits / 8.0 if quant and quant.lm_head_bits else unq
            total += embed / unq * head_b
    return total


# ------------------------------------------------------------- speculative decoding and LoRA

NO_DRAFT_WEIGHTS = ("ngram", "ngram_gpu", "suffix")


def draft_layers(arch: Architecture, args: ResolvedArgs) -> tuple[int, Architecture | None, str]:
    """(draft decoder layers, the architecture they have, note) for the speculative method.

    MTP ('mtp', 'deepseek_mtp', 'qwen3_next_mtp', ...) loads the checkpoint's own prediction
    layers: num_nextn_predict_layers / mtp_num_hidden_layers of the target's shape (deepseek_mtp.py
    DeepSeekMultiTokenPredictorLayer: a decoder layer + eh_proj 2h x h, embeddings and head
    shared). EAGLE heads are one dense decoder layer of the target's width (llama_eagle.py; fc
    2h x h, EAGLE-3 3h x h); their own config is not read, so that is an estimate. ngram and
    suffix decoding hold no weights. Each draft layer has attention, so it adds KV per token.
    """
    method = (args.speculative_method or "").lower()
    if not method or not args.num_speculative_tokens or method in NO_DRAFT_WEIGHTS:
        return 0, None, ""
    if "mtp" in method:
        return max(1, arch.num_mtp_layers), arch, ""
    if method.startswith("eagle"):
        dense = arch.model_copy(
            update={
                "num_experts": None,
                "linear_layers": 0,
                "linear_kind": None,
                "first_k_dense_replace": 0,
                "num_kv_shared_layers": 0,
                "hidden_size_per_layer_input": 0,
            }
        )
        return 1, dense, "EAGLE draft sized as one dense decoder layer of the target's width"
    return 0, None, f"the draft model of speculative method {method!r} is not in the estimate"


def draft_weights_bytes(
    arch: Architecture, args: ResolvedArgs, quant: Quantization | None
) -> tuple[float, str]:
    """Weight bytes per rank of the speculative draft (see draft_layers)."""
    count, shape, note = draft_layers(arch, args)
    if shape is None:
        return 0.0, note
    unq = dtype_bytes(args.dtype)
    tp = args.tensor_parallel_size
    h = arch.hidden_size
    if shape is arch:  # MTP: the target's last layer shape, at the checkpoint's format
        layer = decoder_layer_bytes(
            arch, arch.num_hidden_layers - 1, tp=tp, dtype=args.dtype, quant=quant
        )
        return count * (layer + (2 * h * h / tp + 3 * h) * unq), note
    fc = (3 if (args.speculative_method or "").lower() == "eagle3" else 2) * h * h
    layer = decoder_layer_bytes(shape, 0, tp=tp, dtype=args.dtype, quant=None)
    return count * layer + fc * unq, note


def lora_bytes(arch: Architecture, args: ResolvedArgs, layers: int) -> float:
    """LoRA slot buffers per rank: every packed linear of every layer gets lora_a [max_loras,
    rank, in] and lora_b [max_loras, out, rank] in the model dtype (vLLM lora/layers
    column_parallel_linear.py / base_linear.py create_lora_weights): column-parallel layers
    (qkv, gate_up) shard lora_b, row-parallel ones (o, down) lora_a. Dense MLPs only: MoE expert
    LoRA is not counted."""
    if not args.max_loras:
        return 0.0
    tp, h, r = args.tensor_parallel_size, arch.hidden_size, args.max_lora_rank
    q_out = arch.num_attention_heads * arch.head_dim
    kv_out = 2 * arch.num_key_value_heads * arch.head_dim
    attn = 3 * r * h + (q_out + kv_out) / tp * r + r * q_out / tp + h * r
    mlp = 0.0 if arch.is_moe else 2 * r * h + 2 * arch.intermediate_size / tp * r
    mlp += 0.0 if arch.is_moe else r * arch.intermediate_size / tp + h * r
    return layers * (attn + mlp) * args.max_loras * dtype_bytes(args.dtype)


# ------------------------------------------------------------------------------------- KV cache


def kv_bytes_per_token(arch: Architecture, *, tp: int, layers: int, kv_dtype_bytes: int) -> int:
    """DM §2: GQA replicates KV heads when TP exceeds them; MLA caches one latent per token,
    not divided by TP. Of a hybrid's `layers`, only the full-attention share holds KV."""
    if arch.is_hybrid:
        layers = round(layers * arch.full_attention_layers / arch.num_hidden_layers)
    if arch.is_mla:
        lora, rope = arch.kv_lora_rank or 512, arch.qk_rope_head_dim or 64
        width = (lora + rope) * kv_dtype_bytes
        if arch.index_head_dim:
            if kv_dtype_bytes == 1:
                # fp8_ds_mla ('fp8' is its alias on the sparse backend): fp8 latent, one fp32
                # scale per 128 of it, bf16 RoPE part = 656 B for DeepSeek-V3.2
                # (v1/attention/backends/mla/flashmla_sparse.py, 'the 656B layout').
                width = lora + lora // 128 * 4 + rope * 2
            # the indexer's K cache: head_dim fp8 values + one fp32 scale per 128
            # (deepseek_v2.py Indexer: DeepseekV32IndexerCache(head_dim + head_dim //
            # quant_block_size * 4, uint8)), one more per-token cache in every layer.
            width += arch.index_head_dim + arch.index_head_dim // 128 * 4
        return layers * width
    if arch.num_kv_shared_layers or arch.global_head_dim:
        # Gemma-3n / Gemma-4: layers reusing an earlier layer's KV hold none (gemma4.py
        # Gemma4Attention: kv_sharing_target_layer_name), full-attention layers hold the wider
        # global head. A PP stage's share is taken in proportion.
        total = sum(
            2 * max(1, kvh // tp) * hd * kv_dtype_bytes
            for i in range(arch.num_hidden_layers)
            if not arch.is_kv_shared(i)
            for kvh, hd in [arch.attention_dims(i)]
        )
        return total * layers // arch.num_hidden_layers
    heads = max(1, arch.num_key_value_heads // tp)
    return 2 * layers * heads * arch.head_dim * kv_dtype_bytes


# ------------------------------------------------------------------------ hybrid state pages

# Smallest kernel block of the attention backends a hybrid runs with on CUDA (FlashAttention,
# FlashInfer, Triton: get_supported_kernel_block_sizes() -> MultipleOf(16) / [16, 32, 64]);
# vLLM 0.11.0 hard-codes the same 16 (HybridAttentionMambaModelConfig).
HYBRID_KERNEL_BLOCK = 16
# FlashInfer's GDN prefill exports state checkpoints every 64 tokens
# (v1/attention/backends/gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT). In align mode the
# block is a multiple of it and each state group keeps one checkpoint block per sequence
# (qwen_gdn_linear_attn.py get_kv_cache_spec: num_prefill_checkpoint_blocks=1). Present in the
# 0.33.0 source; vLLM 0.24 on an RTX 5090 still aligned to 16 with 2 blocks (row 54), so the
# checkpoint is modelled from 0.33 on.
GDN_CHECKPOINT_ALIGNMENT = 64
GDN_CHECKPOINT_FROM = "0.33.0"
# Prefix caching is on by default for hybrids (ModelConfig.is_prefix_caching_supported: 'hybrid'
# -> True, 0.33.0), which puts the state in 'align' mode: two state blocks per sequence
# (MambaSpec.max_memory_usage_bytes). vLLM 0.11.0 turned prefix caching off for hybrids
# (MambaModelConfig: 'disabling prefix caching'): one block. Mamba prefix caching arrived after
# 0.11 (vllm#25752); the switch is placed at 0.12, which errs low on tokens if it came later.
HYBRID_PREFIX_CACHING_FROM = "0.12.0"


def state_page_bytes(arch: Architecture, *, tp: int, model_dtype: str, spec_tokens: int = 0) -> int:
    """Bytes of one sequence's state in one fixed-state layer (vLLM MambaSpec.page_size_bytes
    before padding): conv state + recurrent state, shapes from mamba_utils.py
    MambaStateShapeCalculator (gated_delta_net_state_shape, mamba2_state_shape,
    mamba1_state_shape) divided by TP. The conv state is in the model dtype (mamba_cache_dtype
    'auto'); the recurrent state in mamba_ssm_dtype when the config names one (Qwen3.5 / 3.6:
    float32, models/config.py Qwen3_5ForConditionalGenerationConfig), else the model dtype.
    """
    conv_b = dtype_bytes(model_dtype)
    ssm_b = dtype_bytes(arch.mamba_ssm_dtype) if arch.mamba_ssm_dtype else conv_b
    k = arch.linear_conv_kernel_dim or 4
    if arch.linear_kind is LinearKind.GATED_DELTA_NET:
        nk, nv = arch.linear_num_key_heads or 16, arch.linear_num_value_heads or 32
        dk, dv = arch.linear_key_head_dim or 128, arch.linear_value_head_dim or 128
        conv = (2 * nk * dk + nv * dv) // tp * (k - 1 + spec_tokens)
        return conv * conv_b + nv // tp * dv * dk * ssm_b
    inter = arch.mamba_intermediate_size or 2 * arch.hidden_size
    state = arch.mamba_d_state or 128
    if arch.linear_kind is LinearKind.MAMBA2:
        groups = arch.mamba_n_groups or 1
        if groups % tp:
            groups += tp - groups  # extra_groups_for_head_shards
        conv = (inter + 2 * groups * state) // tp * (k - 1 + spec_tokens)
        heads = arch.mamba_num_heads or 128
        return conv * conv_b + heads // tp * (arch.mamba_head_dim or 64) * state * ssm_b
    return inter // tp * (k - 1) * conv_b + inter // tp * state * ssm_b


def hybrid_layout(
    arch: Architecture,
    *,
    tp: int,
    layers: int,
    kv_dtype_bytes: int,
    model_dtype: str,
    block_size: int,
    version: VllmVersion,
    compute_capability: tuple[int, int] | None,
    draft_attention_layers: int = 0,
    spec_tokens: int = 0,
    prefix_caching: bool = True,
) -> HybridLayout:
    """The attention block size and the shared block pool of a hybrid on one rank.

    Block size: Platform._align_hybrid_block_size (vLLM 0.33.0 platforms/interface.py; 0.11.0
    HybridAttentionMambaModelConfig.verify_and_update_config): the attention block is raised to
    the smallest multiple of the kernel alignment whose page (block x one token's KV in one
    layer) holds one state page, and the state page is padded to exactly that size.
    Pool: kv_cache_planning._get_kv_cache_groups_uniform_page_size: layers of each type are cut
    into groups of the smaller type's count (the larger count when it is < 1.5x the smaller);
    one block holds one page of every layer in a group, so bytes per block = group size x page.
    """
    full = round(layers * arch.full_attention_layers / arch.num_hidden_layers)
    linear = round(layers * arch.linear_layers / arch.num_hidden_layers)
    full += draft_attention_layers  # MTP / EAGLE layers join the attention layers
    heads = max(1, arch.num_key_value_heads // tp)
    attn_token = 2 * heads * arch.head_dim * kv_dtype_bytes
    # speculative tokens widen the conv state and pin one state block each
    # (MambaSpec num_speculative_blocks; mamba_utils.py num_spec)
    state = state_page_bytes(arch, tp=tp, model_dtype=model_dtype, spec_tokens=spec_tokens)
    align_mode = prefix_caching and version.at_least(HYBRID_PREFIX_CACHING_FROM)
    checkpoint = (
        align_mode
        and arch.linear_kind is LinearKind.GATED_DELTA_NET
        and version.at_least(GDN_CHECKPOINT_FROM)
        and compute_capability is not None
        and compute_capability >= (9, 0)
        and (compute_capability[0] == 9 or (arch.linear_key_head_dim or 128) == 128)
    )
    # kernel_block_alignment_size = max(smallest kernel block, cache block_size) (0.33.0)
    alignment = max(HYBRID_KERNEL_BLOCK, block_size) if align_mode else HYBRID_KERNEL_BLOCK
    if checkpoint:
        alignment = math.lcm(alignment, GDN_CHECKPOINT_ALIGNMENT)
    needed = alignment * -(-state // (alignment * attn_token))
    block = max(block_size, needed)
    page = block * attn_token
    if full == 0 or linear == 0:
        group = max(full, linear, 1)
    else:
        group = min(full, linear)
        if max(full, linear) < 1.5 * group:
            group = max(full, linear)
    return HybridLayout(
        block_size=block,
        attention_page_per_token=attn_token,
        state_page=state,
        group_size=group,
        attention_groups=-(-full // group),
        state_groups=-(-linear // group),
        state_blocks_per_seq=((2 + (1 if checkpoint else 0)) if align_mode else 1) + spec_tokens,
        bytes_per_block=group * page,
    )


# ----------------------------------------------------------------------------------- activation


def _forward_transient_bytes(arch: Architecture, tokens: int, tp: int, act_bytes: int) -> float:
    h = arch.hidden_size
    if arch.is_moe:
        moe_inter = arch.moe_intermediate_size or arch.intermediate_size
        top_k = arch.num_experts_per_tok or 2
        mlp = top_k * (3 * moe_inter / tp + h) + (arch.num_experts or 1) * 2
        if arch.first_k_dense_replace:
            mlp = max(mlp, 3 * arch.intermediate_size / tp)
    else:
        mlp = (3 if arch.gated_mlp else 2) * arch.intermediate_size / tp
    attn = (arch.num_attention_heads + 2 * arch.num_key_value_heads) * arch.head_dim / tp
    return tokens * (max(mlp, attn) + 3 * h) * act_bytes


# vLLM's WorkspaceManager (v1/worker/workspace.py, read in 0.32.0 and 0.33.0) keeps the fused-MoE
# workspace it grows during the profile run: FusedMoEModularKernel._allocate_buffers
# (fused_moe/modular_kernel.py) takes workspace13 and workspace2 from
# current_workspace_manager().get_simultaneous and never frees them, and memory_profiling
# (utils/mem_utils.py) measures "consumed" after the profile run (free memory before the instance
# minus free memory after it), so the workspace is consumed memory that the sampler's transient peak
# comes on top of, not a transient that max(forward, sampler) covers. The logs of 0.28.0 (bench
# rows 64-66: consumed 0.86 GiB above the packed weights, peak 0.53 GiB eager) show it; the first
# release with the manager was not established, so it is counted from 0.20 (it only adds memory:
# the safe side) and the per-graph MoE buffers are dropped only from 0.28, the earliest release
# whose logs show graphs that reuse the locked workspace.
MOE_WORKSPACE_FROM = "0.20.0"
MOE_GRAPH_BUFFERS_UNTIL = "0.28.0"


# Dense int4 AWQ/GPTQ checkpoints (Marlin repack) on Blackwell workstation/consumer cards (sm12x) at
# vLLM 0.27+ log more consumed memory in the 0.27+ ledger ("Actual usage is C GiB for consumed memory
# (weights + non-torch)", v1/worker/gpu_worker.py; C = free memory before the instance minus free
# memory after the profile run, utils/mem_utils.py ``memory_profiling``) than the packed weights plus
# non-torch: bench row 106 (Qwen3-32B-AWQ, RTX 5090, 0.28.0) +1.74 GiB, row 107 (Qwen3-14B-AWQ, same
# card and release) +1.63 GiB, row 86 (Qwen3-8B-AWQ, RTX 5070 Ti, 0.30.0) about +1.3 GiB. Each is
# about one unquantised vocab x hidden matrix in the activation dtype (1.45 GiB for hidden 5120,
# 1.16 GiB for 4096): the size of the embedding table the first compile benchmarks, whose segment
# the allocator keeps in about half of cold TP1 text-only starts (see the comment on the vocab x
# hidden floor before V2_FOR_ALL_FROM). EMPIRICAL as a term: that it
# lands on these cards' int4 starts and not on others is not derived from vLLM's code (0.33.0's
# base_loader.py empties the caching allocator after ``process_weights_after_loading`` and
# ``memory_profiling`` empties it again before measuring, so a freed pre-repack copy should not be
# counted; Marlin serves AWQ/GPTQ on sm89 as well, and the sm89 rows 46-49 of the same checkpoint and
# release show no excess). Two starts of the same model and flags (rows 105 and 106) differ by
# 1.42 GiB of consumed memory, so the excess is not even deterministic; the planner counts it always
# (the safe side: it only lowers the promised KV cache). Gated to what the rows show: dense models
# (the GPTQ MoE rows 64-66 on the RTX 5090 show 0.36 GiB, covered by the MoE workspace term), int4
# AWQ/GPTQ, compute capability 12.x, vLLM 0.20+: the rows are 0.28/0.30, but the planner's KV margin
# for this cell (fidelity.py, era 0.20+ x sm12x x AWQ/GPTQ) is measured with the term, so the whole
# era counts it (whether 0.20-0.26 pay it is not established; counting it only adds memory); no
# upper bound until a release is seen without it.
SM12X_INT4_EXCESS_FROM = "0.20.0"
SM12X_INT4_EXCESS_MAJOR = 12


def sm12x_int4_excess_bytes(
    arch: Architecture,
    quant: Quantization | None,
    *,
    tp: int,
    dtype: str,
    compute_capability: tuple[int, int] | None,
    version: VllmVersion,
) -> float:
    """Consumed memory above weights + non-torch of a dense int4 AWQ/GPTQ model on sm12x at
    vLLM 0.20+ (see SM12X_INT4_EXCESS_FROM): one vocab x hidden matrix in the activation dtype,
    vocab-parallel over TP. Empirical, sourced to bench rows 86, 106 and 107."""
    if (
        quant is None
        or quant.method not in (QuantMethod.AWQ, QuantMethod.GPTQ)
        or quant.bits > 4
        or arch.is_moe
        or compute_capability is None
        or compute_capability[0] != SM12X_INT4_EXCESS_MAJOR
        or not version.at_least(SM12X_INT4_EXCESS_FROM)
    ):
        return 0.0
    return arch.vocab_size * arch.hidden_size / tp * dtype_bytes(dtype)


# The first compile's embedding benchmark as a plan reserve, not a prediction. From torch 2.9 vLLM
# compiles with TorchInductor's combo kernels and benchmarks them (config/compilation.py
# ``__post_init__``: ``combo_kernels`` and ``benchmark_combo_kernel``, read alike in 0.11.1, 0.11.2,
# 0.12.0, 0.18.0, 0.29.0 and 0.33.0; 0.11.1 is the first release on torch 2.9.0, 0.11.0 pins torch
# 2.8.0 and lacks the setting), and a text-only model's embedding lookup is in the compiled graph (at TP1; at TP>1 until
# 0.29.0's fused embedding op), so a cold first compile allocates a copy of the (padded vocab / TP) x
# hidden table. vLLM's profiler counts as consumed memory whatever the caching allocator cannot give
# back after the profile run (utils/mem_utils.py ``memory_profiling``: free memory at the instance's
# start minus free memory after ``empty_cache()``), and the allocator can give a segment back only
# when all of it is free: a long-lived allocation that lands in the freed table (the cuBLAS
# workspace, the fused-MoE workspace) keeps the whole segment. That happens in about half of cold
# starts and no rule on the configuration predicts which: bench rows 73, 106, 107 and 133-136 keep it
# (Qwen3-4B BF16 on an L4 with four attention backends, +0.71 GiB of consumed memory over the warm
# row 139), rows 61, 63, 117, 125, 137, 138 and 140-149 do not (Qwen3-4B with online FP8 on the same
# L4; Qwen2.5-7B on ten GPUs), and a public calculator's cohort (mondegreens/apron, code index ids
# 70586505127 and 70738897964) counts 10 of 21 cold TP1 text-only boots, the same model going both
# ways by GPU (Qwen3-32B: A100 none, H100 1.45 GiB). Modelled as consumed memory on every such start
# it puts rows 91-95, 125 and 146 at -22 to -37 %; left out, row 135 is +8.7 %. So the prediction
# leaves it out and the plan keeps it as a reserve (plan.py ``kv_reserve``): a pod's first start must
# hold its target even if the segment is kept, so a plan's KV margin is at least this share of its
# KV cache. A warm compile cache (rows 118, 119, 139), enforce_eager and multimodal inputs (their
# embeddings are computed outside the graph) run no such benchmark. The sm12x int4 term above already
# counts the same matrix in the prediction, so such starts take no reserve on top. Nor does an
# engine whose allocator runs with expandable segments (PYTORCH_CUDA_ALLOC_CONF, which the
# operator's pods set unless a KV connector is configured: rendering/workload.py): PyTorch's
# ``release_blocks`` (c10/cuda/CUDACachingAllocator.cpp) gives back only unsplit blocks of ordinary
# segments but unmaps every free block of an expandable one, so ``empty_cache()`` returns the
# table's pages whatever else lives beside them. That follows from the allocator's code; no bench
# row is known to have run with the setting.
COMPILE_SEGMENT_FROM = "0.11.1"
FUSED_TP_EMBEDDING_FROM = "0.29.0"
EMBEDDING_PAD = 64  # vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE


def compile_segment_bytes(arch: Architecture, args: ResolvedArgs) -> float:
    """Bytes of the embedding table copy a cold first compile benchmarks, which the allocator may
    keep as consumed memory (see COMPILE_SEGMENT_FROM); 0 where no such benchmark runs."""
    version = VllmVersion.parse(args.vllm_version)
    tp = args.tensor_parallel_size
    if (
        args.enforce_eager
        or args.expandable_segments
        or not version.at_least(COMPILE_SEGMENT_FROM)
        or (arch.is_multimodal and not args.language_model_only)
        or (tp > 1 and version.at_least(FUSED_TP_EMBEDDING_FROM))
    ):
        return 0.0
    vocab = _round_up(arch.vocab_size, EMBEDDING_PAD)
    return vocab * arch.hidden_size / tp * dtype_bytes(args.dtype)


# Model Runner V2 (v1/worker/gpu/model_runner.py) measures no CUDA-graph memory before 0.29: its
# ``GPUModelRunner.profile_cudagraph_memory`` is ``return 0`` ("NOTE(woosuk): It is TBD whether we
# keep this API or not.") in every release from 0.22.0 through 0.28.0; 0.29.0 replaces it with a
# measured capture (v1/worker/gpu/cudagraph_utils.py ``profile_cudagraph_memory``).
# ``Worker.determine_available_memory`` (v1/worker/gpu_worker.py, 0.28.0) subtracts what the runner
# returns, so a V2 start budgets no graph memory: the graphs are captured after the KV cache, in the
# memory gpu_memory_utilization leaves outside the budget (the pre-0.20 rule). Which models run on
# V2 by default is ``VllmConfig._is_default_v2_model_runner_model`` (config/vllm.py): 0.22.0 only
# ``Qwen3ForCausalLM``, 0.23.0 also ``LlamaForCausalLM`` and ``MistralForCausalLM``, both for dense
# unquantised checkpoints; 0.24.0 those three (quantised too) besides some MoE architectures;
# 0.25.0-0.28.0 every model that is neither hybrid nor MoE, besides listed MoE architectures
# (DeepseekV2, Qwen2Moe, GraniteMoe, ...). The listed MoE architectures are not matched here, nor is a
# speculative config (V2 takes eagle/eagle3/mtp, ngram falls back to V1): both keep the subtracted
# estimate, the safe side. The 0.27+ ledgers of V2 starts show it: rows 63/72/73 (Qwen2.5-0.5B,
# 0.27.1) log a peak of 0.08-0.31 GiB, no estimate in it, rows 70/71 (Qwen2.5-7B-AWQ, 0.28.0) 1.04 GiB
# with 0.53 GiB of graphs captured after the KV cache; row 87 (0.26.0) logs "Using V2 Model Runner".
V2_RUNNER_NO_GRAPH_ESTIMATE = ("0.22.0", "0.29.0")
V2_DEFAULT_DENSE_ARCHITECTURES: tuple[tuple[str, frozenset[str]], ...] = (
    ("0.23.0", frozenset({"Qwen3ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"})),
    ("0.22.0", frozenset({"Qwen3ForCausalLM"})),
)
V2_QUANTISED_DEFAULT_FROM = "0.24.0"
V2_ANY_DENSE_FROM = "0.25.0"


def v2_runner_without_graph_estimate(
    arch: Architecture, args: ResolvedArgs, quant: Quantization | None
) -> bool:
    """Whether vLLM runs this start on Model Runner V2 in a release whose V2 runner estimates no
    CUDA-graph memory (0.22-0.28, V2_RUNNER_NO_GRAPH_ESTIMATE): its KV budget then loses none."""
    version = VllmVersion.parse(args.vllm_version)
    first, until = V2_RUNNER_NO_GRAPH_ESTIMATE
    if not version.at_least(first) or version.at_least(until):
        return False
    if arch.is_moe or arch.is_hybrid or args.speculative_method:
        return False
    if version.at_least(V2_ANY_DENSE_FROM):
        return True
    listed = next(
        (names for since, names in V2_DEFAULT_DENSE_ARCHITECTURES if version.at_least(since)),
        frozenset(),
    )
    if not listed.intersection(arch.registry_names):
        return False
    return quant is None or version.at_least(V2_QUANTISED_DEFAULT_FROM)


# What the planner does with such a start. Model Runner V2's profile (0.28.0
# v1/worker/gpu/model_runner.py ``profile_run``: ``_dummy_run(max_num_tokens)`` then
# ``_dummy_sampler_run``) runs the forward pass, then ``compute_logits`` on one row per request and
# the sampler, whose ``apply_sampling_params`` (v1/worker/gpu/sample/sampler.py) returns the logits
# untouched when no request needs processing (the dummy batch has default parameters) and whose
# Gumbel sampler (sample/gumbel.py) keeps no vocabulary-wide copy: the sampler's peak is one
# ``max_num_seqs x vocab`` tensor in the model dtype, and neither FlashInfer nor the PyTorch-native
# top-k/top-p path is reached (so a bare pip install changes nothing). EMPIRICAL on top of that code:
# the 0.27+ ledgers of V2 starts log a peak of one vocab x hidden matrix in the model dtype where the
# forward is smaller (row 70/71, Qwen2.5-7B-AWQ on an L4: 1.04 GiB logged, 152,064 x 3,584 x 2 B =
# 1.02 GiB; rows 106/107, Qwen3-32B/14B-AWQ on an RTX 5090: 1.46 / 1.46, 151,936 x 5,120 x 2 B =
# 1.45; row 73, Qwen2.5-0.5B: 0.25 / 0.25), which vLLM's code here does not explain; the planner
# takes the larger of the forward, the sampler and that matrix. It appears none, one or two times
# (in the peak and in consumed memory): rows 49/47 (one configuration on identical L4s) none and one,
# rows 105/106 (the same service) none and two. Unquantised V2 starts take the same terms and land
# as close (KV error, V1 terms -> V2 terms): rows 63 -4.7 -> +0.0 %, 72 -6.2 -> -1.1 %, 73 -4.2 ->
# +1.1 %, 84 -1.7 -> -0.0 %, 87 -8.0 -> -2.3 %, 90 -9.8 -> -1.7 %, 115 -5.0 -> -3.6 %, 117 -7.9 ->
# -1.2 % (its ledger: peak 1.22 predicted, 1.18 logged), 123 -4.0 -> -2.6 %, 127 -30.0 -> +1.4 %.
# The likely source of that matrix, read since: from torch 2.9 vLLM turns on TorchInductor's combo
# kernels with benchmarking (config/compilation.py ``__post_init__`` sets ``combo_kernels`` and
# ``benchmark_combo_kernel``; read alike in 0.19.0-0.29.0, 0.33.0 keeps it unless the compile is
# deterministic), and a text-only model's embedding lookup is in the compiled graph
# (vocab_parallel_embedding.py: ``F.embedding`` at TP1, the masked lookup at TP>1 until 0.29, whose
# ``use_fused_embedding`` calls vLLM's own CUDA op at TP>1; 0.27.1 lacks it), so the first compile
# benchmarks a Triton gather whose random inputs include a copy of the (vocab / TP) x hidden table,
# beside two [tokens, hidden] outputs. A public memory calculator's notes give the same mechanism
# with a GPU memory-history probe (code index id 70586505127: Gemma 4 31B --language-model-only,
# 2,994,733,056 B predicted, 2,995,739,688 B logged) and find that the allocator keeps the table's
# segment, as consumed memory, in 10 of 21 cold TP1 text-only boots (Qwen3-32B: A100 none, H100
# 1.45 GiB), the "none, one or two times" above. A warm compile cache runs no benchmark (rows 117-119,
# 133-139). That peak as a term of every compiled text-only start from 0.19 (V x H / TP x b +
# 2 x T x H x b, replacing this floor) was measured and not kept: rows 133-136 (Qwen3-4B on an L4,
# 0.29.0, cold) +4.0 / +4.6 / +8.7 / +4.3 -> +2.3 / +2.9 / +6.8 / +2.6 %, but row 125 (Qwen3-8B on
# an A10G, 0.30.0, cold) +0.9 -> -19.1 %, 146 (Qwen2.5-7B on an L4, 0.31.0, a fresh pod) -0.3 ->
# -12.8 %, 148/149 (the same on an RTX 4090) +3.6 -> -5.8 %, and the 0.20+ era p90 4.7 -> 5.5 %:
# not every cold compile peaks with it, and which ones do is not established.
# EXCEPT with FlashInfer's sampler off (``flashinfer_sampling`` False: a bare pip install, or
# VLLM_USE_FLASHINFER_SAMPLER=0 in the container's env): row 108 (Qwen2.5-7B BF16 on an RTX 4090,
# 0.27.1, the sampler off) leaves 2.40 GiB beside weights, non-torch and KV, two vocab x hidden matrices, where rows 63/72/73
# (the same machine, release and day, the sampler on) hold one, and its quantised sibling of the same
# script (row 110, FP8, the sampler off) holds one; the V2 terms would over-predict it by +18.9 %.
# vLLM's code read here does not explain that matrix, so such a start keeps the V1 runner's terms
# (the subtracted graph estimate and the native sampler's fp32 copies: -1.7 % there, and row 85,
# Llama-3.1-8B eager on an RTX 3090 at 0.25 with the sampler off, -10.4 %): the safe side. The
# operator's images ship FlashInfer, so its plans take the V2 terms unless spec.vllm.env sets
# VLLM_USE_FLASHINFER_SAMPLER=0 (planning/intent.py ``flashinfer_sampler_on``).
# AND with pipeline parallelism: 0.27.1 runs a PP start on V2 too (config/vllm.py
# ``_get_v2_model_runner_unsupported_features`` excludes PP only with the external_launcher
# backend), but row 130 (Qwen3-32B BF16 at PP2 on two RTX PRO 6000, util 0.426, the post of row 127)
# leaves 3.03 GiB beside weights and KV on its first stage where the TP2 start of row 127 leaves 1.66
# and the V2 terms give 1.81 (+17.8 %). What a V2 PP stage adds is not modelled: two more NCCL
# communicators (the PP group and ``PPHandler``'s "pp_broadcast" sibling, v1/worker/gpu/pp_utils.py)
# and the profile's inter-stage send of max_num_batched_tokens x hidden x 2 tensors are the code's
# candidates. So a PP start keeps the V1 runner's terms (-8.1 % there): the safe side.


# From 0.29.0 ``VllmConfig.use_v2_model_runner`` (config/vllm.py) runs every model on Model Runner V2
# on CUDA, unless a feature it lacks is asked for (``_get_v2_model_runner_unsupported_features``;
# among speculative methods only eagle, eagle3, mtp, dflash, dspark, extract_hidden_states). V2's
# sampler never reaches the PyTorch-native top-k/top-p sort a bare pip install without FlashInfer
# falls back to on the V1 runner (SAMPLER_LOGIT_COPIES_NATIVE): its top-k/top-p is
# ``apply_top_k_top_p`` (v1/sample/ops/topk_topp_sampler.py), which takes the Triton kernel whenever
# Triton is present, and V2 requires Triton. So from 0.29 a bare pip install's sampler peak is the
# image's. Bench row 111 (Qwen2.5-1.5B on an A10G, vLLM 0.31.0 in a pip venv with
# VLLM_USE_FLASHINFER_SAMPLER=0): KV -6.7 % with the native term, -2.1 % without. (0.22-0.28 V2
# starts of unquantised models with the sampler off keep the V1 terms, the native one included;
# see ``v2_profile_terms``.)
V2_FOR_ALL_FROM = "0.29.0"
V2_SPECULATIVE_METHODS = frozenset(
    {"eagle", "eagle3", "mtp", "dflash", "dspark", "extract_hidden_states"}
)


def v2_runner_for_all(args: ResolvedArgs) -> bool:
    """Whether vLLM 0.29+ runs this start on Model Runner V2 (every model on CUDA, unless a
    speculative method V2 lacks is asked for; see V2_FOR_ALL_FROM)."""
    if not VllmVersion.parse(args.vllm_version).at_least(V2_FOR_ALL_FROM):
        return False
    method = (args.speculative_method or "").lower()
    return not method or method in V2_SPECULATIVE_METHODS


def flashinfer_sampling(args: ResolvedArgs) -> bool:
    """FlashInfer's top-k/top-p sampler serves this start: installed (``optional_kernels``), not
    turned off by VLLM_USE_FLASHINFER_SAMPLER=0 (``flashinfer_sampler``), and not a release where
    it is opt-in (FLASHINFER_SAMPLER_OPT_IN: 0.11.1-0.20.x, taken as off)."""
    lo, hi = FLASHINFER_SAMPLER_OPT_IN
    version = VllmVersion.parse(args.vllm_version)
    if version.at_least(lo) and not version.at_least(hi):
        return False
    return args.optional_kernels and args.flashinfer_sampler


def flashinfer_alone(version: VllmVersion) -> bool:
    """Whether a start whose sampler is FlashInfer's warms that path alone (FLASHINFER_ALONE:
    0.9.0-0.20.x, one sampler call in the profile and FlashInfer >= 0.2.3 serving), so its peak
    is SAMPLER_LOGIT_COPIES_FLASHINFER rather than the native Triton path's."""
    lo, hi = FLASHINFER_ALONE
    return version.at_least(lo) and not version.at_least(hi)


def native_sampler_sorts(
    arch: Architecture, args: ResolvedArgs, quant: Quantization | None
) -> bool:
    """Whether a start without FlashInfer's sampler pays the PyTorch sort of the native top-k/top-p
    path (SAMPLER_LOGIT_COPIES_NATIVE): before TRITON_TOP_K_TOP_P_FROM, and on the 0.22-0.28 Model
    Runner V2 starts that keep the V1 terms (the empirical row-108 rule of ``v2_profile_terms``).
    A V1-runner start from 0.19 filters in place with Triton instead."""
    if not VllmVersion.parse(args.vllm_version).at_least(TRITON_TOP_K_TOP_P_FROM):
        return True
    return v2_runner_without_graph_estimate(arch, args, quant)


def v2_profile_terms(arch: Architecture, args: ResolvedArgs, quant: Quantization | None) -> bool:
    """Whether the planner models this start with Model Runner V2's profile: no graph estimate
    in the KV budget, the V2 sampler's peak and the empirical vocab x hidden floor
    (``v2_runner_without_graph_estimate``). An unquantised start with FlashInfer's sampler off
    keeps the V1 runner's terms (row 108: the comment "EXCEPT with FlashInfer's sampler off"), and
    so does a pipeline-parallel one (row 130: the comment "AND with pipeline parallelism")."""
    if quant is None and not flashinfer_sampling(args):
        return False
    if args.pipeline_parallel_size > 1:
        return False
    return v2_runner_without_graph_estimate(arch, args, quant)


# An eager start on Model Runner V2. ``--enforce-eager`` turns torch.compile off as well as the
# CUDA graphs (config/vllm.py ``VllmConfig.__post_init__``: "Enforce eager set, disabling
# torch.compile and CUDAGraphs", compilation_config.mode = CompilationMode.NONE; read in 0.20.0,
# 0.21.0, 0.22.0, 0.24.0, 0.25.0, 0.25.1, 0.26.0, 0.27.1 and 0.29.0), so V2's profile run
# (v1/worker/gpu/model_runner.py ``profile_run``: ``_dummy_run(max_num_tokens)`` then
# ``_dummy_sampler_run``, whose sampler keeps one max_num_seqs x vocab tensor in the model dtype,
# see the comment above ``v2_profile_terms``) holds the forward pass or that tensor and nothing else.
# The two empirical terms the planner adds to compiled V2 starts do not apply: the vocab x hidden
# floor of 0.22-0.28 and the V1 runner's fp32 sampler copies it keeps at 0.29+ (rows 91/92/94/95,
# 0.30.0 with graphs; V2's sampler alone would put them at +19.7 %). Both stand for something the
# compiled profile holds that vLLM's tensors do not explain; rows 117-119 (0.27.1, one start cold
# and two with the compile cache: peak 1.18 / 0.19 / 0.19 GiB, every other term alike) put it on
# the first torch.compile, which an eager start does not run. That holds for a start with
# FlashInfer's sampler off too (the row-108 rule keeps the V1 terms only where the model is
# compiled). Bench: row 93 (Qwen2.5-1.5B eager, 0.30.0, 8 GB card under WSL2; the same card's
# graph starts 91/92/94/95 log 1.93 GiB, this one 3.01) -13.4 -> +1.1 %, row 85 (Llama-3.1-8B eager,
# 0.25.0, RTX 3090 under WSL2, the sampler off) -10.4 -> -5.2 %; rows 121/123 (eager, 0.28, their
# ledgers' peaks 0.50 / 0.32 GiB against 0.54 / 0.34 predicted) keep their figures, their forward
# pass being the larger term already.
def v2_eager_profile(arch: Architecture, args: ResolvedArgs, quant: Quantization | None) -> bool:
    """Whether this is an eager start (``--enforce-eager``) that vLLM runs on Model Runner V2
    (0.22-0.28 ``v2_runner_without_graph_estimate``, 0.29+ ``v2_runner_for_all``), single stage:
    its profile peak is the forward pass or V2's sampler tensor (see the comment above)."""
    if not args.enforce_eager or args.pipeline_parallel_size > 1:
        return False
    return v2_runner_for_all(args) or v2_runner_without_graph_estimate(arch, args, quant)


def moe_workspace_bytes(arch: Architecture, args: ResolvedArgs) -> float:
    """The persistent fused-MoE workspace of one rank (vLLM 0.20+, see MOE_WORKSPACE_FROM).

    Per experts class (0.33.0 fused_moe/experts/*.py ``workspace_shapes``, M the profile run's
    ``max_num_batched_tokens`` without chunking, N the per-rank intermediate size I/TP, K hidden):
    MarlinExperts ``(M x topk, max(N, K))`` + ``(M x topk x max(2N, K))``; TritonExperts
    ``(M, topk, max(N, K))`` + ``(M, topk, max(2N, K))`` (its N is w13's 2I/TP); Cutlass alike.
    workspace13 is shared with the ``(M, K)`` output (``max_shape_size``), in the activation dtype
    (``workspace_dtype``). One buffer serves every MoE layer, so it does not grow with depth.
    """
    if not arch.is_moe or not VllmVersion.parse(args.vllm_version).at_least(MOE_WORKSPACE_FROM):
        return 0.0
    m = args.max_num_batched_tokens
    top_k = arch.num_experts_per_tok or 2
    n = (arch.moe_intermediate_size or arch.intermediate_size) / args.tensor_parallel_size
    k = arch.hidden_size
    ws13 = max(m * top_k * max(n, k), m * k)
    ws2 = m * top_k * max(2 * n, k)
    return (ws13 + ws2) * dtype_bytes(args.dtype)


# vLLM V1's profile run encodes a dummy multimodal batch before the language model's dummy pass
# (v1/worker/gpu_model_runner.py GPUModelRunner.profile_run, read in the 0.2x-0.33 line; the same
# shape since V1): unless --skip-mm-profiling, it logs 'Encoder cache will be initialized with a
# budget of B tokens, and profiled with K <modality> items of the maximum feature size', runs
# ``self.model.embed_multimodal`` on K copies of the largest item (``_get_mm_dummy_batch``) and
# keeps the outputs in ``self.encoder_cache`` while ``_dummy_run`` and the sampler run, clearing
# them only after. K and B come from vllm/multimodal/encoder_budget.py MultiModalBudget:
# B = min(compute budget, cache size), both max(max_num_batched_tokens, largest item)
# (v1/core/encoder_cache_manager.py compute_mm_encoder_budget); K = max(1, min(B // T,
# max_num_seqs x max(1, min(limit_mm_per_prompt, max_model_len // T)))) for T tokens per item
# (``_get_max_items``; without chunked prefill max_num_seqs is capped at max_num_batched_tokens // T).
# A modality limit of 0 takes the modality out of the tower set, and --language-model-only sets
# every limit to 0, so neither profiles the encoder.


def mm_profile_items(
    arch: Architecture,
    *,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    chunked: bool,
    image_limit: int | None,
) -> tuple[int, int]:
    """(K items, T tokens per item) of the profile run's dummy image batch; (0, 0) when the
    catalog lacks the tower's shape or the image limit is 0 (MultiModalBudget._get_max_items)."""
    per_item = arch.vision_max_tokens_per_item
    if not per_item or not arch.vision_hidden_size or image_limit == 0:
        return 0, 0
    budget = max(max_num_batched_tokens, per_item)
    limit = image_limit if image_limit is not None else max_model_len  # vLLM's default: 999
    per_prompt = max(1, min(limit, max_model_len // per_item))
    reqs = max_num_seqs if chunked else min(max_num_seqs, max_num_batched_tokens // per_item)
    return max(1, min(budget // per_item, reqs * per_prompt)), per_item


def encoder_profile_bytes(arch: Architecture, args: ResolvedArgs) -> tuple[float, float]:
    """(peak of the encoder pass, encoder outputs held through the language model's pass) on one
    rank, above the weights.

    The tower of the Qwen3-VL / Qwen3.5 family (model_executor/models/qwen3_vl.py, read in 0.33.0:
    Qwen3_VisionTransformer.forward, Qwen3_VisionBlock.forward, Qwen3_VisionMLP.forward) runs
    P = K x T x merge^2 patches. Alive through every block: the dummy pixel batch
    (P x in_channels x temporal x patch^2, held by the batched inputs; counted in the model
    dtype, a float32 batch would hold twice that), ``encoder_metadata['pos_embeds']`` (P x hidden)
    and the residual stream (P x hidden). A block adds its norm's output (P x hidden, the argument
    of ``self.mlp(self.norm2(x))``) and the larger of the MLP (``linear_fc2(act_fn(linear_fc1(x)))``:
    fc1's output and the activation's, 2 x P x intermediate) and attention (q, k, v, the rotated
    q and k, the output: 6 x P x hidden); flash attention keeps no P x P matrix. With
    --mm-encoder-tp-mode weights the linear layers are sharded over TP; 'data' runs an item whole
    on one rank. The rotary tables and kernel workspaces are left out, so this is what the code
    must hold at once, not a measured peak; the bench rows that profile the tower
    (docs/planning-model.md) are not all reproduced by it, and it is kept structural, not fitted.
    The outputs (K x T x the language model's hidden size, the merger's output) stay in the
    encoder cache while the language model's dummy pass runs.
    """
    items, per_item = args.mm_profile_items, args.mm_profile_tokens_per_item
    if not items:
        return 0.0, 0.0
    act_b = dtype_bytes(args.dtype)
    tp_v = args.tensor_parallel_size if args.mm_encoder_tp_mode == "weights" else 1
    patches = items * per_item * arch.vision_spatial_merge_size**2
    h, inter = arch.vision_hidden_size, arch.vision_intermediate_size
    pixels = (
        patches
        * arch.vision_in_channels
        * arch.vision_temporal_patch_size
        * arch.vision_patch_size**2
        * act_b
    )
    block = patches * (3 * h + max(2 * inter, 6 * h) / tp_v) * act_b
    outputs = items * per_item * arch.hidden_size * act_b
    return pixels + block, outputs


def rejection_sampler_warmup(args: ResolvedArgs) -> bool:
    """Whether vLLM's profile warms up the rejection sampler: every speculative method with
    draft tokens (`_dummy_sampler_run` checks `speculative_config` only)."""
    return bool(args.speculative_method) and args.num_speculative_tokens > 0


def activation_bytes(
    arch: Architecture,
    *,
    sem: MemorySemantics,
    args: ResolvedArgs,
    last_stage: bool,
    v2_profile: bool = False,
    eager_v2: bool = False,
    native_sorts: bool = True,
) -> float:
    """Peak torch memory of the profile run above the weights (VV §3.1 'Peak activation').

    Forward and sampler run one after the other, so the peak is the larger of the two. From
    0.20 a MoE model's persistent fused-MoE workspace is added on top (``moe_workspace_bytes``):
    vLLM counts it as consumed memory, held while the sampler runs. The forward term keeps its
    MoE width as well (a double count where the workspace is persistent: the safe side). A
    vision model's encoder pass (``encoder_profile_bytes``) comes before both, and its cached
    outputs are held through them. With ``v2_profile`` (``v2_profile_terms``) the sampler is
    Model Runner V2's, one ``max_num_seqs x vocab`` tensor in the model dtype, and the peak is at
    least one vocab x hidden matrix (empirical, see ``v2_profile_terms``).
    """
    act_b = dtype_bytes(args.dtype)
    tp = args.tensor_parallel_size
    forward = _forward_transient_bytes(arch, args.max_num_batched_tokens, tp, act_b)
    sampler = 0.0
    if last_stage:
        # V0's sampler always sorts (V0_SAMPLER_SORTS); V1's when FlashInfer's is not serving
        native = sem.engine is Engine.V0 or (
            not flashinfer_sampling(args) and not v2_runner_for_all(args) and native_sorts
        )
        version = VllmVersion.parse(sem.version)
        copies = SAMPLER_LOGIT_COPIES
        if native:
            sorts = not version.at_least(TRITON_TOP_K_TOP_P_FROM)
            copies = SAMPLER_LOGIT_COPIES_NATIVE if sorts else SAMPLER_OFF_V2_STAND_IN_COPIES
        elif flashinfer_sampling(args) and flashinfer_alone(version):
            copies = SAMPLER_LOGIT_COPIES_FLASHINFER
        if rejection_sampler_warmup(args) and version.at_least(SAMPLER_SPEC_FROM):
            copies = max(copies, SAMPLER_LOGIT_COPIES_SPEC)
        sampler = copies * args.max_num_seqs * arch.vocab_size * 4
    if eager_v2:
        # an eager start on Model Runner V2 (``v2_eager_profile``): V2's sampler tensor, and no
        # compile in the profile run, so no vocab x hidden floor
        sampler = args.max_num_seqs * arch.vocab_size * act_b if last_stage else 0.0
    elif v2_profile:
        sampler = args.max_num_seqs * arch.vocab_size * act_b if last_stage else 0.0
        floor = arch.vocab_size * arch.hidden_size / tp * act_b if last_stage else 0.0
        forward = max(forward, floor)
    peak = max(forward, sampler) + moe_workspace_bytes(arch, args)
    encoder, encoder_outputs = encoder_profile_bytes(arch, args)
    if encoder:
        # the encoder pass runs first (before the MoE workspace exists); its outputs stay cached
        # through the language model's pass
        peak = max(encoder, peak + encoder_outputs)
    return peak + ACTIVATION_CONST_GIB * GIB


def non_torch_gib(
    sem: MemorySemantics,
    args: ResolvedArgs,
    sm: tuple[int, int] | None,
    *,
    unified_memory: bool = False,
) -> float:
    """Memory outside PyTorch that the profiler counts (DM §1 table: grows with TP). On a
    unified-memory GPU the free-memory reading is the host's, so host allocations count too
    (UNIFIED_MEMORY_NON_TORCH_GIB, a conservative allowance)."""
    version = VllmVersion.parse(sem.version)
    if sem.era is ProfilerEra.V0_TORCH_ONLY:
        return 0.0  # before PR #2031 only torch allocations were counted (the OOM it fixed)
    base = NON_TORCH_BASE_GIB_018 if version.at_least("0.18.0") else NON_TORCH_BASE_GIB
    if sem.counts_cuda_context:
        base = NON_TORCH_CONTEXT_GIB
    if unified_memory:
        base = max(base, UNIFIED_MEMORY_NON_TORCH_GIB)
    if args.tensor_parallel_size > 1:
        base += NON_TORCH_TP_GIB_SM90 if nvlink_tp_term(sm) else NON_TORCH_TP_GIB
    return base


def nvlink_tp_term(sm: tuple[int, int] | None) -> bool:
    """Whether a TP > 1 rank carries NON_TORCH_TP_GIB_SM90 (NVLINK_TP_MAJORS), at every release.

    It was held from 0.12 only, read from bench row 42 (TP2 on H100, 0.54 GiB of non-torch memory,
    its release inferred); starts whose release is logged carry it earlier: row 77 (Qwen3-Next TP2
    on H200, 0.10.2, ledger "1.38 GiB for non-torch memory") and rows 8/9 (Kimi-K2-Thinking TP8 on
    H200, 0.11.1, 1.37 GiB short of the logged KV cache without it: +2.9 -> -0.3 %). Row 42 stays
    the outlier, on the safe side (-4.5 %). sm12x took the figure too before the capability rule;
    the 0.27+ ledgers of sm120 cards over PCIe log less: row 69 (TP4, RTX PRO 6000 Blackwell,
    0.27.1) 1.70 GiB of non-torch memory against 2.25, row 53 (TP2, RTX 5090) 15.03 GiB consumed
    against 17.01."""
    return sm is not None and sm[0] in NVLINK_TP_MAJORS


def sequences_at(est: MemoryEstimate, context_tokens: int) -> float:
    """Sequences of `context_tokens` the KV cache holds. A hybrid's sequence pins its state
    pages whatever its length, so it is counted in blocks (vLLM's own concurrency rule, see
    HybridLayout.blocks_per_request), not as tokens / context."""
    if est.hybrid_layout is not None:
        return est.num_gpu_blocks / est.hybrid_layout.blocks_per_request(context_tokens)
    return est.kv_cache_tokens / context_tokens


def post_kv_slack_gib(tp: int) -> float:
    """Memory vLLM 0.20+ allocates after the KV cache, outside its budget (POST_KV_SLACK_*)."""
    return POST_KV_SLACK_GIB + POST_KV_SLACK_PER_TP_PEER_GIB * (tp - 1)


def cuda_graph_capture_size(args: ResolvedArgs) -> int:
    """Largest captured batch: min(2 x max_num_seqs, 512), vLLM's default
    max_cudagraph_capture_size (config/compilation.py, 0.11.2+; 512 sizes before)."""
    return min(512, 2 * args.max_num_seqs)


def moe_graph_bytes(arch: Architecture, args: ResolvedArgs, layers: int) -> float:
    """MoE buffers a captured graph keeps: per MoE layer, the fused-MoE intermediate caches of
    the largest capture size expanded by top-k (fused_moe.py intermediate_cache1/2/3: tokens x
    top_k x (2 x I/TP + I/TP + hidden)). The graph's private pool cannot reuse them across layers,
    so they add up with the layer count; this is why MoE (and MLA MoE) models use 2-3x the graph
    memory of a dense model of the same depth (issue #15). Reproduces Kimi-VL-A3B (27 layers, 64
    experts top-6, TP2: 1.26 GiB estimated by vLLM 0.19, row 30) to 1 %.

    From 0.28 the graphs run on the WorkspaceManager's locked workspace (see
    MOE_GRAPH_BUFFERS_UNTIL; 0.33.0 ``GPUModelRunner.profile_cudagraph_memory`` captures after the
    profile run has sized it), so they keep no MoE buffers of their own: 0. Bench row 64
    (Qwen3-30B-A3B GPTQ on Marlin, 0.28.0) logs 1.19 GiB of peak including the graph estimate,
    against 1.71 GiB that this term alone gave."""
    if not arch.is_moe or VllmVersion.parse(args.vllm_version).at_least(MOE_GRAPH_BUFFERS_UNTIL):
        return 0.0
    moe_layers = max(0, layers - (arch.first_k_dense_replace or 0))
    moe_inter = arch.moe_intermediate_size or arch.intermediate_size
    top_k = arch.num_experts_per_tok or 2
    width = top_k * (3 * moe_inter / args.tensor_parallel_size + arch.hidden_size)
    return moe_layers * cuda_graph_capture_size(args) * width * dtype_bytes(args.dtype)


def cuda_graph_gib(arch: Architecture, args: ResolvedArgs, layers: int) -> float:
    """Memory of the captured CUDA graphs (0 with enforce_eager), as a function of architecture
    (layers, hidden, MLP width, MoE top-k x expert width), TP and version.

    Before 0.18 the graphs are measured only after the KV cache exists (actual capture): the
    layer-count rule fitted on those logs. From 0.18 the figure that matters is vLLM's own
    estimate, which the KV budget loses from 0.20 (see CUDA_GRAPH_EST_*). A smaller capture
    ceiling keeps a share of its variable part (``capture_size_share``); a hybrid's share counts
    its PIECEWISE and FULL graphs apart, the FULL ones stopping at max_num_seqs
    (``hybrid_capture_share``).
    """
    if args.enforce_eager:
        return 0.0
    capture = cuda_graph_capture_size(args)
    scale = min(1.0, max(0.25, capture / 512))
    moe = moe_graph_bytes(arch, args, layers) / GIB
    tp = args.tensor_parallel_size
    if not VllmVersion.parse(args.vllm_version).at_least("0.18.0"):
        tp_extra = CUDA_GRAPH_TP_GIB if tp > 1 else 0.0
        return CUDA_GRAPH_BASE_GIB + CUDA_GRAPH_PER_LAYER_GIB * layers * scale + tp_extra + moe
    mlp = (3 if arch.gated_mlp else 2) * arch.intermediate_size
    if arch.is_moe:
        mlp = (
            (arch.num_experts_per_tok or 2)
            * 3
            * (arch.moe_intermediate_size or arch.intermediate_size)
        )
    full = (
        CUDA_GRAPH_EST_FIXED_GIB
        + CUDA_GRAPH_EST_PER_LAYER_HIDDEN_GIB * layers * arch.hidden_size
        + CUDA_GRAPH_EST_PER_LAYER_MLP_GIB * layers * mlp / tp
        + (CUDA_GRAPH_EST_TP_GIB if tp > 1 else 0.0)
    )
    floor = min(full, CUDA_GRAPH_EST_FLOOR_GIB)
    if arch.is_hybrid:
        full_ceiling = min(capture, (1 + args.num_speculative_tokens) * args.max_num_seqs)
        share = hybrid_capture_share(capture, full_ceiling)
    else:
        share = capture_size_share(capture)
    return floor + (full - floor) * share + moe + flashinfer_graph_bytes(arch, args) / GIB


# The default capture sizes (0.33.0 config/vllm.py ``_set_cudagraph_sizes``, the same grid since
# 0.11.2's config/compilation.py): 1, 2, 4, then every 8 below 256, then every 16 up to the
# largest size. 51 sizes at the default ceiling of 512 the estimate was fitted on.
CAPTURE_SIZES_AT_512 = 51


def capture_sizes(capture: int) -> int:
    """How many batch sizes vLLM captures below a ceiling of `capture` (the default grid)."""
    small = sum(1 for n in (1, 2, 4) if n <= capture)
    mid = len(range(8, min(capture + 1, 256), 8))
    large = len(range(256, capture + 1, 16))
    return small + mid + large


def capture_size_share(capture: int) -> float:
    """The share of the 512-size estimate's variable part a smaller capture ceiling keeps.

    vLLM's estimate (0.33.0 ``GPUModelRunner.profile_cudagraph_memory``) is, per mode, the memory
    of the first capture (the largest size: its activations in the graph pool) plus the second
    capture's increment times the remaining sizes: ``first + per_graph x (len(descs) - 1)``. The
    first part grows with the ceiling, the second with the number of sizes; the split was not
    logged, so the share is the larger of the two readings, ``max(capture_sizes(c) / 51, c / 512)``
    (the share of sizes, except just below 512 where the grid steps by 16): 3 sizes (0.06) for 2
    sequences, 11 (0.22) for 32, 35 (0.69) for 128. It replaces the clamp(c / 512, 0.25, 1) of the 0.19 fit, which had no row below 512
    and held every ceiling under 128 at a quarter (bench row 53, two sequences: vLLM 0.27.1 logs
    a 0.13 GiB estimate where that clamp gave 0.51). Only the 0.18+ estimate uses it; the fixed
    floor (CUDA_GRAPH_EST_FLOOR_GIB) stays."""
    return min(1.0, max(capture_sizes(capture) / CAPTURE_SIZES_AT_512, capture / 512))


def hybrid_capture_share(capture: int, full_ceiling: int) -> float:
    """The share of the 512-size estimate's variable part a hybrid (attention + Gated-DeltaNet /
    Mamba) start keeps: its graphs counted per mode, ``(PIECEWISE sizes + FULL sizes) / (2 x 51)``.

    vLLM's code (``v1/cudagraph_dispatcher.py`` ``CudagraphDispatcher.initialize_cudagraph_keys``,
    read alike in 0.20.0, 0.24.0, 0.26.0, 0.27.1 and 0.29.0): under the default
    FULL_AND_PIECEWISE mode the PIECEWISE graphs take every capture size up to the ceiling, the
    FULL decode graphs only the sizes up to ``uniform_decode_query_len x max_num_seqs`` (1 + the
    speculative tokens per sequence); ``gpu_model_runner.py`` ``profile_cudagraph_memory`` adds
    one per-graph increment per size and mode to the larger first capture. The fit's 0.19 rows ran
    1,024 sequences (51 + 51 graphs); a card under 70 GiB runs 256 by default, 51 + 35 graphs
    ('Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)').
    EMPIRICAL, for hybrids only: the same checkpoint at the same release logs 1.06 GiB with
    FULL=51 (bench row 96, Qwen3.8-27B on an H200, 0.24) and 0.75 GiB with FULL=35 (row 100, its
    FP8 sibling on a MIG slice), the PIECEWISE ceiling 512 in both: the FULL graphs carry the
    variable part (vllm#50780 measures about 24 MiB per FULL graph on a hybrid GDN model), not
    the first capture, so the ceiling reading of ``capture_size_share`` is dropped. PIECEWISE and
    FULL graphs are weighted alike, which keeps the estimate above every hybrid log (rows 74, 88,
    100, 126: 1.11 / 0.64 / 0.75 / 0.69 GiB logged against 1.16 / 0.72 / 1.16 / 1.16). Dense
    models keep ``capture_size_share``: the same count lifts 0.30 dense starts over (row 86,
    Qwen3-8B-AWQ: +3.8 % -> +6.5 %)."""
    sizes = capture_sizes(capture) + capture_sizes(min(full_ceiling, capture))
    return min(1.0, sizes / (2 * CAPTURE_SIZES_AT_512))


# FlashInfer's share of the CUDA-graph estimate. Each FlashInfer decode wrapper allocates an
# 8 MiB int workspace on the GPU (flashinfer ``BatchDecodeWithPagedKVCacheWrapper.__init__``:
# ``torch.empty((8 * 1024 * 1024,), dtype=torch.uint8, device=...)``, read in the wheels vLLM pins,
# 0.6.8.post1 to 0.7.2.post1; so does the prefill wrapper), and vLLM keeps one wrapper per captured
# decode batch size (v1/attention/backends/flashinfer.py ``_get_decode_wrapper(batch_size,
# use_cudagraph=True)``, keyed by the size, read alike in 0.20.0, 0.29.0, 0.31.0 and 0.33.0) for
# pure-decode batches up to ``(1 + speculative tokens) x max_num_seqs`` when the decode graphs are
# FULL (FlashInfer's UNIFORM_SINGLE_TOKEN_DECODE support drops them to PIECEWISE under speculative
# decoding). PyTorch's caching allocator serves a 1-10 MiB request from a 20 MiB segment
# (c10/cuda/CUDACachingAllocator.cpp ``kLargeBuffer``, ``kMinLargeAlloc``), so two wrappers take
# one 20 MiB segment; with ``expandable_segments:True`` (the operator's pods) they pack into the
# segment's 20 MiB pages. The shared float workspace is VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE,
# 394 MiB, from 0.26.0 at least max_num_batched_tokens x query heads per rank x head_dim x 16 B.
# Where the estimate meets them differs by runner:
# * Model Runner V2 (0.29+): the float workspace is allocated with the builders
#   (v1/worker/gpu/attn_utils.py), before ``capture_model`` reads free memory (so the estimate
#   does not hold it, and the real one lands after the KV cache, in the slack of
#   POST_KV_SLACK_GIB), but the PIECEWISE captures build attention metadata too
#   (v1/worker/gpu/cudagraph_utils.py ``prepare_inputs_to_capture``), a size up to max_num_seqs
#   being that many one-token decodes, so the measured capture holds one wrapper per such size,
#   plus the prefill and the plain decode wrapper (the sizes above max_num_seqs); the two FULL
#   samples reuse wrappers the PIECEWISE captures made. Logged: Qwen3-4B on an L4 at 0.29.0
#   (bench rows 133-139), the profiling capture takes 0.73-0.74 GiB and the estimate 0.57-0.58 GiB
#   on FlashInfer against 0.37 / 0.22 GiB on FA2 (0.43 / 0.28 FLEX_ATTENTION, 0.39 / 0.24
#   TRITON_ATTN): 0.35-0.37 GiB more than FA2, where 37 wrappers in 19 segments of 20 MiB are
#   0.37 GiB (37 x 8 MiB alone: 0.29).
# * The V1 runner (before 0.29, and only for the starts it runs: Model Runner V2 already serves
#   dense models at 0.22-0.28 with no estimate, see V2_RUNNER_NO_GRAPH_ESTIMATE): PIECEWISE dummy
#   runs build no attention metadata, the first profiled FULL capture allocates the float
#   workspace lazily and one wrapper (a 20 MiB segment), and the second capture's wrapper fits in
#   that segment, so the extrapolation over the remaining FULL sizes (gpu_model_runner.py
#   ``profile_cudagraph_memory``, 0.20.0-0.28.0: ``max(first samples) + per_graph x (n - 1)``,
#   per_graph the second sample's free-memory drop) carries none. That accounts for the starts of
#   nvidia/Qwen3.6-35B-A3B-NVFP4 on sm12x with an fp8 KV cache (rows 54, 60 at 0.24.0, 68 at
#   0.25.1; one sequence up to 8): 0.28-0.31 GiB of KV below the prediction without it, 0.40 GiB
#   with it; an L40S pair of Qwen3.5-9B (0.18.0 on FlashInfer, 0.19.0 on FA2, 35 FULL sizes)
#   logs 1.58 against 0.78 GiB. Not always: a 0.20.0 start of RedHatAI/Qwen3.6-35B-A3B-NVFP4 on an
#   RTX 5090 with one graph per mode estimates 0.36 GiB in all, less than the workspace alone
#   (a request the allocator can carve from a segment it already holds costs no free memory), so
#   the term is the safe side there. Under speculative decoding there is no FULL capture: the
#   club-3090 starts of Qwen3.x-27B with MTP on FlashInfer log estimates of 0.13-0.17 GiB.
# Only FlashInfer's native decode keeps those wrappers. vLLM prefers TRT-LLM's kernels where
# FlashInfer ships them (utils/flashinfer.py ``supports_trtllm_attention``): TRTLLM-gen on sm10x
# (0.20.0 on), XQA decode on sm90 from 0.25.0 (not in 0.24.0) and on sm12x from 0.28.0 (not in
# 0.27.1); they keep one global 394 MiB workspace and no per-size wrapper, and are not counted
# here: the one bench pair that isolates it (rows 64 / 65, an RTX 5090 at 0.28.0, FA2 against
# FlashInfer with XQA) differs by 0.21 GiB of KV, and an H200 pair at 0.27.1 (Ministral-3-14B,
# Model Runner V2, FA3 against FlashInfer with XQA) logs 1.05 against 0.60 GiB of graphs.
FLASHINFER_WRAPPER_WORKSPACE_BYTES = 8 * 1024 * 1024
ALLOCATOR_LARGE_SEGMENT_BYTES = 20 * 1024 * 1024
FLASHINFER_WORKSPACE_BYTES = 394 * 1024 * 1024
FLASHINFER_WORKSPACE_BYTES_PER_HEAD_ELEM = 16
FLASHINFER_WORKSPACE_BY_HEADS_FROM = "0.26.0"
FLASHINFER_TRTLLM_DECODE_MAJOR = 10
FLASHINFER_XQA_DECODE_FROM = {9: "0.25.0", 12: "0.28.0"}
FLASHINFER_GRAPH_TERM_FROM = "0.20.0"
# vLLM's pick when --attention-backend is not given (platforms/cuda.py
# ``_get_backend_priorities``, read alike in 0.24.0, 0.27.1, 0.29.0, 0.31.0 and 0.33.0): sm10x
# lists FLASHINFER first, every other CUDA GPU FLASH_ATTN, FLASHINFER, TRITON_ATTN,
# FLEX_ATTENTION, and the first that supports the start serves it. FlashAttention runs on sm80+,
# head sizes that are multiples of 8 up to 256, attention sinks only as FA3 / FA4, and stores an
# fp8 KV cache only as FA3 on sm90 or FA4 on sm10x (v1/attention/backends/fa_utils.py
# ``flash_attn_supports_kv_cache_dtype``). FlashInfer serves compute capability 8.0-12.1 from
# 0.24.0 (7.5 before; flashinfer#3620), head sizes 64, 128, 256 (and 512 from 0.22), and sinks
# only with TRT-LLM's kernels. So an fp8 KV cache on Ampere, Ada or sm12x runs on FlashInfer, as
# bench row 135 logs ("Using FLASHINFER attention backend out of potential backends:
# ['FLASHINFER', 'TRITON_ATTN']", an L4 at 0.29.0), and Turing on TRITON_ATTN from 0.24.0. MLA
# models have their own list and are reported as "MLA" (no FlashInfer term).
FLASH_ATTN_MIN_CC = (8, 0)
FLASHINFER_MIN_CC = ((7, 5), (8, 0))  # before / from FLASHINFER_SM80_FROM
FLASHINFER_SM80_FROM = "0.24.0"
FLASHINFER_HEAD_512_FROM = "0.22.0"
FLASHINFER_MAX_CC = (12, 1)


def _has_attention_sinks(arch: Architecture) -> bool:
    """gpt-oss's attention sinks (the one family in the catalog with them)."""
    return arch.model_type.startswith("gpt_oss")


def resolve_attention_backend(
    arch: Architecture,
    args: EngineArgs,
    compute_capability: tuple[int, int] | None,
    version: VllmVersion,
    *,
    fp8_kv: bool,
) -> str:
    """The attention backend vLLM runs this start on: --attention-backend when given, else the
    first of vLLM's priority list that supports the model, the GPU and the KV cache dtype (see
    FLASH_ATTN_MIN_CC). "unknown" where the GPU's compute capability is not known."""
    if args.attention_backend:
        return args.attention_backend.upper()
    if arch.is_mla:
        return "MLA"
    if compute_capability is None:
        return "unknown"
    major = compute_capability[0]
    sinks = _has_attention_sinks(arch)
    head = arch.head_dim
    fa = (
        compute_capability >= FLASH_ATTN_MIN_CC
        and head % 8 == 0
        and head <= 256
        and (not fp8_kv or major in (9, 10))
        and (not sinks or major in (9, 10))
    )
    floor = FLASHINFER_MIN_CC[1] if version.at_least(FLASHINFER_SM80_FROM) else FLASHINFER_MIN_CC[0]
    heads = (64, 128, 256, 512) if version.at_least(FLASHINFER_HEAD_512_FROM) else (64, 128, 256)
    fi = (
        floor <= compute_capability <= FLASHINFER_MAX_CC
        and head in heads
        and (not sinks or major == FLASHINFER_TRTLLM_DECODE_MAJOR)
    )
    if major == FLASHINFER_TRTLLM_DECODE_MAJOR and fi:
        return "FLASHINFER"
    if fa:
        return "FLASH_ATTN"
    if fi:
        return "FLASHINFER"
    return "TRITON_ATTN"


def flashinfer_native_decode(
    compute_capability: tuple[int, int] | None, version: VllmVersion
) -> bool:
    """Whether FlashInfer decodes with its own wrappers on this GPU and release, not TRT-LLM's
    kernels (see FLASHINFER_XQA_DECODE_FROM). False where the capability is not known."""
    if compute_capability is None:
        return False
    major = compute_capability[0]
    if major == FLASHINFER_TRTLLM_DECODE_MAJOR:
        return False
    since = FLASHINFER_XQA_DECODE_FROM.get(major)
    return since is None or not version.at_least(since)


def flashinfer_graph_bytes(arch: Architecture, args: ResolvedArgs) -> int:
    """What FlashInfer adds to vLLM's CUDA-graph estimate (see FLASHINFER_WRAPPER_WORKSPACE_BYTES):
    0 off FlashInfer's own decode path, with enforce_eager, or before the 0.20 estimate."""
    version = VllmVersion.parse(args.vllm_version)
    if (
        not args.flashinfer_decode_wrappers
        or args.enforce_eager
        or not version.at_least(FLASHINFER_GRAPH_TERM_FROM)
    ):
        return 0
    capture = cuda_graph_capture_size(args)
    full_decode = not args.num_speculative_tokens
    decode_sizes = capture_sizes(min(capture, args.max_num_seqs)) if full_decode else 0
    if v2_runner_for_all(args):
        # one wrapper per decode size, the prefill wrapper, the plain decode wrapper
        return flashinfer_wrapper_bytes(decode_sizes + 2, args.expandable_segments)
    if not full_decode:
        return 0
    workspace = FLASHINFER_WORKSPACE_BYTES
    if version.at_least(FLASHINFER_WORKSPACE_BY_HEADS_FROM):
        heads = arch.num_attention_heads // args.tensor_parallel_size
        workspace = max(
            workspace,
            args.max_num_batched_tokens
            * heads
            * arch.head_dim
            * FLASHINFER_WORKSPACE_BYTES_PER_HEAD_ELEM,
        )
    # the first FULL sample's wrapper opens a 20 MiB segment; the second sample's wrapper fits in
    # what is left of it, so the per-graph extrapolation adds no wrapper
    return workspace + flashinfer_wrapper_bytes(min(decode_sizes, 1), args.expandable_segments)


def flashinfer_wrapper_bytes(wrappers: int, expandable_segments: bool) -> int:
    """Free memory `wrappers` FlashInfer wrappers take, 8 MiB each: two to a 20 MiB segment of
    the caching allocator, or packed into its 20 MiB pages with expandable segments
    (FLASHINFER_WRAPPER_WORKSPACE_BYTES)."""
    if wrappers <= 0:
        return 0
    seg = ALLOCATOR_LARGE_SEGMENT_BYTES
    if expandable_segments:
        return -(-wrappers * FLASHINFER_WRAPPER_WORKSPACE_BYTES // seg) * seg
    per_segment = seg // FLASHINFER_WRAPPER_WORKSPACE_BYTES
    return -(-wrappers // per_segment) * seg


# -------------------------------------------------------------------------------- resolve args


def resolve_quantization(arch: Architecture, requested: str | None) -> Quantization | None:
    """The checkpoint's quantisation, or an online one vLLM applies at load time."""
    from vllm_operator.catalog.architectures import parse_quant_method

    try:
        method = parse_quant_method(requested)
    except ValueError as exc:
        raise PlanningInputError("quantization", str(exc)) from None
    if method is QuantMethod.NONE:
        return arch.quantization
    modelopt = (requested or "").strip().lower() == "modelopt"
    if arch.quantization is not None:
        same = (
            arch.quantization.method is method
            or (modelopt and arch.quantization.method in (QuantMethod.FP8, QuantMethod.NVFP4))
            or ({arch.quantization.method, method} <= {QuantMethod.FP8, QuantMethod.FBGEMM_FP8})
        )
        if not same and method is not QuantMethod.COMPRESSED_TENSORS:
            raise PlanningInputError(
                "quantization",
                f"{requested!r} does not match the checkpoint's "
                f"{arch.quantization.method.value!r}; leave it unset or pass "
                f"{arch.quantization.method.value!r}",
            )
        return arch.quantization
    if method in (QuantMethod.FP8, QuantMethod.FBGEMM_FP8):
        return Quantization(method=QuantMethod.FP8, bits=8)  # online dynamic FP8
    if method is QuantMethod.BITSANDBYTES:
        return Quantization(method=method, bits=4)  # in-flight 4-bit
    raise PlanningInputError(
        "quantization",
        f"{requested!r} needs a checkpoint quantised with it (its config.json has no "
        "quantization_config); use a quantised repo (e.g. an -AWQ / -GPTQ one), or fp8 / "
        "bitsandbytes, which vLLM applies at load time",
    )


def resolve_dtype(
    arch: Architecture, requested: str, gpu: GpuMemory, version: VllmVersion
) -> tuple[str, list[str]]:
    """--dtype after vLLM's own rules (VV §5: bf16 needs sm80; 'auto' falls back from 0.9.0)."""
    notes: list[str] = []
    model = arch.torch_dtype if arch.torch_dtype in DTYPE_BYTES else "bfloat16"
    req = {"half": "float16", "float": "float32"}.get(requested, requested)
    if req == "auto":
        if model == "float32":
            model = "bfloat16" if gpu.bf16 else "float16"  # vLLM downcasts fp32 checkpoints
        if model == "bfloat16" and not gpu.bf16:
            if not version.at_least("0.9.0"):
                raise PlanningInputError(
                    "dtype",
                    f"the checkpoint is bfloat16 and {gpu.label} (compute capability "
                    f"{_cc(gpu)}) has no bfloat16; vLLM {version.text} stops with an error: pass "
                    "--dtype float16",
                )
            notes.append(f"{gpu.label} has no bfloat16: vLLM falls back to float16")
            return "float16", notes
        return model, notes
    if req not in DTYPE_BYTES:
        raise PlanningInputError(
            "dtype", f"unknown dtype {requested!r}; accepted: auto, bfloat16, float16, float32"
        )
    if req == "bfloat16" and not gpu.bf16:
        if gpu.compute_capability is None:
            raise PlanningInputError(
                "dtype",
                f"bfloat16 needs compute capability >= 8.0 and {gpu.label}'s is unknown: give it "
                "(estimate --compute-capability; the node's nvidia.com/gpu.compute.major/minor "
                "labels) or use float16",
            )
        raise PlanningInputError(
            "dtype",
            f"bfloat16 needs compute capability >= 8.0 and {gpu.label} has {_cc(gpu)}; use float16",
        )
    return req, notes


def _cc(gpu: GpuMemory) -> str:
    cc = gpu.compute_capability
    return "unknown" if cc is None else f"{cc[0]}.{cc[1]}"


def check_tensor_parallel(arch: Architecture, tp: int) -> None:
    if arch.num_attention_heads % tp != 0:
        divisors = [
            d for d in range(1, arch.num_attention_heads + 1) if arch.num_attention_heads % d == 0
        ]
        raise PlanningInputError(
            "tensor_parallel_size",
            f"{tp} does not divide the {arch.num_attention_heads} attention heads of "
            f"{arch.name}; accepted: {', '.join(map(str, [d for d in divisors if d <= 64]))}",
        )


def resolve_args(
    args: EngineArgs, arch: Architecture, gpu: GpuMemory
) -> tuple[ResolvedArgs, MemorySemantics, list[str]]:
    """Fill in the version's defaults and reject what vLLM would reject."""
    version = VllmVersion.parse(args.vllm_version)
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    check_tensor_parallel(arch, tp)
    if pp > arch.num_hidden_layers:
        # get_pp_indices would leave a stage without a layer; no layout the operator runs
        raise PlanningInputError(
            "pipeline_parallel_size",
            f"{pp} stages for the {arch.num_hidden_layers} layers of {arch.name}; use at most "
            f"{arch.num_hidden_layers}",
        )
    kv_dtype = args.kv_cache_dtype
    fp8_kv = kv_dtype in KV_DTYPES_FP8 or kv_dtype == "fp8_ds_mla"
    if fp8_kv and not gpu.fp8_kv:
        raise PlanningInputError(
            "kv_cache_dtype",
            f"{kv_dtype} needs compute capability >= 8.9 and {gpu.label} has {_cc(gpu)}; "
            "use auto (the model dtype)",
        )
    if kv_dtype not in ("auto", "bfloat16", "float16") and not fp8_kv:
        raise PlanningInputError(
            "kv_cache_dtype", f"unsupported {kv_dtype!r}; accepted: auto, fp8, fp8_e4m3, fp8_e5m2"
        )
    sem = semantics_for(
        args.vllm_version,
        gpu_total_gib=gpu.total_gib,
        marketing_name=gpu.marketing_name,
        compute_capability=gpu.compute_capability,
        fp8_kv=fp8_kv,
    )
    notes = list(sem.notes)
    dtype, dtype_notes = resolve_dtype(arch, args.dtype, gpu, version)
    notes += dtype_notes
    quant = resolve_quantization(arch, args.quantization)
    model_max = arch.max_position_embeddings
    max_len = args.max_model_len or model_max or 4096
    if model_max is not None and max_len > model_max:
        raise PlanningInputError(
            "max_model_len",
            f"{max_len} is above {arch.name}'s maximum context of {model_max} tokens "
            "(vLLM: 'User-specified max_model_len is greater than the derived max_model_len'); "
            f"use at most {model_max}",
        )
    seqs = args.max_num_seqs or sem.default_max_num_seqs
    chunked = sem.chunked_prefill_default or v0_chunked_prefill(max_len)
    if args.max_num_batched_tokens is not None:
        tokens = args.max_num_batched_tokens
    elif sem.engine is Engine.V1:
        tokens = sem.default_max_num_batched_tokens or 2048
    elif chunked:
        tokens = v0_chunked_batched_tokens(version)
    else:
        tokens = max(max_len, 2048)
    if not chunked and tokens < max_len:
        raise PlanningInputError(
            "max_num_batched_tokens",
            f"{tokens} is smaller than max_model_len ({max_len}) with chunked prefill off "
            f"(vLLM {version.text}, V0); use at least {max_len}",
        )
    block = args.block_size or sem.default_block_size
    forced = mla_block_size(version, gpu.compute_capability) if arch.is_mla else None
    if forced is not None and block != forced:
        notes.append(f"the MLA backend on this GPU forces block_size {forced}")
        block = forced
    allowed = accepted_block_sizes(version)
    if args.block_size is not None and allowed is not None and args.block_size not in allowed:
        raise PlanningInputError(
            "block_size",
            f"{args.block_size} is not accepted by vLLM {version.text}; accepted: "
            f"{', '.join(map(str, allowed))}",
        )
    if arch.is_hybrid:
        layout = hybrid_layout(
            arch,
            tp=tp,
            layers=arch.num_hidden_layers,
            kv_dtype_bytes=1 if kv_dtype in KV_DTYPES_FP8 else dtype_bytes(dtype),
            model_dtype=dtype,
            block_size=block,
            version=version,
            compute_capability=gpu.compute_capability,
            spec_tokens=args.num_speculative_tokens if args.speculative_method else 0,
            prefix_caching=args.enable_prefix_caching is not False,
        )
        if layout.block_size != block:
            notes.append(
                f"hybrid model: vLLM raises the attention block size to {layout.block_size} "
                f"tokens so that one attention page holds one {layout.state_page:,}-byte state "
                "page"
            )
            block = layout.block_size
    util = args.gpu_memory_utilization or sem.default_gpu_memory_utilization
    limits = args.limit_mm_per_prompt
    no_tower = (
        args.skip_mm_profiling
        or args.language_model_only
        or (limits is not None and limits.get("image", 1) == 0 and limits.get("video", 1) == 0)
    )
    mm_items, mm_tokens = (0, 0)
    if sem.engine is Engine.V1 and not no_tower:
        mm_items, mm_tokens = mm_profile_items(
            arch,
            max_model_len=max_len,
            max_num_seqs=seqs,
            max_num_batched_tokens=tokens,
            chunked=chunked,
            # a video item is taken to be no smaller than an image (the pass profiles the
            # modality with the most tokens per item): the larger limit of the two counts
            image_limit=None
            if limits is None or "image" not in limits or "video" not in limits
            else max(limits["image"], limits["video"]),
        )
    if mm_items:
        notes.append(
            f"vision encoder profiled: vLLM encodes {mm_items} dummy image(s) of "
            f"{mm_tokens:,} tokens before the KV cache is sized (encoder cache budget "
            f"{max(tokens, mm_tokens):,} tokens); a structural estimate of the tower's "
            "activations, not measured: --skip-mm-profiling or --language-model-only (text only) "
            "removes it"
        )
    backend = resolve_attention_backend(
        arch, args, gpu.compute_capability, version, fp8_kv=kv_dtype in KV_DTYPES_FP8
    )
    native_wrappers = backend == "FLASHINFER" and flashinfer_native_decode(
        gpu.compute_capability, version
    )
    if native_wrappers and not args.enforce_eager and version.at_least(FLASHINFER_GRAPH_TERM_FROM):
        why = "--attention-backend" if args.attention_backend else "vLLM's pick for this GPU"
        notes.append(
            f"attention on FlashInfer ({why}{', fp8 KV cache' if kv_dtype in KV_DTYPES_FP8 else ''}):"
            " its decode wrappers, one per captured decode batch size, are in the CUDA-graph "
            "estimate"
        )
    resolved = ResolvedArgs(
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        gpu_memory_utilization=util,
        max_model_len=max_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        block_size=block,
        dtype=dtype,
        quantization=quant.method.value if quant is not None else None,
        kv_cache_dtype=kv_dtype,
        enforce_eager=args.enforce_eager,
        enable_chunked_prefill=chunked,
        vllm_version=version.text,
        optional_kernels=args.optional_kernels,
        flashinfer_sampler=args.flashinfer_sampler,
        expandable_segments=args.expandable_segments,
        speculative_method=args.speculative_method if args.num_speculative_tokens else None,
        num_speculative_tokens=args.num_speculative_tokens if args.speculative_method else 0,
        max_loras=args.max_loras,
        max_lora_rank=args.max_lora_rank,
        enable_prefix_caching=args.enable_prefix_caching,
        mm_profile_items=mm_items,
        mm_profile_tokens_per_item=mm_tokens,
        mm_encoder_tp_mode=args.mm_encoder_tp_mode,
        language_model_only=args.language_model_only,
        attention_backend=backend,
        flashinfer_decode_wrappers=native_wrappers,
    )
    return resolved, sem, notes


# ------------------------------------------------------------------------------------ estimate


def model_load_extra_gib(
    arch: Architecture, args: ResolvedArgs, quant: Quantization | None, stages: list[int]
) -> tuple[float, ...]:
    """(rotary cache, then the allocator's rounding per PP stage) in GiB: what vLLM's "Model
    loading took" counts beyond the parameters (planning/model_load.py). The rounding is not
    paid with expandable segments, and is left out where the tensor order is not modelled."""
    unq = dtype_bytes(args.dtype)
    rope = rope_cache_bytes(arch, unq) / GIB
    pp, tp = args.pipeline_parallel_size, args.tensor_parallel_size
    if args.expandable_segments or not rounding_supported(arch, quant):
        return (rope, *([0.0] * pp))
    text = arch.model_copy(update={"vision_params": 0})
    return (
        rope,
        *(
            allocator_rounding_bytes(
                text, tp=tp, pp=pp, stage=stage, layers=stages, dtype_bytes=unq
            )
            / GIB
            for stage in range(pp)
        ),
    )


def estimate_memory(arch: Architecture, gpu: GpuMemory, args: EngineArgs) -> MemoryEstimate:
    """Predict vLLM's startup memory profile for these engine arguments on this GPU."""
    resolved, sem, notes = resolve_args(args, arch, gpu)
    quant = resolve_quantization(arch, args.quantization)
    tp, pp = resolved.tensor_parallel_size, resolved.pipeline_parallel_size
    fp8_cache = resolved.kv_cache_dtype in KV_DTYPES_FP8 or resolved.kv_cache_dtype == "fp8_ds_mla"
    kv_b = 1 if fp8_cache else dtype_bytes(resolved.dtype)
    total = gpu.total_gib
    util = resolved.gpu_memory_utilization
    budget = total * util
    budget_source = "gpu_memory_utilization x CUDA total"
    reasons = list(notes)
    if gpu.measured_free_gib is not None:
        budget_source = "measured free memory (NVML probe)"
        if sem.era is ProfilerEra.V1_PER_INSTANCE and gpu.measured_free_gib < budget:
            reasons.append(
                f"only {gpu.measured_free_gib:.2f} GiB free, below util x total = {budget:.2f} GiB: "
                "vLLM stops at startup ('Free memory on device ... is less than desired GPU "
                "memory utilization')"
            )
        elif sem.counts_cuda_context or sem.era is ProfilerEra.V0_DEVICE_DELTA:
            budget -= max(0.0, total - gpu.measured_free_gib)  # other tenants count against it
    nt = non_torch_gib(sem, resolved, gpu.compute_capability, unified_memory=gpu.unified_memory)
    if gpu.unified_memory and sem.era is not ProfilerEra.V0_TORCH_ONLY:
        reasons.append(UNIFIED_MEMORY_REASON)
    stages = layers_per_stage(arch.num_hidden_layers, pp)
    best: tuple[int, float, float, float, float, int] | None = None
    best_layout: HybridLayout | None = None
    layout: HybridLayout | None = None
    adapters: tuple[float, float, int] = (0.0, 0.0, 0)
    draft_w, draft_note = draft_weights_bytes(arch, resolved, quant)
    n_draft, draft_shape, _ = draft_layers(arch, resolved)
    if draft_note:
        reasons.append(draft_note)
    draft_kv = 0
    if draft_shape is not None:
        plain = draft_shape.model_copy(
            update={"linear_layers": 0, "num_kv_shared_layers": 0, "global_head_dim": None}
        )
        draft_kv = kv_bytes_per_token(plain, tp=tp, layers=n_draft, kv_dtype_bytes=kv_b)
    int4_excess = (
        sm12x_int4_excess_bytes(
            arch,
            quant,
            tp=tp,
            dtype=resolved.dtype,
            compute_capability=gpu.compute_capability,
            version=VllmVersion.parse(resolved.vllm_version),
        )
        / GIB
    )
    if int4_excess:
        reasons.append(
            f"int4 AWQ/GPTQ on a sm12x card at vLLM {resolved.vllm_version}: {int4_excess:.2f} GiB "
            "(one vocab x hidden matrix) counted on top of the weights, the consumed-memory excess "
            "the 0.27+ startup ledgers of these cards show (empirical term)"
        )
    v2_profile = sem.subtracts_cuda_graphs and v2_profile_terms(arch, resolved, quant)
    if v2_profile:
        reasons.append(
            f"vLLM {resolved.vllm_version} runs this model on Model Runner V2, which estimates no "
            "CUDA-graph memory before 0.29: the graphs are captured after the KV cache, outside the "
            "budget"
        )
    graphs_budgeted = sem.subtracts_cuda_graphs and not v2_profile
    eager_v2 = sem.subtracts_cuda_graphs and v2_eager_profile(arch, resolved, quant)
    native_sorts = native_sampler_sorts(arch, resolved, quant)
    load_extra = model_load_extra_gib(arch, resolved, quant, stages)
    if any(load_extra):
        rope, rounding = load_extra[0], max(load_extra[1:], default=0.0)
        reasons.append(
            f"weights include the rotary cos/sin cache ({rope:.3f} GiB)"
            + (
                f" and {rounding:.3f} GiB of allocator blocks counted whole (no "
                "expandable_segments: a block is split only when over 1 MiB would remain)"
                if rounding
                else ""
            )
        )
    per_stage: list[tuple[int, int, float, float, float, float, int, int]] = []
    for stage, layers in enumerate(stages):
        last = stage == pp - 1
        w = (
            weights_bytes(
                arch.model_copy(update={"vision_params": 0})
                if resolved.language_model_only
                else arch,
                tp=tp,
                pp=pp,
                stage=stage,
                dtype=resolved.dtype,
                quant=quant,
                compute_capability=gpu.compute_capability,
                version=VllmVersion.parse(resolved.vllm_version),
                optional_kernels=resolved.optional_kernels,
            )
            / GIB
        )
        # the draft sits with the last stage; LoRA slots on every layer
        stage_lora = lora_bytes(arch, resolved, layers) / GIB
        stage_draft = (draft_w if last else 0.0) / GIB
        w += stage_lora + stage_draft
        w += int4_excess if last else 0.0
        w += load_extra[0] + load_extra[1 + stage]
        act = (
            activation_bytes(
                arch,
                sem=sem,
                args=resolved,
                last_stage=stage == pp - 1,
                v2_profile=v2_profile,
                eager_v2=eager_v2,
                native_sorts=native_sorts,
            )
            / GIB
        )
        cg = cuda_graph_gib(arch, resolved, layers)
        kv = budget - w - act - nt - (cg if graphs_budgeted else 0.0)
        per_token = kv_bytes_per_token(arch, tp=tp, layers=layers, kv_dtype_bytes=kv_b)
        per_token += draft_kv if last else 0
        if arch.is_hybrid:
            layout = hybrid_layout(
                arch,
                tp=tp,
                layers=layers,
                kv_dtype_bytes=kv_b,
                model_dtype=resolved.dtype,
                block_size=resolved.block_size,
                version=VllmVersion.parse(resolved.vllm_version),
                compute_capability=gpu.compute_capability,
                draft_attention_layers=n_draft if last else 0,
                spec_tokens=resolved.num_speculative_tokens,
                prefix_caching=resolved.enable_prefix_caching is not False,
            )
            block_bytes = layout.bytes_per_block
        else:
            block_bytes = resolved.block_size * per_token
        blocks = max(0, math.floor(kv * GIB / block_bytes))
        per_stage.append((layers, per_token, w, act, cg, kv, blocks, block_bytes))
        if best is None or blocks < best[5]:
            best = (per_token, w, act, cg, kv, blocks)
            best_layout = layout
            adapters = (stage_lora, stage_draft, draft_kv if last else 0)
    assert best is not None
    per_token, w, act, cg, kv, blocks = best
    stage_memory = [
        StageMemory(
            stage=i,
            layers=n,
            weights_gib=round(sw, 4),
            activation_gib=round(sa, 4),
            cuda_graph_gib=round(sc, 4),
            kv_free_gib=round(max(skv, 0.0), 4),
            kv_cache_gib=round(blocks * sbb / GIB, 4),
            kv_bytes_per_token=spt,
            num_gpu_blocks=sb,
        )
        for i, (n, spt, sw, sa, sc, skv, sb, sbb) in enumerate(per_stage)
    ]
    tokens = blocks * resolved.block_size
    concurrency = tokens / resolved.max_model_len
    if arch.is_hybrid:
        # vLLM reports int(concurrency x max_model_len), concurrency = blocks / blocks per
        # request over all groups (kv_cache_utils.get_kv_cache_capacity): the state pages a
        # sequence pins count against the same pool as its attention pages.
        assert best_layout is not None
        concurrency = blocks / best_layout.blocks_per_request(resolved.max_model_len)
        tokens = int(concurrency * resolved.max_model_len)
    if (
        pp > 1
        and sem.engine is Engine.V0
        and VllmVersion.parse(resolved.vllm_version).at_least("0.8.0")
    ):
        tokens = resolved.block_size * (blocks // pp)  # VV §3.3: V0 0.8+ capacity / PP
    fits = kv > 0 and tokens >= resolved.max_model_len
    if kv <= 0:
        reasons.append(
            f"no memory left for the KV cache: weights {w:.2f} + activation {act:.2f} + "
            f"non-torch {nt:.2f} GiB exceed the budget of {budget:.2f} GiB"
        )
    elif not fits:
        reasons.append(
            f"max_model_len {resolved.max_model_len} is larger than the {tokens} tokens the KV "
            "cache holds: vLLM refuses to start"
        )
    startup: list[str] = []
    headroom = total * (1 - util)
    if not graphs_budgeted and not resolved.enforce_eager:
        if cg > headroom - 0.1:
            startup.append(
                f"CUDA graphs (~{cg:.2f} GiB) are captured after the KV cache and may not fit in "
                f"the {headroom:.2f} GiB left by gpu_memory_utilization {util}"
            )
    elif not resolved.enforce_eager and kv > 0:
        need = post_kv_slack_gib(tp)
        if headroom < need:
            startup.append(
                f"only {headroom:.2f} GiB is left outside gpu_memory_utilization {util}; vLLM "
                f"{resolved.vllm_version} allocates about {need:.2f} GiB after the KV cache (graph "
                "capture against the full KV pool, sampler warm-up, all-reduce buffers) and may "
                "not fit: startup may fail with CUDA out of memory"
            )
    if (
        arch.is_hybrid
        and not resolved.enforce_eager
        and resolved.max_num_seqs is not None
        and kv > 0
        and resolved.max_num_seqs > blocks
        and VllmVersion.parse(resolved.vllm_version).at_least(MAMBA_BLOCK_CHECK_SINCE)
    ):
        # vLLM raises in config/compilation.py (vllm#38270): every decode sequence holds one Mamba
        # state block, so FULL decode CUDA graphs cannot be captured for more sequences than the
        # pool has blocks. Bench row 75: 'max_num_seqs (256) exceeds available Mamba cache
        # blocks (184)'; this layout turns that log's 8.82 GiB into the same 184 blocks.
        startup.append(
            f"max_num_seqs {resolved.max_num_seqs} exceeds the {blocks} Mamba cache blocks of this "
            "hybrid model (one state block per decoding sequence): vLLM refuses to capture CUDA "
            f"graphs and fails to start; lower max_num_seqs to at most {blocks}"
        )
    reasons += startup
    if arch.sliding_window_layers and sem.engine is Engine.V1:
        reasons.append(
            "sliding-window layers: vLLM V1 groups them apart and reports more tokens than this "
            "full-attention count (KV GiB is unaffected)"
        )
    return MemoryEstimate(
        args=resolved,
        engine=sem.engine,
        era=sem.era,
        gpu_total_gib=round(total, 4),
        budget_gib=round(budget, 4),
        budget_source=budget_source,
        weights_gib=round(w - adapters[0] - adapters[1], 4),
        lora_gib=round(adapters[0], 4),
        draft_weights_gib=round(adapters[1], 4),
        draft_kv_bytes_per_token=adapters[2],
        activation_peak_gib=round(act, 4),
        non_torch_gib=round(nt, 4),
        cuda_graph_gib=round(cg, 4),
        cuda_graph_subtracted=graphs_budgeted,
        kv_cache_gib=round(max(kv, 0.0), 4),
        compile_segment_gib=0.0
        if int4_excess
        else round(compile_segment_bytes(arch, resolved) / GIB, 4),
        kv_bytes_per_token=per_token,
        kv_cache_tokens=tokens,
        num_gpu_blocks=blocks,
        max_concurrency=round(concurrency, 2),
        fits=fits,
        reasons=reasons,
        startup_warnings=startup,
        hybrid_layout=best_layout,
        stages=stage_memory,
    )
