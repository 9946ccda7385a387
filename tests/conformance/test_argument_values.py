"""Conformance: check-args agrees with the release's REAL parser on VALUES and argv forms.

Names are covered by test_real_vllm_parser.py; this module generates, from the catalog, valid
and invalid values for every JSON/dict-typed flag (config-class keys of each kind, unknown keys,
wrong kinds, bare numbers, ``key=value``), the dotted forms (``--flag.key=v``, ``-cc.key=v``) and
the ``-O`` shorthands, and runs each argv through ``check_argv`` and through the release's own
``vllm serve`` parser (one parser build per release).  Any disagreement fails, except the
documented policy ones listed in STRICTER_THAN_PARSER (see docs/vllm-versions.md).
"""

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conformance.conftest import CONFORMANCE_VERSIONS
from vllm_operator.catalog.vllm import check_argv, load_version
from vllm_operator.catalog.vllm.models import FieldSpec, VersionCatalog

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
VALUE_VERSIONS = (CONFORMANCE_VERSIONS[0], "0.11.0")
"""The default release and one older one (its sources come with `make conformance-setup`)."""

STRICTER_THAN_PARSER = "the engine configuration then fails at start"
"""The one documented policy disagreement on values: a ``json.loads`` flag whose engine field is
a dict (``--limit-mm-per-prompt 3``) passes vLLM's parser and fails when the engine configuration
is built; check-args refuses it up front, with a message that says so."""

CONFIG_VALIDATOR_GAPS: dict[str, set[tuple[str, ...]]] = {"0.33.0": set(), "0.11.0": set()}
"""Well-typed values that a config class's own validators refuse at parse time and check-args
takes: none left. The validators these argvs hit (``kv_connector`` without ``kv_role``,
``proton_*`` without ``profiler="proton"``, ``disable_additional_properties`` without
``backend="guidance"``, ``Field`` ranges) are mirrored in catalog/vllm/config_rules.py, each
citing the validator it quotes. Listed exactly, per release, so that a new gap (a validator
vLLM adds) fails the test (docs/vllm-versions.md)."""

SAMPLE: dict[str, Any] = {
    "bool": True,
    "int": 1,
    "float": 0.5,
    "str": "x",
    "array": [],
    "object": {},
    "null": None,
}
WRONG: dict[str, Any] = {"object": "x", "array": {"zz": 1}}


def _valid_value(field: FieldSpec) -> Any:
    """The field's default when it has a plain one (cross-field validators accept it), else a
    value of its kind."""
    if field.default is not None:
        return field.default
    if field.enum:
        return field.enum[0]
    for kind in ("bool", "int", "str", "float", "object", "array"):
        if kind in field.types:
            return SAMPLE[kind]
    return None


def _wrong_value(field: FieldSpec) -> Any | None:
    """A value of a kind the field certainly does not take (None: every kind may pass)."""
    if "any" in field.types or "str" in field.types:
        return None
    if "object" not in field.types:
        return {"zz": 1}
    if "array" not in field.types and "int" not in field.types:
        return [1, 2]
    return None


def value_argvs(catalog: VersionCatalog) -> list[list[str]]:
    """Valid and invalid values for every JSON/dict-typed flag of the release."""
    out: list[list[str]] = []
    for flag, spec in sorted(catalog.flags.items()):
        jv = spec.json_value
        if jv is None:
            continue
        out += [[flag, "3"], [flag, "zz=1"], [flag, "{not json"], [flag, "{}"]]
        if jv.parse == "json_or_str":
            out += [[flag, "plain-string"], [flag, '{"zz": 1}']]
            continue
        if jv.parse == "json":
            out += [[flag, '{"zz": 1}'], [flag, "[1, 2]"], [flag, '"text"']]
            continue
        cls = catalog.config_classes[jv.config or ""]
        out += [[flag, '{"zz_unknown_key": 1}'], [f"{flag}.zz_unknown_key=1"]]
        for name, field in sorted(cls.fields.items()):
            good = _valid_value(field)
            if good is not None and field.config is None:
                out.append([flag, json.dumps({name: good})])
            bad = _wrong_value(field)
            if bad is not None:
                out.append([flag, json.dumps({name: bad})])
            if field.enum and all(isinstance(e, str) for e in field.enum):
                out.append([flag, json.dumps({name: "zz-not-a-choice"})])
            if field.config is not None:
                out.append([flag, json.dumps({name: {"zz_unknown_nested": 1}})])
        # the dotted forms, on the first scalar key
        scalar = next(
            (n for n, f in sorted(cls.fields.items()) if f.types == ("bool",)),
            None,
        )
        if scalar is not None:
            out += [[f"{flag}.{scalar}=true"], [f"{flag}.{scalar}", "false"]]
            out.append([f"{flag}.{scalar}={{}}"])
        for alias in spec.aliases:
            if not alias.startswith("--") and scalar is not None:
                out += [[f"{alias}.{scalar}=true"], [alias, "{}"]]
    return out


