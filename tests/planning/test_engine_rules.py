"""vLLM's engine-configuration cross-field rules, per version (#19 item 2)."""

from collections.abc import Mapping

import pytest

from vllm_operator.planning.engine_rules import RULES, ConfigValue, check_engine_rules
from vllm_operator.planning.versions import Engine, VllmVersion


def names(
    version: str, config: Mapping[str, ConfigValue], engine: Engine | None = None
) -> list[str]:
    return [v.rule for v in check_engine_rules(version, config, engine=engine)]


CHUNKED_OFF: dict[str, ConfigValue] = {
    "enable_chunked_prefill": False,
    "max_num_batched_tokens": 2048,
    "max_model_len": 8192,
}


def test_chunked_prefill_off_below_max_model_len_is_refused_on_0_33_with_vllms_words() -> None:
    (violation,) = check_engine_rules("0.33.0", CHUNKED_OFF)
    assert violation.message.startswith(
        "max_num_batched_tokens (2048) is smaller than max_model_len (8192)."
    )
    assert violation.source == (
        "vLLM 0.33.0 vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len"
    )
    text = violation.describe({"enable_chunked_prefill": "extraArgs --no-enable-chunked-prefill"})
    assert (
        "vllm/config/scheduler.py" in text and "from extraArgs --no-enable-chunked-prefill" in text
    )


def test_chunked_prefill_rule_holds_when_on_equal_or_forced_on() -> None:
    assert names("0.33.0", {**CHUNKED_OFF, "enable_chunked_prefill": True}) == []
    assert names("0.33.0", {**CHUNKED_OFF, "max_num_batched_tokens": 8192}) == []
    # Unset: V1 turns chunked prefill on by default.
    assert names("0.33.0", {"max_num_batched_tokens": 2048, "max_model_len": 8192}) == []
    # 0.11 forces chunked prefill on for generative models whatever the flag says.
    assert names("0.11.0", CHUNKED_OFF) == []


def test_v0_default_chunked_prefill_follows_the_context_length() -> None:
    short = {"max_num_batched_tokens": 2048, "max_model_len": 8192}
    assert names("0.6.6.post1", short, Engine.V0) == [
        "chunked-prefill-off-needs-batched-tokens-of-max-model-len"
    ]
    # Above 32K V0 turns chunked prefill on by itself.
    assert names("0.6.6.post1", {**short, "max_model_len": 65536}, Engine.V0) == []
    (violation,) = check_engine_rules("0.6.6.post1", short, engine=Engine.V0)
    assert violation.source == "vLLM 0.6.6.post1 vllm/config.py:SchedulerConfig._verify_args"
    # The same pool on V1 (0.6.6-0.11.0 force chunked prefill on there) cannot break it.
    assert names("0.6.6.post1", {**short, "enable_chunked_prefill": False}, Engine.V1) == []


@pytest.mark.parametrize("version", ["0.8.5.post1", "0.11.0", "0.33.0"])
def test_batched_tokens_below_max_num_seqs_is_refused_in_every_release(version: str) -> None:
    config = {"max_num_batched_tokens": 2048, "max_num_seqs": 4096}
    (violation,) = check_engine_rules(version, config)
    assert violation.message == (
        "max_num_batched_tokens (2048) must be greater than or equal to max_num_seqs (4096)."
    )
    assert names(version, {**config, "max_num_seqs": 2048}) == []


def test_the_source_cited_is_where_the_pinned_release_raises_it() -> None:
    config: dict[str, ConfigValue] = {"max_num_batched_tokens": 16, "max_num_seqs": 32}
    cited = {v: check_engine_rules(v, config)[0].source for v in ("0.9.2", "0.10.2", "0.11.2")}
    assert cited == {
        "0.9.2": "vLLM 0.9.2 vllm/config.py:SchedulerConfig._verify_args",
        "0.10.2": "vLLM 0.10.2 vllm/config/scheduler.py:SchedulerConfig._verify_args",
        "0.11.2": "vLLM 0.11.2 vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len",
    }


def test_partial_prefill_rules_follow_their_releases() -> None:
    partial: dict[str, ConfigValue] = {
        "max_num_partial_prefills": 2,
        "enable_chunked_prefill": False,
        "max_long_partial_prefills": 3,
    }
    # 0.11.0 V1 forces chunked prefill on; 0.20.0 honours the flag; 0.27.0 dropped the feature.
    assert names("0.11.0", partial) == ["long-partial-prefills-within-partial-prefills"]
    assert names("0.20.0", partial) == [
        "partial-prefills-need-chunked-prefill",
        "long-partial-prefills-within-partial-prefills",
    ]
    assert names("0.27.0", partial) == []
    (message,) = [
        v.message
        for v in check_engine_rules("0.20.0", partial)
        if v.rule.startswith("long-partial")
    ]
    assert message == (
        "self.max_long_partial_prefills=3 must be less than or equal to "
        "self.max_num_partial_prefills=2."
    )


def test_long_prefill_threshold_rule_differs_between_releases() -> None:
    config = {"long_prefill_token_threshold": 16384, "max_model_len": 8192}
    # 0.33 checks it always; 0.11 only with concurrent partial prefills.
    assert names("0.33.0", config) == ["long-prefill-threshold-within-max-model-len"]
    assert names("0.11.0", config) == []
    assert names("0.11.0", {**config, "max_num_partial_prefills": 2}) == [
        "long-prefill-threshold-within-max-model-len"
    ]


@pytest.mark.parametrize(
    ("version", "config", "rule"),
    [
        (
            "0.33.0",
            {"max_num_active_seqs": 65, "max_num_seqs": 64},
            "active-seqs-within-max-num-seqs",
        ),
        (
            "0.11.0",
            {"max_long_partial_prefills": 3, "max_num_partial_prefills": 2},
            "long-partial-prefills-within-partial-prefills",
        ),
        (
            "0.33.0",
            {"data_parallel_size_local": 4, "data_parallel_size": 2},
            "local-data-parallel-within-data-parallel",
        ),
        ("0.11.0", {"data_parallel_external_lb": True}, "external-lb-needs-data-parallel"),
        ("0.33.0", {"enable_eplb": True}, "eplb-needs-expert-parallel"),
        (
            "0.33.0",
            {"tensor_parallel_size": 2, "decode_context_parallel_size": 4},
            "tensor-parallel-divisible-by-decode-context-parallel",
        ),
    ],
)
def test_each_rule_fires_on_its_violation(
    version: str, config: dict[str, ConfigValue], rule: str
) -> None:
    assert names(version, config) == [rule]


def test_fixed_configurations_pass() -> None:
    assert names("0.33.0", {"enable_eplb": True, "enable_expert_parallel": True}) == []
    assert names("0.33.0", {"tensor_parallel_size": 4, "decode_context_parallel_size": 2}) == []
    assert names("0.11.0", {"data_parallel_external_lb": True, "data_parallel_size": 2}) == []


def test_unknown_inputs_are_skipped_never_guessed() -> None:
    assert names("0.33.0", {"enable_chunked_prefill": False, "max_num_batched_tokens": 2048}) == []
    assert names("0.33.0", {"max_model_len": -1, **{"max_num_batched_tokens": 1}}) == []


def test_rule_ranges_are_well_formed_and_cite_a_source_inside_them() -> None:
    for rule in RULES:
        since = VllmVersion.parse(rule.since)
        assert rule.until is None or VllmVersion.parse(rule.until) > since, rule.name
        assert all(":" in src and src.startswith("vllm/") for src in rule.sources.values())
        assert any(VllmVersion.parse(v) >= since for v in rule.sources), rule.name
