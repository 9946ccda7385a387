"""Kopf's watch streams decode with kube/jsontext.py once installed (#32)."""

import inspect
import json

import pytest
from kopf._cogs.clients import api

from vllm_operator.handlers import kopf_json
from vllm_operator.kube import jsontext


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "json", json)  # restored after the test
    assert kopf_json.install()
    assert kopf_json.install()  # twice is once


def test_kopfs_watch_stream_decodes_each_line_with_its_modules_json_loads() -> None:
    """What makes the install effective: if a Kopf upgrade decodes otherwise, this fails (the
    install would then change nothing)."""
    source = inspect.getsource(api.stream)
    assert "json.loads(" in source


@pytest.mark.usefixtures("installed")
def test_installed_kopfs_api_module_decodes_with_jsontext_and_keeps_the_rest() -> None:
    fast = getattr(api, "json")  # noqa: B009 (not in the module's stubs)
    assert fast.loads is jsontext.loads
    assert fast.dumps is json.dumps
    assert fast.JSONDecodeError is json.JSONDecodeError
    assert fast.loads(b'{"type":"ADDED","object":{"n":1}}') == {
        "type": "ADDED",
        "object": {"n": 1},
    }
    assert json.loads is not jsontext.loads  # the standard module is left as it is


def test_a_kopf_without_json_in_its_api_module_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(api, "json")
    assert not kopf_json.install()
    assert not hasattr(api, "json")
