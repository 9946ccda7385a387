"""Model Runner V2 estimates no CUDA-graph memory in vLLM 0.22-0.28 (issue #28).

Source: vLLM 0.22.0-0.28.0 `v1/worker/gpu/model_runner.py` `GPUModelRunner.profile_cudagraph_memory`
(``return 0``; 0.29.0 measures, `v1/worker/gpu/cudagraph_utils.py`), `v1/worker/gpu_worker.py`
`determine_available_memory` (subtracts what the runner returns), `config/vllm.py`
`_is_default_v2_model_runner_model` (which models run on V2 by default, per release), and the V2
sampler (`v1/worker/gpu/sample/sampler.py` `apply_sampling_params`: the profile's default
parameters leave the model-dtype logits untouched). Logged: bench row 70 (Qwen2.5-7B-Instruct-AWQ on
an L4, vLLM 0.28.0, util 0.45: consumed 5.58 GiB, peak activation 1.04 GiB with no graph estimate in
it, 0.53 GiB of graphs captured after the KV cache, KV 3.30 GiB / 61,776 tokens).
"""

from vllm_operator.api.spec import EnvVar, VLLMServiceSpec
from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.intent import PlanIntent, flashinfer_sampler_on
from vllm_operator.planning.memory import (
    GIB,
    EngineArgs,
    estimate_memory,
    native_sampler_sorts,
    resolve_args,
    resolve_quantization,
    v2_eager_profile,
    v2_profile_terms,
    v2_runner_without_graph_estimate,
)
from vllm_operator.planning.plan import PoolPlan, plan_pool

AWQ_7B = lookup_architecture("Qwen/Qwen2.5-7B-Instruct-AWQ")
BF16_7B = lookup_architecture("Qwen/Qwen2.5-7B-Instruct")
LLAMA = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")
QWEN3 = lookup_architecture("Qwen/Qwen3-8B")
MOE = lookup_architecture("Qwen/Qwen3-30B-A3B")
HYBRID = lookup_architecture("Qwen/Qwen3.5-4B")
L4 = gpu_memory(lookup_gpu("NVIDIA-L4"), total_gib=22.04)  # row 70's logged CUDA total


def _args(version: str, **kw: object) -> EngineArgs:
    return EngineArgs.model_validate(
        {"vllm_version": version, "max_model_len": 4096, "dtype": "float16", **kw}
    )


def _v2(arch: object, version: str, **kw: object) -> bool:
    resolved, _, _ = resolve_args(_args(version, **kw), arch, L4)  # type: ignore[arg-type]
    quant = resolve_quantization(arch, resolved.quantization)  # type: ignore[arg-type]
    return v2_runner_without_graph_estimate(arch, resolved, quant)  # type: ignore[arg-type]


def test_dense_models_of_0_25_to_0_28_run_on_v2_without_a_graph_estimate() -> None:
    for version in ("0.25.0", "0.26.0", "0.27.1", "0.28.0"):
        assert _v2(AWQ_7B, version) and _v2(BF16_7B, version)
    assert not _v2(AWQ_7B, "0.29.0")  # V2 measures its graphs from 0.29
    assert not _v2(AWQ_7B, "0.21.0")  # before 0.22 no model defaults to V2
    assert not _v2(MOE, "0.28.0") and not _v2(HYBRID, "0.28.0")  # V1 for these


def test_v2_defaults_before_0_25_follow_each_release_list() -> None:
    """0.22: Qwen3ForCausalLM only; 0.23: also Llama and Mistral; quantised from 0.24 only."""
    assert _v2(QWEN3, "0.22.0") and not _v2(LLAMA, "0.22.0")
    assert _v2(LLAMA, "0.23.0") and not _v2(BF16_7B, "0.23.0")  # Qwen2ForCausalLM not listed
    assert not _v2(AWQ_7B, "0.24.0")  # Qwen2 is not a default-V2 architecture before 0.25


def test_a_speculative_config_keeps_the_subtracted_estimate() -> None:
    assert not _v2(AWQ_7B, "0.28.0", speculative_method="eagle", num_speculative_tokens=2)


