"""Rules a config class's own Python validators enforce on a JSON flag's value, per release.

Why: the catalog's schema of a JSON/dict-typed flag (keys, kinds, Literal values) catches what
pydantic checks from the field types, but some config classes also run validator code when vLLM
parses the flag (``KVTransferConfig.__post_init__``: ``kv_connector`` without ``kv_role``;
``ProfilerConfig._validate_profiler_config``: ``proton_*`` keys without ``profiler: "proton"``)
or constrain a field (``Field(ge=2)``). Such a value is well typed, passes the schema, and stops
``vllm serve`` at start. This table mirrors those validators, each rule quoting vLLM's message
and citing the file:Class.function (or file:Class.field for a ``Field`` constraint) that raises
it in every release range it claims; tests/vllm_catalog/test_config_rules_sources.py checks every
citation against the cached release sources. Only the rules a single flag's value can break are
here (the engine-wide cross-field rules live in planning/engine_rules.py). Pure.
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vllm_operator.catalog.vllm.loader import version_position
from vllm_operator.catalog.vllm.models import ConfigClassSpec

Obj = Mapping[str, object]


@dataclass(frozen=True)
class ConfigRule:
    """One validator of a config class, mirrored for the releases in [since, until)."""

    name: str
    flag: str
    since: str
    until: str | None
    sources: Mapping[str, str]
    """First release of each citation -> file:Class.function (or file:Class.field)."""
    quote: str
    """vLLM's message with ``{}`` where it interpolates a value (the source test matches the
    literal parts)."""
    check: Callable[[Obj, ConfigClassSpec], tuple[object, ...] | None]
    """The values to put in ``quote`` when the rule is broken, None when it holds."""
    constraint: tuple[str, str, object] | None = None
    """For a ``Field`` constraint: (field, keyword, value), checked in the source as written."""
    at_engine_start: bool = False
    """vLLM's parser keeps the flag's value as a dict and builds the config class only in the
    engine configuration: the parser takes the value, `vllm serve` then fails at start."""

    def applies(self, version: str) -> bool:
        at = version_position(version)
        if at < version_position(self.since):
            return False
        return self.until is None or at < version_position(self.until)

    def where(self, version: str) -> str:
        """file:Class.function where ``version`` raises it."""
        at = version_position(version)
        read = sorted(self.sources, key=version_position)
        return self.sources[([v for v in read if version_position(v) <= at] or read[:1])[-1]]


def _missing_role(
    connector: str, role: str
) -> Callable[[Obj, ConfigClassSpec], tuple[object, ...] | None]:
    def check(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
        if obj.get(connector) is None or obj.get(role) is not None:
            return None
        field = cls.fields.get(role)
        return (tuple(field.enum or ()) if field else (),)

    return check


def _only_with(
    key: str, backend_key: str, backend: str
) -> Callable[[Obj, ConfigClassSpec], tuple[object, ...] | None]:
    """``key`` switched on while ``backend_key`` is not ``backend``."""

    def check(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
        if not obj.get(key) or obj.get(backend_key) == backend:
            return None
        return ()

    return check


def _needs(
    backend_key: str, backend: str, key: str
) -> Callable[[Obj, ConfigClassSpec], tuple[object, ...] | None]:
    """``backend_key`` is ``backend`` while ``key`` is empty or unset."""

    def check(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
        if obj.get(backend_key) != backend or obj.get(key):
            return None
        return ()

    return check


def _one_of(
    key: str, backend_key: str, backends: tuple[str, ...], default: str
) -> Callable[[Obj, ConfigClassSpec], tuple[object, ...] | None]:
    """``key`` switched on while ``backend_key`` (``default`` when unset) is none of ``backends``."""

    def check(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
        if not obj.get(key) or obj.get(backend_key, default) in backends:
            return None
        return ()

    return check


def _required(key: str) -> Callable[[Obj, ConfigClassSpec], tuple[object, ...] | None]:
    def check(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
        return () if obj.get(key) is None else None

    return check


def _duplicate_activities(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
    """Checked by vLLM only once profiler is "torch" (else the rule above fires first)."""
    value = obj.get("torch_profiler_activities")
    if obj.get("profiler") != "torch" or not isinstance(value, list):
        return None
    as_text = [json.dumps(v, sort_keys=True) for v in value]
    return () if len(as_text) != len(set(as_text)) else None


def _activities(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
    if obj.get("torch_profiler_activities") is None or obj.get("profiler") == "torch":
        return None
    return ()


def _engram_thp(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
    """use_thp needs private CPU-offloaded tables: cpu_offload on, dp_shared_memory off."""
    if obj.get("use_thp") is True and (
        obj.get("cpu_offload") is not True or obj.get("dp_shared_memory") is True
    ):
        return ()
    return None


def _engram_shared(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
    if obj.get("dp_shared_memory") is True and obj.get("cpu_offload") is not True:
        return ()
    return None


_PROTON_OPTIONS = (
    "proton_profiler_dir",
    "proton_context",
    "proton_data",
    "proton_backend",
    "proton_mode",
    "proton_hook",
    "proton_output_format",
    "proton_graph_attribution",
)
"""In the order ProfilerConfig._validate_profiler_config lists them (its message keeps it)."""


def _proton(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
    if obj.get("profiler") == "proton":
        return None
    set_ = [
        name
        for name in _PROTON_OPTIONS
        if name in obj and name in cls.fields and obj[name] != cls.fields[name].default
    ]
    return (", ".join(set_),) if set_ else None


def _at_least(key: str, bound: int) -> Callable[[Obj, ConfigClassSpec], tuple[object, ...] | None]:
    def check(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value >= bound:
            return None
        return (value,)

    return check


def _non_empty(key: str) -> Callable[[Obj, ConfigClassSpec], tuple[object, ...] | None]:
    def check(obj: Obj, cls: ConfigClassSpec) -> tuple[object, ...] | None:
        value = obj.get(key)
        if not isinstance(value, dict | list) or len(value) >= 1:
            return None
        return ()

    return check


_KV_OLD = {
    "0.9.0": "vllm/config.py:KVTransferConfig.__post_init__",
    "0.10.1.1": "vllm/config/__init__.py:KVTransferConfig.__post_init__",
    "0.10.2": "vllm/config/kv_transfer.py:KVTransferConfig.__post_init__",
}
_DECODING = {
    "0.11.0": "vllm/config/structured_outputs.py:StructuredOutputsConfig.__post_init__",
    "0.11.2": "vllm/config/structured_outputs.py:"
    "StructuredOutputsConfig._validate_structured_output_config",
}
_PROFILER = "vllm/config/profiler.py:ProfilerConfig._validate_profiler_config"
_ENGRAM = "vllm/config/engram.py:EngramConfig._validate_shared_memory"

# Ranges read from every catalog release's source (the flag's JSON schema starts at the first
# release listed; tests/vllm_catalog/test_config_rules_sources.py checks each citation).
RULES: tuple[ConfigRule, ...] = (
    ConfigRule(
        name="kv-connector-needs-kv-role",
        flag="--kv-transfer-config",
        since="0.9.0",
        until="0.11.2",
        sources=_KV_OLD,
        quote="Please specify kv_disagg_role when kv_connector is set, supported roles are {}",
        check=_missing_role("kv_connector", "kv_role"),
    ),
    ConfigRule(
        name="kv-connector-needs-kv-role",
        flag="--kv-transfer-config",
        since="0.11.2",
        until=None,
        sources={"0.11.2": "vllm/config/kv_transfer.py:KVTransferConfig.__post_init__"},
        quote="Please specify kv_role when kv_connector is set, supported roles are {}",
        check=_missing_role("kv_connector", "kv_role"),
    ),
    ConfigRule(
        name="ec-connector-needs-ec-role",
        flag="--ec-transfer-config",
        since="0.11.2",
        until=None,
        sources={"0.11.2": "vllm/config/ec_transfer.py:ECTransferConfig.__post_init__"},
        quote="Please specify ec_role when ec_connector is set, supported roles are {}",
        check=_missing_role("ec_connector", "ec_role"),
    ),
    ConfigRule(
        name="disable-additional-properties-needs-guidance",
        flag="--structured-outputs-config",
        since="0.11.0",
        until=None,
        sources=_DECODING,
        quote="disable_additional_properties is only supported for the guidance backend.",
        check=_only_with("disable_additional_properties", "backend", "guidance"),
    ),
    ConfigRule(
        name="disable-any-whitespace-needs-xgrammar-or-guidance",
        flag="--structured-outputs-config",
        since="0.11.0",
        until=None,
        sources=_DECODING,
        quote="disable_any_whitespace is only supported for xgrammar and guidance backends.",
        check=_one_of("disable_any_whitespace", "backend", ("xgrammar", "guidance"), "auto"),
    ),
    # A KV transfer config without a connector: 0.32.0's engine configuration asks the connector
    # factory whether it supports the hybrid KV cache manager (VllmConfig, whenever
    # kv_transfer_config is set), which raises without kv_connector (found by the generative
    # oracle through vLLM 0.32.0; same in 0.33.0; older releases not claimed).
    ConfigRule(
        name="kv-transfer-config-needs-kv-connector",
        flag="--kv-transfer-config",
        since="0.32.0",
        until=None,
        sources={
            "0.32.0": "vllm/distributed/kv_transfer/kv_connector/factory.py:"
            "KVConnectorFactory.get_connector_class"
        },
        quote="Connector name is not set in KVTransferConfig",
        check=_required("kv_connector"),
        at_engine_start=True,
    ),
    # EngramConfig (--engram-config, from 0.30.0; use_thp from 0.31.0): checked in the 0.32.0
    # and 0.33.0 sources (the generative oracle found the first through vLLM 0.32.0's engine
    # configuration); 0.30.0/0.31.0 are not claimed until their sources are read.
    ConfigRule(
        name="engram-shared-memory-needs-cpu-offload",
        flag="--engram-config",
        since="0.32.0",
        until=None,
        sources={"0.32.0": _ENGRAM},
        quote="dp_shared_memory requires cpu_offload=True",
        check=_engram_shared,
        at_engine_start=True,
    ),
    ConfigRule(
        name="engram-thp-needs-private-cpu-offload",
        flag="--engram-config",
        since="0.32.0",
        until=None,
        sources={"0.32.0": _ENGRAM},
        quote="use_thp requires cpu_offload=True and dp_shared_memory=False",
        check=_engram_thp,
        at_engine_start=True,
    ),
    # ProfilerConfig: from 0.16.0 (until 0.15.1 environment variables could set profiler and
    # torch_profiler_dir, so a value alone did not decide these rules).
    ConfigRule(
        name="torch-profiler-activities-need-torch",
        flag="--profiler-config",
        since="0.31.0",
        until=None,
        sources={"0.31.0": _PROFILER},
        quote="torch_profiler_activities is only applicable when profiler is set to 'torch'",
        check=_activities,
    ),
    ConfigRule(
        name="torch-profiler-activities-without-duplicates",
        flag="--profiler-config",
        since="0.31.0",
        until=None,
        sources={"0.31.0": _PROFILER},
        quote="torch_profiler_activities must not contain duplicates",
        check=_duplicate_activities,
    ),
    ConfigRule(
        name="torch-profiler-dir-needs-torch",
        flag="--profiler-config",
        since="0.16.0",
        until=None,
        sources={"0.16.0": _PROFILER},
        quote="torch_profiler_dir is only applicable when profiler is set to 'torch'",
        check=_only_with("torch_profiler_dir", "profiler", "torch"),
    ),
    ConfigRule(
        name="torch-profiler-needs-dir",
        flag="--profiler-config",
        since="0.16.0",
        until=None,
        sources={"0.16.0": _PROFILER},
        quote="torch_profiler_dir must be set when profiler is 'torch'",
        check=_needs("profiler", "torch", "torch_profiler_dir"),
    ),
    ConfigRule(
        name="capture-torch-profiler-needs-torch",
        flag="--profiler-config",
        since="0.26.0",
        until=None,
        sources={"0.26.0": _PROFILER},
        quote="capture_torch_profiler is only applicable when profiler is set to 'torch'",
        check=_only_with("capture_torch_profiler", "profiler", "torch"),
    ),
    ConfigRule(
        name="proton-options-need-proton",
        flag="--profiler-config",
        since="0.28.0",
        until=None,
        sources={"0.28.0": _PROFILER},
        quote="{} only applicable when profiler is set to 'proton'",
        check=_proton,
    ),
    ConfigRule(
        name="proton-profiler-needs-dir",
        flag="--profiler-config",
        since="0.28.0",
        until=None,
        sources={"0.28.0": _PROFILER},
        quote="proton_profiler_dir must be set when profiler is 'proton'",
        check=_needs("profiler", "proton", "proton_profiler_dir"),
    ),
    ConfigRule(
        name="sparse-mla-prefill-workspace-factor-at-least-2",
        flag="--attention-config",
        since="0.32.0",
        until=None,
        sources={
            "0.32.0": "vllm/config/attention.py:AttentionConfig.sparse_mla_prefill_workspace_factor"
        },
        quote="sparse_mla_prefill_workspace_factor must be >= 2 (Field(ge=2)), got {}",
        check=_at_least("sparse_mla_prefill_workspace_factor", 2),
        constraint=("sparse_mla_prefill_workspace_factor", "ge", 2),
    ),
    ConfigRule(
        name="linear-backend-per-quant-not-empty",
        flag="--kernel-config",
        since="0.30.0",
        until=None,
        sources={"0.30.0": "vllm/config/kernel.py:KernelConfig.linear_backend_per_quant"},
        quote="linear_backend_per_quant needs at least 1 entry (Field(min_length=1))",
        check=_non_empty("linear_backend_per_quant"),
        constraint=("linear_backend_per_quant", "min_length", 1),
    ),
)
"""Every mirrored validator, grouped by config class; all broken ones are reported (vLLM stops at
the first it reaches)."""


def config_rule_problems(flag: str, version: str, cls: ConfigClassSpec, obj: Obj) -> list[str]:
    """The messages of the rules of ``version`` that ``obj`` (``flag``'s JSON object) breaks."""
    out = []
    for rule in RULES:
        if rule.flag != flag or not rule.applies(version):
            continue
        values = rule.check(obj, cls)
        if values is None:
            continue
        message = rule.quote.format(*values)
        when = (
            " (the parser takes it, the engine configuration then fails at start)"
            if rule.at_engine_start
            else ""
        )
        out.append(
            f'{flag}: vLLM {version} refuses this value: "{message}" [{rule.where(version)}]' + when
        )
    return out


__all__ = ["RULES", "ConfigRule", "config_rule_problems"]
