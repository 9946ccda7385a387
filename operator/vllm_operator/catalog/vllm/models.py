"""Pydantic models of the generated catalog data files (data/<version>.json, data/index.json).

The files are produced by hack/vllm-catalog/generate.py from each release's own source; these
models only describe them (extra="forbid", so a generator change that adds a field must be
reflected here, and a hand edit with a typo fails to load).
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FlagKind = Literal[
    "value",
    "bool_optional",
    "store_true",
    "store_false",
    "store_const",
    "store_boolean",
    "append",
    "count",
    "custom:LoRAParserAction",
    "custom:PromptAdapterParserAction",
    "custom:DeprecatedLogConfigFileAction",
]
Engine = Literal["v0-only", "v0-default", "v1-default", "v1-only"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FlagSpec(_Frozen):
    """One `vllm serve` flag as that release's argument parser defines it.

    ``kind`` is the argparse action: ``bool_optional`` (BooleanOptionalAction: ``--x`` and the
    ``negatives`` such as ``--no-x``), ``store_true`` (``--x`` only), ``store_boolean`` (vLLM's
    old ``--x`` / ``--x=false``), ``value`` (takes a value). ``choices`` are enforced by argparse;
    ``values`` are the names vLLM checks later, at startup (e.g. ``--quantization`` from 0.9).
    """

    dest: str
    kind: str
    type: str | None = None
    nullable: bool = False
    nargs: int | str | None = None
    aliases: tuple[str, ...] = ()
    negatives: tuple[str, ...] = ()
    default: Any = None
    choices: tuple[Any, ...] | None = None
    values: tuple[str, ...] | None = None
    values_source: str | None = None
    deprecated: bool = False
    deprecation: str | None = None


class MetricSpec(_Frozen):
    """A Prometheus collector named ``vllm:*`` (keyed by its exposed name: counters end _total)."""

    type: Literal["gauge", "counter", "histogram", "summary", "info"]
    engines: tuple[Literal["v0", "v1", "shared"], ...]
    hidden_in: tuple[Literal["v0", "v1", "shared"], ...] = ()
    deprecated: bool = False


class ParserProvenance(_Frozen):
    """How the flags were extracted: the platform pinned and what was replaced by stand-ins."""

    built_by: str
    platform: str
    stand_ins: tuple[str, ...]
    degraded_modules: tuple[str, ...]


class Source(_Frozen):
    wheel: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class VersionCatalog(_Frozen):
    """Everything the operator needs to know about one vLLM release."""

    schema_: int = Field(alias="schema")
    version: str
    source: Source
    engine: Engine
    image: str
    command: tuple[str, ...]
    model_arg: Literal["positional", "--model"]
    parser: ParserProvenance
    flags: dict[str, FlagSpec]
    metrics: dict[str, MetricSpec]
    metric_labels: dict[str, tuple[str, ...]]


class CatalogIndex(_Frozen):
    """The supported versions, oldest first, and the default for new services (the newest)."""

    schema_: int = Field(alias="schema")
    versions: tuple[str, ...]
    default: str