def test_row_70_awq_on_an_l4_at_0_28_is_within_five_percent() -> None:
    """The model used to subtract a 0.87 GiB graph estimate V2 does not make and count 3.85 fp32
    sampler copies (0.56 GiB) V2 does not hold: KV 2.95 GiB against 3.30 logged (-10.7 %). With
    V2's profile: no estimate, the peak one vocab x hidden matrix (1.02 GiB, logged 1.04)."""
    est = estimate_memory(
        AWQ_7B, L4, _args("0.28.0", gpu_memory_utilization=0.45, max_model_len=32768)
    )
    assert not est.cuda_graph_subtracted
    assert abs(est.activation_peak_gib - 1.04) < 0.1
    assert 3.30 * 0.95 <= est.kv_cache_gib <= 3.30 * 1.05
    assert any("Model Runner V2" in r for r in est.reasons)


def test_the_graphs_then_must_fit_outside_the_budget() -> None:
    """Captured after the KV cache, the graphs need (1 - util) x total: at util 0.99 on an L4
    (0.22 GiB left) the estimate says startup may fail, as it does before 0.20."""
    est = estimate_memory(AWQ_7B, L4, _args("0.28.0", gpu_memory_utilization=0.99))
    assert any("captured after the KV cache and may not fit" in w for w in est.startup_warnings)


def test_unquantised_v2_starts_take_the_v2_terms_as_the_image_runs_them() -> None:
    """Rows 63, 72, 73, 84, 87, 90, 117, 123 and 127 (unquantised, V2, 0.25-0.28, FlashInfer's
    sampler on) land within -3 / +2 % with V2's profile: no graph estimate in the budget."""
    resolved, _, _ = resolve_args(_args("0.28.0"), BF16_7B, L4)
    assert v2_profile_terms(BF16_7B, resolved, None)
    unquantised = estimate_memory(BF16_7B, L4, _args("0.28.0"))
    assert not unquantised.cuda_graph_subtracted
    assert unquantised.cuda_graph_gib > 0  # still reported, outside the budget


def test_row_117_qwen3_8b_on_an_rtx_4090_at_0_27_is_within_five_percent() -> None:
    """Row 117 (RunPod RTX 4090, the log's own 23.52 GiB, vLLM 0.27.1 image, 'Using V2 Model
    Runner', serve defaults, max_model_len 8192): ledger peak 1.18 GiB, KV 4.92 GiB. The V1 terms
    gave 1.55 and 4.53 (-7.9 %)."""
    rtx4090 = gpu_memory(lookup_gpu("NVIDIA-GeForce-RTX-4090"), total_gib=23.52)
    est = estimate_memory(
        QWEN3,
        rtx4090,
        EngineArgs(vllm_version="0.27.1", max_model_len=8192, gpu_memory_utilization=0.92),
    )
    assert not est.cuda_graph_subtracted
    assert abs(est.activation_peak_gib - 1.18) < 0.1
    assert 4.92 * 0.95 <= est.kv_cache_gib <= 4.92 * 1.05


def test_without_flashinfers_sampler_an_unquantised_start_keeps_the_v1_terms() -> None:
    """Row 108 (Qwen2.5-7B BF16 on an RTX 4090, 0.27.1, VLLM_USE_FLASHINFER_SAMPLER=0) holds a
    second vocab x hidden matrix the V2 terms leave out (+18.9 %); such a start keeps the
    subtracted estimate and the native sampler's copies: the safe side. A quantised one does not
    (row 110, the same script with an FP8 checkpoint, +2.3 % with the V2 terms)."""
    bare = _args("0.28.0", optional_kernels=False)
    resolved, _, _ = resolve_args(bare, BF16_7B, L4)
    assert not v2_profile_terms(BF16_7B, resolved, None)
    assert estimate_memory(BF16_7B, L4, bare).cuda_graph_subtracted
    resolved_awq, _, _ = resolve_args(bare, AWQ_7B, L4)
    quant = resolve_quantization(AWQ_7B, resolved_awq.quantization)
    assert v2_profile_terms(AWQ_7B, resolved_awq, quant)
    quantised = estimate_memory(AWQ_7B, L4, bare)
    assert not quantised.cuda_graph_subtracted
    assert round(quantised.kv_cache_gib * GIB) > 0
    image = estimate_memory(BF16_7B, L4, _args("0.28.0"))
    assert image.kv_cache_gib > estimate_memory(BF16_7B, L4, bare).kv_cache_gib


