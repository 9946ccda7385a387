"""Nested JSON values typed from the release's own config classes (issue #26 item 3).

The introspector (hack/vllm-catalog/vllm_introspect.py) records every config-class field's type:
Literals and Python Enums become `enum` (an Enum's member values, and its names where the class's
own validator looks names up, case-insensitively when it upper-cases them), pathlib paths are
strings, and a JSON flag whose dict the engine turns into a config class later
(`--speculative-config` -> SpeculativeConfig) carries that class. "any" is left only where vLLM
itself has no JSON spelling for the field (objects the engine fills in, stand-ins of heavy
dependencies), listed here with the reason.
"""

import pytest

from tests.vllm_catalog.test_validate import messages
from vllm_operator.catalog.vllm import load_version

REGENERATED = ("0.33.0", "0.32.0", "0.11.0")

# (class, field): why the catalog cannot spell the value in JSON.
STILL_ANY = {
    # Filled in by the engine itself (create_speculative_config), never by the user's JSON.
    ("SpeculativeConfig", "draft_model_config"): "a ModelConfig object the engine builds",
    ("SpeculativeConfig", "target_model_config"): "a ModelConfig object the engine passes",
    ("SpeculativeConfig", "draft_parallel_config"): "a ParallelConfig object the engine builds",
    ("SpeculativeConfig", "target_parallel_config"): "a ParallelConfig object the engine passes",
    ("ParallelConfig", "placement_group"): "a Ray PlacementGroup object",
    ("ParallelConfig", "ray_runtime_env"): "a Ray RuntimeEnv object",
    ("ParallelConfig", "distributed_executor_backend"): "or an Executor class object",
    # Reached through SpeculativeConfig.draft_model_config (0.2x+), also engine-built.
    ("ModelConfig", "hf_overrides"): "a dict or a Python callable",
    ("LoadConfig", "model_loader_extra_config"): "a dict or a TensorizerConfig object",
    ("ModelConfig", "dtype"): "a dtype name or a torch.dtype (a stand-in here)",
    # Types from torch and other heavy dependencies, which the introspector replaces by stand-ins.
    ("QuantKey", "dtype"): "torch.dtype",
    ("QuantKey", "scale2"): "a ScaleDesc object or None (kernel plumbing)",
    ("ScaleDesc", "dtype"): "torch.dtype",
    ("ScaleDesc", "group_shape"): "a GroupShape named tuple",
    ("ScaleDesc", "static"): "kernel plumbing",
}


@pytest.mark.parametrize("version", REGENERATED)
def test_no_field_stays_any_where_vllm_has_a_json_type(version: str) -> None:
    classes = load_version(version).config_classes
    untyped = {
        (name, field)
        for name, cls in classes.items()
        for field, spec in cls.fields.items()
        if "any" in spec.types
    }
    assert untyped <= set(STILL_ANY), sorted(untyped - set(STILL_ANY))


@pytest.mark.parametrize("version", REGENERATED)
def test_enums_come_from_the_python_enum_classes(version: str) -> None:
    mode = load_version(version).config_classes["CompilationConfig"].fields["cudagraph_mode"]
    assert mode.enum is not None and mode.enum_ignore_case
    assert {"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"} <= set(mode.enum)
    assert (
        messages(version, ["--compilation-config", '{"cudagraph_mode": "full_and_piecewise"}'])
        == []
    )
    (msg,) = messages(version, ["--compilation-config", '{"cudagraph_mode": "FULL_AND_PIECES"}'])
    assert 'key "cudagraph_mode" accepts' in msg and '"FULL_AND_PIECEWISE"' in msg


@pytest.mark.parametrize("version", REGENERATED)
def test_speculative_config_keys_and_value_types(version: str) -> None:
    spec = load_version(version).flags["--speculative-config"].json_value
    assert spec is not None and spec.config == "SpeculativeConfig"
    ok = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
    assert messages(version, ["--speculative-config", ok]) == []
    (msg,) = messages(
        version, ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2.5}']
    )
    assert 'key "num_speculative_tokens" expects int' in msg
    (msg,) = messages(
        version, ["--speculative-config", '{"method": "ngramm", "num_speculative_tokens": 2}']
    )
    assert 'key "method" accepts' in msg


def test_unknown_speculative_key_is_refused_where_the_class_forbids_extra_keys() -> None:
    (msg,) = messages(
        "0.33.0", ["--speculative-config", '{"method": "ngram", "num_spec_tokens": 2}']
    )
    assert 'unknown key "num_spec_tokens"' in msg and "num_speculative_tokens" in msg
    # 0.11's SpeculativeConfig drops unknown keys (pydantic extra=ignore), as vLLM does.
    assert (
        messages(
            "0.11.0",
            [
                "--speculative-config",
                '{"method": "ngram", "num_spec_tokens": 2, "num_speculative_tokens": 2}',
            ],
        )
        == []
    )
