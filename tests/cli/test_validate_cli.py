"""`vllm-operator validate` and `crd` as a user runs them."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_operator import __version__
from vllm_operator.api.crd import render_crd_yaml
from vllm_operator.cli.main import cli


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_version() -> None:
    code, out = run("--version")
    assert code == 0 and __version__ in out


def test_crd_prints_the_generated_crd() -> None:
    code, out = run("crd")
    assert code == 0 and out == render_crd_yaml()


def test_every_example_validates(repo: Path) -> None:
    examples = sorted(str(p) for p in (repo / "examples").glob("*.yaml"))
    assert len(examples) >= 4
    code, out = run("validate", *examples)
    assert code == 0, out
    assert out.count(": valid") == len(examples)


def test_invalid_example_fails_with_field_path(repo: Path) -> None:
    code, out = run("validate", str(repo / "examples/invalid/p99-above-max.yaml"))
    assert code == 1
    assert "spec.workload.p99ContextTokens" in out


BAD = """\
apiVersion: serving.vllm-operator.dev/v1alpha1
kind: VLLMService
metadata: {{name: bad}}
spec:
  model: {{name: m}}
  vllm: {{version: "{version}"}}
  workload: {{p99ContextTokens: {p99}, concurrency: 2, turbo: true}}
  placement: {{gpuTypes: []}}
"""


def test_one_line_per_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD.format(version="latest", p99=-1))
    code, out = run("validate", str(path))
    assert code == 1
    lines = out.strip().splitlines()
    assert len(lines) == 4
    for field in (
        "spec.vllm.version",
        "spec.workload.p99ContextTokens",
        "spec.workload.turbo",
        "spec.placement.gpuTypes",
    ):
        assert sum(field in line for line in lines) == 1, out


def test_non_service_documents_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    code, out = run("validate", str(path))
    assert code == 0 and "skipped" in out


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: [unclosed", "invalid YAML at line 2, column 1: did not find expected ',' or ']'"),
        ("- just\n- a list\n", "document 0 is a list, not a mapping (a Kubernetes object)"),
    ],
)
def test_garbage_is_one_line_and_exit_2(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "garbage.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2
    assert result.stdout == "" and result.stderr == f"Error: {path}: {problem}\n"


def test_an_unreadable_file_does_not_stop_the_others(tmp_path: Path, repo: Path) -> None:
    example = str(repo / "examples/llama-3.1-8b-l4.yaml")
    result = CliRunner().invoke(cli, ["validate", str(tmp_path / "nope.yaml"), example])
    assert result.exit_code == 2
    assert result.stderr == f"Error: {tmp_path / 'nope.yaml'}: no such file\n"
    assert result.stdout.strip().endswith(": valid")