def test_a_plan_for_a_quantised_v2_start_leaves_room_for_the_graphs() -> None:
    """As before 0.20: at util 0.98 on an L4 (0.44 GiB left) 64 sequences' graphs captured after the KV
    cache would not fit, so the planner lowers gpu_memory_utilization until they do. The same
    intent on 0.29 (V2 measures its graphs, the budget pays for them) only leaves the 0.5 GiB of
    post-KV slack (0.97)."""
    from vllm_operator.planning.intent import PlanIntent
    from vllm_operator.planning.plan import PoolPlan, plan_pool

    def util(version: str) -> float:
        intent = PlanIntent(
            p99_context_tokens=2048,
            concurrency=64,
            max_gpu_memory_utilization=0.98,
            vllm_version=version,
        )
        result = plan_pool(intent, lookup_gpu("NVIDIA-L4"), AWQ_7B)
        assert isinstance(result, PoolPlan)
        value = result.engine_args.gpu_memory_utilization
        assert isinstance(value, float)
        if version == "0.28.0":
            assert (1 - value) * result.memory.gpu_total_gib >= result.memory.cuda_graph_gib
        return value

    assert util("0.28.0") < util("0.29.0") == 0.97


def test_from_0_29_a_bare_pip_install_samples_like_the_image() -> None:
    """Model Runner V2 (every model from 0.29) takes the Triton top-k/top-p kernel, never the
    PyTorch-native sort. Bench row 111 (Qwen2.5-1.5B, A10G, 0.31.0, FlashInfer sampler off):
    -6.7 % with the native term, -2.1 % without. The V1 runner filters with Triton too from 0.17
    (``forward_native`` -> ``apply_top_k_top_p`` -> ``apply_top_k_top_p_triton``, read in 0.17.0-0.33.0),
    so the sort term stands only before 0.17 and on the 0.22-0.28 unquantised V2 starts that
    keep the V1 terms (row 108's empirical rule)."""
    small = lookup_architecture("Qwen/Qwen2.5-1.5B-Instruct")
    a10g = gpu_memory(lookup_gpu("NVIDIA-A10G"))

    def activation(version: str, optional_kernels: bool, **kw: object) -> float:
        args = _args(version, dtype="auto", optional_kernels=optional_kernels, **kw)
        return estimate_memory(small, a10g, args).activation_peak_gib

    assert activation("0.31.0", False) == activation("0.31.0", True)
    assert activation("0.28.0", False) > activation("0.28.0", True)  # row 108's rule
    assert activation("0.11.0", False) > activation("0.11.0", True)  # the sort, before Triton
    assert activation("0.17.0", False) == activation("0.17.0", True)  # V1 with Triton
    assert activation("0.19.0", False) == activation("0.19.0", True)
    # ngram drafting is not on V2 at 0.29+: the V1 runner, whose native path is Triton's as well
    ngram = {"speculative_method": "ngram", "num_speculative_tokens": 2}
    assert activation("0.31.0", False, **ngram) == activation("0.31.0", True, **ngram)


def test_a_v1_runner_start_without_flashinfers_sampler_filters_with_triton() -> None:
    """Bench row 131: Qwen3-Coder-30B-A3B (a MoE, which 0.24.0 runs on the V1 runner) on 4x L40S
    with VLLM_USE_FLASHINFER_SAMPLER=0 peaks like a start with FlashInfer's sampler: the native
    path's Triton kernel filters in place (23.74 GiB of KV logged; -8.3 % with the sort, -5.2 %
    without)."""
    coder = lookup_architecture("Qwen/Qwen3-Coder-30B-A3B-Instruct")
    l40s = gpu_memory(lookup_gpu("NVIDIA-L40S"))

    def estimate(optional_kernels: bool) -> float:
        args = EngineArgs.model_validate(
            {
                "vllm_version": "0.24.0",
                "tensor_parallel_size": 4,
                "gpu_memory_utilization": 0.9,
                "max_model_len": 32768,
                "optional_kernels": optional_kernels,
            }
        )
        resolved, _, _ = resolve_args(args, coder, l40s)
        assert not v2_runner_without_graph_estimate(coder, resolved, None)  # V1 for a MoE
        assert not native_sampler_sorts(coder, resolved, None)
        return estimate_memory(coder, l40s, args).kv_cache_gib

    assert estimate(False) == estimate(True)
    assert abs(estimate(False) - 23.74) / 23.74 < 0.06


