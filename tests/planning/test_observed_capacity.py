"""The planner learns from the fleet: a measured KV capacity replaces the model's for its key."""

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.intent import ObservedKv, PlanIntent
from vllm_operator.planning.plan import PoolPlan, plan_pool

LLAMA8 = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")
LLAMA70 = lookup_architecture("meta-llama/Llama-3.1-70B-Instruct")
L4 = lookup_gpu("NVIDIA-L4")
H100 = lookup_gpu("NVIDIA-H100-80GB-HBM3")
AT = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
# The L4 example: 6 x 4096 tokens on one GPU (TP is capped at the node's one GPU).
INTENT = PlanIntent(p99_context_tokens=4096, concurrency=6, max_gpus_per_replica=1)


def plan(intent: PlanIntent = INTENT, gpu=L4, arch=LLAMA8) -> PoolPlan:  # type: ignore[no-untyped-def]
    result = plan_pool(intent, gpu, arch)
    assert isinstance(result, PoolPlan), result
    return result


def observed(base: PoolPlan, tokens: int, **changes: object) -> ObservedKv:
    """What an engine running `base`'s arguments measured."""
    a = base.engine_args
    fields: dict[str, object] = {
        "vllm_version": base.vllm_version,
        "tensor_parallel_size": a.tensor_parallel_size,
        "max_model_len": a.max_model_len,
        "gpu_memory_utilization": a.gpu_memory_utilization,
        "block_size": a.block_size,
        "kv_cache_dtype": a.kv_cache_dtype,
        "dtype": a.dtype,
        "quantization": a.quantization,
        "max_num_seqs": a.max_num_seqs,
        "max_num_batched_tokens": a.max_num_batched_tokens,
        "kv_cache_tokens": tokens,
        "observed_at": AT,
    }
    fields.update(changes)
    return ObservedKv.model_validate(fields)


def with_obs(*obs: ObservedKv, intent: PlanIntent = INTENT) -> PlanIntent:
    return intent.model_copy(update={"observations": obs})


def test_a_matching_observation_replaces_the_prediction_and_is_explained() -> None:
    base = plan()
    predicted = base.memory.kv_cache_tokens
    learned = plan(with_obs(observed(base, 28672)))
    assert learned.memory.kv_cache_tokens == 28672
    assert learned.memory.predicted_kv_cache_tokens == predicted
    assert learned.memory.concurrency_at_p99 == round(28672 / 4096, 2)
    assert learned.engine_args == base.engine_args  # 7 x 4096 still holds the target of 6
    (reason,) = [r for r in learned.reasons if r.startswith("KV capacity from observation")]
    assert "28672 tokens measured by vLLM 0.33.0 at 2026-11-25T10:00:00Z" in reason
    assert f"predicted {predicted}" in reason
    # The status form carries both numbers.
    status = learned.to_status().memory
    assert status is not None
    assert (status.kv_cache_tokens, status.predicted_kv_cache_tokens) == (28672, predicted)


def test_a_smaller_capacity_than_the_target_lowers_max_num_seqs_and_says_how_to_serve_it() -> None:
    base = plan()
    learned = plan(with_obs(observed(base, 16384)))  # 4 x 4096
    assert learned.engine_args.max_num_seqs == 4
    assert learned.engine_args.tensor_parallel_size == 1
    assert learned.memory.concurrency_at_p99 == 4.0
    assert learned.memory.kv_cache_tokens == 16384
    text = " ".join(learned.reasons)
    assert "max_num_seqs lowered to 4, below the concurrency target 6" in text
    assert "2x the replicas" in text


def test_a_smaller_capacity_moves_to_a_larger_tp_when_one_is_allowed() -> None:
    intent = PlanIntent(p99_context_tokens=8192, concurrency=32)
    base = plan(intent, H100, LLAMA70)
    assert base.engine_args.tensor_parallel_size == 4
    learned = plan(with_obs(observed(base, 8192 * 20), intent=intent), H100, LLAMA70)
    assert learned.engine_args.tensor_parallel_size == 8  # TP=4 measured too small
    assert learned.engine_args.max_num_seqs == 32
    assert learned.memory.predicted_kv_cache_tokens is None  # TP=8 was never measured
    assert any("TP=4 fits 20.0 sequences" in r and "measured" in r for r in learned.reasons)


def test_observations_of_other_configurations_are_ignored() -> None:
    base = plan()
    for other in (
        observed(base, 16384, tensor_parallel_size=2),
        observed(base, 16384, max_model_len=8192),
        observed(base, 16384, gpu_memory_utilization=0.85),
        observed(base, 16384, kv_cache_dtype="fp8"),
        observed(base, 16384, dtype="float16"),
        observed(base, 16384, quantization="awq"),
        observed(base, 16384, enforce_eager=True),
        observed(base, 16384, vllm_version="0.19.0"),
        observed(base, 16384, block_size=32),
        # Run with fewer sequences than planned: graphs for more sequences may take more memory.
        observed(base, 16384, max_num_seqs=2),
    ):
        assert plan(with_obs(other)) == base, other


def test_a_run_with_a_smaller_prefill_chunk_is_matched_by_keeping_that_chunk() -> None:
    base = plan()
    chunk = base.engine_args.max_num_batched_tokens
    assert chunk is not None
    learned = plan(with_obs(observed(base, 28672, max_num_batched_tokens=chunk // 2)))
    assert learned.engine_args.max_num_batched_tokens == chunk // 2
    assert learned.memory.kv_cache_tokens == 28672


def test_the_observation_is_part_of_the_intent_so_the_plan_cache_keys_on_it() -> None:
    base = plan()
    assert hash(with_obs(observed(base, 16384))) != hash(INTENT)
    assert with_obs(observed(base, 16384)) == with_obs(observed(base, 16384))


@settings(max_examples=40, deadline=None)
@given(
    fraction=st.floats(min_value=0.05, max_value=1.0),
    concurrency=st.integers(min_value=1, max_value=8),
)
def test_a_lower_observed_capacity_never_promises_more_than_it_supports(
    fraction: float, concurrency: int
) -> None:
    """Whatever the measurement below the prediction, the plan at the measured configuration
    never promises (concurrency at P99, max_num_seqs) more than the measured KV cache holds."""
    intent = PlanIntent(p99_context_tokens=2048, concurrency=concurrency, max_gpus_per_replica=1)
    base = plan(intent)
    tokens = max(base.engine_args.max_model_len, int(base.memory.kv_cache_tokens * fraction))
    learned = plan(with_obs(observed(base, tokens), intent=intent))
    holds = tokens / intent.p99_context_tokens
    assert learned.memory.kv_cache_tokens == tokens
    assert learned.memory.concurrency_at_p99 <= round(holds, 2)
    assert learned.engine_args.max_num_seqs <= max(1, int(holds))
    assert learned.engine_args.max_num_seqs == min(concurrency, max(1, int(holds)))
