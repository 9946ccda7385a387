"""`vllm-operator run` hands the cluster defaults to the operator (#27: the canary default)."""

from typing import Any

import pytest
from click.testing import CliRunner

from vllm_operator.cli.main import cli
from vllm_operator.handlers import main as handlers_main


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, True),  # a canary for every new plan unless the operator is told otherwise
        (["--no-canary"], {}, False),
        (["--canary"], {}, True),
        ([], {"VLLM_OPERATOR_CANARY": "false"}, False),
        (["--canary"], {"VLLM_OPERATOR_CANARY": "false"}, True),  # the flag wins over the env
    ],
)
def test_the_canary_default_reaches_the_operator(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], expected: bool
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(handlers_main, "run_operator", lambda **kwargs: seen.update(kwargs))
    result = CliRunner().invoke(cli, ["run", "--namespace", "ns", *args], env=env)
    assert result.exit_code == 0, result.output
    assert seen["canary"] is expected


def test_the_workers_default_is_the_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flag's default is written out in cli/run.py (importing the queue would slow every
    command); it must stay the queue's DEFAULT_WORKERS, which the benchmark measured (#32)."""
    from vllm_operator.reconcile.queue import DEFAULT_WORKERS

    seen: dict[str, Any] = {}
    monkeypatch.setattr(handlers_main, "run_operator", lambda **kwargs: seen.update(kwargs))
    result = CliRunner().invoke(cli, ["run", "--namespace", "ns"])
    assert result.exit_code == 0, result.output
    assert seen["workers"] == DEFAULT_WORKERS == 2
    result = CliRunner().invoke(cli, ["run", "--namespace", "ns", "--workers", "8"])
    assert result.exit_code == 0, result.output
    assert seen["workers"] == 8
