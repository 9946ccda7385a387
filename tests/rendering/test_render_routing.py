"""spec.routing inferencePool (#31): the InferencePool over every pool and the rendered picker.

Goldens in tests/rendering/golden/gateway/ (one per examples/gateway/ spec), also checked by the
real API server's server-side dry-run against the vendored InferencePool CRD
(e2e/test_render_dryrun.py). Regenerate with `UPDATE_GOLDENS=1 .venv/bin/pytest tests/rendering`
and review the diff.
"""

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.vllm.metric_names import metric_names
from vllm_operator.cli.main import cli
from vllm_operator.rendering.routing import (
    EPP_IMAGE,
    EPP_VERSION,
    picker_args,
    picker_name,
    render_routing,
)

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "gateway"
EXAMPLES = sorted((REPO / "examples" / "gateway").glob("*.yaml"))
Obj = dict[str, Any]


def render(example: Path) -> list[Obj]:
    result = CliRunner().invoke(cli, ["render", str(example)])
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.output) if d]


def golden_path(example: Path) -> Path:
    version = yaml.safe_load(example.read_text())["spec"]["vllm"]["version"]
    return GOLDEN / f"{example.stem}.vllm-{version}.yaml"


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _service(spec_routing: Obj, version: str = "0.11.0", name: str = "chat") -> VLLMService:
    return VLLMService.model_validate(
        {
            "apiVersion": "serving.vllm-operator.dev/v1alpha1",
            "kind": "VLLMService",
            "metadata": {"name": name, "namespace": "team-a", "uid": "u-1"},
            "spec": {
                "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                "vllm": {"version": version},
                "workload": {"p99ContextTokens": 8192, "concurrency": 16},
                "placement": {"gpuTypes": ["NVIDIA-L4"]},
                "routing": spec_routing,
            },
        }
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_gateway_examples_render_their_golden(example: Path) -> None:
    result = CliRunner().invoke(cli, ["render", str(example)])
    assert result.exit_code == 0, result.output
    path = golden_path(example)
    if os.environ.get("UPDATE_GOLDENS"):
        path.write_text(result.output)
    assert path.exists(), f"missing golden {path.name}: run UPDATE_GOLDENS=1 pytest tests/rendering"
    assert result.output == path.read_text(), f"{path.name} changed: review, then UPDATE_GOLDENS=1"


def test_every_gateway_golden_belongs_to_an_example() -> None:
    assert {p.name for p in GOLDEN.glob("*.yaml")} == {golden_path(e).name for e in EXAMPLES}


def test_one_inference_pool_selects_the_pods_of_both_gpu_pools_on_the_engine_port() -> None:
    docs = render(REPO / "examples" / "gateway" / "qwen2.5-14b-h100-a100-inference-pool.yaml")
    pools = [d for d in docs if d["kind"] == "InferencePool"]
    assert len(pools) == 1
    spec = pools[0]["spec"]
    workloads = [
        d for d in docs if d["kind"] == "Deployment" and "epp" not in d["metadata"]["name"]
    ]
    assert len(workloads) == 2  # H100 and A100
    for dep in workloads:
        pod = dep["spec"]["template"]
        assert _matches(spec["selector"]["matchLabels"], pod["metadata"]["labels"])
        port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
        assert spec["targetPorts"] == [{"number": port}]
    # ... and nothing else: the picker's own pod is not a model server.
    picker = next(d for d in docs if d["kind"] == "Deployment" and "epp" in d["metadata"]["name"])
    assert not _matches(
        spec["selector"]["matchLabels"], picker["spec"]["template"]["metadata"]["labels"]
    )
    # The Service and the pool select the same pods: a drain (serving=false) leaves both at once.
    service = next(
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "qwen-14b"
    )
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert spec["endpointPickerRef"]["name"] == "qwen-14b-epp"
    picker_service = next(
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "qwen-14b-epp"
    )
    assert spec["endpointPickerRef"]["port"] == {
        "number": picker_service["spec"]["ports"][0]["port"]
    }


def test_multi_node_pool_exposes_only_its_leaders() -> None:
    example = REPO / "examples" / "multinode" / "llama-3.1-405b-h100-2nodes.yaml"
    obj = yaml.safe_load(example.read_text())
    obj["spec"]["routing"] = {"mode": "inferencePool"}
    docs = [d for d in render_multinode(obj) if d]
    pool = next(d for d in docs if d["kind"] == "InferencePool")
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet")
    selector = pool["spec"]["selector"]["matchLabels"]
    template = lws["spec"]["leaderWorkerTemplate"]
    assert _matches(selector, template["leaderTemplate"]["metadata"]["labels"])
    assert not _matches(selector, template["workerTemplate"]["metadata"]["labels"])


def render_multinode(obj: Obj) -> list[Obj]:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"routing-multinode-{os.getpid()}.yaml"
    path.write_text(yaml.safe_dump(obj))
    try:
        return render(path)
    finally:
        path.unlink()


@pytest.mark.parametrize(
    ("version", "kv_metric"),
    [("0.8.5.post1", "vllm:gpu_cache_usage_perc"), ("0.11.0", "vllm:kv_cache_usage_perc")],
)
def test_picker_reads_the_kv_usage_series_the_pinned_release_exports(
    version: str, kv_metric: str
) -> None:
    args = picker_args(_service({"mode": "inferencePool"}, version))
    assert f"--kv-cache-usage-percentage-metric={kv_metric}" in args
    names = metric_names(version)
    assert kv_metric in names.kv_usage
    assert f"--total-queued-requests-metric={names.waiting}" in args
    assert "--pool-name=chat" in args and "--pool-namespace=team-a" in args


def test_picker_gets_its_scorers_as_config_text() -> None:
    """v1.1.0 has no built-in scheduling configuration: without one the picker exits at start
    (found by e2e/test_routing_picker.py). The rendered one is the release chart's default."""
    args = picker_args(_service({"mode": "inferencePool"}))
    (text,) = [a.split("=", 1)[1] for a in args if a.startswith("--config-text=")]
    config = yaml.safe_load(text)  # the picker's loader reads YAML; JSON is YAML
    assert config["kind"] == "EndpointPickerConfig"
    scorers = ["queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"]
    assert [p["type"] for p in config["plugins"]] == scorers
    (profile,) = config["schedulingProfiles"]
    assert [p["pluginRef"] for p in profile["plugins"]] == scorers
    assert "--tracing=false" in args


def test_picker_is_pinned_and_least_privileged() -> None:
    objs = render_routing(_service({"mode": "inferencePool"}))
    kinds = [o["kind"] for o in objs]
    assert kinds == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "InferencePool",
    ]
    role = objs[1]
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
    assert {r for rule in role["rules"] for r in rule["resources"]} == {
        "pods",
        "inferencepools",
        "inferenceobjectives",
    }
    dep = objs[4]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == EPP_IMAGE and EPP_IMAGE.endswith(f":{EPP_VERSION}")
    assert EPP_VERSION.startswith("v") and "latest" not in EPP_IMAGE
    assert container["securityContext"]["runAsNonRoot"] is True
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == objs[0]["metadata"]["name"]
    for obj in objs:
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_named_picker_renders_only_the_pool_and_service_mode_renders_nothing() -> None:
    named = render_routing(
        _service({"mode": "inferencePool", "endpointPickerRef": {"name": "shared", "port": 9100}})
    )
    assert [o["kind"] for o in named] == ["InferencePool"]
    ref = named[0]["spec"]["endpointPickerRef"]
    assert (ref["name"], ref["port"]) == ("shared", {"number": 9100})
    assert render_routing(_service({"mode": "service"})) == []
    assert render_routing(_service({})) == []


def test_picker_name_stays_a_dns_label_for_the_longest_service_name() -> None:
    name = "a" * 63
    picker = picker_name(_service({"mode": "inferencePool"}, name=name))
    assert len(picker) <= 63 and picker != picker_name(_service({}, name="a" * 62))
