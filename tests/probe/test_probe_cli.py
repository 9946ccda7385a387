"""`vllm-operator probe`: the interface the Helm chart relies on."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.probe.conftest import FIXTURES
from vllm_operator.cli.main import cli


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["probe", *args], env=env)
    return result.exit_code, result.stdout


def test_once_no_publish_prints_the_budget_json() -> None:
    code, out = run(
        "--once",
        "--no-publish",
        "--node-name",
        "gpu-h100-0",
        "--fake-nvml",
        str(FIXTURES / "h100-idle.json"),
    )
    assert code == 0
    budget = json.loads(out)
    assert budget["node"] == "gpu-h100-0"
    assert [g["totalMib"] for g in budget["gpus"]] == [81559, 81559]


def test_node_name_comes_from_the_environment() -> None:
    code, out = run(
        "--once",
        "--no-publish",
        "--fake-nvml",
        str(FIXTURES / "l4-shared.json"),
        env={"NODE_NAME": "gpu-l4-3"},
    )
    assert code == 0 and json.loads(out)["node"] == "gpu-l4-3"


def test_nvml_failure_prints_the_error_budget_and_exits_1() -> None:
    code, out = run(
        "--once",
        "--no-publish",
        "--node-name",
        "n",
        "--fake-nvml",
        str(FIXTURES / "nvml-missing.json"),
    )
    assert code == 1
    assert "NVML Shared Library Not Found" in json.loads(out)["error"]


def test_usage_errors_exit_2() -> None:
    assert run("--once", "--no-publish", env={"NODE_NAME": ""})[0] == 2
    assert run("--once", "--no-publish", "--node-name", "n", "--interval", "0")[0] == 2
    assert run("--node-name", "n", "--metrics-port", "70000")[0] == 2


def test_help_lists_the_documented_options() -> None:
    code, out = run("--help")
    assert code == 0
    for option in (
        "--node-name",
        "--interval",
        "--min-publish-interval",
        "--metrics-port",
        "--once",
        "--kubeconfig",
        "--no-publish",
    ):
        assert option in out
    assert "--fake-nvml" not in out  # test-only, hidden
