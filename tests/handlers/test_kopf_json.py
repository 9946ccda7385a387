"""Kopf's watch streams decode with kube/jsontext.py once installed (#32)."""

import asyncio
import inspect
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kopf._cogs.clients import api

from vllm_operator.handlers import kopf_json
from vllm_operator.kube import jsontext


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "json", json)  # restored after the test
    defaults = aiohttp.ClientResponse.json.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "loads", json.loads)
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


def test_kopfs_lists_decode_with_aiohttps_default_decoder() -> None:
    """What makes the list part effective: Kopf's `get` (every list) takes aiohttp's default."""
    source = inspect.getsource(api.get)
    assert "response.json()" in source


@pytest.mark.usefixtures("installed")
def test_installed_aiohttp_responses_decode_with_jsontext() -> None:
    """A real aiohttp round trip: a list answer decodes to the same object, through jsontext."""
    defaults = aiohttp.ClientResponse.json.__kwdefaults__
    assert defaults is not None and defaults["loads"] is jsontext.loads
    listing = {"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": [{"n": 2**70}]}
    assert asyncio.run(_round_trip(listing)) == listing


async def _round_trip(listing: dict[str, Any]) -> object:

    async def handler(_: web.Request) -> web.Response:
        return web.json_response(listing)

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/") as response,
        ):
            return await response.json()
    finally:
        await runner.cleanup()


def test_a_kopf_without_json_in_its_api_module_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(api, "json")
    assert not kopf_json.install()
    assert not hasattr(api, "json")
