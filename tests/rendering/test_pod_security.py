"""Rendered vLLM pods meet the Pod Security Standard "restricted" by default, and the spec can set
the security context (issue #20, defect 11: no capabilities.drop, no runAsNonRoot, no spec field).

The checks are the restricted level's, as https://kubernetes.io/docs/concepts/security/pod-security-standards/
lists them; e2e/test_faults.py asks the real API server's PodSecurity admission as well.
"""

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from vllm_operator.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def deployments(path: Path) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli, ["render", str(path)])
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.output) if d and d["kind"] == "Deployment"]


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What the restricted level (v1.35) refuses in a pod spec."""
    out = []
    psc = pod.get("securityContext") or {}
    for c in pod["containers"] + pod.get("initContainers", []):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation != false")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            out.append(f"{c['name']}: capabilities.drop lacks ALL")
        if set((sc.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: adds capabilities")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            out.append(f"{c['name']}: runAsNonRoot != true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(f"{c['name']}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccompProfile {seccomp}")
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: {kinds}")
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        out.append("host namespaces")
    return out


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_every_example_renders_restricted_pods(example: Path) -> None:
    for dep in deployments(example):
        pod = dep["spec"]["template"]["spec"]
        assert restricted_violations(pod) == []
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert env["HOME"] in mounts  # a writable HOME for an image without that user


def test_spec_sets_the_security_context_field_by_field(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "examples" / "llama-3.1-8b-l4.yaml").read_text())
    doc["spec"]["security"] = {
        "pod": {
            "runAsUser": 2000,
            "fsGroup": 3000,
            "seccompProfile": {"type": "Localhost", "localhostProfile": "vllm.json"},
        },
        "container": {"readOnlyRootFilesystem": True},
    }
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(doc))
    (dep,) = deployments(path)
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 2000,
        "runAsGroup": 1000,
        "fsGroup": 3000,
        "seccompProfile": {"type": "Localhost", "localhostProfile": "vllm.json"},
    }
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert restricted_violations(pod) == []


def test_unknown_security_fields_are_rejected(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "examples" / "llama-3.1-8b-l4.yaml").read_text())
    doc["spec"]["security"] = {"pod": {"hostPID": True}}
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(cli, ["render", str(path)])
    assert result.exit_code != 0
