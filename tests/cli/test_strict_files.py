"""The CLI reads files as kubectl's strict mode does (issue #26 item 5).

Duplicate keys are refused (tests/cli/test_bad_files.py has the one-line error for every command);
here: `kind: List` / `VLLMServiceList` items are judged one by one, and two documents naming one
namespace/name are refused, by validate and by render (which would print duplicate objects).
"""

from pathlib import Path

import yaml
from click.testing import CliRunner

from vllm_operator.cli.main import cli

SERVICE = """\
apiVersion: serving.vllm-operator.dev/v1alpha1
kind: VLLMService
metadata: {{name: {name}{namespace}}}
spec:
  model:
    name: Qwen/Qwen2.5-7B-Instruct
    architecture: {{numHiddenLayers: 28, hiddenSize: 3584, numAttentionHeads: 28,
      numKeyValueHeads: 4, vocabSize: 152064, maxPositionEmbeddings: 32768}}
  vllm: {{version: 0.11.0}}
  workload: {{p99ContextTokens: 4096, concurrency: {concurrency}}}
  placement: {{gpuTypes: [NVIDIA-L4]}}
"""


def service(name: str, namespace: str = "", concurrency: int = 4) -> dict[str, object]:
    ns = f", namespace: {namespace}" if namespace else ""
    loaded = yaml.safe_load(SERVICE.format(name=name, namespace=ns, concurrency=concurrency))
    assert isinstance(loaded, dict)
    return loaded


def write(tmp_path: Path, *docs: object) -> Path:
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump_all(list(docs)))
    return path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def test_list_items_are_judged(tmp_path: Path) -> None:
    bad = service("b")
    bad["spec"]["workload"]["concurrency"] = 0  # type: ignore[index]
    for kind, api in (("List", "v1"), ("VLLMServiceList", "serving.vllm-operator.dev/v1alpha1")):
        path = write(tmp_path, {"apiVersion": api, "kind": kind, "items": [service("a"), bad]})
        code, out, _ = run("validate", str(path))
        assert code == 1, out
        assert f"{path}[0] a: valid" in out
        assert f"{path}[1] b: InvalidSpec: spec.workload.concurrency" in out


def test_list_items_are_rendered(tmp_path: Path) -> None:
    path = write(tmp_path, {"apiVersion": "v1", "kind": "List", "items": [service("a")]})
    code, out, err = run("render", str(path))
    assert code == 0, err
    assert any(d["kind"] == "Deployment" for d in yaml.safe_load_all(out) if isinstance(d, dict)), (
        out
    )


def test_same_name_twice_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, service("a"), service("a", concurrency=8), service("a", "other"))
    code, out, _ = run("validate", str(path))
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"{path}[0] a: valid"
    assert lines[1].startswith(f"{path}[1] a: InvalidSpec: metadata.name: 'a'")
    assert "already defined by document 0" in lines[1]
    assert lines[2] == f"{path}[2] a: valid"  # another namespace: another object
    code, out, err = run("render", str(path))
    assert code == 1 and "already defined by document 0" in err + out
