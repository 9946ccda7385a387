"""Invariants of multi-node layouts (hypothesis): per-stage budgets, monotonicity in nodes."""

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from vllm_operator.catalog.architectures import Architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.memory import EngineArgs, GpuMemory, estimate_memory
from vllm_operator.planning.plan import PlanResult, PoolPlan, plan_pool

GPUS = st.sampled_from(["NVIDIA-L4", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3"])
VERSIONS = st.sampled_from(["0.11.0", "0.19.0", "0.33.0"])


@st.composite
def large_architectures(draw: st.DrawFn) -> Architecture:
    """Dense GQA models from a few to a few hundred GiB, so that some need several nodes."""
    kv = draw(st.sampled_from([4, 8]))
    heads = kv * draw(st.sampled_from([4, 8, 16]))
    head_dim = 128
    hidden = heads * head_dim
    return Architecture(
        name="prop/large",
        num_hidden_layers=draw(st.integers(8, 128)),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        intermediate_size=draw(st.integers(2, 5)) * hidden,
        vocab_size=draw(st.integers(32000, 160000)),
        max_position_embeddings=131072,
        tie_word_embeddings=draw(st.booleans()),
    )


@st.composite
def intents(draw: st.DrawFn, min_nodes: int = 1) -> PlanIntent:
    return PlanIntent(
        p99_context_tokens=draw(st.integers(1024, 16384)),
        concurrency=draw(st.integers(1, 32)),
        max_gpus_per_replica=draw(st.sampled_from([1, 2, 4, 8])),
        max_nodes_per_replica=draw(st.integers(min_nodes, 6)),
        vllm_version=draw(VERSIONS),
    )


def _nodes(result: PlanResult) -> str:
    if not isinstance(result, PoolPlan):
        return "infeasible"
    return "one node" if result.layout is None else f"{result.layout.nodes} nodes"


# Most drawn models fit one node or none; the layouts are the fifth that counts (see
# --hypothesis-show-statistics), so filtering is expected.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(large_architectures(), GPUS, intents(min_nodes=2))
def test_no_stage_of_a_layout_exceeds_the_per_gpu_budget(
    arch: Architecture, label: str, intent: PlanIntent
) -> None:
    result = plan_pool(intent, lookup_gpu(label), arch)
    event(_nodes(result))
    assume(isinstance(result, PoolPlan) and result.layout is not None)
    assert isinstance(result, PoolPlan) and result.layout is not None
    layout, m = result.layout, result.memory
    assert (
        layout.nodes == layout.pipeline_parallel_size == result.engine_args.pipeline_parallel_size
    )
    assert 2 <= layout.nodes <= intent.max_nodes_per_replica
    assert layout.tensor_parallel_size == result.engine_args.tensor_parallel_size
    assert layout.gpus_per_node == layout.tensor_parallel_size <= intent.max_gpus_per_replica
    assert sum(s.layers for s in layout.stages) == arch.num_hidden_layers
    blocks = min(s.num_gpu_blocks for s in layout.stages)
    assert m.num_gpu_blocks == blocks
    for stage in layout.stages:
        used = stage.weights_gib + stage.activation_gib + m.non_torch_gib + stage.kv_cache_gib
        if m.cuda_graph_subtracted:
            used += stage.cuda_graph_gib
        assert used <= m.budget_gib + 1e-3, stage
        assert stage.kv_cache_gib <= stage.kv_free_gib + 1e-3, stage
    # The target holds as predicted (concurrencyAtP99 may promise less when the model's own
    # error margin does not fit: planning/fidelity.py, never more nodes for it).
    assert m.kv_cache_tokens >= intent.concurrency * intent.p99_context_tokens


@settings(max_examples=40, deadline=None)
@given(large_architectures(), GPUS, intents(min_nodes=2), st.integers(1, 4))
def test_more_allowed_nodes_never_yield_less_kv_per_sequence(
    arch: Architecture, label: str, intent: PlanIntent, more: int
) -> None:
    fewer = plan_pool(intent, lookup_gpu(label), arch)
    event(_nodes(fewer))
    assume(isinstance(fewer, PoolPlan))
    assert isinstance(fewer, PoolPlan)
    wider = intent.model_copy(update={"max_nodes_per_replica": intent.max_nodes_per_replica + more})
    result = plan_pool(wider, lookup_gpu(label), arch)
    assert isinstance(result, PoolPlan)
    assert result.memory.concurrency_at_p99 >= fewer.memory.concurrency_at_p99
    assert result.memory.kv_cache_tokens >= fewer.memory.kv_cache_tokens
    # The fewest nodes win: more allowed nodes never spread a plan that already fits.
    assert result.engine_args == fewer.engine_args


@settings(max_examples=40, deadline=None)
@given(large_architectures(), GPUS, intents())
def test_single_node_answers_do_not_depend_on_the_node_limit(
    arch: Architecture, label: str, intent: PlanIntent
) -> None:
    one = intent.model_copy(update={"max_nodes_per_replica": 1})
    single = plan_pool(one, lookup_gpu(label), arch)
    event(_nodes(single))
    if isinstance(single, PoolPlan):
        assert single.layout is None
        assert single.engine_args.pipeline_parallel_size is None
        allowed = plan_pool(intent, lookup_gpu(label), arch)
        assert allowed == single  # reasons included: nothing about nodes is added
    else:
        assert not any("PP=" in r for r in single.reasons)


@settings(max_examples=60, deadline=None)
@given(
    large_architectures(),
    st.floats(16, 150),
    st.sampled_from([1, 2, 4, 8]),
    VERSIONS,
    st.integers(1, 512),
)
def test_more_stages_never_hold_fewer_kv_tokens_at_the_same_tp(
    arch: Architecture, total: float, tp: int, version: str, seqs: int
) -> None:
    """The memory model itself: each added stage takes layers (weights and KV bytes per token)
    off the busiest stage, and the replica's tokens (the minimum over stages) never drop, even
    with uneven splits where the extra layer moves between stages."""
    gpu = GpuMemory(
        label="X", marketing_name="Test GPU", total_gib=total, compute_capability=(9, 0)
    )
    previous = -1
    for pp in range(1, 9):
        est = estimate_memory(
            arch,
            gpu,
            EngineArgs(
                tensor_parallel_size=tp,
                pipeline_parallel_size=pp,
                max_model_len=4096,
                max_num_seqs=seqs,
                max_num_batched_tokens=4096,
                vllm_version=version,
            ),
        )
        assert len(est.stages) == pp
        assert est.kv_cache_tokens >= previous, [s.layers for s in est.stages]
        previous = est.kv_cache_tokens
