"""Golden files of every rendered example: reviewed once, then they protect us.

`vllm-operator render` output per example (scenario and vLLM version in the file name).
Regenerate with `UPDATE_GOLDENS=1 .venv/bin/pytest tests/rendering` and review the diff. The real
consumers check the goldens too: the API server (server-side dry-run, e2e/test_render_dryrun.py)
and the pinned vLLM's own argument parser (tests/conformance).
"""

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from vllm_operator.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def golden_path(example: Path) -> Path:
    version = yaml.safe_load(example.read_text())["spec"]["vllm"]["version"]
    return GOLDEN / f"{example.stem}.vllm-{version}.yaml"


def render(example: Path) -> str:
    result = CliRunner().invoke(cli, ["render", str(example)])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_rendered_manifests_match_golden(example: Path) -> None:
    text = render(example)
    path = golden_path(example)
    if os.environ.get("UPDATE_GOLDENS"):
        path.write_text(text)
    assert path.exists(), f"missing golden {path.name}: run UPDATE_GOLDENS=1 pytest tests/rendering"
    assert text == path.read_text(), f"{path.name} changed: review, then UPDATE_GOLDENS=1"


def test_every_golden_belongs_to_an_example() -> None:
    expected = {golden_path(e).name for e in EXAMPLES}
    assert {p.name for p in GOLDEN.glob("*.yaml")} == expected


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_rendered_objects_keep_the_operator_invariants(example: Path) -> None:
    docs = list(yaml.safe_load_all(render(example)))
    kinds = [d["kind"] for d in docs]
    assert kinds.count("Service") == 1 and kinds.count("PodDisruptionBudget") == 1
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["metadata"]["name"] != "vllm"
    for dep in (d for d in docs if d["kind"] == "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert pod["enableServiceLinks"] is False
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
        assert container["command"], "the container command is always explicit"
        assert "--disable-log-stats" not in container["args"]
        assert container["args"][0] == yaml.safe_load(example.read_text())["spec"]["model"]["name"]
        gpus = int(container["resources"]["limits"]["nvidia.com/gpu"])
        tp = int(container["args"][container["args"].index("--tensor-parallel-size") + 1])
        assert gpus == tp
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert ("/dev/shm" in mounts) == (tp > 1)
        assert dep["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == "/health"
