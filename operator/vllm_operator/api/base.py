"""Shared pydantic configuration for every API model.

The CRD is generated from these models, so their configuration decides what a user may write:
unknown fields are rejected (`extra="forbid"`), Python attributes are snake_case while the
Kubernetes wire format is camelCase, and both spellings are accepted when constructing objects in
code.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every spec/status model: camelCase on the wire, strict about unknown fields."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_default=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """Serialise as Kubernetes expects it: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
