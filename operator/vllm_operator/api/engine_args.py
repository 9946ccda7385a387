"""The engine arguments the planner owns, typed, and the fields remediation may override.

Why here (api) and not in planning: the planner writes these arguments, the status stores them,
remediation reads them back from status and the renderer turns them into argv. Living below all
three keeps planning, remediation and rendering independent of each other. The status keeps its
wire map (`status.pools[].plan.engineArgs`, an open map in the CRD); `PlannedArgs.to_wire` writes
it and `PlannedArgs.from_wire` parses it, nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

EngineArgValue = int | float | bool | str | None


class OverrideField(StrEnum):
    """What a remediation override may change (status.overrides[].field)."""

    MAX_NUM_BATCHED_TOKENS = "max_num_batched_tokens"
    MAX_NUM_SEQS = "max_num_seqs"
    GPU_MEMORY_UTILIZATION = "gpu_memory_utilization"
    MAX_MODEL_LEN = "max_model_len"
    ENABLE_PREFIX_CACHING = "enable_prefix_caching"
    REPLICAS = "replicas"
    """Not an engine argument: the pool's Deployment replicas (scale-out under KV pressure)."""
    HOST_MEMORY_GIB = "host_memory_gib"
    """Not an engine argument: the vLLM container's memory request and limit in GiB (raised after
    an OOMKilled container: host RAM, which no GPU argument can help)."""


NON_ENGINE_FIELDS = frozenset({OverrideField.REPLICAS, OverrideField.HOST_MEMORY_GIB})
"""Override fields that are not vLLM engine arguments (never rendered into argv)."""

RAISED_FIELDS = frozenset({OverrideField.HOST_MEMORY_GIB})
"""Fields remediation only ever raises: an override below a (new, higher) plan is moot."""


LOWERED_FIELDS = frozenset(
    {
        OverrideField.MAX_NUM_BATCHED_TOKENS,
        OverrideField.MAX_NUM_SEQS,
        OverrideField.GPU_MEMORY_UTILIZATION,
        OverrideField.MAX_MODEL_LEN,
    }
)
"""Fields remediation only ever lowers: an override above a (new, lower) plan is moot."""


class PlannedArgs(BaseModel):
    """vLLM engine arguments of one pool by vLLM field name; None means the version's default.

    Field order is the rendered argv order (golden files depend on it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tensor_parallel_size: int = Field(ge=1)
    pipeline_parallel_size: int | None = Field(
        default=None,
        ge=1,
        description="Pipeline stages, one per node of a multi-node replica (LeaderWorkerSet "
        "group size); None: one node, not rendered.",
    )
    gpu_memory_utilization: float = Field(gt=0, le=1)
    max_model_len: int = Field(ge=1)
    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    block_size: int | None = Field(default=None, ge=1)
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False

    def rendered(self) -> dict[str, EngineArgValue]:
        """Every argument in argv order, None included (the renderer leaves those out)."""
        return self.model_dump()

    def to_wire(self) -> dict[str, EngineArgValue]:
        """The status map: None values left out, as the API server would drop them."""
        return self.model_dump(exclude_none=True)

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> PlannedArgs:
        """Parse the status map (keys this version does not plan are ignored, not fatal)."""
        return cls.model_validate({k: v for k, v in wire.items() if k in cls.model_fields})

    def value(self, field: OverrideField) -> EngineArgValue:
        """The planned value of an overridable engine field (REPLICAS, HOST_MEMORY_GIB are not)."""
        if field in NON_ENGINE_FIELDS:
            raise ValueError(f"{field.value} is not an engine argument")
        result: EngineArgValue = getattr(self, field.value)
        return result

    def with_values(self, values: Mapping[OverrideField, Any]) -> PlannedArgs:
        """A copy with engine fields replaced, validated (an override of the wrong type fails)."""
        update = {f.value: v for f, v in values.items() if f not in NON_ENGINE_FIELDS}
        return PlannedArgs.model_validate({**self.model_dump(), **update})


def _value_type(field: OverrideField) -> TypeAdapter[Any]:
    if field in NON_ENGINE_FIELDS:
        return TypeAdapter(int)
    annotation = PlannedArgs.model_fields[field.value].annotation
    assert annotation is not None
    return TypeAdapter(annotation)


_VALUE_TYPES = {f: _value_type(f) for f in OverrideField}


def override_value(field: OverrideField, raw: Any) -> EngineArgValue:
    """An override's wire value as its field's type (int, float or bool); ValueError otherwise."""
    result: EngineArgValue = _VALUE_TYPES[field].validate_python(raw)
    return result


__all__ = [
    "LOWERED_FIELDS",
    "NON_ENGINE_FIELDS",
    "RAISED_FIELDS",
    "EngineArgValue",
    "OverrideField",
    "PlannedArgs",
    "override_value",
]
