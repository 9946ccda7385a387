"""docs/crd-reference.md is generated from the CRD schema (vllm_operator.api.reference) and is
complete: every field, constraint and CEL rule the API server enforces is in it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from click.testing import CliRunner

from tests.packaging.tools import REPO
from vllm_operator.api.crd import build_crd
from vllm_operator.api.reference import constraints, render_reference, type_of
from vllm_operator.cli.main import cli

DOC = REPO / "docs" / "crd-reference.md"


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("properties", {}).values():
        yield from _walk(child)
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"])


def test_committed_reference_is_up_to_date() -> None:
    assert DOC.read_text() == render_reference(build_crd()), "run `make generate`"


def test_cli_prints_the_reference() -> None:
    result = CliRunner().invoke(cli, ["docs", "crd-reference"])
    assert result.exit_code == 0
    assert result.output == render_reference(build_crd())


def test_every_field_rule_and_enum_is_documented() -> None:
    text = render_reference(build_crd())
    for node in _walk(_schema()):
        for name in node.get("properties", {}):
            assert f"`{name}`" in text, name
        for rule in node.get("x-kubernetes-validations", []):
            assert (rule.get("message") or rule["rule"]).split()[0] in text
        for value in node.get("enum", []):
            assert f"`{value}`" in text


def test_links_point_at_sections() -> None:
    text = render_reference(build_crd())
    anchors = {
        "".join(c for c in h.lower() if c.isalnum() or c == "-")
        for h in re.findall(r"^### `([^`]+)`", text, re.M)
    }
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links and links <= anchors


def test_type_names() -> None:
    assert type_of({"type": "array", "items": {"type": "string"}}) == "[]string"
    assert type_of({"type": "object", "additionalProperties": {"type": "integer"}}) == (
        "map[string]integer"
    )
    assert type_of({"x-kubernetes-preserve-unknown-fields": True}) == "any"
    assert type_of({"type": "string", "format": "date-time"}) == "string (date-time)"


def test_constraints_are_spelled_out() -> None:
    node = {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 1.0,
        "nullable": True,
        "x-kubernetes-validations": [{"rule": "self > 0", "message": "positive"}],
    }
    assert constraints(node) == ["> 0", "<= 1", "may be null", "rule: positive"]
    assert constraints({"enum": ["a", "b"], "pattern": "^x$"}) == [
        "one of `a`, `b`",
        "pattern `^x$`",
    ]
    assert constraints({"type": "string", "maxLength": 3, "minLength": 1}) == [
        "min length 1",
        "max length 3",
    ]


def test_table_cells_escape_pipes() -> None:
    crd = build_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["replicas"]["description"] = "a | b"
    assert "a \\| b" in render_reference(crd)
