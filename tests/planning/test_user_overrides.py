"""The plan with the user's values for planner-owned flags (#19 item 3)."""

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.adapters import Adapters
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.plan import PoolPlan, plan_pool
from vllm_operator.planning.user_overrides import apply_user_values

LLAMA8 = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")
L4 = lookup_gpu("NVIDIA-L4")
INTENT = PlanIntent(p99_context_tokens=4096, concurrency=6)


def planned() -> PoolPlan:
    result = plan_pool(INTENT, L4, LLAMA8)
    assert isinstance(result, PoolPlan)
    return result


def test_a_user_value_replaces_the_planned_one_and_is_listed_with_both_values() -> None:
    plan = planned()
    out = apply_user_values(
        plan,
        {"max_num_seqs": 64, "enable_chunked_prefill": True},
        {"max_num_seqs": "--max-num-seqs"},
        intent=INTENT,
        arch=LLAMA8,
        gpu=L4,
    )
    assert out.plan.engine_args.max_num_seqs == 64
    (override,) = out.overrides
    assert (override.arg, override.flag, override.planned, override.value) == (
        "max_num_seqs",
        "--max-num-seqs",
        plan.engine_args.max_num_seqs,
        64,
    )
    assert any("--max-num-seqs replaces the planned" in r for r in out.plan.reasons)


def test_memory_figures_are_recomputed_with_the_users_utilization() -> None:
    plan = planned()
    low = plan.engine_args.gpu_memory_utilization - 0.1
    out = apply_user_values(
        plan, {"gpu_memory_utilization": low}, {}, intent=INTENT, arch=LLAMA8, gpu=L4
    )
    before, after = plan.memory, out.plan.memory
    assert after.budget_gib < before.budget_gib
    assert after.kv_cache_tokens < before.kv_cache_tokens
    assert after.weights_gib == before.weights_gib
    assert after.concurrency_at_p99 == round(after.kv_cache_tokens / 4096, 2)


def test_a_value_that_misses_the_target_says_the_plan_no_longer_holds() -> None:
    out = apply_user_values(
        planned(), {"gpu_memory_utilization": 0.72}, {}, intent=INTENT, arch=LLAMA8, gpu=L4
    )
    assert not out.holds
    assert any("below the target 6" in p or "no KV cache fits" in p for p in out.problems)


def test_a_shorter_context_than_p99_does_not_hold() -> None:
    out = apply_user_values(
        planned(), {"max_model_len": 2048}, {}, intent=INTENT, arch=LLAMA8, gpu=L4
    )
    assert out.plan.engine_args.max_model_len == 2048
    assert any("below p99ContextTokens 4096" in p for p in out.problems)


def test_unmodelled_flags_keep_the_plan_and_say_it_no_longer_holds() -> None:
    plan = planned()
    out = apply_user_values(
        plan,
        {"kv_cache_memory_bytes": 4 << 30},
        {"kv_cache_memory_bytes": "--kv-cache-memory-bytes"},
        intent=INTENT,
        arch=LLAMA8,
        gpu=L4,
    )
    assert out.plan == plan and out.overrides == ()
    assert out.problems == (
        "--kv-cache-memory-bytes fixes the KV cache size whatever gpu_memory_utilization says; "
        "the memory model does not account for it",
    )


def test_the_planned_value_again_is_no_override_and_unowned_fields_are_ignored() -> None:
    plan = planned()
    out = apply_user_values(
        plan,
        {"max_num_seqs": plan.engine_args.max_num_seqs, "long_prefill_token_threshold": 5},
        {},
        intent=INTENT,
        arch=LLAMA8,
        gpu=L4,
    )
    assert out.plan == plan and out.overrides == () and out.holds


def test_an_unmodelled_kv_cache_dtype_is_reported_not_estimated() -> None:
    out = apply_user_values(
        planned(), {"kv_cache_dtype": "int4_per_token_head"}, {}, intent=INTENT, arch=LLAMA8, gpu=L4
    )
    assert out.plan.engine_args.kv_cache_dtype == "int4_per_token_head"
    assert any("not in the memory model" in p for p in out.problems)


def test_default_values_of_unmodelled_flags_change_nothing() -> None:
    out = apply_user_values(
        planned(),
        {"cpu_offload_gb": 0.0, "data_parallel_size": 1},
        {},
        intent=INTENT,
        arch=LLAMA8,
        gpu=L4,
    )
    assert out.holds


def test_a_tensor_parallel_size_beyond_the_pools_gpus_is_refused_with_its_field() -> None:
    intent = INTENT.model_copy(update={"max_gpus_per_replica": 1})
    out = apply_user_values(
        planned(), {"tensor_parallel_size": 2}, {}, intent=intent, arch=LLAMA8, gpu=L4
    )
    ((path, why),) = out.refusals
    assert path == "spec.vllm.extraArgs[--tensor-parallel-size]"
    assert "spec.placement.maxGPUsPerReplica is 1" in why


def test_the_recompute_keeps_the_services_lora_slots() -> None:
    """An override's memory is the plan's model with the user's value, adapters included: with
    --max-loras 1 the LoRA buffers stay in the recomputed figures (they were left out before, so
    an override read more KV than the pod would have)."""
    intent = PlanIntent(
        p99_context_tokens=4096,
        concurrency=4,
        adapters=Adapters(max_loras=1, max_lora_rank=16),
    )
    result = plan_pool(intent, L4, LLAMA8)
    assert isinstance(result, PoolPlan) and result.memory.lora_gib > 0
    low = result.engine_args.gpu_memory_utilization - 0.05
    out = apply_user_values(
        result, {"gpu_memory_utilization": low}, {}, intent=intent, arch=LLAMA8, gpu=L4
    )
    assert out.plan.memory.lora_gib == result.memory.lora_gib
    without = apply_user_values(
        planned(), {"gpu_memory_utilization": low}, {}, intent=INTENT, arch=LLAMA8, gpu=L4
    )
    assert out.plan.memory.kv_cache_tokens < without.plan.memory.kv_cache_tokens
