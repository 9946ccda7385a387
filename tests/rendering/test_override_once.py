"""Each flag once in the argv: an allowed override replaces the planned value (#19 item 3)."""

import pytest

from vllm_operator.api.engine_args import PlannedArgs
from vllm_operator.catalog.vllm.values import resolve_option
from vllm_operator.rendering.args import engine_argv

PLANNED = {"tensor_parallel_size": 1, "max_model_len": 4096, "max_num_seqs": 6}


def test_an_override_of_a_planned_field_is_left_to_the_planned_value_the_caller_set() -> None:
    argv = engine_argv(
        "0.33.0",
        {**PLANNED, "max_num_seqs": 64},
        {"--max-num-seqs": "64", "--enable-log-requests": "true"},
        allow_override=True,
    )
    assert argv.count("--max-num-seqs") == 1
    assert argv[argv.index("--max-num-seqs") + 1] == "64"
    assert argv[-1] == "--enable-log-requests"


def test_an_alias_or_negative_of_a_planned_field_is_not_rendered_beside_it() -> None:
    argv = engine_argv(
        "0.33.0",
        {**PLANNED, "tensor_parallel_size": 2, "enable_prefix_caching": False},
        {"--tensor-parallel-size": "2", "--no-enable-prefix-caching": ""},
        allow_override=True,
    )
    assert argv.count("--tensor-parallel-size") == 1
    assert argv.count("--no-enable-prefix-caching") == 1
    assert "--enable-prefix-caching" not in argv


def test_a_planner_owned_flag_the_plan_leaves_unset_is_rendered_from_extra_args() -> None:
    argv = engine_argv(
        "0.33.0",
        {**PLANNED, "max_num_batched_tokens": None},
        {"--max-num-batched-tokens": "8192"},
        allow_override=True,
    )
    assert argv.count("--max-num-batched-tokens") == 1
    assert argv[-2:] == ["--max-num-batched-tokens", "8192"]


# One valid user value per planned field, as extraArgs spells it.
OVERRIDES = {
    "tensor_parallel_size": ("--tensor-parallel-size", "2", 2),
    "gpu_memory_utilization": ("--gpu-memory-utilization", "0.8", 0.8),
    "max_model_len": ("--max-model-len", "2048", 2048),
    "max_num_seqs": ("--max-num-seqs", "64", 64),
    "max_num_batched_tokens": ("--max-num-batched-tokens", "8192", 8192),
    "block_size": ("--block-size", "32", 32),
    "dtype": ("--dtype", "float16", "float16"),
    "kv_cache_dtype": ("--kv-cache-dtype", "fp8", "fp8"),
    "enable_prefix_caching": ("--enable-prefix-caching", "false", False),
    "enforce_eager": ("--enforce-eager", "true", True),
}


@pytest.mark.parametrize("version", ["0.11.0", "0.33.0"])
@pytest.mark.parametrize("field", sorted(OVERRIDES))
def test_every_planned_field_overridden_is_rendered_exactly_once(version: str, field: str) -> None:
    flag, raw, typed = OVERRIDES[field]
    planned = PlannedArgs(
        tensor_parallel_size=1,
        gpu_memory_utilization=0.9,
        max_model_len=4096,
        max_num_seqs=6,
        max_num_batched_tokens=2048,
        block_size=16,
        enable_prefix_caching=True,
    )
    args = planned.model_copy(update={field: typed}).rendered()
    argv = engine_argv(version, args, {flag: raw}, allow_override=True)
    primaries = [
        resolved[0]
        for token in argv
        if token.startswith("--") and (resolved := resolve_option(token.split("=")[0], version))
    ]
    assert len(primaries) == len(set(primaries)), argv
    assert argv == engine_argv(version, args, {}, allow_override=True)
