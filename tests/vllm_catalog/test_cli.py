"""`vllm-operator flags` and `vllm-operator check-args`."""

import json

from click.testing import CliRunner

from vllm_operator.cli.main import cli


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_check_args_done_when() -> None:
    code, out = run(
        "check-args", "--vllm-version", "0.33.0", "--", "--max-num-on-the-fly-batches", "4"
    )
    assert code == 1
    assert out.strip() == (
        "--max-num-on-the-fly-batches does not exist in any vLLM release; "
        "did you mean --max-num-batched-tokens?"
    )
    code, out = run("check-args", "--vllm-version", "0.33.0", "--", "--swap-space", "8")
    assert (code, out.strip()) == (
        1,
        "--swap-space was removed in 0.18.0; the pinned version is 0.33.0",
    )
    code, _ = run(
        "check-args",
        "--vllm-version",
        "0.33.0",
        "--",
        "--max-num-batched-tokens",
        "8192",
        "--no-enable-prefix-caching",
    )
    assert code == 0


def test_check_args_one_line_per_problem_and_extra_args_mode() -> None:
    code, out = run(
        "check-args", "--vllm-version", "0.33.0", "--", "--swap-space", "8", "--block-size", "x"
    )
    assert code == 1 and len(out.strip().splitlines()) == 2
    code, out = run(
        "check-args", "--vllm-version", "0.33.0", "--extra-args", "--", "--max-num-seqs", "8"
    )
    assert code == 1 and "allowPlannerOverride" in out
    code, _ = run(
        "check-args",
        "--vllm-version",
        "0.33.0",
        "--extra-args",
        "--allow-planner-override",
        "--",
        "--max-num-seqs",
        "8",
    )
    assert code == 0


def test_check_args_unknown_version_is_usage_error() -> None:
    code, out = run("check-args", "--vllm-version", "0.99.0", "--", "--x")
    assert code == 2 and "0.6.0 to 0.33.0" in out


def test_flags_table_and_json() -> None:
    code, out = run("flags", "--vllm-version", "0.33.0", "--grep", "prefix-caching")
    assert code == 0 and "--no-enable-prefix-caching" in out
    code, out = run("flags", "--vllm-version", "0.11.0", "--grep", "block", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["--block-size"]["choices"] == [1, 8, 16, 32, 64, 128]
    code, _ = run("flags", "--vllm-version", "1.0")
    assert code == 2


def test_check_args_values_and_shorthands_issue_19() -> None:
    for argv in (["-O3"], ["-O", "3"], ["-cc.mode=3"]):
        code, out = run("check-args", "--vllm-version", "0.33.0", "--", *argv)
        assert code == 0, out
    code, out = run("check-args", "--vllm-version", "0.11.0", "--", "--max-model-len", "-1")
    assert code == 0, out
    code, out = run(
        "check-args", "--vllm-version", "0.33.0", "--", "--compilation-config", '{"level": 3}'
    )
    assert code == 1
    assert out.startswith(
        '--compilation-config: unknown key "level" in vLLM 0.33.0 (accepted up to 0.17.1; '
        'renamed to "mode"?); accepted keys (CompilationConfig): '
    )
