"""Host memory of a replica: planned per component from the version's behaviour, then clamped."""

import math

import pytest

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.planning.host_memory import (
    API_SERVER_GIB,
    HostMemoryPlan,
    plan_host_memory,
)
from vllm_operator.planning.versions import Engine

LLAMA8 = lookup_architecture("meta-llama/Llama-3.1-8B-Instruct")
LLAMA70 = lookup_architecture("meta-llama/Llama-3.1-70B-Instruct")
GIB = float(1 << 30)


def parts(plan: HostMemoryPlan) -> dict[str, float]:
    return {c.name: c.gib for c in plan.components}


def llama8(
    version: str = "0.33.0",
    engine: Engine = Engine.V1,
    tp: int = 1,
    extra: dict[str, str] | None = None,
    allocatable: float | None = None,
) -> HostMemoryPlan:
    return plan_host_memory(
        LLAMA8,
        tensor_parallel_size=tp,
        engine=engine,
        vllm_version=version,
        weights_gib_per_gpu=14.99 / tp,
        extra_args=extra,
        node_allocatable_gib=allocatable,
    )


def test_staging_is_the_largest_tensor_twice_per_rank_not_the_model() -> None:
    plan = llama8()
    embedding = LLAMA8.vocab_size * LLAMA8.hidden_size * 2 / GIB  # bf16, 0.98 GiB
    assert parts(plan)["weightStaging"] == pytest.approx(2 * embedding, abs=0.01)
    assert parts(plan)["weightStaging"] < 14.99 / 4  # far below the weights themselves
    assert "safetensors_weights_iterator" in plan.components[0].reason
    assert parts(plan)["apiServer"] == API_SERVER_GIB
    assert "swapSpace" not in parts(plan) and "sharedMemory" not in parts(plan)


def test_request_equals_limit_equals_the_rounded_up_sum() -> None:
    plan = llama8()
    total = sum(c.gib for c in plan.components)
    assert plan.planned_gib == plan.limit_gib == math.ceil(total - 1e-9)
    assert not plan.clamped and plan.max_limit_gib is None
    assert plan.to_status().request_gib == plan.to_status().limit_gib == plan.limit_gib


def test_swap_space_counts_only_on_the_v0_engine_of_versions_that_have_it() -> None:
    # 0.10.x on a V0 fallback (sm75): 4 GiB per GPU, pinned CPU KV blocks.
    assert parts(llama8("0.10.2", Engine.V0, tp=2))["swapSpace"] == 8
    # The flag exists in 0.11-0.17 (default 4) but V1 never allocates CPU blocks.
    assert "swapSpace" not in parts(llama8("0.11.0", Engine.V1))
    # --swap-space from extraArgs replaces the default; 0 removes it.
    assert parts(llama8("0.10.2", Engine.V0, extra={"--swap-space": "16"}))["swapSpace"] == 16
    assert "swapSpace" not in parts(llama8("0.10.2", Engine.V0, extra={"--swap-space": "0"}))
    # Removed from the catalog in 0.18: never counted, whatever the engine.
    assert "swapSpace" not in parts(llama8("0.33.0", Engine.V0))


def test_cpu_and_kv_offload_count_when_extra_args_enable_them() -> None:
    plan = llama8(tp=2, extra={"--cpu-offload-gb": "10", "--kv-offloading-size": "32"})
    assert parts(plan)["cpuOffload"] == 20  # per GPU
    assert parts(plan)["kvOffload"] == 32  # all ranks together
    assert plan.limit_gib > llama8(tp=2).limit_gib + 50


def test_eager_loading_stages_a_whole_shard_per_rank() -> None:
    lazy = llama8()
    eager = llama8(extra={"--safetensors-load-strategy": "eager"})
    assert parts(eager)["weightStaging"] == pytest.approx(2 * 5e9 / GIB, abs=0.01)
    assert eager.limit_gib > lazy.limit_gib


def test_tensor_parallel_adds_shm_workers_and_the_engine_core() -> None:
    tp1 = plan_host_memory(
        LLAMA70,
        tensor_parallel_size=1,
        engine=Engine.V1,
        vllm_version="0.33.0",
        weights_gib_per_gpu=131.4,
    )
    tp4 = plan_host_memory(
        LLAMA70,
        tensor_parallel_size=4,
        engine=Engine.V1,
        vllm_version="0.33.0",
        weights_gib_per_gpu=32.9,
    )
    assert parts(tp4)["sharedMemory"] == tp4.shm_gib == 4
    assert parts(tp4)["weightStaging"] == pytest.approx(4 * parts(tp1)["weightStaging"], abs=0.02)
    assert parts(tp4)["workers"] == 4 * parts(tp1)["workers"]
    assert "engineCore" in parts(tp4) and "engineCore" not in parts(tp1)
    assert tp1.shm_gib is None
    assert tp4.limit_gib > tp1.limit_gib


def test_a_node_that_cannot_hold_the_plan_clamps_the_limit_and_says_so() -> None:
    plan = llama8(allocatable=8.0)
    assert plan.clamped and plan.limit_gib == 7 and plan.planned_gib > 7
    assert plan.max_limit_gib == 7
    assert "clamped to 7 GiB" in plan.reasons[-1] and "8.0 GiB allocatable" in plan.reasons[-1]
    status = plan.to_status()
    assert status.clamped and status.note == plan.reasons[-1]
    roomy = llama8(allocatable=512.0)
    assert not roomy.clamped and roomy.limit_gib == roomy.planned_gib
    assert roomy.max_limit_gib == 511 and roomy.to_status().note is None
