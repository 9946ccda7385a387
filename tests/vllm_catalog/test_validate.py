"""The validation API: engine args / extra args / raw argv -> accepted argv or typed problems."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_operator.catalog.vllm import (
    PLANNER_OWNED_FLAGS,
    ArgsError,
    UnknownVersionError,
    check_argv,
    load_version,
    render_engine_args,
    render_extra_args,
    supported_versions,
    validate_argv,
)


def messages(version: str, argv: list[str], **kw: bool) -> list[str]:
    return [p.message for p in check_argv(version, argv, **kw)]


# ----------------------------------------------------------------------------- raw argv ---


def test_issue_examples() -> None:
    assert messages("0.33.0", ["--max-num-on-the-fly-batches", "4"]) == [
        "--max-num-on-the-fly-batches does not exist in any vLLM release; "
        "did you mean --max-num-batched-tokens?"
    ]
    assert messages("0.33.0", ["--swap-space", "8"]) == [
        "--swap-space was removed in 0.18.0; the pinned version is 0.33.0"
    ]
    assert (
        messages("0.33.0", ["--max-num-batched-tokens", "8192", "--no-enable-prefix-caching"]) == []
    )


def test_flag_added_later_names_the_release() -> None:
    assert messages("0.9.2", ["--kv-cache-memory-bytes", "8G"]) == [
        "--kv-cache-memory-bytes was added in 0.10.2; the pinned version is 0.9.2"
    ]


def test_flag_in_other_versions_lists_them() -> None:
    (msg,) = messages("0.20.0", ["--disable-log-requests"])
    assert "0.6.0-0.16.0" in msg and "0.33.0" in msg and "0.20.0" in msg


def test_impossible_boolean_forms() -> None:
    (msg,) = messages("0.33.0", ["--enable-chunked-prefill=False"])
    assert "takes no value" in msg and "--no-enable-chunked-prefill" in msg
    (msg,) = messages("0.8.5.post1", ["--no-enforce-eager"])
    assert "plain switch" in msg
    assert messages("0.9.0", ["--no-enforce-eager"]) == []


def test_store_boolean_era_accepts_equals_true_false() -> None:
    assert messages("0.7.3", ["--enable-chunked-prefill=false"]) == []
    assert messages("0.7.3", ["--enable-chunked-prefill=maybe"])


def test_bad_choices_and_values() -> None:
    (msg,) = messages("0.6.0", ["--block-size", "64"])
    assert "8, 16, 32" in msg
    (msg,) = messages("0.10.2", ["--kv-cache-dtype", "bfloat16"])
    assert "choose one of" in msg
    (msg,) = messages("0.33.0", ["--quantization", "squeezellm"])
    assert "QuantizationMethods" in msg
    assert messages("0.33.0", ["--max-num-seqs", "lots"]) == [
        "--max-num-seqs expects an integer, got 'lots'"
    ]
    assert messages("0.33.0", ["--max-model-len", "32k", "--kv-cache-memory-bytes", "8G"]) == []


def test_abbreviations_and_positionals_are_rejected() -> None:
    (msg,) = messages("0.33.0", ["--kv-cache-memory", "8G"])
    assert "abbreviation of --kv-cache-memory-bytes" in msg
    (msg,) = messages("0.33.0", ["some/model"])
    assert "positional" in msg


def test_aliases_dashes_and_dotted_json() -> None:
    assert messages("0.33.0", ["-tp", "2", "--max_num_seqs", "4"]) == []
    assert messages("0.33.0", ["--compilation-config.mode", "3"]) == []
    assert messages("0.33.0", ["--compilation-config", '{"mode": 3}']) == []
    assert messages("0.33.0", ["--compilation-config", "{bad"])


def test_planner_and_operator_owned_flags() -> None:
    argv = ["-tp", "2", "--disable-prefix-caching"]
    assert len(messages("0.33.0", argv, check_collisions=True)) == 2
    assert messages("0.33.0", argv, check_collisions=True, allow_planner_override=True) == []
    (msg,) = messages(
        "0.33.0", ["--disable-log-stats"], check_collisions=True, allow_planner_override=True
    )
    assert "metric" in msg
    assert {
        "--max-num-batched-tokens",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--block-size",
        "--kv-cache-dtype",
    } <= PLANNER_OWNED_FLAGS


def test_unknown_version_lists_range() -> None:
    with pytest.raises(UnknownVersionError, match=r"supported: 0\.6\.0 to 0\.33\.0"):
        check_argv("0.34.0", [])


def test_validate_argv_raises_with_every_problem() -> None:
    with pytest.raises(ArgsError) as info:
        validate_argv("0.33.0", ["--swap-space", "8", "--max-num-on-the-fly-batches", "2"])
    assert [p.flag for p in info.value.problems] == ["--swap-space", "--max-num-on-the-fly-batches"]
    assert info.value.problems[0].value == "8"


# -------------------------------------------------------------------------- engine args ---


def test_render_engine_args_by_field_name() -> None:
    argv = render_engine_args(
        "0.33.0",
        {
            "tensor_parallel_size": 2,
            "gpu_memory_utilization": 0.9,
            "max_model_len": 32768,
            "max_num_seqs": 64,
            "max_num_batched_tokens": 8192,
            "enable_prefix_caching": False,
            "enforce_eager": True,
            "kv_cache_dtype": "fp8",
            "kv_cache_memory_bytes": None,
        },
    )
    assert argv == [
        "--tensor-parallel-size",
        "2",
        "--gpu-memory-utilization",
        "0.9",
        "--max-model-len",
        "32768",
        "--max-num-seqs",
        "64",
        "--max-num-batched-tokens",
        "8192",
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--kv-cache-dtype",
        "fp8",
    ]
    assert check_argv("0.33.0", argv) == []


def test_render_engine_args_old_boolean_styles() -> None:
    assert render_engine_args("0.7.3", {"enable_chunked_prefill": False}) == [
        "--enable-chunked-prefill=false"
    ]
    assert render_engine_args("0.8.5.post1", {"enforce_eager": False}) == []
    assert render_engine_args("0.8.5.post1", {"enforce_eager": True}) == ["--enforce-eager"]


def test_render_engine_args_rejects_what_the_version_lacks() -> None:
    with pytest.raises(ArgsError) as info:
        render_engine_args("0.33.0", {"swap_space": 4, "block_size": 16, "memory_budget_pct": 0.5})
    msgs = [p.message for p in info.value.problems]
    assert msgs[0] == (
        "engine argument swap_space: --swap-space was removed in 0.18.0; the "
        "pinned version is 0.33.0"
    )
    assert "memory_budget_pct" in msgs[1] and "does not exist in any vLLM release" in msgs[1]
    with pytest.raises(ArgsError):
        render_engine_args("0.6.0", {"block_size": 64})
    with pytest.raises(ArgsError):
        render_engine_args("0.33.0", {"enforce_eager": "yes"})


# --------------------------------------------------------------------------- extra args ---


def test_render_extra_args() -> None:
    assert render_extra_args(
        "0.33.0",
        {
            "--enable-log-requests": "true",
            "--async-scheduling": "false",
            "--served-model-name": "chat",
        },
    ) == ["--enable-log-requests", "--no-async-scheduling", "--served-model-name", "chat"]
    with pytest.raises(ArgsError, match="removed in 0.18.0"):
        render_extra_args("0.33.0", {"--swap-space": "8"})
    with pytest.raises(ArgsError, match="allowPlannerOverride"):
        render_extra_args("0.33.0", {"--max-num-seqs": "8"})
    assert render_extra_args("0.33.0", {"--max-num-seqs": "8"}, allow_planner_override=True) == [
        "--max-num-seqs",
        "8",
    ]


# ----------------------------------------------------------------------------- property ---

_BOOLS = st.sampled_from(supported_versions()).flatmap(
    lambda v: st.tuples(
        st.just(v),
        st.lists(
            st.sampled_from(
                sorted(
                    spec.dest
                    for spec in load_version(v).flags.values()
                    if spec.kind in ("bool_optional", "store_boolean")
                    or (spec.kind == "store_true" and spec.default in (None, False))
                )
            ),
            unique=True,
            max_size=8,
        ),
        st.booleans(),
    )
)


@settings(max_examples=60, deadline=None)
@given(_BOOLS)
def test_rendered_booleans_always_pass_the_check(case: tuple[str, list[str], bool]) -> None:
    version, dests, on = case
    argv = render_engine_args(version, dict.fromkeys(dests, on))
    assert check_argv(version, argv) == []


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(supported_versions()), st.data())
def test_rendered_choices_always_pass_the_check(version: str, data: st.DataObject) -> None:
    flags = {
        f: s
        for f, s in load_version(version).flags.items()
        if s.choices and s.kind == "value" and s.nargs is None
    }
    flag = data.draw(st.sampled_from(sorted(flags)))
    spec = flags[flag]
    assert spec.choices is not None
    value = data.draw(st.sampled_from(spec.choices))
    argv = render_engine_args(version, {spec.dest: value})
    assert check_argv(version, argv) == []


# ------------------------------------------------------- values of JSON/dict flags (#19) ---


def test_renamed_config_key_names_the_new_one_and_the_accepted_keys() -> None:
    (msg,) = messages("0.33.0", ["--compilation-config", '{"level": 3}'])
    assert msg.startswith(
        '--compilation-config: unknown key "level" in vLLM 0.33.0 (accepted up to'
    )
    assert 'renamed to "mode"?' in msg
    assert "accepted keys (CompilationConfig):" in msg and " mode," in msg
    # the dotted form is merged into the same JSON and checked the same way
    (dotted,) = messages("0.33.0", ["--compilation-config.level=3"])
    assert dotted == msg


def test_unknown_keys_of_each_config_flag_from_the_issue() -> None:
    cases = {
        "--kv-transfer-config": ('{"kv_connector": "NixlConnector", "role": "kv_both"}', "role"),
        "--structured-outputs-config": ('{"guided_decoding_backend": "xgrammar"}', "guided"),
        "--kv-events-config": ('{"enable_events": true}', "enable_events"),
        "--pooler-config": ('{"zz_pooling": "MEAN"}', "zz_pooling"),
    }
    for flag, (value, key) in cases.items():
        (msg,) = messages("0.33.0", [flag, value])
        assert msg.startswith(f'{flag}: unknown key "{key}') and "accepted keys" in msg


def test_nested_config_keys_are_checked() -> None:
    (msg,) = messages("0.33.0", ["--compilation-config", '{"pass_config": {"zz": true}}'])
    assert 'unknown key "pass_config.zz"' in msg and "(PassConfig)" in msg


def test_json_required_where_the_release_requires_it() -> None:
    (msg,) = messages("0.33.0", ["--limit-mm-per-prompt", "image=2"])
    assert "expects a JSON value" in msg and '{"image": 2}' in msg
    (msg,) = messages("0.33.0", ["--compilation-config", "3"])
    assert "expects a JSON object (CompilationConfig)" in msg
    (msg,) = messages("0.33.0", ["--override-generation-config", "temperature=0.5"])
    assert "key=value is not accepted" in msg
    assert messages("0.33.0", ["--limit-mm-per-prompt", '{"image": 2}']) == []
    # a JSON non-object passes the parser but not the engine configuration: refused, said so
    (msg,) = messages("0.33.0", ["--limit-mm-per-prompt", "3"])
    assert "engine configuration then fails at start" in msg


def test_older_releases_ignore_unknown_config_keys_like_vllm() -> None:
    """0.11's config classes drop unknown keys silently (pydantic extra=ignore)."""
    assert messages("0.11.0", ["--compilation-config", '{"mode": 3}']) == []
    assert messages("0.11.0", ["--compilation-config", '{"level": 3}']) == []
    (msg,) = messages("0.8.5.post1", ["--hf-overrides", "a=1"])
    assert "expects a JSON value" in msg


