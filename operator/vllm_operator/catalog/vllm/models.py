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


JsonKind = Literal["object", "array", "str", "int", "float", "bool", "null", "any"]


class JsonValueSpec(_Frozen):
    """How a JSON/dict-typed flag's value is parsed by the release.

    ``parse``: ``dataclass`` (pydantic validates the JSON against ``config``, a config class of
    ``VersionCatalog.config_classes``), ``json`` (``json.loads``: anything that is JSON passes the
    parser; ``expects`` is the engine field's type, checked later at startup) or ``json_or_str``
    (a value that looks like ``{...}`` must be JSON, anything else is taken as a string).
    ``human_numbers``: bare ``80m`` / ``1k`` inside the JSON are expanded first (0.33+).
    """

    parse: Literal["dataclass", "json", "json_or_str"]
    config: str | None = Field(
        default=None,
        description="The config class the value is validated against: by the parser "
        "(dataclass), or by the engine at startup for a json dict it builds one from "
        "(--speculative-config -> SpeculativeConfig(**value), keys' '-' read as '_').",
    )
    expects: tuple[JsonKind, ...] = ()
    human_numbers: bool = False


class FieldSpec(_Frozen):
    """One field of a config class: the JSON kinds it accepts, its Literal values, its class,
    its docstring when that says it is deprecated (it names the replacement), and its default
    when that is a plain JSON scalar."""

    types: tuple[JsonKind, ...]
    enum: tuple[Any, ...] | None = None
    enum_ignore_case: bool = Field(
        default=False,
        description="The class's validator looks Enum member names up case-insensitively "
        "(CUDAGraphMode[value.upper()]): a string matches an enum entry in any case.",
    )
    config: str | None = None
    deprecation: str | None = None
    default: Any = None


class ConfigClassSpec(_Frozen):
    """A vLLM config class behind a JSON flag (``--compilation-config`` -> CompilationConfig).

    ``extra`` is its pydantic policy for unknown keys: ``forbid`` rejects them at parse time,
    ``ignore`` drops them silently (older releases).
    """

    module: str
    extra: Literal["forbid", "ignore", "allow"]
    fields: dict[str, FieldSpec]


class ShorthandSpec(_Frozen):
    """An ``-O`` shorthand: rewritten to ``option`` (value as is) or ``option`` + ``{key: v}``."""

    option: str
    key: str | None = None
    with_equals: bool = False
    dot_is_dotted: bool = False
    values: tuple[str, ...] | None = None


class ArgvForms(_Frozen):
    """What the release's FlexibleArgumentParser rewrites before argparse sees the argv.

    ``dotted``: ``--x.a.b=v`` becomes ``--x '{"a": {"b": v}}'`` (``dotted_separate``: also
    ``--x.a v``; ``dotted_short``: also on short aliases, ``-cc.mode=3``; ``dotted_append``:
    ``--x.a+=p,q`` makes a list). ``O_attached``: ``-O3`` / ``-O=3``; ``O_separate``: ``-O 3``
    for the listed values only.
    """

    dotted: bool = False
    dotted_separate: bool = False
    dotted_short: bool = False
    dotted_append: bool = False
    O_attached: ShorthandSpec | None = None
    O_separate: ShorthandSpec | None = None


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
    json_value: JsonValueSpec | None = None


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
    config_classes: dict[str, ConfigClassSpec] = Field(default_factory=dict)
    argv_forms: ArgvForms = ArgvForms()
    metrics: dict[str, MetricSpec]
    metric_labels: dict[str, tuple[str, ...]]


class CatalogIndex(_Frozen):
    """The supported versions, oldest first, and the default for new services (the newest)."""

    schema_: int = Field(alias="schema")
    versions: tuple[str, ...]
    default: str