def test_a_pipeline_parallel_v2_start_keeps_the_v1_terms() -> None:
    """Row 130 (Qwen3-32B BF16 at PP2 on two RTX PRO 6000, vLLM 0.27.1, util 0.426): its first
    stage leaves 3.03 GiB beside weights and KV, 1.4 GiB more than the TP2 start of row 127; the
    V2 terms would over-predict it by +17.8 %, the V1 terms give -8.1 %: the safe side."""
    pp2 = _args("0.27.1", pipeline_parallel_size=2)
    resolved, _, _ = resolve_args(pp2, BF16_7B, L4)
    assert not v2_profile_terms(BF16_7B, resolved, None)
    resolved_awq, _, _ = resolve_args(pp2, AWQ_7B, L4)
    quant = resolve_quantization(AWQ_7B, resolved_awq.quantization)
    assert not v2_profile_terms(AWQ_7B, resolved_awq, quant)
    single, _, _ = resolve_args(_args("0.27.1"), BF16_7B, L4)
    assert v2_profile_terms(BF16_7B, single, None)


def test_a_sampler_turned_off_in_spec_env_is_planned_with_the_v1_terms() -> None:
    """spec.vllm.env VLLM_USE_FLASHINFER_SAMPLER=0 (vLLM reads bool(int(value))) is the start
    of row 108: the plan keeps the subtracted graph estimate there; without it, or with 1, the
    plan takes Model Runner V2's terms."""
    assert flashinfer_sampler_on([])
    assert not flashinfer_sampler_on([EnvVar(name="VLLM_USE_FLASHINFER_SAMPLER", value="0")])
    assert flashinfer_sampler_on([EnvVar(name="VLLM_USE_FLASHINFER_SAMPLER", value="1")])
    assert flashinfer_sampler_on([EnvVar(name="VLLM_USE_FLASHINFER_SAMPLER", value="no")])
    assert flashinfer_sampler_on([EnvVar(name="OTHER", value="0")])

    def plan(env: list[dict[str, str]]) -> PoolPlan:
        spec = VLLMServiceSpec.model_validate(
            {
                "model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
                "workload": {"p99ContextTokens": 4096, "concurrency": 4},
                "placement": {"gpuTypes": ["NVIDIA-L40S"], "maxGPUsPerReplica": 1},
                "vllm": {"version": "0.27.1", "env": env},
            }
        )
        result = plan_pool(PlanIntent.from_spec(spec), lookup_gpu("NVIDIA-L40S"), BF16_7B)
        assert isinstance(result, PoolPlan), result
        return result

    image = plan([])
    assert not image.memory.cuda_graph_subtracted
    off = plan([{"name": "VLLM_USE_FLASHINFER_SAMPLER", "value": "0"}])
    assert off.memory.cuda_graph_subtracted
    assert plan([{"name": "VLLM_USE_FLASHINFER_SAMPLER", "value": "1"}]) == image


