"""`vllm-operator diagnose`: real logs and Pod objects (JSON and YAML) in, class/phase/action out."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.remediation.logfixtures import LOGS, all_fixtures
from vllm_operator.cli.main import cli


def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["diagnose", *args], input=stdin)
    return result.exit_code, result.output


def pod(reason: str, exit_code: int, ready_changed: str) -> dict[str, Any]:
    """The shape `kubectl get pod -o json` prints for a crash-looping vLLM pod."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "chat-l4-7d9f-abc", "namespace": "llm"},
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Initialized",
                    "status": "True",
                    "lastTransitionTime": "2026-11-22T10:00:00Z",
                },
                {"type": "Ready", "status": "False", "lastTransitionTime": ready_changed},
            ],
            "containerStatuses": [
                {
                    "name": "vllm",
                    "ready": False,
                    "restartCount": 3,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {
                        "terminated": {
                            "reason": reason,
                            "exitCode": exit_code,
                            "startedAt": "2026-11-22T11:00:00Z",
                            "finishedAt": "2026-11-22T11:40:00Z",
                        }
                    },
                }
            ],
        },
    }


@pytest.mark.parametrize("f", all_fixtures(), ids=lambda f: f.name)
def test_every_real_log_as_json(f: Any, tmp_path: Path) -> None:
    code, out = run("--log", str(LOGS / f"{f.name}.log"), "-o", "json")
    assert code == 0
    report = json.loads(out)
    assert set(report) >= {"class", "phase", "numbers", "action"}
    assert report["class"] == f.expect["class"]
    assert report["action"]


def test_oomkilled_pod_as_yaml_is_host_memory(tmp_path: Path) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod("OOMKilled", 137, "2026-11-22T11:40:01Z")))
    code, out = run("--pod", str(path), "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["class"] == "host-oom" and report["phase"] == "runtime"
    assert report["numbers"] == {"exit_code": 137}
    assert (
        "host-memory limit" in report["action"]
        and "GPU arguments are left alone" in report["action"]
    )


def test_pod_history_decides_the_phase_of_a_bare_cuda_oom(tmp_path: Path) -> None:
    log = (LOGS / "v0.11-cuda-oom-hard-wrapped.log").read_text().split("# ---\n", 1)[1]
    never_ready = tmp_path / "pod.json"
    never_ready.write_text(json.dumps(pod("Error", 1, "2026-11-22T10:00:00Z")))
    code, out = run("--pod", str(never_ready), "--log", "-", "-o", "json", stdin=log)
    assert code == 0 and json.loads(out)["class"] == "startup-cuda-oom"
    code, out = run("--log", "-", "-o", "json", stdin=log)
    assert json.loads(out)["class"] == "runtime-cuda-oom" and json.loads(out)["phase"] is None


def test_kubectl_list_of_one_pod(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"kind": "List", "items": [pod("OOMKilled", 137, "x")]}))
    code, out = run("--pod", str(path))
    assert code == 0 and "class:    host-oom" in out and "action:" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give --log FILE"),
        (("--log", "/nonexistent/x.log"), "/nonexistent/x.log: no such file"),
        (("--log", "-", "--pod", "-"), "only one of --log and --pod"),
    ],
)
def test_usage_errors_are_one_line(args: tuple[str, ...], message: str) -> None:
    code, out = run(*args)
    assert code == 2 and message in out and "Traceback" not in out


def test_not_a_pod(tmp_path: Path) -> None:
    path = tmp_path / "svc.yaml"
    path.write_text("kind: Service\nmetadata: {name: x}\n")
    code, out = run("--pod", str(path))
    assert code == 2 and "not a Pod" in out
    path.write_text("{ not yaml: [")
    code, out = run("--pod", str(path))
    assert code == 2 and "invalid YAML at line" in out
