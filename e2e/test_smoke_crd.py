"""The generated CRD on a real API server: it installs, accepts every example, and rejects each
bad-input case of the foundation issue with the field path (OpenAPI schema and CEL rules)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import EXAMPLES
from e2e.kube import ApiError, Kube, load_manifests

GROUP_VERSION = "serving.vllm-operator.dev/v1alpha1"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
INVALID_EXAMPLE_FILES = sorted((EXAMPLES / "invalid").glob("*.yaml"))

VALID: dict[str, Any] = {
    "apiVersion": GROUP_VERSION,
    "kind": "VLLMService",
    "metadata": {"name": "chat"},
    "spec": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "vllm": {"version": "0.11.0"},
        "workload": {"p99ContextTokens": 8192, "concurrency": 16},
        "placement": {"gpuTypes": ["NVIDIA-L4"]},
    },
}


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


def rejected(kube: Kube, obj: dict[str, Any], namespace: str) -> ApiError:
    body = copy.deepcopy(obj)
    body["metadata"]["namespace"] = namespace
    with pytest.raises(ApiError) as info:
        kube.create(body)
    return info.value


def names_path(err: ApiError, path: str) -> bool:
    """A 422 names the field in its structured causes; a 400 (strict decoding) in its message."""
    if err.status == 422:
        return path in err.fields
    return path in err.message


def test_crd_is_established_with_names_and_columns(crd: dict[str, Any], kube: Kube) -> None:
    names = crd["status"]["acceptedNames"]
    assert names["kind"] == "VLLMService"
    assert "vllms" in names.get("shortNames", [])
    assert names.get("categories")
    served = kube.resource(GROUP_VERSION, "VLLMService")
    assert served.namespaced and served.plural == "vllmservices"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    assert version["subresources"].get("status") == {}
    columns = [c["name"] for c in version.get("additionalPrinterColumns", [])]
    assert "Age" in columns and len(columns) >= 4


def test_examples_exist() -> None:
    assert len(EXAMPLE_FILES) >= 4, f"expected at least four examples in {EXAMPLES}"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_example_is_accepted_and_stored_as_written(
    crd: dict[str, Any], kube: Kube, namespace: str, path: Path
) -> None:
    for obj in load_manifests(path):
        obj["metadata"]["namespace"] = namespace
        kube.create(obj, dry_run=True)
        created = kube.create(obj)
        # No defaults in the schema: the stored spec is exactly what the user (or GitOps) wrote.
        assert created["spec"] == obj["spec"]
        assert created["metadata"]["generation"] == 1


@pytest.mark.parametrize("path", INVALID_EXAMPLE_FILES, ids=[p.stem for p in INVALID_EXAMPLE_FILES])
def test_invalid_example_is_rejected(
    crd: dict[str, Any], kube: Kube, namespace: str, path: Path
) -> None:
    for obj in load_manifests(path):
        err = rejected(kube, obj, namespace)
        assert err.status == 422, err


@pytest.mark.parametrize(
    "field",
    ["spec.model", "spec.model.name", "spec.vllm.version", "spec.workload.p99ContextTokens"],
)
def test_missing_required_field_is_rejected_with_its_path(
    crd: dict[str, Any], kube: Kube, namespace: str, field: str
) -> None:
    err = rejected(kube, mutate(field, delete=True), namespace)
    assert err.status == 422
    assert names_path(err, field), err
    assert "Required value" in err.message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("spec.workload.p99ContextTokens", 0),
        ("spec.workload.p99ContextTokens", -8192),
        ("spec.workload.concurrency", 0),
        ("spec.workload.maxContextTokens", -1),
        ("spec.replicas", -1),
        ("spec.placement.maxGPUsPerReplica", 0),
    ],
)
def test_zero_or_negative_size_is_rejected_with_its_path(
    crd: dict[str, Any], kube: Kube, namespace: str, field: str, value: int
) -> None:
    err = rejected(kube, mutate(field, value), namespace)
    assert err.status == 422
    assert names_path(err, field), err
    assert "greater than or equal to" in err.message


def test_p99_above_max_context_is_rejected_by_cel(
    crd: dict[str, Any], kube: Kube, namespace: str
) -> None:
    err = rejected(kube, mutate("spec.workload.maxContextTokens", 4096), namespace)
    assert err.status == 422
    assert names_path(err, "spec.workload.p99ContextTokens"), err
    assert "maxContextTokens" in err.message


def test_p99_equal_to_max_context_is_accepted(
    crd: dict[str, Any], kube: Kube, namespace: str
) -> None:
    obj = mutate("spec.workload.maxContextTokens", 8192)
    obj["metadata"]["namespace"] = namespace
    kube.create(obj, dry_run=True)


def test_unknown_field_is_rejected_under_strict_field_validation(
    crd: dict[str, Any], kube: Kube, namespace: str
) -> None:
    err = rejected(kube, mutate("spec.workload.maxNumSeqs", 12), namespace)
    assert err.status in (400, 422)
    assert names_path(err, "spec.workload.maxNumSeqs"), err
    assert "unknown field" in err.message


@pytest.mark.parametrize("version", ["latest", "0.11", "v0.11.0", ">=0.9", "0.11.0-rc1", ""])
def test_malformed_version_is_rejected_with_its_path(
    crd: dict[str, Any], kube: Kube, namespace: str, version: str
) -> None:
    err = rejected(kube, mutate("spec.vllm.version", version), namespace)
    assert err.status == 422
    assert names_path(err, "spec.vllm.version"), err


def test_empty_gpu_types_is_rejected_with_its_path(
    crd: dict[str, Any], kube: Kube, namespace: str
) -> None:
    err = rejected(kube, mutate("spec.placement.gpuTypes", []), namespace)
    assert err.status == 422
    assert names_path(err, "spec.placement.gpuTypes"), err


def test_status_subresource_ignores_spec_changes(
    crd: dict[str, Any], kube: Kube, namespace: str
) -> None:
    obj = copy.deepcopy(VALID)
    obj["metadata"]["namespace"] = namespace
    created = kube.create(obj)
    path = kube.path_of(created)
    status = {"observedGeneration": 1, "conditions": []}
    updated = kube.patch(path, {"status": status, "spec": {"replicas": 5}}, subresource="status")
    assert updated["status"]["observedGeneration"] == 1
    assert "replicas" not in updated["spec"]
    assert updated["metadata"]["generation"] == 1
