"""Turn pydantic validation errors into one-line problems a user can act on.

Each problem names the field path in the wire spelling (spec.workload.p99ContextTokens), the
offending value and what would be accepted. The same text is used by `vllm-operator validate`
and by the controller's conditions, so kubectl users and CLI users read the same words.
"""

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from vllm_operator.api.base import ApiModel


class FieldProblem(ValueError):
    """A cross-field rule broken at `subpath` below the model whose validator raises it.

    Why: a pydantic model validator reports at the model's own location, while the CRD's CEL rule
    names the offending field (its fieldPath). Raising this keeps `validate` and the API server on
    the same path, e.g. spec.remediation.maxReplicas rather than spec.
    """

    def __init__(self, subpath: str, message: str) -> None:
        super().__init__(message)
        self.subpath = subpath
        self.message = message


class Problem(ApiModel):
    """One thing wrong with an object."""

    path: str
    value: Any = None
    message: str
    accepted: str = ""

    def __str__(self) -> str:
        text = f"{self.path or '<root>'}: {self.message}"
        if self.value is not None:
            text += f" (got {self.value!r})"
        if self.accepted:
            text += f"; accepted: {self.accepted}"
        return text


def _path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _fields_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The wire names of the fields accepted at `loc` (for unknown-field errors)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (
            isinstance(current, type) and issubclass(current, BaseModel)
        ):
            continue
        field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            break
        current = _innermost_model(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _innermost_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _innermost_model(arg)
        if found is not None:
            return found
    return None


def _accepted(error: dict[str, Any], model: type[BaseModel]) -> str:
    kind = str(error["type"])
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "a value is required"
    if kind == "extra_forbidden":
        fields = _fields_at(model, error["loc"][:-1])
        return "one of " + ", ".join(sorted(fields)) if fields else "no extra fields"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {
            "greater_than_equal": ">=",
            "greater_than": ">",
            "less_than_equal": "<=",
            "less_than": "<",
        }[kind]
        bound = next(iter(ctx.values()), "")
        return f"a number {op} {bound}"
    if kind in ("literal_error", "enum"):
        return str(ctx.get("expected", ""))
    if kind == "string_pattern_mismatch":
        return f"a string matching {ctx.get('pattern', '')}"
    if kind in ("too_short", "string_too_short"):
        return f"at least {ctx.get('min_length', 1)} item(s)/character(s)"
    if kind in ("too_long", "string_too_long"):
        return f"at most {ctx.get('max_length', '')} item(s)/character(s)"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return str(kind).split("_")[0]
    return ""


def problems_from(
    error: ValidationError, model: type[BaseModel], prefix: str = ""
) -> list[Problem]:
    """Convert a pydantic ValidationError raised for `model` into Problems."""
    out: list[Problem] = []
    for item in error.errors(include_url=False):
        loc = list(item["loc"])
        message = str(item["msg"])
        if message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        value = None if item["type"] in ("missing", "extra_forbidden") else item.get("input")
        path = _path(loc)
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, FieldProblem):
            message, value = cause.message, None
            sep = "" if not path or cause.subpath.startswith("[") else "."
            path = f"{path}{sep}{cause.subpath}"
        if isinstance(value, dict | list):
            value = None
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        out.append(
            Problem(path=path, value=value, message=message, accepted=_accepted(dict(item), model))
        )
    return out
