"""Bad input is rejected with the field path, the value and what is accepted."""

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from vllm_operator.api import VLLMService
from vllm_operator.api.errors import Problem, problems_from

VALID: dict[str, Any] = {
    "apiVersion": "serving.vllm-operator.dev/v1alpha1",
    "kind": "VLLMService",
    "metadata": {"name": "chat", "namespace": "llm"},
    "spec": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "vllm": {"version": "0.11.0"},
        "workload": {"p99ContextTokens": 8192, "concurrency": 16},
        "placement": {"gpuTypes": ["NVIDIA-L4"]},
    },
}


def problems(obj: dict[str, Any]) -> list[Problem]:
    with pytest.raises(ValidationError) as info:
        VLLMService.model_validate(obj)
    return problems_from(info.value, VLLMService)


def mutate(path: str, value: Any = None, *, delete: bool = False) -> dict[str, Any]:
    obj = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = obj
    for key in parents:
        node = node[key]
    if delete:
        del node[last]
    else:
        node[last] = value
    return obj


def test_valid_object_parses_with_defaults() -> None:
    svc = VLLMService.model_validate(VALID)
    assert svc.spec.replicas == 1
    assert svc.spec.safety.max_gpu_memory_utilization == 0.90
    assert svc.spec.workload.prefix_caching == "auto"
    assert svc.spec.model.source.hugging_face is not None
    assert svc.name == "chat" and svc.namespace == "llm"


@pytest.mark.parametrize(
    ("path", "missing"),
    [
        ("spec.model", "spec.model"),
        ("spec.model.name", "spec.model.name"),
        ("spec.vllm.version", "spec.vllm.version"),
        ("spec.workload.p99ContextTokens", "spec.workload.p99ContextTokens"),
    ],
)
def test_missing_required_field_names_its_path(path: str, missing: str) -> None:
    found = problems(mutate(path, delete=True))
    assert [p.path for p in found] == [missing]
    assert found[0].accepted == "a value is required"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.workload.p99ContextTokens", 0),
        ("spec.workload.p99ContextTokens", -8192),
        ("spec.workload.concurrency", 0),
        ("spec.workload.maxContextTokens", -1),
        ("spec.replicas", -1),
        ("spec.placement.maxGPUsPerReplica", 0),
    ],
)
def test_zero_or_negative_sizes_are_rejected(path: str, value: int) -> None:
    found = problems(mutate(path, value))
    assert [p.path for p in found] == [path]
    assert found[0].value == value
    assert found[0].accepted.startswith("a number >=")


def test_p99_above_max_context_names_p99_field() -> None:
    obj = mutate("spec.workload.maxContextTokens", 4096)
    found = problems(obj)
    assert [p.path for p in found] == ["spec.workload.p99ContextTokens"]
    assert "maxContextTokens (4096)" in found[0].message
    assert found[0].value == 8192


def test_p99_equal_to_max_context_is_accepted() -> None:
    VLLMService.model_validate(mutate("spec.workload.maxContextTokens", 8192))


def test_unknown_field_is_rejected_and_known_fields_are_listed() -> None:
    found = problems(mutate("spec.workload.maxNumSeqs", 12))
    assert [p.path for p in found] == ["spec.workload.maxNumSeqs"]
    assert "p99ContextTokens" in found[0].accepted
    assert "concurrency" in found[0].accepted


@pytest.mark.parametrize("version", ["latest", "0.11", "v0.11.0", ">=0.9", "0.11.0-rc1", ""])
def test_malformed_version_is_rejected(version: str) -> None:
    found = problems(mutate("spec.vllm.version", version))
    assert [p.path for p in found] == ["spec.vllm.version"]
    assert found[0].value == version


@pytest.mark.parametrize("version", ["0.11.0", "0.6.6.post1", "0.10.1.1", "0.33.0"])
def test_exact_versions_are_accepted(version: str) -> None:
    VLLMService.model_validate(mutate("spec.vllm.version", version))


def test_empty_gpu_types_is_rejected() -> None:
    found = problems(mutate("spec.placement.gpuTypes", []))
    assert [p.path for p in found] == ["spec.placement.gpuTypes"]
    assert "at least 1" in found[0].accepted


def test_both_model_sources_are_rejected() -> None:
    obj = mutate("spec.model.source", {"huggingFace": {}, "pvc": {"claimName": "models"}})
    found = problems(obj)
    assert [p.path for p in found] == ["spec.model.source"]
    assert "exactly one" in found[0].message


def test_bad_enum_lists_accepted_values() -> None:
    found = problems(mutate("spec.workload.prefixCaching", "sometimes"))
    assert found[0].path == "spec.workload.prefixCaching"
    assert "'auto'" in found[0].accepted and "'disabled'" in found[0].accepted


def test_extra_args_keys_must_be_long_flags() -> None:
    found = problems(mutate("spec.vllm.extraArgs", {"max-num-seqs": "4"}))
    assert found[0].path.startswith("spec.vllm.extraArgs")


def test_problem_text_is_one_line_with_path_value_and_accepted() -> None:
    (problem,) = problems(mutate("spec.workload.concurrency", -3))
    text = str(problem)
    assert "\n" not in text
    assert text.startswith("spec.workload.concurrency: ")
    assert "(got -3)" in text and "accepted: a number >= 1" in text
