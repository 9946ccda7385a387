"""Kopf builds a diff-base essence only for the kinds with change-detecting handlers (#32).

The converge profile at 300 services put 18 % of the operator's CPU in Kopf deep-copying every
watched pod's and Deployment's body for an essence nothing read (handlers/kopf_essence.py)."""

import copy
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
import yaml

from vllm_operator.api.service import GROUP, PLURAL
from vllm_operator.handlers import registrations
from vllm_operator.handlers.kopf_essence import SelectiveDiffBaseStorage

REPO = Path(__file__).resolve().parents[2]

# Kopf's decorators type the handlers as its callback protocols; they are plain functions.
handlers: Any = registrations


def storage() -> SelectiveDiffBaseStorage:
    return SelectiveDiffBaseStorage(
        changing=registrations.CHANGING_KINDS, prefix=GROUP, key="last-handled-configuration"
    )


def kopfs_own() -> kopf.AnnotationsDiffBaseStorage:
    return kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")


def service_body() -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((REPO / "examples" / "llama-3.1-8b-l4.yaml").read_text())
    body["metadata"].update(
        namespace="ml",
        uid="u1",
        resourceVersion="7",
        labels={"team": "a"},
        annotations={
            "note": "kept",
            f"{GROUP}/last-handled-configuration": '{"spec": {}}',
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
        managedFields=[{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
    )
    body["status"] = {"observedGeneration": 1, "pools": [{"gpuType": "L4"}]}
    return body


def pod_body() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "svc-0-l4-abc",
            "namespace": "ml",
            "labels": {"app": "x"},
            "managedFields": [{"manager": "kube-scheduler", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def counting_copies(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every object `copy.deepcopy` is called on from now on (Kopf's storages call it)."""
    copies: list[object] = []
    original = copy.deepcopy

    def counting(obj: Any, memo: Any = None) -> Any:
        copies.append(obj)
        return original(obj, memo)

    monkeypatch.setattr(copy, "deepcopy", counting)
    return copies


def test_a_service_keeps_kopfs_own_essence_without_copying_its_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = service_body()
    body = kopf.Body(cast(Any, raw))
    expected = kopfs_own().build(body=body)
    copies = counting_copies(monkeypatch)
    essence = storage().build(body=body)
    assert essence == expected
    assert copies  # the spec, labels and annotations are copied, as Kopf does
    assert not any(
        c is raw["status"] or c is raw["metadata"]["managedFields"] or c is raw for c in copies
    )
    assert essence["spec"] == service_body()["spec"]
    assert essence["metadata"] == {"labels": {"team": "a"}, "annotations": {"note": "kept"}}


def test_a_kind_without_change_detecting_handlers_is_neither_copied_nor_diffed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = kopf.Body(cast(Any, pod_body()))
    copies = counting_copies(monkeypatch)
    assert kopfs_own().build(body=body)  # Kopf's own storage copies the pod (seen here)
    assert copies
    copies.clear()
    assert storage().build(body=body) == {}
    assert copies == []


def test_a_body_without_kind_keeps_kopfs_essence() -> None:
    bare = pod_body()
    del bare["kind"]
    body = kopf.Body(cast(Any, bare))
    assert storage().build(body=body) == kopfs_own().build(body=body)


def test_only_the_named_kinds_have_change_detecting_handlers_daemons_or_timers() -> None:
    """A create/update/resume/delete handler, daemon or timer added for another resource would
    read an empty essence: this fails until that kind joins `CHANGING_KINDS`."""
    registry: Any = kopf.get_default_registry()
    selectors = {
        (h.selector.group, h.selector.any_name or h.selector.plural)
        for handlers_of in (registry._changing, registry._spawning)
        for h in handlers_of.get_all_handlers()
    }
    assert selectors == {(GROUP, PLURAL)}
    assert {api for api, _ in registrations.CHANGING_KINDS} == {f"{GROUP}/v1alpha1"}


def test_the_operator_settings_use_the_selective_storage() -> None:
    settings = kopf.OperatorSettings()
    handlers.configure(settings=settings, memo=kopf.Memo())
    diffbase = settings.persistence.diffbase_storage
    assert isinstance(diffbase, SelectiveDiffBaseStorage)
    assert diffbase.changing == registrations.CHANGING_KINDS
