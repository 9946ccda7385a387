"""Each flag once in the argv: an allowed override replaces the planned value (#19 item 3)."""

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
