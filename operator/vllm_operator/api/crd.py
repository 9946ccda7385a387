"""Generate the VLLMService CustomResourceDefinition from the pydantic models.

The CRD is never hand-edited: `vllm-operator crd` and `make generate` write it, and `make verify`
fails when the committed copy differs. The pydantic JSON schema is turned into a Kubernetes
*structural* schema: `$ref`s are inlined, `Optional[X]` becomes `X` with `nullable: true`, titles
and defaults are dropped (defaults stay in the models and in the descriptions so the API server
never writes them into a user's spec), `patternProperties` become `additionalProperties` plus a CEL
rule on the keys, and JSON-schema numeric exclusives become OpenAPI v3 booleans.
"""

import copy
from typing import Any

import yaml

from vllm_operator.api.service import (
    CATEGORIES,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    VLLMService,
)
from vllm_operator.api.spec import MAX_SERVICE_NAME, SERVICE_NAME_PATTERN

Schema = dict[str, Any]

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name"},
    {"name": "GPU pools", "type": "string", "jsonPath": ".status.gpuPools"},
    {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
    {"name": "Placement", "type": "string", "jsonPath": ".status.placement.summary"},
    {"name": "Plans", "type": "string", "jsonPath": ".status.plans", "priority": 1},
    {"name": "P99 context", "type": "integer", "jsonPath": ".spec.workload.p99ContextTokens"},
    {"name": "Concurrency", "type": "integer", "jsonPath": ".spec.workload.concurrency"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

_DROP_KEYS = {"title", "default", "$defs", "const"}


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Inline a `$ref` (or single-element allOf) into a copy of the referenced schema."""
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        target.update(extra)
        return _resolve(target, defs)
    if "allOf" in node and len(node["allOf"]) == 1:
        target = _resolve(copy.deepcopy(node["allOf"][0]), defs)
        target.update({k: v for k, v in node.items() if k != "allOf"})
        return target
    return node


def _structural(node: Schema, defs: dict[str, Schema]) -> Schema:
    node = _resolve(copy.deepcopy(node), defs)
    if "anyOf" in node:
        options = [_resolve(o, defs) for o in node["anyOf"]]
        non_null = [o for o in options if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(non_null) == 1:
            merged = {**non_null[0], **rest}
            if len(options) > len(non_null):
                merged["nullable"] = True
            node = _resolve(merged, defs)
        else:  # a union of scalars: accept anything, the models validate it
            node = {**rest, "x-kubernetes-preserve-unknown-fields": True}
            node.pop("type", None)
    if "const" in node and "enum" not in node:
        node["enum"] = [node["const"]]
    out: Schema = {}
    for key, value in node.items():
        if key in _DROP_KEYS:
            continue
        if key == "properties":
            out["properties"] = {k: _structural(v, defs) for k, v in value.items()}
        elif key == "items":
            out["items"] = _structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out["additionalProperties"] = _structural(value, defs)
            # additionalProperties: false is implied by pruning and not allowed with properties
        elif key == "patternProperties":
            ((pattern, sub),) = value.items()
            out["additionalProperties"] = _structural(sub, defs)
            rules = out.setdefault("x-kubernetes-validations", [])
            rules.append(
                {
                    "rule": f"self.all(k, k.matches(r'{pattern}'))",
                    "message": f"every key must match {pattern}",
                }
            )
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "x-kubernetes-validations":
            out.setdefault(key, []).extend(value)
        else:
            out[key] = value
    if "properties" in out:
        out.setdefault("type", "object")
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def openapi_schema() -> Schema:
    """The structural openAPIV3Schema of the VLLMService resource."""
    raw = VLLMService.model_json_schema(by_alias=True)
    defs = raw.get("$defs", {})
    schema = _structural(raw, defs)
    props = schema["properties"]
    # The only metadata a CRD schema may restrict is name and generateName (nothing else, not even
    # a description on metadata itself).
    props["metadata"] = {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "maxLength": MAX_SERVICE_NAME,
                "pattern": SERVICE_NAME_PATTERN,
                "description": "A DNS-1035 label of at most 63 characters: it names the Service "
                "and is the value of the instance label of every owned object.",
            }
        },
    }
    props["apiVersion"] = {"type": "string", "description": props["apiVersion"]["description"]}
    props["kind"] = {"type": "string", "description": props["kind"]["description"]}
    schema["required"] = ["spec"]
    return schema


def build_crd() -> Schema:
    """The complete apiextensions.k8s.io/v1 CustomResourceDefinition."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "vllm-operator"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    # scale: `kubectl scale vllm` and autoscalers (HPA, KEDA) write spec.replicas;
                    # under placement.strategy Preferred that is the total the operator splits.
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """YAML dumper with block style, readable multi-line strings and no anchors/aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(obj: Any) -> str:
    """Deterministic YAML (key order as built, block style, wide lines)."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=False)


def render_crd_yaml() -> str:
    """The CRD as the committed YAML file holds it."""
    header = "# Generated by `vllm-operator crd` from operator/vllm_operator/api. Do not edit.\n"
    return header + "---\n" + dump_yaml(build_crd())