def test_an_eager_v2_start_holds_no_compile_terms() -> None:
    """--enforce-eager turns torch.compile off (config/vllm.py): an eager V2 start's peak is its
    forward pass or V2's sampler tensor, without the vocab x hidden floor (0.22-0.28) or the V1
    sampler copies the planner keeps for compiled 0.29+ starts; the sampler setting aside."""
    qwen15 = lookup_architecture("Qwen/Qwen2.5-1.5B-Instruct")
    for version in ("0.25.0", "0.30.0"):
        for sampler_on in (True, False):
            base = {"max_num_seqs": 256, "dtype": "bfloat16", "flashinfer_sampler": sampler_on}
            eager = _args(version, enforce_eager=True, **base)
            graphs = _args(version, **base)
            resolved = resolve_args(eager, qwen15, L4)[0]
            assert v2_eager_profile(qwen15, resolved, None)
            assert not v2_eager_profile(qwen15, resolve_args(graphs, qwen15, L4)[0], None)
            e = estimate_memory(qwen15, L4, eager)
            g = estimate_memory(qwen15, L4, graphs)
            assert e.activation_peak_gib < g.activation_peak_gib
    # not a V2 start: a MoE model at 0.25 keeps the V1 runner's terms, eager or not
    assert not v2_eager_profile(
        MOE, resolve_args(_args("0.25.0", enforce_eager=True), MOE, L4)[0], None
    )
    # before V2 (0.21) nothing changes
    assert not v2_eager_profile(
        LLAMA, resolve_args(_args("0.21.0", enforce_eager=True), LLAMA, L4)[0], None
    )


def test_eager_v2_peak_is_the_forward_or_the_v2_sampler() -> None:
    """Bench row 93 (0.30.0, eager, 8 GB card): the peak is the forward pass, 0.18 GiB with the
    constant, not 0.62 with the V1 sampler's copies."""
    qwen15 = lookup_architecture("Qwen/Qwen2.5-1.5B-Instruct")
    est = estimate_memory(
        qwen15,
        L4,
        _args("0.30.0", enforce_eager=True, dtype="bfloat16", max_model_len=16384),
    )
    assert est.activation_peak_gib < 0.25


def test_flashinfers_sampler_is_opt_in_from_0_11_1_to_0_20() -> None:
    """vLLM PR #26859 (after 0.11.0) made FlashInfer's top-k/top-p sampler opt-in (an unset
    VLLM_USE_FLASHINFER_SAMPLER is off: topk_topp_sampler.py, 0.11.1-0.20.2), and PR #40376 turned
    it back on by default from 0.21.0 (envs.py). In that window the image's start samples natively,
    and before 0.17 the native path sorts: the same activation as a bare pip install."""
    qwen3 = lookup_architecture("Qwen/Qwen3-14B")
    h100 = gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3"))

    def activation(version: str, optional_kernels: bool = True) -> float:
        args = _args(version, dtype="auto", optional_kernels=optional_kernels, max_num_seqs=1024)
        return estimate_memory(qwen3, h100, args).activation_peak_gib

    for version in ("0.11.1", "0.14.1", "0.16.0"):
        assert activation(version) == activation(version, optional_kernels=False)
    assert activation("0.11.0") < activation("0.11.0", optional_kernels=False)
    assert activation("0.16.0") > 2 * activation("0.17.0")  # the sweep: 5.64 -> 2.23 GiB


def test_the_native_sort_reproduces_the_version_sweep_at_0_16() -> None:
    """The llm-d version sweep: Qwen3-14B on an H100 (1024 sequences, 8192 batched tokens) peaks
    at 5.64 GiB of activation at 0.16.0 and 2.23 GiB at 0.17.0, and Qwen3-32B at TP2 (bench row
    42) at 5.64 GiB too: one vocabulary, one batch, one figure, so the sampler. The native sort's
    SAMPLER_LOGIT_COPIES_NATIVE (9.7) fp32 copies of 1024 x 151,936 logits give it within 0.1
    GiB on the safe side; the 0.11-0.16 full-batch logits term it replaces had no counterpart in
    vLLM's code (0.11.0 ``_dummy_run`` returns one hidden row per request)."""
    h100 = gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3"))
    for model, tp in (("Qwen/Qwen3-14B", 1), ("Qwen/Qwen3-32B", 2)):
        args = _args(
            "0.16.0",
            dtype="auto",
            max_model_len=8192,
            max_num_seqs=1024,
            max_num_batched_tokens=8192,
            tensor_parallel_size=tp,
        )
        peak = estimate_memory(lookup_architecture(model), h100, args).activation_peak_gib
        assert 5.64 <= peak <= 5.64 + 0.1, (model, peak)
