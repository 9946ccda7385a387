"""Read VLLMService manifests from YAML text.

Parsing is pure (text in, models or problems out) so the CLI, the golden tests and the
controller share one path from user input to typed objects: `check_service` is what the API
server would accept (strict types as its JSON decoder sees them: no "16" for an integer, no true
for a number, integers within int64) plus the operator's own rules.
"""

import json
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from vllm_operator.api.errors import Problem, problems_from
from vllm_operator.api.pod_validation import pod_problems
from vllm_operator.api.service import API_VERSION, KIND, VLLMService


@dataclass
class ParsedDocument:
    """One YAML document: a service, or the problems that kept it from being one."""

    index: int
    name: str
    service: VLLMService | None = None
    problems: list[Problem] = field(default_factory=list)
    skipped: str = ""


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_DEPTH = 64
"""Deepest nesting a manifest may have; a VLLMService is about 8 levels deep, and deeper input
(a YAML bomb, 500 nested lists) is refused before it reaches recursive code."""


class ServiceInvalid(Exception):
    """The object is not a VLLMService the operator can act on; `problems` say why, each one with
    its field path."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _shape_problems(obj: Any, path: str = "", depth: int = 0) -> list[Problem]:
    """Integers the API server could not store (int64) and nesting deeper than MAX_DEPTH."""
    if depth > MAX_DEPTH:
        return [Problem(path=path, message=f"nested deeper than {MAX_DEPTH} levels")]
    if isinstance(obj, bool):
        return []
    if isinstance(obj, int) and not INT64_MIN <= obj <= INT64_MAX:
        return [
            Problem(
                path=path,
                value=obj,
                message="integer out of range",
                accepted=f"an integer between {INT64_MIN} and {INT64_MAX} (int64)",
            )
        ]
    items: list[tuple[str | int, Any]] = []
    if isinstance(obj, dict):
        items = [(str(k), v) for k, v in obj.items()]
    elif isinstance(obj, list):
        items = list(enumerate(obj))
    out: list[Problem] = []
    for key, value in items:
        out.extend(_shape_problems(value, _join(path, key), depth + 1))
    return out


def _shape_ok(obj: Any, depth: int = 0) -> bool:
    """Whether `_shape_problems` finds nothing, without building a path per value: the
    controller checks every service on each reconcile and nearly all are fine (#32 no-op
    reconcile); the paths are built only for an object that has a problem."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(obj, dict):
        return all(_shape_ok(v, depth + 1) for v in obj.values())
    if isinstance(obj, list):
        return all(_shape_ok(v, depth + 1) for v in obj)
    if isinstance(obj, int) and not isinstance(obj, bool):
        return INT64_MIN <= obj <= INT64_MAX
    return True


def check_service(obj: Any) -> VLLMService:
    """The one validation path: a decoded object as the operator would accept it.

    Raises ServiceInvalid with every problem. Used by `validate`, `plan`, `render` and the
    controller, so they refuse exactly the same objects.
    """
    problems = [] if _shape_ok(obj) else _shape_problems(obj)
    if problems:
        raise ServiceInvalid(problems)
    try:
        # JSON mode + strict: types as the API server's decoder sees them (YAML timestamps and
        # other non-JSON scalars become strings, as kubectl's YAML-to-JSON conversion does).
        service = VLLMService.model_validate_json(json.dumps(obj, default=str), strict=True)
    except ValidationError as exc:
        raise ServiceInvalid(problems_from(exc, VLLMService)) from exc
    # What the API server or the kubelet would refuse in the rendered pods (api.pod_validation).
    if pod := pod_problems(service.spec):
        raise ServiceInvalid(pod)
    return service


def parse_service(obj: Any) -> VLLMService:
    """Validate one decoded object as a VLLMService (raises ServiceInvalid)."""
    return check_service(obj)


def parse_documents(text: str) -> list[ParsedDocument]:
    """Parse every document of a YAML stream; non-VLLMService documents are marked skipped."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        return [
            ParsedDocument(
                index=0, name="", problems=[Problem(path="", message=f"invalid YAML: {exc}")]
            )
        ]
    return parse_objects(docs)


def parse_objects(docs: list[Any]) -> list[ParsedDocument]:
    """As parse_documents, for documents already decoded (the CLI reads and bounds files first)."""
    out: list[ParsedDocument] = []
    for index, doc in enumerate(d for d in docs if d is not None):
        if not isinstance(doc, dict):
            out.append(
                ParsedDocument(
                    index,
                    "",
                    problems=[
                        Problem(
                            path="",
                            value=None,
                            message="document is not a mapping",
                            accepted="a VLLMService object",
                        )
                    ],
                )
            )
            continue
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        name = str(meta.get("name", "")) if meta else ""
        if doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
            if doc.get("kind") == KIND:
                out.append(
                    ParsedDocument(
                        index,
                        name,
                        problems=[
                            Problem(
                                path="apiVersion",
                                value=doc.get("apiVersion"),
                                message="unsupported apiVersion",
                                accepted=API_VERSION,
                            )
                        ],
                    )
                )
            else:
                out.append(ParsedDocument(index, name, skipped=f"kind {doc.get('kind')!r}"))
            continue
        try:
            out.append(ParsedDocument(index, name, service=check_service(doc)))
        except ServiceInvalid as exc:
            out.append(ParsedDocument(index, name, problems=exc.problems))
    return out
