"""`check-args` also checks vLLM's engine-configuration rules once the flags parse (#19 item 2)."""

from pathlib import Path

import yaml
from click.testing import CliRunner

from vllm_operator.cli.main import cli


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


REPO = Path(__file__).resolve().parents[2]
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


def spec_file(tmp_path: Path, extra: dict[str, str]) -> str:
    doc = yaml.safe_load((REPO / "examples" / "llama-3.1-8b-l4.yaml").read_text())
    doc["spec"]["vllm"]["extraArgs"] = extra
    doc["spec"]["vllm"]["allowPlannerOverride"] = True
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_validate_refuses_extra_args_that_break_a_rule_on_their_own(tmp_path: Path) -> None:
    path = spec_file(
        tmp_path,
        {
            "--no-enable-chunked-prefill": "",
            "--max-model-len": "8192",
            "--max-num-batched-tokens": "4096",
        },
    )
    code, out = run("validate", path)
    assert code == 1
    assert "InvalidEngineConfig: spec.vllm.extraArgs: vLLM would refuse to start" in out
    assert "max_model_len from extraArgs --max-model-len" in out


def test_render_refuses_a_rule_the_plan_and_extra_args_break_together(tmp_path: Path) -> None:
    path = spec_file(tmp_path, {"--no-enable-chunked-prefill": ""})
    result = CliRunner().invoke(cli, ["render", path])
    assert result.exit_code == 1
    assert "NVIDIA-L4: InvalidEngineConfig:" in result.stderr
    assert "max_num_batched_tokens from the plan" in result.stderr
    assert "kind: Deployment" not in result.stdout


def test_render_shows_an_override_once_and_warns_when_the_plan_no_longer_holds(
    tmp_path: Path,
) -> None:
    path = spec_file(tmp_path, {"--max-num-seqs": "8", "--gpu-memory-utilization": "0.85"})
    result = CliRunner().invoke(cli, ["render", path])
    assert result.exit_code == 0
    (dep,) = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args.count("--max-num-seqs") == 1 and args.count("--gpu-memory-utilization") == 1
    assert args[args.index("--max-num-seqs") + 1] == "8"
    assert "PlanOverridden: plan no longer holds" in result.stderr