def test_shorthands_are_rewritten_like_the_release_does() -> None:
    for argv in (["-O3"], ["-O", "3"], ["-O=3"], ["-cc.mode=3"], ["-cc", '{"mode": 3}']):
        assert messages("0.33.0", argv) == [], argv
    for argv in (["-O3"], ["-O", "3"], ["-O.level=3"], ["--compilation-config.level", "3"]):
        assert messages("0.11.0", argv) == [], argv
    (msg,) = messages("0.33.0", ["-cc.level=3"])
    assert 'unknown key "level"' in msg
    # -O 7 is no shorthand in 0.33 (only 0-3 are rewritten) and -O is no flag there
    assert messages("0.33.0", ["-O", "7"])


def test_negative_human_readable_ints_like_vllm() -> None:
    for version in ("0.11.0", "0.8.5.post1", "0.33.0"):
        assert messages(version, ["--max-model-len", "-1"]) == [], version
    assert messages("0.11.0", ["--max-model-len", "1.5"])


def test_extra_args_and_engine_args_check_json_values() -> None:
    with pytest.raises(ArgsError, match='unknown key "level"'):
        render_extra_args("0.33.0", {"--compilation-config": '{"level": 3}'})
    assert render_extra_args("0.33.0", {"--compilation-config": '{"mode": 3}'}) == [
        "--compilation-config",
        '{"mode": 3}',
    ]
    with pytest.raises(ArgsError, match='unknown key "zz"'):
        render_engine_args("0.33.0", {"kv_transfer_config": {"zz": 1}})


def test_extra_args_dotted_keys_and_shorthands_render_as_the_parser_reads_them() -> None:
    argv = render_extra_args(
        "0.33.0",
        {"--compilation-config.mode": "3", "--compilation-config.cudagraph_mode": '"FULL"'},
    )
    assert argv == ["--compilation-config", '{"mode": 3, "cudagraph_mode": "FULL"}']
    assert render_extra_args("0.33.0", {"-O": "3"}) == ["--optimization-level", "3"]
    with pytest.raises(ArgsError, match='unknown key "level"'):
        render_extra_args("0.33.0", {"--compilation-config.level": "3"})


def test_dotted_keys_before_the_release_that_reads_them() -> None:
    (msg,) = messages("0.8.5.post1", ["--compilation-config.level=3"])
    assert msg.startswith("--compilation-config.level: vLLM 0.8.5.post1 does not accept dotted")
    assert "pass the JSON value to --compilation-config" in msg
