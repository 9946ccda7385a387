"""The admission table of issue #12 through the `validate` command itself, as a user runs it on
a YAML file: a refused case exits 1 naming the field path the API server names
(e2e/test_admission.py), an accepted one exits 0. Writing YAML and reading it back also checks
that no case depends on a type YAML cannot carry (a NUL, an integer beyond int64, "16")."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.admission_cases import CASES, Case
from vllm_operator.cli.main import cli


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_validate_command_gives_the_api_servers_verdict(tmp_path: Path, case: Case) -> None:
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(case.build()))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    if case.path is None:
        assert result.exit_code == 0, result.output
        assert result.output.endswith(": valid\n")
        return
    assert result.exit_code == 1, result.output
    assert result.stderr == ""
    problems = [line.split(": InvalidSpec: ", 1)[1] for line in result.stdout.splitlines()]
    assert any(
        p.startswith((f"{case.path}:", f"{case.path}.", f"{case.path}[")) for p in problems
    ), problems
