"""Kopf keeps no diff-base: the operator has no change-detecting handler (#32).

Before #32 the VLLMService's create/update/resume handlers made Kopf PATCH a
last-handled-configuration annotation on every create and update, and build an essence (two
copies of the body) on every event; the converge profile at 300 services put 18 % of the
operator's CPU in those copies (handlers/kopf_essence.py)."""

import copy
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
import yaml

from vllm_operator.api.service import GROUP
from vllm_operator.handlers import registrations
from vllm_operator.handlers.kopf_essence import NoDiffBaseStorage

REPO = Path(__file__).resolve().parents[2]

# Kopf's decorators type the handlers as its callback protocols; they are plain functions.
handlers: Any = registrations


def service_body() -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((REPO / "examples" / "llama-3.1-8b-l4.yaml").read_text())
    body["metadata"].update(
        namespace="ml",
        uid="u1",
        resourceVersion="7",
        labels={"team": "a"},
        annotations={
            "note": "kept",
            f"{GROUP}/last-handled-configuration": '{"spec": {}}',  # an older operator's
        },
        managedFields=[{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
    )
    body["status"] = {"observedGeneration": 1, "pools": [{"gpuType": "L4"}]}
    return body


def counting_copies(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every object `copy.deepcopy` is called on from now on (Kopf's storages call it)."""
    copies: list[object] = []
    original = copy.deepcopy

    def counting(obj: Any, memo: Any = None) -> Any:
        copies.append(obj)
        return original(obj, memo)

    monkeypatch.setattr(copy, "deepcopy", counting)
    return copies


def test_nothing_is_built_copied_fetched_or_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    body = kopf.Body(cast(Any, service_body()))
    kopfs_own = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")
    assert kopfs_own.fetch(body=body) == {"spec": {}}  # what Kopf would diff against
    copies = counting_copies(monkeypatch)
    storage = NoDiffBaseStorage()
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=cast(Any, {"spec": {"model": "x"}}))
    assert not patch
    assert copies == []


def test_no_change_detecting_handlers_daemons_or_timers_are_registered() -> None:
    """A create/update/resume/delete handler, daemon or timer would see no change (no diff-base)
    and make Kopf persist progress: this fails when one is added."""
    registry: Any = kopf.get_default_registry()
    assert list(registry._changing.get_all_handlers()) == []
    assert list(registry._spawning.get_all_handlers()) == []


def test_the_operator_settings_persist_nothing() -> None:
    settings = kopf.OperatorSettings()
    handlers.configure(settings=settings, memo=kopf.Memo())
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBaseStorage)
    # Only to remove the finalizer older versions added (Kopf drops one no handler requires).
    assert settings.persistence.finalizer == f"{GROUP}/kopf-finalizer"
