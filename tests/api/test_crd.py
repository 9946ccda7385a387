"""The generated CRD is structural, complete and identical to the committed files."""

from pathlib import Path
from typing import Any

import yaml

from vllm_operator.api.crd import build_crd, render_crd_yaml
from vllm_operator.cli.crd import CRD_FILENAME

FORBIDDEN_KEYS = {
    "$ref",
    "$defs",
    "anyOf",
    "allOf",
    "oneOf",
    "title",
    "default",
    "const",
    "patternProperties",
}


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in node.get("properties", {}).items():
            out.extend(walk(value, f"{path}.{key}"))
        if isinstance(node.get("items"), dict):
            out.extend(walk(node["items"], f"{path}[]"))
        if isinstance(node.get("additionalProperties"), dict):
            out.extend(walk(node["additionalProperties"], f"{path}{{}}"))
    return out


def schema() -> dict[str, Any]:
    version = build_crd()["spec"]["versions"][0]
    result: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return result


def test_schema_is_structural() -> None:
    for path, node in walk(schema()):
        leftovers = FORBIDDEN_KEYS & node.keys()
        assert not leftovers, f"{path} keeps {leftovers}"
        typed = "type" in node or node.get("x-kubernetes-preserve-unknown-fields") is True
        assert typed, f"{path} has no type"
        if "properties" in node:
            assert node.get("additionalProperties") in (None,), f"{path} mixes properties"


def test_every_spec_field_is_described() -> None:
    for path, node in walk(schema()["properties"]["spec"], "spec"):
        if path.endswith("{}") or path.endswith("[]"):
            continue
        assert node.get("description"), f"{path} has no description (kubectl explain text)"


def test_names_subresource_and_printer_columns() -> None:
    crd = build_crd()
    names = crd["spec"]["names"]
    assert crd["metadata"]["name"] == "vllmservices.serving.vllm-operator.dev"
    assert names["shortNames"] == ["vllms"] and names["kind"] == "VLLMService"
    assert names["categories"]
    version = crd["spec"]["versions"][0]
    # The scale subresource reads paths the schema has: spec.replicas, status.replicas/selector.
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert schema["spec"]["properties"]["replicas"]["type"] == "integer"
    assert schema["status"]["properties"]["replicas"]["type"] == "integer"
    assert schema["status"]["properties"]["selector"]["type"] == "string"
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == [
        "Model",
        "GPU pools",
        "Ready",
        "Placement",
        "Plans",
        "P99 context",
        "Concurrency",
        "Age",
    ]


def test_cross_field_rules_are_cel() -> None:
    spec = schema()["properties"]["spec"]["properties"]
    rules = spec["workload"]["x-kubernetes-validations"]
    assert rules[0]["fieldPath"] == ".p99ContextTokens"
    assert "self.p99ContextTokens <= self.maxContextTokens" in rules[0]["rule"]
    source_rules = spec["model"]["properties"]["source"]["x-kubernetes-validations"]
    assert "has(self.huggingFace) != has(self.pvc)" in source_rules[0]["rule"]


def test_conditions_are_a_map_keyed_by_type() -> None:
    conditions = schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_required_fields() -> None:
    spec = schema()["properties"]["spec"]
    assert set(spec["required"]) == {"model", "vllm", "workload", "placement"}
    workload = spec["properties"]["workload"]
    assert set(workload["required"]) == {"p99ContextTokens", "concurrency"}
    assert spec["properties"]["placement"]["properties"]["gpuTypes"]["minItems"] == 1


def test_committed_crds_match_generator_byte_for_byte(repo: Path) -> None:
    text = render_crd_yaml()
    for folder in ("crds", "charts/vllm-operator/crds"):
        committed = (repo / folder / CRD_FILENAME).read_text(encoding="utf-8")
        assert committed == text, f"{folder} is stale: run `make generate`"


def test_yaml_round_trips() -> None:
    docs = list(yaml.safe_load_all(render_crd_yaml()))
    assert docs == [build_crd()]
