"""scaling.mode external: the rendered Deployment leaves spec.replicas to the autoscaler.

An applied configuration that holds spec.replicas makes the operator's field manager its owner,
and every apply would then revert the autoscaler (issue #20, defect 2).
"""

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from vllm_operator.cli.main import cli

REPO = Path(__file__).resolve().parents[2]


def rendered_deployments(tmp_path: Path, scaling: dict[str, Any] | None) -> list[dict[str, Any]]:
    obj = yaml.safe_load((REPO / "examples" / "llama-3.1-8b-l4.yaml").read_text())
    obj["spec"]["replicas"] = 3
    if scaling is not None:
        obj["spec"]["scaling"] = scaling
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(obj))
    result = CliRunner().invoke(cli, ["render", str(path)])
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.output) if d and d["kind"] == "Deployment"]


def test_operator_mode_renders_spec_replicas(tmp_path: Path) -> None:
    for mode in (None, {"mode": "operator"}):
        (dep,) = rendered_deployments(tmp_path, mode)
        assert dep["spec"]["replicas"] == 3


def test_external_mode_leaves_replicas_out_and_keeps_the_pod_template(tmp_path: Path) -> None:
    (external,) = rendered_deployments(tmp_path, {"mode": "external"})
    (owned,) = rendered_deployments(tmp_path, None)
    assert "replicas" not in external["spec"]
    # Switching modes changes nothing the pods see: no rollout.
    assert external["spec"]["template"] == owned["spec"]["template"]
    assert external["metadata"] == owned["metadata"]
