"""Golden files of `vllm-operator plan -o yaml` for every example.

Regenerate after an intended change with one command, then review the diff:

    UPDATE_GOLDENS=1 .venv/bin/pytest tests/planning/test_plan_golden.py
"""

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_operator.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
# examples/multinode/ holds multi-node (LeaderWorkerSet) pools: planned here, rendered by
# tests/rendering/test_render_multinode.py, applied by the demo on two extra H100 nodes.
EXAMPLES = sorted((REPO / "examples").glob("*.yaml")) + sorted(
    (REPO / "examples" / "multinode").glob("*.yaml")
)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_plan_output_matches_the_golden_file(example: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", str(example), "-o", "yaml"])
    assert result.exit_code == 0, result.output
    golden = GOLDEN / f"plan-{example.stem}.yaml"
    if os.environ.get("UPDATE_GOLDENS") == "1":
        golden.write_text(result.output, encoding="utf-8")
    assert golden.exists(), f"missing {golden}: run UPDATE_GOLDENS=1 pytest {__file__}"
    assert result.output == golden.read_text(encoding="utf-8")
