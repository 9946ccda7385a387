"""`validate`, `plan` and `render` refuse exactly what the controller refuses, in its words.

Issue #12 item 2: `plan` used to accept versions that `render` refused, and `validate` checked
neither versions nor extra flags. All three now run cli/specs.py, which calls the controller's own
checks; this table compares their verdict with the Feasible condition `Controller.reconcile`
writes for the same object against the in-memory gateway.
"""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.reconcile.test_controller import OfflineHub, cluster, condition, controller, status_of
from vllm_operator.cli.main import cli
from vllm_operator.kube.fake import FakeGateway

VALID: dict[str, Any] = {
    "apiVersion": "serving.vllm-operator.dev/v1alpha1",
    "kind": "VLLMService",
    "metadata": {"name": "chat", "namespace": "default"},
    "spec": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "vllm": {"version": "0.11.0"},
        "workload": {"p99ContextTokens": 4096, "concurrency": 4},
        "placement": {"gpuTypes": ["NVIDIA-L4"]},
    },
}


def _with(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(VALID)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = obj
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return obj


# id -> (object, the condition reason expected); every CLI command must agree with the controller
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "unsupported-version": (_with(spec__vllm__version="0.1.0"), "UnsupportedVersion"),
    "flag-newer-than-pinned-version": (
        _with(spec__vllm__extraArgs={"--aggregate-engine-logging": ""}),
        "InvalidExtraArgs",
    ),
    "flag-owned-by-the-planner": (
        _with(spec__vllm__extraArgs={"--max-num-seqs": "4", "--no-such-flag": "1"}),
        "InvalidExtraArgs",
    ),
    "flag-owned-by-the-pod-contract": (
        _with(spec__vllm__extraArgs={"--host": "127.0.0.1"}),
        "InvalidSpec",
    ),
    "invalid-spec-one-problem": (_with(spec__workload__concurrency=0), "InvalidSpec"),
    "invalid-spec-several-problems": (
        _with(spec__workload__p99ContextTokens=-1, spec__placement__gpuTypes=[], spec__x=1),
        "InvalidSpec",
    ),
    "safety-leaves-no-utilization": (
        _with(spec__safety={"maxGpuMemoryUtilization": 0.5, "memoryHeadroomFraction": 0.5}),
        "InvalidSpec",
    ),
}


def _controller_verdict(obj: dict[str, Any]) -> tuple[str, str]:
    gw: FakeGateway = cluster()
    gw.add(copy.deepcopy(obj))
    controller(gw).reconcile("default", obj["metadata"]["name"])
    feasible = condition(status_of(gw, obj["metadata"]["name"]), "Feasible")
    assert feasible["status"] == "False"
    return feasible["reason"], feasible["message"]


def _cli_verdict(args: list[str], prefix: str) -> tuple[int, str, str]:
    """Exit code, reason and message (the refusal lines joined as the condition joins them)."""
    result = CliRunner().invoke(cli, args)
    lines = [line for line in result.output.splitlines() if line.startswith(prefix)]
    assert lines, result.output
    reasons = {line[len(prefix) :].split(": ", 1)[0] for line in lines}
    assert len(reasons) == 1, lines
    message = "; ".join(line[len(prefix) :].split(": ", 1)[1] for line in lines)
    return result.exit_code, reasons.pop(), message


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI resolves models as the controller does; tests keep the Hub offline."""
    monkeypatch.setattr("vllm_operator.hub.resolver.HubConfigSource", OfflineHub)


@pytest.mark.usefixtures("offline_hub")
@pytest.mark.parametrize("case", list(CASES))
def test_validate_plan_render_and_controller_agree(tmp_path: Path, case: str) -> None:
    obj, reason = CASES[case]
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    prefix = f"{path}[0] chat: "
    expected = _controller_verdict(obj)
    assert expected[0] == reason
    for command in ("validate", "plan", "render"):
        assert _cli_verdict([command, str(path)], prefix) == (1, *expected), command


@pytest.mark.usefixtures("offline_hub")
def test_unknown_model_offline_is_refused_by_plan_and_render_as_the_controller_does(
    tmp_path: Path,
) -> None:
    """`validate` never reaches the Hub; `plan` and `render` resolve the model as the controller
    does and, offline, report its UnknownModel reason and message."""
    obj = _with(spec__model={"name": "acme/not-in-the-catalog"})
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    expected = _controller_verdict(obj)
    assert expected[0] == "UnknownModel" and "offline in tests" in expected[1]
    for command in ("plan", "render"):
        assert _cli_verdict([command, str(path)], f"{path}[0] chat: ") == (1, *expected), command
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0 and result.output.endswith("chat: valid\n")


def test_plan_no_longer_plans_a_version_render_refuses(tmp_path: Path) -> None:
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(_with(spec__vllm__version="0.1.0")))
    result = CliRunner().invoke(cli, ["plan", str(path), "-o", "json"])
    assert result.exit_code == 1 and result.stdout == ""
    assert "UnsupportedVersion: vLLM version '0.1.0' is not in the version catalog" in result.stderr
