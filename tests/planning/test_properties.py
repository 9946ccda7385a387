"""Invariants of the memory model and the planner (hypothesis)."""

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from vllm_operator.catalog.architectures import Architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.memory import GIB, EngineArgs, GpuMemory, estimate_memory
from vllm_operator.planning.plan import PoolPlan, plan_pool

VERSIONS = st.sampled_from(["0.6.6", "0.9.2", "0.11.0", "0.17.0", "0.19.0", "0.20.0", "0.33.0"])


@st.composite
def gqa_architectures(draw: st.DrawFn) -> Architecture:
    kv = draw(st.sampled_from([1, 2, 4, 8]))
    groups = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv * groups
    head_dim = draw(st.sampled_from([64, 128]))
    return Architecture(
        name="prop/model",
        num_hidden_layers=draw(st.integers(2, 80)),
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        intermediate_size=draw(st.integers(256, 30000)),
        vocab_size=draw(st.integers(1000, 260000)),
        max_position_embeddings=131072,
    )


def gpu(total_gib: float) -> GpuMemory:
    return GpuMemory(
        label="X", marketing_name="Test GPU", total_gib=total_gib, compute_capability=(9, 0)
    )


@settings(max_examples=60, deadline=None)
@given(
    gqa_architectures(), st.floats(8, 150), st.floats(0.5, 60), VERSIONS, st.sampled_from([1, 2, 4])
)
def test_more_gpu_memory_never_yields_less_kv(
    arch: Architecture, total: float, extra: float, version: str, tp: int
) -> None:
    if arch.num_attention_heads % tp:
        tp = 1
    args = EngineArgs(
        tensor_parallel_size=tp,
        max_model_len=4096,
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        vllm_version=version,
    )
    small = estimate_memory(arch, gpu(total), args)
    large = estimate_memory(arch, gpu(total + extra), args)
    assert large.kv_cache_gib >= small.kv_cache_gib
    assert large.kv_cache_tokens >= small.kv_cache_tokens


@settings(max_examples=60, deadline=None)
@given(gqa_architectures(), st.floats(8, 150), VERSIONS)
def test_larger_tp_never_yields_fewer_kv_tokens_per_sequence(
    arch: Architecture, total: float, version: str
) -> None:
    previous = -1
    compared = 0
    for tp in (1, 2, 4, 8):
        if arch.num_attention_heads % tp or tp > arch.num_key_value_heads:
            continue  # past the KV heads they are replicated: per-rank KV bytes stop shrinking
        est = estimate_memory(
            arch,
            gpu(total),
            EngineArgs(
                tensor_parallel_size=tp,
                max_model_len=4096,
                max_num_seqs=64,
                max_num_batched_tokens=4096,
                vllm_version=version,
            ),
        )
        assert est.kv_cache_tokens >= previous
        compared += previous >= 0
        previous = est.kv_cache_tokens
    # An architecture with one valid TP compares nothing: discard it rather than pass vacuously.
    assume(compared >= 1)


@settings(max_examples=40, deadline=None)
@given(
    gqa_architectures(),
    st.sampled_from(["NVIDIA-L4", "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB", "Tesla-T4"]),
    st.integers(256, 32768),
    st.integers(1, 64),
    VERSIONS,
    st.floats(0.5, 0.95),
    st.floats(0, 0.2),
)
def test_a_plan_never_exceeds_its_budget(
    arch: Architecture,
    label: str,
    p99: int,
    concurrency: int,
    version: str,
    ceiling: float,
    headroom: float,
) -> None:
    intent = PlanIntent(
        p99_context_tokens=p99,
        concurrency=concurrency,
        vllm_version=version,
        max_gpu_memory_utilization=ceiling,
        memory_headroom_fraction=headroom,
    )
    result = plan_pool(intent, lookup_gpu(label), arch)
    event("feasible" if isinstance(result, PoolPlan) else "infeasible")
    if not isinstance(result, PoolPlan):
        # Infeasible is an answer too: it must say why (a usage error, such as a bfloat16
        # checkpoint on a GPU without bfloat16, names the flag to pass).
        assert result.reasons
        # Discarded so that the examples that count exercise the budget checks below.
        assume(False)
        return
    m = result.memory
    util = result.engine_args.gpu_memory_utilization
    assert isinstance(util, float) and util <= ceiling - headroom + 1e-9
    used = m.weights_gib + m.activation_gib + m.non_torch_gib + m.kv_cache_gib
    if m.cuda_graph_subtracted:
        used += m.cuda_graph_gib
    else:  # graphs live outside the budget and must fit in what util leaves free
        assert m.budget_gib + m.cuda_graph_gib <= m.gpu_total_gib
    assert used <= m.budget_gib + 1e-3
    assert m.budget_gib <= m.gpu_total_gib * util + 1e-3
    bytes_per_token = (
        2
        * arch.num_hidden_layers
        * max(1, arch.num_key_value_heads // int(result.engine_args.tensor_parallel_size or 1))
        * arch.head_dim
        * 2
    )
    assert (
        m.kv_cache_tokens * bytes_per_token <= (m.kv_cache_gib + 5e-5) * GIB
    )  # 4-decimal rounding
    assert m.kv_cache_tokens >= concurrency * p99
