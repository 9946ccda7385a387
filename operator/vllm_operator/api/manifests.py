"""Read VLLMService manifests from YAML text.

Parsing is pure (text in, models or problems out) so the CLI, the golden tests and the
controller share one path from user input to typed objects.
"""

from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from vllm_operator.api.errors import Problem, problems_from
from vllm_operator.api.service import API_VERSION, KIND, VLLMService


@dataclass
class ParsedDocument:
    """One YAML document: a service, or the problems that kept it from being one."""

    index: int
    name: str
    service: VLLMService | None = None
    problems: list[Problem] = field(default_factory=list)
    skipped: str = ""


def parse_service(obj: Any) -> VLLMService:
    """Validate one decoded object as a VLLMService (raises pydantic.ValidationError)."""
    return VLLMService.model_validate(obj)


def parse_documents(text: str) -> list[ParsedDocument]:
    """Parse every document of a YAML stream; non-VLLMService documents are marked skipped."""
    out: list[ParsedDocument] = []
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        return [
            ParsedDocument(
                index=0, name="", problems=[Problem(path="", message=f"invalid YAML: {exc}")]
            )
        ]
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
            out.append(ParsedDocument(index, name, service=parse_service(doc)))
        except ValidationError as exc:
            out.append(ParsedDocument(index, name, problems=problems_from(exc, VLLMService)))
    return out