SHORTHANDS: list[list[str]] = [
    ["-O3"],
    ["-O0"],
    ["-O=3"],
    ["-O", "3"],
    ["-O", "2"],
    ["-O", "7"],
    ["-O", "{}"],
    ["-O.level=3"],
    ["-O.mode=3"],
    ["-Odecode"],
    ["-cc.mode=3"],
    ["-cc.level=3"],
    ["-cc", '{"mode": 3}'],
    ["--compilation-config.mode=3"],
    ["--compilation-config.level=3"],
    ["--compilation-config.mode", "3"],
    ["--compilation-config", "3"],
    ["--compilation-config", '{"level": 3}'],
    ["--compilation-config", '{"mode": 3}'],
    ["--compilation-config.pass_config.zz_unknown=1"],
    ["--compilation_config.mode=3"],
    ["--max-model-len", "-1"],
    ["--max-model-len", "32k"],
    ["--max-model-len", "auto"],
    ["--limit-mm-per-prompt", "image=2"],
    ["--limit-mm-per-prompt", '{"image": 2}'],
    ["--override-generation-config", "temperature=0.5"],
    ["--override-generation-config", '{"temperature": 0.5}'],
    ["--hf-overrides", '{"rope_theta": 1000000}'],
    ["--hf-overrides", "{rope_theta: 1}"],
    ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'],
    ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "role": "kv_both"}'],
    ["--kv-events-config", '{"enable_kv_cache_events": true}'],
    ["--kv-events-config", '{"enable_events": true}'],
    ["--structured-outputs-config", '{"backend": "xgrammar"}'],
    ["--structured-outputs-config", '{"backend": "zz-not-a-backend"}'],
    ["--structured-outputs-config", '{"guided_decoding_backend": "xgrammar"}'],
    ["--pooler-config", '{"pooling_type": "MEAN"}'],
    ["--pooler-config", '{"zz_pooling": "MEAN"}'],
    # config-class validators kept and broken (catalog/vllm/config_rules.py)
    [
        "--structured-outputs-config",
        '{"disable_additional_properties": true, "backend": "guidance"}',
    ],
    [
        "--structured-outputs-config",
        '{"disable_additional_properties": true, "backend": "xgrammar"}',
    ],
    [
        "--profiler-config",
        '{"profiler": "torch", "torch_profiler_dir": "/tmp/p", "capture_torch_profiler": true}',
    ],
    [
        "--profiler-config",
        '{"profiler": "proton", "proton_profiler_dir": "/tmp/p", "proton_mode": "x"}',
    ],
    ["--profiler-config", '{"profiler": "cuda", "proton_context": "python"}'],
    ["--ec-transfer-config", '{"ec_connector": "ECExampleConnector", "ec_role": "ec_producer"}'],
    ["--attention-config", '{"sparse_mla_prefill_workspace_factor": 2}'],
    ["--profiler-config", '{"profiler": "torch"}'],
    ["--profiler-config", '{"profiler": "proton"}'],
    ["--profiler-config", '{"torch_profiler_dir": "/tmp/p"}'],
    ["--profiler-config.profiler=torch", "--profiler-config.torch_profiler_dir=/tmp/p"],
    [
        "--profiler-config",
        '{"profiler": "torch", "torch_profiler_dir": "/p", "torch_profiler_activities": ["CPU", "CPU"]}',
    ],
    ["--structured-outputs-config", '{"disable_any_whitespace": true, "backend": "outlines"}'],
    ["--structured-outputs-config", '{"disable_any_whitespace": true}'],
    ["--kernel-config", '{"linear_backend_per_quant": {"nvfp4_w4a16": "humming"}}'],
]


def all_argvs(version: str) -> list[list[str]]:
    catalog = load_version(version)
    seen: set[tuple[str, ...]] = set()
    out = []
    for argv in value_argvs(catalog) + SHORTHANDS:
        full = (MODEL, *argv)
        if full not in seen:
            seen.add(full)
            out.append(list(full))
    return out


@pytest.fixture(scope="module", params=VALUE_VERSIONS)
def outcomes(
    request: pytest.FixtureRequest, real_parser: Callable[[str, list[list[str]]], list[Any]]
) -> tuple[str, list[tuple[list[str], bool, list[str], str]]]:
    """(version, [(argv, real parser accepted, check-args messages, real error)])."""
    version: str = request.param
    argvs = all_argvs(version)
    real = real_parser(version, argvs)
    rows = []
    for argv, result in zip(argvs, real, strict=True):
        messages = [p.message for p in check_argv(version, argv[1:])]
        rows.append((argv, bool(result.ok), messages, result.error[-300:]))
    return version, rows


@pytest.mark.slow
def test_check_args_agrees_with_the_real_parser_on_values(
    outcomes: tuple[str, list[tuple[list[str], bool, list[str], str]]],
) -> None:
    version, rows = outcomes
    assert len(rows) > 150
    disagreements = []
    validator_gaps = set()
    for argv, accepted, messages, error in rows:
        if accepted == (not messages):
            continue
        if accepted and messages and all(STRICTER_THAN_PARSER in m for m in messages):
            continue  # documented policy: refused before the engine would fail at start
        if not accepted and not messages and "validation error for" in error:
            validator_gaps.add(tuple(argv[1:]))
            continue
        disagreements.append((argv[1:], "real: " + ("ok" if accepted else error), messages))
    assert disagreements == [], f"vLLM {version}"
    assert validator_gaps == CONFIG_VALIDATOR_GAPS[version]


@pytest.mark.slow
def test_generated_set_exercises_both_outcomes(
    outcomes: tuple[str, list[tuple[list[str], bool, list[str], str]]],
) -> None:
    """The generated argvs are not all valid or all invalid (the comparison means something)."""
    _, rows = outcomes
    accepted = sum(1 for _, ok, _, _ in rows if ok)
    assert accepted > 40 and len(rows) - accepted > 40


@pytest.mark.slow
def test_every_json_flag_is_exercised(
    outcomes: tuple[str, list[tuple[list[str], bool, list[str], str]]],
) -> None:
    version, rows = outcomes
    catalog = load_version(version)
    json_flags = {f for f, s in catalog.flags.items() if s.json_value is not None}
    assert len(json_flags) >= 15
    touched = {a[1].split(".")[0] for a, *_ in rows}
    assert json_flags <= touched
