"""`check-args` also checks vLLM's engine-configuration rules once the flags parse (#19 item 2)."""

from click.testing import CliRunner

from vllm_operator.cli.main import cli


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


CHUNKED_OFF = ("--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048")


def test_chunked_prefill_off_below_max_model_len_is_refused_with_the_rule_and_source() -> None:
    code, out = run(
        "check-args", "--vllm-version", "0.33.0", "--", *CHUNKED_OFF, "--max-model-len", "8k"
    )
    assert code == 1
    assert out.strip() == (
        'vLLM would refuse to start: "max_num_batched_tokens (2048) is smaller than '
        "max_model_len (8000). This effectively limits the maximum sequence length to "
        "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
        'max_num_batched_tokens or decrease max_model_len." '
        "[vLLM 0.33.0 vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len]"
    )


def test_the_same_argv_passes_where_the_rule_cannot_fire_or_inputs_are_unknown() -> None:
    # 0.11 forces chunked prefill on for generative models.
    code, _ = run(
        "check-args", "--vllm-version", "0.11.0", "--", *CHUNKED_OFF, "--max-model-len", "8192"
    )
    assert code == 0
    # Without --max-model-len the model decides it: nothing to check here.
    code, _ = run("check-args", "--vllm-version", "0.33.0", "--", *CHUNKED_OFF)
    assert code == 0


def test_argv_errors_are_reported_before_rules() -> None:
    code, out = run(
        "check-args",
        "--vllm-version",
        "0.33.0",
        "--",
        "--max-num-seqs",
        "x",
        "--max-num-batched-tokens",
        "1",
    )
    assert code == 1 and "vLLM would refuse to start" not in out
